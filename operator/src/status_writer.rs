//! The one way a status reaches the API server: skipped when nothing changed, a server-side
//! apply with a timeout, counted in the metrics. A change of state (anything but the progress
//! of mirroring partitions: log ends, last mirrored offset, lag) is written at most once per
//! object and `interval`, under a global limit it may wait for; a change of progress alone at
//! most once per object and `progress_interval`, and only while the global progress budget has
//! a token — otherwise it is postponed to a later reconcile, so that a mirror of hundreds of
//! topics under traffic costs the API server a bounded number of writes per second.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{
    ClusterMirror, ClusterMirrorStatus, MirrorTopic, MirrorTopicStatus, PartitionState,
};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::metrics::{KindLabels, Metrics};
use crate::rate_limit::TokenBucket;

/// Field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "kmirror-operator";

/// How long one status write may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A resource whose status the operator owns.
pub trait HasStatus:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
{
    /// The status type.
    type Status: Serialize + PartialEq + Default + Clone;
    /// The status as last read.
    fn current_status(&self) -> Option<&Self::Status>;
    /// `status` without the progress of mirroring partitions: two statuses equal here differ
    /// only in progress.
    fn without_progress(status: &Self::Status) -> Self::Status;
}

impl HasStatus for MirrorTopic {
    type Status = MirrorTopicStatus;
    fn current_status(&self) -> Option<&MirrorTopicStatus> {
        self.status.as_ref()
    }
    fn without_progress(status: &MirrorTopicStatus) -> MirrorTopicStatus {
        let mut s = status.clone();
        s.max_lag = None;
        // Only a MIRRORING partition's offsets are progress: a stopped one's last mirrored
        // offset is where a failover ended, written as soon as it changes.
        for p in s
            .partitions
            .iter_mut()
            .filter(|p| p.state == PartitionState::Mirroring)
        {
            p.source_log_end_offset = None;
            p.destination_log_end_offset = None;
            p.last_mirrored_offset = None;
            p.lag = None;
            p.lag_seconds = None;
        }
        s
    }
}

impl HasStatus for ClusterMirror {
    type Status = ClusterMirrorStatus;
    fn current_status(&self) -> Option<&ClusterMirrorStatus> {
        self.status.as_ref()
    }
    fn without_progress(status: &ClusterMirrorStatus) -> ClusterMirrorStatus {
        ClusterMirrorStatus {
            max_lag: None,
            ..status.clone()
        }
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The status was already this.
    Unchanged,
    /// Applied.
    Applied,
    /// A change of state too soon after the last write of this object: try again after this
    /// long.
    Deferred(Duration),
    /// A change of progress alone, not written now (the object's progress interval or the
    /// global progress budget): a later reconcile writes it, none needs to come sooner.
    Postponed,
}

impl Written {
    /// How long to wait before the status may be written (zero unless deferred).
    pub fn wait(self) -> Duration {
        match self {
            Written::Deferred(d) => d,
            _ => Duration::ZERO,
        }
    }
}

/// How often and how fast statuses are written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StatusLimits {
    /// Least time between two writes of one object.
    pub interval: Duration,
    /// Least time between two writes of one object that change only progress.
    pub progress_interval: Duration,
    /// Status writes per second over all objects (burst: twice as many).
    pub writes_per_second: f64,
    /// Writes per second over all objects that change only progress (burst: twice as many).
    pub progress_writes_per_second: f64,
}

impl Default for StatusLimits {
    fn default() -> StatusLimits {
        StatusLimits {
            interval: Duration::from_secs(1),
            progress_interval: Duration::from_secs(10),
            writes_per_second: 20.0,
            progress_writes_per_second: 2.0,
        }
    }
}

fn bucket(rate: f64) -> TokenBucket {
    TokenBucket::new(rate, (rate * 2.0).ceil() as u32, Instant::now())
}

/// Writes statuses, remembering when each object was last written.
pub struct StatusWriter {
    limits: StatusLimits,
    last: Mutex<HashMap<String, Instant>>,
    writes: TokenBucket,
    progress_writes: TokenBucket,
}

impl StatusWriter {
    /// A writer within `limits`.
    pub fn new(limits: StatusLimits) -> StatusWriter {
        StatusWriter {
            limits,
            last: Mutex::new(HashMap::new()),
            writes: bucket(limits.writes_per_second),
            progress_writes: bucket(limits.progress_writes_per_second),
        }
    }

    /// How long until `key` may be written again after `interval` (zero: now).
    pub fn wait(&self, key: &str, interval: Duration) -> Duration {
        let map = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(key) {
            Some(t) => interval.saturating_sub(t.elapsed()),
            None => Duration::ZERO,
        }
    }

    /// Whether a write of `key` may go now, or why not: [`Written::Deferred`] for a change of
    /// state (after the global limit's wait, if any, is slept), [`Written::Postponed`] for one
    /// of progress alone.
    async fn admit(&self, key: &str, progress_only: bool) -> Option<Written> {
        if progress_only {
            let now = Instant::now();
            let due = self.wait(key, self.limits.progress_interval).is_zero();
            if !due
                || self.progress_writes.try_take(now).is_err()
                || self.writes.try_take(now).is_err()
            {
                return Some(Written::Postponed);
            }
            return None;
        }
        let wait = self.wait(key, self.limits.interval);
        if !wait.is_zero() {
            return Some(Written::Deferred(wait));
        }
        let wait = self.writes.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        None
    }

    fn written(&self, key: &str) {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), Instant::now());
    }

    /// Applies `status` to `object` unless it is unchanged or not admitted now.
    pub async fn write<K: HasStatus>(
        &self,
        client: &kube::Client,
        metrics: &Metrics,
        object: &K,
        status: K::Status,
    ) -> Result<Written> {
        let old = object.current_status().cloned().unwrap_or_default();
        if status == old {
            return Ok(Written::Unchanged);
        }
        let kind = K::kind(&()).to_string();
        let ns = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let key = format!("{kind}/{ns}/{name}");
        let progress_only = K::without_progress(&status) == K::without_progress(&old);
        if let Some(not_now) = self.admit(&key, progress_only).await {
            if not_now == Written::Postponed {
                metrics
                    .status_postponed
                    .get_or_create(&KindLabels { kind })
                    .inc();
            }
            return Ok(not_now);
        }
        let api: Api<K> = Api::namespaced(client.clone(), &ns);
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": kind,
            "status": status,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match tokio::time::timeout(
            WRITE_TIMEOUT,
            api.patch_status(&name, &params, &Patch::Apply(&patch)),
        )
        .await
        {
            Err(_) => {
                return Err(Error::StatusTimeout {
                    object: key,
                    timeout: WRITE_TIMEOUT,
                });
            }
            Ok(Err(source)) => {
                return Err(Error::WriteStatus {
                    object: key,
                    source,
                });
            }
            Ok(Ok(_)) => {}
        }
        self.written(&key);
        metrics
            .status_writes
            .get_or_create(&KindLabels { kind })
            .inc();
        Ok(Written::Applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_crds::v1alpha1::PartitionStatus;

    #[test]
    fn one_write_per_interval_and_object() {
        let w = StatusWriter::new(StatusLimits::default());
        let minute = Duration::from_secs(60);
        assert_eq!(w.wait("MirrorTopic/ns/a", minute), Duration::ZERO);
        w.written("MirrorTopic/ns/a");
        assert!(w.wait("MirrorTopic/ns/a", minute) > Duration::from_secs(59));
        assert_eq!(w.wait("MirrorTopic/ns/b", minute), Duration::ZERO);
        assert_eq!(
            Written::Deferred(Duration::from_secs(3)).wait(),
            Duration::from_secs(3)
        );
        assert_eq!(Written::Applied.wait(), Duration::ZERO);
        assert_eq!(Written::Postponed.wait(), Duration::ZERO);
    }

    fn partition(state: PartitionState, last: i64, lag: i64) -> PartitionStatus {
        PartitionStatus {
            partition: 0,
            state,
            source_log_end_offset: Some(last + 1 + lag),
            destination_log_end_offset: Some(last + 1),
            last_mirrored_offset: Some(last),
            lag: Some(lag),
            lag_seconds: Some(lag as f64 / 10.0),
            ..Default::default()
        }
    }

    fn topic(partitions: Vec<PartitionStatus>) -> MirrorTopicStatus {
        MirrorTopicStatus {
            max_lag: partitions.iter().filter_map(|p| p.lag).max(),
            partitions,
            ..Default::default()
        }
    }

    fn progress_only(a: &MirrorTopicStatus, b: &MirrorTopicStatus) -> bool {
        MirrorTopic::without_progress(a) == MirrorTopic::without_progress(b)
    }

    #[test]
    fn only_a_mirroring_partitions_offsets_and_lag_are_progress() {
        use PartitionState::*;
        let moving = topic(vec![partition(Mirroring, 10, 5)]);
        let moved = topic(vec![partition(Mirroring, 90, 0)]);
        assert!(
            progress_only(&moving, &moved),
            "offsets and lag of MIRRORING"
        );
        let stopped = topic(vec![partition(Stopped, 10, 0)]);
        let stopped_later = topic(vec![partition(Stopped, 12, 0)]);
        assert!(
            !progress_only(&stopped, &stopped_later),
            "where a stopped partition ended is a fact, written at once"
        );
        assert!(!progress_only(&moving, &stopped), "a change of state");
        let mut failing = moved.clone();
        failing.partitions[0].last_error = Some("broker down".into());
        assert!(!progress_only(&moved, &failing), "an error");
        let mut more = moved.clone();
        more.partitions.push(partition(Mirroring, 1, 1));
        assert!(!progress_only(&moved, &more), "a new partition");

        let cm = |lag, mirroring| ClusterMirrorStatus {
            max_lag: Some(lag),
            partitions: kmirror_crds::v1alpha1::PartitionCounts {
                mirroring,
                ..Default::default()
            },
            ..Default::default()
        };
        let without = ClusterMirror::without_progress;
        assert_eq!(without(&cm(5, 3)), without(&cm(0, 3)));
        assert_ne!(without(&cm(5, 3)), without(&cm(5, 2)));
    }

    #[tokio::test]
    async fn progress_waits_for_its_interval_and_budget_a_change_of_state_does_not() {
        let w = StatusWriter::new(StatusLimits {
            interval: Duration::from_millis(1),
            progress_interval: Duration::from_secs(60),
            writes_per_second: 1000.0,
            progress_writes_per_second: 0.5,
        });
        // The progress budget holds one write (burst: twice the rate, rounded up).
        assert_eq!(w.admit("MirrorTopic/ns/a", true).await, None);
        w.written("MirrorTopic/ns/a");
        assert_eq!(
            w.admit("MirrorTopic/ns/a", true).await,
            Some(Written::Postponed),
            "within the object's progress interval"
        );
        assert_eq!(
            w.admit("MirrorTopic/ns/b", true).await,
            Some(Written::Postponed),
            "no progress budget left"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(w.admit("MirrorTopic/ns/a", false).await, None, "state");
        assert_eq!(w.admit("MirrorTopic/ns/b", false).await, None, "state");
    }
}
