//! The `MirrorTopic` controller: destination topic, partition lifecycle, fetcher pods, status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kmirror_crds::duration::parse_duration;
use kmirror_crds::v1alpha1::{
    ClusterMirror, MirrorTopic, MirrorTopicStatus, PartitionState, PartitionStatus,
};
use kmirror_state::records::{
    PartitionRecords, PartitionStateRecord, RecordKind, StateKey, now_ms,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;

use crate::clusters::Cluster;
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};
use crate::kafka;
use crate::lifecycle::{Decision, FetcherObservation, Observed, SourceObservation, decide};
use crate::metrics::{PartitionLabels, StateLabels};
use crate::pods::{
    ANNOTATION_PARTITIONS, ANNOTATION_SPEC_HASH, FetcherPod, LABEL_MIRROR_TOPIC, group_of, groups,
    pod_name,
};
use crate::state_cache::StateCache;
use crate::status::{phase, set_condition, settled_state};
use crate::{failover, topic_configs};

/// Finalizer that stops fetchers and cleans the state topic before a `MirrorTopic` goes away.
pub const FINALIZER: &str = "kmirror.io/mirror-topic";
/// Annotation whose change asks to retry partitions that failed for a non-retryable reason.
pub const ANNOTATION_RETRY: &str = "kmirror.io/retry";

/// `namespace/name` of the mirror a topic belongs to: the key of its state records.
pub fn mirror_key(mt: &MirrorTopic) -> String {
    format!("{}/{}", mt.namespace().unwrap_or_default(), mt.spec.mirror)
}

/// Reconciles one `MirrorTopic` (entry point for the controller).
pub async fn reconcile(mt: Arc<MirrorTopic>, ctx: Arc<Context>) -> Result<Action> {
    crate::reconcile::with_finalizer(
        &ctx,
        "mirrortopic",
        FINALIZER,
        mt,
        |o| apply(o, ctx.clone()),
        |o| cleanup(o, ctx.clone()),
    )
    .await
}

/// What a reconcile knows about one fetcher pod.
struct PodView {
    partitions: Vec<i32>,
    hash: String,
    terminating: bool,
    ready: bool,
    exited: Option<(Option<i32>, Option<String>)>,
}

fn view(pod: &Pod) -> PodView {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let partitions = annotations
        .get(ANNOTATION_PARTITIONS)
        .map(|s| s.split(',').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let container = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .next();
    let terminated = container
        .as_ref()
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone());
    let phase_done = matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed"));
    let exited = match terminated {
        Some(t) => Some((Some(t.exit_code), t.message.clone())),
        None if phase_done => Some((None, status.message.clone())),
        None => None,
    };
    PodView {
        partitions,
        hash: annotations
            .get(ANNOTATION_SPEC_HASH)
            .cloned()
            .unwrap_or_default(),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        ready: container.map(|c| c.ready).unwrap_or(false),
        exited,
    }
}

fn observe(pods: &BTreeMap<i32, PodView>, partition: i32, per_pod: i32) -> FetcherObservation {
    match pods.get(&group_of(partition, per_pod)) {
        Some(p) if p.partitions.contains(&partition) => {
            if p.terminating {
                FetcherObservation::Terminating
            } else if let Some((code, message)) = &p.exited {
                FetcherObservation::Exited {
                    code: *code,
                    message: message.clone(),
                }
            } else {
                FetcherObservation::Running { ready: p.ready }
            }
        }
        Some(p) if p.terminating => FetcherObservation::Terminating,
        _ => FetcherObservation::Absent,
    }
}

fn jitter(partition: i32, attempt: i32) -> f64 {
    (crate::pods::fnv1a(format!("{partition}/{attempt}").as_bytes()) % 1000) as f64 / 1000.0
}

fn rfc3339(ms: i64) -> Option<String> {
    Timestamp::from_millisecond(ms).ok().map(|t| t.to_string())
}

/// Status and condition inputs gathered during a reconcile.
struct Outcome {
    partitions: Vec<PartitionStatus>,
    notes: Vec<String>,
    problem: Option<(String, String)>,
    requeue: Duration,
}

async fn apply(mt: Arc<MirrorTopic>, ctx: Arc<Context>) -> Result<Action> {
    let ns = mt.namespace().unwrap_or_default();
    let problems = kmirror_crds::validate::mirror_topic(&mt.spec);
    if !problems.is_empty() {
        let message = kmirror_crds::validate::describe(&problems);
        ctx.event(
            mt.as_ref(),
            true,
            "InvalidSpec",
            "Validate",
            message.clone(),
        )
        .await;
        write_status(&ctx, &mt, invalid_outcome("InvalidSpec", &message)).await?;
        return Ok(Action::await_change());
    }
    let mirrors: Api<ClusterMirror> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cm) = mirrors.get_opt(&mt.spec.mirror).await? else {
        let message = format!(
            "ClusterMirror {:?} does not exist in namespace {ns}",
            mt.spec.mirror
        );
        write_status(&ctx, &mt, invalid_outcome("MirrorNotFound", &message)).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let cm_problems = kmirror_crds::validate::cluster_mirror(&cm.spec);
    if !cm_problems.is_empty() {
        let message = format!(
            "ClusterMirror {} is invalid: {}",
            cm.name_any(),
            kmirror_crds::validate::describe(&cm_problems)
        );
        write_status(&ctx, &mt, invalid_outcome("InvalidMirror", &message)).await?;
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    let clusters = async {
        let (source, source_version) = ctx
            .clusters
            .get(&ctx.client, &ns, &cm.spec.source, "source")
            .await?;
        let (destination, dest_version) = ctx
            .clusters
            .get(&ctx.client, &ns, &cm.spec.destination, "destination")
            .await?;
        Ok::<_, Error>((
            source,
            destination,
            format!("{source_version}/{dest_version}"),
        ))
    }
    .await;
    let (source, destination, secrets_version) = match clusters {
        Ok(c) => c,
        Err(e @ Error::MissingSecret(_)) => {
            let message = e.to_string();
            ctx.event(
                mt.as_ref(),
                true,
                "SecretMissing",
                "Connect",
                message.clone(),
            )
            .await;
            write_status(&ctx, &mt, invalid_outcome("SecretMissing", &message)).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
        Err(e) => return Err(e),
    };
    let cache = ctx
        .states
        .get(destination.key, &destination.config, &cm.spec.state_topic)
        .await;
    let cache = match cache {
        Ok(c) => c,
        Err(e) => {
            let message = format!("destination unavailable: {e}");
            write_status(
                &ctx,
                &mt,
                invalid_outcome("DestinationUnreachable", &message),
            )
            .await?;
            return Ok(Action::requeue(Duration::from_secs(15)));
        }
    };
    if !cache.wait_loaded(Duration::from_secs(20)).await {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let outcome = run_lifecycle(
        &ctx,
        &mt,
        &cm,
        &source,
        &destination,
        &cache,
        &secrets_version,
    )
    .await?;
    let requeue = outcome.requeue;
    let wait = write_status(&ctx, &mt, outcome).await?;
    Ok(Action::requeue(requeue.max(wait)))
}

fn invalid_outcome(reason: &str, message: &str) -> Outcome {
    Outcome {
        partitions: Vec::new(),
        notes: Vec::new(),
        problem: Some((reason.to_string(), message.to_string())),
        requeue: Duration::from_secs(30),
    }
}

/// Makes sure the destination topic exists with at least the source's partitions, created with
/// the source's (non-excluded) configs.
async fn ensure_destination_topic(
    mt: &MirrorTopic,
    cm: &ClusterMirror,
    source: &Arc<Cluster>,
    destination: &Arc<Cluster>,
    partitions: usize,
) -> Result<()> {
    let topic = mt.destination_topic();
    match kafka::describe_topic(destination, topic).await? {
        None => {
            let configs = if cm.spec.sync.topic_configs.enabled {
                let source_configs = kafka::topic_configs(source, &mt.spec.source_topic).await?;
                topic_configs::wanted(&source_configs, &cm.spec.sync.topic_configs.exclude)
            } else {
                BTreeMap::new()
            };
            kafka::create_topic(destination, topic, partitions as i32, &configs).await?;
            tracing::info!(topic, partitions, "created the destination topic");
        }
        Some(d) if d.partitions < partitions => {
            kafka::add_partitions(destination, topic, partitions).await?;
            tracing::info!(
                topic,
                from = d.partitions,
                to = partitions,
                "grew the destination topic"
            );
        }
        Some(_) => {}
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn run_lifecycle(
    ctx: &Arc<Context>,
    mt: &Arc<MirrorTopic>,
    cm: &ClusterMirror,
    source: &Arc<Cluster>,
    destination: &Arc<Cluster>,
    cache: &Arc<StateCache>,
    secrets_version: &str,
) -> Result<Outcome> {
    let ns = mt.namespace().unwrap_or_default();
    let name = mt.name_any();
    let mirror = mirror_key(mt);
    let topic = mt.spec.source_topic.clone();
    let records = cache.topic(&mirror, &topic);
    let recorded_topic_id = records
        .values()
        .find_map(|r| r.position.as_ref().and_then(|p| p.source_topic_id.clone()));

    // The source topic.
    let described = kafka::describe_topic_within(source, &topic, Duration::from_secs(5)).await;
    let (source_state, source_partitions) = match &described {
        Ok(Some(d)) => {
            let recreated =
                matches!((&recorded_topic_id, &d.topic_id), (Some(a), Some(b)) if a != b);
            let state = if recreated {
                SourceObservation::Recreated
            } else {
                SourceObservation::Present { end: None }
            };
            (state, Some(d.partitions))
        }
        Ok(None) => (SourceObservation::Deleted, None),
        Err(e) => {
            tracing::warn!(%name, error = %e, "source unreachable");
            (SourceObservation::Unreachable, None)
        }
    };
    if let Some(n) = source_partitions
        && source_state != SourceObservation::Recreated
    {
        ensure_destination_topic(mt, cm, source, destination, n).await?;
    }
    // Partitions: the source's, plus any the state topic knows (a deleted source leaves them).
    let mut partitions: BTreeSet<i32> = records.keys().copied().collect();
    if let Some(n) = source_partitions {
        partitions.extend(0..n as i32);
    }

    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_list = pods_api
        .list(&ListParams::default().labels(&format!(
            "{LABEL_MIRROR_TOPIC}={}",
            crate::pods::label_value(&name)
        )))
        .await?;
    let per_pod = cm.spec.fetcher.partitions_per_pod.max(1);
    let mut pods: BTreeMap<i32, PodView> = BTreeMap::new();
    let mut pod_names: BTreeMap<i32, String> = BTreeMap::new();
    for pod in &pod_list.items {
        let index = pod
            .labels()
            .get(crate::pods::LABEL_INDEX)
            .and_then(|i| i.parse().ok())
            .unwrap_or(-1);
        pods.insert(index, view(pod));
        pod_names.insert(index, pod.name_any());
    }

    let retry_token = mt.annotations().get(ANNOTATION_RETRY).cloned();
    let drain_timeout =
        parse_duration(&mt.spec.failover.drain_timeout).unwrap_or(Duration::from_secs(300));
    let now = now_ms();
    // Failback: PREPARING partitions of a reverse mirror check the forward mirror's last
    // mirrored offsets and the destination for divergence first (a whole topic waits together).
    let (blocked, refused) = prepare_failback(
        ctx,
        mt,
        cm,
        source,
        destination,
        cache,
        &records,
        &partitions,
    )
    .await?;
    let records = cache.topic(&mirror, &topic);

    let mut decisions: BTreeMap<i32, Decision> = BTreeMap::new();
    for &p in &partitions {
        let r = records.get(&p).cloned().unwrap_or_default();
        let mut source_obs = source_state;
        if let (Some(s), SourceObservation::Present { .. }) = (r.state.as_ref(), source_state)
            && s.state == PartitionState::Stopping
        {
            // A graceful failover drains up to the source end seen when STOPPING began.
            source_obs = match s.drain_target {
                Some(end) => SourceObservation::Present { end: Some(end) },
                None => match kafka::watermarks(source, &topic, p).await {
                    Ok((_, end)) => SourceObservation::Present { end: Some(end) },
                    Err(_) => SourceObservation::Unreachable,
                },
            };
        }
        let observed = Observed {
            recorded: r.state.as_ref(),
            desired: mt.spec.state,
            mode: mt.spec.failover.mode,
            drain_timeout,
            fetcher: observe(&pods, p, per_pod),
            position: r.position.as_ref(),
            source: source_obs,
            now_ms: now,
            retry_requested: retry_token.is_some()
                && r.state
                    .as_ref()
                    .is_some_and(|s| s.retry_attempt < 0 && s.retry_token != retry_token),
            jitter: jitter(p, r.state.as_ref().map_or(0, |s| s.retry_attempt)),
        };
        let mut decision = decide(&observed);
        let preparing = r
            .state
            .as_ref()
            .is_some_and(|s| s.state == PartitionState::Preparing);
        if preparing && mt.spec.state != kmirror_crds::v1alpha1::DesiredState::Stopped {
            if let Some(reason) = refused.get(&p) {
                decision.transition = Some(crate::lifecycle::Transition {
                    to: PartitionState::Failed,
                    error: Some(reason.clone()),
                    retry_attempt: -1,
                });
            } else if let Some(note) = blocked.get(&p) {
                decision.transition = None;
                decision.note = Some(note.clone());
                decision.requeue_after = Some(Duration::from_secs(3));
            }
        }
        decisions.insert(p, decision);
    }

    // Persist every transition before acting on it.
    let mut writes = Vec::new();
    for (p, d) in &decisions {
        if let Some(t) = &d.transition {
            let previous = records
                .get(p)
                .and_then(|r| r.state.clone())
                .unwrap_or_default();
            writes.push((
                *p,
                PartitionStateRecord {
                    state: t.to,
                    state_epoch: previous.state_epoch + 1,
                    retry_attempt: t.retry_attempt,
                    error: t.error.clone(),
                    last_mirrored_offset: previous.last_mirrored_offset,
                    drain_target: if t.to == PartitionState::Stopping
                        && previous.state != PartitionState::Stopping
                    {
                        match kafka::watermarks(source, &topic, *p).await {
                            Ok((_, end)) => Some(end),
                            Err(_) => None,
                        }
                    } else if t.to == PartitionState::Stopping {
                        previous.drain_target
                    } else {
                        None
                    },
                    divergence: previous.divergence.clone(),
                    last_mirrored_destination_offset: previous.last_mirrored_destination_offset,
                    destination_topic: Some(mt.destination_topic().to_string()),
                    source_cluster_id: previous.source_cluster_id.clone(),
                    retry_token: if previous.state == PartitionState::Failed
                        && t.to == PartitionState::Preparing
                    {
                        retry_token.clone().or(previous.retry_token.clone())
                    } else {
                        previous.retry_token.clone()
                    },
                    updated_at_ms: now,
                },
            ));
        }
    }
    if !writes.is_empty() {
        cache.write_states(&mirror, &topic, writes.clone()).await?;
        report_transitions(ctx, mt, &records, &writes).await;
    }

    // STOPPING partitions whose fetcher is gone: persist the last mirrored offset, final sync,
    // WRITE ACLs, STOPPED.
    let finishing: Vec<i32> = decisions
        .iter()
        .filter(|(_, d)| d.finish_stop)
        .map(|(p, _)| *p)
        .collect();
    if !finishing.is_empty() {
        let records = cache.topic(&mirror, &topic);
        failover::finish(
            ctx,
            cm,
            mt,
            destination,
            source,
            cache,
            &records,
            &finishing,
            source_state != SourceObservation::Unreachable,
        )
        .await?;
    }

    // Fetcher pods.
    let wanted: Vec<i32> = decisions
        .iter()
        .filter(|(_, d)| d.run_fetcher)
        .map(|(p, _)| *p)
        .collect();
    let wanted_groups = groups(&wanted, per_pod);
    let remove: BTreeSet<i32> = decisions
        .iter()
        .filter(|(_, d)| d.remove_exited_pod)
        .map(|(p, _)| group_of(*p, per_pod))
        .collect();
    for (index, pod) in &pods {
        if pod.terminating {
            continue;
        }
        let desired = wanted_groups.get(index);
        let stale = match desired {
            None => true,
            Some(parts) => {
                let fp = FetcherPod {
                    topic: mt,
                    mirror: cm,
                    index: *index,
                    partitions: parts,
                    default_image: &ctx.settings.fetcher_image,
                    secrets_version,
                };
                remove.contains(index) || pod.exited.is_some() || pod.hash != fp.spec_hash()
            }
        };
        if stale {
            let pod_name = &pod_names[index];
            tracing::info!(%name, pod = %pod_name, "deleting fetcher pod");
            match pods_api.delete(pod_name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    for (index, parts) in &wanted_groups {
        if pods.contains_key(index) {
            continue; // replaced only once the old pod object is gone
        }
        let fp = FetcherPod {
            topic: mt,
            mirror: cm,
            index: *index,
            partitions: parts,
            default_image: &ctx.settings.fetcher_image,
            secrets_version,
        };
        let pod = fp.build();
        let pod_name = pod.name_any();
        pods_api
            .patch(
                &pod_name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&pod),
            )
            .await?;
        tracing::info!(%name, pod = %pod_name, partitions = ?parts, "created fetcher pod");
    }

    // Status.
    let records = cache.topic(&mirror, &topic);
    let mut statuses = Vec::new();
    let mut notes = Vec::new();
    let mut requeue = Duration::from_secs(30);
    for &p in &partitions {
        let d = &decisions[&p];
        let r = records.get(&p).cloned().unwrap_or_default();
        let fetcher_pod = d.run_fetcher.then(|| pod_name(&name, group_of(p, per_pod)));
        statuses.push(partition_status(p, &r, fetcher_pod));
        if let Some(n) = &d.note {
            notes.push(format!("partition {p}: {n}"));
        }
        if let Some(after) = d.requeue_after {
            requeue = requeue.min(after);
        }
        if d.transition.is_some() || d.finish_stop {
            requeue = Duration::ZERO;
        }
        let state = statuses.last().map(|s| s.state).unwrap_or_default();
        if state != settled_state(mt.spec.state) || state == PartitionState::Mirroring {
            requeue = requeue.min(Duration::from_secs(5));
        }
    }
    let problem = match source_state {
        SourceObservation::Unreachable => Some((
            "SourceUnreachable".to_string(),
            described.err().map(|e| e.to_string()).unwrap_or_default(),
        )),
        SourceObservation::Deleted if partitions.is_empty() => Some((
            "SourceTopicNotFound".to_string(),
            format!("source topic {topic} does not exist"),
        )),
        _ => None,
    };
    record_metrics(ctx, &mirror, &topic, &statuses);
    Ok(Outcome {
        partitions: statuses,
        notes,
        problem,
        requeue,
    })
}

/// Runs failback preparation for the PREPARING partitions of a reverse mirror. Returns the
/// partitions that must wait (with why) and those refused for good.
#[allow(clippy::too_many_arguments)]
async fn prepare_failback(
    ctx: &Arc<Context>,
    mt: &MirrorTopic,
    cm: &ClusterMirror,
    source: &Arc<Cluster>,
    destination: &Arc<Cluster>,
    cache: &Arc<StateCache>,
    records: &BTreeMap<i32, PartitionRecords>,
    partitions: &BTreeSet<i32>,
) -> Result<(BTreeMap<i32, String>, BTreeMap<i32, String>)> {
    let mut blocked = BTreeMap::new();
    let mut refused = BTreeMap::new();
    if cm.spec.reverse_of.is_none()
        || mt.spec.state == kmirror_crds::v1alpha1::DesiredState::Stopped
    {
        return Ok((blocked, refused));
    }
    let mirror = mirror_key(mt);
    let topic = mt.spec.source_topic.clone();
    let mut updates = Vec::new();
    let preparing: Vec<i32> = partitions
        .iter()
        .copied()
        .filter(|p| {
            records
                .get(p)
                .and_then(|r| r.state.as_ref())
                .is_some_and(|s| s.state == PartitionState::Preparing)
        })
        .collect();
    for &p in &preparing {
        let r = records.get(&p).cloned().unwrap_or_default();
        match crate::failback::prepare(ctx, cm, mt, source, destination, cache, p, &r).await? {
            crate::failback::Prepared::Ready => {}
            crate::failback::Prepared::Refused(reason) => {
                refused.insert(p, reason);
            }
            crate::failback::Prepared::Blocked { note, divergence } => {
                blocked.insert(p, note);
                if let Some(d) = divergence
                    && r.state.as_ref().and_then(|s| s.divergence.as_ref()) != Some(&d)
                {
                    let mut state = r.state.clone().unwrap_or_default();
                    state.divergence = Some(d);
                    updates.push((p, state));
                }
            }
        }
    }
    if !updates.is_empty() {
        cache.write_states(&mirror, &topic, updates).await?;
    }
    // Divergence is decided per topic: while any partition has unresolved divergent records, every
    // preparing partition waits, so that a Recreate never deletes a topic under a running fetcher.
    let records = cache.topic(&mirror, &topic);
    let divergences: Vec<(i32, kmirror_state::records::Divergence)> = records
        .iter()
        .filter_map(|(p, r)| {
            r.state
                .as_ref()
                .and_then(|s| s.divergence.clone())
                .map(|d| (*p, d))
        })
        .collect();
    let unresolved: Vec<&(i32, kmirror_state::records::Divergence)> = divergences
        .iter()
        .filter(|(_, d)| d.resolution.is_none())
        .collect();
    if unresolved.is_empty() {
        return Ok((blocked, refused));
    }
    let summary = unresolved
        .iter()
        .map(|(p, d)| {
            format!(
                "partition {p}: offsets {}..{} ({} records) in {}",
                d.from_offset, d.to_offset, d.records, d.quarantine_topic
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let all_quarantined = unresolved.iter().all(|(_, d)| d.quarantined >= d.records);
    if all_quarantined
        && mt.spec.divergence_policy == Some(kmirror_crds::v1alpha1::DivergencePolicy::Recreate)
    {
        let count = kafka::describe_topic(source, &topic)
            .await?
            .map_or(partitions.len(), |d| d.partitions);
        crate::failback::recreate_destination(cm, mt, source, destination, count).await?;
        let mut tombstones = Vec::new();
        let mut resolved = Vec::new();
        for (p, r) in &records {
            if r.position.is_some() {
                tombstones.push(StateKey::new(RecordKind::Position, &mirror, &topic, *p));
            }
            tombstones.extend(
                r.chunks
                    .keys()
                    .map(|c| StateKey::map_chunk(&mirror, &topic, *p, *c)),
            );
            let mut state = r.state.clone().unwrap_or_default();
            let mut d = state.divergence.clone().unwrap_or_default();
            d.resolution = Some("recreated".into());
            state.divergence = Some(d);
            resolved.push((*p, state));
        }
        cache.delete(tombstones).await?;
        cache.write_states(&mirror, &topic, resolved).await?;
        ctx.event(
            mt,
            false,
            "DivergenceResolved",
            "Failback",
            format!(
                "destination topic recreated; divergent records stay in quarantine ({summary})"
            ),
        )
        .await;
        return Ok((blocked, refused));
    }
    let note = format!(
        "waiting for spec.divergencePolicy: divergent records on the destination: {summary}"
    );
    let first_report = unresolved.iter().any(|(p, _)| blocked.contains_key(p));
    if first_report {
        ctx.event(mt, true, "Divergence", "Failback", note.clone())
            .await;
    }
    for &p in &preparing {
        blocked.insert(p, note.clone());
    }
    Ok((blocked, refused))
}

/// Projects one partition's status from its records.
fn partition_status(p: i32, r: &PartitionRecords, fetcher_pod: Option<String>) -> PartitionStatus {
    let state = r.state.as_ref();
    let position = r.position.as_ref();
    let lag = position.and_then(|pos| {
        pos.source_high_watermark
            .map(|hw| (hw - pos.source_position.unwrap_or(pos.next_source_offset)).max(0))
    });
    let last_mirrored = match state.map(|s| s.state) {
        Some(PartitionState::Stopped) => state.and_then(|s| s.last_mirrored_offset),
        _ => None,
    }
    .or(position.map(|pos| pos.last_mirrored_offset));
    let error = state
        .and_then(|s| s.error.clone())
        .filter(|_| {
            state.is_some_and(|s| {
                matches!(
                    s.state,
                    PartitionState::Failed | PartitionState::Stopping | PartitionState::Stopped
                )
            })
        })
        .or_else(|| position.and_then(|pos| pos.error.as_ref().map(|e| e.message.clone())));
    PartitionStatus {
        partition: p,
        state: state.map_or(PartitionState::Unknown, |s| s.state),
        state_epoch: state.map_or(0, |s| s.state_epoch),
        source_log_end_offset: position.and_then(|pos| pos.source_high_watermark),
        destination_log_end_offset: position.map(|pos| pos.destination_offset),
        last_mirrored_offset: last_mirrored,
        lag,
        lag_seconds: position.and_then(|pos| pos.lag_seconds),
        offsets_identical: position.map(|pos| pos.offsets_identical),
        fetcher_pod,
        retry_attempt: state.map(|s| s.retry_attempt).filter(|a| *a != 0),
        last_error: error,
        last_transition_time: state.and_then(|s| rfc3339(s.updated_at_ms)),
        divergence: state
            .and_then(|s| s.divergence.as_ref())
            .filter(|d| d.records > 0)
            .map(|d| kmirror_crds::v1alpha1::DivergenceStatus {
                from_offset: d.from_offset,
                to_offset: d.to_offset,
                quarantine_topic: d.quarantine_topic.clone(),
                quarantined_records: d.quarantined,
                resolution: d.resolution.clone(),
            }),
    }
}

fn record_metrics(ctx: &Context, mirror: &str, topic: &str, statuses: &[PartitionStatus]) {
    for s in PartitionState::ALL {
        let n = statuses.iter().filter(|p| p.state == s).count() as i64;
        ctx.metrics
            .partitions
            .get_or_create(&StateLabels {
                mirror: mirror.into(),
                topic: topic.into(),
                state: s.as_str().into(),
            })
            .set(n);
    }
    for p in statuses {
        let labels = PartitionLabels {
            mirror: mirror.into(),
            topic: topic.into(),
            partition: p.partition,
        };
        ctx.metrics
            .lag
            .get_or_create(&labels)
            .set(p.lag.unwrap_or(0));
        ctx.metrics
            .lag_seconds
            .get_or_create(&labels)
            .set(p.lag_seconds.unwrap_or(0.0));
    }
}

async fn report_transitions(
    ctx: &Arc<Context>,
    mt: &Arc<MirrorTopic>,
    before: &BTreeMap<i32, PartitionRecords>,
    writes: &[(i32, PartitionStateRecord)],
) {
    // One event per distinct (from, to, error) so a 200-partition topic does not flood events.
    let mut grouped: BTreeMap<(PartitionState, PartitionState, Option<String>), Vec<i32>> =
        BTreeMap::new();
    for (p, r) in writes {
        let from = before
            .get(p)
            .and_then(|x| x.state.as_ref())
            .map_or(PartitionState::Unknown, |s| s.state);
        grouped
            .entry((from, r.state, r.error.clone()))
            .or_default()
            .push(*p);
        ctx.metrics
            .transitions
            .get_or_create(&StateLabels {
                mirror: mirror_key(mt),
                topic: mt.spec.source_topic.clone(),
                state: r.state.as_str().into(),
            })
            .inc();
    }
    for ((from, to, error), parts) in grouped {
        let list = if parts.len() > 12 {
            format!("{} partitions", parts.len())
        } else {
            format!(
                "partitions {}",
                parts
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let mut note = format!("{list}: {from} -> {to}");
        if let Some(e) = &error {
            note.push_str(&format!(": {e}"));
        }
        tracing::info!(topic = %mt.name_any(), "{note}");
        let warning = to == PartitionState::Failed;
        ctx.event(
            mt.as_ref(),
            warning,
            &format!("Partition{}", phase_word(to)),
            "Transition",
            note,
        )
        .await;
    }
}

fn phase_word(s: PartitionState) -> String {
    let name = s.as_str();
    format!("{}{}", &name[..1], name[1..].to_lowercase())
}

/// Writes the status (rate-limited per object); returns how long to wait when it was deferred.
async fn write_status(
    ctx: &Arc<Context>,
    mt: &Arc<MirrorTopic>,
    outcome: Outcome,
) -> Result<Duration> {
    let generation = mt.metadata.generation;
    let old = mt.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let mut conditions = old.conditions.clone();
    let settled = settled_state(mt.spec.state);
    let all_settled =
        !outcome.partitions.is_empty() && outcome.partitions.iter().all(|p| p.state == settled);
    let failed: Vec<String> = outcome
        .partitions
        .iter()
        .filter(|p| p.state == PartitionState::Failed)
        .map(|p| {
            format!(
                "{}: {}",
                p.partition,
                p.last_error.clone().unwrap_or_default()
            )
        })
        .collect();
    match &outcome.problem {
        Some((reason, message)) => set_condition(
            &mut conditions,
            "Ready",
            false,
            reason,
            message.clone(),
            generation,
            &now,
        ),
        None if all_settled => set_condition(
            &mut conditions,
            "Ready",
            true,
            &phase_word(settled),
            format!("all {} partitions {}", outcome.partitions.len(), settled),
            generation,
            &now,
        ),
        None => {
            let message = if outcome.notes.is_empty() {
                format!("partitions moving to {settled}")
            } else {
                outcome.notes.join("; ")
            };
            set_condition(
                &mut conditions,
                "Ready",
                false,
                "Progressing",
                message,
                generation,
                &now,
            );
        }
    }
    if failed.is_empty() {
        set_condition(
            &mut conditions,
            "Failed",
            false,
            "NoFailures",
            "no partition failed",
            generation,
            &now,
        );
    } else {
        set_condition(
            &mut conditions,
            "Failed",
            true,
            "PartitionFailed",
            format!("partition {}", failed.join("; partition ")),
            generation,
            &now,
        );
    }
    let identical = (!outcome.partitions.is_empty()).then(|| {
        outcome
            .partitions
            .iter()
            .all(|p| p.offsets_identical.unwrap_or(true))
    });
    let mirroring = outcome
        .partitions
        .iter()
        .filter(|p| p.state == PartitionState::Mirroring)
        .count();
    let status = MirrorTopicStatus {
        observed_generation: generation,
        phase: Some(
            if outcome.problem.is_some() && outcome.partitions.is_empty() {
                "Pending".to_string()
            } else {
                phase(&outcome.partitions)
            },
        ),
        conditions,
        source_topic_id: None,
        destination_topic: Some(mt.destination_topic().to_string()),
        partitions_summary: Some(format!("{mirroring}/{}", outcome.partitions.len())),
        max_lag: outcome.partitions.iter().filter_map(|p| p.lag).max(),
        offsets_identical: identical,
        partitions: if outcome.partitions.is_empty() && outcome.problem.is_some() {
            old.partitions.clone()
        } else {
            outcome.partitions
        },
    };
    if status == old {
        return Ok(Duration::ZERO);
    }
    let key = format!(
        "MirrorTopic/{}/{}",
        mt.namespace().unwrap_or_default(),
        mt.name_any()
    );
    let wait = ctx.status_wait(&key);
    if !wait.is_zero() {
        return Ok(wait);
    }
    let api: Api<MirrorTopic> =
        Api::namespaced(ctx.client.clone(), &mt.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": "kmirror.io/v1alpha1",
        "kind": "MirrorTopic",
        "status": status,
    });
    api.patch_status(
        &mt.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    ctx.status_written(&key, "MirrorTopic");
    Ok(Duration::ZERO)
}

/// Deleting a `MirrorTopic`: stop its fetchers (wait until their pods are gone), keep the
/// destination data, tombstone its state — except the failover record of STOPPED partitions,
/// which a failback needs.
async fn cleanup(mt: Arc<MirrorTopic>, ctx: Arc<Context>) -> Result<Action> {
    let ns = mt.namespace().unwrap_or_default();
    let name = mt.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = pods_api
        .list(&ListParams::default().labels(&format!(
            "{LABEL_MIRROR_TOPIC}={}",
            crate::pods::label_value(&name)
        )))
        .await?;
    if !pods.items.is_empty() {
        for pod in pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let _ = pods_api
                .delete(&pod.name_any(), &DeleteParams::default())
                .await;
        }
        return Err(Error::Finalizer(format!(
            "waiting for {} fetcher pod(s) of {name} to stop",
            pods.items.len()
        )));
    }
    let mirrors: Api<ClusterMirror> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cm) = mirrors.get_opt(&mt.spec.mirror).await? else {
        tracing::warn!(%name, "the ClusterMirror is gone; leaving its state topic records as they are");
        return Ok(Action::await_change());
    };
    match ctx
        .clusters
        .get(&ctx.client, &ns, &cm.spec.destination, "destination")
        .await
    {
        Ok((destination, _)) => {
            let cache = ctx
                .states
                .get(destination.key, &destination.config, &cm.spec.state_topic)
                .await?;
            cache.wait_loaded(Duration::from_secs(20)).await;
            let mirror = mirror_key(&mt);
            let topic = mt.spec.source_topic.clone();
            let mut keys = Vec::new();
            for (p, r) in cache.topic(&mirror, &topic) {
                let stopped = r
                    .state
                    .as_ref()
                    .is_some_and(|s| s.state == PartitionState::Stopped);
                if r.state.is_some() && !stopped {
                    keys.push(StateKey::new(RecordKind::State, &mirror, &topic, p));
                }
                if r.position.is_some() && !stopped {
                    keys.push(StateKey::new(RecordKind::Position, &mirror, &topic, p));
                }
                if !stopped {
                    keys.extend(
                        r.chunks
                            .keys()
                            .map(|c| StateKey::map_chunk(&mirror, &topic, p, *c)),
                    );
                }
            }
            cache.delete(keys).await?;
        }
        Err(e) => tracing::warn!(%name, error = %e, "destination unavailable; state records stay"),
    }
    ctx.event(
        mt.as_ref(),
        false,
        "Deleted",
        "Cleanup",
        format!("fetchers of {name} stopped; destination data kept"),
    )
    .await;
    Ok(Action::await_change())
}

/// The `ClusterMirror` a `MirrorTopic` belongs to, as an object reference for watches.
pub fn mirror_of(mt: &MirrorTopic) -> Option<kube::runtime::reflector::ObjectRef<ClusterMirror>> {
    Some(kube::runtime::reflector::ObjectRef::new(&mt.spec.mirror).within(&mt.namespace()?))
}
