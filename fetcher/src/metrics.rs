//! Prometheus metrics of a fetcher process, per mirrored partition.

use std::sync::atomic::AtomicU64;

use kmirror_crds::v1alpha1::PartitionState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of a partition's series.
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

impl PartitionLabels {
    /// The labels of a partition of `topic` of the mirror `key` (`namespace/name`).
    pub fn new(key: &str, topic: &str, partition: i32) -> PartitionLabels {
        let (namespace, name) = match key.split_once('/') {
            Some((namespace, name)) => (namespace.to_string(), name.to_string()),
            None => (String::new(), key.to_string()),
        };
        PartitionLabels {
            namespace,
            name,
            topic: topic.to_string(),
            partition,
        }
    }
}

/// Labels of the per-state series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// Namespace of the `ClusterMirror`.
    pub namespace: String,
    /// Name of the `ClusterMirror`.
    pub name: String,
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Lifecycle state name.
    pub state: String,
}

/// Labels of `kmirror_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfoLabels {
    /// `fetcher`.
    pub component: String,
    /// Release version.
    pub version: String,
    /// Git commit the build was made from, or `unknown`.
    pub git_sha: String,
    /// Compiler version.
    pub rustc: String,
}

/// The fetcher's metrics.
pub struct FetcherMetrics {
    registry: Registry,
    /// 1, labelled with the build (`kmirror_build_info`).
    pub build_info: Family<BuildInfoLabels, Gauge>,
    /// Records copied.
    pub records: Family<PartitionLabels, Counter>,
    /// Bytes copied (keys, values and headers).
    pub bytes: Family<PartitionLabels, Counter>,
    /// Records the destination is behind the source.
    pub lag_records: Family<PartitionLabels, Gauge>,
    /// Age of the newest mirrored record when behind, else 0.
    pub lag_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
    /// 1 when destination offsets equal source offsets.
    pub offsets_identical: Family<PartitionLabels, Gauge>,
    /// Last mirrored source offset.
    pub last_mirrored_offset: Family<PartitionLabels, Gauge>,
    /// 1 for the partition's current state, 0 for the others.
    pub state: Family<StateLabels, Gauge>,
    /// Gaps recorded in the offset map.
    pub gaps: Family<PartitionLabels, Counter>,
    /// Source records deleted (retention, DeleteRecords) before they were mirrored and skipped
    /// by policy (`kmirror_fetcher_data_loss_records_total`).
    pub data_loss_records: Family<PartitionLabels, Counter>,
    /// Batch engine: source batches produced as their bytes.
    pub batches_passed: Family<PartitionLabels, Counter>,
    /// Batch engine: source batches whose records were re-encoded (old formats, compacted or
    /// partly read batches, too large, LogAppendTime onto CreateTime).
    pub batches_reencoded: Family<PartitionLabels, Counter>,
    /// How long a source transaction has held the partition's last stable offset (0: none
    /// open): the mirror waits for it — not a fault, until it lasts far longer than the source's
    /// transactions should.
    pub transaction_open_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
}

impl Default for FetcherMetrics {
    fn default() -> Self {
        FetcherMetrics::new()
    }
}

impl FetcherMetrics {
    /// Registers every metric.
    pub fn new() -> FetcherMetrics {
        use kmirror_state::build_info as build;
        let mut root = Registry::with_prefix("kmirror");
        let build_info = Family::<BuildInfoLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildInfoLabels {
                component: "fetcher".into(),
                version: build::VERSION.into(),
                git_sha: build::git_sha().into(),
                rustc: build::RUSTC.into(),
            })
            .set(1);
        root.register(
            "build_info",
            "1, labelled with the version, Git commit and compiler of the build",
            build_info.clone(),
        );
        let registry = root.sub_registry_with_prefix("fetcher");
        let records = Family::<PartitionLabels, Counter>::default();
        let bytes = Family::<PartitionLabels, Counter>::default();
        let lag_records = Family::<PartitionLabels, Gauge>::default();
        let lag_seconds = Family::<PartitionLabels, Gauge<f64, AtomicU64>>::default();
        let offsets_identical = Family::<PartitionLabels, Gauge>::default();
        let last_mirrored_offset = Family::<PartitionLabels, Gauge>::default();
        let state = Family::<StateLabels, Gauge>::default();
        let gaps = Family::<PartitionLabels, Counter>::default();
        let data_loss_records = Family::<PartitionLabels, Counter>::default();
        let batches_passed = Family::<PartitionLabels, Counter>::default();
        let batches_reencoded = Family::<PartitionLabels, Counter>::default();
        let transaction_open_seconds = Family::<PartitionLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "source_transaction_open_seconds",
            "How long an open source transaction has held the last stable offset (0: none)",
            transaction_open_seconds.clone(),
        );
        registry.register(
            "batches_passed",
            "Batch engine: source record batches produced as they are",
            batches_passed.clone(),
        );
        registry.register(
            "batches_reencoded",
            "Batch engine: source record batches whose records were re-encoded",
            batches_reencoded.clone(),
        );
        registry.register(
            "records",
            "Records copied to the destination",
            records.clone(),
        );
        registry.register(
            "bytes",
            "Bytes copied (keys, values, headers)",
            bytes.clone(),
        );
        registry.register(
            "lag_records",
            "Records the destination is behind",
            lag_records.clone(),
        );
        registry.register(
            "lag_seconds",
            "Age of the newest mirrored record while behind",
            lag_seconds.clone(),
        );
        registry.register(
            "offsets_identical",
            "1 when every destination offset equals its source offset",
            offsets_identical.clone(),
        );
        registry.register(
            "last_mirrored_offset",
            "Last source offset on the destination",
            last_mirrored_offset.clone(),
        );
        registry.register(
            "partition_state",
            "1 for the partition's current lifecycle state",
            state.clone(),
        );
        registry.register(
            "gaps",
            "Source offset gaps recorded in the offset map",
            gaps.clone(),
        );
        registry.register(
            "data_loss_records",
            "Source records deleted before they were mirrored (skipped by policy)",
            data_loss_records.clone(),
        );
        FetcherMetrics {
            registry: root,
            build_info,
            records,
            bytes,
            lag_records,
            lag_seconds,
            offsets_identical,
            last_mirrored_offset,
            state,
            gaps,
            data_loss_records,
            batches_passed,
            batches_reencoded,
            transaction_open_seconds,
        }
    }

    /// Sets the partition's state series (one at 1, the rest at 0).
    pub fn set_state(&self, labels: &PartitionLabels, current: PartitionState) {
        for s in PartitionState::ALL {
            let l = StateLabels {
                namespace: labels.namespace.clone(),
                name: labels.name.clone(),
                topic: labels.topic.clone(),
                partition: labels.partition,
                state: s.as_str().to_string(),
            };
            self.state.get_or_create(&l).set(i64::from(s == current));
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

    #[test]
    fn the_data_loss_counter_has_the_name_and_labels_the_alerts_read() {
        let m = FetcherMetrics::new();
        let labels = PartitionLabels::new("ns/m", "orders", 2);
        m.data_loss_records.get_or_create(&labels).inc_by(50);
        let text = m.encode();
        assert!(
            text.contains(
                r#"kmirror_fetcher_data_loss_records_total{namespace="ns",name="m",topic="orders",partition="2"} 50"#
            ),
            "{text}"
        );
    }

    #[test]
    fn the_build_is_exposed_with_value_1() {
        let text = FetcherMetrics::new().encode();
        let line = format!(
            r#"kmirror_build_info{{component="fetcher",version="{}",git_sha="{}",rustc="{}"}} 1"#,
            env!("CARGO_PKG_VERSION"),
            kmirror_state::build_info::git_sha(),
            kmirror_state::build_info::RUSTC
        );
        assert!(text.lines().any(|l| l == line), "{text}");
    }
}
