//! Scheduling, reduced to what a one-node test bed needs: a pending pod without `nodeName`, for
//! the default scheduler, whose `nodeSelector` matches this node, is bound to it through the
//! `pods/binding` subresource.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::PostParams;
use kube::{Api, Client};

/// Whether `pod` should be bound to a node with `labels`.
pub fn wants_binding(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &pod.spec else { return false };
    let unbound = spec.node_name.as_deref().unwrap_or("").is_empty();
    let ours = matches!(
        spec.scheduler_name.as_deref(),
        None | Some("") | Some("default-scheduler")
    );
    let pending = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        None | Some("Pending")
    );
    let selected = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    unbound && ours && pending && selected && pod.metadata.deletion_timestamp.is_none()
}

/// Binds `pod` to `node`.
pub async fn bind(client: &Client, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_string()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    let _: serde_json::Value = api
        .create_subresource("binding", &name, &PostParams::default(), &binding)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn binds_only_unscheduled_default_pods_that_fit() {
        let labels: BTreeMap<String, String> =
            [("kubernetes.io/os".to_string(), "linux".to_string())].into();
        let plain = pod(serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": []}}));
        assert!(wants_binding(&plain, &labels));
        let bound = pod(serde_json::json!({"metadata": {"name": "a"},
            "spec": {"nodeName": "other", "containers": []}}));
        assert!(!wants_binding(&bound, &labels));
        let fits = pod(serde_json::json!({"metadata": {"name": "a"},
            "spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []}}));
        assert!(wants_binding(&fits, &labels));
        let misfit = pod(serde_json::json!({"metadata": {"name": "a"},
            "spec": {"nodeSelector": {"disk": "ssd"}, "containers": []}}));
        assert!(!wants_binding(&misfit, &labels));
        let foreign = pod(serde_json::json!({"metadata": {"name": "a"},
            "spec": {"schedulerName": "custom", "containers": []}}));
        assert!(!wants_binding(&foreign, &labels));
        let deleting = pod(serde_json::json!({"metadata": {"name": "a",
            "deletionTimestamp": "2020-01-01T00:00:00Z"}, "spec": {"containers": []}}));
        assert!(!wants_binding(&deleting, &labels));
    }
}
