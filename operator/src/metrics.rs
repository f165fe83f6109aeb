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
    /// Namespace of the `ClusterMirror`.
    pub namespace: String,
    /// Name of the `ClusterMirror`.
    pub name: String,
    /// Source topic.
    pub topic: String,
    /// Lifecycle state.
    pub state: String,
}

/// Labels of per-partition series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// Namespace of the `ClusterMirror`.
    pub namespace: String,
    /// Name of the `ClusterMirror`.
    pub name: String,
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
}

/// Labels of a FAILED partition's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailedLabels {
    /// Namespace of the `ClusterMirror`.
    pub namespace: String,
    /// Name of the `ClusterMirror`.
    pub name: String,
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
    /// Namespace of the `ClusterMirror`.
    pub namespace: String,
    /// Name of the `ClusterMirror`.
    pub name: String,
    /// Consumer group.
    pub group: String,
}

/// Labels of sync series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// Namespace of the `ClusterMirror`.
    pub namespace: String,
    /// Name of the `ClusterMirror`.
    pub name: String,
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

impl StateLabels {
    /// The labels of `topic` of the mirror `key` (`namespace/name`) in `state`.
    pub fn new(key: &str, topic: &str, state: &str) -> StateLabels {
        let (namespace, name) = split_key(key);
        StateLabels {
            namespace,
            name,
            topic: topic.to_string(),
            state: state.to_string(),
        }
    }
}

impl PartitionLabels {
    /// The labels of a partition of `topic` of the mirror `key` (`namespace/name`).
    pub fn new(key: &str, topic: &str, partition: i32) -> PartitionLabels {
        let (namespace, name) = split_key(key);
        PartitionLabels {
            namespace,
            name,
            topic: topic.to_string(),
            partition,
        }
    }
}

/// Labels of the series that name one mirror alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MirrorLabels {
    /// Namespace of the `ClusterMirror`.
    pub namespace: String,
    /// Name of the `ClusterMirror`.
    pub name: String,
}

impl MirrorLabels {
    /// The labels of the mirror `namespace/name` (the key the operator keeps mirrors by).
    pub fn of(key: &str) -> MirrorLabels {
        let (namespace, name) = split_key(key);
        MirrorLabels { namespace, name }
    }
}

/// `namespace/name` as its two labels (a key without `/` is a name in no namespace).
pub fn split_key(key: &str) -> (String, String) {
    match key.split_once('/') {
        Some((namespace, name)) => (namespace.to_string(), name.to_string()),
        None => (String::new(), key.to_string()),
    }
}

/// Labels of `kmirror_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfoLabels {
    /// `operator` or `fetcher`.
    pub component: String,
    /// Release version.
    pub version: String,
    /// Git commit the build was made from, or `unknown`.
    pub git_sha: String,
    /// Compiler version.
    pub rustc: String,
}

impl BuildInfoLabels {
    /// This build's labels, for `component`.
    pub fn of(component: &str) -> BuildInfoLabels {
        use kmirror_state::build_info;
        BuildInfoLabels {
            component: component.to_string(),
            version: build_info::VERSION.to_string(),
            git_sha: build_info::git_sha().to_string(),
            rustc: build_info::RUSTC.to_string(),
        }
    }
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
    /// 1, labelled with the build (`kmirror_build_info`).
    pub build_info: Family<BuildInfoLabels, Gauge>,
    /// When a periodic consumer-group offset sync pass of a mirror last completed without an
    /// error, Unix seconds; absent for mirrors that do not sync groups.
    pub group_sync_last_success: Family<MirrorLabels, Gauge<f64, AtomicU64>>,
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
        let mut root = Registry::with_prefix("kmirror");
        let build_info = Family::<BuildInfoLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildInfoLabels::of("operator"))
            .set(1);
        root.register(
            "build_info",
            "1, labelled with the version, Git commit and compiler of the build",
            build_info.clone(),
        );
        let registry = root.sub_registry_with_prefix("operator");
        let group_sync_last_success = Family::<MirrorLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "group_sync_last_success_timestamp_seconds",
            "When a consumer-group offset sync pass of the mirror last completed without an error",
            group_sync_last_success.clone(),
        );
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
            registry: root,
            build_info,
            group_sync_last_success,
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
        let (namespace, name) = split_key(mirror);
        let wanted: Vec<FailedLabels> = failed
            .iter()
            .map(|(partition, reason)| FailedLabels {
                namespace: namespace.clone(),
                name: name.clone(),
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

    /// Records that a periodic consumer-group sync pass of `mirror` completed without an error
    /// at `unix_seconds`.
    pub fn group_sync_succeeded(&self, mirror: &str, unix_seconds: f64) {
        self.group_sync_last_success
            .get_or_create(&MirrorLabels::of(mirror))
            .set(unix_seconds);
    }

    /// The last successful group sync recorded for `mirror` since this process started.
    pub fn group_sync_last_success(&self, mirror: &str) -> Option<f64> {
        self.group_sync_last_success
            .get(&MirrorLabels::of(mirror))
            .map(|g| g.get())
    }

    /// Removes the series of `mirror` that only a mirror syncing consumer groups has (it stopped
    /// syncing them, or is deleted).
    pub fn forget_group_sync(&self, mirror: &str) {
        self.group_sync_last_success
            .remove(&MirrorLabels::of(mirror));
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
                r#"kmirror_operator_partition_failed{namespace="ns",name="dr",topic="t",partition="0",reason="ForeignWrite"} 1"#,
                r#"kmirror_operator_partition_failed{namespace="ns",name="dr",topic="t",partition="2",reason="DataLoss"} 1"#,
                r#"kmirror_operator_partition_failed{namespace="ns",name="dr",topic="u",partition="0",reason="SourceDiverged"} 1"#,
            ]
        );
        // Partition 0 retried, partition 2 failed again for another reason: no stale series.
        m.set_failed_partitions("ns/dr", "t", &[(2, "RecordRefused")]);
        assert_eq!(
            failed_lines(&m),
            [
                r#"kmirror_operator_partition_failed{namespace="ns",name="dr",topic="t",partition="2",reason="RecordRefused"} 1"#,
                r#"kmirror_operator_partition_failed{namespace="ns",name="dr",topic="u",partition="0",reason="SourceDiverged"} 1"#,
            ]
        );
        m.set_failed_partitions("ns/dr", "t", &[]);
        m.set_failed_partitions("ns/dr", "u", &[]);
        assert!(failed_lines(&m).is_empty(), "{:?}", failed_lines(&m));
    }

    fn lines_of(m: &Metrics, name: &str) -> Vec<String> {
        m.encode()
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_build_is_exposed_once_with_value_1() {
        let m = Metrics::default();
        let lines = lines_of(&m, "kmirror_build_info");
        assert_eq!(
            lines,
            [format!(
                r#"kmirror_build_info{{component="operator",version="{}",git_sha="{}",rustc="{}"}} 1"#,
                env!("CARGO_PKG_VERSION"),
                kmirror_state::build_info::git_sha(),
                kmirror_state::build_info::RUSTC
            )]
        );
        assert!(
            m.encode().contains("# TYPE kmirror_build_info gauge"),
            "a gauge: the Prometheus text format has no info type"
        );
    }

    #[test]
    fn mirror_series_carry_namespace_and_name() {
        let m = Metrics::default();
        m.lag
            .get_or_create(&PartitionLabels {
                namespace: "shop".into(),
                name: "dr".into(),
                topic: "orders".into(),
                partition: 3,
            })
            .set(7);
        assert_eq!(
            lines_of(&m, "kmirror_operator_partition_lag_records"),
            [
                r#"kmirror_operator_partition_lag_records{namespace="shop",name="dr",topic="orders",partition="3"} 7"#
            ]
        );
        assert_eq!(split_key("shop/dr"), ("shop".into(), "dr".into()));
    }

    #[test]
    fn the_last_group_sync_is_a_timestamp_per_mirror_removed_with_it() {
        let m = Metrics::default();
        assert_eq!(m.group_sync_last_success("shop/dr"), None);
        m.group_sync_succeeded("shop/dr", 1_700_000_000.5);
        m.group_sync_succeeded("shop/eu", 1_700_000_100.0);
        assert_eq!(m.group_sync_last_success("shop/dr"), Some(1_700_000_000.5));
        let name = "kmirror_operator_group_sync_last_success_timestamp_seconds";
        let mut lines = lines_of(&m, name);
        lines.sort();
        assert_eq!(
            lines,
            [
                format!(r#"{name}{{namespace="shop",name="dr"}} 1700000000.5"#),
                format!(r#"{name}{{namespace="shop",name="eu"}} 1700000100.0"#),
            ]
        );
        m.forget_group_sync("shop/dr");
        assert_eq!(
            lines_of(&m, name),
            [format!(
                r#"{name}{{namespace="shop",name="eu"}} 1700000100.0"#
            )]
        );
    }
}
