//! What every reconcile shares: the API client, cluster and state caches, metrics, events, the
//! status writer and the metadata-sync clock.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::api::{Api, ListParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use crate::clusters::Clusters;
use crate::metrics::Metrics;
use crate::state_cache::StateCaches;
pub use crate::status_writer::FIELD_MANAGER;
use crate::status_writer::{HasStatus, StatusWriter, Written};
use crate::watch_cache::cached;

/// Operator settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Image of fetcher pods when a mirror does not set one.
    pub fetcher_image: String,
    /// Which images and service accounts fetcher pods may use.
    pub fetcher_policy: crate::policy::FetcherPolicy,
    /// Most fetcher pods one ClusterMirror may run.
    pub max_fetcher_pods_per_mirror: usize,
    /// How often and how fast statuses are written.
    pub status_limits: crate::status_writer::StatusLimits,
    /// Most partitions a `MirrorTopic`'s status lists (the worst ones; counts cover all).
    pub status_max_partitions: usize,
    /// How fetcher pods another operator made are replaced (`--fetcher-max-unavailable`,
    /// `--fetcher-rollout-timeout-seconds`).
    pub rollout: crate::rollout::Limits,
}

impl Settings {
    /// The hash of this operator's side of fetcher pods (on every pod it makes).
    pub fn operator_template(&self) -> String {
        crate::rollout::operator_template(&self.fetcher_image)
    }
}

/// When each mirror's metadata sync last ran (in this process).
#[derive(Default)]
pub struct SyncClock(Mutex<HashMap<String, Instant>>);

impl SyncClock {
    /// Whether the sync of `key` is due.
    pub fn due(&self, key: &str, interval: Duration) -> bool {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).is_none_or(|t| t.elapsed() >= interval)
    }

    /// Records that the sync of `key` ran now.
    pub fn ran(&self, key: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), Instant::now());
    }

    /// Time until the sync of `key` is due.
    pub fn remaining(&self, key: &str, interval: Duration) -> Duration {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key)
            .map_or(Duration::ZERO, |t| interval.saturating_sub(t.elapsed()))
    }
}

/// An event to publish about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Warning (true) or normal.
    pub warning: bool,
    /// Machine-readable reason (`PartitionStopped`, `Divergence`, …).
    pub reason: String,
    /// What the operator was doing (`Transition`, `Failback`, …).
    pub action: String,
    /// What a person reads.
    pub text: String,
}

impl Note {
    /// A normal event.
    pub fn normal(reason: &str, action: &str, text: impl Into<String>) -> Note {
        Note {
            warning: false,
            reason: reason.into(),
            action: action.into(),
            text: text.into(),
        }
    }

    /// A warning event.
    pub fn warning(reason: &str, action: &str, text: impl Into<String>) -> Note {
        Note {
            warning: true,
            ..Note::normal(reason, action, text)
        }
    }
}

/// Shared reconcile context.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Kafka cluster connections.
    pub clusters: Clusters,
    /// State topics in memory.
    pub states: StateCaches,
    /// Metrics.
    pub metrics: Metrics,
    /// Write-lease grantors (one per lease topic).
    pub leases: crate::leases::Grantors,
    /// Settings.
    pub settings: Settings,
    /// When each mirror's metadata sync last ran.
    pub sync_clock: SyncClock,
    /// Source topics found missing, until a second look confirms their deletion.
    pub source_sightings: crate::source_gone::Sightings,
    /// Failed reconciles in a row, per object, for their retry delay.
    pub error_backoff: crate::error_backoff::ErrorBackoff,
    /// What the topics of pooled mirrors ask of their fetcher pools.
    pub pool: crate::pool::demand::Demands,
    /// Topic configs the destinations do not get, per mirror and topic, for the status.
    pub config_notes: std::sync::Arc<crate::config_fit::Notes>,
    /// Each mirror's rollout of fetcher pods another operator made.
    pub rollout: crate::rollout::Board,
    /// The `MirrorTopic` controller's cache, once the controllers run.
    topic_store: OnceLock<Store<MirrorTopic>>,
    /// The `ClusterMirror`s as the `MirrorTopic` controller's watch saw them.
    mirror_store: OnceLock<Store<ClusterMirror>>,
    status: StatusWriter,
    recorder: Recorder,
}

fn lookup(source: &str) -> crate::metrics::LookupLabels {
    crate::metrics::LookupLabels {
        source: source.to_string(),
    }
}

/// How long a reconcile waits for the `MirrorTopic` cache's initial list before it lists itself.
const TOPIC_STORE_WAIT: Duration = Duration::from_secs(10);

impl Context {
    /// A context for `client`.
    pub fn new(client: kube::Client, settings: Settings, metrics: Metrics) -> Context {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            clusters: Clusters::default(),
            states: StateCaches::default(),
            leases: Default::default(),
            metrics,
            status: StatusWriter::new(settings.status_limits),
            settings,
            sync_clock: Default::default(),
            source_sightings: Default::default(),
            error_backoff: Default::default(),
            pool: Default::default(),
            config_notes: Default::default(),
            rollout: Default::default(),
            topic_store: OnceLock::new(),
            mirror_store: OnceLock::new(),
        }
    }

    /// Publishes the events of a mirror's rollout on the mirror.
    pub async fn publish_rollout(
        &self,
        mirror: &ClusterMirror,
        notices: &[crate::rollout::Notice],
    ) {
        for n in notices {
            let note = if n.warning {
                Note::warning(n.reason, "Rollout", n.text.clone())
            } else {
                Note::normal(n.reason, "Rollout", n.text.clone())
            };
            let pod = n.pod.as_ref().map(|name| ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.clone()),
                namespace: mirror.namespace(),
                ..Default::default()
            });
            self.publish_about(mirror, &note, pod).await;
        }
    }

    /// Shares the `MirrorTopic` controller's cache with every reconcile (set once).
    pub fn share_topic_store(&self, store: Store<MirrorTopic>) {
        let _ = self.topic_store.set(store);
    }

    /// Shares a cache of the `ClusterMirror`s with every reconcile (set once).
    pub fn share_mirror_store(&self, store: Store<ClusterMirror>) {
        let _ = self.mirror_store.set(store);
    }

    /// The `ClusterMirror` `name` of `namespace`: from the cache when it holds it (no API
    /// request), else read (before the controllers run, or one the cache has not seen yet).
    pub async fn mirror(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ClusterMirror>, kube::Error> {
        if let Some(cm) = cached(&self.mirror_store, namespace, name) {
            return Ok(Some(cm));
        }
        Api::<ClusterMirror>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    /// How many `MirrorTopic`s the cache holds (0 before the controllers run).
    pub fn topic_count(&self) -> usize {
        self.topic_store.get().map_or(0, |s| s.state().len())
    }

    /// The `ClusterMirror`s of `namespace` (all: `None`) the cache holds (none before the
    /// controllers run).
    pub fn mirrors_in(&self, namespace: Option<&str>) -> Vec<ClusterMirror> {
        self.mirror_store
            .get()
            .map(|store| {
                store
                    .state()
                    .iter()
                    .filter(|cm| namespace.is_none() || cm.namespace().as_deref() == namespace)
                    .map(|cm| cm.as_ref().clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `MirrorTopic`s of `namespace` that `keep` selects. From the controller's cache once
    /// it holds the initial list — no API request; per-topic reconciles that listed every
    /// topic of the namespace made the API traffic grow with the square of the topics — else
    /// listed (before the controllers run, or while the cache's first list is late).
    pub async fn mirror_topics(
        &self,
        namespace: &str,
        keep: impl Fn(&MirrorTopic) -> bool,
    ) -> crate::error::Result<Vec<MirrorTopic>> {
        if let Some(store) = self.topic_store.get()
            && matches!(
                tokio::time::timeout(TOPIC_STORE_WAIT, store.wait_until_ready()).await,
                Ok(Ok(()))
            )
        {
            self.metrics
                .topic_lookups
                .get_or_create(&lookup("cache"))
                .inc();
            return Ok(store
                .state()
                .iter()
                .filter(|t| t.namespace().as_deref() == Some(namespace) && keep(t))
                .map(|t| t.as_ref().clone())
                .collect());
        }
        self.metrics
            .topic_lookups
            .get_or_create(&lookup("list"))
            .inc();
        let api: Api<MirrorTopic> = Api::namespaced(self.client.clone(), namespace);
        Ok(api
            .list(&ListParams::default())
            .await
            .map_err(crate::error::Error::ListMirrorTopics)?
            .items
            .into_iter()
            .filter(|t| keep(t))
            .collect())
    }

    /// Publishes an event about `object` (failures are logged, never fatal).
    pub async fn publish<K: Resource<DynamicType = ()>>(&self, object: &K, note: &Note) {
        self.publish_about(object, note, None).await;
    }

    /// Publishes an event about `object` and a `related` one (events of different related
    /// objects are counted apart).
    pub async fn publish_about<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        note: &Note,
        related: Option<ObjectReference>,
    ) {
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.clone(),
            note: Some(crate::status::truncate(&note.text, 1000)),
            action: note.action.clone(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(error = %e, reason = %note.reason, "could not publish an event");
        }
    }

    /// Writes the status of `object` through the one status writer; returns how long to wait
    /// when the write was deferred.
    pub async fn write_status<K: HasStatus>(
        &self,
        object: &K,
        status: K::Status,
    ) -> crate::error::Result<Duration> {
        self.status
            .write(&self.client, &self.metrics, object, status)
            .await
            .map(Written::wait)
    }
}
