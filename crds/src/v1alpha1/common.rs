//! Types shared by both resources: Secret references, conditions, durations.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A key in a Secret in the same namespace as the resource that refers to it. kmirror never
/// accepts a secret value inline; it reads it from here.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Conditions as a list-map keyed by `type`, so server-side apply merges them per type.
pub fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    let object = schema.ensure_object();
    object.insert("x-kubernetes-list-type".into(), "map".into());
    object.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}

/// Pattern a duration field accepts: one or more `<number><unit>` with unit ms, s, m or h.
pub const DURATION_PATTERN: &str = r"^([0-9]+(ms|s|m|h))+$";

/// The condition status strings Kubernetes uses.
pub mod status {
    /// The condition holds.
    pub const TRUE: &str = "True";
    /// The condition does not hold.
    pub const FALSE: &str = "False";
    /// Not known yet.
    pub const UNKNOWN: &str = "Unknown";
}

/// Settings a destination topic gets when kmirror creates it, and only then: a destination
/// topic that exists already keeps what it has (kmirror never reassigns replicas).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopicCreation {
    /// Replicas of each partition of a destination topic kmirror creates (1 to 32767). Absent:
    /// the destination broker's `default.replication.factor`. A factor above the destination's
    /// broker count is refused: the topic's status says so and none of its partitions start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32767))]
    pub replication_factor: Option<i32>,
}

impl TopicCreation {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.replication_factor.is_none()
    }
}
