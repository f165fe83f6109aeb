//! Termination messages as the kubelet keeps them: a file per container instance, emptied at each
//! start and bind-mounted at the container's `terminationMessagePath` (default
//! `/dev/termination-log`); what the process wrote there becomes the `message` of its
//! `terminated` state. (The mount point is created on the host when missing, like every mount
//! point of the node agent.)

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

/// Where a container finds its termination message file unless its spec says otherwise.
pub const DEFAULT_PATH: &str = "/dev/termination-log";

/// The most of a message that is kept (the kubelet's limit per container).
const MAX_BYTES: u64 = 4096;

/// The path the container writes its message to.
pub fn target(spec: &Container) -> PathBuf {
    PathBuf::from(
        spec.termination_message_path
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or(DEFAULT_PATH),
    )
}

/// Creates (or empties) the host file of an instance's message, writable by any user the
/// container runs as.
pub fn prepare(file: &Path) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(file, b"")?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666))
}

/// The message an instance left, if it wrote one: its last 4096 bytes, trimmed (the kubelet
/// keeps the end of a longer one too).
pub fn read(file: &Path) -> Option<String> {
    crate::logs::tail(file, MAX_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_kept_bounded_and_an_empty_one_is_none() {
        let dir = std::env::temp_dir().join(format!("kmirror-termination-{}", std::process::id()));
        let file = dir.join("c").join("termination-log");
        prepare(&file).unwrap();
        assert_eq!(read(&file), None, "a fresh instance has no message");
        std::fs::write(&file, "ForeignWrite on partition 3: x\n").unwrap();
        assert_eq!(
            read(&file).as_deref(),
            Some("ForeignWrite on partition 3: x")
        );
        std::fs::write(&file, "y".repeat(5000)).unwrap();
        assert_eq!(read(&file).map(|m| m.len()), Some(4096));
        prepare(&file).unwrap();
        assert_eq!(read(&file), None, "a new start empties it");
        let spec = Container {
            termination_message_path: Some("/tmp/msg".into()),
            ..Default::default()
        };
        assert_eq!(target(&spec), PathBuf::from("/tmp/msg"));
        assert_eq!(target(&Container::default()), PathBuf::from(DEFAULT_PATH));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
