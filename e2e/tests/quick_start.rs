//! The README's first steps, run for real on the bed: `make demo` (the quick start) and the
//! README's "Install with Helm" commands followed by its first mirror, exactly as written apart
//! from what the README tells the reader to edit (addresses, password, CA) and the namespace
//! (each run gets its own, since other tests share the bed's clusters). Both must reach
//! MIRRORING with every record at its source offset.
//!
//! `e2e/tests/docs.rs` checks every block of the docs by dry run; this file proves the two
//! paths a new user takes first actually mirror.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::MirrorTopic;
use kmirror_e2e::docs::{Block, flag_value, markdown_blocks, shell_commands, yaml_documents};
use kmirror_e2e::kafka::{
    DestUser, create_topic, delete_topic, mixed_records, produce_all, read_all, unique_name,
    watermarks,
};
use kmirror_e2e::testbed::repo_root;
use kmirror_e2e::{Testbed, crds, namespace};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

/// The namespace the README installs into and puts its first mirror in.
const README_NS: &str = "kmirror";

fn run(program: &str, args: &[String], bed: &Testbed) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(repo_root())
        .env("KUBECONFIG", bed.var("KUBECONFIG"))
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The first block of language `lang` after the heading line `heading`.
fn block_after<'a>(markdown: &str, blocks: &'a [Block], heading: &str, lang: &str) -> &'a Block {
    let at = markdown
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("README.md has no heading {heading:?}"))
        + 1;
    blocks
        .iter()
        .find(|b| {
            let line: usize = b.origin.rsplit(':').next().unwrap().parse().unwrap();
            line > at && b.lang == lang
        })
        .unwrap_or_else(|| panic!("no ```{lang} block after {heading:?}"))
}

/// Waits until the MirrorTopic the mirror made for `source_topic` has every partition
/// MIRRORING (`partitionsSummary` n/n with n = `partitions`).
async fn wait_mirroring(client: &kube::Client, ns: &str, source_topic: &str, partitions: i32) {
    let api: Api<MirrorTopic> = Api::namespaced(client.clone(), ns);
    let want = format!("{partitions}/{partitions}");
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut last = String::from("no MirrorTopic");
    loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        if let Some(t) = list
            .items
            .iter()
            .find(|t| t.spec.source_topic == source_topic)
        {
            let summary = t.status.as_ref().and_then(|s| s.partitions_summary.clone());
            if summary.as_deref() == Some(want.as_str()) {
                return;
            }
            last = serde_json::to_string(&t.status).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the mirror of {source_topic} in {ns} did not reach {want} MIRRORING within 180 s; \
             last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every record of the source topic is on the destination at its offset.
async fn assert_identical(bed: &Testbed, topic: &str, partitions: i32) {
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let deadline = Instant::now() + Duration::from_secs(60);
    for p in 0..partitions {
        let (_, end) = watermarks(&source, topic, p).unwrap();
        while watermarks(&dest, topic, p).unwrap().1 < end {
            assert!(
                Instant::now() < deadline,
                "partition {p} of {topic} did not reach the source's end {end}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let want = read_all(&source, topic, p, "read_committed").unwrap();
        let got = read_all(&dest, topic, p, "read_committed").unwrap();
        assert_eq!(got.len(), want.len(), "partition {p}: record count");
        for (w, g) in want.iter().zip(&got) {
            assert_eq!(
                (w.offset, &w.key, &w.value),
                (g.offset, &g.key, &g.value),
                "partition {p}"
            );
        }
    }
}

/// Removes a Helm release and its namespace (the operator first, so nothing is left writing).
fn uninstall(bed: &Testbed, ns: &str) {
    let helm = bed.var("KMIRROR_HELM").to_string();
    let args: Vec<String> = [
        "uninstall",
        "kmirror",
        "-n",
        ns,
        "--wait",
        "--timeout",
        "60s",
    ]
    .map(String::from)
    .to_vec();
    let _ = run(&helm, &args, bed);
}

async fn wait_operator_ready(client: &kube::Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=kmirror"))
            .await
            .unwrap();
        if list.items.iter().any(kmirror_e2e::kube::is_ready) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the operator installed as the README says is not Ready in {ns} within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_install_and_first_mirror_reach_mirroring() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.unwrap();
    crds::install(&client).await.unwrap();
    // The namespace exists before `helm install --create-namespace` (which then keeps it), so
    // that the bed's node runs this checkout's binaries in it.
    let ns = namespace::create(&client, "readme").await.unwrap();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = markdown_blocks("README.md", &readme).unwrap();

    // "Install with Helm", every command as written, in `ns` for `kmirror`.
    let install = block_after(&readme, &blocks, "### Install with Helm", "sh");
    let (commands, problems) = shell_commands(&install.origin, &install.text);
    assert!(problems.is_empty(), "{problems:?}");
    let mut ran_helm = false;
    for cmd in &commands {
        let mut argv = cmd.argv.clone();
        for i in 0..argv.len() {
            if (argv[i] == "-n" || argv[i] == "--namespace")
                && argv.get(i + 1).map(String::as_str) == Some(README_NS)
            {
                argv[i + 1] = ns.clone();
            }
        }
        let program = match argv[0].as_str() {
            "kubectl" => bed.var("KMIRROR_KUBECTL").to_string(),
            "helm" => {
                ran_helm = true;
                bed.var("KMIRROR_HELM").to_string()
            }
            other => panic!("{}: a command the bed cannot run: {other}", cmd.origin),
        };
        let out = run(&program, &argv[1..], bed);
        assert!(
            out.status.success(),
            "{}: {argv:?}\n{}",
            cmd.origin,
            text(&out)
        );
    }
    assert!(
        ran_helm,
        "the install block has no helm install: {commands:?}"
    );
    wait_operator_ready(&client, &ns).await;

    // "A first mirror": the reader edits the addresses, the password and the CA.
    let first = block_after(&readme, &blocks, "### A first mirror", "yaml");
    let mut docs = yaml_documents(&first.text).unwrap();
    let ca = std::fs::read_to_string(bed.var("KMIRROR_CA")).unwrap();
    let mut mirror_name = None;
    for doc in &mut docs {
        assert_eq!(
            doc["metadata"]["namespace"], README_NS,
            "the first mirror's objects are in the release namespace: {doc}"
        );
        doc["metadata"]["namespace"] = json!(ns);
        match doc["kind"].as_str() {
            Some("Secret") => {
                let data = &mut doc["stringData"];
                assert!(data.get("ca.crt").is_some(), "{data}");
                data["ca.crt"] = json!(ca);
                data["password"] = json!(bed.var("KMIRROR_MIRROR_PASSWORD"));
            }
            Some("ClusterMirror") => {
                mirror_name = doc["metadata"]["name"].as_str().map(String::from);
                doc["spec"]["source"]["bootstrapServers"] = json!(bed.source_bootstrap());
                doc["spec"]["destination"]["bootstrapServers"] =
                    json!(bed.var("KMIRROR_DEST_SASL_SSL_BOOTSTRAP"));
                assert_eq!(
                    doc["spec"]["destination"]["sasl"]["username"], "mirror",
                    "the bed's mirror user"
                );
            }
            other => panic!("the first mirror creates an unexpected {other:?}"),
        }
    }
    assert!(
        mirror_name.is_some(),
        "the first mirror has no ClusterMirror"
    );
    let prefix = docs
        .iter()
        .find_map(|d| d["spec"]["topics"]["include"][0]["prefix"].as_str())
        .expect("the first mirror selects topics by prefix")
        .to_string();
    let dir = std::env::temp_dir().join(&ns);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("first-mirror.yaml");
    let stream: Vec<String> = docs
        .iter()
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect();
    std::fs::write(&file, stream.join("---\n")).unwrap();
    let kubectl = bed.var("KMIRROR_KUBECTL").to_string();
    let apply = ["apply", "-f", file.to_str().unwrap()].map(String::from);
    let out = run(&kubectl, &apply, bed);
    assert!(
        out.status.success(),
        "kubectl apply -f first-mirror.yaml\n{}",
        text(&out)
    );

    // A source topic the prefix selects, with records before and while it mirrors.
    let topic = unique_name(&format!("{prefix}readme"));
    create_topic(&bed.source_config(), &topic, 3, &[])
        .await
        .unwrap();
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(300, 3, 0, 7),
        &[],
    )
    .unwrap();
    wait_mirroring(&client, &ns, &topic, 3).await;
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(100, 3, 0, 8),
        &[],
    )
    .unwrap();
    assert_identical(bed, &topic, 3).await;

    uninstall(bed, &ns);
    namespace::delete(&client, &ns).await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = delete_topic(&bed.source_config(), &topic).await;
    let _ = delete_topic(&bed.dest_config(DestUser::Admin), &topic).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn make_demo_mirrors_and_fails_over() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.unwrap();
    let ns = namespace::create(&client, "demo").await.unwrap();
    let topic = unique_name("demo");
    // Output to a file, so that what the demo said is there even when it does not finish.
    let log = std::env::temp_dir().join(format!("{ns}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new("make")
        .arg("demo")
        .current_dir(repo_root())
        .env("KMIRROR_DEMO_NAMESPACE", &ns)
        .env("KMIRROR_DEMO_TOPIC", &topic)
        .env("KMIRROR_DEMO_GROUP", format!("{topic}-app"))
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(420);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let stdout = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    uninstall(bed, &ns);
    namespace::delete(&client, &ns).await;
    let _ = delete_topic(&bed.source_config(), &topic).await;
    let _ = delete_topic(&bed.dest_config(DestUser::Admin), &topic).await;
    match status {
        None => panic!("make demo did not finish within 420 s; it said:\n{stdout}"),
        Some(st) => assert!(st.success(), "make demo failed ({st}):\n{stdout}"),
    }
    for said in [
        "failover complete: 3 partitions STOPPED",
        "the group's committed offsets are the same on both clusters",
    ] {
        assert!(
            stdout.contains(said),
            "make demo did not say {said:?}:\n{stdout}"
        );
    }
}

#[test]
fn the_readme_first_mirror_is_the_one_this_test_edits() {
    // The edits above are the README's own instructions: if the README stops telling the reader
    // to edit these, the test's edits are no longer "as written".
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = readme
        .split("### A first mirror")
        .nth(1)
        .and_then(|s| s.split("```yaml").next())
        .unwrap();
    for edit in ["the addresses", "the password", "the CA"] {
        assert!(
            section.contains(edit),
            "the README no longer says to edit {edit}"
        );
    }
    let blocks = markdown_blocks("README.md", &readme).unwrap();
    let install = block_after(&readme, &blocks, "### Install with Helm", "sh");
    let (cmds, _) = shell_commands(&install.origin, &install.text);
    let helm = cmds.iter().find(|c| c.argv[0] == "helm").unwrap();
    assert_eq!(
        flag_value(&helm.argv, Some("-n"), "--namespace"),
        Some(README_NS)
    );
}
