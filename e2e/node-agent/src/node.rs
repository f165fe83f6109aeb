//! The Node object: registered at start (labels, addresses, capacity, system info), its Ready
//! condition renewed every heartbeat, and set to not ready when the agent stops.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::config::AgentConfig;

const MANAGER: &str = "kmirror-node-agent";

/// The labels of the node.
pub fn labels(config: &AgentConfig) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", config.node_name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", std::env::consts::ARCH),
        ("kmirror.io/test-bed-node", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn quantities(config: &AgentConfig) -> BTreeMap<String, Quantity> {
    let r = config.allocatable;
    [
        ("cpu", format!("{}", r.cpu)),
        ("memory", format!("{}Ki", (r.memory / 1024.0) as u64)),
        (
            "ephemeral-storage",
            format!("{}", r.ephemeral_storage as u64),
        ),
        ("pods", config.max_pods.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect()
}

fn conditions(ready: bool, since: &Time, now: &Time) -> Vec<NodeCondition> {
    let pressure = |type_: &str, reason: &str| NodeCondition {
        type_: type_.into(),
        status: "False".into(),
        reason: Some(reason.into()),
        message: None,
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(since.clone()),
    };
    vec![
        NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            reason: Some(
                if ready {
                    "KubeletReady"
                } else {
                    "KubeletNotReady"
                }
                .into(),
            ),
            message: Some(
                if ready {
                    "kmirror node agent is posting ready status"
                } else {
                    "kmirror node agent stopped"
                }
                .into(),
            ),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(since.clone()),
        },
        pressure("MemoryPressure", "KubeletHasSufficientMemory"),
        pressure("DiskPressure", "KubeletHasNoDiskPressure"),
        pressure("PIDPressure", "KubeletHasSufficientPID"),
    ]
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Keeps the Node object of this agent.
pub struct NodeRegistration {
    api: Api<Node>,
    config: AgentConfig,
    ready_since: Time,
}

impl NodeRegistration {
    /// Creates or updates the Node and marks it ready.
    pub async fn register(client: Client, config: &AgentConfig) -> Result<Self, kube::Error> {
        let api: Api<Node> = Api::all(client);
        let node = Node {
            metadata: kube::api::ObjectMeta {
                name: Some(config.node_name.clone()),
                labels: Some(labels(config)),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => tracing::info!(node = %config.node_name, "registered node"),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let patch = serde_json::json!({"metadata": {"labels": labels(config)}});
                api.patch(
                    &config.node_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
                tracing::info!(node = %config.node_name, "node already registered, updated it");
            }
            Err(e) => return Err(e),
        }
        let registration = NodeRegistration {
            api,
            config: config.clone(),
            ready_since: Time(Timestamp::now()),
        };
        registration.post_status(true).await?;
        Ok(registration)
    }

    /// Posts the full node status with the Ready condition `ready`.
    pub async fn post_status(&self, ready: bool) -> Result<(), kube::Error> {
        let now = Time(Timestamp::now());
        let since = if ready {
            self.ready_since.clone()
        } else {
            now.clone()
        };
        let status = NodeStatus {
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: self.config.host_ip.to_string(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: self.config.node_name.clone(),
                },
            ]),
            capacity: Some(quantities(&self.config)),
            allocatable: Some(quantities(&self.config)),
            conditions: Some(conditions(ready, &since, &now)),
            node_info: Some(NodeSystemInfo {
                architecture: std::env::consts::ARCH.into(),
                operating_system: "linux".into(),
                kernel_version: kernel_version(),
                kubelet_version: format!("kmirror-node-agent/{}", env!("CARGO_PKG_VERSION")),
                container_runtime_version: "process://local".into(),
                os_image: "host processes (no images)".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let patch = serde_json::json!({"apiVersion": "v1", "kind": "Node", "status": status});
        self.api
            .patch_status(
                &self.config.node_name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        Ok(())
    }

    /// Renews the Ready condition every heartbeat until cancelled.
    pub async fn heartbeat(&self) {
        let mut tick = tokio::time::interval(self.config.heartbeat);
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(e) = self.post_status(true).await {
                tracing::warn!("node heartbeat failed: {e}");
            }
        }
    }
}
