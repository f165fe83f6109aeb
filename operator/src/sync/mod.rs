//! Metadata sync of a `ClusterMirror`, every `spec.sync.interval`: topic configs, consumer-group
//! offsets and ACLs (partition growth and new topics are handled by the reconcilers). Each part
//! is switchable and reports its last success and last error.

pub mod acl_plan;
pub mod acls;
pub mod configs;
pub mod groups;

use std::collections::BTreeMap;
use std::sync::Arc;

use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic, PartitionState, SyncPartStatus};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::context::Context;
use crate::error::Result;
use crate::state_cache::StateCache;

/// A mirrored topic with what the sync needs to know.
#[derive(Debug, Clone)]
pub struct Mirrored {
    /// The resource.
    pub topic: MirrorTopic,
    /// Every partition is STOPPED (failed over).
    pub stopped: bool,
}

/// The `MirrorTopic`s of a mirror, with their lifecycle summary.
pub async fn mirrored_topics(
    ctx: &Context,
    cm: &ClusterMirror,
    cache: &StateCache,
) -> Result<Vec<Mirrored>> {
    let ns = cm.namespace().unwrap_or_default();
    let api: Api<MirrorTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let mirror = format!("{ns}/{}", cm.name_any());
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|t| t.spec.mirror == cm.name_any() && t.metadata.deletion_timestamp.is_none())
        .map(|t| {
            let records = cache.topic(&mirror, &t.spec.source_topic);
            let stopped = !records.is_empty()
                && records.values().all(|r| {
                    r.state
                        .as_ref()
                        .is_some_and(|s| s.state == PartitionState::Stopped)
                });
            Mirrored { topic: t, stopped }
        })
        .collect())
}

/// Turns a part's outcome into its status, keeping the last success time on failure.
pub fn part_status(
    previous: Option<&SyncPartStatus>,
    outcome: &Result<String>,
    now: &str,
) -> SyncPartStatus {
    match outcome {
        Ok(summary) => SyncPartStatus {
            last_success_time: Some(now.to_string()),
            last_error: None,
            last_error_time: None,
            summary: Some(crate::status::truncate(summary, 512)),
        },
        Err(e) => SyncPartStatus {
            last_success_time: previous.and_then(|p| p.last_success_time.clone()),
            last_error: Some(crate::status::truncate(&e.to_string(), 1024)),
            last_error_time: Some(now.to_string()),
            summary: previous.and_then(|p| p.summary.clone()),
        },
    }
}

/// The ConfigMap-free record of which sync parts ran: part name → outcome.
pub type Outcomes = BTreeMap<&'static str, Result<String>>;

/// Runs every enabled sync part once.
pub async fn run(
    ctx: &Arc<Context>,
    cm: &ClusterMirror,
    source: &Arc<crate::clusters::Cluster>,
    destination: &Arc<crate::clusters::Cluster>,
    cache: &Arc<StateCache>,
) -> Outcomes {
    let mut out = Outcomes::new();
    let topics = match mirrored_topics(ctx, cm, cache).await {
        Ok(t) => t,
        Err(e) => {
            out.insert(
                "topicConfigs",
                Err(crate::error::Error::State(e.to_string())),
            );
            return out;
        }
    };
    if cm.spec.sync.topic_configs.enabled {
        out.insert(
            "topicConfigs",
            configs::sync(cm, source, destination, &topics).await,
        );
    }
    if cm.spec.sync.consumer_groups.enabled {
        out.insert(
            "consumerGroups",
            groups::sync(cm, source, destination, cache, &topics, None).await,
        );
    }
    if cm.spec.sync.acls.enabled {
        out.insert(
            "acls",
            acls::sync(cm, source, destination, cache, &topics, None).await,
        );
    }
    let mirror = format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any());
    for (part, outcome) in &out {
        ctx.metrics
            .sync_runs
            .get_or_create(&crate::metrics::SyncLabels {
                mirror: mirror.clone(),
                part: (*part).to_string(),
                result: if outcome.is_ok() { "ok" } else { "error" }.to_string(),
            })
            .inc();
    }
    out
}
