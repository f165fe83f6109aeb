//! Execute: carries out a [`Plan`] in its order — destination topic, failback steps, lifecycle
//! transitions persisted to the state topic before anything acts on them, failovers finished,
//! stale pods deleted and missing ones created — then writes the status.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kmirror_crds::v1alpha1::MirrorTopic;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};

use super::events::{count_transitions, new_data_losses, record_partitions};
use super::plan::{Plan, TopicChange};
use super::pod_view::PodView;
use crate::context::{Context, FIELD_MANAGER, Note};
use crate::error::{Cause, Error, Result};
use crate::leases::ledger::Holder;
use crate::pods::{ANNOTATION_PARTITIONS, LABEL_MIRROR, controlled_by};
use crate::scope::MirrorScope;
use crate::{destination_topic, failback, failover, kafka};

/// Creates the destination topic (configs: [`destination_topic`]), or grows it.
async fn change_destination_topic(
    scope: &MirrorScope,
    mt: &MirrorTopic,
    change: TopicChange,
) -> Result<(), Cause> {
    let topic = mt.destination_topic();
    match change {
        TopicChange::Create { partitions } => {
            match destination_topic::create(scope, mt, partitions as i32).await? {
                kafka::Creation::Created => {
                    tracing::info!(topic, partitions, "created the destination topic")
                }
                // An earlier reconcile created it; the destination's answers do not show it yet.
                kafka::Creation::Existed => {
                    tracing::debug!(topic, "the destination topic exists already")
                }
            }
        }
        TopicChange::Grow { from, to } => {
            kafka::add_partitions(&scope.destination, topic, to).await?;
            tracing::info!(topic, from, to, "grew the destination topic");
        }
    }
    Ok(())
}

/// How soon a topic whose replication factor the destination refused is looked at again (a
/// change of its spec or its mirror's is looked at at once).
const REPLICAS_REQUEUE: Duration = Duration::from_secs(120);

/// The destination cannot hold the replicas asked for: nothing more happens for the topic (no
/// partition starts); its status says why, and a Warning Event when that is news.
async fn too_many_replicas(
    ctx: &Context,
    mt: &MirrorTopic,
    refused: &crate::error::TooManyReplicas,
) -> Result<Duration> {
    const REASON: &str = "ReplicationFactorTooLarge";
    let message = refused.to_string();
    let told = mt.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.reason == REASON && c.message == message)
    });
    if !told {
        tracing::warn!(topic = %mt.name_any(), "{message}");
        ctx.publish(
            mt,
            &Note::warning(REASON, "CreateDestinationTopic", message.clone()),
        )
        .await;
    }
    super::report_problem(ctx, mt, REASON, &message).await?;
    Ok(REPLICAS_REQUEUE)
}

/// Carries out `plan` and writes the status; returns when to look again.
pub async fn execute(
    ctx: &Context,
    scope: &MirrorScope,
    mt: &MirrorTopic,
    mut plan: Plan,
) -> Result<Duration> {
    let name = mt.name_any();
    let topic = &mt.spec.source_topic;

    if let Some(change) = plan.destination_topic {
        match change_destination_topic(scope, mt, change).await {
            Ok(()) => {}
            Err(Cause::TooManyReplicas(refused)) => {
                return too_many_replicas(ctx, mt, &refused).await;
            }
            Err(e) => return Err(Error::EnsureDestinationTopic(e)),
        }
    }

    if !plan.failback.steps.is_empty() {
        failback::execute(scope, mt, &plan.failback.steps)
            .await
            .map_err(Error::Failback)?;
    }
    for note in &plan.failback.events {
        ctx.publish(mt, note).await;
    }

    // Transitions are durable before anything acts on them.
    if !plan.transitions.is_empty() {
        scope
            .cache
            .write_states(&scope.key, topic, plan.transitions.clone())
            .await
            .map_err(Error::PersistTransitions)?;
        count_transitions(&ctx.metrics, &scope.key, topic, &plan.transitions);
        for note in &plan.transition_events {
            tracing::info!(topic = %name, "{}", note.text);
            ctx.publish(mt, note).await;
        }
    }

    if let Some(finish) = &plan.finish {
        let written = failover::finish(ctx, scope, mt, finish)
            .await
            .map_err(Error::FinishFailover)?;
        plan.finished(mt, &written, &Time(Timestamp::now()));
    }

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &scope.namespace());
    let owner_uid = mt.uid().unwrap_or_default();
    for pod in &plan.delete_pods {
        delete_own_pod(&pods, pod, &owner_uid, &name).await?;
    }
    if !plan.create_pods.is_empty() {
        limit_pods(ctx, &pods, mt, &mut plan.create_pods).await?;
    }
    if let Some(demand) = plan.pool_demand.take() {
        ctx.pool
            .report(&scope.key, &name, demand, &scope.secrets_version);
    }
    let mut lease_holders = std::mem::take(&mut plan.lease_holders);
    for pod in &plan.create_pods {
        let pod_name = pod.name_any();
        let create_error = |source| Error::CreatePod {
            pod: pod_name.clone(),
            source,
        };
        // A plain create (the operator needs no patch on pods); a pod of that name that exists
        // already is used only when this MirrorTopic controls it.
        let created = match pods
            .create(
                &PostParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..Default::default()
                },
                pod,
            )
            .await
        {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = pods.get(&pod_name).await.map_err(create_error)?;
                if !controlled_by(&existing, &owner_uid) {
                    return Err(Error::ForeignPod {
                        pod: pod_name.clone(),
                        topic: name.clone(),
                    });
                }
                existing
            }
            Err(source) => return Err(create_error(source)),
        };
        let partitions = pod.annotations().get(ANNOTATION_PARTITIONS).cloned();
        tracing::info!(%name, pod = %pod_name, partitions = ?partitions, "created fetcher pod");
        // The new pod may hold its partitions' write leases.
        if let Some(uid) = created.metadata.uid.clone() {
            for p in PodView::of(&created).partitions {
                let holder = Holder {
                    name: pod_name.clone(),
                    uid: uid.clone(),
                };
                lease_holders.insert(p, holder);
            }
        }
    }
    ctx.leases
        .get(
            scope.destination.key,
            &scope.destination.config,
            &scope.mirror.spec.state_topic,
        )
        .await
        .map_err(Error::OpenLeases)?
        .allow(&scope.key, topic, &lease_holders);

    record_partitions(&ctx.metrics, &scope.key, topic, &plan.report);
    for note in new_data_losses(&scope.key, topic, &scope.cache.topic(&scope.key, topic)) {
        tracing::warn!(topic = %name, "{}", note.text);
        ctx.publish(mt, &note).await;
    }
    // A transition looked at again at once: the status of that look is written instead (a
    // new topic goes UNKNOWN → PREPARING → MIRRORING in two quick reconciles; one write).
    if !plan.transitions.is_empty() && plan.requeue.is_zero() {
        return Ok(Duration::ZERO);
    }
    let shown = mt
        .status
        .as_ref()
        .map(|s| s.configs_not_copied.clone())
        .unwrap_or_default();
    if let Some((notes, announce)) = scope.config_notes.for_status(&scope.key, topic, &shown) {
        if announce {
            let message = format!(
                "configs not copied to {}: {}",
                mt.destination_topic(),
                crate::config_fit::describe(&notes)
            );
            tracing::info!(topic = %name, "{message}");
            ctx.publish(
                mt,
                &Note::normal("ConfigsNotCopied", "SyncConfigs", message),
            )
            .await;
        }
        plan.status.configs_not_copied = notes;
    }
    let status = super::listed::bounded(
        plan.status,
        mt.spec.state,
        ctx.settings.status_max_partitions,
    );
    let wait = ctx.write_status(mt, status).await?;
    Ok(plan.requeue.max(wait))
}

/// Deletes fetcher pod `pod` when the MirrorTopic with UID `owner_uid` controls it — and only
/// that very pod (a UID precondition): a pod that merely carries kmirror's labels is left alone.
pub async fn delete_own_pod(
    pods: &Api<Pod>,
    pod: &str,
    owner_uid: &str,
    topic: &str,
) -> Result<()> {
    let existing = match pods.get_opt(pod).await {
        Ok(Some(p)) => p,
        Ok(None) => return Ok(()),
        Err(source) => {
            return Err(Error::DeletePod {
                pod: pod.to_string(),
                source,
            });
        }
    };
    if !controlled_by(&existing, owner_uid) {
        tracing::warn!(%topic, %pod, "not deleting pod {pod}: MirrorTopic {topic} does not control it");
        return Ok(());
    }
    tracing::info!(%topic, %pod, "deleting fetcher pod");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: existing.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match pods.delete(pod, &params).await {
        Ok(_) => Ok(()),
        // Gone, or replaced by another pod of the same name meanwhile.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(source) => Err(Error::DeletePod {
            pod: pod.to_string(),
            source,
        }),
    }
}

/// How many of `planned` new pods fit when `existing` fetcher pods of the mirror run and the
/// installation allows `limit` per mirror.
pub fn pods_that_fit(existing: usize, planned: usize, limit: usize) -> usize {
    planned.min(limit.saturating_sub(existing))
}

/// Drops the pods that would take the mirror's fetcher pods over the installation's limit, and
/// says so (a Warning Event on the MirrorTopic).
async fn limit_pods(
    ctx: &Context,
    pods: &Api<Pod>,
    mt: &MirrorTopic,
    create: &mut Vec<Pod>,
) -> Result<()> {
    let limit = ctx.settings.max_fetcher_pods_per_mirror;
    let existing = pods
        .list(&ListParams::default().labels(&format!("{LABEL_MIRROR}={}", mt.spec.mirror)))
        .await
        .map_err(Error::ListPods)?
        .items
        .len();
    let fit = pods_that_fit(existing, create.len(), limit);
    if fit < create.len() {
        let message = format!(
            "ClusterMirror {} runs {existing} fetcher pods and this installation allows {limit} per \
             mirror (--max-fetcher-pods-per-mirror, chart value fetcherPolicy.maxPodsPerMirror): \
             {} of this topic's pods are not created; raise spec.fetcher.partitionsPerPod or the limit",
            mt.spec.mirror,
            create.len() - fit
        );
        ctx.publish(mt, &Note::warning("FetcherPodLimit", "CreatePods", message))
            .await;
        create.truncate(fit);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::pods_that_fit;

    #[test]
    fn new_pods_fit_under_the_per_mirror_limit() {
        for (existing, planned, limit, fit) in [
            (0, 3, 1000, 3),
            (998, 3, 1000, 2),
            (1000, 3, 1000, 0),
            (1200, 1, 1000, 0),
            (0, 0, 0, 0),
        ] {
            assert_eq!(
                pods_that_fit(existing, planned, limit),
                fit,
                "{existing}+{planned}/{limit}"
            );
        }
    }
}
