//! The Secrets and ConfigMaps a pod refers to (in `env`, `envFrom` and volumes), fetched from the
//! API before a container starts.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::{Api, Client};

/// The key → bytes contents of one object.
pub type ObjectData = BTreeMap<String, Vec<u8>>;

/// Fetched objects by name; `None` records that the object does not exist.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// Secrets (`data`).
    pub secrets: BTreeMap<String, Option<ObjectData>>,
    /// ConfigMaps (`data` and `binaryData`).
    pub config_maps: BTreeMap<String, Option<ObjectData>>,
}

/// Names of the Secrets and ConfigMaps something refers to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct References {
    /// Secret names.
    pub secrets: BTreeSet<String>,
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
}

impl References {
    /// The objects `container`'s environment refers to.
    pub fn of_container_env(container: &Container) -> References {
        let mut refs = References::default();
        for from in container.env_from.iter().flatten() {
            if let Some(s) = &from.secret_ref {
                refs.secrets.insert(s.name.clone());
            }
            if let Some(c) = &from.config_map_ref {
                refs.config_maps.insert(c.name.clone());
            }
        }
        for var in container.env.iter().flatten() {
            let Some(from) = &var.value_from else {
                continue;
            };
            if let Some(s) = &from.secret_key_ref {
                refs.secrets.insert(s.name.clone());
            }
            if let Some(c) = &from.config_map_key_ref {
                refs.config_maps.insert(c.name.clone());
            }
        }
        refs
    }

    /// The objects `pod`'s volumes refer to.
    pub fn of_volumes(pod: &Pod) -> References {
        let mut refs = References::default();
        let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        for volume in volumes {
            if let Some(s) = volume.secret.as_ref().and_then(|s| s.secret_name.clone()) {
                refs.secrets.insert(s);
            }
            if let Some(c) = &volume.config_map {
                refs.config_maps.insert(c.name.clone());
            }
            let projected = volume
                .projected
                .iter()
                .flat_map(|p| p.sources.iter().flatten());
            for source in projected {
                if let Some(s) = &source.secret {
                    refs.secrets.insert(s.name.clone());
                }
                if let Some(c) = &source.config_map {
                    refs.config_maps.insert(c.name.clone());
                }
            }
        }
        refs
    }
}

/// Fetches the referenced objects of `namespace`.
pub async fn fetch(
    client: &Client,
    namespace: &str,
    refs: &References,
) -> Result<Sources, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut out = Sources::default();
    for name in &refs.secrets {
        let data = secrets.get_opt(name).await?.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect()
        });
        out.secrets.insert(name.clone(), data);
    }
    for name in &refs.config_maps {
        let data = config_maps.get_opt(name).await?.map(|c| {
            let text = c.data.unwrap_or_default().into_iter();
            let binary = c.binary_data.unwrap_or_default().into_iter();
            text.map(|(k, v)| (k, v.into_bytes()))
                .chain(binary.map(|(k, v)| (k, v.0)))
                .collect()
        });
        out.config_maps.insert(name.clone(), data);
    }
    Ok(out)
}
