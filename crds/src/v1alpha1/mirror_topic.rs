//! `MirrorTopic`: one topic inside a `ClusterMirror`, with its per-partition lifecycle.
// Several `printcolumn(...)` attributes repeat the same keys by design.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster_mirror::PartitionCounts;
use super::common::{TopicCreation, conditions_schema};
use super::partition::{PartitionState, PartitionStatus};

/// One mirrored topic. Failover is `spec.state: Stopped`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, kube::KubeSchema)]
#[kube(
    group = "kmirror.io",
    version = "v1alpha1",
    kind = "MirrorTopic",
    namespaced,
    status = "MirrorTopicStatus",
    shortname = "mt",
    category = "kmirror",
    doc = "A topic mirrored by a ClusterMirror; set spec.state to Stopped to fail it over.",
    printcolumn(name = "Mirror", type_ = "string", json_path = ".spec.mirror"),
    printcolumn(
        name = "Source-Topic",
        type_ = "string",
        json_path = ".spec.sourceTopic"
    ),
    printcolumn(name = "State", type_ = "string", json_path = ".spec.state"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Mirroring",
        type_ = "string",
        json_path = ".status.partitionsSummary",
        description = "partitions mirroring / total"
    ),
    printcolumn(name = "Max-Lag", type_ = "integer", json_path = ".status.maxLag"),
    printcolumn(
        name = "Identical",
        type_ = "boolean",
        json_path = ".status.offsetsIdentical",
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
    validation = kube::core::Rule::new("self.mirror == oldSelf.mirror")
        .message("spec.mirror is immutable: create a new MirrorTopic for another mirror")
        .field_path(".mirror")
        .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("self.sourceTopic == oldSelf.sourceTopic")
        .message("spec.sourceTopic is immutable: create a new MirrorTopic for another topic")
        .field_path(".sourceTopic")
        .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("has(self.destinationTopic) == has(oldSelf.destinationTopic) && (!has(self.destinationTopic) || self.destinationTopic == oldSelf.destinationTopic)")
        .message("spec.destinationTopic is immutable")
        .field_path(".destinationTopic")
        .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("!(oldSelf.state == 'Stopped' && self.state == 'Paused')")
        .message("a Stopped topic cannot be Paused: fail back (kubectl mirror failback), or resume it deliberately (kubectl mirror resume)")
        .field_path(".state")
        .reason(kube::core::Reason::FieldValueInvalid),
    validation = kube::core::Rule::new(
        "!(oldSelf.state == 'Stopped' && self.state == 'Mirroring') || \
         (has(self.failover) && has(self.failover.resumeToken) && \
          (!has(oldSelf.failover) || !has(oldSelf.failover.resumeToken) || \
           self.failover.resumeToken != oldSelf.failover.resumeToken))"
    )
        .message("a failed-over (Stopped) topic does not go back to Mirroring by itself: applications may write to the destination now. Fail back with kubectl mirror failback, or resume deliberately with kubectl mirror resume (it sets a new spec.failover.resumeToken)")
        .field_path(".state")
        .reason(kube::core::Reason::FieldValueForbidden),
)]
pub struct MirrorTopicSpec {
    /// Name of the `ClusterMirror` (same namespace) this topic belongs to. Immutable.
    #[schemars(length(min = 1, max = 253))]
    pub mirror: String,
    /// Topic on the source cluster. Immutable.
    #[schemars(regex(pattern = r"^[a-zA-Z0-9._-]{1,249}$"))]
    pub source_topic: String,
    /// Topic on the destination cluster (default: the source topic's name). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-zA-Z0-9._-]{1,249}$"))]
    pub destination_topic: Option<String>,
    /// Settings of the destination topic when kmirror creates it, over the `ClusterMirror`'s
    /// `spec.topicCreation`; an existing destination topic is never changed by them.
    #[serde(default, skip_serializing_if = "TopicCreation::is_empty")]
    pub topic_creation: TopicCreation,
    /// Desired state: `Mirroring` (default), `Paused` (maintenance; the destination stays
    /// read-only), or `Stopped` (failover: the destination becomes writable).
    #[serde(default)]
    pub state: DesiredState,
    /// How a change to `Stopped` is carried out.
    #[serde(default)]
    pub failover: FailoverSpec,
    /// On failback: what to do with records the destination-to-be holds after the last mirrored
    /// offset. Absent: wait (the records are quarantined and reported first in any case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence_policy: Option<DivergencePolicy>,
}

/// Desired state of a mirrored topic.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DesiredState {
    /// Copy records continuously.
    #[default]
    Mirroring,
    /// Stop copying but keep the destination read-only.
    Paused,
    /// Fail over: stop copying, persist the last mirrored offsets, make the destination writable.
    Stopped,
}

/// Failover settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// `Graceful` (default): drain to zero lag while the source is reachable, then stop.
    /// `Immediate`: stop at once (use when the source is gone).
    #[serde(default)]
    pub mode: FailoverMode,
    /// How long a graceful failover waits for zero lag before it reports and keeps waiting.
    #[serde(default = "default_drain_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    pub drain_timeout: String,
    /// A new value here, in the same change, is what lets `spec.state` go from `Stopped` back to
    /// `Mirroring` (`kubectl mirror resume` sets it): a deliberate resume of the copy after a
    /// failover. Without it the API server refuses that change, so that a GitOps tool
    /// re-applying an older manifest cannot re-mirror over what applications wrote since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub resume_token: Option<String>,
}

impl Default for FailoverSpec {
    fn default() -> Self {
        FailoverSpec {
            mode: FailoverMode::default(),
            drain_timeout: default_drain_timeout(),
            resume_token: None,
        }
    }
}

fn default_drain_timeout() -> String {
    "5m".to_string()
}

/// How to stop.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailoverMode {
    /// Drain to zero lag first.
    #[default]
    Graceful,
    /// Stop now.
    Immediate,
}

/// Resolution of divergent records found on failback.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DivergencePolicy {
    /// Delete and recreate the destination topic, then mirror everything again. The divergent
    /// records stay in the quarantine topic.
    Recreate,
    /// Keep the divergent records where they are and mirror after them; offsets are translated
    /// through the offset map from then on.
    KeepAndTranslate,
}

/// Observed state of a `MirrorTopic`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MirrorTopicStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Topic phase: the most significant partition state (e.g. `Mirroring` when all mirror,
    /// `Failed` when any failed), or `Pending` before the first reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `Ready`, `Reconciling` and `Stalled` (kstatus conventions), and `Failed` (lists every FAILED
    /// partition).
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Topic ID the source reports (absent on sources that have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_topic_id: Option<String>,
    /// The destination topic name in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_topic: Option<String>,
    /// `mirroring/total`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions_summary: Option<String>,
    /// Largest lag (records) over the partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lag: Option<i64>,
    /// True when every partition has identical offsets on both sides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offsets_identical: Option<bool>,
    /// Partitions per lifecycle state, over all partitions of the topic (also those not listed
    /// in `partitions`): what decides "all MIRRORING" or "all STOPPED".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_counts: Option<PartitionCounts>,
    /// Per partition state, offsets, lag and errors. A topic with more partitions than the
    /// operator lists (`--status-max-partitions`) lists the worst ones: FAILED first, then those
    /// on their way (PREPARING, STOPPING, ...), then MIRRORING by highest lag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "partitions_schema")]
    pub partitions: Vec<PartitionStatus>,
    /// Partitions not listed in `partitions` (0: every partition is listed).
    /// `kubectl mirror status --partitions all` shows them all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub partitions_omitted: i32,
    /// Replicas of the destination topic's partitions, as the destination describes it (its
    /// first partition's). `spec.topicCreation.replicationFactor` applies only when kmirror
    /// creates the topic: a destination topic that has another factor keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_replication_factor: Option<i32>,
    /// Source topic configs the destination topic does not get, each with the reason (a key
    /// the destination's Kafka version removed or does not know, a value it refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "not_copied_schema")]
    pub configs_not_copied: Vec<ConfigNotCopied>,
}

/// A topic config not copied to the destination topic.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigNotCopied {
    /// The config's name on the source.
    pub name: String,
    /// Why it is not copied, and what to do if it matters.
    pub reason: String,
}

fn not_copied_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<ConfigNotCopied>>();
    let object = schema.ensure_object();
    object.insert("x-kubernetes-list-type".into(), "map".into());
    object.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["name"]),
    );
    schema
}

fn partitions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<PartitionStatus>>();
    let object = schema.ensure_object();
    object.insert("x-kubernetes-list-type".into(), "map".into());
    object.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["partition"]),
    );
    schema
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl MirrorTopicStatus {
    /// The partition counts: `partitionCounts`, or — in a status written before it existed —
    /// counted from the listed partitions.
    pub fn counts(&self) -> PartitionCounts {
        self.partition_counts
            .clone()
            .unwrap_or_else(|| PartitionCounts::of(self.partitions.iter().map(|p| p.state)))
    }

    /// Whether the topic has partitions and every one is in `state` (from the counts, not the
    /// list: a large topic lists only some).
    pub fn all_in(&self, state: PartitionState) -> bool {
        let c = self.counts();
        c.total > 0 && c.get(state) == c.total
    }
}

impl MirrorTopic {
    /// The destination topic name: `spec.destinationTopic`, or the source topic's name.
    pub fn destination_topic(&self) -> &str {
        self.spec
            .destination_topic
            .as_deref()
            .unwrap_or(&self.spec.source_topic)
    }

    /// `namespace/name` of the `ClusterMirror` this topic belongs to: the key of its records in
    /// the state topic.
    pub fn mirror_key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.spec.mirror
        )
    }
}
