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
        // A topic that lists only its worst partitions lists the MIRRORING ones of highest lag:
        // which ones they are changes with the lag, and is progress too (a MIRRORING partition
        // with an error is listed before them, and stays a change of state).
        if s.partitions_omitted > 0 {
            s.partitions
                .retain(|p| p.state != PartitionState::Mirroring || p.last_error.is_some());
        }
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

/// Objects without a status to write for this long no longer count towards the progress
/// budget's share.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// When an object's status was last written and last offered.
#[derive(Debug, Clone, Copy)]
struct Seen {
    written: Option<Instant>,
    offered: Instant,
}

/// Writes statuses, remembering when each object was last written.
pub struct StatusWriter {
    limits: StatusLimits,
    last: Mutex<HashMap<String, Seen>>,
    writes: TokenBucket,
    progress_writes: TokenBucket,
}

impl StatusWriter {
    /// A writer within `limits`.
    pub fn new(limits: StatusLimits) -> StatusWriter {
        let now = Instant::now();
        let burst = |rate: f64| (rate * 2.0).ceil() as u32;
        // The progress budget holds a whole interval's worth: the topics of a mirror are
        // reconciled close together, and a burst smaller than their number would leave the same
        // ones out every time.
        let progress_burst = burst(limits.progress_writes_per_second).max(
            (limits.progress_writes_per_second * limits.progress_interval.as_secs_f64()).ceil()
                as u32,
        );
        StatusWriter {
            limits,
            last: Mutex::new(HashMap::new()),
            writes: TokenBucket::new(
                limits.writes_per_second,
                burst(limits.writes_per_second),
                now,
            ),
            progress_writes: TokenBucket::new(
                limits.progress_writes_per_second,
                progress_burst,
                now,
            ),
        }
    }

    /// How long until `key` may be written again after `interval` (zero: now).
    pub fn wait(&self, key: &str, interval: Duration, now: Instant) -> Duration {
        let map = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(key).and_then(|s| s.written) {
            Some(t) => interval.saturating_sub(now.saturating_duration_since(t)),
            None => Duration::ZERO,
        }
    }

    /// Least time between two progress writes of one object: the configured interval, or — when
    /// more objects are written than the progress budget allows at that interval — its share of
    /// the budget, so that each object's turn comes (one written leaves the others its tokens
    /// for that long) instead of the first ones reconciled taking every token.
    pub fn progress_interval(&self) -> Duration {
        let objects = self.last.lock().unwrap_or_else(|p| p.into_inner()).len();
        let share = Duration::from_secs_f64(
            objects as f64 / self.limits.progress_writes_per_second.max(1.0 / 3600.0),
        );
        self.limits.progress_interval.max(share)
    }

    /// Notes that `key` has a status to write at `now`.
    fn offered(&self, key: &str, now: Instant) {
        let mut map = self.last.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key.to_string())
            .and_modify(|s| s.offered = now)
            .or_insert(Seen {
                written: None,
                offered: now,
            });
    }

    /// Whether a change of progress alone of `key` may be written at `now` (takes the tokens).
    fn admit_progress(&self, key: &str, now: Instant) -> bool {
        self.offered(key, now);
        self.wait(key, self.progress_interval(), now).is_zero()
            && self.progress_writes.try_take(now).is_ok()
            && self.writes.try_take(now).is_ok()
    }

    /// Whether a write of `key` may go now, or why not: [`Written::Deferred`] for a change of
    /// state (after the global limit's wait, if any, is slept), [`Written::Postponed`] for one
    /// of progress alone.
    async fn admit(&self, key: &str, progress_only: bool) -> Option<Written> {
        let now = Instant::now();
        if progress_only {
            return (!self.admit_progress(key, now)).then_some(Written::Postponed);
        }
        self.offered(key, now);
        let wait = self.wait(key, self.limits.interval, now);
        if !wait.is_zero() {
            return Some(Written::Deferred(wait));
        }
        let wait = self.writes.reserve(now);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        None
    }

    fn written(&self, key: &str, now: Instant) {
        let mut map = self.last.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| now.saturating_duration_since(s.offered) < FORGET_AFTER);
        map.insert(
            key.to_string(),
            Seen {
                written: Some(now),
                offered: now,
            },
        );
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
        self.written(&key, Instant::now());
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
        let t0 = Instant::now();
        assert_eq!(w.wait("MirrorTopic/ns/a", minute, t0), Duration::ZERO);
        w.written("MirrorTopic/ns/a", t0);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            w.wait("MirrorTopic/ns/a", minute, t1),
            Duration::from_secs(59)
        );
        assert_eq!(w.wait("MirrorTopic/ns/b", minute, t1), Duration::ZERO);
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

        // A topic listing only its worst partitions: which MIRRORING ones have the highest lag
        // is progress; a FAILED one listed, or a MIRRORING one with an error, is not.
        let listed = |partitions: Vec<(i32, PartitionState)>| MirrorTopicStatus {
            partitions_omitted: 3,
            ..topic(
                partitions
                    .into_iter()
                    .map(|(n, state)| PartitionStatus {
                        partition: n,
                        ..partition(state, 10, i64::from(n))
                    })
                    .collect(),
            )
        };
        let by_lag = listed(vec![(1, Mirroring), (2, Mirroring)]);
        let other_lag = listed(vec![(2, Mirroring), (3, Mirroring)]);
        assert!(
            progress_only(&by_lag, &other_lag),
            "other partitions by lag"
        );
        let one_failed = listed(vec![(1, Failed), (2, Mirroring)]);
        assert!(!progress_only(&by_lag, &one_failed), "a FAILED partition");
        let mut erring = other_lag.clone();
        erring.partitions[0].last_error = Some("lag unknown".into());
        assert!(!progress_only(&other_lag, &erring), "an error");

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
            progress_interval: Duration::from_secs(1),
            writes_per_second: 1000.0,
            progress_writes_per_second: 0.5,
        });
        // The progress budget holds one write (burst: twice the rate, rounded up).
        assert_eq!(w.admit("MirrorTopic/ns/a", true).await, None);
        w.written("MirrorTopic/ns/a", Instant::now());
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

    /// Every object of a mirror offers progress at the same moments, in the same order, every
    /// 10 s (they are reconciled together): each gets its turn, and the budget holds.
    #[test]
    fn every_object_gets_its_turn_and_the_budget_holds() {
        for objects in [9usize, 30, 500] {
            let w = StatusWriter::new(StatusLimits::default());
            let t0 = Instant::now();
            let keys: Vec<String> = (0..objects)
                .map(|i| format!("MirrorTopic/ns/t{i}"))
                .collect();
            let mut written = vec![0u32; objects];
            let rounds = 60u32;
            for round in 0..rounds {
                let now = t0 + Duration::from_secs(10 * u64::from(round));
                for (i, key) in keys.iter().enumerate() {
                    if w.admit_progress(key, now) {
                        w.written(key, now);
                        written[i] += 1;
                    }
                }
            }
            let seconds = 10.0 * f64::from(rounds);
            let total: u32 = written.iter().sum();
            let budget = 2.0 * seconds + 20.0;
            assert!(
                f64::from(total) <= budget,
                "{objects} objects: {total} progress writes in {seconds} s, budget {budget}"
            );
            let least = *written.iter().min().unwrap();
            // Each object's interval is its share of the budget (at least 10 s), and its turn
            // comes at the first round after that.
            let share = (objects as f64 / 2.0).max(10.0);
            let expected = rounds / (share / 10.0).ceil() as u32;
            assert!(
                least + 1 >= expected,
                "{objects} objects: one was written {least} times in {seconds} s, each should \
                 be about {expected} times: {written:?}"
            );
        }
    }
}
