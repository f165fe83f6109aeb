//! A `MirrorTopic`'s status, projected from its partitions' records and what the reconcile has to
//! say (notes, a problem). Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kmirror_crds::v1alpha1::{MirrorTopic, MirrorTopicStatus, PartitionState, PartitionStatus};
pub use kmirror_state::partition_view::partition_status;
use kmirror_state::records::{FetcherStatus, PartitionRecords, StopReason};

use crate::lifecycle::settled_state;
use crate::status::{Health, phase, set_condition, set_health, truncate};

/// What a topic's status is made of.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Every partition's status.
    pub partitions: Vec<PartitionStatus>,
    /// Why each stopped partition stopped ([`stop_reason`]): metrics and condition messages say
    /// it; the status keeps it in words (`lastError`).
    pub reasons: BTreeMap<i32, StopReason>,
    /// Progress notes (draining, waiting for a retry, failback).
    pub notes: Vec<String>,
    /// Why the topic cannot be mirrored now: (condition reason, message).
    pub problem: Option<(String, String)>,
    /// The source topic's ID, as described now or as the fetchers recorded it (none: keep the
    /// one shown).
    pub source_topic_id: Option<String>,
    /// Replicas of the destination topic's partitions, as described now (none: keep the ones
    /// shown).
    pub destination_replicas: Option<usize>,
}

impl Report {
    /// Adds (or replaces) partition `p`'s status and stop reason, from its records.
    pub fn set(
        &mut self,
        p: i32,
        records: &PartitionRecords,
        fetcher_pod: Option<String>,
        now_ms: i64,
    ) {
        let status = partition_status(p, records, fetcher_pod, now_ms);
        match stop_reason(records) {
            Some(r) => self.reasons.insert(p, r),
            None => self.reasons.remove(&p),
        };
        match self.partitions.iter_mut().find(|s| s.partition == p) {
            Some(s) => *s = status,
            None => self.partitions.push(status),
        }
    }

    /// The stop reason of partition `p` (`Error` when a FAILED partition has none recorded).
    pub fn reason(&self, p: &PartitionStatus) -> &'static str {
        self.reasons
            .get(&p.partition)
            .map_or("Error", |r| r.as_str())
    }

    /// A topic that cannot be reconciled now, for `reason`.
    pub fn problem(reason: &str, message: &str) -> Report {
        Report {
            problem: Some((reason.to_string(), message.to_string())),
            ..Default::default()
        }
    }
}

/// A state's name as a condition reason: `MIRRORING` → `Mirroring`.
pub fn phase_word(s: PartitionState) -> String {
    let name = s.as_str();
    format!("{}{}", &name[..1], name[1..].to_lowercase())
}

/// Why a partition stopped: the reason recorded with its FAILED (or STOPPING/STOPPED) state, or
/// — for a FAILED state recorded without one — what its fetcher reported, else `Error`.
pub fn stop_reason(r: &PartitionRecords) -> Option<StopReason> {
    let state = r.state.as_ref()?;
    let by_fetcher = r
        .position
        .as_ref()
        .filter(|pos| pos.status == FetcherStatus::Failed)
        .and_then(|pos| pos.error.as_ref())
        .map(|e| e.reason);
    match state.state {
        PartitionState::Failed => Some(state.reason.or(by_fetcher).unwrap_or(StopReason::Error)),
        PartitionState::Stopping | PartitionState::Stopped => state.reason,
        _ => None,
    }
}

/// Condition reasons that mean the topic cannot be mirrored until a person changes something.
const NEEDS_A_PERSON: [&str; 4] = [
    "InvalidSpec",
    "InvalidMirror",
    "SourceTopicTaken",
    "ReplicationFactorTooLarge",
];

/// One partition that FAILED, in one line: "partition 3 FAILED (RecordRefused), last mirrored
/// offset 41: <why and the fix>".
fn failed_line(p: &PartitionStatus, reason: &str) -> String {
    let mut line = format!("partition {} FAILED ({reason})", p.partition);
    if let Some(lmo) = p.last_mirrored_offset.filter(|o| *o >= 0) {
        line.push_str(&format!(", last mirrored offset {lmo}"));
    }
    match p.retry_attempt {
        Some(a) if a > 0 => line.push_str(&format!(", retry {a}")),
        _ => {}
    }
    if let Some(e) = p.last_error.as_deref().filter(|e| !e.is_empty()) {
        line.push_str(": ");
        line.push_str(e);
    }
    line
}

/// The FAILED partitions in one line: the first in full, the others by number.
fn failed_message(report: &Report, failed: &[&PartitionStatus]) -> String {
    let Some(first) = failed.first() else {
        return String::new();
    };
    let mut message = failed_line(first, report.reason(first));
    if failed.len() > 1 {
        let others: Vec<String> = failed[1..]
            .iter()
            .take(10)
            .map(|p| p.partition.to_string())
            .collect();
        let more = if failed.len() > 11 { ", …" } else { "" };
        message = format!(
            "{}; also FAILED: partitions {}{more}",
            truncate(&message, 400),
            others.join(", ")
        );
    }
    truncate(&message, 512)
}

/// What `Ready`, `Reconciling` and `Stalled` say of a topic. Ready: every partition in the state
/// `spec.state` asks for (a topic failed over is Ready even when its source is gone: it is a
/// primary now). Stalled: a partition FAILED for a reason that is not retried, or a spec that
/// cannot work. Reconciling: anything else on its way (PREPARING, STOPPING, retries).
pub fn topic_health(desired: kmirror_crds::v1alpha1::DesiredState, report: &Report) -> Health {
    let settled = settled_state(desired);
    let partitions = &report.partitions;
    if let Some((reason, message)) = &report.problem {
        return if NEEDS_A_PERSON.contains(&reason.as_str()) {
            Health::stalled(reason, message.clone())
        } else {
            Health::reconciling(reason, message.clone())
        };
    }
    let failed: Vec<&PartitionStatus> = partitions
        .iter()
        .filter(|p| p.state == PartitionState::Failed)
        .collect();
    let stuck: Vec<&PartitionStatus> = failed
        .iter()
        .copied()
        .filter(|p| p.retry_attempt == Some(-1))
        .collect();
    if !stuck.is_empty() {
        // The notes say what a person can do (e.g. fail over immediately).
        let mut message = failed_message(report, &stuck);
        if !report.notes.is_empty() {
            message = truncate(&format!("{}; {}", report.notes.join("; "), message), 512);
        }
        return Health::stalled("PartitionFailed", message);
    }
    if !failed.is_empty() {
        // The notes say when the next retry is due.
        let mut message = failed_message(report, &failed);
        if !report.notes.is_empty() {
            message = format!("{}; {}", report.notes.join("; "), message);
        }
        return Health::reconciling("PartitionRetrying", truncate(&message, 512));
    }
    if !partitions.is_empty() && partitions.iter().all(|p| p.state == settled) {
        return Health::ready(
            &phase_word(settled),
            format!("all {} partitions {}", partitions.len(), settled),
        );
    }
    let message = if report.notes.is_empty() {
        let moving = partitions.iter().filter(|p| p.state != settled).count();
        if partitions.is_empty() {
            format!("partitions moving to {settled}")
        } else {
            format!(
                "{moving} of {} partitions moving to {settled} ({})",
                partitions.len(),
                phase(partitions).to_uppercase()
            )
        }
    } else {
        report.notes.join("; ")
    };
    Health::reconciling("Progressing", truncate(&message, 512))
}

/// The status of `mt` for `report`, keeping condition transition times from the current status.
pub fn topic_status(mt: &MirrorTopic, report: Report, now: &Time) -> MirrorTopicStatus {
    let generation = mt.metadata.generation;
    let old = mt.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone();
    let health = topic_health(mt.spec.state, &report);
    set_health(&mut conditions, &health, generation, now);
    let failed: Vec<&PartitionStatus> = report
        .partitions
        .iter()
        .filter(|p| p.state == PartitionState::Failed)
        .collect();
    if failed.is_empty() {
        set_condition(
            &mut conditions,
            "Failed",
            false,
            "NoFailures",
            "no partition failed",
            generation,
            now,
        );
    } else {
        set_condition(
            &mut conditions,
            "Failed",
            true,
            "PartitionFailed",
            failed_message(&report, &failed),
            generation,
            now,
        );
    }
    let identical = (!report.partitions.is_empty()).then(|| {
        report
            .partitions
            .iter()
            .all(|p| p.offsets_identical.unwrap_or(true))
    });
    let mirroring = report
        .partitions
        .iter()
        .filter(|p| p.state == PartitionState::Mirroring)
        .count();
    let keep_old = report.partitions.is_empty() && report.problem.is_some();
    MirrorTopicStatus {
        observed_generation: generation,
        phase: Some(if keep_old {
            "Pending".to_string()
        } else {
            phase(&report.partitions)
        }),
        conditions,
        source_topic_id: report
            .source_topic_id
            .clone()
            .or(old.source_topic_id.clone()),
        destination_topic: Some(mt.destination_topic().to_string()),
        partitions_summary: if keep_old && old.partitions_summary.is_some() {
            old.partitions_summary.clone()
        } else {
            Some(format!("{mirroring}/{}", report.partitions.len()))
        },
        partition_counts: if keep_old {
            old.partition_counts.clone()
        } else {
            (!report.partitions.is_empty())
                .then(|| crate::status::count(report.partitions.iter().map(|p| p.state)))
        },
        partitions_omitted: if keep_old { old.partitions_omitted } else { 0 },
        max_lag: report.partitions.iter().filter_map(|p| p.lag).max(),
        offsets_identical: identical,
        partitions: if keep_old {
            old.partitions.clone()
        } else {
            report.partitions
        },
        destination_replication_factor: report
            .destination_replicas
            .filter(|n| *n > 0)
            .map(|n| n as i32)
            .or(old.destination_replication_factor),
        configs_not_copied: old.configs_not_copied.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use kmirror_crds::v1alpha1::{OpenTransactionStatus, PartitionCounts};
    use kmirror_state::records::{POSITION_STALE_AFTER, PartitionStateRecord, PositionRecord};

    fn topic(json: serde_json::Value) -> MirrorTopic {
        serde_json::from_value(json).unwrap()
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn a_stopped_partition_shows_its_last_mirrored_offset_and_a_mirroring_one_its_lag() {
        let stopped = PartitionRecords {
            state: Some(PartitionStateRecord {
                state: PartitionState::Stopped,
                state_epoch: 4,
                last_mirrored_offset: Some(99),
                ..Default::default()
            }),
            position: Some(PositionRecord {
                last_mirrored_offset: 97,
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = partition_status(0, &stopped, None, 0);
        assert_eq!(
            (s.state, s.state_epoch, s.last_mirrored_offset),
            (PartitionState::Stopped, 4, Some(99))
        );
        let mirroring = PartitionRecords {
            state: Some(PartitionStateRecord {
                state: PartitionState::Mirroring,
                ..Default::default()
            }),
            position: Some(PositionRecord {
                next_source_offset: 90,
                source_high_watermark: Some(100),
                offsets_identical: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = partition_status(1, &mirroring, Some("t-fetcher-1".into()), 0);
        assert_eq!(
            (s.lag, s.fetcher_pod.as_deref()),
            (Some(10), Some("t-fetcher-1"))
        );
    }

    #[test]
    fn an_open_source_transaction_is_waited_for_not_lag() {
        let now = 1_700_000_000_000;
        let waiting = PartitionRecords {
            state: Some(PartitionStateRecord {
                state: PartitionState::Mirroring,
                ..Default::default()
            }),
            position: Some(PositionRecord {
                next_source_offset: 150,
                source_position: Some(150),
                source_high_watermark: Some(763),
                source_last_stable_offset: Some(150),
                open_transaction: Some(kmirror_state::records::OpenTransaction {
                    from_offset: 150,
                    since_ms: now - 192_000,
                }),
                updated_at_ms: now - 1_000,
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = partition_status(0, &waiting, None, now);
        assert_eq!(s.state, PartitionState::Mirroring);
        assert_eq!(s.lag, Some(0), "caught up with what can be read");
        assert_eq!(
            (s.source_log_end_offset, s.source_last_stable_offset),
            (Some(763), Some(150))
        );
        assert_eq!(
            s.open_source_transaction,
            Some(OpenTransactionStatus {
                from_offset: 150,
                since: "2023-11-14T22:10:08Z".into(),
            })
        );
        assert_eq!(s.last_error, None, "nothing is wrong");
        // Behind the last stable offset: that much lag.
        let mut behind = waiting.clone();
        behind.position.as_mut().unwrap().source_position = Some(100);
        assert_eq!(partition_status(0, &behind, None, now).lag, Some(50));
    }

    #[test]
    fn a_position_the_fetcher_stopped_refreshing_shows_no_lag_and_says_why() {
        let at = |state, updated_at_ms| PartitionRecords {
            state: Some(PartitionStateRecord {
                state,
                ..Default::default()
            }),
            position: Some(PositionRecord {
                next_source_offset: 100,
                source_high_watermark: Some(100),
                updated_at_ms,
                ..Default::default()
            }),
            ..Default::default()
        };
        let now = 1_000_000_000;
        let stale = POSITION_STALE_AFTER.as_millis() as i64 + 5_000;
        let fresh = partition_status(0, &at(PartitionState::Mirroring, now - 1_000), None, now);
        assert_eq!((fresh.lag, fresh.last_error), (Some(0), None));
        let old = partition_status(0, &at(PartitionState::Mirroring, now - stale), None, now);
        assert_eq!(old.lag, None, "not caught up: unknown");
        let error = old.last_error.unwrap();
        assert!(
            error.contains("has not reported its position for 95s"),
            "{error}"
        );
        // A paused or stopped partition has no running fetcher: its last position is final.
        let paused = partition_status(0, &at(PartitionState::Paused, now - stale), None, now);
        assert_eq!((paused.lag, paused.last_error), (Some(0), None));
    }

    #[test]
    fn a_problem_keeps_the_partitions_already_shown() {
        let mut mt = topic(serde_json::json!({
            "apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
            "metadata": {"name": "t", "namespace": "ns", "generation": 3},
            "spec": {"mirror": "dr", "sourceTopic": "t"}
        }));
        mt.status = Some(MirrorTopicStatus {
            partitions: vec![PartitionStatus {
                partition: 0,
                state: PartitionState::Mirroring,
                ..Default::default()
            }],
            ..Default::default()
        });
        mt.status.as_mut().unwrap().partition_counts = Some(PartitionCounts {
            total: 3,
            mirroring: 3,
            ..Default::default()
        });
        mt.status.as_mut().unwrap().partitions_omitted = 2;
        mt.status.as_mut().unwrap().partitions_summary = Some("3/3".into());
        let s = topic_status(&mt, Report::problem("MirrorNotFound", "gone"), &at(10));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(s.partitions.len(), 1);
        assert_eq!(
            (s.partition_counts.map(|c| c.total), s.partitions_omitted),
            (Some(3), 2),
            "the counts of the partitions shown, with those not listed"
        );
        assert_eq!(s.partitions_summary.as_deref(), Some("3/3"));
        assert_eq!(s.observed_generation, Some(3));
        let ready = &s.conditions[0];
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status.as_str(),
                ready.reason.as_str()
            ),
            ("Ready", "False", "MirrorNotFound")
        );
    }

    fn part(p: i32, state: PartitionState) -> PartitionStatus {
        PartitionStatus {
            partition: p,
            state,
            ..Default::default()
        }
    }

    /// A partition as a report holds it: its status and stop reason.
    type Held = (PartitionStatus, Option<StopReason>);

    fn ok(p: i32, state: PartitionState) -> Held {
        (part(p, state), None)
    }

    fn failed(p: i32, retry: i32, reason: StopReason, error: &str) -> Held {
        let status = PartitionStatus {
            retry_attempt: Some(retry),
            last_error: Some(error.into()),
            last_mirrored_offset: Some(2168),
            ..part(p, PartitionState::Failed)
        };
        (status, Some(reason))
    }

    fn report(held: Vec<Held>) -> Report {
        let mut r = Report::default();
        for (status, reason) in held {
            if let Some(reason) = reason {
                r.reasons.insert(status.partition, reason);
            }
            r.partitions.push(status);
        }
        r
    }

    #[test]
    fn ready_reconciling_and_stalled_follow_the_partitions() {
        use PartitionState::*;
        use kmirror_crds::v1alpha1::DesiredState as D;
        let refused = "record at offset 2169 is 2 MB, over the destination's max.message.bytes \
                       1 MB; raise it on the destination topic, then kubectl mirror retry";
        type Row<'a> = (
            &'a str,
            D,
            Vec<Held>,
            Option<(&'a str, &'a str)>,
            Expect<'a>,
        );
        type Expect<'a> = ((bool, bool, bool), &'a str, &'a str);
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // name, spec.state, partitions, problem, (ready, reconciling, stalled), reason, message contains
            ("all mirroring", D::Mirroring, vec![ok(0, Mirroring), ok(1, Mirroring)], None,
             ((true, false, false), "Mirroring", "all 2 partitions MIRRORING")),
            ("still preparing", D::Mirroring, vec![ok(0, Mirroring), ok(1, Preparing)], None,
             ((false, true, false), "Progressing", "1 of 2 partitions moving to MIRRORING (PREPARING)")),
            ("no partitions yet", D::Mirroring, vec![], None,
             ((false, true, false), "Progressing", "partitions moving to MIRRORING")),
            ("failing over", D::Stopped, vec![ok(0, Stopping), ok(1, Stopped)], None,
             ((false, true, false), "Progressing", "moving to STOPPED")),
            ("failed over, source gone or not", D::Stopped, vec![ok(0, Stopped), ok(1, Stopped)], None,
             ((true, false, false), "Stopped", "all 2 partitions STOPPED")),
            ("paused", D::Paused, vec![ok(0, Paused)], None,
             ((true, false, false), "Paused", "all 1 partitions PAUSED")),
            ("a refused record stalls", D::Mirroring,
             vec![ok(0, Mirroring), failed(1, -1, StopReason::RecordRefused, refused)], None,
             ((false, false, true), "PartitionFailed",
             "partition 1 FAILED (RecordRefused), last mirrored offset 2168: record at offset 2169")),
            ("a retried failure reconciles", D::Mirroring,
             vec![ok(0, Mirroring), failed(1, 2, StopReason::Error, "broker down")], None,
             ((false, true, false), "PartitionRetrying",
             "partition 1 FAILED (Error), last mirrored offset 2168, retry 2: broker down")),
            ("an invalid spec stalls", D::Mirroring, vec![], Some(("InvalidSpec", "spec.sourceTopic is empty")),
             ((false, false, true), "InvalidSpec", "spec.sourceTopic is empty")),
            ("an unreachable destination reconciles", D::Mirroring, vec![],
             Some(("DestinationUnreachable", "destination unavailable: timed out")),
             ((false, true, false), "DestinationUnreachable", "timed out")),
        ];
        for (
            name,
            desired,
            partitions,
            problem,
            ((ready, reconciling, stalled), reason, message),
        ) in table
        {
            let report = Report {
                problem: problem.map(|(r, m)| (r.to_string(), m.to_string())),
                ..report(partitions)
            };
            let h = topic_health(desired, &report);
            assert_eq!(
                (h.ready, h.reconciling, h.stalled),
                (ready, reconciling, stalled),
                "{name}"
            );
            assert_eq!(h.reason, reason, "{name}");
            assert!(h.message.contains(message), "{name}: {}", h.message);
            assert!(
                !h.message.contains('\n') && h.message.len() <= 512,
                "{name}"
            );
        }
    }

    #[test]
    fn many_failed_partitions_make_one_short_line() {
        let r = report(
            (0..40)
                .map(|p| {
                    failed(
                        p,
                        -1,
                        StopReason::ForeignWrite,
                        &"another writer at offset 7; ".repeat(20),
                    )
                })
                .collect(),
        );
        let refs: Vec<&PartitionStatus> = r.partitions.iter().collect();
        let m = failed_message(&r, &refs);
        assert!(m.starts_with("partition 0 FAILED (ForeignWrite)"), "{m}");
        assert!(m.len() <= 512, "{}", m.len());
        assert!(m.contains("also FAILED: partitions 1, 2"), "{m}");
        assert!(m.ends_with(", …"), "{m}");
    }

    #[test]
    fn a_failed_partition_shows_its_stop_reason_and_one_line() {
        use kmirror_state::records::FetcherError;
        let records = PartitionRecords {
            state: Some(PartitionStateRecord {
                state: PartitionState::Failed,
                retry_attempt: -1,
                error: Some(
                    "{\"level\":\"ERROR\",\"fields\":{\"message\":\"stopped\",\"error\":\"x\"}}\n"
                        .into(),
                ),
                reason: Some(StopReason::SourceDiverged),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = partition_status(0, &records, None, 0);
        assert_eq!(stop_reason(&records), Some(StopReason::SourceDiverged));
        assert_eq!(s.last_error.as_deref(), Some("stopped: x"));
        // A record written before reasons were recorded: the fetcher's position says why.
        let old = PartitionRecords {
            state: Some(PartitionStateRecord {
                state: PartitionState::Failed,
                retry_attempt: -1,
                error: Some("someone wrote".into()),
                ..Default::default()
            }),
            position: Some(PositionRecord {
                status: FetcherStatus::Failed,
                error: Some(FetcherError {
                    reason: StopReason::ForeignWrite,
                    message: "someone wrote".into(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(stop_reason(&old), Some(StopReason::ForeignWrite));
        let mut r = Report::default();
        r.set(0, &old, None, 0);
        assert_eq!(r.reason(&r.partitions[0]), "ForeignWrite");
        r.set(0, &PartitionRecords::default(), None, 0);
        assert_eq!(r.partitions.len(), 1, "replaced, not added");
        assert!(r.reasons.is_empty());
        let mirroring = PartitionRecords {
            state: Some(PartitionStateRecord {
                state: PartitionState::Mirroring,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(stop_reason(&mirroring), None);
    }
}
