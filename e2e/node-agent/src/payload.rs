//! The file contents of Secret, ConfigMap, downwardAPI and projected volumes: relative path →
//! bytes and mode, with `items`, `defaultMode`, `optional` and the service-account token.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, DownwardAPIVolumeFile, KeyToPath, Pod, SecretProjection, Volume,
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::downward::{self, DownwardError, PodFacts};
use crate::sources::{ObjectData, Sources};

/// One file of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Contents.
    pub data: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
}

/// Relative path → file.
pub type Payload = BTreeMap<String, FileEntry>;

/// A projected service-account token as a volume asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TokenKey {
    /// The audience; empty means the API server's own.
    pub audience: String,
    /// Requested lifetime.
    pub expiration_seconds: i64,
}

/// Issued tokens by what was asked for.
pub type Tokens = BTreeMap<TokenKey, String>;

/// Why a volume cannot be populated.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PayloadError {
    /// A referenced Secret does not exist.
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    /// A referenced ConfigMap does not exist.
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    /// An item names a key the object lacks.
    #[error("configmap/secret {name}: no key {key:?}")]
    KeyNotFound {
        /// Object name.
        name: String,
        /// Missing key.
        key: String,
    },
    /// A downward API item cannot be resolved.
    #[error("volume {volume}: {source}")]
    Downward {
        /// Volume name.
        volume: String,
        /// What went wrong.
        source: DownwardError,
    },
    /// A token was not issued before building the payload.
    #[error("no service account token for audience {0:?}")]
    MissingToken(String),
    /// A projected source the node agent does not implement.
    #[error("volume {0}: unsupported projected source")]
    UnsupportedSource(String),
}

const DEFAULT_MODE: u32 = 0o644;

fn mode_of(mode: Option<i32>, default: u32) -> u32 {
    mode.map(|m| m as u32 & 0o7777).unwrap_or(default)
}

/// Files of one object: every key, or the listed `items`.
fn object_files(
    name: &str,
    data: Option<&ObjectData>,
    not_found: PayloadError,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    default_mode: u32,
    out: &mut Payload,
) -> Result<(), PayloadError> {
    let Some(data) = data else {
        return if optional { Ok(()) } else { Err(not_found) };
    };
    match items {
        None => {
            for (key, value) in data {
                let entry = FileEntry {
                    data: value.clone(),
                    mode: default_mode,
                };
                out.insert(key.clone(), entry);
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(value) => {
                        let entry = FileEntry {
                            data: value.clone(),
                            mode: mode_of(item.mode, default_mode),
                        };
                        out.insert(item.path.clone(), entry);
                    }
                    None if optional => {}
                    None => {
                        return Err(PayloadError::KeyNotFound {
                            name: name.to_string(),
                            key: item.key.clone(),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

fn secret_files(
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    optional: Option<bool>,
    mode: u32,
    sources: &Sources,
    out: &mut Payload,
) -> Result<(), PayloadError> {
    let data = sources.secrets.get(name).and_then(Option::as_ref);
    let not_found = PayloadError::SecretNotFound(name.to_string());
    object_files(
        name,
        data,
        not_found,
        items,
        optional.unwrap_or(false),
        mode,
        out,
    )
}

fn config_map_files(
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    optional: Option<bool>,
    mode: u32,
    sources: &Sources,
    out: &mut Payload,
) -> Result<(), PayloadError> {
    let data = sources.config_maps.get(name).and_then(Option::as_ref);
    let not_found = PayloadError::ConfigMapNotFound(name.to_string());
    object_files(
        name,
        data,
        not_found,
        items,
        optional.unwrap_or(false),
        mode,
        out,
    )
}

fn downward_files(
    volume: &str,
    pod: &Pod,
    facts: &PodFacts,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    out: &mut Payload,
) -> Result<(), PayloadError> {
    let err = |source| PayloadError::Downward {
        volume: volume.to_string(),
        source,
    };
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            downward::field_value(pod, facts, &field.field_path).map_err(err)?
        } else if let Some(res) = &item.resource_field_ref {
            let container = res.container_name.as_deref().unwrap_or_default();
            downward::resource_value(pod, container, &res.resource, res.divisor.as_ref(), facts)
                .map_err(err)?
        } else {
            continue;
        };
        let entry = FileEntry {
            data: value.into_bytes(),
            mode: mode_of(item.mode, default_mode),
        };
        out.insert(item.path.clone(), entry);
    }
    Ok(())
}

/// The token requests of a pod's projected volumes.
pub fn token_keys(pod: &Pod) -> Vec<TokenKey> {
    let mut keys: Vec<TokenKey> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| TokenKey {
            audience: t.audience.clone().unwrap_or_default(),
            expiration_seconds: t.expiration_seconds.unwrap_or(3600),
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The files of `volume`, or `None` when it is not a Secret, ConfigMap, downwardAPI or
/// projected volume.
pub fn build(
    volume: &Volume,
    pod: &Pod,
    facts: &PodFacts,
    sources: &Sources,
    tokens: &Tokens,
) -> Result<Option<Payload>, PayloadError> {
    let mut out = Payload::new();
    if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let mode = mode_of(s.default_mode, DEFAULT_MODE);
        secret_files(&name, s.items.as_ref(), s.optional, mode, sources, &mut out)?;
    } else if let Some(c) = &volume.config_map {
        let mode = mode_of(c.default_mode, DEFAULT_MODE);
        config_map_files(
            &c.name,
            c.items.as_ref(),
            c.optional,
            mode,
            sources,
            &mut out,
        )?;
    } else if let Some(d) = &volume.downward_api {
        let mode = mode_of(d.default_mode, DEFAULT_MODE);
        let items = d.items.as_deref().unwrap_or_default();
        downward_files(&volume.name, pod, facts, items, mode, &mut out)?;
    } else if let Some(p) = &volume.projected {
        let mode = mode_of(p.default_mode, DEFAULT_MODE);
        for source in p.sources.iter().flatten() {
            if let Some(SecretProjection {
                name,
                items,
                optional,
            }) = &source.secret
            {
                secret_files(name, items.as_ref(), *optional, mode, sources, &mut out)?;
            } else if let Some(ConfigMapProjection {
                name,
                items,
                optional,
            }) = &source.config_map
            {
                config_map_files(name, items.as_ref(), *optional, mode, sources, &mut out)?;
            } else if let Some(d) = &source.downward_api {
                let items = d.items.as_deref().unwrap_or_default();
                downward_files(&volume.name, pod, facts, items, mode, &mut out)?;
            } else if let Some(t) = &source.service_account_token {
                let key = TokenKey {
                    audience: t.audience.clone().unwrap_or_default(),
                    expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                };
                let token = tokens
                    .get(&key)
                    .ok_or_else(|| PayloadError::MissingToken(key.audience.clone()))?;
                // Tokens are private to the pod's user even under a wider default mode.
                let entry = FileEntry {
                    data: token.clone().into_bytes(),
                    mode: mode & 0o600,
                };
                out.insert(t.path.clone(), entry);
            } else {
                return Err(PayloadError::UnsupportedSource(volume.name.clone()));
            }
        }
    } else {
        return Ok(None);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downward::NodeResources;

    fn facts() -> PodFacts {
        PodFacts {
            pod_ip: "127.0.0.12".into(),
            host_ip: "127.0.0.1".into(),
            node_name: "n".into(),
            allocatable: NodeResources {
                cpu: 1.0,
                memory: 1.0,
                ephemeral_storage: 1.0,
            },
        }
    }

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes}
        }))
        .unwrap()
    }

    fn sources() -> Sources {
        let mut s = Sources::default();
        let creds = [
            ("user".to_string(), b"alice".to_vec()),
            ("pass".to_string(), b"pw".to_vec()),
        ];
        s.secrets
            .insert("creds".into(), Some(creds.into_iter().collect()));
        s.secrets.insert("gone".into(), None);
        let ca = [("ca.crt".to_string(), b"PEM".to_vec())];
        s.config_maps
            .insert("kube-root-ca.crt".into(), Some(ca.into_iter().collect()));
        s
    }

    fn build_one(p: &Pod, tokens: &Tokens) -> Result<Option<Payload>, PayloadError> {
        let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        build(v, p, &facts(), &sources(), tokens)
    }

    #[test]
    fn secret_volume_all_keys_and_items() {
        let p = pod(serde_json::json!([{"name": "s", "secret": {"secretName": "creds"}}]));
        let files = build_one(&p, &Tokens::new()).unwrap().unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["pass", "user"]);
        assert_eq!(files["user"].mode, 0o644);

        let p = pod(
            serde_json::json!([{"name": "s", "secret": {"secretName": "creds",
            "defaultMode": 0o400, "items": [{"key": "user", "path": "dir/u", "mode": 0o440}]}}]),
        );
        let files = build_one(&p, &Tokens::new()).unwrap().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(
            files["dir/u"],
            FileEntry {
                data: b"alice".to_vec(),
                mode: 0o440
            }
        );

        let p = pod(serde_json::json!([{"name": "s", "secret": {"secretName": "gone"}}]));
        assert_eq!(
            build_one(&p, &Tokens::new()),
            Err(PayloadError::SecretNotFound("gone".into()))
        );
        let p = pod(
            serde_json::json!([{"name": "s", "secret": {"secretName": "gone", "optional": true}}]),
        );
        assert_eq!(build_one(&p, &Tokens::new()).unwrap().unwrap().len(), 0);
    }

    #[test]
    fn projected_service_account_volume() {
        let p = pod(
            serde_json::json!([{"name": "kube-api-access", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
            ]}}]),
        );
        let keys = token_keys(&p);
        assert_eq!(
            keys,
            vec![TokenKey {
                audience: String::new(),
                expiration_seconds: 3607
            }]
        );
        assert_eq!(
            build_one(&p, &Tokens::new()),
            Err(PayloadError::MissingToken(String::new()))
        );
        let tokens: Tokens = [(keys[0].clone(), "jwt".to_string())].into_iter().collect();
        let files = build_one(&p, &tokens).unwrap().unwrap();
        assert_eq!(
            files["token"],
            FileEntry {
                data: b"jwt".to_vec(),
                mode: 0o600
            }
        );
        assert_eq!(files["ca.crt"].data, b"PEM");
        assert_eq!(files["namespace"].data, b"ns");
    }

    #[test]
    fn other_volumes_have_no_payload() {
        let p = pod(serde_json::json!([{"name": "e", "emptyDir": {}}]));
        assert_eq!(build_one(&p, &Tokens::new()), Ok(None));
    }
}
