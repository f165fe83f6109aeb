//! Throwaway namespaces: each test works in its own and removes it at the end.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::kafka::unique_name;

/// The namespace annotation that makes the bed's node agent look container commands up in the
/// given directories first (see docs/testbed-node-agent.md).
pub const BIN_PATH_ANNOTATION: &str = "kmirror.io/test-bin-path";

/// The directory this test binary's workspace builds its binaries into (`<target>/debug`),
/// absolute: pods of a test namespace run the fetcher and operator of this checkout, also when
/// several checkouts share one node agent.
pub fn test_bin_dir() -> PathBuf {
    let dir = crate::fetcher::target_dir().join("debug");
    if dir.is_absolute() {
        dir
    } else {
        crate::testbed::repo_root().join(dir)
    }
}

/// The value of [`BIN_PATH_ANNOTATION`] for a test namespace: [`test_bin_dir`], after the
/// directory of `KMIRROR_E2E_BIN_DIR` when set (the binaries of another build, e.g. the code
/// before a fix, to see a test fail on it: its pods run them too).
pub fn bin_path() -> String {
    let own = test_bin_dir().display().to_string();
    match std::env::var("KMIRROR_E2E_BIN_DIR") {
        Ok(other) if !other.is_empty() => format!("{other}:{own}"),
        _ => own,
    }
}

/// Creates a namespace with a unique name starting with `prefix`, annotated with
/// [`BIN_PATH_ANNOTATION`] = [`bin_path`].
pub async fn create(client: &kube::Client, prefix: &str) -> anyhow::Result<String> {
    create_with_labels(
        client,
        prefix,
        serde_json::json!({"kmirror.io/test": "true"}),
    )
    .await
}

/// Like [`create`], with the restricted Pod Security Standard enforced (as
/// `deploy/namespace.yaml` has it): every pod kmirror creates there must meet it.
pub async fn create_restricted(client: &kube::Client, prefix: &str) -> anyhow::Result<String> {
    create_with_labels(
        client,
        prefix,
        serde_json::json!({
            "kmirror.io/test": "true",
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest"
        }),
    )
    .await
}

async fn create_with_labels(
    client: &kube::Client,
    prefix: &str,
    labels: serde_json::Value,
) -> anyhow::Result<String> {
    let name = unique_name(prefix).to_lowercase().replace('_', "-");
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {BIN_PATH_ANNOTATION: bin_path()}
        }
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

/// Deletes a namespace (the namespace controller removes its content in the background).
pub async fn delete(client: &kube::Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}
