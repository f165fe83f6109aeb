//! The `ClusterMirror` controller: reachability and identity of both clusters, the state topic,
//! `MirrorTopic`s for source topics matching the filters, the periodic metadata sync, and the
//! mirror-wide status.
//!
//! One reconcile: validate, connect both clusters, resolve the [`MirrorScope`], run the sync when
//! it is due, list the mirror's topics, then compute the status and events ([`status`], pure)
//! and write them.

pub mod discover;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kmirror_crds::duration::parse_duration;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;

use crate::clusters::Cluster;
use crate::context::{Context, Note};
use crate::error::{Cause, Error, Result};
use crate::metrics::Metrics;
use crate::reconcile::Cleanup;
use crate::scope::{MirrorScope, key_of};
use crate::sync;
pub use discover::{LABEL_CREATED_BY, topic_object_name};
use status::{Facts, Reach, SyncRun};

/// Finalizer that removes a mirror's `MirrorTopic`s (and lets their own cleanup run) first.
pub const FINALIZER: &str = "kmirror.io/cluster-mirror";

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

/// One side of a mirror: how it answered, and the connection when there is one.
struct Side {
    reach: Reach,
    cluster: Option<(Arc<Cluster>, String)>,
}

fn side_failed(reason: &str, message: String) -> Side {
    Side {
        reach: Reach {
            ok: false,
            reason: reason.into(),
            message,
            id: None,
        },
        cluster: None,
    }
}

async fn connect(ctx: &Context, cm: &ClusterMirror, side: &'static str) -> Side {
    let ns = cm.namespace().unwrap_or_default();
    let conn = if side == "source" {
        &cm.spec.source
    } else {
        &cm.spec.destination
    };
    let (cluster, secrets_version) = match ctx.clusters.get(&ctx.client, &ns, conn, side).await {
        Ok(c) => c,
        Err(e @ Cause::MissingSecret(_)) => return side_failed("SecretNotFound", e.to_string()),
        Err(e @ Cause::UnlabelledSecret(_)) => {
            return side_failed("SecretNotLabelled", e.to_string());
        }
        Err(e) => return side_failed("InvalidConnection", e.to_string()),
    };
    let mut reach = match cluster.cluster_id(Duration::from_secs(10)).await {
        Err(e) => Reach {
            ok: false,
            reason: "Unreachable".into(),
            message: e.to_string(),
            id: None,
        },
        Ok(id) => match crate::identity::mismatch(
            side,
            &cm.name_any(),
            conn.cluster_id.as_deref(),
            cm.status
                .as_ref()
                .and_then(|s| s.destination_cluster_id.as_deref()),
            &id,
        ) {
            // The ID recorded in the status stays the mirror's.
            Some(message) => Reach {
                ok: false,
                reason: "ClusterIdMismatch".into(),
                message,
                id: None,
            },
            None => Reach {
                ok: true,
                reason: "Connected".into(),
                message: format!("cluster {id} answers at {}", conn.bootstrap_servers),
                id: Some(id),
            },
        },
    };
    // kmirror writes only into Kafka 3.0 or later: an older destination (a failback into a 2.x
    // source) is refused here, naming its release.
    if side == "destination"
        && reach.ok
        && let Some(message) = cluster.refused_as_destination().await
    {
        reach = Reach {
            ok: false,
            reason: "DestinationUnsupported".into(),
            message,
            id: reach.id,
        };
    }
    Side {
        reach,
        cluster: Some((cluster, secrets_version)),
    }
}

async fn apply(cm: Arc<ClusterMirror>, ctx: Arc<Context>) -> Result<Action> {
    let key = key_of(&cm);
    let now = Time(Timestamp::now());

    let problems = crate::policy::problems(&cm.spec, &ctx.settings.fetcher_policy);
    if !problems.is_empty() {
        let message = kmirror_crds::validate::describe(&problems);
        ctx.publish(
            cm.as_ref(),
            &Note::warning("InvalidSpec", "Validate", message.clone()),
        )
        .await;
        ctx.write_status(cm.as_ref(), status::invalid(&cm, &message, &now))
            .await?;
        return Ok(Action::await_change());
    }

    track_group_sync(&ctx.metrics, &key, &cm);
    let source = connect(&ctx, &cm, "source").await;
    let destination = connect(&ctx, &cm, "destination").await;
    let mut requeue = Duration::from_secs(30);
    let mut sync_run = None;
    let interval = parse_duration(&cm.spec.sync.interval).unwrap_or(Duration::from_secs(30));
    match (&source, &destination) {
        (
            Side {
                reach: Reach { ok: true, .. },
                cluster: Some((src, src_version)),
            },
            Side {
                reach: Reach { ok: true, .. },
                cluster: Some((dst, dst_version)),
            },
        ) => {
            let scope = MirrorScope::open(
                &ctx,
                cm.as_ref().clone(),
                src.clone(),
                dst.clone(),
                format!("{src_version}/{dst_version}"),
            )
            .await
            .map_err(Error::OpenState)?;
            scope.cache.own(&key).await.map_err(Error::ClaimState)?;
            if ctx.sync_clock.due(&key, interval) {
                let topics = discover::discover_topics(&ctx, &scope).await;
                let parts = sync::run(&ctx, &scope).await;
                ctx.sync_clock.ran(&key);
                sync_run = Some(SyncRun { topics, parts });
            }
            requeue = requeue.min(
                ctx.sync_clock
                    .remaining(&key, interval)
                    .max(Duration::from_secs(1)),
            );
        }
        _ => requeue = Duration::from_secs(15),
    }

    let topics = mirror_topics(&ctx, &cm).await?;
    let rollout = ctx.rollout.summary(&crate::scope::key_of(&cm));
    let facts = Facts {
        rollout: rollout.as_ref(),
        source: &source.reach,
        destination: &destination.reach,
        sync: sync_run.as_ref(),
        topics: &topics,
    };
    let (new_status, notes) = status::status(&cm, &facts, &now);
    for note in &notes {
        ctx.publish(cm.as_ref(), note).await;
    }
    if status::unsettled(&topics) {
        requeue = requeue.min(Duration::from_secs(5));
    }
    let wait = ctx.write_status(cm.as_ref(), new_status).await?;
    Ok(Action::requeue(requeue.max(wait)))
}

/// Keeps the mirror's `kmirror_operator_group_sync_last_success_timestamp_seconds`: absent when
/// it syncs no consumer groups; after a restart or a change of leader, until this process's first
/// successful pass, the last success its status records — so that a mirror whose syncs keep
/// failing (or cannot run) still ages.
pub fn track_group_sync(metrics: &Metrics, key: &str, cm: &ClusterMirror) {
    if !cm.spec.sync.consumer_groups.enabled {
        metrics.forget_group_sync(key);
        return;
    }
    if metrics.group_sync_last_success(key).is_some() {
        return;
    }
    let recorded = cm
        .status
        .as_ref()
        .and_then(|s| s.sync.consumer_groups.as_ref())
        .and_then(|g| g.last_success_time.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok());
    if let Some(t) = recorded {
        metrics.group_sync_succeeded(key, t.as_millisecond() as f64 / 1000.0);
    }
}

/// The `MirrorTopic`s of a mirror.
async fn mirror_topics(ctx: &Context, cm: &ClusterMirror) -> Result<Vec<MirrorTopic>> {
    let name = cm.name_any();
    ctx.mirror_topics(&cm.namespace().unwrap_or_default(), |t| {
        t.spec.mirror == name
    })
    .await
}

/// Deleting a `ClusterMirror`: delete its `MirrorTopic`s and wait until their own cleanup is
/// done (it needs this mirror's connection settings).
async fn cleanup(cm: Arc<ClusterMirror>, ctx: Arc<Context>) -> Result<Cleanup> {
    let mine = mirror_topics(&ctx, &cm).await?;
    if mine.is_empty() {
        ctx.metrics.forget_group_sync(&key_of(&cm));
        return Ok(Cleanup::Done);
    }
    let api: Api<MirrorTopic> =
        Api::namespaced(ctx.client.clone(), &cm.namespace().unwrap_or_default());
    for t in mine
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
    {
        let _ = api.delete(&t.name_any(), &DeleteParams::default()).await;
    }
    Ok(Cleanup::Waiting(format!(
        "{} MirrorTopics of {} to be removed",
        mine.len(),
        cm.name_any()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mirror(groups: bool, last_success: Option<&str>) -> ClusterMirror {
        let connection = json!({"bootstrapServers": "k:9092"});
        serde_json::from_value(json!({
            "apiVersion": "kmirror.io/v1alpha1",
            "kind": "ClusterMirror",
            "metadata": {"name": "dr", "namespace": "shop"},
            "spec": {"source": connection, "destination": connection,
                     "sync": {"consumerGroups": {"enabled": groups}}},
            "status": {"sync": {"consumerGroups": {"lastSuccessTime": last_success}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_last_group_sync_starts_from_the_status_and_only_for_mirrors_that_sync_groups() {
        let m = Metrics::default();
        // A new leader: the status's last success until its own first pass.
        track_group_sync(&m, "shop/dr", &mirror(true, Some("2026-01-02T03:04:05Z")));
        assert_eq!(m.group_sync_last_success("shop/dr"), Some(1_767_323_045.0));
        // Its own passes win over the status from then on.
        m.group_sync_succeeded("shop/dr", 1_767_323_100.0);
        track_group_sync(&m, "shop/dr", &mirror(true, Some("2026-01-02T03:04:05Z")));
        assert_eq!(m.group_sync_last_success("shop/dr"), Some(1_767_323_100.0));
        // Groups no longer synced: no series, so no alert about them.
        track_group_sync(&m, "shop/dr", &mirror(false, Some("2026-01-02T03:04:05Z")));
        assert_eq!(m.group_sync_last_success("shop/dr"), None);
        // Never synced yet: nothing to show.
        track_group_sync(&m, "shop/dr", &mirror(true, None));
        assert_eq!(m.group_sync_last_success("shop/dr"), None);
    }
}
