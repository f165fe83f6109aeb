//! Installing the kmirror CRDs into the test bed's apiserver.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::api::{Patch, PatchParams};
use kube::{Api, CustomResourceExt};

/// Server-side applies both CRDs (as generated from the types) and waits until they are
/// established. Idempotent.
pub async fn install(client: &kube::Client) -> anyhow::Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let params = PatchParams::apply("kmirror-e2e").force();
    for crd in [ClusterMirror::crd(), MirrorTopic::crd()] {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let current = api.get(&name).await?;
            let established = current
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "CRD {name} not established after 30s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}
