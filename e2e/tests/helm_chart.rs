//! Packaging: the Helm chart (charts/kmirror), the plain manifests (deploy/), the Grafana
//! dashboard and the Dockerfile.
//!
//! Offline checks render the chart with `helm template` for several value sets and assert on
//! the parsed objects. Against the bed's control plane: the rendered objects pass server-side
//! validation; the chart's RBAC grants exactly the intended rules and refuses the rest
//! (impersonating the operator's ServiceAccount); and `helm install` runs the operator
//! in-cluster, as that ServiceAccount, until a topic mirrors with fetcher pods on the node agent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{binary, ensure_state_topic};
use kmirror_e2e::kafka::{DestUser, create_topic, mixed_records, produce_all, watermarks};
use kmirror_e2e::operator::{Scenario, all_partitions};
use kmirror_e2e::testbed::repo_root;
use kube::api::{Api, ListParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers

fn chart() -> PathBuf {
    repo_root().join("charts/kmirror")
}

/// helm from the bed (or `KMIRROR_HELM` when set: rendering needs no running bed).
fn helm() -> String {
    std::env::var("KMIRROR_HELM").unwrap_or_else(|_| Testbed::get().var("KMIRROR_HELM").to_string())
}

fn kubectl() -> String {
    Testbed::get().var("KMIRROR_KUBECTL").to_string()
}

/// Runs a command of the bed's tools (with the bed's KUBECONFIG).
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("KUBECONFIG", Testbed::get().var("KUBECONFIG"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("wait for command")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs and asserts success; returns stdout.
fn ok(program: &str, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(program, args, stdin);
    assert!(
        out.status.success(),
        "{program} {} failed:\n{}",
        args.join(" "),
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Parses a multi-document YAML stream, skipping empty documents.
fn parse_yaml_stream(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `helm template` of the chart in namespace `ns` with extra arguments (`--set …`).
fn render_in(ns: &str, args: &[&str]) -> Result<String, String> {
    let chart = chart();
    let mut all = vec![
        "template",
        "kmirror",
        chart.to_str().unwrap(),
        "--namespace",
        ns,
    ];
    all.extend_from_slice(args);
    let out = run(&helm(), &all, None);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(text(&out))
    }
}

/// The rendered objects for a value set, in namespace `kmirror`.
fn render(args: &[&str]) -> Vec<Value> {
    let yaml = render_in("kmirror", args)
        .unwrap_or_else(|e| panic!("helm template {} failed:\n{e}", args.join(" ")));
    parse_yaml_stream(&yaml)
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind}, got {found:#?}"
    );
    found[0]
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn container(objects: &[Value]) -> &Value {
    let deployment = one(objects, "Deployment");
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1);
    &containers[0]
}

fn args_of(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

fn env_of<'a>(objects: &'a [Value], name: &str) -> Option<&'a Value> {
    container(objects)["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == name)
}

/// One RBAC permission: (API group, resource, verb, resource name or "").
type Grant = (String, String, String, String);

/// Expands rules (Role/ClusterRole `rules` or a review's `resourceRules`) into single grants.
fn grants(rules: &[Value]) -> BTreeSet<Grant> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let mut out = BTreeSet::new();
    for rule in rules {
        let names = strings(&rule["resourceNames"]);
        let names = if names.is_empty() {
            vec![String::new()]
        } else {
            names
        };
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    for n in &names {
                        out.insert((g.clone(), r.clone(), v.clone(), n.clone()));
                    }
                }
            }
        }
    }
    out
}

fn grant_set(spec: &[(&str, &str, &[&str], &str)]) -> BTreeSet<Grant> {
    spec.iter()
        .flat_map(|(g, r, verbs, name)| {
            verbs.iter().map(|v| {
                (
                    g.to_string(),
                    r.to_string(),
                    v.to_string(),
                    name.to_string(),
                )
            })
        })
        .collect()
}

/// What the operator needs in every namespace it watches, and nothing else.
fn operator_grants() -> BTreeSet<Grant> {
    grant_set(&[
        (
            "kmirror.io",
            "clustermirrors",
            &["get", "list", "watch", "patch"],
            "",
        ),
        (
            "kmirror.io",
            "mirrortopics",
            &["get", "list", "watch", "create", "patch", "delete"],
            "",
        ),
        ("kmirror.io", "clustermirrors/status", &["patch"], ""),
        ("kmirror.io", "mirrortopics/status", &["patch"], ""),
        ("kmirror.io", "clustermirrors/finalizers", &["update"], ""),
        ("kmirror.io", "mirrortopics/finalizers", &["update"], ""),
        (
            "",
            "pods",
            &["get", "list", "watch", "create", "delete"],
            "",
        ),
        ("", "secrets", &["get", "list", "watch"], ""),
        ("events.k8s.io", "events", &["create", "patch"], ""),
    ])
}

/// The leader-election grants for Lease `lease`.
fn lease_grants(lease: &str) -> BTreeSet<Grant> {
    grant_set(&[
        ("coordination.k8s.io", "leases", &["create"], ""),
        ("coordination.k8s.io", "leases", &["get", "update"], lease),
    ])
}

fn rules_of(role: &Value) -> Vec<Value> {
    role["rules"].as_array().expect("rules").clone()
}

fn assert_no_wildcards(objects: &[Value]) {
    for role in of_kind(objects, "Role")
        .into_iter()
        .chain(of_kind(objects, "ClusterRole"))
    {
        for (g, r, v, _) in grants(&rules_of(role)) {
            assert!(
                !g.contains('*') && !r.contains('*') && !v.contains('*'),
                "wildcard in {}: {g}/{r} {v}",
                role["metadata"]["name"]
            );
        }
        assert!(role.get("aggregationRule").is_none());
    }
}

// ---------------------------------------------------------------------------------------------
// Lint, schema and documentation

#[test]
fn helm_lint_is_clean_for_every_value_set() {
    let chart = chart();
    for extra in [
        vec![],
        vec!["--set", "replicaCount=3"],
        vec![
            "--set",
            "watchAllNamespaces=true",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.podMonitor.enabled=true",
            "--set",
            "grafanaDashboard.enabled=true",
        ],
    ] {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
        args.extend(extra.iter().copied());
        let out = ok(&helm(), &args, None);
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
        for level in ["[ERROR]", "[WARNING]", "[INFO]"] {
            assert!(
                !out.contains(level),
                "helm lint {extra:?} reports {level}:\n{out}"
            );
        }
    }
}

#[test]
fn schema_rejects_unknown_and_invalid_values() {
    for (set, complaint) in [
        (
            "replicas=2",
            "at '': additional properties 'replicas' not allowed",
        ),
        (
            "image.name=x",
            "at '/image': additional properties 'name' not allowed",
        ),
        (
            "leaderElection.enable=true",
            "at '/leaderElection': additional properties 'enable' not allowed",
        ),
        (
            "metrics.serviceMonitor.intervall=10s",
            "at '/metrics/serviceMonitor': additional properties 'intervall' not allowed",
        ),
        ("logging.format=xml", "at '/logging/format'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("replicaCount=-1", "at '/replicaCount'"),
        ("http.port=70000", "at '/http/port'"),
        (
            "metrics.serviceMonitor.interval=soon",
            "at '/metrics/serviceMonitor/interval'",
        ),
    ] {
        let err = render_in("kmirror", &["--set", set]).expect_err(&format!(
            "--set {set} must be rejected by values.schema.json"
        ));
        assert!(
            err.contains("don't meet the specifications of the schema") && err.contains(complaint),
            "--set {set}: unexpected error:\n{err}"
        );
    }
    // The same keys with valid values pass (the rejections above are about the values).
    render(&[
        "--set",
        "replicaCount=2",
        "--set",
        "logging.format=text",
        "--set",
        "http.port=9090",
        "--set",
        "metrics.serviceMonitor.interval=15s",
    ]);
}

/// Every leaf of values.yaml (lists and free-form maps count as leaves).
fn value_paths(prefix: &str, value: &Value, schema: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map)
            if !map.is_empty() && schema["additionalProperties"] == Value::Bool(false) =>
        {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                value_paths(&path, v, &schema["properties"][k], out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn values_are_strictly_schematised_and_documented() {
    let values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    // Every object of the schema that lists properties is closed, and every property is
    // described.
    fn walk(path: &str, node: &Value) {
        if let Some(props) = node["properties"].as_object() {
            assert_eq!(
                node["additionalProperties"],
                Value::Bool(false),
                "schema object {path:?} must set additionalProperties: false"
            );
            for (k, p) in props {
                assert!(
                    p["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "schema property {path}.{k} has no description"
                );
                walk(&format!("{path}.{k}"), p);
            }
        }
    }
    walk("", &schema);
    let mut paths = Vec::new();
    value_paths("", &values, &schema, &mut paths);
    assert!(paths.len() > 40, "{paths:?}");
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    for path in &paths {
        // In the schema...
        let mut node = &schema;
        for part in path.split('.') {
            node = &node["properties"][part];
            assert!(
                !node.is_null(),
                "values.yaml key {path} is not in values.schema.json"
            );
        }
        // ...and in the README's values table.
        assert!(
            readme.contains(&format!("| `{path}` |")),
            "values.yaml key {path} is missing from the values table in charts/kmirror/README.md"
        );
    }
}

#[test]
fn chart_metadata_and_crds() {
    let meta: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(meta["apiVersion"], "v2");
    assert_eq!(meta["version"], "0.1.0");
    assert_eq!(meta["appVersion"], "0.1.0");
    assert_eq!(meta["kubeVersion"], ">=1.30.0-0");
    // The CRDs ship in crds/ (installed by Helm, never templated): `helm template` leaves them
    // out unless asked to include them.
    let crds = parse_yaml_stream(
        &std::fs::read_to_string(chart().join("crds/kmirror.io_crds.yaml")).unwrap(),
    );
    let names: BTreeSet<&str> = crds
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["clustermirrors.kmirror.io", "mirrortopics.kmirror.io"])
    );
    assert!(of_kind(&render(&[]), "CustomResourceDefinition").is_empty());
    assert_eq!(
        of_kind(&render(&["--include-crds"]), "CustomResourceDefinition").len(),
        2
    );
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains("CustomResourceDefinition"));
    }
}

// ---------------------------------------------------------------------------------------------
// Template assertions

#[test]
fn operator_deployment_is_locked_down_probed_and_wired() {
    let objects = render(&[]);
    let deployment = one(&objects, "Deployment");
    assert_eq!(deployment["metadata"]["name"], "kmirror-operator");
    assert_eq!(deployment["metadata"]["namespace"], "kmirror");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "kmirror-operator");
    assert_eq!(pod["automountServiceAccountToken"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    // The selector selects the pod template.
    let selector = deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in selector {
        assert_eq!(&labels[k], v, "pod label {k}");
    }

    let c = container(&objects);
    assert_eq!(c["command"], json!(["kmirror-operator"]));
    assert_eq!(c["image"], "ghcr.io/kmirror/kmirror:0.1.0");
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(sc["capabilities"].get("add").is_none());
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(
        c["ports"],
        json!([{"name": "http", "containerPort": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "http"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "http"})
    );
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());

    let args = args_of(&objects);
    assert!(
        args.contains(&"--http-addr=0.0.0.0:8080".to_string()),
        "{args:?}"
    );
    assert!(args.contains(&"--log-format=json".to_string()), "{args:?}");
    assert!(
        !args.iter().any(|a| a.starts_with("--leader-election")),
        "{args:?}"
    );
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_IP", "status.podIP"),
        ("KMIRROR_WATCH_NAMESPACE", "metadata.namespace"),
    ] {
        assert_eq!(
            env_of(&objects, name).unwrap_or_else(|| panic!("env {name}"))["valueFrom"]["fieldRef"]
                ["fieldPath"],
            path,
            "env {name}"
        );
    }
    // Fetcher pods default to the operator's image.
    assert_eq!(
        env_of(&objects, "KMIRROR_FETCHER_IMAGE").unwrap()["value"],
        "ghcr.io/kmirror/kmirror:0.1.0"
    );

    // Values reach the pod.
    let objects = render(&[
        "--set",
        "image.repository=registry.example/kmirror",
        "--set",
        "image.tag=1.2.3",
        "--set",
        "fetcherImage=registry.example/fetcher:9",
        "--set",
        "http.port=9090",
        "--set",
        "statusIntervalMs=250",
        "--set",
        "extraArgs={--lease-duration-seconds=20}",
    ]);
    let c = container(&objects);
    assert_eq!(c["image"], "registry.example/kmirror:1.2.3");
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    assert_eq!(
        env_of(&objects, "KMIRROR_FETCHER_IMAGE").unwrap()["value"],
        "registry.example/fetcher:9"
    );
    let args = args_of(&objects);
    for expected in [
        "--http-addr=0.0.0.0:9090",
        "--status-interval-ms=250",
        "--lease-duration-seconds=20",
    ] {
        assert!(
            args.contains(&expected.to_string()),
            "{expected} in {args:?}"
        );
    }
    let digest = format!("sha256:{}", "a".repeat(64));
    let objects = render(&["--set", &format!("image.digest={digest}")]);
    assert_eq!(
        container(&objects)["image"],
        format!("ghcr.io/kmirror/kmirror@{digest}")
    );
    assert_eq!(
        env_of(&objects, "KMIRROR_FETCHER_IMAGE").unwrap()["value"],
        format!("ghcr.io/kmirror/kmirror@{digest}")
    );
}

#[test]
fn default_rbac_is_a_namespaced_role_with_exactly_the_needed_rules() {
    let objects = render(&[]);
    assert!(of_kind(&objects, "ClusterRole").is_empty());
    assert!(of_kind(&objects, "ClusterRoleBinding").is_empty());
    let role = one(&objects, "Role");
    assert_eq!(role["metadata"]["namespace"], "kmirror");
    assert_eq!(grants(&rules_of(role)), operator_grants());
    assert_no_wildcards(&objects);
    let binding = one(&objects, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], "kmirror");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "kmirror-operator", "namespace": "kmirror"}])
    );
    let sa = one(&objects, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"], "kmirror-operator");
    // Every rule carries a comment with its reason (in the rendered text, right above it).
    let yaml = render_in("kmirror", &["--set", "replicaCount=2"]).unwrap();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut rules = 0;
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("- apiGroups:") {
            rules += 1;
            assert!(
                lines[i - 1].trim_start().starts_with('#'),
                "RBAC rule without a comment:\n{}\n{line}",
                lines[i - 1]
            );
        }
    }
    assert_eq!(rules, 7 + 2, "operator rules and the two Lease rules");
}

#[test]
fn watching_all_namespaces_uses_a_cluster_role_with_the_same_rules() {
    let objects = render(&["--set", "watchAllNamespaces=true"]);
    assert!(of_kind(&objects, "Role").is_empty());
    assert!(of_kind(&objects, "RoleBinding").is_empty());
    let role = one(&objects, "ClusterRole");
    assert_eq!(role["metadata"]["name"], "kmirror-operator-kmirror");
    assert!(role["metadata"].get("namespace").is_none());
    assert_eq!(grants(&rules_of(role)), operator_grants());
    assert_no_wildcards(&objects);
    let binding = one(&objects, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], "kmirror-operator-kmirror");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "kmirror-operator", "namespace": "kmirror"}])
    );
    assert!(env_of(&objects, "KMIRROR_WATCH_NAMESPACE").is_none());
    // rbac.create=false leaves RBAC to the administrator.
    let objects = render(&["--set", "rbac.create=false", "--set", "replicaCount=2"]);
    for kind in ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"] {
        assert!(
            of_kind(&objects, kind).is_empty(),
            "{kind} with rbac.create=false"
        );
    }
}

#[test]
fn two_replicas_turn_on_leader_election_with_a_lease_role_and_a_pdb() {
    let single = render(&[]);
    assert!(of_kind(&single, "PodDisruptionBudget").is_empty());
    assert!(named(&single, "Role", "kmirror-operator-leader-election").is_none());

    let objects = render(&["--set", "replicaCount=2"]);
    assert_eq!(one(&objects, "Deployment")["spec"]["replicas"], 2);
    let args = args_of(&objects);
    for expected in [
        "--leader-election",
        "--lease-name=kmirror-operator",
        "--lease-duration-seconds=15",
    ] {
        assert!(
            args.contains(&expected.to_string()),
            "{expected} in {args:?}"
        );
    }
    let strategy = &one(&objects, "Deployment")["spec"]["strategy"];
    assert_eq!(strategy["type"], "RollingUpdate");
    assert_eq!(strategy["rollingUpdate"]["maxUnavailable"], 0);
    let lease_role = named(&objects, "Role", "kmirror-operator-leader-election")
        .expect("the leader-election Role");
    assert_eq!(
        grants(&rules_of(lease_role)),
        lease_grants("kmirror-operator")
    );
    let lease_binding =
        named(&objects, "RoleBinding", "kmirror-operator-leader-election").expect("its binding");
    assert_eq!(
        lease_binding["roleRef"]["name"],
        "kmirror-operator-leader-election"
    );
    assert_eq!(lease_binding["subjects"][0]["name"], "kmirror-operator");
    let pdb = one(&objects, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let pod_labels = &one(&objects, "Deployment")["spec"]["template"]["metadata"]["labels"];
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "PDB selects the operator pods");
    }
    assert_no_wildcards(&objects);

    // Asked for with one replica: election and Lease rules, but no PDB.
    let objects = render(&[
        "--set",
        "leaderElection.enabled=true",
        "--set",
        "leaderElection.leaseName=my-lease",
    ]);
    assert!(args_of(&objects).contains(&"--leader-election".to_string()));
    assert!(args_of(&objects).contains(&"--lease-name=my-lease".to_string()));
    assert_eq!(
        grants(&rules_of(
            named(&objects, "Role", "kmirror-operator-leader-election").unwrap()
        )),
        lease_grants("my-lease")
    );
    assert!(of_kind(&objects, "PodDisruptionBudget").is_empty());
    // And a PDB can be declined.
    let objects = render(&[
        "--set",
        "replicaCount=3",
        "--set",
        "podDisruptionBudget.enabled=false",
    ]);
    assert!(of_kind(&objects, "PodDisruptionBudget").is_empty());
}

#[test]
fn monitoring_objects_only_when_enabled() {
    let objects = render(&[]);
    for kind in ["ServiceMonitor", "PodMonitor", "ConfigMap"] {
        assert!(
            of_kind(&objects, kind).is_empty(),
            "{kind} is off by default"
        );
    }
    let service = one(&objects, "Service");
    assert_eq!(service["spec"]["ports"][0]["name"], "http");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let pod_labels = &one(&objects, "Deployment")["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "the Service selects the operator pods");
    }

    let objects = render(&[
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.labels.release=prom",
        "--set",
        "metrics.podMonitor.enabled=true",
    ]);
    let sm = one(&objects, "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "prom");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "http");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    // The mirror series' own namespace label is kept, not renamed to exported_namespace.
    assert_eq!(sm["spec"]["endpoints"][0]["honorLabels"], true);
    let service = one(&objects, "Service");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
    let pm = one(&objects, "PodMonitor");
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["honorLabels"], true);
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "kmirror-fetcher"
    );
    assert_eq!(
        pm["spec"]["namespaceSelector"]["matchNames"],
        json!(["kmirror"])
    );
    let pm = render(&[
        "--set",
        "metrics.podMonitor.enabled=true",
        "--set",
        "watchAllNamespaces=true",
    ]);
    assert_eq!(
        one(&pm, "PodMonitor")["spec"]["namespaceSelector"],
        json!({"any": true})
    );
}

#[test]
fn dashboard_configmap_carries_the_dashboard() {
    let objects = render(&[
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "grafanaDashboard.namespace=monitoring",
    ]);
    let cm = one(&objects, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    let shipped: Value =
        serde_json::from_str(cm["data"]["kmirror.json"].as_str().unwrap()).unwrap();
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("dashboards/kmirror.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, file);
}

// ---------------------------------------------------------------------------------------------
// The Grafana dashboard

/// Every series the operator and the fetcher expose: name → label names. One series of each
/// family is recorded, then the real exposition is parsed.
fn exposed_series() -> BTreeMap<String, BTreeSet<String>> {
    use kmirror_fetcher::metrics as fm;
    use kmirror_operator::metrics as om;
    let op = om::Metrics::default();
    let controller = om::ControllerLabels {
        controller: "mirrortopic".into(),
    };
    let partition = om::PartitionLabels::new("ns/m", "t", 0);
    let state = om::StateLabels::new("ns/m", "t", "MIRRORING");
    op.reconciles.get_or_create(&controller).inc();
    op.errors
        .get_or_create(&om::ErrorLabels {
            controller: "mirrortopic".into(),
            error: "kafka".into(),
        })
        .inc();
    op.duration.get_or_create(&controller).observe(0.1);
    op.partitions.get_or_create(&state).set(1);
    op.lag.get_or_create(&partition).set(1);
    op.lag_seconds.get_or_create(&partition).set(1.0);
    op.status_writes
        .get_or_create(&om::KindLabels {
            kind: "MirrorTopic".into(),
        })
        .inc();
    op.sync_runs
        .get_or_create(&om::SyncLabels {
            namespace: "ns".into(),
            name: "m".into(),
            part: "topics".into(),
            result: "ok".into(),
        })
        .inc();
    op.transitions.get_or_create(&state).inc();
    op.leader.set(1);
    op.group_sync_succeeded("ns/m", 1.0);
    let f = fm::FetcherMetrics::new();
    let labels = fm::PartitionLabels::new("ns/m", "t", 0);
    f.records.get_or_create(&labels).inc();
    f.bytes.get_or_create(&labels).inc();
    f.lag_records.get_or_create(&labels).set(1);
    f.lag_seconds.get_or_create(&labels).set(1.0);
    f.offsets_identical.get_or_create(&labels).set(1);
    f.last_mirrored_offset.get_or_create(&labels).set(1);
    f.gaps.get_or_create(&labels).inc();
    f.set_state(&labels, PartitionState::Mirroring);

    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in op.encode().lines().chain(f.encode().lines()) {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..line.rfind('}').unwrap()]),
            None => (line.split(' ').next().unwrap(), ""),
        };
        let labels = out.entry(name.to_string()).or_default();
        for pair in rest.split(',').filter(|p| !p.is_empty()) {
            labels.insert(pair.split('=').next().unwrap().to_string());
        }
    }
    out
}

fn identifier_at(s: &str, start: usize) -> &str {
    let end = s[start..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .map_or(s.len(), |i| start + i);
    &s[start..end]
}

/// Labels a series may carry that no kmirror process exposes: Prometheus external labels.
const EXTERNAL: [&str; 1] = ["cluster"];

/// Metric names and the label names they are matched on, in a PromQL expression.
fn selectors(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = expr[at..].find("kmirror_") {
        let start = at + i;
        let name = identifier_at(expr, start);
        at = start + name.len();
        let mut labels = Vec::new();
        if expr[at..].starts_with('{') {
            let close = at + expr[at..].find('}').expect("closed selector");
            for matcher in expr[at + 1..close].split(',') {
                let label: String = matcher
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !label.is_empty() {
                    labels.push(label);
                }
            }
            at = close;
        }
        out.push((name.to_string(), labels));
    }
    out
}

/// Label names of `by (…)` clauses.
fn grouping_labels(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = expr[at..].find("by (") {
        let open = at + i + 4;
        let close = open + expr[open..].find(')').unwrap();
        out.extend(expr[open..close].split(',').map(|l| l.trim().to_string()));
        at = close;
    }
    out
}

#[test]
fn dashboard_is_valid_and_queries_only_real_metrics() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("dashboards/kmirror.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    assert_eq!(dashboard["title"], "kmirror");
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let series = exposed_series();
    // Names a query may use: series names, and a histogram's _bucket/_sum/_count.
    assert!(series.contains_key("kmirror_operator_reconcile_duration_seconds_bucket"));
    assert!(series.contains_key("kmirror_operator_sync_runs_total"));

    let variables: BTreeSet<String> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    let mut exprs: Vec<String> = Vec::new();
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().unwrap();
            // label_values(metric{…}, label)
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .expect("label_values query");
            let (metric, label) = inner.rsplit_once(',').unwrap();
            let (name, _) = &selectors(metric)[0];
            assert!(
                series[name].contains(label.trim()) || EXTERNAL.contains(&label.trim()),
                "variable {}: {name} has no label {label}",
                v["name"]
            );
            exprs.push(q.to_string());
        }
    }
    let mut ids = BTreeSet::new();
    let mut panels = 0;
    let mut panel_exprs = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(panel["id"].as_i64().unwrap()),
            "duplicate panel id"
        );
        for key in ["x", "y", "w", "h"] {
            assert!(
                panel["gridPos"][key].is_i64(),
                "panel {} gridPos.{key}",
                panel["title"]
            );
        }
        if panel["type"] == "row" {
            continue;
        }
        panels += 1;
        assert!(
            panel["description"].as_str().is_some_and(|d| !d.is_empty()),
            "panel {} has no description",
            panel["title"]
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        let refs: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refs.len(), targets.len(), "refIds of {}", panel["title"]);
        for t in targets {
            exprs.push(t["expr"].as_str().unwrap().to_string());
            panel_exprs.insert(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(panels >= 15, "{panels} panels");

    let mut used = BTreeSet::new();
    for expr in &exprs {
        let found = selectors(expr);
        assert!(!found.is_empty(), "query without a kmirror metric: {expr}");
        let mut available = BTreeSet::from(["le".to_string()]);
        for (name, labels) in &found {
            let known = series.get(name).unwrap_or_else(|| {
                panic!(
                    "{expr}: no such metric {name}; exposed: {:?}",
                    series.keys()
                )
            });
            for l in labels {
                assert!(
                    known.contains(l) || EXTERNAL.contains(&l.as_str()),
                    "{expr}: {name} has no label {l}"
                );
            }
            available.extend(known.iter().cloned());
            used.insert(name.clone());
            // Every panel's query is narrowed to the chosen cluster, and a query of a mirror's
            // series to the chosen namespaces, mirrors (and topics).
            if !panel_exprs.contains(expr) {
                continue;
            }
            let matched = |var: &str| {
                labels.contains(&var[1..].to_string())
                    && expr.contains(&format!("{}=~\"{var}\"", &var[1..]))
            };
            assert!(
                matched("$cluster"),
                "{expr}: {name} is not filtered by $cluster"
            );
            if known.contains("namespace") && known.contains("name") {
                for var in ["$namespace", "$name"] {
                    assert!(matched(var), "{expr}: {name} is not filtered by {var}");
                }
            }
            if known.contains("topic") {
                assert!(
                    matched("$topic"),
                    "{expr}: {name} is not filtered by $topic"
                );
            }
        }
        for l in grouping_labels(expr) {
            assert!(
                available.contains(&l),
                "{expr}: grouping by unknown label {l}"
            );
        }
        // Variables referenced exist.
        for var in ["$cluster", "$namespace", "$name", "$topic", "$datasource"] {
            if expr.contains(var) {
                assert!(variables.contains(&var[1..]));
            }
        }
    }
    for needed in [
        "kmirror_operator_partitions",
        "kmirror_operator_partition_lag_records",
        "kmirror_operator_partition_lag_seconds",
        "kmirror_operator_sync_runs_total",
        "kmirror_operator_reconcile_errors_total",
        "kmirror_operator_reconcile_duration_seconds_bucket",
        "kmirror_fetcher_records_total",
        "kmirror_fetcher_bytes_total",
        "kmirror_fetcher_lag_records",
        "kmirror_fetcher_offsets_identical",
        "kmirror_operator_group_sync_last_success_timestamp_seconds",
        "kmirror_build_info",
    ] {
        assert!(used.contains(needed), "the dashboard shows no {needed}");
    }
    // The variables, in the order they narrow each other; the cluster is optional (All matches
    // series without the label).
    let order: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        ["datasource", "cluster", "namespace", "name", "topic"]
    );
    for v in dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
    {
        assert_eq!(v["includeAll"], true, "{}", v["name"]);
        assert_eq!(v["allValue"], ".*", "{}", v["name"]);
    }
    // The checker itself catches a wrong name and a wrong label.
    assert!(!series.contains_key("kmirror_fetcher_records"));
    assert_eq!(
        selectors("sum by (a) (rate(kmirror_x_total{mirror=~\"$m\", y!=\"1\"}[5m]))"),
        vec![(
            "kmirror_x_total".to_string(),
            vec!["mirror".to_string(), "y".to_string()]
        )]
    );
    assert_eq!(
        grouping_labels("max by (mirror, topic) (x)"),
        ["mirror", "topic"]
    );
}

// ---------------------------------------------------------------------------------------------
// deploy/ and the Dockerfile

#[test]
fn deploy_manifests_are_the_rendered_chart() {
    let root = repo_root();
    let out = std::env::temp_dir().join(kmirror_e2e::kafka::unique_name("kmirror-deploy"));
    let script = root.join("deploy/render.sh");
    let status = Command::new(&script)
        .arg(&out)
        .env("KMIRROR_HELM", helm())
        .status()
        .expect("run deploy/render.sh");
    assert!(status.success(), "deploy/render.sh failed");
    for file in ["crds.yaml", "namespace.yaml", "kmirror.yaml"] {
        let fresh = std::fs::read_to_string(out.join(file)).unwrap();
        let committed = std::fs::read_to_string(root.join("deploy").join(file)).unwrap_or_default();
        assert!(
            fresh == committed,
            "deploy/{file} differs from the chart; run deploy/render.sh"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
    // The kustomization builds and holds everything: CRDs, namespace, operator.
    let built = parse_yaml_stream(&ok(
        &kubectl(),
        &["kustomize", root.join("deploy").to_str().unwrap()],
        None,
    ));
    let kinds: BTreeMap<String, usize> = built.iter().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o["kind"].as_str().unwrap().to_string())
            .or_default() += 1;
        m
    });
    let expected: BTreeMap<String, usize> = [
        ("CustomResourceDefinition", 2),
        ("Namespace", 1),
        ("ServiceAccount", 1),
        ("Role", 1),
        ("RoleBinding", 1),
        ("Service", 1),
        ("Deployment", 1),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(kinds, expected);
    // The manifests equal a default `helm template` (the drift check above compares files).
    let deployment = one(&built, "Deployment");
    assert_eq!(deployment, one(&render(&[]), "Deployment"));
}

/// `ARG NAME=value` defaults of the Dockerfile.
fn dockerfile_args(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("ARG "))
        .filter_map(|a| a.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn dockerfile_is_multi_stage_pinned_and_non_root() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    // Continuation lines joined, comments dropped.
    let joined = text.replace("\\\n", " ");
    let instructions: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let args = dockerfile_args(&text);
    let expand = |s: &str| {
        args.iter().fold(s.to_string(), |s, (k, v)| {
            s.replace(&format!("${{{k}}}"), v)
        })
    };
    let froms: Vec<String> = instructions
        .iter()
        .filter_map(|l| l.strip_prefix("FROM "))
        .map(expand)
        .collect();
    assert_eq!(froms.len(), 2, "builder and runtime stages: {froms:?}");
    // The builder's Rust is the toolchain the repository pins.
    let toolchain = std::fs::read_to_string(root.join("rust-toolchain.toml")).unwrap();
    let channel = toolchain
        .lines()
        .find_map(|l| l.strip_prefix("channel = "))
        .unwrap()
        .trim_matches('"');
    assert_eq!(args["RUST_VERSION"], channel);
    // Each base: the expected name and tag, pinned by a sha256 digest.
    let pinned = |from: &str| -> (String, String) {
        let image = from.split(' ').next().unwrap();
        let (named, digest) = image
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("base {image} is not pinned by digest"));
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
            "{image}: a digest is sha256: and 64 hex digits"
        );
        let tag = named.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
        assert!(
            !tag.is_empty() && tag != "latest",
            "base {image} has no tag"
        );
        (named.to_string(), from[image.len()..].to_string())
    };
    assert_eq!(
        pinned(&froms[0]),
        (
            format!(
                "docker.io/library/rust:{channel}-slim-{}",
                args["DEBIAN_RELEASE"]
            ),
            " AS builder".to_string()
        )
    );
    assert_eq!(
        pinned(&froms[1]),
        (
            "gcr.io/distroless/cc-debian12:nonroot".to_string(),
            String::new()
        )
    );
    // The runtime's Debian release (12, bookworm) is the builder's: same glibc and libssl3.
    assert_eq!(args["DEBIAN_RELEASE"], "bookworm");
    assert!(froms[1].contains("-debian12"));

    let runtime_start = instructions
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .unwrap();
    let (builder, runtime) = instructions.split_at(runtime_start);
    let build = builder
        .iter()
        .find(|l| l.contains("cargo build"))
        .expect("cargo build in the builder");
    assert!(
        build.contains("--release") && build.contains("--locked"),
        "{build}"
    );
    assert!(builder.iter().any(|l| l.contains("LIBZ_SYS_STATIC=1")));
    for bin in ["kmirror-operator", "kmirror-fetcher", "kmirror-verify"] {
        assert!(build.contains(&format!("--bin {bin}")), "{bin} built");
        assert!(
            runtime
                .iter()
                .any(|l| l.starts_with("COPY --from=builder") && l.contains(&format!("/out/{bin}"))),
            "{bin} copied into the runtime stage"
        );
        // ...and it is a binary of the workspace.
        assert!(
            ["operator/Cargo.toml", "fetcher/Cargo.toml"]
                .iter()
                .any(|m| {
                    std::fs::read_to_string(root.join(m))
                        .unwrap()
                        .contains(&format!("name = \"{bin}\""))
                }),
            "no workspace binary {bin}"
        );
    }
    let users: Vec<&&str> = runtime.iter().filter(|l| l.starts_with("USER ")).collect();
    assert_eq!(users.len(), 1, "one USER in the runtime stage");
    let uid = users[0]["USER ".len()..].split(':').next().unwrap();
    assert_eq!(
        uid, "65532",
        "numeric non-root user (runAsNonRoot can check it)"
    );
    assert!(runtime.contains(&r#"ENTRYPOINT ["/usr/local/bin/kmirror-operator"]"#));
    assert!(
        !runtime.iter().any(|l| l.starts_with("RUN ")),
        "no shell in the runtime stage"
    );
    // The chart runs the same user.
    let values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    assert_eq!(values["podSecurityContext"]["runAsUser"], 65532);

    // .dockerignore is an allow-list that keeps every workspace member and drops build output.
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    let rules: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(rules[0], "*");
    assert!(rules.contains(&"**/target/"));
    for member in workspace_members(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()) {
        assert!(
            rules.contains(&format!("!{member}/").as_str())
                || rules.contains(&format!("!{member}/Cargo.toml").as_str()),
            ".dockerignore drops workspace member {member}"
        );
    }
    for file in ["Cargo.toml", "Cargo.lock", "rust-toolchain.toml"] {
        assert!(
            rules.contains(&format!("!{file}").as_str()),
            "{file} in the context"
        );
    }
}

#[test]
fn dockerfile_build_command_works_with_cargo() {
    // The builder's command, minus --release (the debug build `make test` made is reused):
    // --locked fails when Cargo.lock is out of date, and every --bin must resolve.
    let text = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let joined = text.replace("\\\n", " ");
    let start = joined
        .find("cargo build")
        .expect("cargo build in the Dockerfile");
    let command = &joined[start..];
    let command = &command[..command.find("&&").unwrap_or(command.len())];
    let args: Vec<&str> = command
        .split_whitespace()
        .skip(1)
        .filter(|a| *a != "--release")
        .collect();
    assert!(args.contains(&"--locked"), "{command}");
    assert_eq!(
        args.iter().filter(|a| **a == "--bin").count(),
        3,
        "{command}"
    );
    // Built for the whole workspace with its tests, as `make test` builds: the same dependency
    // features, so nothing is compiled again (only the selected packages would resolve others).
    let status = kmirror_e2e::testbed::cargo()
        .args(&args)
        .args(["--workspace", "--tests"])
        .current_dir(repo_root())
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo {} failed", args.join(" "));
}

/// The workspace members listed in the root Cargo.toml (one line).
fn workspace_members(manifest: &str) -> Vec<String> {
    let line = manifest
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("workspace members");
    let members: Vec<String> = line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert!(members.contains(&"operator".to_string()), "{members:?}");
    members
}

// ---------------------------------------------------------------------------------------------
// Against the control plane

/// Installs the chart (`helm install … --wait`) as release `kmirror` in `ns`.
fn helm_install(ns: &str, args: &[&str], wait: bool) {
    let chart = chart();
    let mut all = vec![
        "install",
        "kmirror",
        chart.to_str().unwrap(),
        "--namespace",
        ns,
        "--timeout",
        "180s",
    ];
    if wait {
        all.push("--wait");
    }
    all.extend_from_slice(args);
    let out = ok(&helm(), &all, None);
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(
        out.contains("Mirror your first topics"),
        "NOTES.txt is shown:\n{out}"
    );
}

fn helm_uninstall(ns: &str) {
    let out = run(
        &helm(),
        &[
            "uninstall",
            "kmirror",
            "--namespace",
            ns,
            "--wait",
            "--timeout",
            "120s",
        ],
        None,
    );
    assert!(out.status.success(), "helm uninstall: {}", text(&out));
}

/// The CRDs, the way the chart README says to install or upgrade them.
fn apply_crds() {
    ok(
        &kubectl(),
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            chart().join("crds").to_str().unwrap(),
        ],
        None,
    );
}

/// Runs `body`, then `cleanup` also when `body` panics (the panic is passed on).
async fn run_then<T>(
    body: impl std::future::Future<Output = T>,
    cleanup: impl std::future::Future<Output = ()>,
) -> T {
    use futures::FutureExt;
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    cleanup.await;
    match outcome {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A client that acts as `user` (Impersonate-User), e.g. a ServiceAccount.
async fn impersonating(user: &str) -> kube::Client {
    let bed = Testbed::get();
    let kubeconfig = kube::config::Kubeconfig::read_from(bed.var("KUBECONFIG")).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    kube::Client::try_from(config).unwrap()
}

/// Grants of the impersonated user in `ns` (SelfSubjectRulesReview), minus what every
/// authenticated user has (the self-reviews of system:basic-user).
async fn granted_in(client: &kube::Client, ns: &str) -> BTreeSet<Grant> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(ns.to_string()),
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectRulesReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectRulesReview");
    let status = serde_json::to_value(answer.status.expect("status")).unwrap();
    assert_eq!(status["incomplete"], false, "{status}");
    grants(status["resourceRules"].as_array().unwrap())
        .into_iter()
        .filter(|(g, r, _, _)| {
            !(g.starts_with("authorization.k8s.io") || g.starts_with("authentication.k8s.io"))
                || !r.starts_with("selfsubject")
        })
        .collect()
}

fn forbidden<T: std::fmt::Debug>(what: &str, result: kube::Result<T>) {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

fn allowed<T>(what: &str, result: kube::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("{what}: expected to be allowed, got {e}"))
}

#[tokio::test]
async fn rendered_objects_pass_server_side_validation() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.unwrap();
    apply_crds();
    let ns = kmirror_e2e::namespace::create(&client, "helm-dry")
        .await
        .unwrap();
    run_then(
        async {
            for args in [
                vec![],
                vec![
                    "--set",
                    "replicaCount=2",
                    "--set",
                    "watchAllNamespaces=true",
                    "--set",
                    "grafanaDashboard.enabled=true",
                    "--set",
                    "imagePullSecrets[0].name=regcred",
                    "--set",
                    "podDisruptionBudget.maxUnavailable=50%",
                    "--set",
                    "networkPolicy.enabled=true",
                    "--set",
                    "networkPolicy.kafka[0].cidr=10.1.0.0/16",
                    "--set",
                    "networkPolicy.kafka[0].ports={9092,9093}",
                    "--set",
                    "networkPolicy.apiServer[0].cidr=10.0.0.1/32",
                    "--set",
                    "networkPolicy.apiServer[0].port=443",
                    "--set",
                    "fetcherPolicy.images={ghcr.io/kmirror/}",
                    "--set",
                    "fetcherPolicy.serviceAccounts={default,kmirror-fetcher}",
                ],
            ] {
                let yaml = render_in(&ns, &args).unwrap();
                let out = ok(
                    &kubectl(),
                    &["apply", "--dry-run=server", "-n", &ns, "-f", "-"],
                    Some(&yaml),
                );
                let created = out
                    .lines()
                    .filter(|l| l.contains("(server dry run)"))
                    .count();
                assert_eq!(created, parse_yaml_stream(&yaml).len(), "{out}");
            }
        },
        kmirror_e2e::namespace::delete(&client, &ns),
    )
    .await;
}

#[tokio::test]
async fn chart_rbac_is_sufficient_and_least_privilege() {
    let bed = Testbed::get();
    let admin = bed.kube_client().await.unwrap();
    apply_crds();
    let home = kmirror_e2e::namespace::create(&admin, "helm-rbac")
        .await
        .unwrap();
    let other = kmirror_e2e::namespace::create(&admin, "helm-rbac-other")
        .await
        .unwrap();
    let all_ns = kmirror_e2e::namespace::create(&admin, "helm-rbac-all")
        .await
        .unwrap();
    run_then(rbac_checks(&admin, &home, &other, &all_ns), async {
        for ns in [&all_ns, &home] {
            let _ = run(&helm(), &["uninstall", "kmirror", "--namespace", ns], None);
        }
        for ns in [&home, &other, &all_ns] {
            kmirror_e2e::namespace::delete(&admin, ns).await;
        }
    })
    .await;
}

/// The checks of [`chart_rbac_is_sufficient_and_least_privilege`]: `home` gets the chart in the
/// default mode, `all_ns` with watchAllNamespaces, `other` nothing.
async fn rbac_checks(admin: &kube::Client, home: &str, other: &str, all_ns: &str) {
    // No operator pod is needed to check permissions: replicaCount=0.
    helm_install(
        home,
        &[
            "--set",
            "replicaCount=0",
            "--set",
            "leaderElection.enabled=true",
        ],
        false,
    );
    for ns in [home, other] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "kafka-credentials"}, "stringData": {"password": "x"}
        }))
        .unwrap();
        Api::<Secret>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    let sa = format!("system:serviceaccount:{home}:kmirror-operator");
    let op = impersonating(&sa).await;
    // Exactly the intended rules, in the release namespace, and none elsewhere.
    let mut expected = operator_grants();
    expected.extend(lease_grants("kmirror-operator"));
    assert_eq!(granted_in(&op, home).await, expected);
    assert_eq!(granted_in(&op, other).await, BTreeSet::new());

    // Allowed: what it needs, at home.
    let lp = ListParams::default();
    allowed(
        "list ClusterMirrors",
        Api::<ClusterMirror>::namespaced(op.clone(), home)
            .list(&lp)
            .await,
    );
    allowed(
        "list MirrorTopics",
        Api::<MirrorTopic>::namespaced(op.clone(), home)
            .list(&lp)
            .await,
    );
    allowed(
        "list pods",
        Api::<Pod>::namespaced(op.clone(), home).list(&lp).await,
    );
    allowed(
        "read a Secret at home",
        Api::<Secret>::namespaced(op.clone(), home)
            .get("kafka-credentials")
            .await,
    );
    let leases = Api::<Lease>::namespaced(op.clone(), home);
    let lease: Lease =
        serde_json::from_value(json!({"metadata": {"name": "kmirror-operator"}})).unwrap();
    let mut lease = allowed(
        "create its Lease",
        leases.create(&PostParams::default(), &lease).await,
    );
    lease.spec = Some(Default::default());
    allowed(
        "update its Lease",
        leases
            .replace("kmirror-operator", &PostParams::default(), &lease)
            .await,
    );

    // Refused: reads it has no business doing.
    forbidden(
        "a Secret in another namespace",
        Api::<Secret>::namespaced(op.clone(), other)
            .get("kafka-credentials")
            .await,
    );
    forbidden(
        "Secrets in another namespace",
        Api::<Secret>::namespaced(op.clone(), other).list(&lp).await,
    );
    forbidden(
        "ClusterMirrors in another namespace",
        Api::<ClusterMirror>::namespaced(op.clone(), other)
            .list(&lp)
            .await,
    );
    forbidden(
        "ClusterMirrors of all namespaces",
        Api::<ClusterMirror>::all(op.clone()).list(&lp).await,
    );
    forbidden(
        "Deployments",
        Api::<Deployment>::namespaced(op.clone(), home)
            .list(&lp)
            .await,
    );
    forbidden("Nodes", Api::<Node>::all(op.clone()).list(&lp).await);
    forbidden(
        "ConfigMaps",
        Api::<ConfigMap>::namespaced(op.clone(), home)
            .list(&lp)
            .await,
    );
    forbidden(
        "RoleBindings",
        Api::<RoleBinding>::namespaced(op.clone(), home)
            .list(&lp)
            .await,
    );
    // ...and writes outside its rules.
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "planted"}, "stringData": {"a": "b"}}))
            .unwrap();
    forbidden(
        "creating a Secret",
        Api::<Secret>::namespaced(op.clone(), home)
            .create(&PostParams::default(), &secret)
            .await,
    );
    let mut other_lease = lease.clone();
    other_lease.metadata = serde_json::from_value(json!({"name": "someone-elses"})).unwrap();
    allowed(
        "create another Lease (create cannot be limited by name)",
        leases.create(&PostParams::default(), &other_lease).await,
    );
    let fresh = Api::<Lease>::namespaced(admin.clone(), home)
        .get("someone-elses")
        .await
        .unwrap();
    forbidden(
        "updating someone else's Lease",
        leases
            .replace("someone-elses", &PostParams::default(), &fresh)
            .await,
    );
    forbidden(
        "reading someone else's Lease",
        leases.get("someone-elses").await,
    );

    // watchAllNamespaces: the same rules everywhere, still nothing else; the Lease stays home.
    helm_install(
        all_ns,
        &[
            "--set",
            "replicaCount=0",
            "--set",
            "watchAllNamespaces=true",
            "--set",
            "leaderElection.enabled=true",
        ],
        false,
    );
    let cluster_op =
        impersonating(&format!("system:serviceaccount:{all_ns}:kmirror-operator")).await;
    assert_eq!(granted_in(&cluster_op, other).await, operator_grants());
    let mut at_home = operator_grants();
    at_home.extend(lease_grants("kmirror-operator"));
    assert_eq!(granted_in(&cluster_op, all_ns).await, at_home);
    allowed(
        "ClusterMirrors of all namespaces",
        Api::<ClusterMirror>::all(cluster_op.clone())
            .list(&lp)
            .await,
    );
    allowed(
        "a Secret in a watched namespace",
        Api::<Secret>::namespaced(cluster_op.clone(), other)
            .get("kafka-credentials")
            .await,
    );
    forbidden(
        "Nodes",
        Api::<Node>::all(cluster_op.clone()).list(&lp).await,
    );
    forbidden(
        "ConfigMaps",
        Api::<ConfigMap>::all(cluster_op.clone()).list(&lp).await,
    );
    forbidden(
        "Deployments",
        Api::<Deployment>::all(cluster_op.clone()).list(&lp).await,
    );
    forbidden(
        "a Lease elsewhere",
        Api::<Lease>::namespaced(cluster_op.clone(), other)
            .create(&PostParams::default(), &lease_named("x"))
            .await,
    );

    helm_uninstall(all_ns);
    helm_uninstall(home);
    // Uninstalling removes the ClusterRole and its binding.
    let cluster_roles = ok(&kubectl(), &["get", "clusterroles", "-o", "name"], None);
    assert!(!cluster_roles.contains(&format!("kmirror-operator-{all_ns}")));
}

fn lease_named(name: &str) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

/// Waits until the Kafka destination has caught up with the source on every partition.
async fn wait_caught_up(bed: &Testbed, topic: &str, partitions: i32, timeout: Duration) {
    let dest = bed.dest_config(DestUser::Admin);
    let source = bed.source_config();
    let deadline = Instant::now() + timeout;
    loop {
        let behind: Vec<i32> = (0..partitions)
            .filter(|&p| {
                watermarks(&source, topic, p).unwrap().1
                    != watermarks(&dest, topic, p).map(|w| w.1).unwrap_or(-1)
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "partitions {behind:?} of {topic} did not catch up in {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn operator_pod_log(bed: &Testbed, ns: &str, pod: &str) -> String {
    let log = kmirror_e2e::kube::pod_log(bed, ns, pod, "operator");
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn helm_install_runs_the_operator_in_cluster_and_mirrors_a_topic() {
    let bed = Testbed::get();
    let started = Instant::now();
    // The node agent runs the workspace's binaries: build them first.
    assert!(binary("kmirror-fetcher").exists() && binary("kmirror-operator").exists());
    ensure_state_topic(bed);
    apply_crds();
    let client = bed.kube_client().await.unwrap();
    let ns = kmirror_e2e::kube::pod_namespace(&client, "helm-e2e")
        .await
        .unwrap();
    let built = started.elapsed();
    run_then(
        mirror_through_the_chart(bed, &client, &ns, started, built),
        teardown(&client, &ns),
    )
    .await;
}

/// The body of [`helm_install_runs_the_operator_in_cluster_and_mirrors_a_topic`].
async fn mirror_through_the_chart(
    bed: &Testbed,
    client: &kube::Client,
    ns: &str,
    started: Instant,
    built: Duration,
) {
    // The image is irrelevant on the node agent; each pod binds its own IP so that tests
    // running side by side do not share a port.
    helm_install(
        ns,
        &[
            "--set",
            "image.repository=kmirror",
            "--set",
            "image.tag=test",
            "--set",
            "fetcherImage=kmirror:test",
            "--set-string",
            "http.host=$(POD_IP)",
            "--set",
            "logging.format=text",
            "--set",
            "statusIntervalMs=500",
        ],
        true,
    );
    let installed = started.elapsed();
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let operator_pods = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .unwrap()
        .items;
    assert_eq!(operator_pods.len(), 1);
    let operator_pod = &operator_pods[0];
    let operator_name = operator_pod.metadata.name.clone().unwrap();
    let spec = operator_pod.spec.as_ref().unwrap();
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("kmirror-operator")
    );
    assert_eq!(
        spec.node_name.as_deref(),
        Some(bed.var("KMIRROR_NODE_NAME"))
    );
    assert!(
        kmirror_e2e::kube::is_ready(operator_pod),
        "{operator_pod:#?}"
    );
    // Its endpoints answer on the pod IP (the probes made it Ready; /metrics too).
    let ip = operator_pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap();
    let metrics = kmirror_e2e::operator::http_get(&format!("{ip}:8080"), "/metrics")
        .expect("operator /metrics");
    assert!(metrics.contains("kmirror_operator_leader 1"), "{metrics}");

    // A first mirror, as NOTES.txt describes: a Secret, a ClusterMirror, a MirrorTopic.
    let s = Scenario {
        client: client.clone(),
        ns: ns.to_string(),
    };
    s.secret(
        "destination-credentials",
        "password",
        bed.var("KMIRROR_MIRROR_PASSWORD"),
    )
    .await;
    let topic = kmirror_e2e::kafka::unique_name("helm");
    create_topic(&bed.source_config(), &topic, 3, &[])
        .await
        .unwrap();
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(600, 3, 0, 7),
        &[],
    )
    .unwrap();
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("orders", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = s.topic("orders").await;
        if t.as_ref()
            .is_some_and(|t| all_partitions(t, PartitionState::Mirroring, 3))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partitions not MIRRORING after 120s; status: {:#?}\noperator log:\n{}",
            t.and_then(|t| t.status),
            operator_pod_log(bed, ns, &operator_name)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mirroring = started.elapsed();
    // One fetcher pod per partition, running on the node agent, in the chart's image. The
    // fetchers already report MIRRORING; the agent's pod status may trail by a sync period.
    let running_deadline = Instant::now() + Duration::from_secs(30);
    let fetchers = loop {
        let pods = s.pods().await;
        let running = pods
            .iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        if running || Instant::now() > running_deadline {
            break pods;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(fetchers.len(), 3, "one fetcher pod per partition");
    for pod in &fetchers {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_name.as_deref(),
            Some(bed.var("KMIRROR_NODE_NAME"))
        );
        assert_eq!(spec.containers[0].image.as_deref(), Some("kmirror:test"));
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running"),
            "fetcher pod {:?}",
            pod.metadata.name
        );
    }
    // Records flow: what is produced now reaches the destination.
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(300, 3, 0, 8),
        &[],
    )
    .unwrap();
    wait_caught_up(bed, &topic, 3, Duration::from_secs(90)).await;
    // The operator reported Events as this replica (POD_NAME from the downward API).
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        events
            .iter()
            .any(|e| e.reporting_instance.as_deref() == Some(operator_name.as_str())),
        "no Event reported by {operator_name}: {events:#?}"
    );

    // The operator acts only through the chart's RBAC: without its RoleBinding a change is not
    // carried out (a pause would delete the fetcher pods and write the status)...
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns);
    let mut binding = bindings.get("kmirror-operator").await.unwrap();
    bindings
        .delete("kmirror-operator", &Default::default())
        .await
        .unwrap();
    let as_operator = impersonating(&format!("system:serviceaccount:{ns}:kmirror-operator")).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Api::<Pod>::namespaced(as_operator.clone(), ns)
        .list(&ListParams::default())
        .await
        .is_ok()
    {
        assert!(
            Instant::now() < deadline,
            "the RoleBinding's removal did not take effect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.patch_topic("orders", json!({"state": "Paused"})).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(s.pods().await.len(), 3, "fetcher pods deleted without RBAC");
    let t = s.topic("orders").await.unwrap();
    assert!(
        all_partitions(&t, PartitionState::Mirroring, 3),
        "status written without RBAC: {:#?}",
        t.status
    );
    // ...and with the binding back, it is.
    binding.metadata.resource_version = None;
    binding.metadata.uid = None;
    binding.metadata.creation_timestamp = None;
    binding.metadata.managed_fields = None;
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = s.topic("orders").await.unwrap();
        if all_partitions(&t, PartitionState::Paused, 3) && s.pods().await.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not PAUSED 120s after the RoleBinding came back: {:#?}\noperator log:\n{}",
            t.status,
            operator_pod_log(bed, ns, &operator_name)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let recovered = started.elapsed();

    // Clean up while the operator runs (its finalizers), then the release and the namespace.
    let topics = Api::<MirrorTopic>::namespaced(client.clone(), ns);
    let mirrors = Api::<ClusterMirror>::namespaced(client.clone(), ns);
    mirrors.delete("dr", &Default::default()).await.unwrap();
    kmirror_e2e::kube::wait_gone(&topics, "orders", Duration::from_secs(90))
        .await
        .unwrap();
    kmirror_e2e::kube::wait_gone(&mirrors, "dr", Duration::from_secs(60))
        .await
        .unwrap();
    helm_uninstall(ns);
    kmirror_e2e::kube::wait_gone(&pods, &operator_name, Duration::from_secs(60))
        .await
        .unwrap();
    eprintln!(
        "helm e2e: binaries ready {built:?}, installed {installed:?}, 3 partitions MIRRORING \
         {mirroring:?}, RBAC cut and restored {recovered:?}, done {:?}",
        started.elapsed()
    );
}

/// Removes what a failed run may leave: mirrors (their finalizers removed if the operator cannot
/// do it any more), the release, the namespace.
async fn teardown(client: &kube::Client, ns: &str) {
    use kube::api::{DeleteParams, Patch, PatchParams};
    let mirrors = Api::<ClusterMirror>::namespaced(client.clone(), ns);
    let topics = Api::<MirrorTopic>::namespaced(client.clone(), ns);
    let _ = mirrors
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while topics
        .list(&ListParams::default())
        .await
        .is_ok_and(|l| !l.items.is_empty())
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let unblock = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for t in topics
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let name = t.metadata.name.unwrap_or_default();
        let _ = topics.patch(&name, &PatchParams::default(), &unblock).await;
    }
    for m in mirrors
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let name = m.metadata.name.unwrap_or_default();
        let _ = mirrors
            .patch(&name, &PatchParams::default(), &unblock)
            .await;
    }
    let _ = run(&helm(), &["uninstall", "kmirror", "--namespace", ns], None);
    kmirror_e2e::namespace::delete(client, ns).await;
}
