//! Container logs on disk: `<logs dir>/<namespace>_<pod>/<container>.log`, with the previous
//! instance's log kept as `<container>.log.1`. Logs stay after the pod is deleted.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The log file of `container` of pod `namespace/pod`.
pub fn container_log(logs_dir: &Path, namespace: &str, pod: &str, container: &str) -> PathBuf {
    logs_dir
        .join(format!("{namespace}_{pod}"))
        .join(format!("{container}.log"))
}

/// Moves an existing log to `.log.1` (replacing an older one) before a new instance starts.
pub fn rotate(log: &Path) -> std::io::Result<()> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if log.exists() {
        let mut previous = log.as_os_str().to_owned();
        previous.push(".1");
        std::fs::rename(log, previous)?;
    }
    Ok(())
}

/// The last `max_bytes` of a file, trimmed (`None` when empty): a log's tail for
/// `terminationMessagePolicy: FallbackToLogsOnError`, and the termination message itself.
pub fn tail(log: &Path, max_bytes: u64) -> Option<String> {
    let mut file = std::fs::File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(max_bytes)))
        .ok()?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).trim().to_string();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_and_tails() {
        let dir = std::env::temp_dir().join(format!("kmirror-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = container_log(&dir, "ns", "pod", "main");
        assert_eq!(log, dir.join("ns_pod/main.log"));
        rotate(&log).unwrap();
        std::fs::write(&log, "first run\n").unwrap();
        rotate(&log).unwrap();
        std::fs::write(&log, "second run: something failed\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("ns_pod/main.log.1")).unwrap(),
            "first run\n"
        );
        assert_eq!(tail(&log, 15).unwrap(), "mething failed");
        assert_eq!(tail(&dir.join("none"), 10), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
