//! Plan: from one [`Observation`] and the spec, everything a reconcile of a `MirrorTopic` will
//! do — the destination topic change, the failback steps, the lifecycle transitions (full
//! records, epochs included), the failovers to finish, the pods to delete and create, the events,
//! the status and when to look again. Pure: no I/O, no clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kmirror_crds::duration::parse_duration;
use kmirror_crds::v1alpha1::{
    ClusterMirror, DesiredState, MirrorTopic, MirrorTopicStatus, PartitionState,
};
use kmirror_state::leases::LeaseUnit;
use kmirror_state::records::{PartitionRecords, PartitionStateRecord};
use kube::ResourceExt;

use super::events::transition_notes;
use super::observe::{DestinationTopic, Observation, SourceTopic};
use super::pod_view::fetcher_of;
use super::status::{Report, topic_status};
use crate::context::Note;
use crate::error::KafkaError;
use crate::failback::plan::{self as failback_plan, SourceIds};
use crate::failover::{Finish, lmo_record, lmo_recorded};
use crate::leases::ledger::Holder;
use crate::lifecycle::{
    Decision, FailbackGate, Observed, SourceObservation, decide, settled_state,
};
use crate::pods::{FetcherPod, fnv1a, group_of, groups, partitions_per_pod, pod_name};
use crate::pool::demand::TopicDemand;
use crate::pool::pod::pool_pod_name;

/// What a plan is made for besides the observation: the topic, its mirror and how pods are
/// built.
#[derive(Clone, Copy)]
pub struct Spec<'a> {
    /// The `MirrorTopic`.
    pub topic: &'a MirrorTopic,
    /// Its `ClusterMirror`.
    pub mirror: &'a ClusterMirror,
    /// Image of fetcher pods when the mirror sets none.
    pub fetcher_image: &'a str,
    /// Hash of the referenced Secrets' versions.
    pub secrets_version: &'a str,
    /// How soon a topic whose partitions mirror steadily is looked at again: its status shows
    /// progress this often (the status writer's progress interval, 1–30 s). Moving partitions
    /// are looked at every [`UNSETTLED_REQUEUE`]; changes of the objects, of the pods and of the
    /// mirror trigger a reconcile at once.
    pub steady_requeue: Duration,
    /// Hash of this operator's side of fetcher pods ([`crate::rollout`]): a pod made by another
    /// operator, outdated only for that, waits for the mirror's rollout.
    pub operator_template: &'a str,
    /// UIDs of the pods the mirror's rollout replaces now.
    pub rollout_admitted: &'a BTreeSet<String>,
}

/// How soon a topic with a partition between states is looked at again.
pub const UNSETTLED_REQUEUE: Duration = Duration::from_secs(5);

/// Steady reconciles per second of all topics together at most: with hundreds of topics the
/// steady look of each spaces out (lifecycle transitions, a fetcher's final position, pod and
/// spec changes still reconcile at once). 500 topics: each looked at every 100 s.
pub const STEADY_RECONCILES_PER_SECOND: f64 = 5.0;

/// The steady requeue for a progress interval and `topics` topics in all: that interval, within
/// 1–30 s, or longer so that all topics together look at most
/// [`STEADY_RECONCILES_PER_SECOND`] times a second.
pub fn steady_requeue(progress_interval: Duration, topics: usize) -> Duration {
    let spread = Duration::from_secs_f64(topics as f64 / STEADY_RECONCILES_PER_SECOND);
    progress_interval
        .clamp(Duration::from_secs(1), Duration::from_secs(30))
        .max(spread)
}

#[cfg(test)]
#[test]
fn steady_looks_follow_the_progress_interval_and_space_out_with_many_topics() {
    let s = Duration::from_secs;
    assert_eq!(steady_requeue(s(10), 8), s(10));
    assert_eq!(steady_requeue(s(0), 4), s(1));
    assert_eq!(steady_requeue(s(60), 8), s(30));
    assert_eq!(steady_requeue(s(10), 50), s(10));
    assert_eq!(steady_requeue(s(10), 100), s(20));
    assert_eq!(
        steady_requeue(s(10), 500),
        s(100),
        "500 topics: 5 looks a second"
    );
}

/// A change to the destination topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicChange {
    /// Create it with the source's partitions (and configs).
    Create {
        /// Partitions.
        partitions: usize,
    },
    /// Add partitions up to the source's count.
    Grow {
        /// Partitions now.
        from: usize,
        /// Partitions wanted.
        to: usize,
    },
}

/// Everything one reconcile does, in the order it is done.
#[derive(Debug, Clone)]
pub struct Plan {
    /// 1. Create or grow the destination topic.
    pub destination_topic: Option<TopicChange>,
    /// 2. Failback steps (a reverse mirror's PREPARING partitions), and their events.
    pub failback: failback_plan::Plan,
    /// 3. Lifecycle transitions to persist before anything acts on them.
    pub transitions: Vec<(i32, PartitionStateRecord)>,
    /// Events for the transitions.
    pub transition_events: Vec<Note>,
    /// 4. STOPPING partitions whose fetcher is gone: finish their failover.
    pub finish: Option<Finish>,
    /// 5. Fetcher pods to delete (by name), then to create.
    pub delete_pods: Vec<String>,
    /// Fetcher pods to create (only where no pod object of that name exists and no other
    /// holder's write lease on its partitions is still running).
    pub create_pods: Vec<Pod>,
    /// With a pool: what this topic asks of it (reported to the pool, which runs the pods).
    pub pool_demand: Option<TopicDemand>,
    /// What the mirror's rollout learns from this topic: its pods outdated only because
    /// another operator made them (not deleted here unless the rollout admitted them), its pods
    /// and its partitions.
    pub rollout: crate::rollout::Report,
    /// 7. Which existing pod may hold the write lease of each partition the plan runs a
    ///    fetcher for (pods created by this plan are added once they exist).
    pub lease_holders: BTreeMap<i32, Holder>,
    /// 6. The status.
    pub status: MirrorTopicStatus,
    /// What the status is made of.
    pub report: Report,
    /// Each partition's lifecycle decision.
    pub decisions: BTreeMap<i32, Decision>,
    /// The records as they are once the plan is carried out.
    pub records: BTreeMap<i32, PartitionRecords>,
    /// Look again after this long.
    pub requeue: Duration,
}

impl Plan {
    /// Takes in the STOPPED records a failover finish actually wrote (they may carry a note the
    /// plan could not know, e.g. a failed final group sync) and projects the status again.
    pub fn finished(
        &mut self,
        mt: &MirrorTopic,
        written: &[(i32, PartitionStateRecord)],
        now: &Time,
    ) {
        let mut changed = false;
        for (p, record) in written {
            let r = self.records.entry(*p).or_default();
            if r.state.as_ref() == Some(record) {
                continue;
            }
            r.state = Some(record.clone());
            changed = true;
            if let Some(pod) = self
                .report
                .partitions
                .iter()
                .find(|s| s.partition == *p)
                .map(|s| s.fetcher_pod.clone())
            {
                self.report.set(*p, r, pod, now.0.as_millisecond());
            }
        }
        if changed {
            self.status = topic_status(mt, self.report.clone(), now);
        }
    }

    /// The planned record of a partition.
    pub fn state_of(&self, partition: i32) -> PartitionState {
        self.records
            .get(&partition)
            .and_then(|r| r.state.as_ref())
            .map_or(PartitionState::Unknown, |s| s.state)
    }
}

/// A jitter factor in [0, 1), stable per partition and attempt.
fn jitter(partition: i32, attempt: i32) -> f64 {
    (fnv1a(format!("{partition}/{attempt}").as_bytes()) % 1000) as f64 / 1000.0
}

/// Whether the destination topic was described with partition `p`.
fn destination_shows(o: &Observation, p: i32) -> bool {
    matches!(o.destination, DestinationTopic::Present(n) if (p.max(0) as usize) < n)
}

fn destination_change(o: &Observation, source: SourceObservation) -> Option<TopicChange> {
    let n = o.source_partitions()?;
    if source == SourceObservation::Recreated {
        return None;
    }
    match o.destination {
        DestinationTopic::Missing => Some(TopicChange::Create { partitions: n }),
        DestinationTopic::Present(d) if d < n => Some(TopicChange::Grow { from: d, to: n }),
        _ => None,
    }
}

fn failback(
    o: &Observation,
    spec: &Spec<'_>,
    partitions: &BTreeSet<i32>,
    records: &mut BTreeMap<i32, PartitionRecords>,
) -> failback_plan::Plan {
    let mt = spec.topic;
    let Some(forward) = spec.mirror.spec.reverse_of.as_deref() else {
        return Default::default();
    };
    if o.failback.facts.is_empty() {
        return Default::default();
    }
    let source = o
        .failback
        .source_cluster_id
        .as_ref()
        .and_then(|id| match &o.source {
            SourceTopic::Described { topic_id, .. } => Some(SourceIds {
                cluster_id: id.clone(),
                topic_id: topic_id.clone(),
            }),
            SourceTopic::Missing => Some(SourceIds {
                cluster_id: id.clone(),
                topic_id: None,
            }),
            SourceTopic::Unreachable(_) => None,
        });
    let mirror = mt.mirror_key();
    let input = failback_plan::Input {
        mirror: &mirror,
        forward,
        state_topic: &spec.mirror.spec.state_topic,
        topic: &mt.spec.source_topic,
        destination_topic: mt.destination_topic(),
        policy: mt.spec.divergence_policy,
        partition_count: o.source_partitions().unwrap_or(partitions.len()),
        source: source.as_ref(),
        facts: &o.failback.facts,
        now_ms: o.now_ms,
    };
    failback_plan::plan(&input, records)
}

/// The state record a transition persists.
fn transition_record(
    o: &Observation,
    spec: &Spec<'_>,
    partition: i32,
    previous: PartitionStateRecord,
    t: &crate::lifecycle::Transition,
) -> PartitionStateRecord {
    use PartitionState::*;
    let fresh_stop = t.to == Stopping && previous.state != Stopping;
    PartitionStateRecord {
        state: t.to,
        state_epoch: previous.state_epoch + 1,
        retry_attempt: t.retry_attempt,
        error: t.error.clone(),
        reason: t.reason,
        // A failover that begins now derives its own last mirrored offset (and runs its own
        // final sync) once its fetcher is gone.
        last_mirrored_offset: if fresh_stop {
            None
        } else {
            previous.last_mirrored_offset
        },
        final_sync_done: !fresh_stop && t.to == Stopping && previous.final_sync_done,
        // A graceful failover drains up to the source end seen when STOPPING began.
        drain_target: if t.to == Stopping && previous.state != Stopping {
            o.source_ends.get(&partition).copied().flatten()
        } else if t.to == Stopping {
            previous.drain_target
        } else {
            None
        },
        divergence: previous.divergence.clone(),
        last_mirrored_destination_offset: if fresh_stop {
            None
        } else {
            previous.last_mirrored_destination_offset
        },
        destination_topic: Some(spec.topic.destination_topic().to_string()),
        source_cluster_id: previous.source_cluster_id.clone(),
        retry_token: if previous.state == Failed && t.to == Preparing {
            o.retry_token.clone().or(previous.retry_token.clone())
        } else {
            previous.retry_token.clone()
        },
        updated_at_ms: o.now_ms,
    }
}

/// The plan of one reconcile.
pub fn plan(o: &Observation, spec: &Spec<'_>) -> Plan {
    let mt = spec.topic;
    let cm = spec.mirror;
    let name = mt.name_any();
    let per_pod = partitions_per_pod(cm);
    let source_state = o.source_observation();
    let mut records = o.records.clone();
    // Once failed over, the destination is the primary: partitions the source adds later are
    // neither created there nor planned.
    let failed_over = mt.spec.state == DesiredState::Stopped
        && !records.is_empty()
        && records.values().all(|r| {
            r.state
                .as_ref()
                .is_some_and(|s| s.state == PartitionState::Stopped)
        });
    let partitions = if failed_over {
        records.keys().copied().collect()
    } else {
        o.partitions()
    };

    let destination_topic = if failed_over {
        None
    } else {
        destination_change(o, source_state)
    };
    let failback = failback(o, spec, &partitions, &mut records);

    // Decisions.
    let drain_timeout =
        parse_duration(&mt.spec.failover.drain_timeout).unwrap_or(Duration::from_secs(300));
    let mut decisions: BTreeMap<i32, Decision> = BTreeMap::new();
    for &p in &partitions {
        let r = records.get(&p);
        let state = r.and_then(|r| r.state.as_ref());
        let mut source = source_state;
        if let (Some(s), SourceObservation::Present { .. }) = (state, source_state)
            && s.state == PartitionState::Stopping
        {
            source = match s.drain_target.or(o.source_ends.get(&p).copied().flatten()) {
                Some(end) => SourceObservation::Present { end: Some(end) },
                None => SourceObservation::Unreachable,
            };
        }
        let observed = Observed {
            recorded: state,
            desired: mt.spec.state,
            mode: mt.spec.failover.mode,
            drain_timeout,
            fetcher: fetcher_of(&o.pods, p, per_pod, r.and_then(|r| r.position.as_ref())),
            position: r.and_then(|r| r.position.as_ref()),
            source,
            now_ms: o.now_ms,
            retry_requested: o.retry_token.is_some()
                && state.is_some_and(|s| s.retry_attempt < 0 && s.retry_token != o.retry_token),
            jitter: jitter(p, state.map_or(0, |s| s.retry_attempt)),
            failback: match failback.gates.get(&p).cloned().unwrap_or_default() {
                // A fetcher started before the destination shows its partition fails at once
                // (a topic created moments ago is not in every answer yet).
                FailbackGate::Open if !destination_shows(o, p) => FailbackGate::Wait(
                    "the destination topic does not show this partition yet; copying starts \
                     once it does"
                        .into(),
                ),
                gate => gate,
            },
        };
        decisions.insert(p, decide(&observed));
    }

    // Transitions, persisted first.
    let mut transitions = Vec::new();
    for (p, d) in &decisions {
        if let Some(t) = &d.transition {
            let previous = records
                .get(p)
                .and_then(|r| r.state.clone())
                .unwrap_or_default();
            transitions.push((*p, transition_record(o, spec, *p, previous, t)));
        }
    }
    let transition_events = transition_notes(&records, &transitions);
    for (p, r) in &transitions {
        records.entry(*p).or_default().state = Some(r.clone());
    }

    // STOPPING partitions whose fetcher is gone: last mirrored offset, final sync, WRITE ACLs,
    // STOPPED — once no fetcher can still write to them (no partition is writable by
    // applications while a fetcher's write lease runs).
    let mut lease_notes = Vec::new();
    let mut lease_wait: Option<Duration> = None;
    let mut wait_for_lease = |p: i32, what: &str| {
        let hold = &o.leases[&p];
        lease_notes.push(format!(
            "partition {p}: {what} once the write lease of {} ends (at most {}s)",
            hold.holder,
            hold.remaining.as_secs() + 1
        ));
        let after = hold.remaining + Duration::from_millis(200);
        lease_wait = Some(lease_wait.map_or(after, |w| w.min(after)));
    };
    let finishing: Vec<i32> = decisions
        .iter()
        .filter(|(_, d)| d.finish_stop)
        .map(|(p, _)| *p)
        .filter(|p| {
            let held = o.leases.contains_key(p);
            if held {
                wait_for_lease(*p, "becomes writable");
            }
            !held
        })
        .collect();
    let finish = (!finishing.is_empty()).then(|| {
        let all_stopped = records.iter().all(|(p, r)| {
            finishing.contains(p)
                || r.state
                    .as_ref()
                    .is_some_and(|s| s.state == PartitionState::Stopped)
        });
        let mut record_lmo = false;
        let mut final_sync = Vec::new();
        let stopping: Vec<(i32, Result<PartitionStateRecord, KafkaError>)> = finishing
            .iter()
            .map(|p| {
                let r = records.get(p).cloned().unwrap_or_default();
                let recorded = r.state.clone().filter(lmo_recorded);
                let stopping = match (recorded, o.destination_ends.get(p)) {
                    // A retry: the offset recorded before anything else happened holds.
                    (Some(recorded), _) => Ok(recorded),
                    (None, Some(Ok(end))) => {
                        record_lmo = true;
                        Ok(lmo_record(&r, *end, mt.destination_topic(), o.now_ms))
                    }
                    (None, Some(Err(e))) => Err(e.clone()),
                    (None, None) => Err(KafkaError {
                        cluster: "destination",
                        message: format!(
                            "the log end of {}[{p}] was not read",
                            mt.destination_topic()
                        ),
                    }),
                };
                if let Ok(r) = &stopping
                    && !r.final_sync_done
                {
                    final_sync.push(*p);
                }
                (*p, stopping)
            })
            .collect();
        Finish {
            stopping,
            record_lmo,
            final_sync,
            make_writable: all_stopped && cm.spec.sync.acls.enabled,
            source_reachable: source_state != SourceObservation::Unreachable,
            now_ms: o.now_ms,
        }
    });
    if let Some(f) = &finish {
        for (p, r) in f.stopped() {
            records.entry(p).or_default().state = Some(r);
        }
    }

    // Fetcher pods: stale ones go first; a replacement only once the old pod object is gone.
    let fetcher_pod = |index: i32, parts: &[i32]| {
        FetcherPod {
            topic: mt,
            mirror: cm,
            index,
            partitions: parts,
            default_image: spec.fetcher_image,
            secrets_version: spec.secrets_version,
        }
        .build()
    };
    let fetcher_pod = |index: i32, parts: &[i32]| {
        let mut pod = fetcher_pod(index, parts);
        crate::rollout::stamp(&mut pod, spec.operator_template);
        pod
    };
    let mut rollout = super::rollout_view::report(o, &mt.spec.source_topic);
    let wanted: Vec<i32> = decisions
        .iter()
        .filter(|(_, d)| d.run_fetcher)
        .map(|(p, _)| *p)
        .collect();
    let (delete_pods, create_pods, lease_holders, pool_demand) = if o.pooled {
        let (delete, holders, demand) = pool_share(o, spec, &decisions);
        (delete, Vec::new(), holders, Some(demand))
    } else {
        let wanted_groups = groups(&wanted, per_pod);
        let remove: BTreeSet<i32> = decisions
            .iter()
            .filter(|(_, d)| d.remove_exited_pod)
            .map(|(p, _)| group_of(*p, per_pod))
            .collect();
        let mut delete_pods = Vec::new();
        for (index, pod) in &o.pods {
            if pod.terminating {
                continue;
            }
            let stale = match wanted_groups.get(index) {
                None => true,
                Some(parts) => {
                    let hash = FetcherPod {
                        topic: mt,
                        mirror: cm,
                        index: *index,
                        partitions: parts,
                        default_image: spec.fetcher_image,
                        secrets_version: spec.secrets_version,
                    }
                    .spec_hash();
                    let must =
                        remove.contains(index) || pod.exited.is_some() || pod.partitions != *parts;
                    let outdated = pod.hash != hash;
                    if !must && outdated && pod.operator != spec.operator_template {
                        // Outdated only because another operator made it: the rollout's.
                        rollout.candidates.push(crate::rollout::plan::Candidate {
                            name: pod.name.clone(),
                            uid: pod.uid.clone(),
                            units: parts
                                .iter()
                                .map(|p| LeaseUnit::new(&mt.spec.source_topic, *p))
                                .collect(),
                        });
                        spec.rollout_admitted.contains(&pod.uid)
                    } else {
                        must || outdated
                    }
                }
            };
            if stale {
                delete_pods.push(pod.name.clone());
            }
        }
        let create_pods: Vec<Pod> = wanted_groups
            .iter()
            .filter(|(index, _)| !o.pods.contains_key(index))
            .filter(|(_, parts)| {
                let held: Vec<i32> = parts
                    .iter()
                    .copied()
                    .filter(|p| o.leases.contains_key(p))
                    .collect();
                for p in &held {
                    wait_for_lease(*p, "a new fetcher starts");
                }
                held.is_empty()
            })
            .map(|(index, parts)| fetcher_pod(*index, parts))
            .collect();
        let lease_holders: BTreeMap<i32, Holder> = wanted_groups
            .iter()
            .filter_map(|(index, parts)| {
                let pod = o.pods.get(index)?;
                let keeps = !pod.terminating && !delete_pods.contains(&pod.name);
                keeps.then(|| {
                    parts.iter().map(|p| {
                        let holder = Holder {
                            name: pod.name.clone(),
                            uid: pod.uid.clone(),
                        };
                        (*p, holder)
                    })
                })
            })
            .flatten()
            .collect();
        (delete_pods, create_pods, lease_holders, None)
    };

    // Status and the next look.
    let settled = settled_state(mt.spec.state);
    // Pods that come or go are watched, but a replacement may have to wait for its
    // predecessor: moving pods are looked at as often as moving partitions. A pool pod is
    // placed by the pool (which waits for the demand to settle) and its coming and going
    // reconciles the topics it runs: a pooled topic waiting for it need not look every 5 s.
    let pods_settled = delete_pods.is_empty()
        && create_pods.is_empty()
        && o.pods.values().all(|p| !p.terminating)
        && pool_demand.as_ref().is_none_or(|d| d.restart.is_empty());
    let mut report = Report::default();
    // Settled topics look again every 30 s, less often when there are many (the steady cap).
    let mut requeue = spec.steady_requeue.max(Duration::from_secs(30));
    for &p in &partitions {
        let d = &decisions[&p];
        let r = records.get(&p).cloned().unwrap_or_default();
        let pod = d
            .run_fetcher
            .then(|| match (&cm.spec.fetcher.pool, o.pods.get(&p)) {
                (Some(_), Some(view)) => view.name.clone(),
                (Some(pool), None) => {
                    let unit = LeaseUnit::new(&mt.spec.source_topic, p);
                    let index = kmirror_state::pool::pod_of(&unit, pool.pods.max(1) as u32);
                    pool_pod_name(&cm.name_any(), index.unwrap_or(0))
                }
                (None, _) => pod_name(&name, group_of(p, per_pod)),
            });
        report.set(p, &r, pod, o.now_ms);
        let state = report
            .partitions
            .last()
            .map_or(PartitionState::Unknown, |s| s.state);
        if let Some(n) = &d.note {
            report.notes.push(format!("partition {p}: {n}"));
        }
        if let Some(after) = d.requeue_after {
            requeue = requeue.min(after);
        }
        if d.transition.is_some() || (d.finish_stop && finishing.contains(&p)) {
            requeue = Duration::ZERO;
        }
        if state != settled {
            requeue = requeue.min(UNSETTLED_REQUEUE);
        } else if state == PartitionState::Mirroring {
            requeue = requeue.min(if pods_settled {
                spec.steady_requeue
            } else {
                UNSETTLED_REQUEUE
            });
        }
    }
    report.notes.extend(lease_notes);
    if !rollout.candidates.is_empty() {
        report.notes.push(format!(
            "{} fetcher pod(s) made by another operator wait for the mirror's rollout (at most \
             --fetcher-max-unavailable at a time)",
            rollout.candidates.len()
        ));
    }
    if let Some(after) = lease_wait {
        requeue = requeue.min(after);
    }
    report.destination_replicas = o.destination_replicas;
    report.source_topic_id = match &o.source {
        SourceTopic::Described {
            topic_id: Some(id), ..
        } => Some(id.clone()),
        _ => o.recorded_topic_id().map(str::to_string),
    };
    report.problem = match &o.source {
        SourceTopic::Unreachable(e) => Some(("SourceUnreachable".to_string(), e.clone())),
        SourceTopic::Missing if partitions.is_empty() => Some((
            "SourceTopicNotFound".to_string(),
            format!("source topic {} does not exist", mt.spec.source_topic),
        )),
        _ => None,
    };
    let now = Time(Timestamp::from_millisecond(o.now_ms).unwrap_or_default());
    Plan {
        destination_topic,
        failback,
        transitions,
        transition_events,
        finish,
        delete_pods,
        create_pods,
        pool_demand,
        rollout,
        lease_holders,
        status: topic_status(mt, report.clone(), &now),
        report,
        decisions,
        records,
        requeue,
    }
}

/// With a pool: the topic's per-topic pods from before it go; the pool runs the partitions that
/// want a fetcher (the demand), and restarts the pod a partition's copy ended in when the
/// lifecycle removes that stop; each partition's lease holder is the pool pod that runs it.
fn pool_share(
    o: &Observation,
    spec: &Spec<'_>,
    decisions: &BTreeMap<i32, Decision>,
) -> (Vec<String>, BTreeMap<i32, Holder>, TopicDemand) {
    let mut demand = TopicDemand {
        source_topic: spec.topic.spec.source_topic.clone(),
        destination_topic: spec.topic.destination_topic().to_string(),
        ..Default::default()
    };
    let mut holders = BTreeMap::new();
    for (p, d) in decisions {
        let view = o.pods.get(p);
        if d.remove_exited_pod
            && let Some(v) = view.filter(|v| v.exited.is_some() && !v.terminating)
        {
            demand.restart.insert(*p, v.uid.clone());
        }
        // A partition going MIRRORING now wants its fetcher from the next look on: asked for
        // at once (its transition is persisted before the demand is reported), a new topic's
        // demand is whole on its first reconcile and the pool moves pods once.
        let starting = d
            .transition
            .as_ref()
            .is_some_and(|t| t.to == PartitionState::Mirroring);
        if !d.run_fetcher && !starting {
            continue;
        }
        demand.wanted.insert(*p);
        if let Some(v) = view.filter(|v| !v.terminating && v.exited.is_none()) {
            let holder = Holder {
                name: v.name.clone(),
                uid: v.uid.clone(),
            };
            holders.insert(*p, holder);
        }
    }
    (o.leftover_pods.clone(), holders, demand)
}
