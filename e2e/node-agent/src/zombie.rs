//! Zombie pods: what a lost node looks like. A pod annotated
//! `kmirror.io/test-zombie-on-force-delete: "true"` whose object is then removed by force
//! (`kubectl delete pod --grace-period=0 --force`) keeps its processes running, unsupervised:
//! no restarts, no status, no deletion. Its IP stays taken and its files stay in place until the
//! processes end or are killed (`kmirror-node-agent zombies --kill NAMESPACE/POD`, or
//! `e2e/testbed.sh zombie-kill`). Without the annotation a removed pod is stopped at once, as
//! before.
//!
//! The agent notes that it has seen the annotation with a file `zombie-armed` in the pod's
//! state directory, so a fault injector knows when the force deletion may happen.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nix::sys::signal::Signal;

use crate::ipam::Ipam;
use crate::process::ProcessId;
use crate::state::{PodRecord, StateDir};

/// The pod annotation that arms the switch.
pub const ANNOTATION: &str = "kmirror.io/test-zombie-on-force-delete";

/// The file in a pod's state directory that says the agent has seen the annotation.
pub const ARMED_MARKER: &str = "zombie-armed";

/// Whether `pod` asks to be left running when its object is removed by force.
pub fn armed(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// The shims of a record that still run.
pub fn live_shims(record: &PodRecord) -> Vec<ProcessId> {
    record
        .containers
        .values()
        .filter_map(|c| c.running.as_ref().map(|i| i.shim))
        .filter(ProcessId::is_alive)
        .collect()
}

/// The zombies this agent knows of, by pod UID.
#[derive(Debug, Default)]
pub struct Zombies {
    known: Mutex<HashMap<String, PodRecord>>,
}

impl Zombies {
    /// Remembers a zombie (its IP stays allocated until it is reaped).
    pub fn add(&self, record: PodRecord) {
        self.known
            .lock()
            .expect("zombies lock")
            .insert(record.uid.clone(), record);
    }

    /// Number of zombies known.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.known.lock().expect("zombies lock").len()
    }

    /// Forgets the zombies whose processes have all ended (or whose record was removed, e.g.
    /// by `zombies --kill`): their state is removed and their IPs released.
    pub fn reap(&self, state: &StateDir, ipam: &Mutex<Ipam>) {
        let mut known = self.known.lock().expect("zombies lock");
        let ended: Vec<String> = known
            .iter()
            .filter(|(uid, record)| {
                live_shims(record).is_empty() || !state.pod_dir(uid).join("pod.json").exists()
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in ended {
            if let Some(record) = known.remove(&uid) {
                let pod = format!("{}/{}", record.namespace, record.name);
                tracing::info!(%pod, %uid, "zombie pod ended; its state and IP are released");
                if let Err(e) = state.remove(&uid) {
                    tracing::warn!(%pod, "cannot remove zombie pod state: {e}");
                }
                if let (true, Some(ip)) = (record.isolated_network, record.ip)
                    && let Ok(net) = crate::netns::PodNet::of(ip)
                {
                    net.teardown();
                }
                ipam.lock().expect("ipam lock").release(&uid);
            }
        }
    }
}

/// `namespace/name` of a record.
pub fn label(record: &PodRecord) -> String {
    format!("{}/{}", record.namespace, record.name)
}

/// The zombie records of a state directory.
pub fn recorded(state: &StateDir) -> Vec<PodRecord> {
    state
        .load_all()
        .0
        .into_iter()
        .filter(|r| r.zombie_since.is_some())
        .collect()
}

/// SIGKILLs the process groups of a zombie, waits up to `wait` for them to end, and removes
/// its state. True when nothing of it runs any more.
pub fn kill(state: &StateDir, record: &PodRecord, wait: Duration) -> bool {
    let shims = live_shims(record);
    for id in &shims {
        let _ = id.signal_group(Signal::SIGKILL, false);
    }
    let deadline = std::time::Instant::now() + wait;
    while shims.iter().any(ProcessId::is_alive) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone = !shims.iter().any(ProcessId::is_alive);
    if gone && let Err(e) = state.remove(&record.uid) {
        tracing::warn!(pod = %label(record), "cannot remove zombie pod state: {e}");
    }
    gone
}

/// Writes the marker that says the annotation was seen (once).
pub fn note_armed(pod_dir: &Path) {
    let marker = pod_dir.join(ARMED_MARKER);
    if !marker.exists() {
        let _ = std::fs::create_dir_all(pod_dir);
        if let Err(e) = std::fs::write(&marker, b"armed\n") {
            tracing::warn!("cannot write {}: {e}", marker.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ContainerRecord, Instance};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;
    use std::os::unix::process::CommandExt;

    fn pod(annotations: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "annotations": annotations}
        }))
        .unwrap()
    }

    #[test]
    fn only_the_true_annotation_arms() {
        assert!(armed(&pod(serde_json::json!({ANNOTATION: "true"}))));
        assert!(!armed(&pod(serde_json::json!({ANNOTATION: "false"}))));
        assert!(!armed(&pod(serde_json::json!({"other": "true"}))));
        assert!(!armed(&pod(serde_json::json!({}))));
    }

    fn record_with(shim: ProcessId) -> PodRecord {
        let mut containers = BTreeMap::new();
        containers.insert(
            "main".to_string(),
            ContainerRecord {
                running: Some(Instance {
                    shim,
                    started_at: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                    container_id: format!("process://{}", shim.pid),
                    image_id: "/bin/sleep".into(),
                }),
                ..Default::default()
            },
        );
        PodRecord {
            uid: "zombie-uid".into(),
            namespace: "ns".into(),
            name: "p".into(),
            ip: Some(std::net::Ipv4Addr::new(127, 0, 0, 200)),
            start_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            init_done: true,
            containers,
            zombie_since: Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            isolated_network: false,
        }
    }

    #[test]
    fn a_zombie_is_reaped_once_its_processes_are_killed() {
        let root = std::env::temp_dir().join(format!("kmirror-zombie-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let state = StateDir::new(root.clone()).unwrap();
        // A process group of its own, like a shim's.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let shim = ProcessId::of(child.id() as i32).unwrap();
        let record = record_with(shim);
        state.save(&record).unwrap();
        assert_eq!(recorded(&state), vec![record.clone()]);

        let ipam = Mutex::new(Ipam::new(std::net::Ipv4Addr::new(127, 0, 0, 200), 1));
        assert!(
            ipam.lock()
                .unwrap()
                .restore("zombie-uid", record.ip.unwrap())
        );
        let zombies = Zombies::default();
        zombies.add(record.clone());
        zombies.reap(&state, &ipam);
        assert_eq!(zombies.len(), 1, "alive: kept");
        assert!(ipam.lock().unwrap().allocate("other").is_err(), "IP kept");

        // Reap the child as soon as the kill lands, so it does not linger as a zombie process.
        let waiter = std::thread::spawn(move || child.wait());
        assert!(kill(&state, &record, Duration::from_secs(5)));
        waiter.join().unwrap().unwrap();
        assert!(!state.pod_dir("zombie-uid").exists());
        zombies.reap(&state, &ipam);
        assert_eq!(zombies.len(), 0);
        assert!(
            ipam.lock().unwrap().allocate("other").is_ok(),
            "IP released"
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
