//! The downward API: pod fields (`fieldRef`) and container resources (`resourceFieldRef`) as
//! strings, shared by environment variables and `downwardAPI` volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thiserror::Error;

use crate::quantity;

/// Facts about a pod that are not (yet) in its object: the node agent decides them.
#[derive(Debug, Clone)]
pub struct PodFacts {
    /// The pod's IP.
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
    /// The node's name.
    pub node_name: String,
    /// The node's allocatable resources, the default for containers without limits.
    pub allocatable: NodeResources,
}

/// Allocatable resources of the node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeResources {
    /// CPU cores.
    pub cpu: f64,
    /// Memory in bytes.
    pub memory: f64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: f64,
}

/// A downward API reference that cannot be resolved.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DownwardError {
    /// The field path is not one the downward API offers.
    #[error("unsupported fieldPath {0:?}")]
    UnsupportedField(String),
    /// The resource is not one the downward API offers.
    #[error("unsupported resource {0:?}")]
    UnsupportedResource(String),
    /// `resourceFieldRef.containerName` names no container of the pod.
    #[error("no container named {0:?} in the pod")]
    NoSuchContainer(String),
    /// A quantity in the spec cannot be parsed.
    #[error(transparent)]
    Quantity(#[from] quantity::InvalidQuantity),
}

/// `key="value"` lines, sorted by key, as downward API volumes present labels and annotations.
pub fn format_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of `metadata['key']`-style selectors: `metadata.labels['app']` → ("labels", "app").
fn subscript(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("metadata.")?;
    let (map, key) = rest.split_once("['")?;
    Some((map, key.strip_suffix("']")?))
}

/// The value of a `fieldRef.fieldPath` for `pod`.
pub fn field_value(pod: &Pod, facts: &PodFacts, path: &str) -> Result<String, DownwardError> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(labels),
        "metadata.annotations" => format_map(annotations),
        "spec.nodeName" => facts.node_name.clone(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        other => match subscript(other) {
            Some(("labels", key)) => labels.get(key).cloned().unwrap_or_default(),
            Some(("annotations", key)) => annotations.get(key).cloned().unwrap_or_default(),
            _ => return Err(DownwardError::UnsupportedField(other.to_string())),
        },
    };
    Ok(value)
}

/// The value of a `resourceFieldRef` for `container` of `pod`: its limit or request divided by
/// `divisor` (default 1) and rounded up; limits default to the node's allocatable resources.
pub fn resource_value(
    pod: &Pod,
    container: &str,
    resource: &str,
    divisor: Option<&Quantity>,
    facts: &PodFacts,
) -> Result<String, DownwardError> {
    let spec = pod.spec.as_ref();
    let container: &Container = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == container)
        .ok_or_else(|| DownwardError::NoSuchContainer(container.to_string()))?;
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| DownwardError::UnsupportedResource(resource.to_string()))?;
    let resources = container.resources.as_ref();
    let pick = |kind: &str| {
        resources
            .and_then(|r| {
                if kind == "limits" {
                    r.limits.as_ref()
                } else {
                    r.requests.as_ref()
                }
            })
            .and_then(|m| m.get(name))
            .map(|q| quantity::parse(&q.0))
            .transpose()
    };
    let node_default = match name {
        "cpu" => facts.allocatable.cpu,
        "memory" => facts.allocatable.memory,
        "ephemeral-storage" => facts.allocatable.ephemeral_storage,
        _ => return Err(DownwardError::UnsupportedResource(resource.to_string())),
    };
    let value = match kind {
        "limits" => pick("limits")?.unwrap_or(node_default),
        // An unset request defaults to the limit, if any.
        "requests" => match pick("requests")? {
            Some(v) => v,
            None => pick("limits")?.unwrap_or(0.0),
        },
        _ => return Err(DownwardError::UnsupportedResource(resource.to_string())),
    };
    let divisor = match divisor {
        Some(q) => quantity::parse(&q.0)?,
        None => 1.0,
    };
    Ok(quantity::divide_ceil(value, divisor).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> PodFacts {
        PodFacts {
            pod_ip: "127.0.0.10".into(),
            host_ip: "127.0.0.1".into(),
            node_name: "kmirror-node".into(),
            allocatable: NodeResources {
                cpu: 2.0,
                memory: 8.0 * 1024.0 * 1024.0 * 1024.0,
                ephemeral_storage: 1e11,
            },
        }
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                         "labels": {"app": "x", "b": "say \"hi\""}},
            "spec": {"serviceAccountName": "sa", "containers": [
                {"name": "main", "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}},
                {"name": "bare"}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn pod_fields() {
        let (p, f) = (pod(), facts());
        assert_eq!(field_value(&p, &f, "metadata.name").unwrap(), "p");
        assert_eq!(field_value(&p, &f, "metadata.namespace").unwrap(), "ns");
        assert_eq!(field_value(&p, &f, "metadata.uid").unwrap(), "u-1");
        assert_eq!(
            field_value(&p, &f, "spec.nodeName").unwrap(),
            "kmirror-node"
        );
        assert_eq!(
            field_value(&p, &f, "spec.serviceAccountName").unwrap(),
            "sa"
        );
        assert_eq!(field_value(&p, &f, "status.podIP").unwrap(), "127.0.0.10");
        assert_eq!(field_value(&p, &f, "status.hostIP").unwrap(), "127.0.0.1");
        assert_eq!(field_value(&p, &f, "metadata.labels['app']").unwrap(), "x");
        assert_eq!(
            field_value(&p, &f, "metadata.labels").unwrap(),
            "app=\"x\"\nb=\"say \\\"hi\\\"\""
        );
        assert_eq!(
            field_value(&p, &f, "status.phase"),
            Err(DownwardError::UnsupportedField("status.phase".into()))
        );
    }

    #[test]
    fn container_resources() {
        let (p, f) = (pod(), facts());
        let mi = Quantity("1Mi".into());
        let milli = Quantity("1m".into());
        assert_eq!(
            resource_value(&p, "main", "limits.memory", Some(&mi), &f).unwrap(),
            "64"
        );
        assert_eq!(
            resource_value(&p, "main", "requests.cpu", Some(&milli), &f).unwrap(),
            "250"
        );
        assert_eq!(
            resource_value(&p, "main", "limits.cpu", None, &f).unwrap(),
            "2"
        );
        assert_eq!(
            resource_value(&p, "bare", "requests.memory", None, &f).unwrap(),
            "0"
        );
        assert!(resource_value(&p, "nope", "limits.cpu", None, &f).is_err());
        assert!(resource_value(&p, "main", "limits.gpu", None, &f).is_err());
    }
}
