//! One mirror as a reconcile uses it: the `ClusterMirror`, its key, both clusters connected, its
//! state topic in memory and the version of its Secrets — resolved once per reconcile and passed
//! to the lifecycle, the metadata sync, failover and failback.

use std::sync::Arc;
use std::time::Duration;

use kmirror_crds::v1alpha1::ClusterMirror;
use kube::ResourceExt;

use crate::clusters::Cluster;
use crate::context::{Context, Note};
use crate::error::{Cause, Error, Result};
use crate::identity;
use crate::state_cache::StateCache;

pub use crate::state_cache::STATE_LOAD_WAIT;

/// A mirror with everything resolved.
pub struct MirrorScope {
    /// The `ClusterMirror`.
    pub mirror: ClusterMirror,
    /// `namespace/name` of the mirror: the key of its state records.
    pub key: String,
    /// The source cluster.
    pub source: Arc<Cluster>,
    /// The destination cluster.
    pub destination: Arc<Cluster>,
    /// The mirror's state topic (on the destination), in memory.
    pub cache: Arc<StateCache>,
    /// Hash of the referenced Secrets' versions (a change replaces fetcher pods).
    pub secrets_version: String,
    /// What each topic's destination does not get of its configs (shared by every reconcile).
    pub config_notes: Arc<crate::config_fit::Notes>,
}

/// How long a pinned cluster ID check waits for the cluster.
const PIN_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a cluster's answer serves the pinned cluster ID checks of every topic.
const PIN_CHECK_MAX_AGE: Duration = Duration::from_secs(10);

/// Why a mirror cannot be used by a topic now, for the topic's status.
#[derive(Debug, Clone, PartialEq)]
pub struct Unavailable {
    /// Condition reason.
    pub reason: &'static str,
    /// Condition message.
    pub message: String,
    /// Look again after this long.
    pub requeue: Duration,
    /// An event to publish about the topic.
    pub event: Option<Note>,
}

/// The outcome of resolving a mirror for a topic.
pub enum Resolved {
    /// Ready to use.
    Ready(Box<MirrorScope>),
    /// Not usable; the topic says why.
    Unavailable(Unavailable),
    /// The state topic is still being read: nothing may be decided yet.
    Loading,
    /// A cluster is not the one the mirror's spec pins or, for the destination, the one it
    /// reported before (`ClusterIdMismatch`): nothing may be read from or written to it.
    Mismatch(String),
}

/// Why `cluster` (a side of `mirror`) must not be used: it reports another cluster ID than the
/// one the mirror's connection pins or, for the destination, than the one recorded in
/// `status.destinationClusterId` ([`identity::mismatch`]). A cluster that does not answer is no
/// mismatch (failover with the source down must stay possible).
pub async fn identity_mismatch(mirror: &ClusterMirror, cluster: &Arc<Cluster>) -> Option<String> {
    let (pinned, recorded) = if cluster.side == "source" {
        (&mirror.spec.source.cluster_id, None)
    } else {
        (
            &mirror.spec.destination.cluster_id,
            mirror
                .status
                .as_ref()
                .and_then(|s| s.destination_cluster_id.as_deref()),
        )
    };
    if pinned.is_none() && recorded.is_none() {
        return None;
    }
    let found = cluster
        .recent_cluster_id(PIN_CHECK_MAX_AGE, PIN_CHECK_TIMEOUT)
        .await?;
    identity::mismatch(
        cluster.side,
        &mirror.name_any(),
        pinned.as_deref(),
        recorded,
        &found,
    )
}

/// `namespace/name` of a mirror.
pub fn key_of(mirror: &ClusterMirror) -> String {
    format!(
        "{}/{}",
        mirror.namespace().unwrap_or_default(),
        mirror.name_any()
    )
}

impl MirrorScope {
    /// The scope of a mirror whose clusters are connected: opens its state topic.
    pub async fn open(
        ctx: &Context,
        mirror: ClusterMirror,
        source: Arc<Cluster>,
        destination: Arc<Cluster>,
        secrets_version: String,
    ) -> Result<MirrorScope, crate::error::StateError> {
        let cache = ctx
            .states
            .get(
                destination.key,
                &destination.config,
                &mirror.spec.state_topic,
                &ctx.metrics,
            )
            .await?;
        Ok(MirrorScope {
            key: key_of(&mirror),
            mirror,
            source,
            destination,
            cache,
            secrets_version,
            config_notes: ctx.config_notes.clone(),
        })
    }

    /// Resolves the mirror `name` in `namespace` for one of its topics.
    pub async fn resolve(ctx: &Context, namespace: &str, name: &str) -> Result<Resolved> {
        let mirror = ctx
            .mirror(namespace, name)
            .await
            .map_err(|source| Error::ReadMirror {
                name: name.to_string(),
                source,
            })?;
        let Some(mirror) = mirror else {
            return Ok(Resolved::Unavailable(Unavailable {
                reason: "MirrorNotFound",
                message: format!("ClusterMirror {name:?} does not exist in namespace {namespace}"),
                requeue: Duration::from_secs(30),
                event: None,
            }));
        };
        let problems = crate::policy::problems(&mirror.spec, &ctx.settings.fetcher_policy);
        if !problems.is_empty() {
            return Ok(Resolved::Unavailable(Unavailable {
                reason: "InvalidMirror",
                message: format!(
                    "ClusterMirror {} is invalid: {}",
                    mirror.name_any(),
                    kmirror_crds::validate::describe(&problems)
                ),
                requeue: Duration::from_secs(60),
                event: None,
            }));
        }
        let mut clusters = Vec::new();
        for (side, conn) in [
            ("source", &mirror.spec.source),
            ("destination", &mirror.spec.destination),
        ] {
            match ctx.clusters.get(&ctx.client, namespace, conn, side).await {
                Ok(c) => clusters.push(c),
                Err(e @ (Cause::MissingSecret(_) | Cause::UnlabelledSecret(_))) => {
                    let reason = if matches!(e, Cause::MissingSecret(_)) {
                        "SecretMissing"
                    } else {
                        "SecretNotLabelled"
                    };
                    let message = e.to_string();
                    return Ok(Resolved::Unavailable(Unavailable {
                        reason,
                        event: Some(Note::warning(reason, "Connect", message.clone())),
                        message,
                        requeue: Duration::from_secs(30),
                    }));
                }
                Err(source) => return Err(Error::Connect { side, source }),
            }
        }
        let (destination, dest_version) = clusters.pop().expect("two clusters");
        let (source, source_version) = clusters.pop().expect("two clusters");
        // Before anything is read from or written to the destination (its state topic).
        for cluster in [&source, &destination] {
            if let Some(message) = identity_mismatch(&mirror, cluster).await {
                return Ok(Resolved::Mismatch(message));
            }
        }
        if let Some(message) = destination.refused_as_destination().await {
            return Ok(Resolved::Unavailable(Unavailable {
                reason: "DestinationUnsupported",
                message,
                requeue: Duration::from_secs(300),
                event: None,
            }));
        }
        let scope = match MirrorScope::open(
            ctx,
            mirror,
            source,
            destination,
            format!("{source_version}/{dest_version}"),
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                return Ok(Resolved::Unavailable(Unavailable {
                    reason: "DestinationUnreachable",
                    message: format!("destination unavailable: {e}"),
                    requeue: Duration::from_secs(15),
                    event: None,
                }));
            }
        };
        if !scope.cache.wait_loaded(STATE_LOAD_WAIT).await {
            return Ok(Resolved::Loading);
        }
        scope
            .cache
            .own(&scope.key)
            .await
            .map_err(Error::ClaimState)?;
        Ok(Resolved::Ready(Box::new(scope)))
    }

    /// The mirror's namespace.
    pub fn namespace(&self) -> String {
        self.mirror.namespace().unwrap_or_default()
    }

    /// Whether this mirror copies a failed-over topic back (`spec.reverseOf`).
    pub fn forward_mirror(&self) -> Option<&str> {
        self.mirror.spec.reverse_of.as_deref()
    }
}
