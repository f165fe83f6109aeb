//! Finding the host executable for a container command. Images are not used: `command[0]` is
//! looked up by its file name in the `--bin-path` directories (e.g. a cargo target directory),
//! then taken as written when it is an absolute path that exists, then looked up by file name in
//! the node agent's `PATH`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// No executable matches a command.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("exec: {command:?}: executable file not found in --bin-path ({searched}) or $PATH")]
pub struct NotFound {
    /// The command as the pod spec wrote it.
    pub command: String,
    /// The `--bin-path` directories, for the message.
    pub searched: String,
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Resolves `command` against `bin_dirs` and then `path_var` (a `PATH`-style list).
pub fn resolve(command: &str, bin_dirs: &[PathBuf], path_var: &str) -> Result<PathBuf, NotFound> {
    let not_found = || NotFound {
        command: command.to_string(),
        searched: bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":"),
    };
    let name = Path::new(command)
        .file_name()
        .ok_or_else(not_found)?
        .to_owned();
    if let Some(found) = bin_dirs
        .iter()
        .map(|d| d.join(&name))
        .find(|p| is_executable(p))
    {
        return Ok(found);
    }
    let as_written = Path::new(command);
    if as_written.is_absolute() && is_executable(as_written) {
        return Ok(as_written.to_path_buf());
    }
    std::env::split_paths(path_var)
        .map(|d| d.join(&name))
        .find(|p| is_executable(p))
        .ok_or_else(not_found)
}

#[cfg(test)]
mod tests {
    use super::resolve;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kmirror-resolve-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn exe(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn bin_path_wins_over_absolute_and_path() {
        let bins = scratch("bins");
        let other = scratch("other");
        let ours = exe(&bins, "tool");
        let theirs = exe(&other, "tool");
        let path = other.display().to_string();
        assert_eq!(
            resolve("/usr/local/bin/tool", std::slice::from_ref(&bins), &path).unwrap(),
            ours
        );
        assert_eq!(resolve("tool", &[], &path).unwrap(), theirs);
        assert_eq!(
            resolve(&theirs.display().to_string(), &[], "").unwrap(),
            theirs
        );
        // Not executable: skipped.
        std::fs::write(bins.join("plain"), "x").unwrap();
        let err = resolve("plain", std::slice::from_ref(&bins), "").unwrap_err();
        assert!(
            err.to_string().contains("executable file not found"),
            "{err}"
        );
        std::fs::remove_dir_all(bins).unwrap();
        std::fs::remove_dir_all(other).unwrap();
    }
}
