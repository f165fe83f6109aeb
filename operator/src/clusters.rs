//! Connections to the Kafka clusters of each mirror: Secrets resolved through the API, one
//! cached admin client per distinct configuration (a rotated Secret yields a new client).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kmirror_crds::v1alpha1::KafkaConnection;
use kmirror_state::ClusterSettings;
use kube::Api;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;

use crate::connection::{SecretValues, operator_settings};
use crate::error::{Cause, KafkaError};
use crate::pods::fnv1a;

/// A connected cluster.
pub struct Cluster {
    /// Client configuration (contains secrets: never log it).
    pub config: ClientConfig,
    /// Admin client.
    pub admin: AdminClient<DefaultClientContext>,
    /// `source` or `destination`.
    pub side: &'static str,
    /// Identifies the configuration (hash).
    pub key: u64,
    /// The latest cluster ID answer (None: no answer) and when it came, for checks that run at
    /// every reconcile.
    recent_id: Mutex<Option<(Option<String>, std::time::Instant)>>,
    /// When a describe last went unanswered (cleared by an answer).
    unanswered_at: Mutex<Option<std::time::Instant>>,
}

impl Cluster {
    /// A cluster reached with `config` through `admin`; `key` identifies the configuration.
    pub fn new(
        config: ClientConfig,
        admin: AdminClient<DefaultClientContext>,
        side: &'static str,
        key: u64,
    ) -> Cluster {
        Cluster {
            config,
            admin,
            side,
            key,
            recent_id: Mutex::new(None),
            unanswered_at: Mutex::new(None),
        }
    }

    /// Records whether the cluster answered a describe.
    pub fn note_answer(&self, answered: bool) {
        *self.unanswered_at.lock().unwrap_or_else(|p| p.into_inner()) =
            (!answered).then(std::time::Instant::now);
    }

    /// Whether the cluster left a describe unanswered within the last `within`: reconciles
    /// then do not wait for it again (a failover with the source down must not pay a timeout
    /// per step and per partition).
    pub fn unanswered_within(&self, within: Duration) -> bool {
        self.unanswered_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < within)
    }

    /// A Kafka error on this cluster.
    pub fn error(&self, message: impl std::fmt::Display) -> KafkaError {
        KafkaError {
            cluster: self.side,
            message: message.to_string(),
        }
    }

    /// The cluster ID as answered within the last `max_age` (None: it did not answer), asking
    /// again (within `timeout`) when the last answer is older.
    pub async fn recent_cluster_id(
        self: &Arc<Self>,
        max_age: Duration,
        timeout: Duration,
    ) -> Option<String> {
        let cached = self
            .recent_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some((id, at)) = cached
            && at.elapsed() < max_age
        {
            return id;
        }
        let id = self.cluster_id(timeout).await.ok();
        *self.recent_id.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((id.clone(), std::time::Instant::now()));
        id
    }

    /// The cluster ID, or an error when the cluster does not answer within `timeout`.
    pub async fn cluster_id(self: &Arc<Self>, timeout: Duration) -> Result<String, KafkaError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.admin.inner().fetch_cluster_id(timeout))
            .await
            .map_err(|e| self.error(e))?
            .ok_or_else(|| self.error(format!("no answer from the brokers within {timeout:?} (unreachable or wrong credentials?)")))
    }
}

/// Cache of connected clusters.
#[derive(Default)]
pub struct Clusters {
    cache: Mutex<HashMap<u64, Arc<Cluster>>>,
}

/// Reads the values of every Secret key a connection refers to; also returns a hash of the
/// Secrets' resource versions (a change means fetcher pods must be replaced).
pub async fn secret_values(
    client: &kube::Client,
    namespace: &str,
    conn: &KafkaConnection,
) -> Result<(SecretValues, String), kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut values = SecretValues::new();
    let mut versions = String::new();
    for (_, r) in conn.secret_refs() {
        if values.contains_key(&(r.name.clone(), r.key.clone())) {
            continue;
        }
        let Some(secret) = api.get_opt(&r.name).await? else {
            continue;
        };
        versions.push_str(&format!(
            "{}={};",
            r.name,
            secret.metadata.resource_version.clone().unwrap_or_default()
        ));
        let data = secret.data.unwrap_or_default();
        if let Some(v) = data.get(&r.key) {
            values.insert((r.name.clone(), r.key.clone()), v.0.clone());
        }
    }
    Ok((values, format!("{:016x}", fnv1a(versions.as_bytes()))))
}

fn settings_key(side: &str, settings: &ClusterSettings) -> u64 {
    let mut text = format!("{side}\n{}\n", settings.bootstrap_servers);
    for (k, v) in &settings.properties {
        text.push_str(&format!("{k}={v}\n"));
    }
    fnv1a(text.as_bytes())
}

impl Clusters {
    /// The cluster a connection points at, with credentials resolved from Secrets in
    /// `namespace`. `field` names the connection in errors (e.g. `spec.source`).
    pub async fn get(
        &self,
        client: &kube::Client,
        namespace: &str,
        conn: &KafkaConnection,
        side: &'static str,
    ) -> Result<(Arc<Cluster>, String), Cause> {
        let (values, secrets_version) = secret_values(client, namespace, conn).await?;
        let settings = operator_settings(conn, &format!("spec.{side}"), &values)?;
        let key = settings_key(side, &settings);
        if let Some(c) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok((c.clone(), secrets_version));
        }
        let mut config = settings.client_config().map_err(|e| KafkaError {
            cluster: side,
            message: e.to_string(),
        })?;
        config.set("client.id", format!("kmirror-operator-{side}"));
        let admin: AdminClient<DefaultClientContext> = config.create().map_err(|e| KafkaError {
            cluster: side,
            message: e.to_string(),
        })?;
        let cluster = Arc::new(Cluster::new(config, admin, side, key));
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, cluster.clone());
        Ok((cluster, secrets_version))
    }
}
