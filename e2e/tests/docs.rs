//! Docs are tests: every block a user copies — the README, the chart README, the chart's NOTES
//! (as `helm install` prints them), docs/, deploy/, kubectl-mirror/ and examples/ — is applied to
//! the bed's kube-apiserver by server-side dry-run, with the CRDs and their admission rules
//! installed, and what it would create is checked the way the operator reads it.
//!
//! Extraction: fenced ```yaml blocks are manifests (every document is applied with a server-side
//! apply dry-run); fenced ```sh blocks (and the NOTES) are shell: their `kubectl create|apply`
//! commands run with `--dry-run=server` (heredocs and `-f FILE` included), `kubectl get|explain`
//! run as they are, and `helm install` runs with `--dry-run=client`, whose NOTES are checked in
//! turn. A block that is deliberately partial (a fragment of a spec, a kustomization file) is
//! preceded by `<!-- docs-test: skip (why) -->`. Objects meant for the release namespace
//! `kmirror` are created in a throwaway namespace instead.
//!
//! Checks, per document (a markdown file, a NOTES text, an example file): admission accepts
//! every object; every Secret carries `kmirror.io/credentials: "true"` (kmirror reads no other:
//! a mirror naming one stops with `SecretNotLabelled`); every Secret reference of a ClusterMirror
//! names a Secret the same document creates, labelled, with that key; in the install documents
//! every namespaced object lands in the release namespace, the only one the operator watches by
//! default; and the chart README shows the same first mirror as the NOTES.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kmirror_crds::v1alpha1::ClusterMirror;
use kmirror_e2e::docs::{
    SKIP_MARKER, ShellCommand, flag_value, kubectl_verb, markdown_blocks, notes_of, shell_commands,
    yaml_documents,
};
use kmirror_e2e::testbed::repo_root;
use kmirror_e2e::{Testbed, crds, namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;

/// The namespace the install docs put kmirror in (`helm install … -n kmirror`).
const RELEASE_NS: &str = "kmirror";
/// The label without which kmirror never reads a Secret.
const CREDENTIALS_LABEL: &str = "kmirror.io/credentials";

// ---------------------------------------------------------------------------------------------
// Against the bed

/// Where the checks run and what they found.
struct Checker {
    client: kube::Client,
    /// The throwaway namespace standing in for [`RELEASE_NS`].
    ns: String,
    kubectl: String,
    helm: String,
    kubeconfig: String,
    problems: Vec<String>,
    /// Objects each document would create (as the dry runs returned them).
    created: BTreeMap<String, Vec<Value>>,
    /// The heredoc manifests each document feeds to kubectl.
    heredocs: BTreeMap<String, Vec<String>>,
    /// The NOTES each `helm install` of the docs printed.
    notes: Vec<(String, String)>,
    commands_run: usize,
}

impl Checker {
    fn problem(&mut self, p: String) {
        self.problems.push(p);
    }

    /// Moves objects that name a namespace into the test namespace; reports objects that do not
    /// land in the release namespace (none named: the kubeconfig's current one, which the operator
    /// does not watch) when `strict` (cluster-scoped kinds other than Namespace count too).
    fn rehome(&mut self, origin: &str, docs: &mut [Value], cli_ns: Option<&str>, strict: bool) {
        for doc in docs.iter_mut() {
            let kind = doc["kind"].as_str().unwrap_or("?").to_string();
            let name = doc["metadata"]["name"].as_str().unwrap_or("?").to_string();
            let named = doc["metadata"]["namespace"].as_str().map(str::to_string);
            let effective = named.clone().or(cli_ns.map(str::to_string));
            if strict && kind != "Namespace" && effective.as_deref() != Some(RELEASE_NS) {
                self.problem(format!(
                    "{origin}: {kind} {name} lands in namespace {} — not in {RELEASE_NS:?}, the \
                     only namespace the operator watches by default (name it in metadata or \
                     with -n)",
                    effective.map_or("of the kubeconfig's current context".to_string(), |n| {
                        format!("{n:?}")
                    })
                ));
            }
            if named.is_some() {
                doc["metadata"]["namespace"] = Value::String(self.ns.clone());
            }
        }
    }

    /// Server-side apply dry-run of a manifest's documents (kube-rs, as `kubectl apply
    /// --server-side --dry-run=server` sends it).
    async fn apply_manifest(&mut self, document: &str, origin: &str, text: &str, strict: bool) {
        let mut docs = match yaml_documents(text) {
            Ok(d) => d,
            Err(e) => return self.problem(format!("{origin}: not YAML: {e}")),
        };
        self.rehome(origin, &mut docs, None, strict);
        for doc in docs {
            let (Some(api_version), Some(kind), Some(name)) = (
                doc["apiVersion"].as_str(),
                doc["kind"].as_str(),
                doc["metadata"]["name"].as_str(),
            ) else {
                self.problem(format!(
                    "{origin}: a document without apiVersion, kind or metadata.name (mark a \
                     partial block with {SKIP_MARKER} (why) -->)"
                ));
                continue;
            };
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let (resource, caps) = match pinned_kind(&self.client, &gvk).await {
                Ok(r) => r,
                Err(e) => {
                    self.problem(format!("{origin}: {api_version} {kind} is not served: {e}"));
                    continue;
                }
            };
            let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
                Api::namespaced_with(self.client.clone(), &self.ns, &resource)
            } else {
                Api::all_with(self.client.clone(), &resource)
            };
            let params = PatchParams::apply("kmirror-docs-test").dry_run();
            match api.patch(name, &params, &Patch::Apply(&doc)).await {
                Ok(obj) => {
                    self.commands_run += 1;
                    let v = serde_json::to_value(obj).expect("object as JSON");
                    self.created
                        .entry(document.to_string())
                        .or_default()
                        .push(v);
                }
                Err(e) => self.problem(format!("{origin}: {kind} {name} refused: {e}")),
            }
        }
    }

    /// Runs one command of the docs the safe way (see the module comment).
    fn run_command(&mut self, document: &str, cmd: &ShellCommand, strict: bool) {
        let origin = &cmd.origin;
        match cmd.argv[0].as_str() {
            "kubectl" => self.run_kubectl(document, cmd, strict),
            "helm" if cmd.argv.get(1).is_some_and(|v| v == "install") => {
                let mut args: Vec<String> = cmd.argv[1..].to_vec();
                args.push("--dry-run=client".into());
                let out = self.command(&self.helm.clone(), &args, None);
                match out {
                    Ok(stdout) => match notes_of(&stdout) {
                        Some(notes) => self.notes.push((origin.clone(), notes.to_string())),
                        None => self.problem(format!("{origin}: helm printed no NOTES")),
                    },
                    Err(e) => self.problem(format!("{origin}: {e}")),
                }
            }
            _ => {}
        }
    }

    fn run_kubectl(&mut self, document: &str, cmd: &ShellCommand, strict: bool) {
        let origin = cmd.origin.clone();
        let argv = &cmd.argv;
        let Some(verb) = kubectl_verb(argv) else {
            return;
        };
        let cli_ns = flag_value(argv, Some("-n"), "--namespace").map(str::to_string);
        // The same command in the test namespace.
        let mut args: Vec<String> = Vec::new();
        let mut skip_next = false;
        for a in argv.iter().skip(1) {
            if skip_next {
                skip_next = false;
                continue;
            }
            if a == "-n" || a == "--namespace" {
                skip_next = true;
            } else if !a.starts_with("--namespace=") {
                args.push(a.clone());
            }
        }
        args.splice(0..0, ["-n".to_string(), self.ns.clone()]);
        match verb {
            "get" | "explain" => match self.command(&self.kubectl.clone(), &args, None) {
                Ok(_) => self.commands_run += 1,
                Err(e) => self.problem(format!("{origin}: {e}")),
            },
            "create" | "apply" => {
                if flag_value(argv, Some("-k"), "--kustomize").is_some() {
                    return; // deploy/: rendered from the chart, checked by helm_chart.rs
                }
                let mut stdin = cmd.stdin.clone();
                if let Some(text) = &stdin {
                    self.heredocs
                        .entry(document.to_string())
                        .or_default()
                        .push(text.clone());
                }
                if let Some(file) = flag_value(argv, Some("-f"), "--filename")
                    && file != "-"
                {
                    if file.contains("crds") {
                        return; // the CRDs: installed by crds::install, checked by helm_chart.rs
                    }
                    match std::fs::read_to_string(repo_root().join(file)) {
                        Ok(t) => stdin = Some(t),
                        Err(e) => {
                            return self.problem(format!("{origin}: cannot read {file}: {e}"));
                        }
                    }
                    for a in args.iter_mut() {
                        if a == file {
                            *a = "-".into();
                        }
                    }
                }
                if let Some(text) = &stdin {
                    let mut docs = match yaml_documents(text) {
                        Ok(d) => d,
                        Err(e) => return self.problem(format!("{origin}: input is not YAML: {e}")),
                    };
                    self.rehome(&origin, &mut docs, cli_ns.as_deref(), strict);
                    stdin = Some(
                        docs.iter()
                            .map(|d| serde_yaml::to_string(d).unwrap())
                            .collect::<Vec<_>>()
                            .join("---\n"),
                    );
                } else if strict && cli_ns.as_deref() != Some(RELEASE_NS) {
                    self.problem(format!(
                        "{origin}: `kubectl {verb}` without -n {RELEASE_NS} creates in the \
                         kubeconfig's current namespace, which the operator does not watch"
                    ));
                }
                args.extend(["--dry-run=server".into(), "-o".into(), "json".into()]);
                match self.command(&self.kubectl.clone(), &args, stdin.as_deref()) {
                    Ok(stdout) => {
                        self.commands_run += 1;
                        let v: Value = match serde_json::from_str(&stdout) {
                            Ok(v) => v,
                            Err(e) => {
                                return self.problem(format!("{origin}: kubectl output: {e}"));
                            }
                        };
                        let objects = if v["kind"] == "List" {
                            v["items"].as_array().cloned().unwrap_or_default()
                        } else {
                            vec![v]
                        };
                        self.created
                            .entry(document.to_string())
                            .or_default()
                            .extend(objects);
                    }
                    Err(e) => self.problem(format!("{origin}: {e}")),
                }
            }
            _ => {}
        }
    }

    /// Runs a tool of the bed in the repository root; Err with its stderr on failure (never
    /// stdout: a dry run's output holds the objects, Secrets included).
    fn command(
        &self,
        program: &str,
        args: &[String],
        stdin: Option<&str>,
    ) -> Result<String, String> {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(repo_root())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            let tool = Path::new(program)
                .file_name()
                .map_or(program.to_string(), |f| f.to_string_lossy().into_owned());
            Err(format!(
                "`{tool} {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Shell text of a document: every command, in order.
    async fn shell(&mut self, document: &str, origin: &str, text: &str, strict: bool) {
        let (cmds, problems) = shell_commands(origin, text);
        self.problems.extend(problems);
        for cmd in &cmds {
            self.run_command(document, cmd, strict);
        }
    }

    /// A markdown file's blocks: ```yaml as manifests, ```sh as commands.
    async fn markdown(&mut self, file: &str, strict: bool) {
        let text = std::fs::read_to_string(repo_root().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let blocks = match markdown_blocks(file, &text) {
            Ok(b) => b,
            Err(e) => return self.problem(e),
        };
        for b in blocks {
            match b.lang.as_str() {
                "yaml" | "yml" => self.apply_manifest(file, &b.origin, &b.text, strict).await,
                "sh" | "bash" | "shell" => self.shell(file, &b.origin, &b.text, strict).await,
                _ => {}
            }
        }
    }

    /// What the operator needs of a document's objects: labelled Secrets, and every Secret a
    /// ClusterMirror names created alongside it, labelled, with the key.
    fn check_credentials(&mut self, document: &str) {
        let objects = self.created.get(document).cloned().unwrap_or_default();
        let secrets: BTreeMap<String, &Value> = objects
            .iter()
            .filter(|o| o["kind"] == "Secret")
            .map(|o| (o["metadata"]["name"].as_str().unwrap_or("").to_string(), o))
            .collect();
        for s in objects.iter().filter(|o| o["kind"] == "Secret") {
            let name = s["metadata"]["name"].as_str().unwrap_or("?");
            if s["metadata"]["labels"][CREDENTIALS_LABEL] != "true" {
                self.problem(format!(
                    "{document}: Secret {name} lacks the label {CREDENTIALS_LABEL}: \"true\" — \
                     kmirror never reads it and the mirror stops with SecretNotLabelled"
                ));
            }
        }
        for o in objects.iter().filter(|o| o["kind"] == "ClusterMirror") {
            let mirror: ClusterMirror = match serde_json::from_value(o.clone()) {
                Ok(m) => m,
                Err(e) => {
                    self.problem(format!(
                        "{document}: a ClusterMirror the operator cannot read: {e}"
                    ));
                    continue;
                }
            };
            let name = mirror.metadata.name.clone().unwrap_or_default();
            let refs = [
                ("source", &mirror.spec.source),
                ("destination", &mirror.spec.destination),
            ];
            for (side, conn) in refs {
                for (role, r) in conn.secret_refs() {
                    let Some(secret) = secrets.get(&r.name) else {
                        self.problem(format!(
                            "{document}: ClusterMirror {name} {side}.{role} names Secret {} \
                             that the document does not create",
                            r.name
                        ));
                        continue;
                    };
                    if secret["metadata"]["labels"][CREDENTIALS_LABEL] != "true" {
                        self.problem(format!(
                            "{document}: ClusterMirror {name} {side}.{role} names Secret {} \
                             without the label {CREDENTIALS_LABEL}: \"true\" (SecretNotLabelled)",
                            r.name
                        ));
                    }
                    let has_key = secret["data"].get(&r.key).is_some()
                        || secret["stringData"].get(&r.key).is_some();
                    if !has_key {
                        self.problem(format!(
                            "{document}: ClusterMirror {name} {side}.{role} names key {} that \
                             Secret {} does not hold",
                            r.key, r.name
                        ));
                    }
                }
            }
        }
    }

    fn kinds(&self, document: &str, kind: &str) -> usize {
        self.created
            .get(document)
            .map_or(0, |objs| objs.iter().filter(|o| o["kind"] == kind).count())
    }
}

/// The install documents: their objects must land in the release namespace.
const INSTALL_DOCS: [&str; 2] = ["README.md", "charts/kmirror/README.md"];
/// Other markdown files whose blocks are checked (and every docs/*.md).
const OTHER_DOCS: [&str; 5] = [
    "deploy/README.md",
    "kubectl-mirror/README.md",
    "docs/fetcher-pools.md",
    "docs/security.md",
    "docs/fencing.md",
];

#[tokio::test]
async fn every_copyable_block_of_the_docs_applies_and_works() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.unwrap();
    crds::install(&client).await.unwrap();
    let ns = namespace::create(&client, "docs").await.unwrap();
    let mut c = Checker {
        client: client.clone(),
        ns: ns.clone(),
        kubectl: bed.var("KMIRROR_KUBECTL").to_string(),
        helm: std::env::var("KMIRROR_HELM").unwrap_or_else(|_| bed.var("KMIRROR_HELM").to_string()),
        kubeconfig: bed.var("KUBECONFIG").to_string(),
        problems: Vec::new(),
        created: BTreeMap::new(),
        heredocs: BTreeMap::new(),
        notes: Vec::new(),
        commands_run: 0,
    };

    for file in INSTALL_DOCS {
        c.markdown(file, true).await;
    }
    for file in OTHER_DOCS {
        c.markdown(file, false).await;
    }
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for path in docs {
        let file = path
            .strip_prefix(repo_root())
            .unwrap()
            .display()
            .to_string();
        if !OTHER_DOCS.contains(&file.as_str()) {
            c.markdown(&file, false).await;
        }
    }
    // The NOTES, as each `helm install` of the docs prints them.
    let notes = c.notes.clone();
    assert!(
        notes.len() >= 2,
        "the README and the chart README each show a helm install: {notes:?}"
    );
    for (origin, text) in &notes {
        let document = format!("NOTES (helm install at {origin})");
        c.shell(&document, &document, text, true).await;
    }
    // examples/: applied as the docs say (`kubectl -n kmirror apply -f examples/…`).
    let mut examples: Vec<PathBuf> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 4, "{examples:?}");
    for path in &examples {
        let file = path
            .strip_prefix(repo_root())
            .unwrap()
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).unwrap();
        c.apply_manifest(&file, &file, &text, false).await;
    }

    let documents: Vec<String> = c.created.keys().cloned().collect();
    for d in &documents {
        c.check_credentials(d);
    }
    // The chart README shows the NOTES' first mirror.
    let notes_doc = format!("NOTES (helm install at {})", notes[0].0);
    let readme_doc = "charts/kmirror/README.md".to_string();
    let first = |d: &String| c.heredocs.get(d).and_then(|h| h.first()).cloned();
    match (first(&notes_doc), first(&readme_doc)) {
        (Some(n), Some(r)) if n == r => {}
        (n, r) => c.problem(format!(
            "the chart README's first mirror is not the one the NOTES show (NOTES: {}, \
             README: {})",
            n.map_or("none".into(), |t| format!("{} lines", t.lines().count())),
            r.map_or("none".into(), |t| format!("{} lines", t.lines().count())),
        )),
    }
    // What must have been found, so that a broken extraction cannot pass.
    for (document, kind) in [
        ("README.md", "ClusterMirror"),
        ("charts/kmirror/README.md", "ClusterMirror"),
        (notes_doc.as_str(), "ClusterMirror"),
        ("README.md", "Secret"),
        ("charts/kmirror/README.md", "Secret"),
        (notes_doc.as_str(), "Secret"),
    ] {
        if c.kinds(document, kind) == 0 {
            c.problem(format!("{document}: no {kind} is created by its blocks"));
        }
    }
    for file in &examples {
        let file = file
            .strip_prefix(repo_root())
            .unwrap()
            .display()
            .to_string();
        if c.kinds(&file, "ClusterMirror") + c.kinds(&file, "MirrorTopic") == 0 {
            c.problem(format!("{file}: creates no ClusterMirror or MirrorTopic"));
        }
    }
    let problems = std::mem::take(&mut c.problems);
    let ran = c.commands_run;
    namespace::delete(&client, &ns).await;
    assert!(
        problems.is_empty(),
        "{} problems in the docs ({ran} objects and commands checked):\n- {}",
        problems.len(),
        problems.join("\n- ")
    );
    assert!(ran >= 20, "only {ran} objects and commands were checked");
}

// ---------------------------------------------------------------------------------------------
// Claims of the docs about the chart and the CRDs

/// (API group, resource) → verbs.
type Rules = BTreeMap<(String, String), std::collections::BTreeSet<String>>;

/// The chart README's Permissions table as rules: a row's verbs apply to each of its resources;
/// "create; get update on `X` only" lists verbs of two rules on the same resource.
fn permissions_table(readme: &str) -> Rules {
    let mut rules = Rules::new();
    let section = readme
        .split_once("## Permissions")
        .expect("a Permissions section")
        .1;
    for line in section
        .lines()
        .skip_while(|l| !l.starts_with("| API group"))
        .skip(2)
    {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let group = cells[1].trim_matches('"').to_string();
        let verbs: std::collections::BTreeSet<String> = cells[3]
            .split(';')
            .flat_map(|part| part.split(" on ").next().unwrap_or("").split_whitespace())
            .map(str::to_string)
            .collect();
        for resource in cells[2].split(',') {
            rules
                .entry((group.clone(), resource.trim().to_string()))
                .or_default()
                .extend(verbs.iter().cloned());
        }
    }
    rules
}

/// The rules of the Roles a `helm template` renders.
fn rendered_rules(yaml: &str) -> Rules {
    let mut rules = Rules::new();
    for doc in yaml_documents(yaml).expect("helm template output is YAML") {
        if doc["kind"] != "Role" && doc["kind"] != "ClusterRole" {
            continue;
        }
        for rule in doc["rules"].as_array().cloned().unwrap_or_default() {
            for group in rule["apiGroups"].as_array().cloned().unwrap_or_default() {
                for resource in rule["resources"].as_array().cloned().unwrap_or_default() {
                    let verbs = rule["verbs"].as_array().cloned().unwrap_or_default();
                    rules
                        .entry((
                            group.as_str().unwrap_or("").to_string(),
                            resource.as_str().unwrap_or("").to_string(),
                        ))
                        .or_default()
                        .extend(verbs.iter().map(|v| v.as_str().unwrap_or("").to_string()));
                }
            }
        }
    }
    rules
}

#[test]
fn the_chart_readme_permissions_table_is_the_charts_rbac() {
    let bed = Testbed::get();
    let helm =
        std::env::var("KMIRROR_HELM").unwrap_or_else(|_| bed.var("KMIRROR_HELM").to_string());
    let chart = repo_root().join("charts/kmirror");
    // Leader election on, so that its Role is rendered too.
    let out = Command::new(&helm)
        .args(["template", "kmirror"])
        .arg(&chart)
        .args([
            "--namespace",
            RELEASE_NS,
            "--set",
            "leaderElection.enabled=true",
        ])
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = rendered_rules(&String::from_utf8_lossy(&out.stdout));
    let readme = std::fs::read_to_string(chart.join("README.md")).unwrap();
    let documented = permissions_table(&readme);
    assert!(rendered.len() >= 8, "{rendered:?}");
    assert_eq!(
        documented, rendered,
        "charts/kmirror/README.md, Permissions, against templates/rbac.yaml"
    );
}

#[test]
fn the_readme_names_the_printer_columns_kubectl_shows() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kmirror_crds::v1alpha1::MirrorTopic;
    use kube::CustomResourceExt;
    let columns = |crd: CustomResourceDefinition| -> Vec<String> {
        crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| c.name.to_uppercase())
            .collect()
    };
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.contains("get kmirror") && l.contains('#'))
        .expect("the README's `kubectl get kmirror` line");
    for (kind, crd) in [
        ("ClusterMirrors:", ClusterMirror::crd()),
        ("MirrorTopics:", MirrorTopic::crd()),
    ] {
        // "ClusterMirrors: A, B; MirrorTopics: C, D", or one list for "both kinds: A, B".
        let list = line
            .split_once(kind)
            .or_else(|| line.split_once("both kinds:"))
            .unwrap_or_else(|| panic!("{line:?} names the columns of no {kind}"))
            .1;
        let claimed: Vec<String> = list
            .split(';')
            .next()
            .unwrap()
            .split(',')
            .map(|c| c.trim().to_string())
            .collect();
        let shown = columns(crd);
        for c in &claimed {
            assert!(
                shown.contains(c),
                "README says `kubectl get kmirror` shows {c} for {kind} but the columns are {shown:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Links

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings (outside code blocks), with GitHub's `-1`, `-2`
/// suffixes for repeated headings.
fn anchors(markdown: &str) -> std::collections::BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = std::collections::BTreeSet::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let a = anchor(line.trim_start_matches('#'));
        let n = seen.entry(a.clone()).or_default();
        out.insert(if *n == 0 {
            a.clone()
        } else {
            format!("{a}-{n}")
        });
        *n += 1;
    }
    out
}

/// The relative link targets of a markdown text, `[text](target)`, outside code blocks.
fn relative_links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            if !target.contains("://") && !target.starts_with("mailto:") {
                out.push(target.to_string());
            }
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn anchors_and_links_are_read_as_github_does() {
    assert_eq!(
        anchor(" Failover and failback runbook"),
        "failover-and-failback-runbook"
    );
    assert_eq!(anchor(" Scale (`make scale`)"), "scale-make-scale");
    assert_eq!(anchor(" `kubectl mirror` plugin"), "kubectl-mirror-plugin");
    let a = anchors("# A\n```sh\n# not a heading\n```\n## A\n");
    assert_eq!(a.into_iter().collect::<Vec<_>>(), ["a", "a-1"]);
    assert_eq!(
        relative_links("see [x](docs/a.md#b) and [y](https://e.org) `[z](c.md)`\n```\n[q](r)\n```"),
        ["docs/a.md#b", "c.md"]
    );
}

/// Every relative link of the markdown files a user reads points at a file that exists and,
/// with `#anchor`, at a heading of it.
#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = repo_root();
    let mut files: Vec<PathBuf> = INSTALL_DOCS
        .iter()
        .chain(OTHER_DOCS.iter())
        .chain(["bench/README.md", "e2e/README.md"].iter())
        .map(|f| root.join(f))
        .filter(|p| p.exists())
        .collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "md") && !files.contains(&p) {
            files.push(p);
        }
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let dir = file.parent().unwrap();
        for target in relative_links(&text) {
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let shown = file.strip_prefix(&root).unwrap().display().to_string();
            checked += 1;
            if !resolved.exists() {
                problems.push(format!("{shown}: ({target}): no such file"));
                continue;
            }
            if let Some(fragment) = fragment
                && resolved.extension().is_some_and(|e| e == "md")
            {
                let headings = anchors(&std::fs::read_to_string(&resolved).unwrap());
                if !headings.contains(fragment) {
                    problems.push(format!("{shown}: ({target}): no heading #{fragment}"));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} links found");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}
