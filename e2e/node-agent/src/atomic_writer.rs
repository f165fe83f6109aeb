//! Writes a volume's files so that readers never see a half-updated volume, in the kubelet's
//! layout: the files live in a timestamped `..<time>` directory, `..data` is a symlink to the
//! current one (switched with a rename), and each top-level entry is a symlink through `..data`.

use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path};

use crate::payload::{FileEntry, Payload};

const DATA: &str = "..data";

/// Reads the files currently visible through `dir/..data`.
fn current(dir: &Path) -> Option<Payload> {
    fn walk(root: &Path, rel: &str, out: &mut Payload) -> io::Result<()> {
        for entry in std::fs::read_dir(root.join(rel))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel_name = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let meta = entry.metadata()?;
            if meta.is_dir() {
                walk(root, &rel_name, out)?;
            } else {
                let data = std::fs::read(entry.path())?;
                let mode = meta.permissions().mode() & 0o7777;
                out.insert(rel_name, FileEntry { data, mode });
            }
        }
        Ok(())
    }
    let root = dir.join(DATA);
    let mut out = Payload::new();
    walk(&root, "", &mut out).ok()?;
    Some(out)
}

fn checked(rel: &str) -> io::Result<&Path> {
    let path = Path::new(rel);
    let ok = !rel.is_empty()
        && !rel.starts_with("..")
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(path)
    } else {
        Err(io::Error::other(format!("invalid volume path {rel:?}")))
    }
}

fn chown(path: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid)),
        None => Ok(()),
    }
}

/// Makes `dir` show exactly `payload`, owned by `owner` (uid, gid) when given. Returns whether
/// anything changed.
pub fn write(dir: &Path, payload: &Payload, owner: Option<(u32, u32)>) -> io::Result<bool> {
    if current(dir).as_ref() == Some(payload) {
        return Ok(false);
    }
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    chown(dir, owner)?;
    let stamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.%f")
        .to_string();
    let generation = dir.join(&stamp);
    std::fs::create_dir(&generation)?;
    chown(&generation, owner)?;
    for (rel, entry) in payload {
        let path = generation.join(checked(rel)?);
        if let Some(parent) = path.parent()
            && parent != generation
        {
            std::fs::create_dir_all(parent)?;
            chown(parent, owner)?;
        }
        std::fs::write(&path, &entry.data)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(entry.mode))?;
        chown(&path, owner)?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    symlink(&stamp, &tmp_link)?;
    std::fs::rename(&tmp_link, dir.join(DATA))?;

    let top: std::collections::BTreeSet<String> = payload
        .keys()
        .filter_map(|rel| rel.split('/').next().map(str::to_string))
        .collect();
    for name in &top {
        let link = dir.join(name);
        if link.symlink_metadata().is_err() {
            symlink(Path::new(DATA).join(name), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale_generation = name.starts_with("..") && name != DATA && name != stamp;
        if stale_generation {
            std::fs::remove_dir_all(entry.path())?;
        } else if !name.starts_with("..") && !top.contains(&name) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::write;
    use crate::payload::{FileEntry, Payload};
    use std::os::unix::fs::PermissionsExt;

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                let entry = FileEntry {
                    data: d.as_bytes().to_vec(),
                    mode: *m,
                };
                (p.to_string(), entry)
            })
            .collect()
    }

    #[test]
    fn writes_updates_and_prunes() {
        let dir = std::env::temp_dir().join(format!("kmirror-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = payload(&[("a", "1", 0o644), ("sub/b", "2", 0o600)]);
        assert!(write(&dir, &first, None).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(dir.join("sub/b")).unwrap(), "2");
        let mode = std::fs::metadata(dir.join("sub/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            !write(&dir, &first, None).unwrap(),
            "unchanged payload is not rewritten"
        );

        let second = payload(&[("a", "changed", 0o644)]);
        assert!(write(&dir, &second, None).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "changed");
        assert!(!dir.join("sub").exists(), "removed entries disappear");
        let generations = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                let name = e
                    .as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                name.starts_with("..") && name != "..data"
            })
            .count();
        assert_eq!(generations, 1, "old generations are removed");

        assert!(write(&dir, &payload(&[("../escape", "x", 0o644)]), None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
