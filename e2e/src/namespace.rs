//! Throwaway namespaces: each test works in its own and removes it at the end.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::kafka::unique_name;

/// Creates a namespace with a unique name starting with `prefix`.
pub async fn create(client: &kube::Client, prefix: &str) -> anyhow::Result<String> {
    let name = unique_name(prefix).to_lowercase().replace('_', "-");
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kmirror.io/test": "true"}}
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
