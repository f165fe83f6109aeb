//! The one way a status reaches the API server: skipped when nothing changed, at most one write
//! per object and interval, a server-side apply with a timeout, counted in the metrics.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{ClusterMirror, ClusterMirrorStatus, MirrorTopic, MirrorTopicStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::metrics::{KindLabels, Metrics};

/// Field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "kmirror-operator";

/// How long one status write may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A resource whose status the operator owns.
pub trait HasStatus:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
{
    /// The status type.
    type Status: Serialize + PartialEq + Default + Clone;
    /// The status as last read.
    fn current_status(&self) -> Option<&Self::Status>;
}

impl HasStatus for MirrorTopic {
    type Status = MirrorTopicStatus;
    fn current_status(&self) -> Option<&MirrorTopicStatus> {
        self.status.as_ref()
    }
}

impl HasStatus for ClusterMirror {
    type Status = ClusterMirrorStatus;
    fn current_status(&self) -> Option<&ClusterMirrorStatus> {
        self.status.as_ref()
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The status was already this.
    Unchanged,
    /// Applied.
    Applied,
    /// Too soon after the last write of this object: try again after this long.
    Deferred(Duration),
}

impl Written {
    /// How long to wait before the status may be written (zero unless deferred).
    pub fn wait(self) -> Duration {
        match self {
            Written::Deferred(d) => d,
            _ => Duration::ZERO,
        }
    }
}

/// Writes statuses, remembering when each object was last written.
pub struct StatusWriter {
    interval: Duration,
    last: Mutex<HashMap<String, Instant>>,
}

impl StatusWriter {
    /// A writer allowing one write per object every `interval`.
    pub fn new(interval: Duration) -> StatusWriter {
        StatusWriter {
            interval,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// How long until `key` may be written again (zero: now).
    pub fn wait(&self, key: &str) -> Duration {
        let map = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(key) {
            Some(t) => self.interval.saturating_sub(t.elapsed()),
            None => Duration::ZERO,
        }
    }

    fn written(&self, key: &str) {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), Instant::now());
    }

    /// Applies `status` to `object` unless it is unchanged or the object was written too
    /// recently.
    pub async fn write<K: HasStatus>(
        &self,
        client: &kube::Client,
        metrics: &Metrics,
        object: &K,
        status: K::Status,
    ) -> Result<Written> {
        let old = object.current_status().cloned().unwrap_or_default();
        if status == old {
            return Ok(Written::Unchanged);
        }
        let kind = K::kind(&()).to_string();
        let ns = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let key = format!("{kind}/{ns}/{name}");
        let wait = self.wait(&key);
        if !wait.is_zero() {
            return Ok(Written::Deferred(wait));
        }
        let api: Api<K> = Api::namespaced(client.clone(), &ns);
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": kind,
            "status": status,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match tokio::time::timeout(
            WRITE_TIMEOUT,
            api.patch_status(&name, &params, &Patch::Apply(&patch)),
        )
        .await
        {
            Err(_) => {
                return Err(Error::StatusTimeout {
                    object: key,
                    timeout: WRITE_TIMEOUT,
                });
            }
            Ok(Err(source)) => {
                return Err(Error::WriteStatus {
                    object: key,
                    source,
                });
            }
            Ok(Ok(_)) => {}
        }
        self.written(&key);
        metrics
            .status_writes
            .get_or_create(&KindLabels { kind })
            .inc();
        Ok(Written::Applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_write_per_interval_and_object() {
        let w = StatusWriter::new(Duration::from_secs(60));
        assert_eq!(w.wait("MirrorTopic/ns/a"), Duration::ZERO);
        w.written("MirrorTopic/ns/a");
        assert!(w.wait("MirrorTopic/ns/a") > Duration::from_secs(59));
        assert_eq!(w.wait("MirrorTopic/ns/b"), Duration::ZERO);
        assert_eq!(
            Written::Deferred(Duration::from_secs(3)).wait(),
            Duration::from_secs(3)
        );
        assert_eq!(Written::Applied.wait(), Duration::ZERO);
    }
}
