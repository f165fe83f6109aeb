//! Metadata sync of a `ClusterMirror`, every `spec.sync.interval`: topic configs, consumer-group
//! offsets and ACLs (partition growth and new topics are handled by the reconcilers). Each part
//! is switchable and reports its last success and last error.

pub mod acl_plan;
pub mod acls;
pub mod configs;
pub mod groups;

use std::collections::BTreeMap;
use std::time::Instant;

use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic, PartitionState, SyncPartStatus};
use kmirror_state::records::PartitionRecords;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::context::Context;
use crate::error::Cause;
use crate::scope::MirrorScope;
use crate::state_cache::StateCache;

/// A part of the metadata sync. The order is that of their names, as status and messages list
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SyncPart {
    /// ACLs of mirrored topics and included groups.
    Acls,
    /// Committed consumer-group offsets.
    ConsumerGroups,
    /// Partition growth (done by the `MirrorTopic` reconciler; reported here).
    Partitions,
    /// Topic configs.
    TopicConfigs,
    /// `MirrorTopic`s for source topics matching the filters.
    Topics,
}

impl SyncPart {
    /// The part's name in status, messages and the `part` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncPart::Acls => "acls",
            SyncPart::ConsumerGroups => "consumerGroups",
            SyncPart::Partitions => "partitions",
            SyncPart::TopicConfigs => "topicConfigs",
            SyncPart::Topics => "topics",
        }
    }
}

impl std::fmt::Display for SyncPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one part of a sync achieved (a summary) or why it failed.
pub type PartResult = Result<String, Cause>;

/// A mirrored topic with what the sync needs to know.
#[derive(Debug, Clone)]
pub struct Mirrored {
    /// The resource.
    pub topic: MirrorTopic,
    /// Every partition is failed over ([`failed_over`]): the topic is (about to be) writable.
    pub stopped: bool,
}

/// Whether a partition belongs to the new primary: it is STOPPED (writable there), or its
/// failover ran the final group sync already and is granting WRITE now (it becomes STOPPED
/// next). A periodic sync that ran between the grant and STOPPED used to plan the topic as
/// still mirroring, revoke the WRITE just granted, and — the topic frozen once STOPPED — never
/// give it back.
pub fn failed_over(records: &PartitionRecords) -> bool {
    records
        .state
        .as_ref()
        .is_some_and(|s| s.state == PartitionState::Stopped || s.final_sync_done)
}

/// The `MirrorTopic`s of a mirror, with their lifecycle summary.
pub async fn mirrored_topics(
    ctx: &Context,
    mirror: &ClusterMirror,
    cache: &StateCache,
) -> Result<Vec<Mirrored>, kube::Error> {
    let ns = mirror.namespace().unwrap_or_default();
    let api: Api<MirrorTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let key = crate::scope::key_of(mirror);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|t| t.spec.mirror == mirror.name_any() && t.metadata.deletion_timestamp.is_none())
        .map(|t| {
            let records = cache.topic(&key, &t.spec.source_topic);
            let stopped = !records.is_empty() && records.values().all(failed_over);
            Mirrored { topic: t, stopped }
        })
        .collect())
}

/// Turns a part's outcome into its status, keeping the last success time on failure.
pub fn part_status(
    previous: Option<&SyncPartStatus>,
    outcome: &PartResult,
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

/// The outcome of each part that ran.
pub type Outcomes = BTreeMap<SyncPart, PartResult>;

/// Runs every enabled sync part once.
pub async fn run(ctx: &Context, scope: &MirrorScope) -> Outcomes {
    let mut out = Outcomes::new();
    let spec = &scope.mirror.spec.sync;
    let topics = match mirrored_topics(ctx, &scope.mirror, &scope.cache).await {
        Ok(t) => t,
        Err(e) => {
            out.insert(SyncPart::TopicConfigs, Err(Cause::Kube(e)));
            return out;
        }
    };
    let mut took = BTreeMap::new();
    if spec.topic_configs.enabled {
        let started = Instant::now();
        out.insert(SyncPart::TopicConfigs, configs::sync(scope, &topics).await);
        took.insert(SyncPart::TopicConfigs, started.elapsed());
    }
    if spec.consumer_groups.enabled {
        let started = Instant::now();
        out.insert(
            SyncPart::ConsumerGroups,
            groups::sync(scope, &ctx.metrics, &topics, None).await,
        );
        took.insert(SyncPart::ConsumerGroups, started.elapsed());
    }
    if spec.acls.enabled {
        let started = Instant::now();
        out.insert(
            SyncPart::Acls,
            acls::sync(scope, &topics, None, false).await,
        );
        took.insert(SyncPart::Acls, started.elapsed());
    }
    let (namespace, name) = crate::metrics::split_key(&scope.key);
    for (part, outcome) in &out {
        let labels = crate::metrics::SyncLabels {
            namespace: namespace.clone(),
            name: name.clone(),
            part: part.as_str().to_string(),
            result: if outcome.is_ok() { "ok" } else { "error" }.to_string(),
        };
        ctx.metrics.sync_runs.get_or_create(&labels).inc();
        if let Some(d) = took.get(part) {
            ctx.metrics
                .sync_duration
                .get_or_create(&labels)
                .observe(d.as_secs_f64());
        }
    }
    // A failed pass leaves the last success as it was (a mirror that stops syncing groups loses
    // the series: `cluster_mirror::track_group_sync`).
    if let Some(Ok(_)) = out.get(&SyncPart::ConsumerGroups) {
        ctx.metrics.group_sync_succeeded(&scope.key, unix_now());
    }
    out
}

/// Now, in Unix seconds.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_are_the_status_and_metric_names() {
        let names: Vec<&str> = [
            SyncPart::Acls,
            SyncPart::ConsumerGroups,
            SyncPart::Partitions,
            SyncPart::TopicConfigs,
            SyncPart::Topics,
        ]
        .iter()
        .map(|p| p.as_str())
        .collect();
        assert_eq!(
            names,
            [
                "acls",
                "consumerGroups",
                "partitions",
                "topicConfigs",
                "topics"
            ]
        );
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(
            names, sorted,
            "parts are listed in the order of their names"
        );
    }

    #[test]
    fn a_failure_keeps_the_last_success() {
        let ok = part_status(None, &Ok("3 topics in sync".into()), "t1");
        assert_eq!(ok.last_success_time.as_deref(), Some("t1"));
        let failed = part_status(Some(&ok), &Err(Cause::Invalid("bad filter".into())), "t2");
        assert_eq!(failed.last_success_time.as_deref(), Some("t1"));
        assert_eq!(failed.last_error.as_deref(), Some("bad filter"));
        assert_eq!(failed.summary.as_deref(), Some("3 topics in sync"));
    }
}
