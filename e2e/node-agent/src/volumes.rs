//! A pod's volumes on the host (`<pod dir>/volumes/<name>`, or the host path itself) and the
//! bind mounts that place them at each container's `mountPath`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use thiserror::Error;

use crate::atomic_writer;
use crate::downward::PodFacts;
use crate::env::expand;
use crate::launch::BindMount;
use crate::payload::{self, PayloadError, Tokens};
use crate::sources::Sources;

/// Why a pod's volumes cannot be set up (the pod stays in `ContainerCreating`).
#[derive(Debug, Error)]
pub enum VolumeError {
    /// The contents cannot be assembled.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// A volume type the node agent does not implement.
    #[error(
        "volume {volume}: unsupported volume type (supported: emptyDir, hostPath, secret, configMap, downwardAPI, projected)"
    )]
    Unsupported {
        /// Volume name.
        volume: String,
    },
    /// A hostPath volume whose path does not match its declared type.
    #[error("volume {volume}: hostPath {path}: {reason}")]
    HostPath {
        /// Volume name.
        volume: String,
        /// The host path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A container mounts a volume the pod does not declare.
    #[error("container {container}: volumeMount {volume}: no such volume")]
    NoSuchVolume {
        /// Container name.
        container: String,
        /// Volume name.
        volume: String,
    },
    /// A subPath is absolute, escapes the volume, or does not exist in a read-only volume.
    #[error("container {container}: subPath {sub_path:?}: {reason}")]
    SubPath {
        /// Container name.
        container: String,
        /// The subPath.
        sub_path: String,
        /// What is wrong.
        reason: String,
    },
    /// A file system operation failed.
    #[error("volume {volume}: {source}")]
    Io {
        /// Volume name.
        volume: String,
        /// The error.
        source: std::io::Error,
    },
}

/// A volume as it exists on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostVolume {
    /// Where its contents are.
    pub path: PathBuf,
    /// API-projected contents (Secret, ConfigMap, downwardAPI, projected): always mounted
    /// read-only, and subPaths must exist.
    pub projected: bool,
}

fn io_err(volume: &str) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        volume: volume.to_string(),
        source,
    }
}

/// Creates or refreshes every volume of `pod` under `pod_dir/volumes`. Files are owned by
/// `owner` (uid, gid) when given.
pub fn materialise(
    pod_dir: &Path,
    pod: &Pod,
    facts: &PodFacts,
    sources: &Sources,
    tokens: &Tokens,
    owner: Option<(u32, u32)>,
) -> Result<BTreeMap<String, HostVolume>, VolumeError> {
    let mut out = BTreeMap::new();
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let name = volume.name.as_str();
        let own_dir = pod_dir.join("volumes").join(name);
        let host = if let Some(files) = payload::build(volume, pod, facts, sources, tokens)? {
            atomic_writer::write(&own_dir, &files, owner).map_err(io_err(name))?;
            HostVolume {
                path: own_dir,
                projected: true,
            }
        } else if volume.empty_dir.is_some() {
            std::fs::create_dir_all(&own_dir).map_err(io_err(name))?;
            std::fs::set_permissions(&own_dir, std::fs::Permissions::from_mode(0o777))
                .map_err(io_err(name))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&own_dir, Some(uid), Some(gid)).map_err(io_err(name))?;
            }
            HostVolume {
                path: own_dir,
                projected: false,
            }
        } else if let Some(host_path) = &volume.host_path {
            let path = PathBuf::from(&host_path.path);
            check_host_path(name, &path, host_path.type_.as_deref().unwrap_or(""))?;
            HostVolume {
                path,
                projected: false,
            }
        } else {
            return Err(VolumeError::Unsupported {
                volume: name.to_string(),
            });
        };
        out.insert(name.to_string(), host);
    }
    Ok(out)
}

fn check_host_path(volume: &str, path: &Path, kind: &str) -> Result<(), VolumeError> {
    let fail = |reason: &str| VolumeError::HostPath {
        volume: volume.to_string(),
        path: path.display().to_string(),
        reason: reason.to_string(),
    };
    match kind {
        "DirectoryOrCreate" => std::fs::create_dir_all(path).map_err(|e| fail(&e.to_string())),
        "FileOrCreate" => {
            if !path.exists() {
                std::fs::write(path, b"").map_err(|e| fail(&e.to_string()))?;
            }
            Ok(())
        }
        "Directory" if !path.is_dir() => Err(fail("is not a directory")),
        "File" if !path.is_file() => Err(fail("is not a file")),
        "Socket" | "CharDevice" | "BlockDevice" if !path.exists() => Err(fail("does not exist")),
        _ => Ok(()),
    }
}

fn relative(sub_path: &str) -> bool {
    let p = Path::new(sub_path);
    !p.is_absolute() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The bind mounts of `container`'s `volumeMounts` (subPath and subPathExpr resolved against its
/// environment `env`), sorted so that a parent directory is mounted before what is inside it.
pub fn container_mounts(
    container: &Container,
    volumes: &BTreeMap<String, HostVolume>,
    env: &[(String, String)],
) -> Result<Vec<BindMount>, VolumeError> {
    let lookup = |n: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let volume = volumes
            .get(&vm.name)
            .ok_or_else(|| VolumeError::NoSuchVolume {
                container: container.name.clone(),
                volume: vm.name.clone(),
            })?;
        let sub_path = match (&vm.sub_path, &vm.sub_path_expr) {
            (Some(s), _) if !s.is_empty() => s.clone(),
            (_, Some(e)) if !e.is_empty() => expand(e, lookup),
            _ => String::new(),
        };
        let sub_err = |reason: &str| VolumeError::SubPath {
            container: container.name.clone(),
            sub_path: sub_path.clone(),
            reason: reason.to_string(),
        };
        let source = if sub_path.is_empty() {
            volume.path.clone()
        } else {
            if !relative(&sub_path) {
                return Err(sub_err("must be a relative path inside the volume"));
            }
            let source = volume.path.join(&sub_path);
            if !source.exists() {
                if volume.projected {
                    return Err(sub_err("does not exist in the volume"));
                }
                std::fs::create_dir_all(&source).map_err(|e| sub_err(&e.to_string()))?;
            }
            source
        };
        mounts.push(BindMount {
            source,
            target: PathBuf::from(&vm.mount_path),
            read_only: vm.read_only.unwrap_or(false) || volume.projected,
        });
    }
    mounts.sort_by_key(|m| m.target.components().count());
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "c", "volumeMounts": mounts})).unwrap()
    }

    #[test]
    fn mounts_are_ordered_and_projected_ones_read_only() {
        let root = std::env::temp_dir().join(format!("kmirror-volumes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::fs::write(root.join("secret/key"), "v").unwrap();
        let volumes: BTreeMap<String, HostVolume> = [
            (
                "data",
                HostVolume {
                    path: root.join("data"),
                    projected: false,
                },
            ),
            (
                "secret",
                HostVolume {
                    path: root.join("secret"),
                    projected: true,
                },
            ),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        let c = container(serde_json::json!([
            {"name": "data", "mountPath": "/var/lib/app/cache/deep", "subPathExpr": "$(POD)"},
            {"name": "secret", "mountPath": "/etc/app/key", "subPath": "key"},
            {"name": "data", "mountPath": "/var/lib/app"}
        ]));
        let env = vec![("POD".to_string(), "p1".to_string())];
        let mounts = container_mounts(&c, &volumes, &env).unwrap();
        let targets: Vec<_> = mounts
            .iter()
            .map(|m| m.target.display().to_string())
            .collect();
        assert_eq!(
            targets,
            ["/etc/app/key", "/var/lib/app", "/var/lib/app/cache/deep"]
        );
        assert!(mounts[0].read_only);
        assert!(!mounts[1].read_only);
        assert_eq!(mounts[2].source, root.join("data/p1"));
        assert!(
            root.join("data/p1").is_dir(),
            "subPath dirs are created in writable volumes"
        );

        let bad =
            container(serde_json::json!([{"name": "data", "mountPath": "/x", "subPath": "../up"}]));
        assert!(matches!(
            container_mounts(&bad, &volumes, &env),
            Err(VolumeError::SubPath { .. })
        ));
        let missing = container(
            serde_json::json!([{"name": "secret", "mountPath": "/x", "subPath": "nope"}]),
        );
        assert!(matches!(
            container_mounts(&missing, &volumes, &env),
            Err(VolumeError::SubPath { .. })
        ));
        let unknown = container(serde_json::json!([{"name": "other", "mountPath": "/x"}]));
        assert!(matches!(
            container_mounts(&unknown, &volumes, &env),
            Err(VolumeError::NoSuchVolume { .. })
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
