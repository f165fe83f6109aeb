//! Table tests of `spec.fetcher.template` on both kinds of fetcher pod — a topic's per-partition
//! pod and a pool pod (`crate::pods::template`): here, where both builders are in reach.

use std::collections::BTreeMap;

use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use serde_json::{Value, json};

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::FetcherPodTemplate;

use super::pod::{PoolPod, Units};
use crate::pods::template::hash_part;
use crate::pods::{ANNOTATION_SPEC_HASH, FetcherPod, LABEL_MIRROR, LABEL_MIRROR_TOPIC};

fn mirror(template: Value) -> ClusterMirror {
    let mut cm: ClusterMirror = serde_json::from_value(json!({
        "apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
        "metadata": {"name": "dr", "namespace": "ns"},
        "spec": {
            "source": {"bootstrapServers": "src:9092"},
            "destination": {"bootstrapServers": "dst:9092"},
            "fetcher": {"template": template, "podLabels": {"legacy": "yes"}}
        }
    }))
    .unwrap();
    cm.metadata.uid = Some("cm-uid".into());
    cm
}

fn topic() -> MirrorTopic {
    let mut mt: MirrorTopic = serde_json::from_value(json!({
        "apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
        "metadata": {"name": "orders", "namespace": "ns"},
        "spec": {"mirror": "dr", "sourceTopic": "orders"}
    }))
    .unwrap();
    mt.metadata.uid = Some("mt-uid".into());
    mt
}

/// The per-partition pod and the pool pod of `cm`.
fn both(cm: &ClusterMirror) -> [(&'static str, Pod); 2] {
    let mt = topic();
    let units: Units = BTreeMap::from([(
        "orders".to_string(),
        ("orders".to_string(), [0].into_iter().collect()),
    )]);
    [
        (
            "per-partition",
            FetcherPod {
                topic: &mt,
                mirror: cm,
                index: 0,
                partitions: &[0],
                default_image: "img",
                secrets_version: "s",
            }
            .build(),
        ),
        (
            "pool",
            PoolPod {
                mirror: cm,
                index: 0,
                units: &units,
                default_image: "img",
                secrets_version: "s",
            }
            .build(),
        ),
    ]
}

fn full() -> Value {
    json!({
        "labels": {"team": "payments"},
        "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
        "nodeSelector": {"pool": "kafka"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka",
                         "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"kmirror.io/mirror": "dr"}}}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"kmirror.io/mirror": "dr"}}}],
        "priorityClassName": "mirroring",
        "imagePullSecrets": [{"name": "registry"}],
        "logLevel": "debug,rdkafka=info"
    })
}

fn env(pod: &Pod, name: &str) -> Option<String> {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

#[test]
fn every_template_field_lands_on_per_partition_and_pool_pods() {
    let cm = mirror(full());
    for (kind, pod) in both(&cm) {
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "payments", "{kind}");
        assert_eq!(labels["legacy"], "yes", "{kind}: podLabels stay");
        assert_eq!(labels[LABEL_MIRROR], "dr", "{kind}");
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"], "true",
            "{kind}"
        );
        assert!(annotations.contains_key(ANNOTATION_SPEC_HASH), "{kind}");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_selector.as_ref().unwrap()["pool"], "kafka");
        let t = &spec.tolerations.as_ref().unwrap()[0];
        assert_eq!(
            (t.key.as_deref(), t.effect.as_deref()),
            (Some("dedicated"), Some("NoSchedule")),
            "{kind}"
        );
        let anti = spec.affinity.as_ref().unwrap().pod_anti_affinity.as_ref();
        assert_eq!(
            anti.unwrap()
                .preferred_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()[0]
                .weight,
            100,
            "{kind}"
        );
        let spread = &spec.topology_spread_constraints.as_ref().unwrap()[0];
        assert_eq!(spread.topology_key, "topology.kubernetes.io/zone", "{kind}");
        assert_eq!(spec.priority_class_name.as_deref(), Some("mirroring"));
        assert_eq!(
            spec.image_pull_secrets.as_ref().unwrap()[0].name,
            "registry"
        );
        assert_eq!(env(&pod, "RUST_LOG").as_deref(), Some("debug,rdkafka=info"));
        // The template only adds: the pod stays locked down.
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.host_network, None);
        let sc = spec.security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true), "{kind}");
    }
}

#[test]
fn kmirror_labels_and_annotations_win_over_the_template() {
    // Refused at admission and by validation; should one reach the builder, it is ignored.
    let cm = mirror(json!({
        "labels": {LABEL_MIRROR: "other", LABEL_MIRROR_TOPIC: "x",
                   "kmirror.io/pool": "x", "app.kubernetes.io/name": "evil",
                   "app.kubernetes.io/managed-by": "me", "kmirror.io/new": "x"},
        "annotations": {ANNOTATION_SPEC_HASH: "0", "kmirror.io/units": "x=1"}
    }));
    for (kind, pod) in both(&cm) {
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_MIRROR], "dr", "{kind}");
        assert_eq!(
            labels["app.kubernetes.io/name"], "kmirror-fetcher",
            "{kind}"
        );
        assert_eq!(labels["app.kubernetes.io/managed-by"], "kmirror-operator");
        assert!(!labels.contains_key("kmirror.io/new"), "{kind}");
        assert_ne!(
            labels.get(LABEL_MIRROR_TOPIC).map(String::as_str),
            Some("x")
        );
        assert_ne!(labels.get("kmirror.io/pool").map(String::as_str), Some("x"));
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_ne!(annotations[ANNOTATION_SPEC_HASH], "0", "{kind}");
        assert_ne!(
            annotations.get("kmirror.io/units").map(String::as_str),
            Some("x=1"),
            "{kind}"
        );
    }
}

#[test]
fn a_template_change_replaces_pods_and_no_template_keeps_the_old_hash() {
    let hash = |pod: &Pod| pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_SPEC_HASH].clone();
    let none = both(&mirror(json!({})));
    let empty_lists = both(&mirror(json!({"labels": {}, "tolerations": []})));
    let some = both(&mirror(full()));
    let mut changed = full();
    changed["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] = json!("false");
    let other = both(&mirror(changed));
    for i in 0..2 {
        assert_eq!(hash(&none[i].1), hash(&empty_lists[i].1), "{}", none[i].0);
        assert_ne!(hash(&none[i].1), hash(&some[i].1), "{}", none[i].0);
        assert_ne!(hash(&some[i].1), hash(&other[i].1), "{}", none[i].0);
    }
    assert_eq!(hash_part(&FetcherPodTemplate::default()), "");
    // Without a template the pod has none of its fields.
    let spec = none[0].1.spec.clone().unwrap();
    assert_eq!(
        (
            spec.node_selector,
            spec.tolerations,
            spec.priority_class_name
        ),
        (None, None, None)
    );
    assert_eq!(env(&none[0].1, "RUST_LOG"), None);
}
