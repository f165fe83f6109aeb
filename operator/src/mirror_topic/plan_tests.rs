//! Table tests of [`plan`]: one row per situation (recorded states × `spec.state` × pods × the
//! source), each checked for every transition, pod, failover finish and failback step it plans.

use std::collections::BTreeMap;
use std::time::Duration;

use kmirror_crds::v1alpha1::{
    ClusterMirror, DesiredState, DivergencePolicy, FailoverMode, MirrorTopic, PartitionState,
};
use kmirror_state::kafka_record::RecordData;
use kmirror_state::offset_map::OffsetMap;
use kmirror_state::records::{
    Divergence, FetcherError, FetcherStatus, PartitionRecords, PartitionStateRecord,
    PositionRecord, StopReason,
};
use kube::ResourceExt;

use super::observe::{DestinationTopic, Observation, SourceTopic};
use super::plan::{Plan, Spec, TopicChange, plan};
use super::pod_view::{PodView, fetcher_of};
use crate::failback::plan::Step;
use crate::failback::{Comparison, Facts};
use crate::lifecycle::{FailbackGate, needs_source_end};
use crate::pods::{ANNOTATION_PARTITIONS, FetcherPod};

use DesiredState::{Mirroring as WantMirroring, Paused as WantPaused, Stopped as WantStopped};
use FailoverMode::{Graceful, Immediate};
use PartitionState::*;

const NOW: i64 = 1_700_000_000_000;
const IMAGE: &str = "kmirror:test";
const SECRETS: &str = "s1/d1";
/// How soon a steadily mirroring topic is looked at again (the progress interval).
const STEADY: Duration = Duration::from_secs(10);
/// No pod admitted by a rollout (the plans' own tests make pods of this operator).
static NONE_ADMITTED: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();

// ------------------------------------------------------------------------------------------
// Building a situation.

/// One partition's records.
#[derive(Clone)]
struct Part(i32, PartitionRecords);

fn part(p: i32, state: PartitionState) -> Part {
    Part(
        p,
        PartitionRecords {
            state: Some(PartitionStateRecord {
                state,
                state_epoch: 3,
                updated_at_ms: NOW - 1_000,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

impl Part {
    fn st(&mut self) -> &mut PartitionStateRecord {
        self.1.state.as_mut().expect("a state record")
    }
    fn attempt(mut self, n: i32) -> Part {
        self.st().retry_attempt = n;
        self
    }
    fn error(mut self, e: &str) -> Part {
        self.st().error = Some(e.into());
        self
    }
    fn drain_target(mut self, end: i64) -> Part {
        self.st().drain_target = Some(end);
        self
    }
    /// The last mirrored offset a failover recorded on this (STOPPING) record.
    fn lmo(mut self, src: i64, dst: i64) -> Part {
        self.st().last_mirrored_offset = Some(src);
        self.st().last_mirrored_destination_offset = Some(dst);
        self
    }
    /// The failover's final group sync ran.
    fn final_synced(mut self) -> Part {
        self.st().final_sync_done = true;
        self
    }
    fn since(mut self, ms_ago: i64) -> Part {
        self.st().updated_at_ms = NOW - ms_ago;
        self
    }
    fn divergence(mut self, d: Divergence) -> Part {
        self.st().divergence = Some(d);
        self
    }
    /// The fetcher's position: next source offset `next`, source end `hw`.
    fn at(mut self, next: i64, hw: i64) -> Part {
        self.1.position = Some(PositionRecord {
            source_cluster_id: "src-1".into(),
            source_topic_id: Some("T1".into()),
            destination_topic: "orders".into(),
            last_mirrored_offset: next - 1,
            next_source_offset: next,
            source_position: Some(next),
            destination_offset: next,
            offsets_identical: true,
            source_high_watermark: Some(hw),
            updated_at_ms: NOW - 500,
            ..Default::default()
        });
        self
    }
    fn fetcher_failed(mut self, reason: StopReason, message: &str) -> Part {
        let pos = self.1.position.get_or_insert_with(Default::default);
        pos.status = FetcherStatus::Failed;
        pos.error = Some(FetcherError {
            reason,
            message: message.into(),
        });
        self
    }
}

/// How a fetcher pod looks.
#[derive(Clone)]
struct PodAs {
    index: i32,
    partitions: Vec<i32>,
    current: bool,
    terminating: bool,
    exited: Option<i32>,
}

fn pod(index: i32, partitions: &[i32]) -> PodAs {
    PodAs {
        index,
        partitions: partitions.to_vec(),
        current: true,
        terminating: false,
        exited: None,
    }
}

impl PodAs {
    fn stale(mut self) -> PodAs {
        self.current = false;
        self
    }
    fn terminating(mut self) -> PodAs {
        self.terminating = true;
        self
    }
    fn exited(mut self, code: i32) -> PodAs {
        self.exited = Some(code);
        self
    }
}

/// The source topic.
#[derive(Clone, Copy)]
enum Src {
    /// Exists with n partitions, the recorded topic ID.
    Present(usize),
    /// Exists with n partitions and another topic ID.
    Recreated(usize),
    /// Missing on this look only.
    Missing,
    /// Missing on two looks apart at the recorded cluster: deleted.
    Gone,
    Down,
}

/// A situation.
#[derive(Clone)]
struct Given {
    desired: DesiredState,
    mode: FailoverMode,
    per_pod: i32,
    reverse_of: Option<&'static str>,
    policy: Option<DivergencePolicy>,
    source: Src,
    destination: Option<DestinationTopic>,
    /// Replicas of the destination topic's partitions, as described.
    destination_replicas: Option<usize>,
    parts: Vec<Part>,
    pods: Vec<PodAs>,
    /// The source log end a read returns (`None`: the read fails).
    source_end: Option<i64>,
    /// The destination log end a read returns (`None`: the read fails).
    destination_end: Option<i64>,
    failback: Vec<(i32, Facts)>,
    retry_token: Option<&'static str>,
    /// Partitions another holder's write lease still covers: (partition, seconds left).
    leases: Vec<(i32, u64)>,
}

impl Default for Given {
    fn default() -> Given {
        Given {
            desired: WantMirroring,
            mode: Graceful,
            per_pod: 1,
            reverse_of: None,
            policy: None,
            source: Src::Present(1),
            destination: None,
            destination_replicas: None,
            parts: Vec::new(),
            pods: Vec::new(),
            source_end: Some(100),
            destination_end: Some(100),
            failback: Vec::new(),
            retry_token: None,
            leases: Vec::new(),
        }
    }
}

fn objects(g: &Given) -> (MirrorTopic, ClusterMirror) {
    let mut mt: MirrorTopic = serde_json::from_value(serde_json::json!({
        "apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
        "metadata": {"name": "orders", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"mirror": "dr", "sourceTopic": "orders", "state": format!("{:?}", g.desired),
                 "failover": {"mode": format!("{:?}", g.mode), "drainTimeout": "5m"}}
    }))
    .unwrap();
    mt.spec.divergence_policy = g.policy;
    if let Some(token) = g.retry_token {
        mt.annotations_mut()
            .insert(super::ANNOTATION_RETRY.into(), token.into());
    }
    let mut cm: ClusterMirror = serde_json::from_value(serde_json::json!({
        "apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
        "metadata": {"name": "dr", "namespace": "ns"},
        "spec": {"source": {"bootstrapServers": "src:9092"},
                 "destination": {"bootstrapServers": "dst:9092"},
                 "fetcher": {"partitionsPerPod": g.per_pod}}
    }))
    .unwrap();
    cm.spec.reverse_of = g.reverse_of.map(Into::into);
    (mt, cm)
}

/// The observation of a situation, gathered by the rules `observe` reads by.
fn observation(g: &Given, mt: &MirrorTopic, cm: &ClusterMirror) -> Observation {
    let spec = Spec {
        topic: mt,
        mirror: cm,
        fetcher_image: IMAGE,
        secrets_version: SECRETS,
        steady_requeue: STEADY,
        operator_template: "",
        rollout_admitted: &NONE_ADMITTED,
    };
    let pods = g
        .pods
        .iter()
        .map(|p| {
            let hash = FetcherPod {
                topic: spec.topic,
                mirror: spec.mirror,
                index: p.index,
                partitions: &p.partitions,
                default_image: IMAGE,
                secrets_version: SECRETS,
            }
            .spec_hash();
            let view = PodView {
                name: format!("orders-fetcher-{}", p.index),
                uid: format!("uid-{}", p.index),
                partitions: p.partitions.clone(),
                hash: if p.current { hash } else { "old".into() },
                operator: String::new(),
                terminating: p.terminating,
                ready: p.exited.is_none(),
                exited: p.exited.map(|c| (Some(c), None)),
            };
            (p.index, view)
        })
        .collect();
    let source = match g.source {
        Src::Present(n) => SourceTopic::Described {
            partitions: n,
            topic_id: Some("T1".into()),
        },
        Src::Recreated(n) => SourceTopic::Described {
            partitions: n,
            topic_id: Some("T2".into()),
        },
        Src::Missing | Src::Gone => SourceTopic::Missing,
        Src::Down => {
            SourceTopic::Unreachable("source cluster: describing topic orders: timed out".into())
        }
    };
    let destination = g.destination.unwrap_or(match g.source {
        Src::Present(n) | Src::Recreated(n) => DestinationTopic::Present(n),
        _ => DestinationTopic::NotRead,
    });
    let mut o = Observation {
        records: g.parts.iter().map(|Part(p, r)| (*p, r.clone())).collect(),
        source,
        destination,
        destination_replicas: g.destination_replicas,
        pods,
        pooled: false,
        leftover_pods: Vec::new(),
        source_ends: BTreeMap::new(),
        destination_ends: BTreeMap::new(),
        failback: crate::failback::Observed {
            facts: g.failback.iter().cloned().collect(),
            source_cluster_id: Some("src-1".into()),
        },
        leases: g
            .leases
            .iter()
            .map(|(p, secs)| {
                let hold = crate::leases::LeaseHold {
                    holder: "orders-fetcher-0".into(),
                    remaining: Duration::from_secs(*secs),
                };
                (*p, hold)
            })
            .collect(),
        retry_token: g.retry_token.map(Into::into),
        source_gone: matches!(g.source, Src::Gone),
        now_ms: NOW,
    };
    let per_pod = g.per_pod.max(1);
    let source_obs = o.source_observation();
    for p in o.partitions() {
        let recorded = o.records.get(&p).and_then(|r| r.state.as_ref());
        let fetcher = fetcher_of(&o.pods, p, per_pod, None);
        if needs_source_end(recorded, g.desired, source_obs) {
            o.source_ends.insert(p, g.source_end);
        }
        if o.state_of(p) == Stopping && fetcher == crate::lifecycle::FetcherObservation::Absent {
            let end = g.destination_end.ok_or(crate::error::KafkaError {
                cluster: "destination",
                message: format!("offsets of orders[{p}]: timed out"),
            });
            o.destination_ends.insert(p, end);
        }
    }
    o
}

// ------------------------------------------------------------------------------------------
// What a plan must hold.

/// What to expect. Every list is exact: what is not listed must not be planned.
#[derive(Default)]
struct Want {
    /// Transitions: (partition, new state).
    writes: Vec<(i32, PartitionState)>,
    /// Pods deleted.
    delete: Vec<&'static str>,
    /// Pods created: (name, partitions annotation).
    create: Vec<(&'static str, &'static str)>,
    /// Partitions whose failover is finished.
    finish: Vec<i32>,
    /// The destination topic change.
    topic: Option<TopicChange>,
    /// Failback steps, by kind.
    failback: Vec<&'static str>,
    /// Event reasons, in order (failback events, then transitions).
    events: Vec<&'static str>,
    /// Text the Ready condition's message contains.
    ready_message: Option<&'static str>,
    /// The Ready condition's reason.
    ready_reason: Option<&'static str>,
    /// The longest acceptable requeue.
    requeue_at_most: Option<Duration>,
    /// More checks.
    check: Option<fn(&Plan)>,
}

struct Case {
    name: &'static str,
    given: Given,
    want: Want,
}

fn step_kind(s: &Step) -> &'static str {
    match s {
        Step::CreateQuarantine { .. } => "create-quarantine",
        Step::Quarantine { .. } => "quarantine",
        Step::Seed { .. } => "seed",
        Step::RecordDivergence(_) => "record-divergence",
        Step::Recreate { .. } => "recreate",
    }
}

fn run(case: &Case) -> Result<(), String> {
    let (mt, cm) = objects(&case.given);
    let o = observation(&case.given, &mt, &cm);
    let plan = plan(
        &o,
        &Spec {
            topic: &mt,
            mirror: &cm,
            fetcher_image: IMAGE,
            secrets_version: SECRETS,
            steady_requeue: STEADY,
            operator_template: "",
            rollout_admitted: &NONE_ADMITTED,
        },
    );
    let w = &case.want;
    let mut errors = Vec::new();
    let mut check = |what: &str, got: String, want: String| {
        if got != want {
            errors.push(format!("{what}: got {got}, want {want}"));
        }
    };
    check(
        "writes",
        format!(
            "{:?}",
            plan.transitions
                .iter()
                .map(|(p, r)| (*p, r.state))
                .collect::<Vec<_>>()
        ),
        format!("{:?}", w.writes),
    );
    check(
        "deleted pods",
        format!("{:?}", plan.delete_pods),
        format!("{:?}", w.delete),
    );
    check(
        "created pods",
        format!(
            "{:?}",
            plan.create_pods
                .iter()
                .map(|p| (p.name_any(), p.annotations()[ANNOTATION_PARTITIONS].clone()))
                .collect::<Vec<_>>()
        ),
        format!(
            "{:?}",
            w.create
                .iter()
                .map(|(n, p)| (n.to_string(), p.to_string()))
                .collect::<Vec<_>>()
        ),
    );
    check(
        "finished",
        format!(
            "{:?}",
            plan.finish
                .as_ref()
                .map(|f| f.partitions())
                .unwrap_or_default()
        ),
        format!("{:?}", w.finish),
    );
    check(
        "destination topic",
        format!("{:?}", plan.destination_topic),
        format!("{:?}", w.topic),
    );
    check(
        "failback steps",
        format!(
            "{:?}",
            plan.failback
                .steps
                .iter()
                .map(step_kind)
                .collect::<Vec<_>>()
        ),
        format!("{:?}", w.failback),
    );
    check(
        "events",
        format!(
            "{:?}",
            plan.failback
                .events
                .iter()
                .chain(&plan.transition_events)
                .map(|n| n.reason.as_str())
                .collect::<Vec<_>>()
        ),
        format!("{:?}", w.events),
    );
    let ready = plan.status.conditions.iter().find(|c| c.type_ == "Ready");
    if let Some(text) = w.ready_message
        && !ready.is_some_and(|c| c.message.contains(text))
    {
        errors.push(format!(
            "Ready message {:?} lacks {text:?}",
            ready.map(|c| &c.message)
        ));
    }
    if let Some(reason) = w.ready_reason
        && ready.map(|c| c.reason.as_str()) != Some(reason)
    {
        errors.push(format!(
            "Ready reason {:?}, want {reason}",
            ready.map(|c| &c.reason)
        ));
    }
    if let Some(max) = w.requeue_at_most
        && plan.requeue > max
    {
        errors.push(format!("requeue {:?} > {max:?}", plan.requeue));
    }
    // Every transition is one step of the lifecycle, one epoch up.
    for (p, r) in &plan.transitions {
        let before = o.records.get(p).and_then(|x| x.state.as_ref());
        let from = before.map_or(Unknown, |s| s.state);
        if !from.can_transition_to(r.state) {
            errors.push(format!(
                "partition {p}: {from} -> {} is no transition",
                r.state
            ));
        }
        let epoch = before.map_or(0, |s| s.state_epoch);
        if r.state_epoch <= epoch {
            errors.push(format!(
                "partition {p}: epoch {} after {epoch}",
                r.state_epoch
            ));
        }
    }
    if errors.is_empty()
        && let Some(extra) = w.check
    {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| extra(&plan)));
        if let Err(e) = outcome {
            let text = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            errors.push(format!("check: {text}"));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n    "))
    }
}

fn record(plan: &Plan, p: i32) -> &PartitionStateRecord {
    plan.transitions
        .iter()
        .find(|(q, _)| *q == p)
        .map(|(_, r)| r)
        .expect("a transition of the partition")
}

fn compared(lmo: i64, end: i64, divergent: i64) -> Facts {
    Facts::Compared(Comparison {
        lmo_src: lmo,
        lmo_dst: lmo,
        end,
        forward_map: OffsetMap::identity(),
        divergent: (lmo + 1..lmo + 1 + divergent)
            .map(|offset| RecordData {
                offset,
                key: None,
                value: Some(b"written after the failover".to_vec()),
                headers: Vec::new(),
                timestamp: Some(NOW),
                timestamp_kind: None,
            })
            .collect(),
        destination_partitions: Some(1),
        quarantine_end: None,
    })
}

fn divergence(quarantined: i64, resolution: Option<&str>) -> Divergence {
    Divergence {
        from_offset: 10,
        to_offset: 13,
        quarantine_topic: "orders.kmirror-quarantine".into(),
        quarantine_base: 0,
        records: 3,
        quarantined,
        resolution: resolution.map(Into::into),
    }
}

// ------------------------------------------------------------------------------------------
// The table.

fn cases() -> Vec<Case> {
    vec![
        // -- Starting and mirroring.
        Case {
            name: "a new topic: the destination topic is created, partitions start PREPARING",
            given: Given {
                source: Src::Present(2),
                destination: Some(DestinationTopic::Missing),
                ..Given::default()
            },
            want: Want {
                topic: Some(TopicChange::Create { partitions: 2 }),
                writes: vec![(0, Preparing), (1, Preparing)],
                events: vec!["PartitionPreparing"],
                requeue_at_most: Some(Duration::ZERO),
                ..Want::default()
            },
        },
        Case {
            name: "PREPARING goes MIRRORING; its pod follows in the next round, at once",
            given: Given {
                parts: vec![part(0, Preparing)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Mirroring)],
                events: vec!["PartitionMirroring"],
                requeue_at_most: Some(Duration::ZERO),
                ..Want::default()
            },
        },
        Case {
            name: "PREPARING waits while the destination does not show its partition yet",
            given: Given {
                source: Src::Present(2),
                destination: Some(DestinationTopic::Present(1)),
                parts: vec![part(0, Preparing), part(1, Preparing)],
                ..Given::default()
            },
            want: Want {
                topic: Some(TopicChange::Grow { from: 1, to: 2 }),
                writes: vec![(0, Mirroring)],
                events: vec!["PartitionMirroring"],
                check: Some(|plan| {
                    assert!(plan.create_pods.is_empty());
                    let notes = plan.report.notes.join("; ");
                    assert!(
                        notes.contains(
                            "partition 1: the destination topic does not show this partition yet"
                        ),
                        "{notes}"
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "the destination topic's replicas are shown as they are, whatever the spec asks",
            given: Given {
                destination: Some(DestinationTopic::Present(1)),
                destination_replicas: Some(2),
                parts: vec![part(0, Mirroring)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                check: Some(|plan| {
                    assert_eq!(plan.status.destination_replication_factor, Some(2));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "MIRRORING without a pod gets its fetcher pod",
            given: Given {
                parts: vec![part(0, Mirroring)],
                ..Given::default()
            },
            want: Want {
                create: vec![("orders-fetcher-0", "0")],
                ..Want::default()
            },
        },
        Case {
            name: "a lost node's fetcher still holds the write lease: no replacement until it ends",
            given: Given {
                parts: vec![part(0, Mirroring)],
                leases: vec![(0, 12)],
                ..Given::default()
            },
            want: Want {
                requeue_at_most: Some(Duration::from_millis(12_200)),
                check: Some(|plan| {
                    assert!(plan.lease_holders.is_empty());
                    let notes = plan.report.notes.join("; ");
                    assert!(
                        notes.contains("a new fetcher starts once the write lease of orders-fetcher-0 ends (at most 13s)"),
                        "{notes}"
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "the pod that runs a partition is the one that may hold its lease",
            given: Given {
                per_pod: 2,
                source: Src::Present(2),
                parts: vec![part(0, Mirroring), part(1, Mirroring)],
                pods: vec![pod(0, &[0, 1])],
                ..Given::default()
            },
            want: Want {
                requeue_at_most: Some(STEADY),
                check: Some(|plan| {
                    let holders: Vec<(i32, String, String)> = plan
                        .lease_holders
                        .iter()
                        .map(|(p, h)| (*p, h.name.clone(), h.uid.clone()))
                        .collect();
                    assert_eq!(
                        holders,
                        vec![
                            (0, "orders-fetcher-0".into(), "uid-0".into()),
                            (1, "orders-fetcher-0".into(), "uid-0".into())
                        ]
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "MIRRORING with its current pod: nothing to do, look again when progress is due",
            given: Given {
                parts: vec![part(0, Mirroring).at(90, 100)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                ready_reason: Some("Mirroring"),
                requeue_at_most: Some(STEADY),
                check: Some(|plan| {
                    assert_eq!(plan.requeue, STEADY, "steady: the progress interval");
                    let s = &plan.status.partitions[0];
                    assert_eq!(s.lag, Some(10));
                    assert_eq!(s.fetcher_pod.as_deref(), Some("orders-fetcher-0"));
                    assert_eq!(plan.status.phase.as_deref(), Some("Mirroring"));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a pod with a stale spec hash is deleted; its replacement waits for it to go",
            given: Given {
                parts: vec![part(0, Mirroring)],
                pods: vec![pod(0, &[0]).stale()],
                ..Given::default()
            },
            want: Want {
                delete: vec!["orders-fetcher-0"],
                ..Want::default()
            },
        },
        Case {
            name: "a terminating pod is left alone and not replaced yet",
            given: Given {
                parts: vec![part(0, Mirroring)],
                pods: vec![pod(0, &[0]).terminating()],
                ..Given::default()
            },
            want: Want {
                requeue_at_most: Some(Duration::from_secs(5)),
                ..Want::default()
            },
        },
        Case {
            name: "partitionsPerPod 2: three partitions run in two pods",
            given: Given {
                per_pod: 2,
                source: Src::Present(3),
                parts: vec![part(0, Mirroring), part(1, Mirroring), part(2, Mirroring)],
                ..Given::default()
            },
            want: Want {
                create: vec![("orders-fetcher-0", "0,1"), ("orders-fetcher-1", "2")],
                ..Want::default()
            },
        },
        Case {
            name: "partitionsPerPod 2: a partition joining a group replaces the group's pod",
            given: Given {
                per_pod: 2,
                source: Src::Present(2),
                parts: vec![part(0, Mirroring), part(1, Mirroring)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                delete: vec!["orders-fetcher-0"],
                ..Want::default()
            },
        },
        Case {
            name: "the source grew: the destination grows and the new partition starts",
            given: Given {
                source: Src::Present(2),
                destination: Some(DestinationTopic::Present(1)),
                parts: vec![part(0, Mirroring)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                topic: Some(TopicChange::Grow { from: 1, to: 2 }),
                writes: vec![(1, Preparing)],
                events: vec!["PartitionPreparing"],
                ..Want::default()
            },
        },
        Case {
            name: "a failed-over topic no longer follows the source's partitions",
            given: Given {
                desired: WantStopped,
                source: Src::Present(3),
                destination: Some(DestinationTopic::Present(1)),
                parts: vec![part(0, Stopped).lmo(99, 99)],
                ..Given::default()
            },
            want: Want {
                ready_reason: Some("Stopped"),
                ..Want::default()
            },
        },
        // -- Pause and resume.
        Case {
            name: "pause: MIRRORING goes PAUSING and its fetcher stops",
            given: Given {
                desired: WantPaused,
                parts: vec![part(0, Mirroring)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Pausing)],
                delete: vec!["orders-fetcher-0"],
                events: vec!["PartitionPausing"],
                ..Want::default()
            },
        },
        Case {
            name: "pausing: not PAUSED while the fetcher pod terminates",
            given: Given {
                desired: WantPaused,
                parts: vec![part(0, Pausing)],
                pods: vec![pod(0, &[0]).terminating()],
                ..Given::default()
            },
            want: Want {
                requeue_at_most: Some(Duration::from_secs(1)),
                ..Want::default()
            },
        },
        Case {
            name: "pausing: PAUSED once the fetcher pod is gone",
            given: Given {
                desired: WantPaused,
                parts: vec![part(0, Pausing)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Paused)],
                events: vec!["PartitionPaused"],
                ..Want::default()
            },
        },
        Case {
            name: "paused and settled: no pod, Ready",
            given: Given {
                desired: WantPaused,
                parts: vec![part(0, Paused)],
                ..Given::default()
            },
            want: Want {
                ready_reason: Some("Paused"),
                check: Some(|plan| assert_eq!(plan.requeue, Duration::from_secs(30))),
                ..Want::default()
            },
        },
        Case {
            name: "resume: PAUSED goes through PREPARING",
            given: Given {
                parts: vec![part(0, Paused)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Preparing)],
                events: vec!["PartitionPreparing"],
                ..Want::default()
            },
        },
        // -- Failover.
        Case {
            name: "graceful failover begins: STOPPING with the source end as drain target, fetcher kept",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Mirroring).at(60, 100)],
                pods: vec![pod(0, &[0])],
                source_end: Some(120),
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Stopping)],
                events: vec!["PartitionStopping"],
                check: Some(|plan| {
                    let r = record(plan, 0);
                    assert_eq!(r.drain_target, Some(120));
                    assert_eq!(r.state_epoch, 4);
                    assert_eq!(r.updated_at_ms, NOW);
                }),
                ..Want::default()
            },
        },
        Case {
            name: "graceful failover mid-drain: the fetcher keeps copying up to the drain target",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Stopping).drain_target(100).at(60, 100)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                ready_message: Some("draining before failover: 40 records behind"),
                requeue_at_most: Some(Duration::from_secs(2)),
                ..Want::default()
            },
        },
        Case {
            name: "graceful failover past its drain timeout keeps waiting and says how to stop now",
            given: Given {
                desired: WantStopped,
                parts: vec![
                    part(0, Stopping)
                        .drain_target(100)
                        .at(60, 100)
                        .since(600_000),
                ],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                ready_message: Some("set spec.failover.mode: Immediate"),
                ..Want::default()
            },
        },
        Case {
            name: "graceful failover drained: the fetcher stops, nothing finishes before its pod is gone",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Stopping).drain_target(100).at(100, 100)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                delete: vec!["orders-fetcher-0"],
                ..Want::default()
            },
        },
        Case {
            name: "failover, fetcher pod gone but its lease runs: not writable for applications yet",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Stopping).drain_target(100).at(100, 100)],
                destination_end: Some(100),
                leases: vec![(0, 7)],
                ..Given::default()
            },
            want: Want {
                requeue_at_most: Some(Duration::from_millis(7_200)),
                check: Some(|plan| {
                    assert_eq!(plan.state_of(0), Stopping);
                    let notes = serde_json::to_string(&plan.status).unwrap();
                    assert!(
                        notes.contains("becomes writable once the write lease"),
                        "{notes}"
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "graceful failover, fetcher gone: the failover finishes at the destination end",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Stopping).drain_target(100).at(100, 100)],
                destination_end: Some(100),
                ..Given::default()
            },
            want: Want {
                finish: vec![0],
                requeue_at_most: Some(Duration::ZERO),
                ready_reason: Some("Stopped"),
                check: Some(|plan| {
                    let f = plan.finish.as_ref().unwrap();
                    assert!(f.make_writable && f.source_reachable);
                    // First the LMO on the STOPPING record, then the final sync, then STOPPED.
                    assert!(f.record_lmo);
                    assert_eq!(f.final_sync, vec![0]);
                    let lmo = f.stopping[0].1.as_ref().unwrap();
                    assert_eq!((lmo.state, lmo.state_epoch), (Stopping, 3));
                    assert_eq!(lmo.last_mirrored_offset, Some(99));
                    assert!(!lmo.final_sync_done);
                    let r = &f.stopped()[0].1;
                    assert_eq!((r.state, r.state_epoch), (Stopped, 4));
                    assert_eq!(r.last_mirrored_offset, Some(99));
                    assert_eq!(r.last_mirrored_destination_offset, Some(99));
                    assert!(r.final_sync_done);
                    assert_eq!(r.drain_target, None);
                    assert_eq!(plan.status.partitions[0].last_mirrored_offset, Some(99));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a failover cannot finish when the destination end cannot be read",
            given: Given {
                desired: WantStopped,
                mode: Immediate,
                parts: vec![part(0, Stopping)],
                destination_end: None,
                ..Given::default()
            },
            want: Want {
                finish: vec![0],
                check: Some(|plan| {
                    let f = plan.finish.as_ref().unwrap();
                    assert!(f.stopping[0].1.is_err());
                    assert!(f.stopped().is_empty() && !f.record_lmo);
                    assert_eq!(plan.state_of(0), Stopping, "not STOPPED on paper either");
                }),
                ..Want::default()
            },
        },
        Case {
            name: "WRITE ACLs wait until every partition of the topic is STOPPED",
            given: Given {
                desired: WantStopped,
                mode: Immediate,
                source: Src::Present(2),
                parts: vec![part(0, Stopping), part(1, Stopping)],
                pods: vec![pod(1, &[1]).terminating()],
                ..Given::default()
            },
            want: Want {
                finish: vec![0],
                check: Some(|plan| assert!(!plan.finish.as_ref().unwrap().make_writable)),
                ..Want::default()
            },
        },
        Case {
            name: "immediate failover with the source down: STOPPING at once, fetcher deleted",
            given: Given {
                desired: WantStopped,
                mode: Immediate,
                source: Src::Down,
                parts: vec![part(0, Mirroring).at(60, 100)],
                pods: vec![pod(0, &[0])],
                source_end: None,
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Stopping)],
                delete: vec!["orders-fetcher-0"],
                events: vec!["PartitionStopping"],
                ready_reason: Some("SourceUnreachable"),
                check: Some(|plan| assert_eq!(record(plan, 0).drain_target, None)),
                ..Want::default()
            },
        },
        Case {
            name: "immediate failover with the source down finishes without the source",
            given: Given {
                desired: WantStopped,
                mode: Immediate,
                source: Src::Down,
                parts: vec![part(0, Stopping).at(60, 100)],
                destination_end: Some(60),
                ..Given::default()
            },
            want: Want {
                finish: vec![0],
                check: Some(|plan| {
                    let f = plan.finish.as_ref().unwrap();
                    assert!(!f.source_reachable);
                    assert_eq!(
                        f.stopping[0].1.as_ref().unwrap().last_mirrored_offset,
                        Some(59)
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a retry after the LMO was recorded reuses it: the destination may have grown",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Stopping).lmo(99, 99).at(100, 100)],
                // Written by applications after a crash that followed the grant.
                destination_end: Some(150),
                ..Given::default()
            },
            want: Want {
                finish: vec![0],
                requeue_at_most: Some(Duration::ZERO),
                ready_reason: Some("Stopped"),
                check: Some(|plan| {
                    let f = plan.finish.as_ref().unwrap();
                    assert!(!f.record_lmo, "recorded already");
                    assert_eq!(f.final_sync, vec![0], "the sync did not run yet");
                    assert_eq!(f.stopped()[0].1.last_mirrored_offset, Some(99));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a retry after the final sync ran never runs it again",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Stopping).lmo(99, 99).final_synced().at(100, 100)],
                destination_end: Some(150),
                ..Given::default()
            },
            want: Want {
                finish: vec![0],
                requeue_at_most: Some(Duration::ZERO),
                ready_reason: Some("Stopped"),
                check: Some(|plan| {
                    let f = plan.finish.as_ref().unwrap();
                    assert!(!f.record_lmo && f.final_sync.is_empty());
                    assert!(f.make_writable, "the grant is idempotent: applied again");
                    let r = &f.stopped()[0].1;
                    assert_eq!((r.state, r.last_mirrored_offset), (Stopped, Some(99)));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a new failover forgets the last mirrored offset of an earlier one",
            given: Given {
                desired: WantStopped,
                mode: Immediate,
                parts: vec![part(0, Mirroring).lmo(40, 40).final_synced().at(60, 100)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Stopping)],
                delete: vec!["orders-fetcher-0"],
                events: vec!["PartitionStopping"],
                check: Some(|plan| {
                    let r = record(plan, 0);
                    assert_eq!(r.last_mirrored_offset, None);
                    assert_eq!(r.last_mirrored_destination_offset, None);
                    assert!(!r.final_sync_done);
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a FAILED partition fails over, keeping its reason",
            given: Given {
                desired: WantStopped,
                parts: vec![part(0, Failed).attempt(2).error("broker down")],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Stopping)],
                events: vec!["PartitionStopping"],
                check: Some(|plan| {
                    let r = record(plan, 0);
                    assert_eq!(r.error.as_deref(), Some("broker down"));
                    assert_eq!(r.drain_target, Some(100));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "the source topic missing on one look: mirroring goes on, nothing is promoted",
            given: Given {
                source: Src::Missing,
                parts: vec![part(0, Mirroring)],
                pods: vec![pod(0, &[0])],
                source_end: None,
                ..Given::default()
            },
            want: Want::default(),
        },
        Case {
            name: "the source topic deleted (two looks): FAILED for good and read-only, not STOPPING",
            given: Given {
                source: Src::Gone,
                parts: vec![part(0, Mirroring)],
                pods: vec![pod(0, &[0])],
                source_end: None,
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Failed)],
                delete: vec!["orders-fetcher-0"],
                events: vec!["PartitionFailed"],
                check: Some(|plan| {
                    let r = record(plan, 0);
                    assert_eq!(r.error.as_deref(), Some(crate::lifecycle::SOURCE_GONE));
                    assert_eq!(r.retry_attempt, -1);
                }),
                ..Want::default()
            },
        },
        Case {
            name: "STOPPED with the source deleted: no mirroring again",
            given: Given {
                source: Src::Gone,
                parts: vec![part(0, Stopped)],
                ..Given::default()
            },
            want: Want {
                ready_message: Some("the source topic does not exist; staying STOPPED"),
                ..Want::default()
            },
        },
        Case {
            name: "STOPPED and asked to mirror again: PREPARING",
            given: Given {
                parts: vec![part(0, Stopped)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Preparing)],
                events: vec!["PartitionPreparing"],
                ..Want::default()
            },
        },
        Case {
            name: "the source topic does not exist and nothing was mirrored",
            given: Given {
                source: Src::Missing,
                ..Given::default()
            },
            want: Want {
                ready_reason: Some("SourceTopicNotFound"),
                check: Some(|plan| assert!(plan.status.partitions.is_empty())),
                ..Want::default()
            },
        },
        // -- Failures and retries.
        Case {
            name: "a fetcher exits for a foreign write: FAILED for good, its pod removed",
            given: Given {
                parts: vec![
                    part(0, Mirroring)
                        .at(50, 100)
                        .fetcher_failed(StopReason::ForeignWrite, "someone wrote at 50"),
                ],
                pods: vec![pod(0, &[0]).exited(10)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Failed)],
                delete: vec!["orders-fetcher-0"],
                events: vec!["PartitionFailed"],
                check: Some(|plan| {
                    let r = record(plan, 0);
                    assert_eq!(
                        (r.retry_attempt, r.error.as_deref()),
                        (-1, Some("someone wrote at 50"))
                    );
                    let failed = plan.status.conditions.iter().find(|c| c.type_ == "Failed");
                    assert_eq!(failed.unwrap().status, "True");
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a fetcher exits with a retryable error: FAILED with the next attempt",
            given: Given {
                parts: vec![part(0, Mirroring).attempt(1)],
                pods: vec![pod(0, &[0]).exited(1)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Failed)],
                delete: vec!["orders-fetcher-0"],
                events: vec!["PartitionFailed"],
                check: Some(|plan| assert_eq!(record(plan, 0).retry_attempt, 2)),
                ..Want::default()
            },
        },
        Case {
            name: "a retry not due yet waits, saying when",
            given: Given {
                parts: vec![part(0, Failed).attempt(3).error("broker down")],
                ..Given::default()
            },
            want: Want {
                ready_message: Some("retry 3 in"),
                requeue_at_most: Some(Duration::from_secs(30)),
                ..Want::default()
            },
        },
        Case {
            name: "a due retry goes PREPARING",
            given: Given {
                parts: vec![part(0, Failed).attempt(1).since(10_000)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Preparing)],
                events: vec!["PartitionPreparing"],
                ..Want::default()
            },
        },
        Case {
            name: "a non-retryable failure waits for a person",
            given: Given {
                parts: vec![part(0, Failed).attempt(-1).error("someone wrote")],
                ..Given::default()
            },
            want: Want {
                check: Some(|plan| {
                    assert_eq!(plan.status.phase.as_deref(), Some("Failed"));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "the retry annotation retries a non-retryable failure once",
            given: Given {
                parts: vec![part(0, Failed).attempt(-1).error("someone wrote")],
                retry_token: Some("t1"),
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Preparing)],
                events: vec!["PartitionPreparing"],
                check: Some(|plan| {
                    let r = record(plan, 0);
                    assert_eq!((r.retry_attempt, r.retry_token.as_deref()), (0, Some("t1")));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a recreated source topic fails the partition and leaves the destination alone",
            given: Given {
                source: Src::Recreated(2),
                destination: Some(DestinationTopic::Present(1)),
                parts: vec![part(0, Mirroring).at(10, 10)],
                pods: vec![pod(0, &[0])],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Failed), (1, Preparing)],
                delete: vec!["orders-fetcher-0"],
                events: vec!["PartitionPreparing", "PartitionFailed"],
                check: Some(|plan| assert_eq!(record(plan, 0).retry_attempt, -1)),
                ..Want::default()
            },
        },
        // -- Failback (a reverse mirror).
        Case {
            name: "failback without divergence: the fetcher is seeded after the LMO and mirrors",
            given: Given {
                reverse_of: Some("ns/dr"),
                parts: vec![part(0, Preparing)],
                failback: vec![(0, compared(9, 10, 0))],
                ..Given::default()
            },
            want: Want {
                failback: vec!["seed"],
                writes: vec![(0, Mirroring)],
                events: vec!["PartitionMirroring"],
                check: Some(|plan| {
                    let Step::Seed { position, .. } = &plan.failback.steps[0] else {
                        panic!("a seed")
                    };
                    assert_eq!(
                        (position.next_source_offset, position.destination_offset),
                        (10, 10)
                    );
                    assert!(position.offsets_identical);
                }),
                ..Want::default()
            },
        },
        Case {
            name: "failback with divergence: quarantine first, report, wait",
            given: Given {
                reverse_of: Some("ns/dr"),
                parts: vec![part(0, Preparing)],
                failback: vec![(0, compared(9, 13, 3))],
                ..Given::default()
            },
            want: Want {
                failback: vec!["create-quarantine", "record-divergence"],
                events: vec!["Divergence"],
                ready_message: Some("waiting for spec.divergencePolicy"),
                check: Some(|plan| {
                    let Step::RecordDivergence(d) = &plan.failback.steps[1] else {
                        panic!("divergence recorded")
                    };
                    let d = d[0].1.divergence.as_ref().unwrap();
                    assert_eq!((d.from_offset, d.to_offset, d.records), (10, 13, 3));
                    assert_eq!(d.quarantine_base, 0);
                }),
                ..Want::default()
            },
        },
        Case {
            name: "failback with divergence kept: copies quarantined, seeded after the divergent records",
            given: Given {
                reverse_of: Some("ns/dr"),
                policy: Some(DivergencePolicy::KeepAndTranslate),
                parts: vec![part(0, Preparing).divergence(divergence(0, None))],
                failback: vec![(0, compared(9, 13, 3))],
                ..Given::default()
            },
            want: Want {
                failback: vec!["quarantine", "seed", "record-divergence"],
                ready_message: Some("divergent records kept"),
                check: Some(|plan| {
                    let Step::Seed { position, .. } = &plan.failback.steps[1] else {
                        panic!("a seed")
                    };
                    assert!(!position.offsets_identical, "offsets translated after them");
                    assert_eq!(
                        plan.failback.gates[&0],
                        FailbackGate::Wait("divergent records kept".into())
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "failback with divergence and Recreate: the destination topic is recreated",
            given: Given {
                reverse_of: Some("ns/dr"),
                policy: Some(DivergencePolicy::Recreate),
                parts: vec![part(0, Preparing).divergence(divergence(3, None))],
                failback: vec![(0, compared(9, 13, 3))],
                ..Given::default()
            },
            want: Want {
                failback: vec!["recreate"],
                events: vec!["DivergenceResolved"],
                check: Some(|plan| {
                    let Step::Recreate { resolved, .. } = &plan.failback.steps[0] else {
                        panic!("a recreate")
                    };
                    let d = resolved[0].1.divergence.as_ref().unwrap();
                    assert_eq!(d.resolution.as_deref(), Some("recreated"));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "failback crashed after seeding a kept divergence: the resolution is recorded, no wait forever",
            given: Given {
                reverse_of: Some("ns/dr"),
                policy: Some(DivergencePolicy::KeepAndTranslate),
                // The seed (position) is durable; the record saying "kept" is not.
                parts: vec![part(0, Preparing).divergence(divergence(3, None))],
                failback: vec![(0, Facts::Prepared)],
                ..Given::default()
            },
            want: Want {
                failback: vec!["record-divergence"],
                ready_message: Some("divergent records kept"),
                check: Some(|plan| {
                    let Step::RecordDivergence(d) = &plan.failback.steps[0] else {
                        panic!("divergence recorded")
                    };
                    let d = d[0].1.divergence.as_ref().unwrap();
                    assert_eq!(d.resolution.as_deref(), Some("kept"));
                }),
                ..Want::default()
            },
        },
        Case {
            name: "failback crashed after recreating the topic and forgetting positions: the recreate finishes, nothing refused",
            given: Given {
                reverse_of: Some("ns/dr"),
                policy: Some(DivergencePolicy::Recreate),
                // The topic is recreated (empty) and the positions are gone; the records saying
                // "recreated" are not durable.
                parts: vec![part(0, Preparing).divergence(divergence(3, None))],
                failback: vec![(0, compared(9, 0, 0))],
                ..Given::default()
            },
            want: Want {
                failback: vec!["recreate"],
                events: vec!["DivergenceResolved"],
                check: Some(|plan| {
                    assert!(
                        !matches!(plan.failback.gates[&0], FailbackGate::Refuse(_)),
                        "{:?}",
                        plan.failback.gates[&0]
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "failback refused while the forward mirror still mirrors (a loop)",
            given: Given {
                reverse_of: Some("ns/dr"),
                parts: vec![part(0, Preparing)],
                failback: vec![(0, Facts::ForwardNotStopped(Mirroring))],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Failed)],
                events: vec!["PartitionFailed"],
                check: Some(|plan| {
                    let r = record(plan, 0);
                    assert_eq!(r.retry_attempt, -1);
                    assert!(
                        r.error
                            .as_deref()
                            .unwrap()
                            .contains("a mirror loop is refused")
                    );
                }),
                ..Want::default()
            },
        },
        Case {
            name: "a failing-back topic set to Stopped fails over, no failback step runs",
            given: Given {
                reverse_of: Some("ns/dr"),
                desired: WantStopped,
                parts: vec![part(0, Preparing)],
                ..Given::default()
            },
            want: Want {
                writes: vec![(0, Stopping)],
                events: vec!["PartitionStopping"],
                ..Want::default()
            },
        },
    ]
}

#[test]
fn plan_table() {
    let cases = cases();
    assert!(cases.len() >= 25, "{} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| run(c).err().map(|e| format!("{}:\n    {e}", c.name)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn recording_divergence_keeps_the_state_and_its_epoch() {
    let case = &cases()
        .into_iter()
        .find(|c| c.name.starts_with("failback with divergence: quarantine"))
        .unwrap();
    let (mt, cm) = objects(&case.given);
    let o = observation(&case.given, &mt, &cm);
    let plan = plan(
        &o,
        &Spec {
            topic: &mt,
            mirror: &cm,
            fetcher_image: IMAGE,
            secrets_version: SECRETS,
            steady_requeue: STEADY,
            operator_template: "",
            rollout_admitted: &NONE_ADMITTED,
        },
    );
    let Step::RecordDivergence(d) = &plan.failback.steps[1] else {
        panic!("divergence recorded")
    };
    assert_eq!((d[0].1.state, d[0].1.state_epoch), (Preparing, 3));
}

#[test]
fn plans_are_pure() {
    for case in cases() {
        let (mt, cm) = objects(&case.given);
        let o = observation(&case.given, &mt, &cm);
        let spec = Spec {
            topic: &mt,
            mirror: &cm,
            fetcher_image: IMAGE,
            secrets_version: SECRETS,
            steady_requeue: STEADY,
            operator_template: "",
            rollout_admitted: &NONE_ADMITTED,
        };
        let (a, b) = (plan(&o, &spec), plan(&o, &spec));
        assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "{}: the same observation plans the same",
            case.name
        );
    }
}

#[test]
fn the_status_shows_the_source_topic_id() {
    #[rustfmt::skip]
    let table: Vec<(&str, Src, Option<&str>)> = vec![
        // name, source now → status.sourceTopicId
        ("described", Src::Present(1), Some("T1")),
        ("recreated: the new ID (the partition goes FAILED)", Src::Recreated(1), Some("T2")),
        ("source down: the ID the fetchers recorded", Src::Down, Some("T1")),
    ];
    for (name, source, expect) in table {
        let g = Given {
            source,
            parts: vec![part(0, Mirroring).at(10, 10)],
            ..Default::default()
        };
        let (mt, cm) = objects(&g);
        let o = observation(&g, &mt, &cm);
        let spec = Spec {
            topic: &mt,
            mirror: &cm,
            fetcher_image: IMAGE,
            secrets_version: SECRETS,
            steady_requeue: STEADY,
            operator_template: "",
            rollout_admitted: &NONE_ADMITTED,
        };
        let status = plan(&o, &spec).status;
        assert_eq!(status.source_topic_id.as_deref(), expect, "{name}");
    }
}

/// With a pool the topic runs no pods of its own: it asks the pool for the partitions that want
/// a fetcher, names each one's lease holder (the pool pod that runs it), asks for the pod a
/// partition's copy ended in to be restarted, and deletes its per-topic pods from before.
#[test]
fn a_pooled_topic_asks_its_pool_and_runs_no_pods_of_its_own() {
    let g = Given {
        source: Src::Present(4),
        parts: vec![
            part(0, Mirroring).at(10, 10),
            part(1, Mirroring).at(10, 10),
            part(2, Mirroring).at(10, 10),
            part(3, Paused),
        ],
        ..Default::default()
    };
    let (mt, mut cm) = objects(&g);
    cm.spec.fetcher.pool = Some(kmirror_crds::v1alpha1::FetcherPool { pods: 3 });
    let mut o = observation(&g, &mt, &cm);
    o.pooled = true;
    let view = |name: &str, p: i32, exited: Option<i32>| PodView {
        name: name.into(),
        uid: format!("uid-{name}"),
        partitions: vec![p],
        ready: exited.is_none(),
        exited: exited.map(|c| {
            (
                Some(c),
                Some("offset 7 was written by another client".into()),
            )
        }),
        ..Default::default()
    };
    // 0 copies in pool pod 1; 1 stopped inside pool pod 2 (foreign write); 2 is not placed yet.
    o.pods = BTreeMap::from([
        (0, view("orders-pool-1", 0, None)),
        (1, view("orders-pool-2", 1, Some(10))),
    ]);
    o.leftover_pods = vec!["orders-fetcher-0".into()];
    let spec = Spec {
        topic: &mt,
        mirror: &cm,
        fetcher_image: IMAGE,
        secrets_version: SECRETS,
        steady_requeue: STEADY,
        operator_template: "",
        rollout_admitted: &NONE_ADMITTED,
    };
    let plan = plan(&o, &spec);
    assert!(plan.create_pods.is_empty(), "the pool creates pool pods");
    assert_eq!(plan.delete_pods, ["orders-fetcher-0"], "per-topic pods go");
    let demand = plan.pool_demand.clone().expect("a demand");
    assert_eq!(
        demand.wanted.iter().copied().collect::<Vec<_>>(),
        [0, 2],
        "the copying one and the unplaced one; not the failed one, not the paused one"
    );
    assert_eq!(
        demand.restart,
        BTreeMap::from([(1, "uid-orders-pool-2".to_string())]),
        "the pod it ended in restarts"
    );
    assert_eq!(record(&plan, 1).state, Failed);
    assert_eq!(
        plan.lease_holders.keys().copied().collect::<Vec<_>>(),
        [0],
        "only a partition running in a pool pod may hold its lease"
    );
    assert_eq!(plan.lease_holders[&0].name, "orders-pool-1");
    let shown: BTreeMap<i32, Option<String>> = plan
        .status
        .partitions
        .iter()
        .map(|p| (p.partition, p.fetcher_pod.clone()))
        .collect();
    assert_eq!(shown[&0].as_deref(), Some("orders-pool-1"));
    assert!(
        shown[&2]
            .as_deref()
            .is_some_and(|p| p.starts_with("dr-pool-")),
        "an unplaced partition shows the pool pod it will run on: {shown:?}"
    );
}

/// Pods another operator made, outdated only for that, wait for the mirror's rollout: reported,
/// deleted only once admitted; a missing pod is created at once and a pod that must go for
/// correctness (a change of the mirror with the same operator, other partitions) goes at once.
#[test]
fn pods_of_another_operator_wait_for_the_rollout_others_do_not() {
    let given = Given {
        source: Src::Present(4),
        parts: (0..4).map(|p| part(p, Mirroring)).collect(),
        // Pod 2 was deleted by someone; pod 3 runs another partition than it should.
        pods: vec![
            pod(0, &[0]).stale(),
            pod(1, &[1]).stale(),
            pod(3, &[2]).stale(),
        ],
        ..Given::default()
    };
    let (mt, cm) = objects(&given);
    let mut o = observation(&given, &mt, &cm);
    for v in o.pods.values_mut() {
        v.operator = "older".into();
    }
    let plan_with = |o: &Observation, admitted: &std::collections::BTreeSet<String>| {
        plan(
            o,
            &Spec {
                topic: &mt,
                mirror: &cm,
                fetcher_image: IMAGE,
                secrets_version: SECRETS,
                steady_requeue: STEADY,
                operator_template: "this",
                rollout_admitted: admitted,
            },
        )
    };
    let none = std::collections::BTreeSet::new();
    let p = plan_with(&o, &none);
    let candidates: Vec<&str> = p
        .rollout
        .candidates
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(candidates, ["orders-fetcher-0", "orders-fetcher-1"]);
    assert_eq!(
        p.delete_pods,
        ["orders-fetcher-3"],
        "other partitions: at once"
    );
    let created: Vec<String> = p.create_pods.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        created,
        ["orders-fetcher-2"],
        "a missing pod is created at once"
    );
    assert_eq!(
        p.create_pods[0].annotations()[crate::rollout::ANNOTATION_OPERATOR],
        "this"
    );
    assert_eq!(
        p.lease_holders.keys().copied().collect::<Vec<_>>(),
        [0, 1],
        "waiting pods keep their leases"
    );
    assert_eq!(p.rollout.units.len(), 4, "every partition's progress");
    // Admitted: deleted, its lease no longer held.
    let admitted = std::collections::BTreeSet::from(["uid-0".to_string()]);
    let p = plan_with(&o, &admitted);
    assert_eq!(p.delete_pods, ["orders-fetcher-0", "orders-fetcher-3"]);
    assert!(!p.lease_holders.contains_key(&0));
    // Made by this operator: outdated means the mirror (or its Secrets) changed: at once.
    o.pods.get_mut(&1).unwrap().operator = "this".into();
    let p = plan_with(&o, &none);
    assert_eq!(p.delete_pods, ["orders-fetcher-1", "orders-fetcher-3"]);
    // Exited: at once, whoever made it.
    o.pods.get_mut(&0).unwrap().exited = Some((Some(1), None));
    let p = plan_with(&o, &none);
    assert!(p.delete_pods.contains(&"orders-fetcher-0".to_string()));
    assert!(p.rollout.candidates.is_empty());
}
