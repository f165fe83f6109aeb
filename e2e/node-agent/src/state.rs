//! What the node agent remembers about each pod across its own restarts, one directory per pod
//! UID under the state dir: `pod.json` (IP, start time, per-container shim, restart count and
//! terminations), the pod's volumes, its private `/tmp`, and each container's launch and exit
//! files.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::launch::write_json_atomically;
use crate::process::ProcessId;

/// How a container instance ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Termination {
    /// Exit code (128 + signal for signals).
    pub exit_code: i32,
    /// Ending signal.
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `StartError`...
    pub reason: String,
    /// Details.
    pub message: Option<String>,
    /// When the instance started, if it did.
    pub started_at: Option<Time>,
    /// When it ended.
    pub finished_at: Time,
    /// The instance's container ID.
    pub container_id: Option<String>,
}

/// A running container instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// The shim process (leader of the container's process group).
    pub shim: ProcessId,
    /// Start time.
    pub started_at: Time,
    /// `process://<pid>`.
    pub container_id: String,
    /// The executable that runs, reported as the image ID.
    pub image_id: String,
}

/// Runtime state of one container.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// Restarts so far.
    pub restart_count: i32,
    /// Consecutive restarts of the current crash streak (for back-off).
    pub streak: u32,
    /// The running instance, if any.
    pub running: Option<Instance>,
    /// The latest termination.
    pub last: Option<Termination>,
    /// The termination before that.
    pub previous: Option<Termination>,
    /// The executable of the latest instance.
    pub image_id: Option<String>,
}

/// Runtime state of one pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodRecord {
    /// Pod UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The pod IP, when one was allocated.
    pub ip: Option<Ipv4Addr>,
    /// When the node agent accepted the pod.
    pub start_time: Time,
    /// All init containers completed.
    pub init_done: bool,
    /// Containers (init and regular) by name.
    pub containers: BTreeMap<String, ContainerRecord>,
    /// Set when the pod object was removed by force while its processes were left running on
    /// purpose (see `zombie.rs`): the processes live on, unsupervised, until they are killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zombie_since: Option<Time>,
    /// The pod runs in a network namespace of its own (`netns.rs`); its pod IP is that
    /// namespace's address.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub isolated_network: bool,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// State under `root` (created when missing).
    pub fn new(root: PathBuf) -> std::io::Result<StateDir> {
        std::fs::create_dir_all(root.join("pods"))?;
        Ok(StateDir { root })
    }

    /// The directory of pod `uid`.
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root.join("pods").join(uid)
    }

    /// The directory of one container of pod `uid`.
    pub fn container_dir(&self, uid: &str, container: &str) -> PathBuf {
        self.pod_dir(uid).join("containers").join(container)
    }

    /// Saves a pod's record.
    pub fn save(&self, record: &PodRecord) -> std::io::Result<()> {
        let dir = self.pod_dir(&record.uid);
        std::fs::create_dir_all(&dir)?;
        write_json_atomically(&dir.join("pod.json"), record)
    }

    /// Every saved pod record, plus pod directories without a readable record (by UID).
    pub fn load_all(&self) -> (Vec<PodRecord>, Vec<String>) {
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.root.join("pods")) else {
            return (records, unreadable);
        };
        for entry in entries.flatten() {
            let uid = entry.file_name().to_string_lossy().into_owned();
            match read_record(&entry.path().join("pod.json")) {
                Some(record) => records.push(record),
                None => unreadable.push(uid),
            }
        }
        (records, unreadable)
    }

    /// Removes everything kept for pod `uid`.
    pub fn remove(&self, uid: &str) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.pod_dir(uid)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn read_record(path: &Path) -> Option<PodRecord> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let root = std::env::temp_dir().join(format!("kmirror-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = StateDir::new(root.clone()).unwrap();
        let mut containers = BTreeMap::new();
        containers.insert(
            "main".to_string(),
            ContainerRecord {
                restart_count: 2,
                running: Some(Instance {
                    shim: ProcessId {
                        pid: 42,
                        start_ticks: 7,
                    },
                    started_at: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                    container_id: "process://42".into(),
                    image_id: "/bin/sh".into(),
                }),
                ..Default::default()
            },
        );
        let record = PodRecord {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "p".into(),
            ip: Some(Ipv4Addr::new(127, 0, 0, 10)),
            start_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            init_done: true,
            containers,
            zombie_since: None,
            isolated_network: false,
        };
        dir.save(&record).unwrap();
        std::fs::create_dir_all(dir.pod_dir("broken")).unwrap();
        let (records, unreadable) = dir.load_all();
        assert_eq!(records, vec![record]);
        assert_eq!(unreadable, vec!["broken".to_string()]);
        dir.remove("u1").unwrap();
        dir.remove("u1").unwrap();
        assert!(!dir.pod_dir("u1").exists());
        std::fs::remove_dir_all(root).unwrap();
    }
}
