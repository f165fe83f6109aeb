//! A `MirrorTopic`'s status, projected from its partitions' records and what the reconcile has to
//! say (notes, a problem). Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kmirror_crds::v1alpha1::{
    DivergenceStatus, MirrorTopic, MirrorTopicStatus, PartitionState, PartitionStatus,
};
use kmirror_state::records::PartitionRecords;

use crate::lifecycle::settled_state;
use crate::status::{phase, set_condition};

/// What a topic's status is made of.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Every partition's status.
    pub partitions: Vec<PartitionStatus>,
    /// Progress notes (draining, waiting for a retry, failback).
    pub notes: Vec<String>,
    /// Why the topic cannot be mirrored now: (condition reason, message).
    pub problem: Option<(String, String)>,
}

impl Report {
    /// A topic that cannot be reconciled now, for `reason`.
    pub fn problem(reason: &str, message: &str) -> Report {
        Report {
            problem: Some((reason.to_string(), message.to_string())),
            ..Default::default()
        }
    }
}

fn rfc3339(ms: i64) -> Option<String> {
    Timestamp::from_millisecond(ms).ok().map(|t| t.to_string())
}

/// A state's name as a condition reason: `MIRRORING` → `Mirroring`.
pub fn phase_word(s: PartitionState) -> String {
    let name = s.as_str();
    format!("{}{}", &name[..1], name[1..].to_lowercase())
}

/// Projects one partition's status from its records.
pub fn partition_status(
    p: i32,
    r: &PartitionRecords,
    fetcher_pod: Option<String>,
) -> PartitionStatus {
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
            .map(|d| DivergenceStatus {
                from_offset: d.from_offset,
                to_offset: d.to_offset,
                quarantine_topic: d.quarantine_topic.clone(),
                quarantined_records: d.quarantined,
                resolution: d.resolution.clone(),
            }),
    }
}

/// The status of `mt` for `report`, keeping condition transition times from the current status.
pub fn topic_status(mt: &MirrorTopic, report: Report, now: &Time) -> MirrorTopicStatus {
    let generation = mt.metadata.generation;
    let old = mt.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone();
    let settled = settled_state(mt.spec.state);
    let all_settled =
        !report.partitions.is_empty() && report.partitions.iter().all(|p| p.state == settled);
    let failed: Vec<String> = report
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
    match &report.problem {
        Some((reason, message)) => set_condition(
            &mut conditions,
            "Ready",
            false,
            reason,
            message.clone(),
            generation,
            now,
        ),
        None if all_settled => set_condition(
            &mut conditions,
            "Ready",
            true,
            &phase_word(settled),
            format!("all {} partitions {}", report.partitions.len(), settled),
            generation,
            now,
        ),
        None => {
            let message = if report.notes.is_empty() {
                format!("partitions moving to {settled}")
            } else {
                report.notes.join("; ")
            };
            set_condition(
                &mut conditions,
                "Ready",
                false,
                "Progressing",
                message,
                generation,
                now,
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
            now,
        );
    } else {
        set_condition(
            &mut conditions,
            "Failed",
            true,
            "PartitionFailed",
            format!("partition {}", failed.join("; partition ")),
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
        source_topic_id: None,
        destination_topic: Some(mt.destination_topic().to_string()),
        partitions_summary: Some(format!("{mirroring}/{}", report.partitions.len())),
        max_lag: report.partitions.iter().filter_map(|p| p.lag).max(),
        offsets_identical: identical,
        partitions: if keep_old {
            old.partitions.clone()
        } else {
            report.partitions
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::records::{PartitionStateRecord, PositionRecord};

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
        let s = partition_status(0, &stopped, None);
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
        let s = partition_status(1, &mirroring, Some("t-fetcher-1".into()));
        assert_eq!(
            (s.lag, s.fetcher_pod.as_deref()),
            (Some(10), Some("t-fetcher-1"))
        );
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
        let s = topic_status(&mt, Report::problem("MirrorNotFound", "gone"), &at(10));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(s.partitions.len(), 1);
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
}
