//! What every reconcile shares: the API client, cluster and state caches, metrics, events, and
//! the status write limiter.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::clusters::Clusters;
use crate::metrics::Metrics;
use crate::state_cache::StateCaches;

/// Field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "kmirror-operator";

/// Operator settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Image of fetcher pods when a mirror does not set one.
    pub fetcher_image: String,
    /// Least time between two status writes of one object.
    pub status_interval: Duration,
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
    /// Settings.
    pub settings: Settings,
    /// When each mirror's metadata sync last ran.
    pub sync_clock: crate::cluster_mirror::SyncClock,
    recorder: Recorder,
    last_status_write: Mutex<HashMap<String, Instant>>,
}

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
            metrics,
            settings,
            sync_clock: Default::default(),
            last_status_write: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes an event about `object` (failures are logged, never fatal).
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(crate::status::truncate(&note, 1000)),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not publish an event");
        }
    }

    /// How long until the status of `key` may be written again (zero: now), per the interval.
    pub fn status_wait(&self, key: &str) -> Duration {
        let map = self
            .last_status_write
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match map.get(key) {
            Some(t) => self.settings.status_interval.saturating_sub(t.elapsed()),
            None => Duration::ZERO,
        }
    }

    /// Records a status write of `key` now.
    pub fn status_written(&self, key: &str, kind: &str) {
        self.last_status_write
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), Instant::now());
        self.metrics
            .status_writes
            .get_or_create(&crate::metrics::KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }
}
