//! Prometheus metrics of the operator.

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

/// Labels of sync series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// `topics`, `topic_configs`, `partitions`, `consumer_groups` or `acls`.
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
    /// Metadata sync runs.
    pub sync_runs: Family<SyncLabels, Counter>,
    /// Lifecycle transitions by target state.
    pub transitions: Family<StateLabels, Counter>,
    /// 1 while this replica leads (or runs without election).
    pub leader: Gauge,
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
        let sync_runs = Family::<SyncLabels, Counter>::default();
        let transitions = Family::<StateLabels, Counter>::default();
        let leader = Gauge::default();
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
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            partitions,
            lag,
            lag_seconds,
            status_writes,
            sync_runs,
            transitions,
            leader,
        }
    }
}

impl Metrics {
    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
