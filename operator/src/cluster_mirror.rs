//! The `ClusterMirror` controller: reachability and identity of both clusters, the state topic,
//! `MirrorTopic`s for source topics matching the filters, the periodic metadata sync, and the
//! mirror-wide status.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kmirror_crds::duration::parse_duration;
use kmirror_crds::filter::Selector;
use kmirror_crds::v1alpha1::{
    ClusterMirror, ClusterMirrorStatus, MirrorTopic, MirrorTopicSpec, PartitionState, SyncStatus,
};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::clusters::Cluster;
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};
use crate::kafka;
use crate::pods::fnv1a;
use crate::status::{add_counts, count, set_condition};
use crate::sync;

/// Finalizer that removes a mirror's `MirrorTopic`s (and lets their own cleanup run) first.
pub const FINALIZER: &str = "kmirror.io/cluster-mirror";
/// Label on `MirrorTopic`s created from the topic filters.
pub const LABEL_CREATED_BY: &str = "kmirror.io/created-by-mirror";

/// When each mirror's metadata sync last ran (in this process).
#[derive(Default)]
pub struct SyncClock(Mutex<HashMap<String, Instant>>);

impl SyncClock {
    fn due(&self, key: &str, interval: Duration) -> bool {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).is_none_or(|t| t.elapsed() >= interval)
    }
    fn ran(&self, key: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), Instant::now());
    }
    fn remaining(&self, key: &str, interval: Duration) -> Duration {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key)
            .map_or(Duration::ZERO, |t| interval.saturating_sub(t.elapsed()))
    }
}

/// The name of the `MirrorTopic` created for `topic`: `<mirror>-<topic>`, lowercased and made a
/// valid object name; a hash suffix keeps different topics apart.
pub fn topic_object_name(mirror: &str, topic: &str) -> String {
    let raw = format!("{mirror}-{topic}");
    let clean: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let clean = clean
        .trim_matches(|c: char| c == '-' || c == '.')
        .to_string();
    if clean == raw && clean.len() <= 253 {
        return clean;
    }
    let hash = format!("{:08x}", fnv1a(raw.as_bytes()) as u32);
    let keep = clean.len().min(253 - 9);
    format!("{}-{hash}", clean[..keep].trim_end_matches(['-', '.']))
}

/// Reconciles one `ClusterMirror`.
pub async fn reconcile(cm: Arc<ClusterMirror>, ctx: Arc<Context>) -> Result<Action> {
    crate::reconcile::with_finalizer(
        &ctx,
        "clustermirror",
        FINALIZER,
        cm,
        |o| apply(o, ctx.clone()),
        |o| cleanup(o, ctx.clone()),
    )
    .await
}

struct Side {
    cluster: Option<Arc<Cluster>>,
    ok: bool,
    reason: String,
    message: String,
    id: Option<String>,
}

async fn connect(ctx: &Context, cm: &ClusterMirror, side: &'static str) -> Side {
    let ns = cm.namespace().unwrap_or_default();
    let conn = if side == "source" {
        &cm.spec.source
    } else {
        &cm.spec.destination
    };
    let cluster = match ctx.clusters.get(&ctx.client, &ns, conn, side).await {
        Ok((c, _)) => c,
        Err(e @ Error::MissingSecret(_)) => {
            return Side {
                cluster: None,
                ok: false,
                reason: "SecretNotFound".into(),
                message: e.to_string(),
                id: None,
            };
        }
        Err(e) => {
            return Side {
                cluster: None,
                ok: false,
                reason: "InvalidConnection".into(),
                message: e.to_string(),
                id: None,
            };
        }
    };
    match cluster.cluster_id(Duration::from_secs(10)).await {
        Err(e) => Side {
            cluster: Some(cluster),
            ok: false,
            reason: "Unreachable".into(),
            message: e.to_string(),
            id: None,
        },
        Ok(id) => match &conn.cluster_id {
            Some(pinned) if pinned != &id => Side {
                cluster: Some(cluster),
                ok: false,
                reason: "ClusterIdMismatch".into(),
                message: format!(
                    "spec.{side}.clusterId is {pinned} but the cluster reports {id}: refusing to use it"
                ),
                id: Some(id),
            },
            _ => Side {
                cluster: Some(cluster),
                ok: true,
                reason: "Connected".into(),
                message: format!("cluster {id} answers at {}", conn.bootstrap_servers),
                id: Some(id),
            },
        },
    }
}

async fn apply(cm: Arc<ClusterMirror>, ctx: Arc<Context>) -> Result<Action> {
    let ns = cm.namespace().unwrap_or_default();
    let name = cm.name_any();
    let key = format!("{ns}/{name}");
    let generation = cm.metadata.generation;
    let now = Time(Timestamp::now());
    let mut status = cm.status.clone().unwrap_or_default();
    status.observed_generation = generation;

    let problems = kmirror_crds::validate::cluster_mirror(&cm.spec);
    if !problems.is_empty() {
        let message = kmirror_crds::validate::describe(&problems);
        ctx.event(
            cm.as_ref(),
            true,
            "InvalidSpec",
            "Validate",
            message.clone(),
        )
        .await;
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "InvalidSpec",
            message,
            generation,
            &now,
        );
        write_status(&ctx, &cm, status).await?;
        return Ok(Action::await_change());
    }

    let source = connect(&ctx, &cm, "source").await;
    let destination = connect(&ctx, &cm, "destination").await;
    for (side, s) in [("Source", &source), ("Destination", &destination)] {
        set_condition(
            &mut status.conditions,
            &format!("{side}Reachable"),
            s.ok,
            &s.reason,
            s.message.clone(),
            generation,
            &now,
        );
        let previous = cm.status.as_ref().and_then(|st| {
            crate::status::condition_is(&st.conditions, &format!("{side}Reachable"))
        });
        if !s.ok && previous != Some(false) {
            ctx.event(
                cm.as_ref(),
                true,
                &s.reason,
                "Connect",
                format!("{}: {}", side.to_lowercase(), s.message),
            )
            .await;
        }
    }
    status.source_cluster_id = source.id.clone().or(status.source_cluster_id);
    status.destination_cluster_id = destination.id.clone().or(status.destination_cluster_id);

    let mut requeue = Duration::from_secs(30);
    let interval = parse_duration(&cm.spec.sync.interval).unwrap_or(Duration::from_secs(30));
    if let (true, true, Some(src), Some(dst)) = (
        source.ok,
        destination.ok,
        &source.cluster,
        &destination.cluster,
    ) {
        let cache = ctx
            .states
            .get(dst.key, &dst.config, &cm.spec.state_topic)
            .await?;
        cache.wait_loaded(Duration::from_secs(20)).await;
        if ctx.sync_clock.due(&key, interval) {
            let topics_outcome = discover_topics(&ctx, &cm, src).await;
            let now_text = now.0.to_string();
            let mut sync = status.sync.clone();
            sync.topics = Some(sync::part_status(
                sync.topics.as_ref(),
                &topics_outcome,
                &now_text,
            ));
            let outcomes = sync::run(&ctx, &cm, src, dst, &cache).await;
            apply_outcomes(&mut sync, &outcomes, &now_text);
            ctx.sync_clock.ran(&key);
            let failed: Vec<String> = outcomes
                .iter()
                .filter_map(|(part, o)| o.as_ref().err().map(|e| format!("{part}: {e}")))
                .chain(topics_outcome.err().map(|e| format!("topics: {e}")))
                .collect();
            if failed.is_empty() {
                set_condition(
                    &mut status.conditions,
                    "Synced",
                    true,
                    "Synced",
                    "every enabled sync part succeeded",
                    generation,
                    &now,
                );
            } else {
                let message = failed.join("; ");
                ctx.event(cm.as_ref(), true, "SyncFailed", "Sync", message.clone())
                    .await;
                set_condition(
                    &mut status.conditions,
                    "Synced",
                    false,
                    "SyncFailed",
                    message,
                    generation,
                    &now,
                );
            }
            status.sync = sync;
        }
        requeue = requeue.min(
            ctx.sync_clock
                .remaining(&key, interval)
                .max(Duration::from_secs(1)),
        );
    } else {
        set_condition(
            &mut status.conditions,
            "Synced",
            false,
            "ClusterUnavailable",
            "a cluster is not reachable",
            generation,
            &now,
        );
        requeue = Duration::from_secs(15);
    }

    // Mirror-wide counts from the topics' status.
    let topics: Api<MirrorTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let mine: Vec<MirrorTopic> = topics
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|t| t.spec.mirror == name)
        .collect();
    status.topics = mine.len() as i32;
    status.partitions = mine.iter().fold(Default::default(), |acc, t| {
        let states = t
            .status
            .as_ref()
            .map(|s| s.partitions.iter().map(|p| p.state).collect::<Vec<_>>())
            .unwrap_or_default();
        add_counts(&acc, &count(states))
    });
    status.partitions_summary = Some(format!(
        "{}/{}",
        status.partitions.mirroring, status.partitions.total
    ));
    status.max_lag = mine
        .iter()
        .filter_map(|t| t.status.as_ref().and_then(|s| s.max_lag))
        .max();
    let reachable = source.ok && destination.ok;
    let (ready, reason, message) = if !reachable {
        (
            false,
            "ClusterUnavailable",
            format!(
                "source: {}; destination: {}",
                source.message, destination.message
            ),
        )
    } else if status.partitions.failed > 0 {
        (
            false,
            "PartitionsFailed",
            format!(
                "{} partitions FAILED (see the MirrorTopics)",
                status.partitions.failed
            ),
        )
    } else {
        (
            true,
            "Mirroring",
            format!(
                "{} topics, {} of {} partitions mirroring",
                status.topics, status.partitions.mirroring, status.partitions.total
            ),
        )
    };
    set_condition(
        &mut status.conditions,
        "Ready",
        ready,
        reason,
        message,
        generation,
        &now,
    );
    let unsettled = mine.iter().any(|t| {
        t.status.as_ref().is_none_or(|s| {
            s.partitions.iter().any(|p| {
                !matches!(
                    p.state,
                    PartitionState::Mirroring | PartitionState::Stopped | PartitionState::Paused
                )
            })
        })
    });
    if unsettled {
        requeue = requeue.min(Duration::from_secs(5));
    }
    let wait = write_status(&ctx, &cm, status).await?;
    Ok(Action::requeue(requeue.max(wait)))
}

fn apply_outcomes(sync: &mut SyncStatus, outcomes: &sync::Outcomes, now: &str) {
    for (part, outcome) in outcomes {
        let slot = match *part {
            "topicConfigs" => &mut sync.topic_configs,
            "consumerGroups" => &mut sync.consumer_groups,
            "acls" => &mut sync.acls,
            _ => &mut sync.partitions,
        };
        *slot = Some(sync::part_status(slot.as_ref(), outcome, now));
    }
}

/// Creates a `MirrorTopic` for every source topic matching the filters that has none.
async fn discover_topics(
    ctx: &Context,
    cm: &ClusterMirror,
    source: &Arc<Cluster>,
) -> Result<String> {
    let selector = Selector::topics(&cm.spec.topics).map_err(|e| Error::State(e.to_string()))?;
    if cm.spec.topics.include.is_empty() {
        return Ok("no include filter: only explicit MirrorTopics".into());
    }
    let ns = cm.namespace().unwrap_or_default();
    let name = cm.name_any();
    let api: Api<MirrorTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let existing: BTreeMap<String, MirrorTopic> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|t| t.spec.mirror == name)
        .map(|t| (t.spec.source_topic.clone(), t))
        .collect();
    let matching: Vec<String> = kafka::list_topics(source)
        .await?
        .into_iter()
        .filter(|t| selector.matches(t))
        .collect();
    let mut created = Vec::new();
    for topic in &matching {
        if existing.contains_key(topic) {
            continue;
        }
        let object_name = topic_object_name(&name, topic);
        let mt = MirrorTopic {
            metadata: ObjectMeta {
                name: Some(object_name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(BTreeMap::from([
                    (LABEL_CREATED_BY.to_string(), name.clone()),
                    (
                        "app.kubernetes.io/managed-by".to_string(),
                        "kmirror-operator".to_string(),
                    ),
                ])),
                owner_references: Some(vec![cm.controller_owner_ref(&()).expect("stored object")]),
                ..Default::default()
            },
            spec: MirrorTopicSpec {
                mirror: name.clone(),
                source_topic: topic.clone(),
                destination_topic: None,
                state: Default::default(),
                failover: Default::default(),
                divergence_policy: None,
            },
            status: None,
        };
        api.patch(
            &object_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&mt),
        )
        .await?;
        created.push(topic.clone());
    }
    if !created.is_empty() {
        ctx.event(
            cm,
            false,
            "TopicsDiscovered",
            "Discover",
            format!("created MirrorTopics for {}", created.join(", ")),
        )
        .await;
    }
    let no_longer: Vec<&String> = existing
        .iter()
        .filter(|(t, mt)| !selector.matches(t) && mt.labels().contains_key(LABEL_CREATED_BY))
        .map(|(t, _)| t)
        .collect();
    let mut summary = format!(
        "{} matching source topics, {} new",
        matching.len(),
        created.len()
    );
    if !no_longer.is_empty() {
        summary.push_str(&format!(
            "; no longer matching (kept, delete them to stop mirroring): {}",
            no_longer
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(summary)
}

async fn write_status(
    ctx: &Arc<Context>,
    cm: &Arc<ClusterMirror>,
    status: ClusterMirrorStatus,
) -> Result<Duration> {
    if cm.status.as_ref() == Some(&status) {
        return Ok(Duration::ZERO);
    }
    let key = format!(
        "ClusterMirror/{}/{}",
        cm.namespace().unwrap_or_default(),
        cm.name_any()
    );
    let wait = ctx.status_wait(&key);
    if !wait.is_zero() {
        return Ok(wait);
    }
    let api: Api<ClusterMirror> =
        Api::namespaced(ctx.client.clone(), &cm.namespace().unwrap_or_default());
    let patch = serde_json::json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror", "status": status});
    api.patch_status(
        &cm.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    ctx.status_written(&key, "ClusterMirror");
    Ok(Duration::ZERO)
}

/// Deleting a `ClusterMirror`: delete its `MirrorTopic`s and wait until their own cleanup is
/// done (it needs this mirror's connection settings).
async fn cleanup(cm: Arc<ClusterMirror>, ctx: Arc<Context>) -> Result<Action> {
    let ns = cm.namespace().unwrap_or_default();
    let name = cm.name_any();
    let api: Api<MirrorTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let mine: Vec<MirrorTopic> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|t| t.spec.mirror == name)
        .collect();
    if mine.is_empty() {
        return Ok(Action::await_change());
    }
    for t in mine
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
    {
        let _ = api.delete(&t.name_any(), &DeleteParams::default()).await;
    }
    Err(Error::Finalizer(format!(
        "waiting for {} MirrorTopics of {name} to be removed",
        mine.len()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_valid_and_distinct() {
        assert_eq!(topic_object_name("dr", "orders"), "dr-orders");
        let a = topic_object_name("dr", "Orders_EU");
        let b = topic_object_name("dr", "orders-eu");
        assert_ne!(a, b);
        assert!(a.starts_with("dr-orders-eu-"), "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        );
        let long = topic_object_name("dr", &"x".repeat(300));
        assert!(long.len() <= 253);
    }
}
