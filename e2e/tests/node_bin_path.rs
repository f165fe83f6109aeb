//! The node agent looks container commands up in the directories a namespace names in its
//! `kmirror.io/test-bin-path` annotation first, so checkouts with their own cargo target
//! directories can share one agent; namespaces without it keep the agent's own directories.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::unique_name;
use kmirror_e2e::kube::{container_status, is_ready, pod_namespace, wait_for};
use kmirror_e2e::namespace::{self, BIN_PATH_ANNOTATION, test_bin_dir};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

const TIMEOUT: Duration = Duration::from_secs(30);
const PROBE: &str = "kmirror-bin-path-probe";

/// A directory holding an executable named [`PROBE`] (a copy of `sleep`, an ELF binary, so the
/// agent runs it by file descriptor) that neither the agent's directories nor `PATH` have.
fn probe_dir() -> PathBuf {
    let dir = kmirror_e2e::fetcher::target_dir()
        .join("e2e-bin-path")
        .join(unique_name("probe"));
    let dir = if dir.is_absolute() {
        dir
    } else {
        kmirror_e2e::testbed::repo_root().join(dir)
    };
    std::fs::create_dir_all(&dir).expect("probe dir");
    let sleep = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a sleep binary");
    std::fs::copy(sleep, dir.join(PROBE)).expect("copy sleep");
    dir
}

fn probe_pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "ignored",
                            "command": [format!("/usr/local/bin/{PROBE}"), "60"]}]
        }
    }))
    .unwrap()
}

/// A namespace without the annotation, ready for pods.
async fn plain_namespace(client: &Client) -> anyhow::Result<String> {
    let name = unique_name("node-plain").to_lowercase();
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kmirror.io/test": "true"}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait_for(
        &accounts,
        "default",
        TIMEOUT,
        "default ServiceAccount",
        |_| true,
    )
    .await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    wait_for(&maps, "kube-root-ca.crt", TIMEOUT, "root CA", |_| true).await?;
    Ok(name)
}

#[tokio::test]
async fn annotated_namespace_runs_commands_from_its_directories_first() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.expect("kube client");
    let dir = probe_dir();
    let annotated = pod_namespace(&client, "node-binpath").await.expect("ns");
    let plain = plain_namespace(&client).await.expect("plain ns");
    let outcome = async {
        // Test namespaces name this checkout's target directory.
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = namespaces.get(&annotated).await?;
        let value = ns
            .metadata
            .annotations
            .unwrap_or_default()
            .get(BIN_PATH_ANNOTATION)
            .cloned();
        assert_eq!(value, Some(test_bin_dir().display().to_string()));

        let with_probe = format!("{}:{}", dir.display(), test_bin_dir().display());
        namespaces
            .patch(
                &annotated,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({
                    "metadata": {"annotations": {BIN_PATH_ANNOTATION: with_probe}}
                })),
            )
            .await?;
        // The agent caches a namespace's directories for a few seconds.
        tokio::time::sleep(Duration::from_secs(6)).await;

        let pods: Api<Pod> = Api::namespaced(client.clone(), &annotated);
        pods.create(&PostParams::default(), &probe_pod("probe"))
            .await?;
        let pod = wait_for(&pods, "probe", TIMEOUT, "Running", is_ready).await?;
        let status = container_status(&pod, "main").expect("container status");
        assert_eq!(
            status.image_id,
            dir.join(PROBE).display().to_string(),
            "the command ran from the namespace's directory"
        );

        // The same command in a namespace without the annotation is not found.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &plain);
        pods.create(&PostParams::default(), &probe_pod("probe"))
            .await?;
        let pod = wait_for(&pods, "probe", TIMEOUT, "a failed start", |p| {
            container_status(p, "main")
                .and_then(|s| s.state.as_ref()?.terminated.as_ref())
                .is_some()
        })
        .await?;
        let terminated = container_status(&pod, "main")
            .and_then(|s| s.state.clone()?.terminated)
            .expect("terminated");
        assert_eq!(terminated.reason.as_deref(), Some("StartError"));
        let message = terminated.message.unwrap_or_default();
        assert!(
            message.contains("executable file not found")
                && !message.contains(&dir.display().to_string()),
            "the plain namespace must not search the other namespace's directory: {message}"
        );
        anyhow::Ok(())
    }
    .await;
    namespace::delete(&client, &annotated).await;
    namespace::delete(&client, &plain).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome.expect("bin path lookup");
}
