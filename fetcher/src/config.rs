//! What a fetcher process mirrors and how.

use std::time::Duration;

use kmirror_state::connection::ClusterSettings;

/// Which source records are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Committed records only, up to the last stable offset.
    #[default]
    ReadCommitted,
    /// Every record, those of aborted and still open transactions included: on the destination
    /// they become ordinary records that every consumer reads. Only with an explicit
    /// acknowledgement (`--allow-uncommitted`).
    ReadUncommitted,
}

impl Isolation {
    /// The librdkafka `isolation.level` value.
    pub fn as_kafka_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }
}

/// How records are copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// Record by record through librdkafka: decompressed, copied, recompressed (lz4).
    #[default]
    Record,
    /// Record batches as bytes (`kmirror-wire`): only the batch header is rewritten, the
    /// source's codec, batch boundaries and timestamps stay; batches that cannot pass as they
    /// are (old formats, compacted or partly read batches, LogAppendTime onto a CreateTime
    /// topic) are re-encoded from their records.
    Batch,
}

impl Engine {
    /// Parses `record` or `batch`.
    pub fn parse(s: &str) -> Option<Engine> {
        match s {
            "record" | "Record" => Some(Engine::Record),
            "batch" | "Batch" => Some(Engine::Batch),
            _ => None,
        }
    }
}

/// What to do when the source deleted records (retention) before they were mirrored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TruncationPolicy {
    /// Stop with the `DataLoss` reason (default): nothing is skipped silently.
    #[default]
    Fail,
    /// Record the hole in the offset map, report how many records were lost, and go on.
    Skip,
}

/// The cluster IDs the mirror's connections pin, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedClusterIds {
    /// `spec.source.clusterId`.
    pub source: Option<String>,
    /// `spec.destination.clusterId`.
    pub destination: Option<String>,
}

/// Configuration of one fetcher process.
#[derive(Debug, Clone)]
pub struct FetcherConfig {
    /// The mirror, `namespace/name`; part of every state key.
    pub mirror: String,
    /// Source topic.
    pub source_topic: String,
    /// Destination topic (must exist).
    pub destination_topic: String,
    /// Partitions this process owns.
    pub partitions: Vec<i32>,
    /// Source cluster.
    pub source: ClusterSettings,
    /// Destination cluster.
    pub destination: ClusterSettings,
    /// State topic on the destination.
    pub state_topic: String,
    /// Byte-rate limit over all owned partitions.
    pub throttle_bytes_per_second: Option<u64>,
    /// Bytes the Kafka clients' buffers are sized for ([`crate::memory::BufferSizes`]).
    pub memory_budget: u64,
    /// Source isolation level.
    pub isolation: Isolation,
    /// The copy engine.
    pub engine: Engine,
    /// The cluster IDs the connections pin (`clusterId`): another ID is a hard stop.
    pub pinned_cluster_ids: PinnedClusterIds,
    /// Most placeholders written for prefix alignment.
    pub prefix_alignment_limit: i64,
    /// Source truncation handling.
    pub on_source_truncation: TruncationPolicy,
    /// How often positions are written to the state topic.
    pub position_interval: Duration,
    /// How often the source cluster and topic identity are re-checked.
    pub metadata_refresh: Duration,
    /// Bound on the clean shutdown after SIGTERM.
    pub shutdown_timeout: Duration,
    /// How long records may stay in flight with no delivery report before the run stops as
    /// stalled (warned at a quarter of it).
    pub stall_timeout: Duration,
    /// How long the destination log end must stay unchanged before resuming (lets requests of a
    /// previous incarnation drain).
    pub startup_settle: Duration,
    /// Name written into position records (the pod name).
    pub writer: Option<String>,
    /// Write leases from the operator (set when run by the operator; standalone runs write
    /// without).
    pub lease: Option<LeaseSettings>,
}

impl FetcherConfig {
    /// The UID of the pod this fetcher runs in (known when it holds write leases), recorded
    /// with its positions.
    pub fn writer_uid(&self) -> Option<String> {
        self.lease.as_ref().map(|l| l.holder_uid.clone())
    }
}

/// How a fetcher holds its write lease (the holder name is [`FetcherConfig::writer`]).
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// The pod's UID.
    pub holder_uid: String,
    /// How long a grant lasts.
    pub duration: Duration,
    /// Writing stops this long before a grant runs out: more than any produce request of the
    /// process can take to reach the broker.
    pub safety: Duration,
}

impl LeaseSettings {
    /// Settings for the pod `holder_uid` with leases of `duration`; the safety margin is a
    /// third of it plus a second, at least the producer's request timeout plus a second.
    pub fn new(holder_uid: impl Into<String>, duration: Duration) -> LeaseSettings {
        LeaseSettings {
            holder_uid: holder_uid.into(),
            duration,
            safety: (duration / 3 + Duration::from_secs(1))
                .max(LEASE_REQUEST_TIMEOUT + Duration::from_secs(1)),
        }
    }
}

/// The destination producer's request timeout while leases are held.
pub const LEASE_REQUEST_TIMEOUT: Duration = Duration::from_secs(4);

impl FetcherConfig {
    /// A configuration with default tuning.
    pub fn new(
        mirror: impl Into<String>,
        source_topic: impl Into<String>,
        destination_topic: impl Into<String>,
        partitions: Vec<i32>,
        source: ClusterSettings,
        destination: ClusterSettings,
    ) -> FetcherConfig {
        FetcherConfig {
            mirror: mirror.into(),
            source_topic: source_topic.into(),
            destination_topic: destination_topic.into(),
            partitions,
            source,
            destination,
            state_topic: kmirror_crds::v1alpha1::DEFAULT_STATE_TOPIC.to_string(),
            throttle_bytes_per_second: None,
            memory_budget: crate::memory::DEFAULT_MEMORY_BUDGET,
            isolation: Isolation::default(),
            engine: Engine::default(),
            pinned_cluster_ids: PinnedClusterIds::default(),
            prefix_alignment_limit: 1_000_000,
            on_source_truncation: TruncationPolicy::default(),
            position_interval: Duration::from_secs(2),
            metadata_refresh: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(120),
            shutdown_timeout: Duration::from_secs(20),
            startup_settle: Duration::from_millis(1000),
            writer: None,
            lease: None,
        }
    }
}
