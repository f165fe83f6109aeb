//! Process supervision on the agent's side: starting a container's shim, waiting for it (as a
//! child, or by polling when it was adopted after an agent restart), signalling its process
//! group, and reading the exit record it leaves.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::launch::{ExitRecord, LaunchSpec, write_json_atomically};
use crate::process::ProcessId;

/// A started or adopted shim to wait for.
#[derive(Debug)]
pub enum Shim {
    /// Started by this agent process.
    Child(tokio::process::Child, ProcessId),
    /// Found running after an agent restart.
    Adopted(ProcessId),
}

impl Shim {
    /// The shim's identity.
    pub fn id(&self) -> ProcessId {
        match self {
            Shim::Child(_, id) | Shim::Adopted(id) => *id,
        }
    }
}

/// Files of one container instance in its container directory.
#[derive(Debug, Clone)]
pub struct ContainerFiles {
    /// The launch spec.
    pub launch: PathBuf,
    /// The exit record.
    pub exit: PathBuf,
    /// The main process's pid.
    pub pid: PathBuf,
    /// The shim's own diagnostics.
    pub shim_log: PathBuf,
    /// The termination message the instance leaves (bind-mounted into the container).
    pub termination: PathBuf,
}

impl ContainerFiles {
    /// The files under `dir`.
    pub fn new(dir: &Path) -> ContainerFiles {
        ContainerFiles {
            launch: dir.join("launch.json"),
            exit: dir.join("exit.json"),
            pid: dir.join("pid"),
            shim_log: dir.join("shim.log"),
            termination: dir.join("termination-log"),
        }
    }

    /// The pid of the container's main process, once the shim has written it.
    pub fn main_pid(&self) -> Option<i32> {
        std::fs::read_to_string(&self.pid).ok()?.trim().parse().ok()
    }
}

/// Starts a shim for `spec` (whose exit and pid files must be those of `files`).
pub fn start(spec: &LaunchSpec, files: &ContainerFiles) -> std::io::Result<Shim> {
    if let Some(dir) = files.launch.parent() {
        std::fs::create_dir_all(dir)?;
    }
    for stale in [&files.exit, &files.pid] {
        match std::fs::remove_file(stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    write_json_atomically(&files.launch, spec)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&files.shim_log)?;
    let child = tokio::process::Command::new("/proc/self/exe")
        .arg0("kmirror-node-agent")
        .arg("shim")
        .arg(&files.launch)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("shim exited at once"))? as i32;
    // The child is not reaped before we wait for it, so its stat entry is there.
    let id = ProcessId::of(pid).unwrap_or(ProcessId {
        pid,
        start_ticks: 0,
    });
    Ok(Shim::Child(child, id))
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Waits until the shim has ended and returns how the container ended. Stray members of the
/// container's process group are killed afterwards.
pub async fn wait(shim: Shim, exit_file: &Path) -> ExitRecord {
    let id = shim.id();
    let fallback = match shim {
        Shim::Child(mut child, _) => {
            let status = child.wait().await;
            use std::os::unix::process::ExitStatusExt;
            match status {
                Ok(s) if s.signal().is_some() => ExitRecord::from_wait(None, s.signal(), now()),
                _ => ExitRecord::from_wait(None, Some(Signal::SIGKILL as i32), now()),
            }
        }
        Shim::Adopted(id) => {
            while id.is_alive() {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            ExitRecord::from_wait(None, Some(Signal::SIGKILL as i32), now())
        }
    };
    let _ = id.signal_group(Signal::SIGKILL, true);
    ExitRecord::read(exit_file).unwrap_or(fallback)
}

/// Sends `signal` to the container's process group if its shim still runs.
pub fn signal(id: ProcessId, signal: Signal) {
    match id.signal_group(signal, false) {
        Ok(()) => tracing::debug!(pid = id.pid, ?signal, "signalled container process group"),
        Err(e) => tracing::debug!(pid = id.pid, ?signal, "signal not delivered: {e}"),
    }
}

/// Stops every container process recorded for a pod that is no longer wanted (orphans found at
/// start-up, or `cleanup`): SIGTERM to each group, up to `grace`, then SIGKILL. Blocking.
pub fn stop_recorded(record: &crate::state::PodRecord, grace: Duration) {
    let shims: Vec<ProcessId> = record
        .containers
        .values()
        .filter_map(|c| c.running.as_ref().map(|i| i.shim))
        .filter(ProcessId::is_alive)
        .collect();
    if shims.is_empty() {
        return;
    }
    tracing::info!(
        pod = %format!("{}/{}", record.namespace, record.name), uid = %record.uid,
        "stopping {} leftover container(s)", shims.len()
    );
    for id in &shims {
        let _ = id.signal_group(Signal::SIGTERM, false);
    }
    let deadline = std::time::Instant::now() + grace;
    while shims.iter().any(ProcessId::is_alive) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Only groups whose shim still runs: a pid recorded long ago may belong to someone else now.
    for id in &shims {
        let _ = id.signal_group(Signal::SIGKILL, false);
    }
}
