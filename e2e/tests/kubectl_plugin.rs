//! `kubectl mirror` against the real apiserver: status rendering from status fixtures written
//! through the status subresource, the spec changes of failover, pause, resume, retry and
//! resolve, the reverse mirror of failback, clear errors, and the verifier run against the real
//! Kafka clusters.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::FutureExt;
use kmirror_crds::v1alpha1::{
    ClusterMirror, DesiredState, DivergencePolicy, FailoverMode, MirrorTopic,
};
use kmirror_e2e::fetcher::{binary, ensure_state_topic};
use kmirror_e2e::kafka::{DestUser, create_topic, unique_name};
use kmirror_e2e::operator::Scenario;
use kmirror_e2e::{Testbed, has_row};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// What a plugin run printed and returned.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> &Self {
        assert_eq!(self.code, 0, "the plugin failed: {self:#?}");
        self
    }
}

fn plugin() -> PathBuf {
    binary("kubectl-mirror")
}

/// The plugin with the bed's kubeconfig, in namespace `ns`.
fn command(program: &Path, ns: &str, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(program);
    c.env("KUBECONFIG", Testbed::get().var("KUBECONFIG"))
        .args(["-n", ns])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

async fn finish(child: tokio::process::Child) -> Run {
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the plugin finishes within 2 minutes")
        .expect("run the plugin");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn mirror_cmd(ns: &str, args: &[&str]) -> Run {
    finish(
        command(&plugin(), ns, args)
            .spawn()
            .expect("start the plugin"),
    )
    .await
}

/// Runs `body` in a fresh namespace with the CRDs installed; the namespace is removed
/// afterwards, also when the body panics.
async fn scenario<F, Fut>(prefix: &str, body: F)
where
    F: FnOnce(Scenario) -> Fut,
    Fut: Future<Output = ()>,
{
    let s = Scenario::new(Testbed::get(), prefix).await;
    let handle = Scenario {
        client: s.client.clone(),
        ns: s.ns.clone(),
    };
    let outcome = AssertUnwindSafe(body(handle)).catch_unwind().await;
    s.cleanup().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn simple_mirror() -> Value {
    json!({
        "source": {"bootstrapServers": "source.example:9092"},
        "destination": {"bootstrapServers": "destination.example:9093",
            "allowInsecure": true,
            "sasl": {"mechanism": "PLAIN", "username": "mirror",
                     "password": {"name": "destination-credentials", "key": "password"}}}
    })
}

fn topic_spec(mirror: &str, source: &str) -> Value {
    json!({"mirror": mirror, "sourceTopic": source})
}

async fn set_topic_status(s: &Scenario, name: &str, status: Value) {
    Api::<MirrorTopic>::namespaced(s.client.clone(), &s.ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("status of MirrorTopic {name}: {e}"));
}

async fn set_mirror_status(s: &Scenario, name: &str, status: Value) {
    Api::<ClusterMirror>::namespaced(s.client.clone(), &s.ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("status of ClusterMirror {name}: {e}"));
}

fn part(partition: i32, state: &str) -> Value {
    json!({"partition": partition, "state": state})
}

fn with(mut v: Value, extra: Value) -> Value {
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

async fn topic(s: &Scenario, name: &str) -> MirrorTopic {
    s.topic(name)
        .await
        .unwrap_or_else(|| panic!("MirrorTopic {name} exists"))
}

/// Mirror `dr` with three topics (one with partition status, one pending, one failed) and an
/// empty mirror `spare`.
async fn status_fixtures(s: &Scenario) {
    s.apply_mirror("dr", simple_mirror()).await;
    s.apply_mirror("spare", simple_mirror()).await;
    set_mirror_status(
        s,
        "dr",
        json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Mirroring",
            "message": "every partition mirrors", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "topics": 2}),
    )
    .await;
    set_mirror_status(
        s,
        "spare",
        json!({"conditions": [{"type": "Ready", "status": "False", "reason": "SourceUnreachable",
            "message": "no broker of source.example:9092 answers",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    )
    .await;
    s.apply_topic("dr-orders", topic_spec("dr", "orders")).await;
    s.apply_topic("dr-payments", topic_spec("dr", "payments"))
        .await;
    set_topic_status(
        s,
        "dr-orders",
        json!({"phase": "Failed", "observedGeneration": 1, "maxLag": 120, "partitions": [
            with(part(0, "MIRRORING"), json!({"lag": 0, "lastMirroredOffset": 1499,
                "offsetsIdentical": true, "fetcherPod": "dr-orders-fetcher-0",
                "sourceLogEndOffset": 1500, "lagSeconds": 0.0})),
            with(part(1, "MIRRORING"), json!({"lag": 120, "lastMirroredOffset": 879,
                "offsetsIdentical": true, "fetcherPod": "dr-orders-fetcher-1"})),
            with(part(2, "FAILED"), json!({"lag": 7, "retryAttempt": -1,
                "lastError": "source cluster ID changed from abc to def"})),
        ]}),
    )
    .await;
}

#[tokio::test]
async fn status_shows_mirrors_topics_and_partitions() {
    scenario("kmp-status", |s| async move {
        status_fixtures(&s).await;
        // A MirrorTopic whose ClusterMirror does not exist (deleted, or a typo) is shown too.
        s.apply_topic("lost-audit", topic_spec("gone", "audit")).await;
        let ns = s.ns.as_str();

        let table = mirror_cmd(ns, &["status"]).await;
        table.ok();
        let out = &table.stdout;
        assert!(
            out.contains(&format!(
                "MIRROR {ns}/dr   READY True   source.example:9092 → destination.example:9093   TOPICS 2"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("MIRROR {ns}/spare   READY False (SourceUnreachable)")),
            "{out}"
        );
        assert!(out.contains("no broker of source.example:9092 answers"), "{out}");
        assert!(out.contains("(no MirrorTopics)"), "{out}");
        assert!(
            has_row(
                out,
                &["TOPIC", "PARTITION", "STATE", "LAG", "LAST-MIRRORED", "IDENTICAL", "POD", "ERROR"]
            ),
            "{out}"
        );
        assert!(
            has_row(out, &["orders", "0", "MIRRORING", "0", "1499", "yes", "dr-orders-fetcher-0"]),
            "{out}"
        );
        assert!(
            has_row(out, &["orders", "1", "MIRRORING", "120", "879", "yes", "dr-orders-fetcher-1"]),
            "{out}"
        );
        assert!(
            has_row(
                out,
                &["orders", "2", "FAILED", "7", "-", "-", "-", "source", "cluster", "ID", "changed"]
            ),
            "{out}"
        );
        assert!(has_row(out, &["payments", "-", "PENDING"]), "{out}");
        // `dr` is listed before `spare`.
        assert!(out.find("/dr ").unwrap() < out.find("/spare ").unwrap(), "{out}");
        assert!(
            out.contains(&format!(
                "MIRRORTOPIC {ns}/lost-audit   ClusterMirror gone not found: nothing mirrors it"
            )),
            "{out}"
        );
        assert!(has_row(out, &["audit", "-", "PENDING"]), "{out}");

        let one = mirror_cmd(ns, &["status", "dr"]).await;
        one.ok();
        assert!(!one.stdout.contains("spare"), "{}", one.stdout);
        assert!(!one.stdout.contains("lost-audit"), "{}", one.stdout);

        let json_run = mirror_cmd(ns, &["status", "-o", "json"]).await;
        json_run.ok();
        let doc: Value = serde_json::from_str(&json_run.stdout).expect("status -o json is JSON");
        let mirrors = doc["mirrors"].as_array().unwrap();
        assert_eq!(mirrors.len(), 2);
        let orphans = doc["orphanTopics"].as_array().expect("orphanTopics");
        assert_eq!(orphans.len(), 1, "{doc}");
        assert_eq!(orphans[0]["mirror"], "gone");
        assert_eq!(orphans[0]["name"], "lost-audit");
        assert_eq!(orphans[0]["sourceTopic"], "audit");
        let dr = &mirrors[0];
        assert_eq!(dr["namespace"], ns);
        assert_eq!(dr["name"], "dr");
        assert_eq!(dr["source"], "source.example:9092");
        assert_eq!(dr["destination"], "destination.example:9093");
        assert_eq!(dr["reverseOf"], Value::Null);
        assert_eq!(dr["ready"]["status"], "True");
        assert_eq!(dr["ready"]["reason"], "Mirroring");
        assert_eq!(dr["partitionCounts"]["total"], 3);
        assert_eq!(dr["partitionCounts"]["mirroring"], 2);
        assert_eq!(dr["partitionCounts"]["failed"], 1);
        let topics = dr["topics"].as_array().unwrap();
        assert_eq!(topics.len(), 2);
        assert_eq!(topics[0]["name"], "dr-orders");
        assert_eq!(topics[0]["sourceTopic"], "orders");
        assert_eq!(topics[0]["destinationTopic"], "orders");
        assert_eq!(topics[0]["desiredState"], "Mirroring");
        assert_eq!(topics[0]["failoverMode"], "Graceful");
        assert_eq!(topics[0]["phase"], "Failed");
        assert_eq!(topics[0]["maxLag"], 120);
        let p = &topics[0]["partitions"];
        assert_eq!(p.as_array().unwrap().len(), 3);
        assert_eq!(p[0]["partition"], 0);
        assert_eq!(p[0]["state"], "MIRRORING");
        assert_eq!(p[0]["lastMirroredOffset"], 1499);
        assert_eq!(p[0]["sourceLogEndOffset"], 1500);
        assert_eq!(p[0]["offsetsIdentical"], true);
        assert_eq!(p[0]["fetcherPod"], "dr-orders-fetcher-0");
        assert_eq!(p[0]["lastError"], Value::Null);
        assert_eq!(p[0]["divergence"], Value::Null);
        assert_eq!(p[2]["state"], "FAILED");
        assert_eq!(p[2]["retryAttempt"], -1);
        assert_eq!(p[2]["lastError"], "source cluster ID changed from abc to def");
        assert_eq!(topics[1]["name"], "dr-payments");
        assert_eq!(topics[1]["phase"], "Pending");
        assert_eq!(topics[1]["partitions"], json!([]));
        assert_eq!(mirrors[1]["name"], "spare");
        assert_eq!(mirrors[1]["ready"]["status"], "False");
        assert_eq!(mirrors[1]["topics"], json!([]));

        let yaml_run = mirror_cmd(ns, &["status", "-o", "yaml"]).await;
        yaml_run.ok();
        let from_yaml: Value = serde_yaml::from_str(&yaml_run.stdout).expect("YAML");
        assert_eq!(from_yaml, doc);
    })
    .await;
}

#[tokio::test]
async fn status_all_namespaces_lists_every_namespace() {
    scenario("kmp-all-a", |a| async move {
        scenario("kmp-all-b", |b| async move {
            a.apply_mirror("east", simple_mirror()).await;
            b.apply_mirror("west", simple_mirror()).await;
            b.apply_topic("west-t", topic_spec("west", "t")).await;

            let run = mirror_cmd(&a.ns, &["status", "-A"]).await;
            run.ok();
            assert!(
                run.stdout.contains(&format!("MIRROR {}/east ", a.ns)),
                "{}",
                run.stdout
            );
            assert!(
                run.stdout.contains(&format!("MIRROR {}/west ", b.ns)),
                "{}",
                run.stdout
            );
            assert!(
                has_row(&run.stdout, &["t", "-", "PENDING"]),
                "{}",
                run.stdout
            );

            let json_run = mirror_cmd(&a.ns, &["status", "-A", "-o", "json"]).await;
            json_run.ok();
            let doc: Value = serde_json::from_str(&json_run.stdout).unwrap();
            let ours: Vec<(String, String)> = doc["mirrors"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["namespace"] == a.ns.as_str() || m["namespace"] == b.ns.as_str())
                .map(|m| {
                    (
                        m["namespace"].as_str().unwrap().to_string(),
                        m["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            assert_eq!(
                ours,
                [(a.ns.clone(), "east".into()), (b.ns.clone(), "west".into())]
            );

            let named = mirror_cmd(&a.ns, &["status", "-A", "west", "-o", "json"]).await;
            named.ok();
            let doc: Value = serde_json::from_str(&named.stdout).unwrap();
            assert!(
                doc["mirrors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|m| m["name"] == "west")
            );

            let missing = mirror_cmd(&a.ns, &["status", "-A", "no-such-mirror-anywhere"]).await;
            assert_eq!(missing.code, 1, "{missing:#?}");
            assert!(
                missing.stderr.contains(
                    "ClusterMirror \"no-such-mirror-anywhere\" not found in any namespace"
                ),
                "{missing:#?}"
            );

            // Only the namespace asked for without -A.
            let only_a = mirror_cmd(&a.ns, &["status"]).await;
            only_a.ok();
            assert!(!only_a.stdout.contains("west"), "{}", only_a.stdout);
        })
        .await;
    })
    .await;
}

async fn three_topics(s: &Scenario) {
    s.apply_mirror("dr", simple_mirror()).await;
    s.apply_topic("dr-orders", topic_spec("dr", "orders")).await;
    s.apply_topic("pay", topic_spec("dr", "payments")).await;
    s.apply_topic("dr-audit", topic_spec("dr", "audit")).await;
    // A topic of another mirror must never be touched.
    s.apply_mirror("other", simple_mirror()).await;
    s.apply_topic("other-orders", topic_spec("other", "orders"))
        .await;
}

#[tokio::test]
async fn failover_patches_exactly_the_selected_topics() {
    scenario("kmp-failover", |s| async move {
        three_topics(&s).await;
        let ns = s.ns.as_str();
        // A failover mode configured in the spec stays unless a flag asks for another.
        s.apply_topic(
            "dr-orders",
            json!({"mirror": "dr", "sourceTopic": "orders", "failover": {"mode": "Immediate"}}),
        )
        .await;

        // By source topic and by object name.
        let run = mirror_cmd(
            ns,
            &["failover", "dr", "--topic", "orders", "--topic", "pay"],
        )
        .await;
        run.ok();
        assert!(
            run.stdout
                .contains("mirrortopic.kmirror.io/dr-orders patched"),
            "{run:#?}"
        );
        for (name, mode) in [
            ("dr-orders", FailoverMode::Immediate),
            ("pay", FailoverMode::Graceful),
        ] {
            let t = topic(&s, name).await;
            assert_eq!(t.spec.state, DesiredState::Stopped, "{name}");
            assert_eq!(
                t.spec.failover.mode, mode,
                "{name} keeps its configured mode"
            );
            assert_eq!(
                t.spec.failover.drain_timeout, "5m",
                "{name} keeps its drain timeout"
            );
            let managers: Vec<String> = t
                .metadata
                .managed_fields
                .unwrap_or_default()
                .into_iter()
                .filter_map(|m| m.manager)
                .collect();
            assert!(
                managers.contains(&"kubectl-mirror".to_string()),
                "{managers:?}"
            );
        }
        assert_eq!(
            topic(&s, "dr-audit").await.spec.state,
            DesiredState::Mirroring
        );
        assert_eq!(
            topic(&s, "other-orders").await.spec.state,
            DesiredState::Mirroring
        );

        let run = mirror_cmd(ns, &["failover", "dr", "--all", "--immediate"]).await;
        run.ok();
        for name in ["dr-orders", "pay", "dr-audit"] {
            let t = topic(&s, name).await;
            assert_eq!(t.spec.state, DesiredState::Stopped, "{name}");
            assert_eq!(t.spec.failover.mode, FailoverMode::Immediate, "{name}");
        }
        mirror_cmd(ns, &["failover", "dr", "--topic", "pay", "--graceful"])
            .await
            .ok();
        assert_eq!(
            topic(&s, "pay").await.spec.failover.mode,
            FailoverMode::Graceful,
            "--graceful asks for it"
        );
        assert_eq!(
            topic(&s, "other-orders").await.spec.state,
            DesiredState::Mirroring
        );
    })
    .await;
}

#[tokio::test]
async fn failover_wait_follows_partitions_and_prints_last_mirrored_offsets() {
    scenario("kmp-fo-wait", |s| async move {
        let ns = s.ns.clone();
        s.apply_mirror("dr", simple_mirror()).await;
        s.apply_topic("dr-orders", topic_spec("dr", "orders")).await;
        set_topic_status(
            &s,
            "dr-orders",
            json!({"observedGeneration": 1, "partitions": [
                with(part(0, "MIRRORING"), json!({"lag": 100})),
                with(part(1, "MIRRORING"), json!({"lag": 20})),
            ]}),
        )
        .await;
        let child = command(
            &plugin(),
            &ns,
            &[
                "failover",
                "dr",
                "--topic",
                "orders",
                "--wait",
                "--timeout",
                "90s",
            ],
        )
        .spawn()
        .unwrap();
        let waiter = tokio::spawn(finish(child));

        // The operator's part, played by the test: STOPPING, then STOPPED with the offsets.
        let t = s
            .wait_topic(
                "dr-orders",
                "spec.state Stopped",
                Duration::from_secs(30),
                |t| t.spec.state == DesiredState::Stopped,
            )
            .await;
        let generation = t.metadata.generation.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        set_topic_status(
            &s,
            "dr-orders",
            json!({"observedGeneration": generation, "partitions": [
                with(part(0, "STOPPED"), json!({"lag": 0, "lastMirroredOffset": 41})),
                with(part(1, "STOPPING"), json!({"lag": 3, "lastMirroredOffset": 95})),
            ]}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !waiter.is_finished(),
            "the wait ends only when every partition is STOPPED"
        );
        set_topic_status(
            &s,
            "dr-orders",
            json!({"observedGeneration": generation, "partitions": [
                with(part(0, "STOPPED"), json!({"lag": 0, "lastMirroredOffset": 41})),
                with(part(1, "STOPPED"), json!({"lag": 0, "lastMirroredOffset": 99})),
            ]}),
        )
        .await;
        let run = waiter.await.unwrap();
        run.ok();
        let out = &run.stdout;
        assert!(
            out.contains("orders: 1/2 partitions STOPPED, lag 3"),
            "{out}"
        );
        assert!(
            out.contains("orders: 2/2 partitions STOPPED, lag 0"),
            "{out}"
        );
        assert!(
            out.contains("failover complete: 2 partitions STOPPED"),
            "{out}"
        );
        assert!(
            has_row(
                out,
                &["TOPIC", "PARTITION", "STATE", "LAST-MIRRORED-OFFSET"]
            ),
            "{out}"
        );
        assert!(has_row(out, &["orders", "0", "STOPPED", "41"]), "{out}");
        assert!(has_row(out, &["orders", "1", "STOPPED", "99"]), "{out}");
    })
    .await;
}

#[tokio::test]
async fn failover_wait_times_out_with_failed_partitions_reported() {
    scenario("kmp-fo-timeout", |s| async move {
        s.apply_mirror("dr", simple_mirror()).await;
        s.apply_topic("dr-orders", topic_spec("dr", "orders")).await;
        set_topic_status(
            &s,
            "dr-orders",
            json!({"partitions": [
                with(part(0, "STOPPED"), json!({"lag": 0, "lastMirroredOffset": 9})),
                with(part(1, "FAILED"), json!({"lag": 5,
                    "lastError": "destination partition written by someone else at offset 12"})),
            ]}),
        )
        .await;
        let started = std::time::Instant::now();
        let run = mirror_cmd(
            &s.ns,
            &[
                "failover",
                "dr",
                "--topic",
                "orders",
                "--wait",
                "--timeout",
                "3s",
            ],
        )
        .await;
        assert_eq!(run.code, 3, "timed out: {run:#?}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert!(
            run.stderr
                .contains("error: timed out after 3s waiting for the failover of mirror \"dr\""),
            "{run:#?}"
        );
        assert!(
            run.stderr
                .contains("orders: 1/2 partitions STOPPED, 1 FAILED, lag 5"),
            "{run:#?}"
        );
        assert!(
            run.stderr.contains(
                "orders[1] FAILED: destination partition written by someone else at offset 12"
            ),
            "{run:#?}"
        );
        assert!(
            run.stdout
                .contains("orders[1] FAILED: destination partition written"),
            "failures are reported while waiting: {run:#?}"
        );
        // The spec change was made all the same.
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Stopped
        );
    })
    .await;
}

fn failback_mirror_spec() -> Value {
    json!({
        "source": {
            "bootstrapServers": "kafka-a.example:9093",
            "clusterId": "AAAAAAAAAAAAAAAAAAAAAA",
            "tls": {"ca": {"name": "a-tls", "key": "ca.crt"}},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "admin",
                     "password": {"name": "a-creds", "key": "password"}},
            "properties": {"client.id": "from-a"}
        },
        "destination": {
            "bootstrapServers": "kafka-b.example:9092",
            "allowInsecure": true,
            "sasl": {"mechanism": "PLAIN", "username": "mirror",
                     "password": {"name": "destination-credentials", "key": "password"}}
        },
        "topics": {"include": [{"prefix": "orders"}]},
        "stateTopic": "__kmirror_state_dr",
        "sync": {"interval": "9s", "consumerGroups": {"include": [{"prefix": "billing-"}]}},
        "fetcher": {"partitionsPerPod": 2, "throttleBytesPerSecond": 1048576}
    })
}

async fn failback_fixtures(s: &Scenario) {
    s.apply_mirror("dr", failback_mirror_spec()).await;
    s.apply_topic("dr-orders", topic_spec("dr", "orders")).await;
    s.apply_topic(
        "dr-payments",
        json!({"mirror": "dr", "sourceTopic": "payments", "destinationTopic": "payments-dr"}),
    )
    .await;
    s.apply_topic("dr-audit", topic_spec("dr", "audit")).await;
    // orders and payments are failed over; audit still mirrors.
    for name in ["dr-orders", "dr-payments"] {
        s.patch_topic(name, json!({"state": "Stopped"})).await;
        set_topic_status(
            s,
            name,
            json!({"partitions": [
                with(part(0, "STOPPED"), json!({"lastMirroredOffset": 10})),
                with(part(1, "STOPPED"), json!({"lastMirroredOffset": 20})),
            ]}),
        )
        .await;
    }
    set_topic_status(s, "dr-audit", json!({"partitions": [part(0, "MIRRORING")]})).await;
}

#[tokio::test]
async fn failback_creates_the_reverse_mirror_and_topics() {
    scenario("kmp-failback", |s| async move {
        failback_fixtures(&s).await;
        let ns = s.ns.clone();
        let mirrors: Api<ClusterMirror> = Api::namespaced(s.client.clone(), &ns);

        // A topic still mirroring is refused, and nothing is created.
        let refused = mirror_cmd(
            &ns,
            &["failback", "dr", "--topic", "orders", "--topic", "audit"],
        )
        .await;
        assert_eq!(refused.code, 1, "{refused:#?}");
        assert!(
            refused
                .stderr
                .contains("not every selected topic is failed over (STOPPED)")
                && refused
                    .stderr
                    .contains("audit: its spec.state is Mirroring")
                && refused.stderr.contains("kubectl mirror failover dr")
                && refused.stderr.contains("--force"),
            "{refused:#?}"
        );
        assert!(mirrors.get_opt("dr-failback").await.unwrap().is_none());

        // --dry-run=client prints the objects and creates nothing.
        let dry = mirror_cmd(
            &ns,
            &["failback", "dr", "--topic", "orders", "--dry-run=client"],
        )
        .await;
        dry.ok();
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&dry.stdout)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 2, "{}", dry.stdout);
        assert_eq!(docs[0]["kind"], "ClusterMirror");
        assert_eq!(docs[1]["kind"], "MirrorTopic");
        assert!(mirrors.get_opt("dr-failback").await.unwrap().is_none());
        // --dry-run (server): the API server admits both objects and stores nothing.
        let dry = mirror_cmd(&ns, &["failback", "dr", "--topic", "orders", "--dry-run"]).await;
        dry.ok();
        assert!(
            dry.stdout
                .contains("clustermirror.kmirror.io/dr-failback created (server dry run)")
                && dry
                    .stdout
                    .contains("created (server dry run) (orders → orders)"),
            "{dry:#?}"
        );
        assert!(mirrors.get_opt("dr-failback").await.unwrap().is_none());
        assert!(
            s.topics()
                .await
                .iter()
                .all(|t| t.spec.mirror != "dr-failback"),
            "a server dry run creates no MirrorTopic"
        );

        let run = mirror_cmd(
            &ns,
            &[
                "failback",
                "dr",
                "--topic",
                "orders",
                "--topic",
                "dr-payments",
                "--divergence-policy",
                "KeepAndTranslate",
            ],
        )
        .await;
        run.ok();
        assert!(
            run.stdout
                .contains("clustermirror.kmirror.io/dr-failback created"),
            "{run:#?}"
        );

        let old = s.mirror("dr").await;
        let reverse = s.mirror("dr-failback").await;
        let old_spec = serde_json::to_value(&old.spec).unwrap();
        let rev_spec = serde_json::to_value(&reverse.spec).unwrap();
        assert_eq!(rev_spec["source"], old_spec["destination"]);
        assert_eq!(rev_spec["destination"], old_spec["source"]);
        assert_eq!(
            rev_spec["source"]["sasl"]["password"]["name"],
            "destination-credentials"
        );
        assert_eq!(rev_spec["destination"]["tls"]["ca"]["name"], "a-tls");
        assert_eq!(
            rev_spec["destination"]["clusterId"],
            "AAAAAAAAAAAAAAAAAAAAAA"
        );
        assert_eq!(rev_spec["reverseOf"], format!("{ns}/dr"));
        assert_eq!(rev_spec["stateTopic"], "__kmirror_state_dr");
        assert_eq!(rev_spec["sync"], old_spec["sync"]);
        assert_eq!(rev_spec["fetcher"], old_spec["fetcher"]);
        assert_eq!(
            rev_spec["topics"],
            json!({}),
            "no filters on the reverse mirror"
        );

        let orders = topic(&s, "dr-failback-dr-orders").await;
        assert_eq!(orders.spec.mirror, "dr-failback");
        assert_eq!(orders.spec.source_topic, "orders");
        assert_eq!(orders.spec.destination_topic.as_deref(), Some("orders"));
        assert_eq!(orders.spec.state, DesiredState::Mirroring);
        assert_eq!(
            orders.spec.divergence_policy,
            Some(DivergencePolicy::KeepAndTranslate)
        );
        let payments = topic(&s, "dr-failback-dr-payments").await;
        assert_eq!(payments.spec.source_topic, "payments-dr");
        assert_eq!(payments.spec.destination_topic.as_deref(), Some("payments"));
        assert!(s.topic("dr-failback-dr-audit").await.is_none());
        let reverse_topics: Vec<String> = s
            .topics()
            .await
            .into_iter()
            .filter(|t| t.spec.mirror == "dr-failback")
            .map(|t| t.metadata.name.unwrap())
            .collect();
        assert_eq!(reverse_topics.len(), 2, "{reverse_topics:?}");

        // Running it again keeps what exists.
        let again = mirror_cmd(&ns, &["failback", "dr", "--topic", "orders"]).await;
        again.ok();
        assert!(again.stdout.contains("unchanged"), "{again:#?}");

        // --force takes a topic that is not failed over, with a warning.
        let forced = mirror_cmd(&ns, &["failback", "dr", "--topic", "audit", "--force"]).await;
        forced.ok();
        assert!(
            forced.stderr.contains("warning: not every selected topic"),
            "{forced:#?}"
        );
        assert_eq!(
            topic(&s, "dr-failback-dr-audit").await.spec.source_topic,
            "audit"
        );

        // A name taken by an unrelated mirror is refused.
        s.apply_mirror("taken", simple_mirror()).await;
        let clash = mirror_cmd(
            &ns,
            &["failback", "dr", "--topic", "orders", "--name", "taken"],
        )
        .await;
        assert_eq!(clash.code, 1, "{clash:#?}");
        assert!(clash.stderr.contains("is not the reverse of"), "{clash:#?}");
        let bad = mirror_cmd(&ns, &["failback", "dr", "--all", "--name", "Not_Valid"]).await;
        assert_eq!(bad.code, 2, "{bad:#?}");
    })
    .await;
}

#[tokio::test]
async fn failback_wait_reports_divergence_then_resolve_and_mirroring() {
    scenario("kmp-fb-wait", |s| async move {
        failback_fixtures(&s).await;
        let ns = s.ns.clone();
        let child = command(
            &plugin(),
            &ns,
            &["failback", "dr", "--topic", "orders", "--wait", "--timeout", "90s"],
        )
        .spawn()
        .unwrap();
        let waiter = tokio::spawn(finish(child));
        s.wait_topic("dr-failback-dr-orders", "created", Duration::from_secs(30), |_| true)
            .await;
        set_topic_status(
            &s,
            "dr-failback-dr-orders",
            json!({"observedGeneration": 1, "partitions": [
                with(part(0, "PREPARING"), json!({"divergence": {"fromOffset": 11, "toOffset": 31,
                    "quarantineTopic": "orders.kmirror-quarantine", "quarantinedRecords": 20}})),
                with(part(1, "MIRRORING"), json!({"lag": 0})),
            ]}),
        )
        .await;
        let run = waiter.await.unwrap();
        assert_eq!(run.code, 5, "divergence: {run:#?}");
        assert!(
            run.stdout.contains(
                "orders[0]: offsets 11–30 (20 records) were written to the old source after the \
                 last mirrored offset; copies are in quarantine topic orders.kmirror-quarantine"
            ),
            "{run:#?}"
        );
        assert!(
            run.stderr.contains(&format!(
                "kubectl mirror resolve dr-failback -n {ns} --topic orders --policy Recreate|KeepAndTranslate"
            )),
            "{run:#?}"
        );

        let resolved = mirror_cmd(
            &ns,
            &["resolve", "dr-failback", "--topic", "orders", "--policy", "Recreate"],
        )
        .await;
        resolved.ok();
        assert_eq!(
            topic(&s, "dr-failback-dr-orders").await.spec.divergence_policy,
            Some(DivergencePolicy::Recreate)
        );

        // With a policy set the wait goes on until every partition mirrors.
        let child = command(
            &plugin(),
            &ns,
            &["failback", "dr", "--topic", "orders", "--wait", "--timeout", "90s"],
        )
        .spawn()
        .unwrap();
        let waiter = tokio::spawn(finish(child));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!waiter.is_finished(), "a divergence with a policy set does not end the wait");
        let generation = topic(&s, "dr-failback-dr-orders").await.metadata.generation;
        set_topic_status(
            &s,
            "dr-failback-dr-orders",
            json!({"observedGeneration": generation, "partitions": [
                with(part(0, "MIRRORING"), json!({"lag": 0, "divergence": {"fromOffset": 11,
                    "toOffset": 31, "quarantineTopic": "orders.kmirror-quarantine",
                    "quarantinedRecords": 20, "resolution": "Recreate"}})),
                with(part(1, "MIRRORING"), json!({"lag": 0})),
            ]}),
        )
        .await;
        let run = waiter.await.unwrap();
        run.ok();
        assert!(run.stdout.contains("orders: 2/2 partitions MIRRORING"), "{run:#?}");
        assert!(run.stdout.contains("every partition of the reverse mirror"), "{run:#?}");
    })
    .await;
}

#[tokio::test]
async fn pause_resume_retry_and_resolve_patch_their_fields() {
    scenario("kmp-patch", |s| async move {
        three_topics(&s).await;
        let ns = s.ns.as_str();

        mirror_cmd(ns, &["pause", "dr", "--topic", "orders"])
            .await
            .ok();
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Paused
        );
        assert_eq!(topic(&s, "pay").await.spec.state, DesiredState::Mirroring);

        mirror_cmd(ns, &["pause", "dr", "--all"]).await.ok();
        for name in ["dr-orders", "pay", "dr-audit"] {
            assert_eq!(
                topic(&s, name).await.spec.state,
                DesiredState::Paused,
                "{name}"
            );
        }
        assert_eq!(
            topic(&s, "other-orders").await.spec.state,
            DesiredState::Mirroring
        );

        mirror_cmd(
            ns,
            &["resume", "dr", "--topic", "audit", "--topic", "payments"],
        )
        .await
        .ok();
        assert_eq!(
            topic(&s, "dr-audit").await.spec.state,
            DesiredState::Mirroring
        );
        assert_eq!(topic(&s, "pay").await.spec.state, DesiredState::Mirroring);
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Paused
        );

        let retry_value = |t: MirrorTopic| {
            t.metadata
                .annotations
                .unwrap_or_default()
                .get("kmirror.io/retry")
                .cloned()
        };
        mirror_cmd(ns, &["retry", "dr", "--topic", "orders"])
            .await
            .ok();
        let first = retry_value(topic(&s, "dr-orders").await).expect("retry annotation");
        assert!(retry_value(topic(&s, "pay").await).is_none());
        mirror_cmd(ns, &["retry", "dr", "--all"]).await.ok();
        let second = retry_value(topic(&s, "dr-orders").await).unwrap();
        assert_ne!(first, second, "every retry writes a new value");
        assert!(retry_value(topic(&s, "pay").await).is_some());
        assert!(retry_value(topic(&s, "other-orders").await).is_none());

        let resolved = mirror_cmd(
            ns,
            &[
                "resolve",
                "dr",
                "--topic",
                "orders",
                "--policy",
                "KeepAndTranslate",
            ],
        )
        .await;
        resolved.ok();
        assert!(
            resolved.stderr.contains("has no spec.reverseOf"),
            "{resolved:#?}"
        );
        assert_eq!(
            topic(&s, "dr-orders").await.spec.divergence_policy,
            Some(DivergencePolicy::KeepAndTranslate)
        );
        assert_eq!(topic(&s, "pay").await.spec.divergence_policy, None);

        // The API's own rules come through: a stopped topic cannot be paused.
        mirror_cmd(ns, &["failover", "dr", "--topic", "audit"])
            .await
            .ok();
        let refused = mirror_cmd(ns, &["pause", "dr", "--topic", "audit"]).await;
        assert_eq!(refused.code, 4, "{refused:#?}");
        assert!(
            refused.stderr.contains("MirrorTopic \"dr-audit\"")
                && refused.stderr.contains("a Stopped topic cannot be Paused"),
            "{refused:#?}"
        );
        let resumed = mirror_cmd(ns, &["resume", "dr", "--topic", "audit"]).await;
        resumed.ok();
        assert!(
            resumed
                .stderr
                .contains("note: audit was failed over (Stopped)"),
            "{resumed:#?}"
        );
        assert_eq!(
            topic(&s, "dr-audit").await.spec.state,
            DesiredState::Mirroring
        );
    })
    .await;
}

#[tokio::test]
async fn errors_are_clear_and_exit_non_zero() {
    scenario("kmp-errors", |s| async move {
        three_topics(&s).await;
        let ns = s.ns.as_str();
        let expected = format!("error: ClusterMirror \"nope\" not found in namespace \"{ns}\"");
        for args in [
            vec!["status", "nope"],
            vec!["failover", "nope", "--all"],
            vec!["failback", "nope", "--all"],
            vec!["pause", "nope", "--topic", "x"],
            vec!["verify", "nope"],
        ] {
            let run = mirror_cmd(ns, &args).await;
            assert_eq!(run.code, 1, "{args:?}: {run:#?}");
            assert_eq!(run.stderr.trim(), expected, "{args:?}");
        }

        let run = mirror_cmd(ns, &["failover", "dr", "--topic", "nope"]).await;
        assert_eq!(run.code, 1, "{run:#?}");
        assert_eq!(
            run.stderr.trim(),
            format!(
                "error: topic \"nope\" not found in ClusterMirror \"dr\" in namespace \"{ns}\"; \
                 its topics are: audit (MirrorTopic dr-audit), orders (MirrorTopic dr-orders), \
                 payments (MirrorTopic pay)"
            )
        );
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Mirroring
        );

        for args in [
            vec!["failover", "dr"],
            vec!["pause", "dr"],
            vec!["failback", "dr"],
            vec!["retry", "dr"],
        ] {
            let run = mirror_cmd(ns, &args).await;
            assert_eq!(run.code, 2, "{args:?}: {run:#?}");
            assert!(
                run.stderr.contains("--topic") && run.stderr.contains("--all"),
                "{args:?}: {run:#?}"
            );
        }
        let run = mirror_cmd(ns, &["failover", "dr", "--all", "--topic", "orders"]).await;
        assert_eq!(run.code, 2, "{run:#?}");
        let run = mirror_cmd(ns, &["status", "-o", "xml"]).await;
        assert_eq!(run.code, 2, "{run:#?}");

        // An API server nobody listens on.
        let kubeconfig = std::fs::read_to_string(Testbed::get().var("KUBECONFIG")).unwrap();
        let port = kmirror_e2e::operator::free_port();
        let server = Testbed::get().var("KMIRROR_APISERVER");
        let dead = std::env::temp_dir().join(format!("{}.kubeconfig", unique_name("kmp-dead")));
        std::fs::write(
            &dead,
            kubeconfig.replace(server, &format!("https://127.0.0.1:{port}")),
        )
        .unwrap();
        let run = mirror_cmd(ns, &["--kubeconfig", dead.to_str().unwrap(), "status"]).await;
        let _ = std::fs::remove_file(&dead);
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(
            run.stderr.contains(&format!(
                "error: cannot reach the Kubernetes API server at https://127.0.0.1:{port}"
            )),
            "{run:#?}"
        );
        let run = mirror_cmd(ns, &["--context", "no-such-context", "status"]).await;
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(
            run.stderr
                .contains("context \"no-such-context\" does not exist"),
            "{run:#?}"
        );
    })
    .await;
}

#[tokio::test]
async fn runs_as_kubectl_mirror() {
    scenario("kmp-kubectl", |s| async move {
        s.apply_mirror("dr", simple_mirror()).await;
        let bed = Testbed::get();
        let dir = plugin().parent().unwrap().to_path_buf();
        let path = format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = tokio::process::Command::new(bed.var("KMIRROR_KUBECTL"))
            .args(["mirror", "status", "-n", &s.ns])
            .env("KUBECONFIG", bed.var("KUBECONFIG"))
            .env("PATH", path)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert!(stdout.contains(&format!("MIRROR {}/dr ", s.ns)), "{stdout}");
    })
    .await;
}

/// Reads `lines` into `out` until `done(out)` holds; panics after 30 s.
async fn read_until<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    out: &mut String,
    done: impl Fn(&str) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(out) {
        match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Ok(Ok(Some(l))) => {
                out.push_str(&l);
                out.push('\n');
            }
            other => panic!("the expected output did not come ({other:?}):\n{out}"),
        }
    }
}

#[tokio::test]
async fn status_watch_prints_a_block_per_change() {
    use tokio::io::AsyncBufReadExt;
    scenario("kmp-watch", |s| async move {
        s.apply_mirror("dr", simple_mirror()).await;
        s.apply_topic("dr-orders", topic_spec("dr", "orders")).await;
        set_topic_status(
            &s,
            "dr-orders",
            json!({"partitions": [part(0, "PREPARING")]}),
        )
        .await;
        let mut child = command(&plugin(), &s.ns, &["status", "dr", "--watch"])
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut out = String::new();
        read_until(&mut lines, &mut out, |o| {
            has_row(o, &["orders", "0", "PREPARING"])
        })
        .await;
        set_topic_status(
            &s,
            "dr-orders",
            json!({"partitions": [with(part(0, "MIRRORING"), json!({"lag": 0}))]}),
        )
        .await;
        read_until(&mut lines, &mut out, |o| {
            has_row(o, &["orders", "0", "MIRRORING"])
        })
        .await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "--watch goes on until interrupted"
        );
        child.start_kill().unwrap();
        // Not a terminal: every block is appended after a timestamp line.
        let stamps: Vec<usize> = out
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("# 20") && l.ends_with('Z'))
            .map(|(i, _)| i)
            .collect();
        assert!(stamps.len() >= 2 && stamps[0] == 0, "{out}");
        let last = out
            .lines()
            .skip(*stamps.last().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!has_row(&last, &["orders", "0", "PREPARING"]), "{out}");
        assert!(
            out.find("PREPARING").unwrap() < out.find("MIRRORING").unwrap(),
            "{out}"
        );
    })
    .await;
}

#[tokio::test]
async fn exit_codes_tell_timeout_refusal_and_divergence_apart() {
    scenario("kmp-codes", |s| async move {
        let ns = s.ns.clone();
        s.apply_mirror("dr", simple_mirror()).await;
        s.apply_topic(
            "dr-orders",
            json!({"mirror": "dr", "sourceTopic": "orders", "failover": {"drainTimeout": "10s"}}),
        )
        .await;
        s.apply_topic("dr-bad", topic_spec("dr", "bad")).await;
        set_topic_status(&s, "dr-orders", json!({"partitions": [part(0, "MIRRORING")]})).await;
        set_topic_status(
            &s,
            "dr-bad",
            json!({"conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec",
                "message": "spec.destinationTopic: must differ", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        )
        .await;

        // --wait on pause (new): the default timeout comes from the topic's drain timeout.
        let child = command(&plugin(), &ns, &["pause", "dr", "--topic", "orders", "--wait"])
            .spawn()
            .unwrap();
        let waiter = tokio::spawn(finish(child));
        let t = s
            .wait_topic("dr-orders", "spec.state Paused", Duration::from_secs(30), |t| {
                t.spec.state == DesiredState::Paused
            })
            .await;
        set_topic_status(
            &s,
            "dr-orders",
            json!({"observedGeneration": t.metadata.generation, "partitions": [part(0, "PAUSED")]}),
        )
        .await;
        let run = waiter.await.unwrap();
        run.ok();
        assert!(run.stdout.contains("waiting up to 1m20s"), "{run:#?}");
        assert!(run.stdout.contains("orders: 1/1 partitions PAUSED"), "{run:#?}");

        // 3: timed out; the change goes on.
        let run = mirror_cmd(&ns, &["resume", "dr", "--topic", "orders", "--wait", "--timeout", "1s"]).await;
        assert_eq!(run.code, 3, "{run:#?}");
        assert!(
            run.stderr.contains("timed out after 1s") && run.stderr.contains("may still complete"),
            "{run:#?}"
        );
        // 4: the operator refuses the topic, the API server refuses the change, RBAC forbids it.
        let run = mirror_cmd(&ns, &["failover", "dr", "--topic", "bad", "--wait", "--timeout", "30s"]).await;
        assert_eq!(run.code, 4, "{run:#?}");
        assert!(run.stderr.contains("InvalidSpec"), "{run:#?}");
        let run = mirror_cmd(&ns, &["pause", "dr", "--topic", "bad"]).await;
        assert_eq!(run.code, 4, "{run:#?}");
        assert!(run.stderr.contains("a Stopped topic cannot be Paused"), "{run:#?}");
        let run = mirror_cmd(&ns, &["--as", "nobody", "pause", "dr", "--all"]).await;
        assert_eq!(run.code, 4, "{run:#?}");
        assert!(run.stderr.contains("forbidden"), "{run:#?}");
        // 2: usage.
        assert_eq!(mirror_cmd(&ns, &["pause", "dr", "--wait", "--dry-run", "--all"]).await.code, 2);
    })
    .await;
}

/// A copy of the plugin in its own directory (so that no kmirror-verify sits next to it).
fn lone_plugin(dir: &Path) -> PathBuf {
    let copy = dir.join("kubectl-mirror");
    std::fs::copy(plugin(), &copy).unwrap();
    copy
}

fn scratch_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn verify_without_the_verifier_says_so_and_passes_no_secret_in_arguments() {
    scenario("kmp-verify-args", |s| async move {
        let ns = s.ns.clone();
        s.secret("a-tls", "ca.crt", "-----BEGIN CERTIFICATE-----\nCA-SECRET-MATERIAL\n")
            .await;
        s.secret("a-creds", "password", "A-PASSWORD-SECRET").await;
        s.apply_mirror("dr", failback_mirror_spec()).await;
        s.apply_topic("dr-orders", topic_spec("dr", "orders")).await;
        set_topic_status(&s, "dr-orders", json!({"partitions": [part(0, "MIRRORING"), part(1, "MIRRORING")]}))
            .await;
        let mirror_password = Testbed::get().var("KMIRROR_MIRROR_PASSWORD").to_string();

        let dir = scratch_dir("kmp-verify-args");
        let bin = dir.join("bin");
        let empty = dir.join("empty");
        let tmp = dir.join("tmp");
        for d in [&bin, &empty, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        let lone = lone_plugin(&bin);

        let missing = finish(
            command(&lone, &ns, &["verify", "dr"])
                .env("PATH", &empty)
                .spawn()
                .unwrap(),
        )
        .await;
        assert_eq!(missing.code, 1, "{missing:#?}");
        assert!(
            missing.stderr.contains("error: kmirror-verify not found")
                && missing.stderr.contains(&bin.join("kmirror-verify").display().to_string())
                && missing.stderr.contains("PATH"),
            "{missing:#?}"
        );

        // A stand-in verifier in PATH records what it is given (names of files, and their modes).
        let record = dir.join("args.txt");
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{rec}'\n\
             for a in \"$@\"; do case \"$a\" in *=/*) p=\"${{a#*=}}\"; \
             if [ -f \"$p\" ]; then stat -c '%a' \"$p\" >> '{rec}.modes'; fi;; esac; done\n\
             echo '{{\"partition\":0,\"sourceRecords\":3,\"matched\":3,\"missing\":0,\"different\":0,\"extra\":0,\"trailing\":0,\"offsetsIdentical\":true,\"examples\":[]}}'\n",
            rec = record.display()
        );
        let fake = empty.join("kmirror-verify");
        std::fs::write(&fake, script).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = finish(
            command(&lone, &ns, &["verify", "dr"])
                .env("PATH", format!("{}:/usr/bin:/bin", empty.display()))
                .env("TMPDIR", &tmp)
                .spawn()
                .unwrap(),
        )
        .await;
        run.ok();
        assert!(has_row(&run.stdout, &["orders", "0", "clean", "3", "3"]), "{run:#?}");
        let args = std::fs::read_to_string(&record).unwrap();
        for secret in ["CA-SECRET-MATERIAL", "A-PASSWORD-SECRET", mirror_password.as_str()] {
            assert!(!args.contains(secret), "a secret value is in the arguments:\n{args}");
        }
        let lines: Vec<&str> = args.lines().collect();
        let after = |flag: &str| -> Vec<&str> {
            lines
                .windows(2)
                .filter(|w| w[0] == flag)
                .map(|w| w[1])
                .collect()
        };
        assert_eq!(after("--mirror"), [format!("{ns}/dr")]);
        assert_eq!(after("--source-topic"), ["orders"]);
        assert_eq!(after("--destination-topic"), ["orders"]);
        assert_eq!(after("--partitions"), ["0,1"]);
        assert_eq!(after("--state-topic"), ["__kmirror_state_dr"]);
        assert_eq!(after("--source-bootstrap"), ["kafka-a.example:9093"]);
        let source_props = after("--source-property");
        for p in [
            "security.protocol=SASL_SSL",
            "sasl.mechanism=SCRAM-SHA-512",
            "sasl.username=admin",
            "client.id=from-a",
        ] {
            assert!(source_props.contains(&p), "{p} in {source_props:?}");
        }
        assert!(
            source_props.iter().any(|p| p.starts_with("ssl.ca.location=/")),
            "{source_props:?}"
        );
        let files = after("--source-property-file");
        assert!(files.len() == 1 && files[0].starts_with("sasl.password=/"), "{files:?}");
        assert!(after("--destination-property").contains(&"security.protocol=SASL_PLAINTEXT"));
        let modes = std::fs::read_to_string(format!("{}.modes", record.display())).unwrap();
        assert_eq!(modes.lines().collect::<Vec<_>>(), ["600", "600", "600"], "{modes}");
        assert_eq!(
            std::fs::read_dir(&tmp).unwrap().count(),
            0,
            "the private directory is removed afterwards"
        );

        // A missing Secret is named.
        let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(s.client.clone(), &ns);
        api.delete("a-creds", &Default::default()).await.unwrap();
        let run = finish(
            command(&lone, &ns, &["verify", "dr"])
                .env("PATH", format!("{}:/usr/bin:/bin", empty.display()))
                .spawn()
                .unwrap(),
        )
        .await;
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(
            run.stderr.contains(
                "spec.source.sasl.password refers to key \"password\" of Secret \"a-creds\""
            ),
            "{run:#?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

/// Produces `count` records with fixed timestamps to each partition, the same on any cluster.
fn produce_same(config: &rdkafka::ClientConfig, topic: &str, partitions: i32, count: i32) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let before: Vec<i64> = (0..partitions)
        .map(|p| {
            kmirror_e2e::kafka::watermarks(config, topic, p)
                .expect("watermarks")
                .1
        })
        .collect();
    let producer: BaseProducer = config
        .clone()
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for p in 0..partitions {
        for i in 0..count {
            let key = format!("key-{p}-{i}");
            let value = format!("value {i} of partition {p}");
            producer
                .send(
                    BaseRecord::to(topic)
                        .partition(p)
                        .key(&key)
                        .payload(&value)
                        .timestamp(1_700_000_000_000 + i64::from(i)),
                )
                .map_err(|(e, _)| e)
                .expect("send");
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    // flush() does not report failed deliveries: every partition must hold what was sent, so
    // that a verifier reading fewer records is the verifier's doing.
    for (p, before) in (0..partitions).zip(before) {
        let (_, high) = kmirror_e2e::kafka::watermarks(config, topic, p).expect("watermarks");
        assert_eq!(
            high - before,
            i64::from(count),
            "{topic}/{p}: records written"
        );
    }
}

#[tokio::test]
async fn verify_runs_the_verifier_against_the_real_clusters() {
    scenario("kmp-verify", |s| async move {
        let bed = Testbed::get();
        ensure_state_topic(bed);
        let _ = binary("kmirror-verify");
        let ns = s.ns.clone();
        let topic_name = unique_name("kmp-verify");
        create_topic(&bed.source_config(), &topic_name, 2, &[]).await.unwrap();
        create_topic(&bed.dest_config(DestUser::Admin), &topic_name, 2, &[])
            .await
            .unwrap();
        produce_same(&bed.source_config(), &topic_name, 2, 25);
        produce_same(&bed.dest_config(DestUser::Admin), &topic_name, 2, 25);

        // The source over SASL_SSL with the bed's CA from a Secret; the destination as admin.
        let ca = std::fs::read_to_string(bed.var("KMIRROR_CA")).unwrap();
        s.secret("source-tls", "ca.crt", &ca).await;
        s.secret("source-credentials", "password", bed.var("KMIRROR_ADMIN_PASSWORD"))
            .await;
        s.secret("destination-admin", "password", bed.var("KMIRROR_ADMIN_PASSWORD"))
            .await;
        s.apply_mirror(
            "dr",
            json!({
                "source": {
                    "bootstrapServers": bed.var("KMIRROR_SOURCE_SASL_SSL_BOOTSTRAP"),
                    "tls": {"ca": {"name": "source-tls", "key": "ca.crt"}},
                    "sasl": {"mechanism": "SCRAM-SHA-512", "username": bed.var("KMIRROR_ADMIN_USER"),
                             "password": {"name": "source-credentials", "key": "password"}}
                },
                "destination": {
                    "bootstrapServers": bed.dest_bootstrap(),
                    "allowInsecure": true,
                    "sasl": {"mechanism": "PLAIN", "username": bed.var("KMIRROR_ADMIN_USER"),
                             "password": {"name": "destination-admin", "key": "password"}}
                }
            }),
        )
        .await;
        s.apply_topic("dr-t", topic_spec("dr", &topic_name)).await;
        set_topic_status(&s, "dr-t", json!({"partitions": [part(0, "MIRRORING"), part(1, "MIRRORING")]}))
            .await;

        let run = mirror_cmd(&ns, &["verify", "dr"]).await;
        run.ok();
        assert!(has_row(&run.stdout, &[&topic_name, "0", "clean", "25", "25", "0", "0", "0", "0", "yes"]), "{run:#?}");
        assert!(has_row(&run.stdout, &[&topic_name, "1", "clean", "25", "25", "0", "0", "0", "0", "yes"]), "{run:#?}");

        let run = mirror_cmd(&ns, &["verify", "dr", "--partition", "1", "-o", "json"]).await;
        run.ok();
        let doc: Value = serde_json::from_str(&run.stdout).expect("JSON");
        assert_eq!(doc["mirror"], format!("{ns}/dr"));
        assert_eq!(doc["clean"], true);
        assert_eq!(doc["topics"][0]["sourceTopic"], topic_name.as_str());
        assert_eq!(doc["topics"][0]["error"], Value::Null);
        let reports = doc["topics"][0]["reports"].as_array().unwrap();
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0]["partition"], 1);
        assert_eq!(reports[0]["matched"], 25);

        // A record only the source has is a mismatch: exit 5.
        produce_same(&bed.source_config(), &topic_name, 1, 26);
        let run = mirror_cmd(&ns, &["verify", "dr", "--topic", &topic_name]).await;
        assert_eq!(run.code, 5, "{run:#?}");
        assert!(has_row(&run.stdout, &[&topic_name, "0", "MISMATCH"]), "{run:#?}");
        assert!(run.stderr.contains("verification of") && run.stderr.contains("mismatches"), "{run:#?}");

        let _ = rdkafka_delete(&topic_name).await;
    })
    .await;
}

async fn rdkafka_delete(topic: &str) -> anyhow::Result<()> {
    let bed = Testbed::get();
    kmirror_e2e::kafka::delete_topic(&bed.source_config(), topic).await?;
    kmirror_e2e::kafka::delete_topic(&bed.dest_config(DestUser::Admin), topic).await
}
