//! `spec.fetcher.template` on a fetcher pod: the tenant's labels, annotations, placement, pull
//! secrets and log level, under kmirror's own labels and annotations (which win). Pure.

use k8s_openapi::api::core::v1::{EnvVar, Pod};
use kmirror_crds::v1alpha1::{FetcherPodTemplate, reserved_annotation, reserved_label};

/// What of the template enters a pod's spec hash: nothing for an empty template (pods of
/// mirrors without one keep their hash), else the whole template, so that any change replaces
/// the pods.
pub fn hash_part(template: &FetcherPodTemplate) -> String {
    if template.is_empty() {
        String::new()
    } else {
        format!(
            "\n{}",
            serde_json::to_string(template).expect("a template serializes")
        )
    }
}

/// Applies `template` to `pod`, built by the operator: its labels and annotations where kmirror
/// sets none (and never kmirror's own keys), its placement, pull secrets and `RUST_LOG`.
pub fn apply(pod: &mut Pod, template: &FetcherPodTemplate) {
    let meta = &mut pod.metadata;
    let labels = meta.labels.get_or_insert_default();
    for (k, v) in &template.labels {
        if !reserved_label(k) {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let annotations = meta.annotations.get_or_insert_default();
    for (k, v) in &template.annotations {
        if !reserved_annotation(k) {
            annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.node_selector =
        (!template.node_selector.is_empty()).then(|| template.node_selector.clone());
    spec.tolerations = (!template.tolerations.is_empty()).then(|| template.tolerations.clone());
    spec.affinity = template.affinity.clone();
    spec.topology_spread_constraints = (!template.topology_spread_constraints.is_empty())
        .then(|| template.topology_spread_constraints.clone());
    spec.priority_class_name = template.priority_class_name.clone();
    spec.image_pull_secrets =
        (!template.image_pull_secrets.is_empty()).then(|| template.image_pull_secrets.clone());
    if let Some(level) = &template.log_level {
        for c in &mut spec.containers {
            let env = c.env.get_or_insert_default();
            env.retain(|e| e.name != "RUST_LOG");
            env.push(EnvVar {
                name: "RUST_LOG".into(),
                value: Some(level.clone()),
                ..Default::default()
            });
        }
    }
}
