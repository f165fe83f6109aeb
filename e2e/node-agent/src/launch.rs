//! What the node agent hands to a container's shim: the launch spec (written as JSON next to the
//! container's state) and the exit record the shim leaves behind when the container stops.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Everything needed to start one container process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LaunchSpec {
    /// The resolved executable on the host.
    pub program: PathBuf,
    /// The argument vector, `argv[0]` included (the command as the pod spec wrote it).
    pub argv: Vec<String>,
    /// The complete environment, in order.
    pub env: Vec<(String, String)>,
    /// The working directory inside the container's mount namespace (created when missing).
    pub working_dir: PathBuf,
    /// The container's hostname (the pod name), set in a private UTS namespace.
    pub hostname: String,
    /// The identity to switch to after the mounts are in place; `None` keeps the agent's.
    pub user: Option<UserSpec>,
    /// Bind mounts, applied in order (parents before children).
    pub mounts: Vec<BindMount>,
    /// Remount `/` read-only once every mount point exists.
    pub read_only_root: bool,
    /// stdout and stderr of the process are appended here.
    pub log_file: PathBuf,
    /// The shim writes the [`ExitRecord`] here when the process has stopped.
    pub exit_file: PathBuf,
    /// The shim writes the pid of the container's main process here.
    pub pid_file: PathBuf,
    /// A network namespace to join (`/run/netns/NAME`, an isolated pod network); `None`: the
    /// host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<PathBuf>,
}

/// A numeric identity for the container process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UserSpec {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// One bind mount of a host path (a directory or a file) at a path inside the container.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BindMount {
    /// Host path.
    pub source: PathBuf,
    /// Path as the container sees it.
    pub target: PathBuf,
    /// Make the mount read-only.
    pub read_only: bool,
}

/// How a container process ended, as recorded by its shim.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitRecord {
    /// The exit code; 128 + signal number when a signal ended the process, 128 when it never
    /// started.
    pub exit_code: i32,
    /// The signal that ended the process, if any.
    pub signal: Option<i32>,
    /// `Completed`, `Error` or `StartError`, as a kubelet reports them.
    pub reason: String,
    /// Details (why the process could not start).
    pub message: Option<String>,
    /// When the process ended, RFC 3339.
    pub finished_at: String,
}

impl ExitRecord {
    /// A record for a process that exited normally (`code`) or through `signal`.
    pub fn from_wait(code: Option<i32>, signal: Option<i32>, finished_at: String) -> Self {
        let exit_code = match (code, signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 255,
        };
        ExitRecord {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_string(),
            message: None,
            finished_at,
        }
    }

    /// A record for a process that could not be started.
    pub fn start_error(message: String, finished_at: String) -> Self {
        ExitRecord {
            exit_code: 128,
            signal: None,
            reason: "StartError".to_string(),
            message: Some(message),
            finished_at,
        }
    }

    /// Reads a record; `None` when the file does not exist or cannot be parsed.
    pub fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read(path).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Writes the record atomically (temporary file, then rename).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        write_json_atomically(path, self)
    }
}

/// Writes `value` as JSON to `path` through a temporary file and a rename.
pub fn write_json_atomically<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::ExitRecord;

    #[test]
    fn exit_codes_follow_the_container_convention() {
        let ok = ExitRecord::from_wait(Some(0), None, "t".into());
        assert_eq!((ok.exit_code, ok.reason.as_str()), (0, "Completed"));
        let failed = ExitRecord::from_wait(Some(3), None, "t".into());
        assert_eq!((failed.exit_code, failed.reason.as_str()), (3, "Error"));
        let killed = ExitRecord::from_wait(None, Some(9), "t".into());
        assert_eq!((killed.exit_code, killed.signal), (137, Some(9)));
        let never = ExitRecord::start_error("no such file".into(), "t".into());
        assert_eq!(
            (never.exit_code, never.reason.as_str()),
            (128, "StartError")
        );
    }
}
