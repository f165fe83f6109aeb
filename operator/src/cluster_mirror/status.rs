//! A `ClusterMirror`'s status and events, from how its clusters answered, what its metadata
//! sync did and its topics' status. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kmirror_crds::v1alpha1::{
    ClusterMirror, ClusterMirrorStatus, MirrorTopic, PartitionCounts, PartitionState, SyncStatus,
};

use crate::context::Note;
use crate::status::{Health, add_counts, condition_is, set_condition, set_health};
use crate::sync::{Outcomes, PartResult, SyncPart, part_status};

/// How one cluster answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// Connected, and its ID is the pinned one (if any).
    pub ok: bool,
    /// Condition reason (`Connected`, `Unreachable`, `SecretNotFound`, …).
    pub reason: String,
    /// Condition message.
    pub message: String,
    /// The cluster ID it reported.
    pub id: Option<String>,
}

/// What one metadata sync did.
#[derive(Debug)]
pub struct SyncRun {
    /// Topic discovery.
    pub topics: PartResult,
    /// The other parts.
    pub parts: Outcomes,
}

/// Everything the status of a mirror is made from.
#[derive(Debug)]
pub struct Facts<'a> {
    /// The source cluster.
    pub source: &'a Reach,
    /// The destination cluster.
    pub destination: &'a Reach,
    /// The metadata sync, when it ran in this reconcile.
    pub sync: Option<&'a SyncRun>,
    /// The mirror's `MirrorTopic`s.
    pub topics: &'a [MirrorTopic],
    /// Its fetcher pod rollout, as far as this operator knows it.
    pub rollout: Option<&'a crate::rollout::Summary>,
}

/// The status of a mirror whose spec is invalid.
pub fn invalid(cm: &ClusterMirror, message: &str, now: &Time) -> ClusterMirrorStatus {
    let generation = cm.metadata.generation;
    let mut status = cm.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    set_health(
        &mut status.conditions,
        &Health::stalled("InvalidSpec", message),
        generation,
        now,
    );
    status
}

fn apply_outcomes(sync: &mut SyncStatus, run: &SyncRun, now: &str) {
    sync.topics = Some(part_status(sync.topics.as_ref(), &run.topics, now));
    for (part, outcome) in &run.parts {
        let slot = match part {
            SyncPart::TopicConfigs => &mut sync.topic_configs,
            SyncPart::ConsumerGroups => &mut sync.consumer_groups,
            SyncPart::Acls => &mut sync.acls,
            SyncPart::Topics => &mut sync.topics,
            SyncPart::Partitions => &mut sync.partitions,
        };
        *slot = Some(part_status(slot.as_ref(), outcome, now));
    }
}

/// Whether some topic has partitions on their way somewhere (the mirror looks again soon).
pub fn unsettled(topics: &[MirrorTopic]) -> bool {
    topics.iter().any(|t| {
        t.status.as_ref().is_none_or(|s| {
            // From the counts: a large topic lists only some of its partitions.
            let c = s.counts();
            c.total
                > [
                    PartitionState::Mirroring,
                    PartitionState::Stopped,
                    PartitionState::Paused,
                ]
                .iter()
                .map(|st| c.get(*st))
                .sum::<i32>()
        })
    })
}

/// What `Ready`, `Reconciling` and `Stalled` say of a mirror. Ready: both clusters answer, no
/// partition is FAILED and none is on its way (UNKNOWN, PREPARING, STOPPING, a topic without
/// status yet); a mirror whose partitions are all failed over is Ready without its source.
/// Stalled: a partition FAILED for a reason that is not retried.
pub fn mirror_health(facts: &Facts<'_>, counts: &PartitionCounts) -> Health {
    let total = counts.total;
    if !facts.destination.ok || !facts.source.ok {
        if facts.destination.ok && total > 0 && counts.stopped == total {
            return Health::ready(
                "FailedOver",
                format!(
                    "all {total} partitions failed over (STOPPED); source: {}",
                    facts.source.message
                ),
            );
        }
        return Health::reconciling(
            "ClusterUnavailable",
            format!(
                "source: {}; destination: {}",
                facts.source.message, facts.destination.message
            ),
        );
    }
    if counts.failed > 0 {
        let mut stuck = Vec::new();
        for t in facts.topics {
            for p in t.status.iter().flat_map(|s| &s.partitions) {
                if p.state == PartitionState::Failed && p.retry_attempt == Some(-1) {
                    stuck.push(format!("{}[{}]", t.spec.source_topic, p.partition));
                }
            }
        }
        let message = format!("{} partitions FAILED (see the MirrorTopics)", counts.failed);
        if stuck.is_empty() {
            return Health::reconciling("PartitionsFailed", format!("{message}, retrying"));
        }
        let named = if stuck.len() > 5 {
            format!("{}, …", stuck[..5].join(", "))
        } else {
            stuck.join(", ")
        };
        return Health::stalled(
            "PartitionsFailed",
            format!("{message}; not retried without a person: {named}"),
        );
    }
    let unsettled_partitions = counts.unknown + counts.preparing + counts.stopping;
    if unsettled_partitions > 0 || unsettled(facts.topics) {
        let waiting = facts.topics.iter().filter(|t| t.status.is_none()).count();
        let mut message = format!(
            "{} of {total} partitions MIRRORING; on their way: {} PREPARING, {} STOPPING, {} UNKNOWN",
            counts.mirroring, counts.preparing, counts.stopping, counts.unknown
        );
        if waiting > 0 {
            message.push_str(&format!("; {waiting} topics without status yet"));
        }
        return Health::reconciling("Progressing", message);
    }
    Health::ready(
        "Mirroring",
        format!(
            "{} topics, {} of {total} partitions mirroring",
            facts.topics.len(),
            counts.mirroring
        ),
    )
}

/// What `allowInsecure` accepts in `cm`'s connections, side by side.
pub fn insecure_settings(cm: &ClusterMirror) -> Vec<String> {
    [
        ("spec.source", &cm.spec.source),
        ("spec.destination", &cm.spec.destination),
    ]
    .into_iter()
    .filter(|(_, c)| c.allow_insecure)
    .flat_map(|(field, c)| {
        c.insecure_settings()
            .into_iter()
            .map(move |what| format!("{field}: {what}"))
    })
    .collect()
}

/// `FetcherRolloutStalled`: True, naming the pod and why, once a replacement of the rollout was
/// not caught up in time, until the next rollout starts; False once a rollout runs or ended
/// without one. Absent on mirrors that never rolled in this operator's life.
fn rollout_condition(
    status: &mut ClusterMirrorStatus,
    rollout: Option<&crate::rollout::Summary>,
    generation: Option<i64>,
    now: &Time,
) {
    const TYPE: &str = "FetcherRolloutStalled";
    match rollout {
        Some(crate::rollout::Summary {
            stalled: Some(message),
            ..
        }) => set_condition(
            &mut status.conditions,
            TYPE,
            true,
            "ReplacementNotCaughtUp",
            message.clone(),
            generation,
            now,
        ),
        Some(s) => set_condition(
            &mut status.conditions,
            TYPE,
            false,
            if s.active { "RollingOut" } else { "RolledOut" },
            if s.active {
                "fetcher pods are being replaced, each caught up before the next"
            } else {
                "every replacement caught up in time"
            },
            generation,
            now,
        ),
        None => {}
    }
}

/// The status of `cm` and the events to publish.
pub fn status(
    cm: &ClusterMirror,
    facts: &Facts<'_>,
    now: &Time,
) -> (ClusterMirrorStatus, Vec<Note>) {
    let generation = cm.metadata.generation;
    let old = cm.status.as_ref();
    let mut status = old.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let mut notes = Vec::new();
    for (side, s) in [("Source", facts.source), ("Destination", facts.destination)] {
        let condition = format!("{side}Reachable");
        set_condition(
            &mut status.conditions,
            &condition,
            s.ok,
            &s.reason,
            s.message.clone(),
            generation,
            now,
        );
        let previous = old.and_then(|st| condition_is(&st.conditions, &condition));
        if !s.ok && previous != Some(false) {
            notes.push(Note::warning(
                &s.reason,
                "Connect",
                format!("{}: {}", side.to_lowercase(), s.message),
            ));
        }
    }
    let insecure = insecure_settings(cm);
    let previous = old.and_then(|st| condition_is(&st.conditions, "InsecureConnection"));
    if insecure.is_empty() {
        if previous.is_some() {
            set_condition(
                &mut status.conditions,
                "InsecureConnection",
                false,
                "Secure",
                "no connection exposes credentials or skips a check",
                generation,
                now,
            );
        }
    } else {
        let message = format!("allowed by allowInsecure: {}", insecure.join("; "));
        if previous != Some(true) {
            notes.push(Note::warning(
                "InsecureConnection",
                "Validate",
                message.clone(),
            ));
        }
        set_condition(
            &mut status.conditions,
            "InsecureConnection",
            true,
            "AllowInsecure",
            message,
            generation,
            now,
        );
    }
    status.source_cluster_id = facts.source.id.clone().or(status.source_cluster_id);
    status.destination_cluster_id = facts
        .destination
        .id
        .clone()
        .or(status.destination_cluster_id);

    let reachable = facts.source.ok && facts.destination.ok;
    if !reachable {
        set_condition(
            &mut status.conditions,
            "Synced",
            false,
            "ClusterUnavailable",
            "a cluster is not reachable",
            generation,
            now,
        );
    } else if let Some(run) = facts.sync {
        apply_outcomes(&mut status.sync, run, &now.0.to_string());
        let failed: Vec<String> = run
            .parts
            .iter()
            .filter_map(|(part, o)| o.as_ref().err().map(|e| format!("{part}: {e}")))
            .chain(run.topics.as_ref().err().map(|e| format!("topics: {e}")))
            .collect();
        if failed.is_empty() {
            set_condition(
                &mut status.conditions,
                "Synced",
                true,
                "Synced",
                "every enabled sync part succeeded",
                generation,
                now,
            );
        } else {
            let message = failed.join("; ");
            notes.push(Note::warning("SyncFailed", "Sync", message.clone()));
            set_condition(
                &mut status.conditions,
                "Synced",
                false,
                "SyncFailed",
                message,
                generation,
                now,
            );
        }
    }

    // Mirror-wide counts from the topics' counts (a large topic lists only some partitions).
    status.topics = facts.topics.len() as i32;
    status.partitions = facts.topics.iter().fold(Default::default(), |acc, t| {
        let counts = t.status.as_ref().map(|s| s.counts()).unwrap_or_default();
        add_counts(&acc, &counts)
    });
    status.partitions_summary = Some(format!(
        "{}/{}",
        status.partitions.mirroring, status.partitions.total
    ));
    status.max_lag = facts
        .topics
        .iter()
        .filter_map(|t| t.status.as_ref().and_then(|s| s.max_lag))
        .max();
    rollout_condition(&mut status, facts.rollout, generation, now);
    let health = mirror_health(facts, &status.partitions);
    set_health(&mut status.conditions, &health, generation, now);
    (status, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Cause, KafkaError};
    use k8s_openapi::jiff::Timestamp;
    use kmirror_crds::v1alpha1::{MirrorTopicStatus, PartitionStatus};

    fn mirror() -> ClusterMirror {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
            "metadata": {"name": "dr", "namespace": "ns", "generation": 2},
            "spec": {"source": {"bootstrapServers": "s:9092"},
                     "destination": {"bootstrapServers": "d:9092"}}
        }))
        .unwrap()
    }

    fn reach(ok: bool) -> Reach {
        Reach {
            ok,
            reason: if ok { "Connected" } else { "Unreachable" }.into(),
            message: if ok { "cluster c answers" } else { "no answer" }.into(),
            id: ok.then(|| "c".to_string()),
        }
    }

    fn topic(states: &[PartitionState]) -> MirrorTopic {
        let mut t: MirrorTopic = serde_json::from_value(serde_json::json!({
            "apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"mirror": "dr", "sourceTopic": "t"}
        }))
        .unwrap();
        t.status = Some(MirrorTopicStatus {
            partitions: states
                .iter()
                .enumerate()
                .map(|(i, s)| PartitionStatus {
                    partition: i as i32,
                    state: *s,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        t
    }

    fn condition<'a>(s: &'a ClusterMirrorStatus, type_: &str) -> (&'a str, &'a str) {
        let c = s.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn an_allowed_insecure_connection_is_a_condition_and_one_warning() {
        let now = Time(Timestamp::from_second(100).unwrap());
        let up = reach(true);
        let facts = Facts {
            source: &up,
            destination: &up,
            sync: None,
            topics: &[],
            rollout: None,
        };
        let mut cm = mirror();
        let (secure, notes) = status(&cm, &facts, &now);
        assert!(notes.is_empty());
        assert!(
            !secure
                .conditions
                .iter()
                .any(|c| c.type_ == "InsecureConnection")
        );
        cm.spec.destination = serde_json::from_value(serde_json::json!({
            "bootstrapServers": "d:9092", "allowInsecure": true,
            "sasl": {"mechanism": "PLAIN", "username": "u", "password": {"name": "s", "key": "p"}}
        }))
        .unwrap();
        let (insecure, notes) = status(&cm, &facts, &now);
        assert_eq!(
            condition(&insecure, "InsecureConnection"),
            ("True", "AllowInsecure")
        );
        let message = &insecure
            .conditions
            .iter()
            .find(|c| c.type_ == "InsecureConnection")
            .unwrap()
            .message;
        assert!(
            message.contains("spec.destination: SASL without TLS"),
            "{message}"
        );
        assert_eq!(notes.len(), 1, "one Warning when it becomes insecure");
        assert_eq!(notes[0].reason, "InsecureConnection");
        cm.status = Some(insecure);
        let (_, notes) = status(&cm, &facts, &now);
        assert!(notes.is_empty(), "no repeat while it stays so");
        cm.spec.destination.sasl = None;
        let (fixed, _) = status(&cm, &facts, &now);
        assert_eq!(condition(&fixed, "InsecureConnection"), ("False", "Secure"));
    }

    #[test]
    fn an_unreachable_cluster_is_reported_once_and_makes_the_mirror_unready() {
        let now = Time(Timestamp::from_second(100).unwrap());
        let (up, down) = (reach(true), reach(false));
        let topics = [topic(&[PartitionState::Mirroring])];
        let facts = Facts {
            source: &up,
            destination: &down,
            sync: None,
            topics: &topics,
            rollout: None,
        };
        let mut cm = mirror();
        let (status, notes) = status(&cm, &facts, &now);
        assert_eq!(
            condition(&status, "DestinationReachable"),
            ("False", "Unreachable")
        );
        assert_eq!(condition(&status, "Ready"), ("False", "ClusterUnavailable"));
        assert_eq!(
            condition(&status, "Synced"),
            ("False", "ClusterUnavailable")
        );
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].text, "destination: no answer");
        cm.status = Some(status);
        let (_, notes) = super::status(&cm, &facts, &now);
        assert!(notes.is_empty(), "reported once, not on every reconcile");
    }

    #[test]
    fn a_failed_sync_part_is_named_and_failed_partitions_are_counted() {
        let now = Time(Timestamp::from_second(100).unwrap());
        let up = reach(true);
        let topics = [topic(&[PartitionState::Mirroring, PartitionState::Failed])];
        let run = SyncRun {
            topics: Ok("1 matching source topics, 0 new".into()),
            parts: Outcomes::from([
                (SyncPart::TopicConfigs, Ok("1 topics in sync".into())),
                (
                    SyncPart::ConsumerGroups,
                    Err(Cause::Kafka(KafkaError {
                        cluster: "source",
                        message: "listing source groups: timed out".into(),
                    })),
                ),
            ]),
        };
        let facts = Facts {
            source: &up,
            destination: &up,
            sync: Some(&run),
            topics: &topics,
            rollout: None,
        };
        let (status, notes) = status(&mirror(), &facts, &now);
        let synced = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Synced")
            .unwrap();
        assert_eq!(
            synced.message,
            "consumerGroups: source cluster: listing source groups: timed out"
        );
        assert_eq!(notes[0].reason, "SyncFailed");
        assert_eq!(condition(&status, "Ready"), ("False", "PartitionsFailed"));
        assert_eq!((status.partitions.total, status.partitions.failed), (2, 1));
        assert_eq!(status.partitions_summary.as_deref(), Some("1/2"));
        assert!(status.sync.consumer_groups.unwrap().last_error.is_some());
        assert!(status.sync.topic_configs.unwrap().last_error.is_none());
        assert!(unsettled(&topics));
    }

    #[test]
    fn a_topic_listing_only_some_partitions_counts_them_all() {
        use PartitionState::*;
        let now = Time(Timestamp::from_second(100).unwrap());
        let up = reach(true);
        // 12 partitions, 5 listed (the worst): 2 STOPPING, 3 STOPPED; 7 STOPPED not listed.
        let mut big = topic(&[Stopping, Stopping, Stopped, Stopped, Stopped]);
        let st = big.status.as_mut().unwrap();
        st.partitions_omitted = 7;
        st.partition_counts = Some(PartitionCounts {
            total: 12,
            stopping: 2,
            stopped: 10,
            ..Default::default()
        });
        let topics = [big.clone(), topic(&[Stopped])];
        let facts = Facts {
            source: &up,
            destination: &up,
            sync: None,
            topics: &topics,
            rollout: None,
        };
        let (counted, _) = status(&mirror(), &facts, &now);
        assert_eq!(
            (counted.partitions.total, counted.partitions.stopped),
            (13, 11)
        );
        assert!(unsettled(&topics), "2 partitions still STOPPING");
        let st = big.status.as_mut().unwrap();
        st.partitions.iter_mut().for_each(|p| p.state = Stopped);
        st.partition_counts = Some(PartitionCounts {
            total: 12,
            stopped: 12,
            ..Default::default()
        });
        let topics = [big];
        assert!(!unsettled(&topics));
        let down = reach(false);
        let facts = Facts {
            source: &down,
            destination: &up,
            sync: None,
            topics: &topics,
            rollout: None,
        };
        let (failed_over, _) = status(&mirror(), &facts, &now);
        assert_eq!(condition(&failed_over, "Ready"), ("True", "FailedOver"));
    }

    #[test]
    fn the_mirror_is_ready_only_when_every_topic_has_settled() {
        use PartitionState::*;
        let (up, down) = (reach(true), reach(false));
        let mut stuck = topic(&[Mirroring, Failed]);
        if let Some(st) = stuck.status.as_mut() {
            st.partitions[1].retry_attempt = Some(-1);
        }
        let retrying = topic(&[Mirroring, Failed]);
        let mut unobserved = topic(&[]);
        unobserved.status = None;
        #[rustfmt::skip]
        type Row<'a> = (&'a str, &'a Reach, Vec<MirrorTopic>, Expect<'a>);
        type Expect<'a> = ((bool, bool, bool), &'a str, &'a str);
        let table: Vec<Row> = vec![
            // name, source, topics, (ready, reconciling, stalled), reason, message contains
            (
                "all mirroring",
                &up,
                vec![topic(&[Mirroring]), topic(&[Mirroring, Mirroring])],
                (
                    (true, false, false),
                    "Mirroring",
                    "2 topics, 3 of 3 partitions mirroring",
                ),
            ),
            (
                "a topic preparing",
                &up,
                vec![topic(&[Mirroring]), topic(&[Preparing])],
                ((false, true, false), "Progressing", "1 PREPARING"),
            ),
            (
                "a topic without status",
                &up,
                vec![topic(&[Mirroring]), unobserved],
                (
                    (false, true, false),
                    "Progressing",
                    "1 topics without status yet",
                ),
            ),
            (
                "stopping",
                &up,
                vec![topic(&[Stopping, Stopped])],
                ((false, true, false), "Progressing", "1 STOPPING"),
            ),
            (
                "a partition failed for good",
                &up,
                vec![stuck],
                (
                    (false, false, true),
                    "PartitionsFailed",
                    "not retried without a person: t[1]",
                ),
            ),
            (
                "a partition retrying",
                &up,
                vec![retrying],
                ((false, true, false), "PartitionsFailed", "retrying"),
            ),
            (
                "failed over, the source gone",
                &down,
                vec![topic(&[Stopped, Stopped])],
                (
                    (true, false, false),
                    "FailedOver",
                    "all 2 partitions failed over",
                ),
            ),
            (
                "mirroring, the source gone",
                &down,
                vec![topic(&[Mirroring])],
                (
                    (false, true, false),
                    "ClusterUnavailable",
                    "source: no answer",
                ),
            ),
        ];
        for (name, source, topics, ((ready, reconciling, stalled), reason, message)) in table {
            let facts = Facts {
                source,
                destination: &up,
                sync: None,
                topics: &topics,
                rollout: None,
            };
            let counts = topics.iter().fold(PartitionCounts::default(), |acc, t| {
                let states = t
                    .status
                    .iter()
                    .flat_map(|s| s.partitions.iter().map(|p| p.state));
                add_counts(&acc, &crate::status::count(states))
            });
            let h = mirror_health(&facts, &counts);
            assert_eq!(
                (h.ready, h.reconciling, h.stalled),
                (ready, reconciling, stalled),
                "{name}"
            );
            assert_eq!(h.reason, reason, "{name}");
            assert!(h.message.contains(message), "{name}: {}", h.message);
        }
        let invalid = invalid(
            &mirror(),
            "spec.source is empty",
            &Time(Timestamp::from_second(1).unwrap()),
        );
        assert_eq!(condition(&invalid, "Stalled"), ("True", "InvalidSpec"));
    }

    #[test]
    fn a_stalled_rollout_is_a_condition_naming_the_pod_until_the_next_rollout() {
        let cm = mirror();
        let (ok, now) = (
            reach(true),
            Time(Timestamp::from_second(1_700_000_000).unwrap()),
        );
        let with = |rollout: Option<&crate::rollout::Summary>| {
            let facts = Facts {
                source: &ok,
                destination: &ok,
                sync: None,
                topics: &[],
                rollout,
            };
            status(&cm, &facts, &now).0
        };
        let none = with(None);
        assert!(
            none.conditions
                .iter()
                .all(|c| c.type_ != "FetcherRolloutStalled"),
            "no rollout, no condition"
        );
        let stalled = crate::rollout::Summary {
            stalled: Some("fetcher pod t-fetcher-2: not caught up after 600s: x".into()),
            active: true,
        };
        let s = with(Some(&stalled));
        let (status_, reason, message) = {
            let c = s
                .conditions
                .iter()
                .find(|c| c.type_ == "FetcherRolloutStalled")
                .unwrap();
            (c.status.clone(), c.reason.clone(), c.message.clone())
        };
        assert_eq!(
            (status_.as_str(), reason.as_str()),
            ("True", "ReplacementNotCaughtUp")
        );
        assert!(message.contains("t-fetcher-2"), "{message}");
        let fine = crate::rollout::Summary::default();
        let s = with(Some(&fine));
        assert_eq!(
            condition(&s, "FetcherRolloutStalled"),
            ("False", "RolledOut")
        );
    }
}
