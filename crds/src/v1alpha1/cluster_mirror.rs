//! `ClusterMirror`: one mirror from a source Kafka cluster to a destination Kafka cluster.
// Several `printcolumn(...)` attributes repeat the same keys by design.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{TopicCreation, conditions_schema};
use super::connection::KafkaConnection;
use super::partition::PartitionState;
use super::pod_template::FetcherPodTemplate;

/// Default name of the compacted state topic on the destination cluster.
pub const DEFAULT_STATE_TOPIC: &str = "__kmirror_state";

/// Topic configs that are never copied from the source by default: they describe the
/// destination cluster's own durability and timestamp policy, or replication internals.
pub const DEFAULT_CONFIG_EXCLUDES: &[&str] = &[
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "message.timestamp.type",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "confluent.*",
];

/// Mirror a source Kafka cluster onto a destination cluster: topic data at identical offsets,
/// topic configs, partitions, consumer-group offsets and ACLs.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, kube::KubeSchema)]
#[kube(
    group = "kmirror.io",
    version = "v1alpha1",
    kind = "ClusterMirror",
    namespaced,
    status = "ClusterMirrorStatus",
    shortname = "cmr",
    category = "kmirror",
    doc = "A mirror from a source Kafka cluster to a destination Kafka cluster.",
    printcolumn(
        name = "Source",
        type_ = "string",
        json_path = ".spec.source.bootstrapServers",
        priority = 1
    ),
    printcolumn(
        name = "Destination",
        type_ = "string",
        json_path = ".spec.destination.bootstrapServers",
        priority = 1
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Topics", type_ = "integer", json_path = ".status.topics"),
    printcolumn(
        name = "Mirroring",
        type_ = "string",
        json_path = ".status.partitionsSummary",
        description = "partitions mirroring / total"
    ),
    printcolumn(name = "Max-Lag", type_ = "integer", json_path = ".status.maxLag"),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("self.source.bootstrapServers != self.destination.bootstrapServers")
        .message("source and destination must be different clusters")
        .reason(kube::core::Reason::FieldValueInvalid),
    validation = kube::core::Rule::new("self.stateTopic == oldSelf.stateTopic")
        .message("spec.stateTopic is immutable: the mirror's positions, offset maps and failover records are in it")
        .field_path(".stateTopic")
        .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("has(self.reverseOf) == has(oldSelf.reverseOf) && (!has(self.reverseOf) || self.reverseOf == oldSelf.reverseOf)")
        .message("spec.reverseOf is immutable: a failback mirror is created as one (kubectl mirror failback)")
        .field_path(".reverseOf")
        .reason(kube::core::Reason::FieldValueForbidden),
)]
pub struct ClusterMirrorSpec {
    /// The cluster to copy from (Kafka 2.1 or later).
    pub source: KafkaConnection,
    /// The cluster to copy to (Kafka 3.x or 4.x). Its `bootstrapServers` may change (listeners
    /// move) as long as the new address reaches the same cluster: one that reports another
    /// cluster ID than the one recorded in `status.destinationClusterId` is refused
    /// (`ClusterIdMismatch`) and nothing is written to it. Another cluster takes a new
    /// `ClusterMirror`.
    pub destination: KafkaConnection,
    /// Which source topics get a `MirrorTopic` automatically. Without include filters only
    /// explicitly created `MirrorTopic`s are mirrored.
    #[serde(default)]
    pub topics: TopicSelection,
    /// Periodic metadata sync: configs, partitions, consumer-group offsets, ACLs.
    #[serde(default)]
    pub sync: SyncSpec,
    /// How fetcher pods run.
    #[serde(default)]
    pub fetcher: FetcherSpec,
    /// Settings of the destination topics kmirror creates (a `MirrorTopic`'s own
    /// `topicCreation` overrides them); an existing destination topic is never changed by them.
    #[serde(default, skip_serializing_if = "TopicCreation::is_empty")]
    pub topic_creation: TopicCreation,
    /// Name of the compacted state topic on the destination cluster.
    #[serde(default = "default_state_topic")]
    #[schemars(regex(pattern = r"^[a-zA-Z0-9._-]{1,249}$"))]
    pub state_topic: String,
    /// This mirror reverses an earlier one (failback): the name, as `namespace/name`, of the
    /// mirror that copied in the other direction. Its last mirrored offsets are read from the
    /// source cluster's state topic so that only the delta is copied back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    ))]
    pub reverse_of: Option<String>,
}

fn default_state_topic() -> String {
    DEFAULT_STATE_TOPIC.to_string()
}

/// Include and exclude filters over source topic names. Exclude wins over include.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopicSelection {
    /// A source topic matching any of these gets a `MirrorTopic`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub include: Vec<NameFilter>,
    /// A source topic matching any of these is never mirrored automatically. Internal topics
    /// (starting with `__`) are always excluded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub exclude: Vec<NameFilter>,
}

/// Matches a name by exactly one of: the literal name, a prefix, or a regular expression
/// (anchored: it must match the whole name).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("[has(self.name), has(self.prefix), has(self.regex)].filter(x, x).size() == 1")
    .message("a filter sets exactly one of name, prefix or regex")
    .reason(kube::core::Reason::FieldValueInvalid))]
pub struct NameFilter {
    /// The exact name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub name: Option<String>,
    /// Names starting with this prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub prefix: Option<String>,
    /// Names fully matching this regular expression (Rust `regex` syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub regex: Option<String>,
}

/// Metadata kept in step with the source every `interval`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncSpec {
    /// How often to sync, e.g. `30s`, `1m`, `1m30s`.
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    pub interval: String,
    /// Topic configs.
    #[serde(default)]
    pub topic_configs: ConfigSync,
    /// Consumer-group offsets.
    #[serde(default)]
    pub consumer_groups: GroupSync,
    /// ACLs on mirrored topics and included groups.
    #[serde(default)]
    pub acls: AclSync,
}

impl Default for SyncSpec {
    fn default() -> Self {
        SyncSpec {
            interval: default_interval(),
            topic_configs: ConfigSync::default(),
            consumer_groups: GroupSync::default(),
            acls: AclSync::default(),
        }
    }
}

fn default_interval() -> String {
    "30s".to_string()
}

/// Topic config sync: the source's non-default configs minus the excluded ones
/// ([`ConfigSync::effective_exclude`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSync {
    /// Copy topic configs (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Config names never copied, in addition to the default excludes (the configs that belong
    /// to the destination cluster: durability, timestamp policy, throttles); a trailing `*`
    /// matches a prefix. With `replaceDefaultExcludes: true` this list replaces the defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// `exclude` replaces the default excludes instead of adding to them (default false): set
    /// it to copy a config the defaults leave out, e.g. `min.insync.replicas`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace_default_excludes: bool,
    /// Configs set on every destination topic, over the source's values and over those kmirror
    /// sets so that the destination takes every source record (`max.message.bytes` at least
    /// the source's, timestamp bounds unbounded), e.g. a tighter
    /// `message.timestamp.after.max.ms`. A record the destination then refuses stops its
    /// partition with `RecordRefused`. `message.timestamp.type` always stays `CreateTime`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, String>,
}

impl Default for ConfigSync {
    fn default() -> Self {
        ConfigSync {
            enabled: true,
            exclude: Vec::new(),
            replace_default_excludes: false,
            overrides: BTreeMap::new(),
        }
    }
}

impl ConfigSync {
    /// The config names never copied: [`DEFAULT_CONFIG_EXCLUDES`] and `exclude`, or `exclude`
    /// alone with `replaceDefaultExcludes`.
    pub fn effective_exclude(&self) -> Vec<String> {
        let mut out: Vec<String> = if self.replace_default_excludes {
            Vec::new()
        } else {
            DEFAULT_CONFIG_EXCLUDES
                .iter()
                .map(|s| s.to_string())
                .collect()
        };
        for e in &self.exclude {
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        out
    }
}

/// Consumer-group offset sync.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupSync {
    /// Copy committed offsets of included groups (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Groups to sync; empty means all groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub include: Vec<NameFilter>,
    /// Groups never synced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub exclude: Vec<NameFilter>,
}

impl Default for GroupSync {
    fn default() -> Self {
        GroupSync {
            enabled: true,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// ACL sync (needs an authorizer on the destination).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AclSync {
    /// Copy ACLs of mirrored topics and included groups, without WRITE while a topic mirrors
    /// (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// The principal fetchers write as on the destination (for example `User:mirror`); it is
    /// the only principal allowed to write to a mirrored topic. Default: derived from the
    /// destination SASL username, `User:<username>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z]+:.+$"))]
    pub fetcher_principal: Option<String>,
}

impl Default for AclSync {
    fn default() -> Self {
        AclSync {
            enabled: true,
            fetcher_principal: None,
        }
    }
}

fn default_true() -> bool {
    true
}

/// Which records a fetcher reads.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum IsolationLevel {
    /// Only committed transactional records, up to the last stable offset (default).
    #[default]
    ReadCommitted,
    /// Every record, including those of open and aborted transactions.
    ReadUncommitted,
}

/// How a fetcher copies records.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FetcherEngine {
    /// Record by record through librdkafka: decompressed, copied, recompressed with lz4.
    Record,
    /// Record batches as bytes (default): only the batch header is rewritten, the source's
    /// codec, batch boundaries and timestamps stay; batches that cannot pass as they are (old
    /// formats, compacted or partly read batches, LogAppendTime onto a CreateTime topic) are
    /// re-encoded from their records. Same offsets, offset map, fencing and stop reasons as
    /// `Record`.
    #[default]
    Batch,
}

/// Fetcher pods: image, resources, packing and tuning.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new(crate::client_properties::cel_rule(
        crate::client_properties::Client::Consumer,
        "consumerProperties",
    ))
    .message("consumerProperties takes only tuning keys (fetch.*, queued.*, max.partition.fetch.bytes and the connection tuning keys); connection, security, delivery and secret settings belong to kmirror")
    .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new(crate::client_properties::cel_rule(
        crate::client_properties::Client::Producer,
        "producerProperties",
    ))
    .message("producerProperties takes only tuning keys (linger.ms, batch.*, queue.buffering.*, compression.* and the connection tuning keys); connection, security, delivery and secret settings belong to kmirror")
    .reason(kube::core::Reason::FieldValueForbidden),
)]
pub struct FetcherSpec {
    /// Container image with the `kmirror-fetcher` binary. Default: the operator's own image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(Always|IfNotPresent|Never)$"))]
    pub image_pull_policy: Option<String>,
    /// Compute resources of each fetcher container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Partitions served by one fetcher pod (default 1).
    #[serde(default = "default_partitions_per_pod")]
    #[schemars(range(min = 1, max = 1000))]
    pub partitions_per_pod: i32,
    /// Run the partitions of every topic of this mirror on a fixed pool of fetcher pods
    /// (`<mirror>-pool-<i>`, owned by the `ClusterMirror`) instead of per-topic pods; absent:
    /// per-topic pods (`partitionsPerPod`). See `docs/fetcher-pools.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<FetcherPool>,
    /// Memory each fetcher process sizes its Kafka client buffers for (prefetched records,
    /// fetch responses, the producer queue), e.g. `64Mi`; at least `32Mi`. Absent: `96Mi`.
    /// Never more than three quarters of the container's memory limit: a larger value is
    /// lowered to that. One record larger than the producer queue's share raises that share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<String>,
    /// Upper bound on bytes per second each fetcher pod copies. Absent: unthrottled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024))]
    pub throttle_bytes_per_second: Option<i64>,
    /// Source reads: `ReadCommitted` (default) or `ReadUncommitted`.
    #[serde(default)]
    pub isolation_level: IsolationLevel,
    /// Copy engine: `Batch` (default) or `Record`.
    #[serde(default)]
    pub engine: FetcherEngine,
    /// Most placeholder records written to align an empty destination with a source whose log
    /// starts above 0 (default 1,000,000). Beyond it the partition is mirrored with an offset
    /// map instead of identical offsets.
    #[serde(default = "default_prefix_alignment_limit")]
    #[schemars(range(min = 0))]
    pub prefix_alignment_limit: i64,
    /// Extra librdkafka properties for the source consumer: tuning keys only
    /// (`kmirror_crds::client_properties`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub consumer_properties: BTreeMap<String, String>,
    /// Extra librdkafka properties for the destination producer: tuning keys only
    /// (`kmirror_crds::client_properties`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub producer_properties: BTreeMap<String, String>,
    /// Service account of fetcher pods. Default: the namespace's `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Extra labels on fetcher pods (kmirror's own labels win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Placement and metadata of every fetcher pod (per-topic and pool pods): labels,
    /// annotations, node selector, tolerations, affinity, topology spread, priority class, image
    /// pull secrets and log level. A change replaces the pods.
    #[serde(default, skip_serializing_if = "FetcherPodTemplate::is_empty")]
    pub template: FetcherPodTemplate,
}

/// A pool of fetcher pods shared by every topic of a mirror.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetcherPool {
    /// Pods in the pool. Each partition runs on the pod rendezvous hashing picks for it: adding
    /// a topic moves no other partition; changing `pods` moves only the partitions whose pod
    /// changes (about `1/pods` of them when growing by one).
    #[schemars(range(min = 1, max = 1000))]
    pub pods: i32,
}

/// A fetcher process's memory budget when `spec.fetcher.memoryBudget` is absent (96Mi).
pub const DEFAULT_FETCHER_MEMORY_BUDGET: u64 = 96 << 20;

impl Default for FetcherSpec {
    fn default() -> Self {
        FetcherSpec {
            image: None,
            image_pull_policy: None,
            resources: None,
            memory_budget: None,
            partitions_per_pod: default_partitions_per_pod(),
            pool: None,
            throttle_bytes_per_second: None,
            isolation_level: IsolationLevel::default(),
            engine: FetcherEngine::default(),
            prefix_alignment_limit: default_prefix_alignment_limit(),
            consumer_properties: BTreeMap::new(),
            producer_properties: BTreeMap::new(),
            service_account_name: None,
            pod_labels: BTreeMap::new(),
            template: FetcherPodTemplate::default(),
        }
    }
}

fn default_partitions_per_pod() -> i32 {
    1
}

fn default_prefix_alignment_limit() -> i64 {
    1_000_000
}

/// Observed state of a `ClusterMirror`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMirrorStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling` and `Stalled` (kstatus conventions), `SourceReachable`,
    /// `DestinationReachable`, `Synced`, and `InsecureConnection` when `allowInsecure` accepts one.
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Cluster ID the source reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_cluster_id: Option<String>,
    /// Cluster ID the destination reported: the identity of the mirror's destination. An
    /// address in `spec.destination.bootstrapServers` that reaches another cluster is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_cluster_id: Option<String>,
    /// Number of `MirrorTopic`s of this mirror.
    #[serde(default)]
    pub topics: i32,
    /// Partitions per lifecycle state, over all topics.
    #[serde(default)]
    pub partitions: PartitionCounts,
    /// `mirroring/total`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions_summary: Option<String>,
    /// Largest lag (records) over all partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lag: Option<i64>,
    /// Metadata sync, per part.
    #[serde(default)]
    pub sync: SyncStatus,
}

/// Partitions per lifecycle state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionCounts {
    /// All partitions.
    #[serde(default)]
    pub total: i32,
    /// In UNKNOWN.
    #[serde(default)]
    pub unknown: i32,
    /// In PREPARING.
    #[serde(default)]
    pub preparing: i32,
    /// In MIRRORING.
    #[serde(default)]
    pub mirroring: i32,
    /// In PAUSING.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pausing: i32,
    /// In PAUSED.
    #[serde(default)]
    pub paused: i32,
    /// In STOPPING.
    #[serde(default)]
    pub stopping: i32,
    /// In STOPPED.
    #[serde(default)]
    pub stopped: i32,
    /// In FAILED.
    #[serde(default)]
    pub failed: i32,
}

impl PartitionCounts {
    /// Counts partitions per state.
    pub fn of(states: impl IntoIterator<Item = PartitionState>) -> PartitionCounts {
        let mut c = PartitionCounts::default();
        for s in states {
            c.total += 1;
            *c.slot(s) += 1;
        }
        c
    }

    /// Partitions in `state`.
    pub fn get(&self, state: PartitionState) -> i32 {
        match state {
            PartitionState::Unknown => self.unknown,
            PartitionState::Preparing => self.preparing,
            PartitionState::Mirroring => self.mirroring,
            PartitionState::Pausing => self.pausing,
            PartitionState::Paused => self.paused,
            PartitionState::Stopping => self.stopping,
            PartitionState::Stopped => self.stopped,
            PartitionState::Failed => self.failed,
        }
    }

    fn slot(&mut self, state: PartitionState) -> &mut i32 {
        match state {
            PartitionState::Unknown => &mut self.unknown,
            PartitionState::Preparing => &mut self.preparing,
            PartitionState::Mirroring => &mut self.mirroring,
            PartitionState::Pausing => &mut self.pausing,
            PartitionState::Paused => &mut self.paused,
            PartitionState::Stopping => &mut self.stopping,
            PartitionState::Stopped => &mut self.stopped,
            PartitionState::Failed => &mut self.failed,
        }
    }

    /// The sum of two counts.
    pub fn add(&self, other: &PartitionCounts) -> PartitionCounts {
        let mut sum = self.clone();
        sum.total += other.total;
        for s in PartitionState::ALL {
            *sum.slot(s) += other.get(s);
        }
        sum
    }
}

/// Outcome of each part of the metadata sync.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// New source topics matching the filters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<SyncPartStatus>,
    /// Topic configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_configs: Option<SyncPartStatus>,
    /// Partition counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<SyncPartStatus>,
    /// Consumer-group offsets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_groups: Option<SyncPartStatus>,
    /// ACLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acls: Option<SyncPartStatus>,
}

/// Last outcome of one sync part.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPartStatus {
    /// Last time this part completed without error (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<String>,
    /// Last error, if the latest run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the last error happened (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_time: Option<String>,
    /// What the latest run changed or skipped, in a few words (e.g. `3 groups synced, 1 skipped
    /// (active members: g1)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclude_adds_to_the_defaults_unless_it_replaces_them() {
        let parse =
            |json: serde_json::Value| -> ConfigSync { serde_json::from_value(json).unwrap() };
        let defaults: Vec<String> = DEFAULT_CONFIG_EXCLUDES
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(parse(serde_json::json!({})).effective_exclude(), defaults);
        let added = parse(serde_json::json!({"exclude": ["retention.ms", "min.insync.replicas"]}));
        let mut want = defaults.clone();
        want.push("retention.ms".into());
        assert_eq!(
            added.effective_exclude(),
            want,
            "added, a default not repeated"
        );
        let replaced =
            parse(serde_json::json!({"exclude": ["retention.ms"], "replaceDefaultExcludes": true}));
        assert_eq!(
            replaced.effective_exclude(),
            vec!["retention.ms".to_string()]
        );
        let none = parse(serde_json::json!({"replaceDefaultExcludes": true}));
        assert!(none.effective_exclude().is_empty(), "copies every config");
    }
}
