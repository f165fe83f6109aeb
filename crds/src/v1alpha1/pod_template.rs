//! `spec.fetcher.template`: where fetcher pods run and how they are tagged (in the manner of
//! Strimzi's `template.pod`). Only placement and metadata: nothing that changes what a pod may
//! do (security context, host namespaces, volumes) can be expressed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, Toleration, TopologySpreadConstraint,
};
use serde::{Deserialize, Serialize};

/// Label keys of fetcher pods that belong to kmirror: its selectors and ownership labels.
pub const RESERVED_LABELS: &[&str] = &["app.kubernetes.io/name", "app.kubernetes.io/managed-by"];

/// Prefix of the label and annotation keys kmirror sets on fetcher pods.
pub const RESERVED_PREFIX: &str = "kmirror.io/";

/// Whether a template label key is kmirror's own (a selector or ownership label).
pub fn reserved_label(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX) || RESERVED_LABELS.contains(&key)
}

/// Whether a template annotation key is kmirror's own (partitions, units, spec hash).
pub fn reserved_annotation(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX)
}

fn reserved_labels_rule() -> String {
    let names = RESERVED_LABELS
        .iter()
        .map(|k| format!("k != '{k}'"))
        .collect::<Vec<_>>()
        .join(" && ");
    format!(
        "!has(self.labels) || self.labels.all(k, !k.startsWith('{RESERVED_PREFIX}') && {names})"
    )
}

/// Metadata and placement of every fetcher pod of a mirror, per-topic and pool pods alike. A
/// change replaces the pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new(reserved_labels_rule())
        .message("template.labels may not set kmirror's own labels (kmirror.io/*, app.kubernetes.io/name, app.kubernetes.io/managed-by): the operator selects its pods by them")
        .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("!has(self.annotations) || self.annotations.all(k, !k.startsWith('kmirror.io/'))")
        .message("template.annotations may not set kmirror.io/* annotations: the operator's record of what a pod runs")
        .reason(kube::core::Reason::FieldValueForbidden),
)]
pub struct FetcherPodTemplate {
    /// Extra labels of fetcher pods (kmirror's own `kmirror.io/*` and `app.kubernetes.io/name`,
    /// `managed-by` are refused).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub labels: BTreeMap<String, String>,
    /// Annotations of fetcher pods, e.g.
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict: "true"` (`kmirror.io/*` refused).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
    /// Node labels a fetcher pod's node must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub node_selector: BTreeMap<String, String>,
    /// Taints fetcher pods tolerate; the keys are bounded by the installation
    /// (`--allowed-fetcher-toleration-keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,
    /// Node and pod (anti-)affinity of fetcher pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// How fetcher pods spread over zones or nodes (select them by `kmirror.io/mirror`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Priority class of fetcher pods; allowed by the installation only
    /// (`--allowed-fetcher-priority-classes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Secrets (in the mirror's namespace) to pull the fetcher image with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// The fetcher's log filter (`RUST_LOG`), e.g. `debug` or `info,kmirror_wire=debug`.
    /// Absent: `info,rdkafka=warn,kube=warn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_:=,.\-]{1,256}$"))]
    pub log_level: Option<String>,
}

impl FetcherPodTemplate {
    /// Whether the template sets nothing (pods are as without one).
    pub fn is_empty(&self) -> bool {
        self == &FetcherPodTemplate::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_expresses_placement_and_metadata_only() {
        let schema = serde_json::to_value(schemars::schema_for!(FetcherPodTemplate)).unwrap();
        let mut fields: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "affinity",
                "annotations",
                "imagePullSecrets",
                "labels",
                "logLevel",
                "nodeSelector",
                "priorityClassName",
                "tolerations",
                "topologySpreadConstraints"
            ]
        );
        // What would leave the restricted profile is not a field: it is dropped, never applied.
        let t: FetcherPodTemplate = serde_json::from_value(serde_json::json!({
            "hostNetwork": true, "securityContext": {"runAsUser": 0},
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}], "logLevel": "debug"
        }))
        .unwrap();
        assert_eq!(t.log_level.as_deref(), Some("debug"));
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            serde_json::json!({"logLevel": "debug"})
        );
    }

    #[test]
    fn kmirror_keys_are_reserved() {
        for (key, label, annotation) in [
            ("kmirror.io/mirror", true, true),
            ("kmirror.io/spec-hash", true, true),
            ("app.kubernetes.io/name", true, false),
            ("app.kubernetes.io/managed-by", true, false),
            ("app.kubernetes.io/part-of", false, false),
            ("team", false, false),
            (
                "cluster-autoscaler.kubernetes.io/safe-to-evict",
                false,
                false,
            ),
        ] {
            assert_eq!(reserved_label(key), label, "{key}");
            assert_eq!(reserved_annotation(key), annotation, "{key}");
        }
        assert!(reserved_labels_rule().contains("k != 'app.kubernetes.io/managed-by'"));
    }
}
