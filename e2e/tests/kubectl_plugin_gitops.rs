//! `kubectl mirror` with GitOps and kubectl's conventions, against the bed's real apiserver:
//! objects managed by Argo CD or Flux are recognised, warned about and left alone with
//! `--print-patch`; `--dry-run` (server and client) changes nothing while the API server still
//! checks the change; `--as`/`--as-group` impersonation meets the bed's RBAC; `-o wide`,
//! `--cluster`/`--user`, `--request-timeout`; shell completion, including `kubectl mirror <TAB>`
//! through kubectl itself.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kmirror_crds::v1alpha1::{DesiredState, MirrorTopic};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::binary;
use kmirror_e2e::kafka::unique_name;
use kmirror_e2e::operator::Scenario;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

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

/// Runs the plugin with the bed's kubeconfig in namespace `ns`.
async fn mirror_cmd(ns: &str, args: &[&str]) -> Run {
    let child = tokio::process::Command::new(binary("kubectl-mirror"))
        .env("KUBECONFIG", Testbed::get().var("KUBECONFIG"))
        .args(["-n", ns])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the plugin");
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

/// Runs `body` in a fresh namespace; removes it afterwards, also when the body panics.
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
        "destination": {"bootstrapServers": "destination.example:9093"}
    })
}

/// Creates a MirrorTopic the way a GitOps tool does: `kubectl apply` (client-side, so the
/// last-applied record holds the manifest) of a manifest with the tool's labels/annotations.
fn kubectl_apply(ns: &str, manifest: &Value) {
    let bed = Testbed::get();
    let mut child = std::process::Command::new(bed.var("KMIRROR_KUBECTL"))
        .args(["apply", "-n", ns, "-f", "-"])
        .env("KUBECONFIG", bed.var("KUBECONFIG"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn managed_topic(name: &str, source: &str, labels: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "kmirror.io/v1alpha1",
        "kind": "MirrorTopic",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"mirror": "dr", "sourceTopic": source, "state": "Mirroring"}
    })
}

async fn topic(s: &Scenario, name: &str) -> MirrorTopic {
    s.topic(name)
        .await
        .unwrap_or_else(|| panic!("MirrorTopic {name} exists"))
}

fn version(t: &MirrorTopic) -> (Option<String>, Option<i64>) {
    (t.metadata.resource_version.clone(), t.metadata.generation)
}

/// YAML documents of a stream, comments dropped.
fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

#[tokio::test]
async fn gitops_managed_topics_are_warned_about_and_print_patch_changes_nothing() {
    scenario("kmp-gitops", |s| async move {
        let ns = s.ns.clone();
        s.apply_mirror("dr", simple_mirror()).await;
        kubectl_apply(
            &ns,
            &managed_topic(
                "dr-orders",
                "orders",
                json!({}),
                json!({"argocd.argoproj.io/tracking-id":
                    format!("shop-dr:kmirror.io/MirrorTopic:{ns}/dr-orders")}),
            ),
        );
        kubectl_apply(
            &ns,
            &managed_topic(
                "dr-payments",
                "payments",
                json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                       "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
                json!({}),
            ),
        );
        s.apply_topic("dr-audit", json!({"mirror": "dr", "sourceTopic": "audit"}))
            .await;
        let before = version(&topic(&s, "dr-orders").await);

        // --print-patch: the warning on stderr, the change as YAML on stdout, nothing changed.
        let run = mirror_cmd(
            &ns,
            &["failover", "dr", "--topic", "orders", "--print-patch"],
        )
        .await;
        run.ok();
        assert!(
            run.stderr.contains(&format!(
                "warning: MirrorTopic {ns}/dr-orders is managed by Argo CD (Application \
                 shop-dr, annotation argocd.argoproj.io/tracking-id); its manifest sets \
                 spec.state: an automated sync with self-heal sets it back. Commit the change \
                 to Git instead (--print-patch prints it)"
            )),
            "{run:#?}"
        );
        let docs = documents(&run.stdout);
        assert_eq!(
            docs,
            [
                json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
                    "metadata": {"name": "dr-orders", "namespace": ns},
                    "spec": {"state": "Stopped"}})
            ],
            "{}",
            run.stdout
        );
        assert!(
            run.stdout.starts_with(&format!(
                "# MirrorTopic {ns}/dr-orders: managed by Argo CD (Application shop-dr"
            )),
            "{}",
            run.stdout
        );
        let after = topic(&s, "dr-orders").await;
        assert_eq!(version(&after), before, "--print-patch changes nothing");
        assert_eq!(after.spec.state, DesiredState::Mirroring);

        // The printed patch is what a GitOps tool would apply: applied, it fails the topic over.
        let patch = serde_json::to_value(&docs[0]).unwrap();
        Api::<MirrorTopic>::namespaced(s.client.clone(), &ns)
            .patch(
                "dr-orders",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": patch["spec"]})),
            )
            .await
            .unwrap();
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Stopped
        );

        // All three: one document each, a warning for the two managed ones only (Flux: the
        // manifest sets spec.state too, through kubectl's last-applied record).
        let run = mirror_cmd(&ns, &["pause", "dr", "--all", "--print-patch"]).await;
        run.ok();
        let docs = documents(&run.stdout);
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dr-audit", "dr-orders", "dr-payments"]);
        assert!(docs.iter().all(|d| d["spec"] == json!({"state": "Paused"})));
        assert_eq!(run.stderr.matches("warning:").count(), 2, "{run:#?}");
        assert!(
            run.stderr.contains(&format!(
                "MirrorTopic {ns}/dr-payments is managed by Flux (Kustomization \
                 flux-system/apps, label kustomize.toolkit.fluxcd.io/name); its manifest sets \
                 spec.state: its next reconciliation sets it back"
            )) && run.stderr.contains("flux suspend"),
            "{run:#?}"
        );
        assert!(!run.stderr.contains("dr-audit"), "{run:#?}");
        for name in ["dr-audit", "dr-payments"] {
            assert_eq!(
                topic(&s, name).await.spec.state,
                DesiredState::Mirroring,
                "{name}"
            );
        }

        // Without --print-patch the change is made, after the warning.
        let run = mirror_cmd(&ns, &["pause", "dr", "--topic", "payments"]).await;
        run.ok();
        assert!(run.stderr.contains("is managed by Flux"), "{run:#?}");
        assert!(
            run.stdout
                .contains("mirrortopic.kmirror.io/dr-payments patched (payments: state Paused)"),
            "{run:#?}"
        );
        assert_eq!(
            topic(&s, "dr-payments").await.spec.state,
            DesiredState::Paused
        );

        // A field the manifest does not set: a sync leaves the change alone, and it says so.
        let run = mirror_cmd(
            &ns,
            &[
                "resolve",
                "dr",
                "--topic",
                "orders",
                "--policy",
                "Recreate",
                "--print-patch",
            ],
        )
        .await;
        run.ok();
        assert!(
            run.stderr.contains(
                "its manifest does not set spec.divergencePolicy, so a sync leaves the change \
                 alone"
            ),
            "{run:#?}"
        );

        // failback of a managed mirror: the reverse objects are not in Git.
        let m = json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
            "metadata": {"name": "dr", "labels": {"argocd.argoproj.io/instance": "shop-dr"}},
            "spec": simple_mirror()});
        kubectl_apply(&ns, &m);
        let run = mirror_cmd(
            &ns,
            &[
                "failback",
                "dr",
                "--topic",
                "orders",
                "--force",
                "--print-patch",
            ],
        )
        .await;
        run.ok();
        assert!(
            run.stderr.contains(&format!(
                "warning: ClusterMirror {ns}/dr is managed by Argo CD (Application shop-dr, \
                 label argocd.argoproj.io/instance); the objects created now are not in Git"
            )),
            "{run:#?}"
        );
        let kinds: Vec<String> = documents(&run.stdout)
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kinds, ["ClusterMirror", "MirrorTopic"]);
        assert!(s.topics().await.iter().all(|t| t.spec.mirror == "dr"));
    })
    .await;
}

#[tokio::test]
async fn dry_run_changes_nothing_but_the_api_server_still_checks() {
    scenario("kmp-dry", |s| async move {
        let ns = s.ns.clone();
        s.apply_mirror("dr", simple_mirror()).await;
        s.apply_topic(
            "dr-orders",
            json!({"mirror": "dr", "sourceTopic": "orders"}),
        )
        .await;
        s.apply_topic("dr-audit", json!({"mirror": "dr", "sourceTopic": "audit"}))
            .await;
        let before = version(&topic(&s, "dr-orders").await);
        for args in [
            &["failover", "dr", "--all", "--dry-run"][..],
            &["failover", "dr", "--all", "--dry-run=server", "--immediate"],
            &["failover", "dr", "--all", "--dry-run=client"],
            &["pause", "dr", "--topic", "orders", "--dry-run"],
            &["retry", "dr", "--all", "--dry-run"],
            &[
                "resolve",
                "dr",
                "--all",
                "--policy",
                "KeepAndTranslate",
                "--dry-run",
            ],
        ] {
            let run = mirror_cmd(&ns, args).await;
            run.ok();
            let mode = if args.contains(&"--dry-run=client") {
                "(dry run)"
            } else {
                "(server dry run)"
            };
            assert!(
                run.stdout
                    .contains(&format!("mirrortopic.kmirror.io/dr-orders patched {mode}")),
                "{args:?}: {run:#?}"
            );
            assert_eq!(
                version(&topic(&s, "dr-orders").await),
                before,
                "{args:?} changed the topic"
            );
        }
        // A server dry run goes through admission: a Stopped topic cannot be Paused...
        s.patch_topic("dr-audit", json!({"state": "Stopped"})).await;
        let audit = version(&topic(&s, "dr-audit").await);
        let run = mirror_cmd(&ns, &["pause", "dr", "--topic", "audit", "--dry-run"]).await;
        assert_eq!(run.code, 4, "refused: {run:#?}");
        assert!(
            run.stderr.contains("a Stopped topic cannot be Paused"),
            "{run:#?}"
        );
        // ...which a client dry run does not ask.
        mirror_cmd(
            &ns,
            &["pause", "dr", "--topic", "audit", "--dry-run=client"],
        )
        .await
        .ok();
        assert_eq!(version(&topic(&s, "dr-audit").await), audit);
        // --dry-run takes server or client only, and not with --wait or --print-patch.
        for args in [
            &["pause", "dr", "--all", "--dry-run=maybe"][..],
            &["failover", "dr", "--all", "--dry-run", "--wait"],
            &["failover", "dr", "--all", "--dry-run", "--print-patch"],
        ] {
            assert_eq!(mirror_cmd(&ns, args).await.code, 2, "{args:?}");
        }
    })
    .await;
}

/// A ServiceAccount `name` with a Role of `verbs` on MirrorTopics (and reading
/// ClusterMirrors), bound to the account and to `group`, when given.
async fn account(s: &Scenario, name: &str, verbs: &[&str], group: Option<&str>) {
    s.create::<ServiceAccount>(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name}}))
        .await;
    s.create::<Role>(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["kmirror.io"], "resources": ["clustermirrors"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["kmirror.io"], "resources": ["mirrortopics"], "verbs": verbs}
        ]}),
    )
    .await;
    let mut subjects = vec![json!({"kind": "ServiceAccount", "name": name, "namespace": s.ns})];
    if let Some(g) = group {
        subjects.push(json!({"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"}));
    }
    s.create::<RoleBinding>(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": subjects}))
        .await;
}

#[tokio::test]
async fn impersonation_meets_the_rbac_of_the_bed() {
    scenario("kmp-as", |s| async move {
        let ns = s.ns.clone();
        s.apply_mirror("dr", simple_mirror()).await;
        s.apply_topic(
            "dr-orders",
            json!({"mirror": "dr", "sourceTopic": "orders"}),
        )
        .await;
        account(&s, "viewer", &["get", "list", "watch"], None).await;
        account(
            &s,
            "operator",
            &["get", "list", "watch", "patch"],
            Some("kmirror-operators"),
        )
        .await;
        let viewer = format!("system:serviceaccount:{ns}:viewer");
        let operator = format!("system:serviceaccount:{ns}:operator");

        // Reading works for both.
        mirror_cmd(&ns, &["--as", &viewer, "status", "dr"])
            .await
            .ok();

        // The viewer may not patch: a clear refusal, also for a server dry run, and no change.
        for extra in [&[][..], &["--dry-run"]] {
            let mut args = vec!["--as", viewer.as_str(), "failover", "dr", "--all"];
            args.extend_from_slice(extra);
            let run = mirror_cmd(&ns, &args).await;
            assert_eq!(run.code, 4, "refused: {run:#?}");
            assert!(
                run.stderr.contains(&format!(
                    "User \"{viewer}\" cannot patch resource \"mirrortopics\" in API group \
                     \"kmirror.io\" in the namespace \"{ns}\""
                )) && run.stderr.contains(&format!("(impersonating \"{viewer}\"")),
                "{run:#?}"
            );
        }
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Mirroring
        );

        // A user without any grant cannot even list.
        let run = mirror_cmd(&ns, &["--as", "nobody", "status"]).await;
        assert_eq!(run.code, 4, "refused: {run:#?}");
        assert!(
            run.stderr
                .contains("User \"nobody\" cannot list resource \"clustermirrors\""),
            "{run:#?}"
        );

        // The group grants what the user alone lacks.
        let run = mirror_cmd(&ns, &["--as", "alice", "pause", "dr", "--all"]).await;
        assert_eq!(run.code, 4, "refused: {run:#?}");
        mirror_cmd(
            &ns,
            &[
                "--as",
                "alice",
                "--as-group",
                "kmirror-operators",
                "pause",
                "dr",
                "--all",
            ],
        )
        .await
        .ok();
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Paused
        );

        // The account with patch rights fails over, as itself (the field manager records it).
        mirror_cmd(&ns, &["--as", &operator, "failover", "dr", "--all"])
            .await
            .ok();
        assert_eq!(
            topic(&s, "dr-orders").await.spec.state,
            DesiredState::Stopped
        );
        // --as-group without --as is wrong usage, as in kubectl.
        assert_eq!(
            mirror_cmd(&ns, &["--as-group", "x", "status"]).await.code,
            2
        );
    })
    .await;
}

#[tokio::test]
async fn kubectl_conventions_wide_output_kubeconfig_names_and_timeouts() {
    scenario("kmp-conv", |s| async move {
        let ns = s.ns.clone();
        s.apply_mirror("dr", simple_mirror()).await;
        s.apply_topic(
            "dr-orders",
            json!({"mirror": "dr", "sourceTopic": "orders"}),
        )
        .await;
        Api::<MirrorTopic>::namespaced(s.client.clone(), &ns)
            .patch_status(
                "dr-orders",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"observedGeneration": 1, "partitions": [
                    {"partition": 0, "state": "MIRRORING", "stateEpoch": 3, "lag": 5,
                     "lagSeconds": 2.5, "lastMirroredOffset": 94, "sourceLogEndOffset": 100,
                     "destinationLogEndOffset": 95, "offsetsIdentical": true,
                     "lastTransitionTime": "2026-01-01T00:00:00Z", "fetcherPod": "f-0"}]}})),
            )
            .await
            .unwrap();
        let run = mirror_cmd(&ns, &["status", "dr", "-o", "wide"]).await;
        run.ok();
        let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        let lines: Vec<Vec<String>> = run.stdout.lines().map(words).collect();
        assert!(
            lines.iter().any(|l| l[..]
                == [
                    "TOPIC",
                    "PARTITION",
                    "STATE",
                    "LAG",
                    "LAG-SECONDS",
                    "LAST-MIRRORED",
                    "SOURCE-END",
                    "DESTINATION-END",
                    "IDENTICAL",
                    "EPOCH",
                    "RETRY",
                    "SINCE",
                    "POD",
                    "ERROR"
                ]),
            "{}",
            run.stdout
        );
        assert!(
            lines.iter().any(|l| l[..]
                == [
                    "orders",
                    "0",
                    "MIRRORING",
                    "5",
                    "2.5",
                    "94",
                    "100",
                    "95",
                    "yes",
                    "3",
                    "-",
                    "2026-01-01T00:00:00Z",
                    "f-0"
                ]),
            "{}",
            run.stdout
        );

        // --cluster and --user pick kubeconfig entries by name; unknown names are errors.
        let bed = Testbed::get();
        let config: Value =
            serde_yaml::from_str(&std::fs::read_to_string(bed.var("KUBECONFIG")).unwrap()).unwrap();
        let cluster = config["clusters"][0]["name"].as_str().unwrap().to_string();
        let user = config["users"][0]["name"].as_str().unwrap().to_string();
        mirror_cmd(&ns, &["--cluster", &cluster, "--user", &user, "status"])
            .await
            .ok();
        for (flag, what) in [("--cluster", "cluster"), ("--user", "user")] {
            let run = mirror_cmd(&ns, &[flag, "no-such", "status"]).await;
            assert_eq!(run.code, 1, "{run:#?}");
            assert!(
                run.stderr.contains(&format!(
                    "{what} \"no-such\" does not exist in the kubeconfig"
                )),
                "{run:#?}"
            );
        }
        // --request-timeout: a server that accepts connections and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let kubeconfig = std::fs::read_to_string(bed.var("KUBECONFIG")).unwrap();
        let silent = std::env::temp_dir().join(format!("{}.kubeconfig", unique_name("kmp-silent")));
        std::fs::write(
            &silent,
            kubeconfig.replace(
                bed.var("KMIRROR_APISERVER"),
                &format!("https://127.0.0.1:{port}"),
            ),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let run = mirror_cmd(
            &ns,
            &[
                "--kubeconfig",
                silent.to_str().unwrap(),
                "--request-timeout",
                "2s",
                "status",
            ],
        )
        .await;
        let took = started.elapsed();
        drop(listener);
        let _ = std::fs::remove_file(&silent);
        assert_eq!(run.code, 1, "{run:#?}");
        // Without the flag the connection attempt is given 10 s.
        assert!(took < Duration::from_secs(8), "took {took:?}: {run:#?}");
        assert_eq!(
            run.stderr.trim(),
            format!(
                "error: cannot reach the Kubernetes API server at https://127.0.0.1:{port}: no \
                 answer within 2s (--request-timeout)"
            )
        );
        mirror_cmd(&ns, &["--request-timeout", "20s", "status"])
            .await
            .ok();
    })
    .await;
}

#[tokio::test]
async fn completion_scripts_and_kubectl_mirror_tab() {
    // The scripts need no cluster.
    for shell in ["bash", "zsh"] {
        let out = std::process::Command::new(binary("kubectl-mirror"))
            .args(["completion", shell])
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("kubectl-mirror"),
            "{shell}"
        );
    }
    // kubectl completes `kubectl mirror …` through kubectl_complete-mirror in PATH.
    let dir = std::env::temp_dir().join(unique_name("kmp-completion"));
    std::fs::create_dir_all(&dir).unwrap();
    let plugin: PathBuf = binary("kubectl-mirror");
    std::os::unix::fs::symlink(&plugin, dir.join("kubectl-mirror")).unwrap();
    std::os::unix::fs::symlink(&plugin, dir.join("kubectl_complete-mirror")).unwrap();
    let bed = Testbed::get();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let complete = |words: &[&str]| -> Vec<String> {
        let out = std::process::Command::new(bed.var("KMIRROR_KUBECTL"))
            .arg("__complete")
            .arg("mirror")
            .args(words)
            .env("PATH", &path)
            .env("KUBECONFIG", bed.var("KUBECONFIG"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with(':'))
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(complete(&["fail"]), ["failover", "failback"]);
    assert_eq!(
        complete(&["status", "-o", ""]),
        ["table", "wide", "json", "yaml"]
    );
    assert!(complete(&["pause", "dr", "--d"]).contains(&"--dry-run".to_string()));
    std::fs::remove_dir_all(&dir).unwrap();
}
