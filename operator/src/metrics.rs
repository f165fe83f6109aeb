//! Prometheus metrics of the operator.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of controller series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `clustermirror` or `mirrortopic`.
    pub controller: String,
}

/// Labels of error series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Controller.
    pub controller: String,
    /// Error kind.
    pub error: String,
}

/// Labels of per-state series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// Source topic.
    pub topic: String,
    /// Lifecycle state.
    pub state: String,
}

/// Labels of per-partition series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
}

/// Labels of a FAILED partition's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailedLabels {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Why it stopped: a stop reason name (`ForeignWrite`, `SourceDiverged`, `DataLoss`, …).
    pub reason: String,
}

/// Labels of state-topic series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateTopicLabels {
    /// The state topic's name.
    pub state_topic: String,
}

/// Labels of per-group series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// Consumer group.
    pub group: String,
}

/// Labels of sync series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// `topics`, `topicConfigs`, `partitions`, `consumerGroups` or `acls`.
    pub part: String,
    /// `ok` or `error`.
    pub result: String,
}

/// Labels of status-write series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Resource kind.
    pub kind: String,
}

/// Labels of `MirrorTopic` lookups: `cache` (the controller's reflector) or `list` (the API).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    /// Where the topics came from.
    pub source: String,
}

/// The operator's metrics.
pub struct Metrics {
    registry: Registry,
    /// Reconciles run.
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconciles that failed.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile durations.
    pub duration: Family<ControllerLabels, Histogram>,
    /// Partitions per state.
    pub partitions: Family<StateLabels, Gauge>,
    /// Lag per partition, records.
    pub lag: Family<PartitionLabels, Gauge>,
    /// Lag per partition, seconds.
    pub lag_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
    /// Status writes.
    pub status_writes: Family<KindLabels, Counter>,
    /// Status changes of progress alone left for a later reconcile (interval or budget).
    pub status_postponed: Family<KindLabels, Counter>,
    /// How long each metadata-sync part took.
    pub sync_duration: Family<SyncLabels, Histogram>,
    /// Metadata sync runs.
    pub sync_runs: Family<SyncLabels, Counter>,
    /// Lifecycle transitions by target state.
    pub transitions: Family<StateLabels, Counter>,
    /// 1 while this replica leads (or runs without election).
    pub leader: Gauge,
    /// 1 while a partition is FAILED, by stop reason; removed when it no longer is.
    pub partition_failed: Family<FailedLabels, Gauge>,
    /// 1 while the operator can read (and write) a state topic, else 0.
    pub state_topic_available: Family<StateTopicLabels, Gauge>,
    /// Consumer groups whose offsets could not be synced, per sync run.
    pub group_sync_failures: Family<GroupLabels, Counter>,
    /// `MirrorTopic` lookups of reconciles, by where they were answered.
    pub topic_lookups: Family<LookupLabels, Counter>,
    /// The FAILED series set per (mirror, topic), to remove them when they no longer apply.
    failed_shown: Mutex<HashMap<(String, String), Vec<FailedLabels>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kmirror_operator");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.005, 2.0, 14))
        });
        let partitions = Family::<StateLabels, Gauge>::default();
        let lag = Family::<PartitionLabels, Gauge>::default();
        let lag_seconds = Family::<PartitionLabels, Gauge<f64, AtomicU64>>::default();
        let status_writes = Family::<KindLabels, Counter>::default();
        let status_postponed = Family::<KindLabels, Counter>::default();
        let sync_duration = Family::<SyncLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.01, 2.0, 14))
        });
        let sync_runs = Family::<SyncLabels, Counter>::default();
        let transitions = Family::<StateLabels, Counter>::default();
        let leader = Gauge::default();
        let partition_failed = Family::<FailedLabels, Gauge>::default();
        let state_topic_available = Family::<StateTopicLabels, Gauge>::default();
        let group_sync_failures = Family::<GroupLabels, Counter>::default();
        let topic_lookups = Family::<LookupLabels, Counter>::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by error kind",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile durations",
            duration.clone(),
        );
        registry.register(
            "partitions",
            "Partitions per lifecycle state",
            partitions.clone(),
        );
        registry.register(
            "partition_lag_records",
            "Records the destination is behind",
            lag.clone(),
        );
        registry.register(
            "partition_lag_seconds",
            "Age of the newest mirrored record while behind",
            lag_seconds.clone(),
        );
        registry.register("status_writes", "Status writes", status_writes.clone());
        registry.register(
            "sync_duration_seconds",
            "How long each metadata-sync part took (a consumer-group round: part=consumerGroups)",
            sync_duration.clone(),
        );
        registry.register(
            "status_postponed",
            "Status changes of progress alone (offsets, lag) left for a later reconcile by the \
             per-object progress interval or the global progress budget",
            status_postponed.clone(),
        );
        registry.register(
            "topic_lookups",
            "MirrorTopic lookups of reconciles by source: cache (no API request) or list",
            topic_lookups.clone(),
        );
        registry.register(
            "sync_runs",
            "Metadata sync runs by part and result",
            sync_runs.clone(),
        );
        registry.register(
            "state_transitions",
            "Partition lifecycle transitions",
            transitions.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica is the leader",
            leader.clone(),
        );
        registry.register(
            "partition_failed",
            "1 while a partition is FAILED, with the reason it stopped",
            partition_failed.clone(),
        );
        registry.register(
            "state_topic_available",
            "1 while the operator can read and write the state topic",
            state_topic_available.clone(),
        );
        registry.register(
            "group_sync_failures",
            "Consumer groups whose offsets could not be synced, per sync run",
            group_sync_failures.clone(),
        );
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            partitions,
            lag,
            lag_seconds,
            status_writes,
            status_postponed,
            sync_duration,
            sync_runs,
            transitions,
            leader,
            partition_failed,
            state_topic_available,
            group_sync_failures,
            topic_lookups,
            failed_shown: Mutex::default(),
        }
    }
}

impl Metrics {
    /// Sets the FAILED series of the partitions of one topic: `failed` holds each FAILED
    /// partition with its reason; every other series of the topic is removed, so a retried
    /// partition, or one failed for another reason now, leaves no stale 1 behind.
    pub fn set_failed_partitions(&self, mirror: &str, topic: &str, failed: &[(i32, &str)]) {
        let wanted: Vec<FailedLabels> = failed
            .iter()
            .map(|(partition, reason)| FailedLabels {
                mirror: mirror.to_string(),
                topic: topic.to_string(),
                partition: *partition,
                reason: reason.to_string(),
            })
            .collect();
        let mut shown = self.failed_shown.lock().unwrap_or_else(|p| p.into_inner());
        let key = (mirror.to_string(), topic.to_string());
        for labels in shown.get(&key).into_iter().flatten() {
            if !wanted.contains(labels) {
                self.partition_failed.remove(labels);
            }
        }
        for labels in &wanted {
            self.partition_failed.get_or_create(labels).set(1);
        }
        if wanted.is_empty() {
            shown.remove(&key);
        } else {
            shown.insert(key, wanted);
        }
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed_lines(m: &Metrics) -> Vec<String> {
        let mut lines: Vec<String> = m
            .encode()
            .lines()
            .filter(|l| l.starts_with("kmirror_operator_partition_failed{"))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn failed_partitions_are_shown_by_reason_and_removed_when_no_longer_failed() {
        let m = Metrics::default();
        m.set_failed_partitions("ns/dr", "t", &[(0, "ForeignWrite"), (2, "DataLoss")]);
        m.set_failed_partitions("ns/dr", "u", &[(0, "SourceDiverged")]);
        assert_eq!(
            failed_lines(&m),
            [
                r#"kmirror_operator_partition_failed{mirror="ns/dr",topic="t",partition="0",reason="ForeignWrite"} 1"#,
                r#"kmirror_operator_partition_failed{mirror="ns/dr",topic="t",partition="2",reason="DataLoss"} 1"#,
                r#"kmirror_operator_partition_failed{mirror="ns/dr",topic="u",partition="0",reason="SourceDiverged"} 1"#,
            ]
        );
        // Partition 0 retried, partition 2 failed again for another reason: no stale series.
        m.set_failed_partitions("ns/dr", "t", &[(2, "RecordRefused")]);
        assert_eq!(
            failed_lines(&m),
            [
                r#"kmirror_operator_partition_failed{mirror="ns/dr",topic="t",partition="2",reason="RecordRefused"} 1"#,
                r#"kmirror_operator_partition_failed{mirror="ns/dr",topic="u",partition="0",reason="SourceDiverged"} 1"#,
            ]
        );
        m.set_failed_partitions("ns/dr", "t", &[]);
        m.set_failed_partitions("ns/dr", "u", &[]);
        assert!(failed_lines(&m).is_empty(), "{:?}", failed_lines(&m));
    }
}
