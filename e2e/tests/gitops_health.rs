//! Health for GitOps tools: the Argo CD health checks of deploy/argocd (Lua, run with gopher-lua
//! as Argo CD runs them, by e2e/bed/argocd-health) against `ClusterMirror` and `MirrorTopic`
//! objects of real mirrors, and the `Ready` condition `kubectl wait` waits for.
//!
//! `captured_objects_get_their_health` runs the committed objects of deploy/argocd/testdata (a
//! healthy, progressing, failed, paused and stopped object of each kind) through the scripts.
//! `ignored_updates_are_status_fields_that_only_progress` checks the status fields whose updates
//! Argo CD is told to ignore (deploy/argocd/*-ignore-updates.yaml): each exists in the CRD schema,
//! together they cover everything the operator counts as progress, and no health check reads
//! one; the real mirrors show an object under traffic changing only in those fields.
//! `real_mirrors_move_through_every_health` makes those objects with the operator on the bed,
//! checks the scripts on each as it is, and with `KMIRROR_WRITE_FIXTURES=1` writes them into
//! deploy/argocd/testdata.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{ensure_state_topic, wait_until};
use kmirror_e2e::kafka::{
    DestUser, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kmirror_e2e::testbed::repo_root;
use kmirror_operator::status_writer::HasStatus;
use serde::Deserialize;
use serde_json::{Value, json};

/// The health runner, built once per machine.
fn runner() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(repo_root().join("e2e/bed/go-tools.sh"))
            .arg("argocd-health")
            .output()
            .expect("run e2e/bed/go-tools.sh");
        assert!(
            out.status.success(),
            "building the Argo CD health runner failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

fn script(kind: &str) -> PathBuf {
    repo_root().join(format!("deploy/argocd/{}-health.lua", kind.to_lowercase()))
}

fn testdata() -> PathBuf {
    repo_root().join("deploy/argocd/testdata")
}

/// What Argo CD would show for an object: (status, message).
#[derive(Debug, Deserialize)]
struct Health {
    status: Option<String>,
    message: Option<String>,
    error: Option<String>,
}

/// The health of each object file, by the script of `kind`.
fn health(kind: &str, files: &[PathBuf]) -> Vec<(String, String)> {
    let out = Command::new(runner())
        .arg(script(kind))
        .args(files)
        .output()
        .expect("run argocd-health");
    assert!(
        out.status.success(),
        "argocd-health: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Health> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON result a line"))
        .collect();
    assert_eq!(results.len(), files.len());
    results
        .into_iter()
        .zip(files)
        .map(|(h, f)| {
            assert!(
                h.error.is_none(),
                "{}: the script failed: {}",
                f.display(),
                h.error.unwrap()
            );
            (h.status.unwrap(), h.message.unwrap_or_default())
        })
        .collect()
}

/// One expected result of testdata/expected.yaml.
#[derive(Debug, Deserialize)]
struct Expected {
    file: String,
    kind: String,
    case: String,
    status: String,
    message: String,
}

#[test]
fn captured_objects_get_their_health() {
    // expected-large.yaml: a topic whose status lists only some partitions (captured by
    // operator_status_metrics.rs).
    let expected: Vec<Expected> = ["expected.yaml", "expected-large.yaml"]
        .iter()
        .flat_map(|f| {
            serde_yaml::from_str::<Vec<Expected>>(
                &std::fs::read_to_string(testdata().join(f)).expect(f),
            )
            .unwrap()
        })
        .collect();
    let mut cases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &expected {
        let file = testdata().join(&e.file);
        let object: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(object["kind"], e.kind.as_str(), "{}", e.file);
        let (status, message) = health(&e.kind, &[file]).remove(0);
        assert_eq!(status, e.status, "{}: {message}", e.file);
        assert!(
            message.contains(&e.message),
            "{}: message {message:?} does not contain {:?}",
            e.file,
            e.message
        );
        cases
            .entry(e.kind.clone())
            .or_default()
            .push(e.case.clone());
    }
    for kind in ["ClusterMirror", "MirrorTopic"] {
        for case in ["healthy", "progressing", "failed", "paused", "stopped"] {
            assert!(
                cases[kind].iter().any(|c| c == case),
                "no captured {case} {kind} in deploy/argocd/testdata"
            );
        }
    }
    // A script that errors or returns something Argo CD rejects is reported, not passed.
    let dir = std::env::temp_dir().join(unique_name("argocd-health"));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.lua");
    std::fs::write(&bad, "return {status = string.upper('healthy')}").unwrap();
    let out = Command::new(runner())
        .arg(&bad)
        .arg(testdata().join(&expected[0].file))
        .output()
        .unwrap();
    let line: Health = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        line.error.is_some_and(|e| e.contains("upper")),
        "Argo CD opens no string library"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn ignore_file(kind: &str) -> PathBuf {
    repo_root().join(format!(
        "deploy/argocd/{}-ignore-updates.yaml",
        kind.to_lowercase()
    ))
}

/// A status field as path segments; `[]` stands for every item of an array.
type FieldPath = Vec<String>;

/// `.a.b[]?.c` as `["a", "b", "[]", "c"]`: the only jq path forms the shipped files use.
fn jq_path(expression: &str) -> FieldPath {
    let mut out = Vec::new();
    let fields = expression
        .strip_prefix('.')
        .unwrap_or_else(|| panic!("{expression}: a jq path starts with ."));
    for part in fields.split('.') {
        let (name, every) = match part.strip_suffix("[]?") {
            Some(name) => (name, true),
            None => (part, false),
        };
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "{expression}: only .field and []? are used (and understood by this test)"
        );
        out.push(name.to_string());
        if every {
            out.push("[]".into());
        }
    }
    out
}

/// The fields whose updates Argo CD ignores for `kind`: its JSON pointers and jq paths.
fn ignored_paths(kind: &str) -> Vec<FieldPath> {
    let config: Value =
        serde_yaml::from_str(&std::fs::read_to_string(ignore_file(kind)).unwrap()).unwrap();
    let keys: Vec<&String> = config.as_object().unwrap().keys().collect();
    for key in &keys {
        assert!(
            ["jsonPointers", "jqPathExpressions"].contains(&key.as_str()),
            "{kind}: unknown key {key}"
        );
    }
    let mut out = Vec::new();
    for pointer in config["jsonPointers"].as_array().into_iter().flatten() {
        let pointer = pointer.as_str().unwrap();
        let path = pointer
            .strip_prefix('/')
            .unwrap_or_else(|| panic!("{pointer}: a JSON pointer starts with /"));
        out.push(
            path.split('/')
                .map(|s| s.replace("~1", "/").replace("~0", "~"))
                .collect(),
        );
    }
    for expression in config["jqPathExpressions"].as_array().into_iter().flatten() {
        out.push(jq_path(expression.as_str().unwrap()));
    }
    out
}

/// Removes the field `path` names from `v`, as Argo CD does before it compares an update.
fn remove_path(v: &mut Value, path: &[String]) {
    match path {
        [] => {}
        [first, rest @ ..] if first == "[]" => {
            for item in v.as_array_mut().into_iter().flatten() {
                remove_path(item, rest);
            }
        }
        [last] => {
            if let Some(o) = v.as_object_mut() {
                o.remove(last);
            }
        }
        [first, rest @ ..] => {
            if let Some(next) = v.get_mut(first) {
                remove_path(next, rest);
            }
        }
    }
}

/// `object` as Argo CD compares it on an update: without the ignored fields of its kind, and
/// without the metadata every update changes (resourceVersion, generation, managedFields).
fn compared(object: &Value) -> Value {
    let mut v = object.clone();
    for path in ignored_paths(v["kind"].as_str().unwrap()) {
        remove_path(&mut v, &path);
    }
    for meta in ["resourceVersion", "generation", "managedFields"] {
        v["metadata"].as_object_mut().unwrap().remove(meta);
    }
    v
}

/// The OpenAPI schema of `kind` as installed (deploy/crds.yaml).
fn crd_schema(kind: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join("deploy/crds.yaml")).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|crd| crd["spec"]["names"]["kind"] == kind)
        .map(|crd| crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())
        .unwrap_or_else(|| panic!("no CRD of {kind} in deploy/crds.yaml"))
}

fn schema_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut node = schema;
    for segment in path {
        node = if segment == "[]" {
            node.get("items")?
        } else {
            node.get("properties")?.get(segment)?
        };
    }
    Some(node)
}

/// Paths of the non-null leaves of `v` (array items as `#index`).
fn leaves(v: &Value, at: &mut FieldPath, out: &mut Vec<FieldPath>) {
    match v {
        Value::Null => {}
        Value::Object(o) => {
            for (k, child) in o {
                at.push(k.clone());
                leaves(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(format!("#{i}"));
                leaves(child, at, out);
                at.pop();
            }
        }
        _ => out.push(at.clone()),
    }
}

/// Whether the ignored field `pattern` is `leaf` or holds it.
fn covers(pattern: &[String], leaf: &[String]) -> bool {
    pattern.len() <= leaf.len()
        && pattern
            .iter()
            .zip(leaf)
            .all(|(p, l)| p == l || (p == "[]" && l.starts_with('#')))
}

/// The leaves of a status the operator counts as progress alone (`without_progress` clears them).
fn progress_leaves<K: HasStatus>(status: &K::Status) -> Vec<FieldPath> {
    let mut all = Vec::new();
    leaves(
        &serde_json::to_value(status).unwrap(),
        &mut vec!["status".into()],
        &mut all,
    );
    let mut kept = Vec::new();
    leaves(
        &serde_json::to_value(K::without_progress(status)).unwrap(),
        &mut vec!["status".into()],
        &mut kept,
    );
    all.into_iter().filter(|l| !kept.contains(l)).collect()
}

#[test]
fn ignored_updates_are_status_fields_that_only_progress() {
    for kind in ["ClusterMirror", "MirrorTopic"] {
        let schema = crd_schema(kind);
        let paths = ignored_paths(kind);
        assert!(!paths.is_empty(), "{kind}");
        let lua = std::fs::read_to_string(script(kind)).unwrap();
        for path in &paths {
            // A renamed or removed status field fails here.
            assert!(
                schema_at(&schema, path).is_some(),
                "{kind}: {} is not in the CRD schema",
                path.join("/")
            );
            assert_eq!(path[0], "status", "{kind}: only status fields");
            // What health and readiness stand on is never ignored.
            let last = path.last().unwrap();
            assert!(
                !["conditions", "state", "observedGeneration", "phase"]
                    .iter()
                    .any(|f| path.iter().any(|p| p == f)),
                "{kind}: {} is health",
                path.join("/")
            );
            let read = lua.match_indices(&format!(".{last}")).any(|(i, m)| {
                !lua[i + m.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            });
            assert!(
                !read,
                "{kind}: the health check reads {last}, which updates ignore"
            );
        }
    }
    // Everything the operator writes as progress alone (offsets, lag) is ignored.
    let topic: MirrorTopic = serde_json::from_str(
        &std::fs::read_to_string(testdata().join("mirrortopic-healthy.json")).unwrap(),
    )
    .unwrap();
    let progress = progress_leaves::<MirrorTopic>(topic.status.as_ref().unwrap());
    for field in [
        "maxLag",
        "lag",
        "lagSeconds",
        "lastMirroredOffset",
        "sourceLogEndOffset",
    ] {
        assert!(
            progress.iter().any(|l| l.last().unwrap() == field),
            "the captured MirrorTopic has no {field} to check: {progress:?}"
        );
    }
    let mirror: ClusterMirror = serde_json::from_str(
        &std::fs::read_to_string(testdata().join("clustermirror-healthy.json")).unwrap(),
    )
    .unwrap();
    let mirror_progress = progress_leaves::<ClusterMirror>(mirror.status.as_ref().unwrap());
    assert!(!mirror_progress.is_empty());
    for (kind, leaves) in [
        ("MirrorTopic", progress),
        ("ClusterMirror", mirror_progress),
    ] {
        let paths = ignored_paths(kind);
        for leaf in leaves {
            assert!(
                paths.iter().any(|p| covers(p, &leaf)),
                "{kind}: {} is progress but its updates are not ignored",
                leaf.join("/")
            );
        }
    }
    // And the times and summaries every metadata-sync pass writes, for every part.
    let schema = crd_schema("ClusterMirror");
    let parts = schema_at(&schema, &["status".into(), "sync".into()]).unwrap()["properties"]
        .as_object()
        .unwrap();
    let ignored = ignored_paths("ClusterMirror");
    for part in parts.keys() {
        for field in ["lastSuccessTime", "lastErrorTime", "summary"] {
            let path: FieldPath = ["status", "sync", part, field].map(String::from).into();
            assert!(
                ignored.contains(&path),
                "status.sync.{part}.{field} is not ignored"
            );
        }
    }
    // The helpers read what they should.
    assert_eq!(
        jq_path(".status.partitions[]?.lag"),
        ["status", "partitions", "[]", "lag"]
    );
    let mut v = json!({"status": {"partitions": [{"lag": 1, "state": "M"}, {"lag": 2}]}});
    remove_path(&mut v, &jq_path(".status.partitions[]?.lag"));
    assert_eq!(v, json!({"status": {"partitions": [{"state": "M"}, {}]}}));
}

#[test]
fn argocd_cm_holds_the_scripts() {
    let cm: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/argocd/argocd-cm.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "argocd-cm");
    for kind in ["ClusterMirror", "MirrorTopic"] {
        let key = format!("resource.customizations.health.kmirror.io_{kind}");
        assert_eq!(
            cm["data"][&key].as_str(),
            Some(std::fs::read_to_string(script(kind)).unwrap().as_str()),
            "{key} differs from {}; run deploy/render.sh",
            script(kind).display()
        );
        let key = format!("resource.customizations.ignoreResourceUpdates.kmirror.io_{kind}");
        assert_eq!(
            cm["data"][&key].as_str(),
            Some(std::fs::read_to_string(ignore_file(kind)).unwrap().as_str()),
            "{key} differs from {}; run deploy/render.sh",
            ignore_file(kind).display()
        );
    }
    // Argo CD 2.x applies them only with this (the default from 3.0).
    assert_eq!(cm["data"]["resource.ignoreResourceUpdatesEnabled"], "true");
}

// ---------------------------------------------------------------------------------------------
// Real mirrors

fn kubectl(args: &[&str]) -> std::process::Output {
    let bed = Testbed::get();
    Command::new(bed.var("KMIRROR_KUBECTL"))
        .args(args)
        .env("KUBECONFIG", bed.var("KUBECONFIG"))
        .output()
        .expect("run kubectl")
}

/// The object as the API server returns it (what Argo CD sees), without managed fields.
fn get(ns: &str, resource: &str, name: &str) -> Value {
    let out = kubectl(&["get", resource, name, "-n", ns, "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    v
}

/// Collects objects, checks their health as captured, and writes them as fixtures when asked.
struct Capture {
    dir: PathBuf,
    expected: Vec<Value>,
    write: bool,
}

impl Capture {
    fn new() -> Capture {
        let write = std::env::var("KMIRROR_WRITE_FIXTURES").is_ok_and(|v| v == "1");
        let dir = if write {
            testdata()
        } else {
            std::env::temp_dir().join(unique_name("argocd-capture"))
        };
        std::fs::create_dir_all(&dir).unwrap();
        Capture {
            dir,
            expected: Vec::new(),
            write,
        }
    }

    /// Checks the health of `object` and records it as `<kind>-<case>.json`.
    fn check(&mut self, object: Value, case: &str, status: &str, message: &str) {
        let kind = object["kind"].as_str().unwrap().to_string();
        let file = format!("{}-{case}.json", kind.to_lowercase());
        let path = self.dir.join(&file);
        std::fs::write(
            &path,
            format!("{}\n", serde_json::to_string_pretty(&object).unwrap()),
        )
        .unwrap();
        let (got, text) = health(&kind, std::slice::from_ref(&path)).remove(0);
        assert_eq!(got, status, "{kind} {case}: {text}\n{object:#}");
        assert!(
            text.contains(message),
            "{kind} {case}: message {text:?} does not contain {message:?}"
        );
        self.expected
            .push(json!({"file": file, "kind": kind, "case": case,
            "status": status, "message": message}));
    }

    fn finish(self) {
        if self.write {
            let header = "# Health Argo CD shows for the objects of this directory (captured from \
                          mirrors on the test bed by\n# e2e/tests/gitops_health.rs with \
                          KMIRROR_WRITE_FIXTURES=1): status, and a part of the message.\n";
            std::fs::write(
                self.dir.join("expected.yaml"),
                format!("{header}{}", serde_yaml::to_string(&self.expected).unwrap()),
            )
            .unwrap();
        } else {
            std::fs::remove_dir_all(&self.dir).unwrap();
        }
    }
}

/// Polls the MirrorTopic until `check` holds on its raw object.
async fn until(
    s: &Scenario,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let t = s.topic(what.split(' ').next().unwrap()).await;
        if let Some(t) = t {
            let v = serde_json::to_value(&t).unwrap();
            if check(&v) {
                return v;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn ready_reason(v: &Value) -> Option<(String, String)> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

#[tokio::test]
async fn real_mirrors_move_through_every_health() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "gitops-health").await;
    let ns = s.ns.clone();
    let mut capture = Capture::new();
    let orders = unique_name("orders");
    let audit = unique_name("audit");
    let source = bed.source_config();
    create_topic(&source, &orders, 2, &[]).await.unwrap();
    create_topic(&source, &audit, 1, &[]).await.unwrap();
    produce_all(&source, &orders, &mixed_records(200, 2, 0, 1), &[]).unwrap();
    produce_all(&source, &audit, &mixed_records(50, 1, 0, 2), &[]).unwrap();

    // Objects created while no operator runs: no status yet.
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("orders", json!({"mirror": "dr", "sourceTopic": orders}))
        .await;
    capture.check(
        get(&ns, "mirrortopic", "orders"),
        "progressing",
        "Progressing",
        "Waiting for the kmirror operator to report the topic",
    );
    capture.check(
        get(&ns, "clustermirror", "dr"),
        "progressing",
        "Progressing",
        "Waiting for the kmirror operator to report the mirror",
    );

    // Healthy: `kubectl wait` returns once the Ready condition is True, which the operator
    // sets when every partition mirrors.
    let mut operator = OperatorProcess::spawn(bed, &ns, &[]);
    s.apply_topic("audit", json!({"mirror": "dr", "sourceTopic": audit}))
        .await;
    let started = Instant::now();
    // While a topic is on its way the mirror is not Ready (kstatus: Reconciling), and Argo CD
    // shows Progressing; watched until the mirror is Ready.
    let mut seen_progressing = 0;
    while started.elapsed() < Duration::from_secs(120) {
        let m = get(&ns, "clustermirror", "dr");
        let conditions = |kind: &str| {
            m["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == kind).cloned())
        };
        let Some(ready) = conditions("Ready") else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let counts = &m["status"]["partitions"];
        let on_the_way = ["unknown", "preparing", "stopping"]
            .iter()
            .map(|k| counts[*k].as_i64().unwrap_or(0))
            .sum::<i64>();
        if on_the_way > 0 {
            assert_ne!(
                ready["status"], "True",
                "a mirror with partitions on their way is not Ready: {m:#}"
            );
        }
        if ready["status"] == "True" && counts["total"] == 3 && counts["mirroring"] == 3 {
            break;
        }
        if ready["reason"] == "Progressing" {
            let reconciling = conditions("Reconciling").expect("a Reconciling condition");
            assert_eq!(reconciling["status"], "True", "{m:#}");
            assert_eq!(
                reconciling["observedGeneration"],
                m["metadata"]["generation"]
            );
            let file = std::env::temp_dir().join(unique_name("clustermirror-reconciling.json"));
            std::fs::write(&file, serde_json::to_string(&m).unwrap()).unwrap();
            let (status, _) = health("ClusterMirror", std::slice::from_ref(&file)).remove(0);
            std::fs::remove_file(&file).unwrap();
            assert_eq!(status, "Progressing", "{m:#}");
            seen_progressing += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "the mirror was seen Reconciling (Ready False, Progressing) {seen_progressing} times"
    );
    let wait = kubectl(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready",
        "mirrortopic/orders",
        "mirrortopic/audit",
        "--timeout=120s",
    ]);
    assert!(
        wait.status.success(),
        "kubectl wait: {}{}",
        String::from_utf8_lossy(&wait.stdout),
        String::from_utf8_lossy(&wait.stderr)
    );
    eprintln!(
        "kubectl wait --for=condition=Ready: {:?}",
        started.elapsed()
    );
    let t = s.topic("orders").await.unwrap();
    assert!(
        all_partitions(&t, PartitionState::Mirroring, 2),
        "Ready means every partition MIRRORING: {:?}",
        t.status
    );
    let wait = kubectl(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready",
        "clustermirror/dr",
        "--timeout=60s",
    ]);
    assert!(
        wait.status.success(),
        "{}",
        String::from_utf8_lossy(&wait.stderr)
    );
    s.wait_mirror(
        "dr",
        "3 partitions mirroring",
        Duration::from_secs(60),
        |m| {
            m.status
                .as_ref()
                .is_some_and(|st| st.partitions.mirroring == 3 && st.partitions.total == 3)
        },
    )
    .await;
    capture.check(
        get(&ns, "mirrortopic", "orders"),
        "healthy",
        "Healthy",
        "all 2 partitions MIRRORING",
    );
    capture.check(
        get(&ns, "clustermirror", "dr"),
        "healthy",
        "Healthy",
        "2 topics, 3 of 3 partitions mirroring",
    );

    // Under traffic, a healthy MirrorTopic and its ClusterMirror change only in the fields whose
    // updates Argo CD ignores (no refresh of the Application for them).
    let traffic = Instant::now();
    // Every partition's fetcher has reported what it copied (its first report adds the offsets
    // and offsetsIdentical: a change of state).
    let caught_up = |t: &Value| {
        t["status"]["partitions"].as_array().is_some_and(|ps| {
            ps.len() == 2
                && ps.iter().all(|p| {
                    let partition = p["partition"].as_i64().unwrap() as i32;
                    let end = watermarks(&source, &orders, partition).unwrap().1;
                    p["lastMirroredOffset"].as_i64() == Some(end - 1)
                })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let topic_before = loop {
        let t = get(&ns, "mirrortopic", "orders");
        if caught_up(&t) {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "orders caught up in the status: {t:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mirror_before = get(&ns, "clustermirror", "dr");
    produce_all(&source, &orders, &mixed_records(40, 2, 0, 9), &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (topic_after, mirror_after) = loop {
        let t = get(&ns, "mirrortopic", "orders");
        let m = get(&ns, "clustermirror", "dr");
        let mirrored =
            caught_up(&t) && t["status"]["partitions"] != topic_before["status"]["partitions"];
        let synced = m["status"]["sync"]["topics"]["lastSuccessTime"]
            != mirror_before["status"]["sync"]["topics"]["lastSuccessTime"];
        if mirrored && synced {
            break (t, m);
        }
        assert!(
            Instant::now() < deadline,
            "the 40 records and a sync pass in the status: {t:#}\n{m:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        compared(&topic_after),
        compared(&topic_before),
        "a mirroring MirrorTopic changed outside the ignored fields"
    );
    assert_eq!(
        compared(&mirror_after),
        compared(&mirror_before),
        "a healthy ClusterMirror changed outside the ignored fields"
    );
    eprintln!(
        "under traffic, only ignored fields changed ({:?})",
        traffic.elapsed()
    );
    assert_ne!(
        topic_after["metadata"]["resourceVersion"],
        topic_before["metadata"]["resourceVersion"]
    );

    // Failed: another client writes to audit's destination, then the source moves on. MIRRORING
    // is the lifecycle's word, not "copied": the fetcher may not have started yet, so the foreign
    // record goes in only after kmirror copied audit's 50 records (before that the same write is
    // refused as DestinationNotEmpty instead).
    let dest_admin = bed.dest_config(DestUser::Admin);
    wait_until(
        "audit's 50 records on the destination",
        Duration::from_secs(90),
        || watermarks(&dest_admin, &audit, 0).is_ok_and(|(_, end)| end == 50),
    );
    produce_all(
        &bed.dest_config(DestUser::Admin),
        &audit,
        &mixed_records(1, 1, 0, 3),
        &[],
    )
    .unwrap();
    produce_all(&source, &audit, &mixed_records(10, 1, 0, 4), &[]).unwrap();
    s.wait_topic("audit", "FAILED", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Failed, 1)
    })
    .await;
    // kubectl wait does not take a FAILED topic for Ready.
    let wait = kubectl(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready",
        "mirrortopic/audit",
        "--timeout=3s",
    ]);
    assert!(!wait.status.success(), "a FAILED topic is not Ready");
    // kstatus: a partition FAILED for a reason that is not retried stalls the topic; Ready says
    // which partition, why and where, in one line.
    let wait = kubectl(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Stalled",
        "mirrortopic/audit",
        "--timeout=60s",
    ]);
    assert!(
        wait.status.success(),
        "{}",
        String::from_utf8_lossy(&wait.stderr)
    );
    let failed = get(&ns, "mirrortopic", "audit");
    let partition = &failed["status"]["partitions"][0];
    eprintln!("FAILED: {}", partition["lastError"]);
    let last_error = partition["lastError"].as_str().unwrap();
    assert!(
        !last_error.contains('\n') && !last_error.contains('{') && last_error.len() <= 320,
        "lastError is one short line: {last_error:?}"
    );
    let condition = |kind: &str| {
        failed["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} condition: {failed:#}"))
    };
    let ready = condition("Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PartitionFailed"))
    );
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.starts_with("partition 0 FAILED (ForeignWrite)") && !message.contains('\n'),
        "{message}"
    );
    assert_eq!(condition("Reconciling")["status"], "False");
    for kind in ["Ready", "Reconciling", "Stalled"] {
        assert_eq!(
            condition(kind)["observedGeneration"],
            failed["metadata"]["generation"],
            "{kind}"
        );
    }
    // The alerts' series, as scraped: the FAILED partition with its reason, the state topic.
    let failed_series = format!(
        r#"kmirror_operator_partition_failed{{namespace="{ns}",name="dr",topic="{audit}",partition="0",reason="ForeignWrite"}} 1"#
    );
    let scraped = operator.metrics_text().expect("/metrics answers");
    assert!(
        scraped.lines().any(|l| l == failed_series),
        "no {failed_series} in\n{scraped}"
    );
    let state_topic = Scenario::mirror_spec(bed)["stateTopic"]
        .as_str()
        .unwrap_or("__kmirror_state")
        .to_string();
    assert_eq!(
        operator.metric(&format!(
            r#"kmirror_operator_state_topic_available{{state_topic="{state_topic}"}}"#
        )),
        Some(1.0),
        "{scraped}"
    );
    capture.check(
        get(&ns, "mirrortopic", "audit"),
        "failed",
        "Degraded",
        "1 of 1 partitions FAILED: partition 0 FAILED (ForeignWrite)",
    );
    s.wait_mirror("dr", "PartitionsFailed", Duration::from_secs(60), |m| {
        m.status
            .as_ref()
            .is_some_and(|st| st.partitions.failed == 1)
            && m.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == "PartitionsFailed")
            })
    })
    .await;
    capture.check(
        get(&ns, "clustermirror", "dr"),
        "failed",
        "Degraded",
        "PartitionsFailed: 1 partitions FAILED",
    );
    kubectl(&["delete", "-n", &ns, "mirrortopic/audit", "--timeout=60s"]);
    let gone = operator.metrics_text().expect("/metrics answers");
    assert!(
        !gone.contains(&format!(r#"topic="{audit}",partition="0",reason="#)),
        "a deleted topic leaves no FAILED series:\n{gone}"
    );
    s.wait_mirror("dr", "only orders", Duration::from_secs(60), |m| {
        m.status.as_ref().is_some_and(|st| {
            st.partitions.total == 2
                && st.partitions.failed == 0
                && st
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    })
    .await;

    // A change the operator has not seen yet (it is stopped): Progressing.
    operator.kill();
    s.patch_topic("orders", json!({"state": "Paused"})).await;
    capture.check(
        get(&ns, "mirrortopic", "orders"),
        "unobserved",
        "Progressing",
        "Waiting for the kmirror operator to observe generation 2",
    );

    // Paused: Suspended.
    let _operator = OperatorProcess::spawn(bed, &ns, &[]);
    let paused = until(&s, "orders PAUSED", Duration::from_secs(90), |v| {
        v["status"]["observedGeneration"] == 2
            && v["status"]["partitions"]
                .as_array()
                .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p["state"] == "PAUSED"))
            && ready_reason(v) == Some(("True".into(), "Paused".into()))
    })
    .await;
    assert_eq!(paused["spec"]["state"], "Paused");
    capture.check(
        get(&ns, "mirrortopic", "orders"),
        "paused",
        "Suspended",
        "Paused: all 2 partitions PAUSED",
    );
    s.wait_mirror("dr", "2 paused", Duration::from_secs(60), |m| {
        m.status
            .as_ref()
            .is_some_and(|st| st.partitions.paused == 2)
    })
    .await;
    capture.check(
        get(&ns, "clustermirror", "dr"),
        "paused",
        "Suspended",
        "Paused: all 2 partitions PAUSED",
    );

    // Failed over: Healthy, and the message says so.
    s.patch_topic("orders", json!({"state": "Stopped"})).await;
    let wait = kubectl(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready",
        "mirrortopic/orders",
        "--timeout=120s",
    ]);
    assert!(
        wait.status.success(),
        "{}",
        String::from_utf8_lossy(&wait.stderr)
    );
    let t = s.topic("orders").await.unwrap();
    assert!(
        all_partitions(&t, PartitionState::Stopped, 2),
        "{:?}",
        t.status
    );
    capture.check(
        get(&ns, "mirrortopic", "orders"),
        "stopped",
        "Healthy",
        "Failed over: all 2 partitions STOPPED",
    );
    s.wait_mirror("dr", "2 stopped", Duration::from_secs(60), |m| {
        m.status
            .as_ref()
            .is_some_and(|st| st.partitions.stopped == 2)
    })
    .await;
    capture.check(
        get(&ns, "clustermirror", "dr"),
        "stopped",
        "Healthy",
        "Failed over: all 2 partitions STOPPED",
    );

    // A mirror whose source cannot be reached: Degraded, saying why.
    let mut spec = Scenario::mirror_spec(bed);
    spec["source"]["bootstrapServers"] = json!("127.0.0.1:1");
    s.apply_mirror("unreachable", spec).await;
    s.wait_mirror(
        "unreachable",
        "ClusterUnavailable",
        Duration::from_secs(90),
        |m| {
            m.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == "ClusterUnavailable")
            })
        },
    )
    .await;
    capture.check(
        get(&ns, "clustermirror", "unreachable"),
        "unreachable",
        "Degraded",
        "ClusterUnavailable: source:",
    );
    capture.finish();
    s.cleanup().await;
}
