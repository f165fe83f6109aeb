//! Connections to the Kafka clusters of each mirror: Secrets resolved through the API, one
//! cached admin client per distinct configuration (a rotated Secret yields a new client).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kmirror_crds::v1alpha1::KafkaConnection;
use kmirror_state::ClusterSettings;
use kube::Api;
use kube::runtime::reflector::Store;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;

use crate::connection::{CREDENTIALS_LABEL, SecretValues, UnlabelledSecret, operator_settings};
use crate::error::{Cause, KafkaError};
use crate::pods::fnv1a;
use crate::watch_cache::cached;

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
    /// Why the cluster cannot be a destination (`Some(None)`: it can), once its brokers said.
    destination_verdict: OnceLock<Option<String>>,
    /// When its brokers were last asked for that without an answer.
    destination_unjudged_at: Mutex<Option<std::time::Instant>>,
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
            destination_verdict: OnceLock::new(),
            destination_unjudged_at: Mutex::new(None),
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

    /// Why the cluster cannot be a destination, if it cannot (a Kafka release before 3.0),
    /// asking its brokers until they answer once (at most once a minute while they do not:
    /// reconciles must not wait on a cluster that is down).
    pub async fn refused_as_destination(&self) -> Option<String> {
        if let Some(verdict) = self.destination_verdict.get() {
            return verdict.clone();
        }
        {
            let mut at = self
                .destination_unjudged_at
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if at.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
                return None;
            }
            *at = Some(std::time::Instant::now());
        }
        match crate::destination_release::judge(&self.config).await {
            Ok(verdict) => self.destination_verdict.get_or_init(|| verdict).clone(),
            Err(crate::destination_release::Unjudged::NoAnswer) => None,
        }
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

/// Cache of connected clusters, by configuration (a hash that covers the secret values). Each
/// connection of a mirror (namespace, side, spec) points at the configuration it resolved to
/// last: a rotated or deleted credential evicts the client built with the old one.
#[derive(Default)]
pub struct Clusters {
    cache: Mutex<HashMap<u64, Arc<Cluster>>>,
    slots: Mutex<HashMap<String, u64>>,
    /// The opted-in Secrets as the `ClusterMirror` controller's watch saw them.
    secrets: OnceLock<Store<Secret>>,
}

/// Whether a Secret opts in to be read by kmirror ([`CREDENTIALS_LABEL`]` = "true"`).
pub fn opted_in(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CREDENTIALS_LABEL))
        .is_some_and(|v| v == "true")
}

/// Reads the values of every Secret key a connection refers to (`field`: where the connection
/// sits); also returns a hash of the Secrets' resource versions (a change means fetcher pods
/// must be replaced). A Secret without the opt-in label is an error: none of its values are
/// used, so nothing is sent to the cluster.
pub async fn secret_values(
    client: &kube::Client,
    secrets: &OnceLock<Store<Secret>>,
    namespace: &str,
    conn: &KafkaConnection,
    field: &str,
) -> Result<(SecretValues, String), Cause> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut values = SecretValues::new();
    let mut versions = String::new();
    for (_, r) in conn.secret_refs() {
        if values.contains_key(&(r.name.clone(), r.key.clone())) {
            continue;
        }
        // From the watch's cache (it holds opted-in Secrets only); a Secret it does not hold is
        // read, which tells a missing one from one without the label.
        let secret = match cached(secrets, namespace, &r.name) {
            Some(s) => Some(s),
            None => api.get_opt(&r.name).await?,
        };
        let Some(secret) = secret else {
            continue;
        };
        if !opted_in(&secret) {
            return Err(UnlabelledSecret {
                role: field.to_string(),
                secret: r.name.clone(),
            }
            .into());
        }
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
    /// Points `slot` at configuration `key` (None: at nothing) and drops the client of the
    /// configuration it pointed at before, unless another slot still uses it.
    fn evict(&self, slot: &str, key: Option<u64>) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let previous = match key {
            Some(k) => slots.insert(slot.to_string(), k),
            None => slots.remove(slot),
        };
        if let Some(old) = previous
            && Some(old) != key
            && !slots.values().any(|k| *k == old)
        {
            self.cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&old);
            tracing::info!(slot = %slot.lines().take(2).collect::<Vec<_>>().join("/"), "dropped the client of replaced credentials");
        }
    }

    /// Reads Secrets from `store` from now on (set once).
    pub fn share_secret_store(&self, store: Store<Secret>) {
        let _ = self.secrets.set(store);
    }

    /// How many clients are cached.
    pub fn len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no client is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cluster a connection points at, with credentials resolved from Secrets in
    /// `namespace`. `field` names the connection in errors (e.g. `spec.source`).
    pub async fn get(
        &self,
        client: &kube::Client,
        namespace: &str,
        conn: &KafkaConnection,
        side: &'static str,
    ) -> Result<(Arc<Cluster>, String), Cause> {
        let slot = format!(
            "{namespace}\n{side}\n{}",
            serde_json::to_string(conn).unwrap_or_default()
        );
        let field = format!("spec.{side}");
        let resolved = match secret_values(client, &self.secrets, namespace, conn, &field).await {
            Ok((values, version)) => operator_settings(conn, &field, &values)
                .map(|settings| (settings, version))
                .map_err(Cause::from),
            Err(e) => Err(e),
        };
        let (settings, secrets_version) = match resolved {
            Ok(r) => r,
            Err(e) => {
                // The credentials are gone or unusable: so is every client built with them.
                if matches!(e, Cause::MissingSecret(_) | Cause::UnlabelledSecret(_)) {
                    self.evict(&slot, None);
                }
                return Err(e);
            }
        };
        let key = settings_key(side, &settings);
        self.evict(&slot, Some(key));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(key: u64) -> Arc<Cluster> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1");
        let admin = config.create().unwrap();
        Arc::new(Cluster::new(config, admin, "source", key))
    }

    #[test]
    fn a_rotated_or_deleted_credential_evicts_the_old_client() {
        let clusters = Clusters::default();
        let put = |key: u64| {
            clusters.cache.lock().unwrap().insert(key, cluster(key));
        };
        put(1);
        clusters.evict("ns/a\nsource\n{}", Some(1));
        put(1);
        clusters.evict("ns/b\nsource\n{}", Some(1));
        assert_eq!(clusters.len(), 1, "two mirrors share one configuration");
        // Mirror a's Secret rotates: b still uses the old configuration.
        put(2);
        clusters.evict("ns/a\nsource\n{}", Some(2));
        assert_eq!(clusters.len(), 2);
        // b's rotates too: the old client goes.
        clusters.evict("ns/b\nsource\n{}", Some(2));
        assert_eq!(clusters.len(), 1);
        assert!(clusters.cache.lock().unwrap().contains_key(&2));
        // Deleted: nothing left once no slot points at it.
        clusters.evict("ns/a\nsource\n{}", None);
        assert_eq!(clusters.len(), 1);
        clusters.evict("ns/b\nsource\n{}", None);
        assert!(clusters.is_empty());
    }
}
