//! The node agent's settings, derived from the command line and the kubeconfig.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::downward::NodeResources;
use crate::state::StateDir;

/// Settings shared by every part of the agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The Node's name.
    pub node_name: String,
    /// The node's IP (every pod's hostIP).
    pub host_ip: Ipv4Addr,
    /// Per-pod runtime state.
    pub state: StateDir,
    /// Container logs.
    pub logs_dir: PathBuf,
    /// Directories searched first for container commands.
    pub bin_dirs: Vec<PathBuf>,
    /// `PATH` of the agent: searched after `bin_dirs`, and the containers' default `PATH`.
    pub path_var: String,
    /// Host of the API server as pods should reach it.
    pub api_host: String,
    /// Port of the API server.
    pub api_port: u16,
    /// Restart back-off.
    pub backoff: Backoff,
    /// Bind pending pods to this node.
    pub bind_pods: bool,
    /// Longest grace period granted to pods when the agent itself stops.
    pub shutdown_grace: Duration,
    /// What the node offers.
    pub allocatable: NodeResources,
    /// Pod capacity.
    pub max_pods: u32,
    /// How often the Node's Ready condition is renewed.
    pub heartbeat: Duration,
    /// How often Secret, ConfigMap, downward API and token volumes are refreshed.
    pub volume_refresh: Duration,
}

impl AgentConfig {
    /// `KUBERNETES_SERVICE_*` variables pointing pods at the API server.
    pub fn service_env(&self) -> Vec<(String, String)> {
        let (host, port) = (&self.api_host, self.api_port);
        vec![
            ("KUBERNETES_SERVICE_HOST".into(), host.clone()),
            ("KUBERNETES_SERVICE_PORT".into(), port.to_string()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string()),
            ("KUBERNETES_PORT".into(), format!("tcp://{host}:{port}")),
        ]
    }
}

/// Total memory (bytes) and CPU count of this machine.
pub fn machine_resources() -> (f64, f64) {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0);
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(1024.0 * 1024.0);
    (cpus, memory_kib * 1024.0)
}
