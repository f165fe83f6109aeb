//! `spec.fetcher.template` through the operator on the bed: its labels, annotations, placement,
//! priority class, pull secrets and log level are on the fetcher pods of a per-partition mirror
//! and of a pooled one, the pods run; a template change replaces the pods; a priority class the
//! installation does not allow is refused (InvalidSpec) and creates no pod.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{create_topic, unique_name};
use kmirror_e2e::kube::is_ready;
use kmirror_e2e::operator::{OperatorProcess, Scenario};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// A priority class of the bed (cluster-wide, shared by runs: applied, never deleted).
const PRIORITY_CLASS: &str = "kmirror-e2e-fetcher";
const PRIORITY: i32 = 1000;
const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

async fn ensure_priority_class(client: &Client) {
    let pc: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS}, "value": PRIORITY,
        "preemptionPolicy": "Never", "description": "kmirror e2e: fetcher pod template"
    }))
    .unwrap();
    Api::<PriorityClass>::all(client.clone())
        .patch(
            PRIORITY_CLASS,
            &PatchParams::apply("kmirror-e2e").force(),
            &Patch::Apply(&pc),
        )
        .await
        .expect("apply PriorityClass");
}

fn template(mirror: &str, evict: &str) -> Value {
    json!({
        "labels": {"team": "payments"},
        "annotations": {SAFE_TO_EVICT: evict},
        "nodeSelector": {"kubernetes.io/hostname": "kmirror-node"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka",
                         "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"kmirror.io/mirror": mirror}}}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"kmirror.io/mirror": mirror}}}],
        "priorityClassName": PRIORITY_CLASS,
        "imagePullSecrets": [{"name": "registry-credentials"}],
        "logLevel": "debug,rdkafka=info"
    })
}

/// The ready pods of mirror `mirror`, not being deleted.
async fn ready_pods(s: &Scenario, mirror: &str) -> Vec<Pod> {
    s.pods()
        .await
        .into_iter()
        .filter(|p| p.labels().get("kmirror.io/mirror").map(String::as_str) == Some(mirror))
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
        .collect()
}

/// What of the template a pod lacks (empty: all of it is there).
fn missing(pod: &Pod, mirror: &str, evict: &str) -> Vec<&'static str> {
    let spec = pod.spec.clone().unwrap_or_default();
    let env = spec.containers[0].env.clone().unwrap_or_default();
    let anti = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref());
    [
        (
            "label",
            pod.labels().get("team").map(String::as_str) == Some("payments"),
        ),
        (
            "own label",
            pod.labels().get("kmirror.io/mirror").map(String::as_str) == Some(mirror),
        ),
        (
            "annotation",
            pod.annotations().get(SAFE_TO_EVICT).map(String::as_str) == Some(evict),
        ),
        (
            "nodeSelector",
            spec.node_selector
                .unwrap_or_default()
                .get("kubernetes.io/hostname")
                == Some(&"kmirror-node".to_string()),
        ),
        (
            "tolerations",
            spec.tolerations
                .unwrap_or_default()
                .iter()
                .any(|t| t.key.as_deref() == Some("dedicated")),
        ),
        ("affinity", anti.is_some()),
        (
            "topologySpreadConstraints",
            spec.topology_spread_constraints
                .is_some_and(|c| c.len() == 1),
        ),
        (
            "priorityClassName",
            spec.priority_class_name.as_deref() == Some(PRIORITY_CLASS),
        ),
        // Resolved by the apiserver's admission from the class: it exists and was applied.
        ("priority", spec.priority == Some(PRIORITY)),
        (
            "imagePullSecrets",
            spec.image_pull_secrets
                .unwrap_or_default()
                .iter()
                .any(|r| r.name == "registry-credentials"),
        ),
        (
            "RUST_LOG",
            env.iter()
                .any(|e| e.name == "RUST_LOG" && e.value.as_deref() == Some("debug,rdkafka=info")),
        ),
    ]
    .into_iter()
    .filter(|(_, ok)| !ok)
    .map(|(what, _)| what)
    .collect()
}

/// Waits until mirror `mirror` runs `n` ready pods carrying the whole template; returns them.
async fn wait_templated(s: &Scenario, mirror: &str, n: usize, evict: &str) -> Vec<Pod> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pods = ready_pods(s, mirror).await;
        let lacking: Vec<(String, Vec<&str>)> = pods
            .iter()
            .map(|p| (p.name_any(), missing(p, mirror, evict)))
            .filter(|(_, m)| !m.is_empty())
            .collect();
        if pods.len() == n && lacking.is_empty() {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "{mirror}: wanted {n} ready fetcher pods with the template ({evict}); {} ready, \
             lacking: {lacking:?}",
            pods.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn the_pod_template_is_on_per_partition_and_pool_pods_and_a_change_replaces_them() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "podtpl").await;
    ensure_priority_class(&s.client).await;
    let (per_partition, pooled, refused) = (
        unique_name("podtpl-pp"),
        unique_name("podtpl-pool"),
        unique_name("podtpl-bad"),
    );
    for topic in [&per_partition, &pooled, &refused] {
        create_topic(&bed.source_config(), topic, 2, &[])
            .await
            .unwrap();
    }
    let op = OperatorProcess::spawn(
        bed,
        &s.ns,
        &["--allowed-fetcher-priority-classes", PRIORITY_CLASS],
    );

    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = json!({"partitionsPerPod": 2, "template": template("pp", "true")});
    s.apply_mirror("pp", spec.clone()).await;
    let mut pool = Scenario::mirror_spec(bed);
    pool["fetcher"] = json!({"pool": {"pods": 1}, "template": template("pool", "true")});
    s.apply_mirror("pool", pool).await;
    s.apply_topic("a", json!({"mirror": "pp", "sourceTopic": per_partition}))
        .await;
    s.apply_topic("b", json!({"mirror": "pool", "sourceTopic": pooled}))
        .await;

    let before = wait_templated(&s, "pp", 1, "true").await;
    let pool_pods = wait_templated(&s, "pool", 1, "true").await;
    assert!(
        pool_pods[0].labels().contains_key("kmirror.io/pool"),
        "the pooled mirror runs a pool pod: {:?}",
        pool_pods[0].labels()
    );
    assert!(
        !before[0].labels().contains_key("kmirror.io/pool"),
        "the other mirror runs a per-topic pod"
    );

    // A template change replaces the pod (the template is in its spec hash).
    spec["fetcher"]["template"] = template("pp", "false");
    s.apply_mirror("pp", spec).await;
    let after = wait_templated(&s, "pp", 1, "false").await;
    assert_ne!(
        after[0].uid(),
        before[0].uid(),
        "a new pod for the new template"
    );

    // A priority class the installation does not allow: refused, and no pod.
    let mut bad = Scenario::mirror_spec(bed);
    bad["fetcher"] = json!({"template": {"priorityClassName": "system-cluster-critical"}});
    s.apply_mirror("bad", bad).await;
    s.apply_topic("c", json!({"mirror": "bad", "sourceTopic": refused}))
        .await;
    s.wait_mirror(
        "bad",
        "InvalidSpec naming the priority class",
        Duration::from_secs(60),
        |m| {
            m.status.as_ref().is_some_and(|st| {
                st.conditions.iter().any(|c| {
                    c.reason == "InvalidSpec"
                        && c.message
                            .contains("spec.fetcher.template.priorityClassName")
                        && c.message.contains("--allowed-fetcher-priority-classes")
                })
            })
        },
    )
    .await;
    assert!(
        s.pods()
            .await
            .iter()
            .all(|p| p.labels().get("kmirror.io/mirror").map(String::as_str) != Some("bad")),
        "a refused mirror runs no pod"
    );
    s.cleanup().await;
    drop(op);
}
