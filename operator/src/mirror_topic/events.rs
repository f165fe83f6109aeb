//! What a topic's reconcile tells people and Prometheus: one event per kind of transition (not
//! per partition), one per data loss a fetcher found, partition counts per state, lag, FAILED
//! partitions by reason, transition counters.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_state::records::{PartitionRecords, PartitionStateRecord};

use super::status::{Report, phase_word};
use crate::context::Note;
use crate::metrics::{Metrics, PartitionLabels, StateLabels};
use crate::status::offsets;

/// Events for persisted transitions: one per distinct (from, to, error), so that a 200-partition
/// topic does not flood events. Pure.
pub fn transition_notes(
    before: &BTreeMap<i32, PartitionRecords>,
    writes: &[(i32, PartitionStateRecord)],
) -> Vec<Note> {
    type Key = (
        PartitionState,
        PartitionState,
        Option<&'static str>,
        Option<String>,
    );
    let mut grouped: BTreeMap<Key, Vec<i32>> = BTreeMap::new();
    for (p, r) in writes {
        let from = before
            .get(p)
            .and_then(|x| x.state.as_ref())
            .map_or(PartitionState::Unknown, |s| s.state);
        grouped
            .entry((from, r.state, r.reason.map(|x| x.as_str()), r.error.clone()))
            .or_default()
            .push(*p);
    }
    grouped
        .into_iter()
        .map(|((from, to, reason, error), parts)| {
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
            let mut text = format!("{list}: {from} -> {to}");
            if let Some(r) = reason {
                text.push_str(&format!(" ({r})"));
            }
            if let Some(e) = &error {
                text.push_str(&format!(": {e}"));
            }
            let reason = format!("Partition{}", phase_word(to));
            if to == PartitionState::Failed {
                Note::warning(&reason, "Transition", text)
            } else {
                Note::normal(&reason, "Transition", text)
            }
        })
        .collect()
}

/// Warnings for data losses the fetchers recorded that were not reported yet: source records
/// deleted (retention, DeleteRecords) before they were mirrored and skipped by policy. `reported`
/// holds, per partition, when the last reported loss was found. Pure.
pub fn data_loss_notes(
    records: &BTreeMap<i32, PartitionRecords>,
    reported: &mut BTreeMap<i32, i64>,
) -> Vec<Note> {
    let mut notes = Vec::new();
    for (p, r) in records {
        let Some(loss) = r.position.as_ref().and_then(|pos| pos.data_loss.as_ref()) else {
            continue;
        };
        if reported.get(p) == Some(&loss.at_ms) {
            continue;
        }
        reported.insert(*p, loss.at_ms);
        notes.push(Note::warning(
            "DataLoss",
            "Mirror",
            format!(
                "partition {p}: {} were deleted on the source (retention or DeleteRecords) \
                 before they were mirrored and are skipped; the destination will never have them. \
                 Raise the source topic's retention or fix what holds the mirror back",
                offsets(loss.from_offset, loss.to_offset, Some(loss.records))
            ),
        ));
    }
    notes
}

/// Data losses already reported by this process, per (mirror, topic): partition → when found.
static LOSSES_REPORTED: Mutex<BTreeMap<(String, String), BTreeMap<i32, i64>>> =
    Mutex::new(BTreeMap::new());

/// [`data_loss_notes`] for a topic of a mirror, remembering what this process reported.
pub fn new_data_losses(
    mirror: &str,
    topic: &str,
    records: &BTreeMap<i32, PartitionRecords>,
) -> Vec<Note> {
    let mut all = LOSSES_REPORTED.lock().unwrap_or_else(|p| p.into_inner());
    let reported = all
        .entry((mirror.to_string(), topic.to_string()))
        .or_default();
    data_loss_notes(records, reported)
}

/// Counts persisted transitions by target state.
pub fn count_transitions(
    metrics: &Metrics,
    mirror: &str,
    topic: &str,
    writes: &[(i32, PartitionStateRecord)],
) {
    for (_, r) in writes {
        metrics
            .transitions
            .get_or_create(&StateLabels::new(mirror, topic, r.state.as_str()))
            .inc();
    }
}

/// Sets the per-state partition counts, per-partition lag and the FAILED partitions (with their
/// reason) of a topic.
pub fn record_partitions(metrics: &Metrics, mirror: &str, topic: &str, report: &Report) {
    let statuses = &report.partitions;
    for s in PartitionState::ALL {
        let n = statuses.iter().filter(|p| p.state == s).count() as i64;
        metrics
            .partitions
            .get_or_create(&StateLabels::new(mirror, topic, s.as_str()))
            .set(n);
    }
    for p in statuses {
        let labels = PartitionLabels::new(mirror, topic, p.partition);
        metrics.lag.get_or_create(&labels).set(p.lag.unwrap_or(0));
        metrics
            .lag_seconds
            .get_or_create(&labels)
            .set(p.lag_seconds.unwrap_or(0.0));
    }
    let failed: Vec<(i32, &str)> = statuses
        .iter()
        .filter(|p| p.state == PartitionState::Failed)
        .map(|p| (p.partition, report.reason(p)))
        .collect();
    metrics.set_failed_partitions(mirror, topic, &failed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(s: PartitionState, error: Option<&str>) -> PartitionStateRecord {
        PartitionStateRecord {
            state: s,
            error: error.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn a_data_loss_is_reported_once_with_its_inclusive_range() {
        use kmirror_state::records::{DataLossRecord, PositionRecord};
        let with_loss = |at_ms| PartitionRecords {
            position: Some(PositionRecord {
                data_loss: Some(DataLossRecord {
                    from_offset: 2169,
                    to_offset: 2174,
                    records: 5,
                    message: "records 2169..2174 lost".into(),
                    at_ms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut records = BTreeMap::from([(0, with_loss(10)), (1, PartitionRecords::default())]);
        let mut reported = BTreeMap::new();
        let notes = data_loss_notes(&records, &mut reported);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].warning);
        assert_eq!(notes[0].reason, "DataLoss");
        assert!(
            notes[0]
                .text
                .starts_with("partition 0: offsets 2169–2173 (5 records) were deleted"),
            "{}",
            notes[0].text
        );
        assert!(data_loss_notes(&records, &mut reported).is_empty(), "once");
        records.insert(0, with_loss(20));
        assert_eq!(
            data_loss_notes(&records, &mut reported).len(),
            1,
            "a new loss"
        );
    }

    #[test]
    fn transitions_are_grouped_into_few_events() {
        let before: BTreeMap<i32, PartitionRecords> = (0..20)
            .map(|p| {
                (
                    p,
                    PartitionRecords {
                        state: Some(state(PartitionState::Mirroring, None)),
                        ..Default::default()
                    },
                )
            })
            .collect();
        let mut writes: Vec<(i32, PartitionStateRecord)> = (0..15)
            .map(|p| (p, state(PartitionState::Stopping, None)))
            .collect();
        let mut failed = state(PartitionState::Failed, Some("foreign write"));
        failed.reason = Some(kmirror_state::records::StopReason::ForeignWrite);
        writes.push((15, failed));
        let notes = transition_notes(&before, &writes);
        assert_eq!(notes.len(), 2);
        assert_eq!(notes[0].text, "15 partitions: MIRRORING -> STOPPING");
        assert_eq!(
            (notes[0].reason.as_str(), notes[0].warning),
            ("PartitionStopping", false)
        );
        assert_eq!(
            notes[1].text,
            "partitions 15: MIRRORING -> FAILED (ForeignWrite): foreign write"
        );
        assert!(notes[1].warning);
    }
}
