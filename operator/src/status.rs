//! Status projection: conditions that keep their transition time (with the kstatus trio
//! `Ready`, `Reconciling`, `Stalled`), per-partition status, topic phase, mirror-wide counts, and
//! the wording shared by status and events: one-line messages and offset ranges. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kmirror_crds::v1alpha1::{PartitionCounts, PartitionState, PartitionStatus};
pub use kmirror_state::partition_view::{LINE_MAX, human_line, truncate};

/// Sets (or replaces) a condition, keeping `lastTransitionTime` when the status is unchanged.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) {
    let status_text = if status { "True" } else { "False" };
    let message = truncate(&message.into(), 1024);
    let previous = conditions.iter().find(|c| c.type_ == type_);
    let last_transition_time = match previous {
        Some(c) if c.status == status_text => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    let condition = Condition {
        type_: type_.to_string(),
        status: status_text.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// What the kstatus conditions of an object say: `Ready`, and whether work is in progress
/// (`Reconciling`) or cannot progress without a person (`Stalled`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `Ready` is True.
    pub ready: bool,
    /// `Reconciling` is True.
    pub reconciling: bool,
    /// `Stalled` is True.
    pub stalled: bool,
    /// The reason of `Ready` (and of `Reconciling`/`Stalled` when they are True).
    pub reason: String,
    /// One line for a person.
    pub message: String,
}

impl Health {
    /// Ready.
    pub fn ready(reason: &str, message: impl Into<String>) -> Health {
        Health {
            ready: true,
            reconciling: false,
            stalled: false,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// Not ready yet: work is in progress.
    pub fn reconciling(reason: &str, message: impl Into<String>) -> Health {
        Health {
            ready: false,
            reconciling: true,
            ..Health::ready(reason, message)
        }
    }

    /// Not ready, and it will not be without a person.
    pub fn stalled(reason: &str, message: impl Into<String>) -> Health {
        Health {
            ready: false,
            stalled: true,
            ..Health::ready(reason, message)
        }
    }
}

/// Sets `Ready`, `Reconciling` and `Stalled` (kstatus conventions, so that `kubectl wait
/// --for=condition=Ready`, Flux and Argo CD read them): the two abnormal-true ones are present
/// with status False when they do not apply, every one carries `observedGeneration`.
pub fn set_health(
    conditions: &mut Vec<Condition>,
    health: &Health,
    generation: Option<i64>,
    now: &Time,
) {
    let h = health;
    set_condition(
        conditions,
        "Ready",
        h.ready,
        &h.reason,
        h.message.clone(),
        generation,
        now,
    );
    let (reason, message) = if h.reconciling {
        (h.reason.as_str(), h.message.clone())
    } else {
        ("Settled", "nothing in progress".to_string())
    };
    set_condition(
        conditions,
        "Reconciling",
        h.reconciling,
        reason,
        message,
        generation,
        now,
    );
    let (reason, message) = if h.stalled {
        (h.reason.as_str(), h.message.clone())
    } else {
        ("Progressing", "nothing needs a person".to_string())
    };
    set_condition(
        conditions, "Stalled", h.stalled, reason, message, generation, now,
    );
}

/// The value of a condition, if set.
pub fn condition_is(conditions: &[Condition], type_: &str) -> Option<bool> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status == "True")
}

/// A range of offsets, written so that nobody miscounts it: `from` (inclusive) up to `end`
/// (exclusive) reads "offsets 2169–2173 (5 records)" — inclusive, with an en dash; `records`
/// is the count when it differs from the number of offsets (a compacted or transactional log).
pub fn offsets(from: i64, end: i64, records: Option<i64>) -> String {
    let span = (end - from).max(0);
    let count = records.unwrap_or(span);
    let noun = |n: i64| if n == 1 { "record" } else { "records" };
    match span {
        0 => format!("no offsets (before offset {from})"),
        1 => format!("offset {from} ({count} {})", noun(count)),
        _ => format!("offsets {from}–{} ({count} {})", end - 1, noun(count)),
    }
}

/// A topic's phase: the shared state of its partitions, or the most significant one.
pub fn phase(partitions: &[PartitionStatus]) -> String {
    use PartitionState::*;
    let Some(first) = partitions.first() else {
        return "Pending".to_string();
    };
    let state = if partitions.iter().all(|p| p.state == first.state) {
        first.state
    } else {
        [
            Failed, Stopping, Preparing, Pausing, Unknown, Paused, Mirroring, Stopped,
        ]
        .into_iter()
        .find(|s| partitions.iter().any(|p| p.state == *s))
        .unwrap_or(first.state)
    };
    let name = state.as_str();
    format!("{}{}", &name[..1], name[1..].to_lowercase())
}

/// Counts partitions per state.
pub fn count(partitions: impl IntoIterator<Item = PartitionState>) -> PartitionCounts {
    PartitionCounts::of(partitions)
}

/// Adds two counts.
pub fn add_counts(a: &PartitionCounts, b: &PartitionCounts) -> PartitionCounts {
    a.add(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_on_change() {
        let mut c = Vec::new();
        set_condition(&mut c, "Ready", false, "Starting", "m", Some(1), &t(10));
        set_condition(&mut c, "Ready", false, "Starting", "m2", Some(2), &t(20));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].last_transition_time, t(10));
        assert_eq!(c[0].observed_generation, Some(2));
        set_condition(&mut c, "Ready", true, "Mirroring", "ok", Some(2), &t(30));
        assert_eq!(c[0].last_transition_time, t(30));
        assert_eq!(condition_is(&c, "Ready"), Some(true));
        assert_eq!(condition_is(&c, "Synced"), None);
    }

    #[test]
    fn phase_prefers_the_significant_state() {
        let p = |s| PartitionStatus {
            state: s,
            ..Default::default()
        };
        assert_eq!(phase(&[]), "Pending");
        assert_eq!(
            phase(&[p(PartitionState::Mirroring), p(PartitionState::Mirroring)]),
            "Mirroring"
        );
        assert_eq!(
            phase(&[p(PartitionState::Mirroring), p(PartitionState::Failed)]),
            "Failed"
        );
        assert_eq!(
            phase(&[p(PartitionState::Stopped), p(PartitionState::Stopping)]),
            "Stopping"
        );
    }

    #[test]
    fn ranges_are_inclusive_with_their_count() {
        assert_eq!(offsets(2169, 2174, None), "offsets 2169–2173 (5 records)");
        assert_eq!(
            offsets(2169, 2174, Some(3)),
            "offsets 2169–2173 (3 records)"
        );
        assert_eq!(offsets(7, 8, None), "offset 7 (1 record)");
        assert_eq!(offsets(7, 7, None), "no offsets (before offset 7)");
        assert_eq!(offsets(9, 7, None), "no offsets (before offset 9)");
    }

    #[test]
    fn error_texts_become_one_short_line() {
        assert_eq!(
            human_line("  broker down\n\n  again "),
            "broker down; again"
        );
        let log = concat!(
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"starting"}}"#,
            "\n",
            r#"{"timestamp":"t","level":"ERROR","fields":{"message":"stopping","error":"record at offset 42 is 2 MB, over max.message.bytes 1 MB"}}"#,
            "\n",
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"bye"}}"#,
        );
        assert_eq!(
            human_line(log),
            "stopping: record at offset 42 is 2 MB, over max.message.bytes 1 MB"
        );
        let long = format!("offset 1: {}", "x ".repeat(400));
        let line = human_line(&long);
        assert!(line.len() <= LINE_MAX && line.ends_with("..."), "{line}");
        assert!(!line.contains('\n'));
        assert_eq!(human_line(""), "");
    }

    #[test]
    fn health_sets_the_kstatus_trio() {
        let mut c = Vec::new();
        set_health(
            &mut c,
            &Health::reconciling("Progressing", "2 partitions PREPARING"),
            Some(4),
            &t(1),
        );
        let get = |c: &[Condition], k: &str| {
            let x = c.iter().find(|x| x.type_ == k).unwrap().clone();
            (x.status, x.reason, x.observed_generation)
        };
        assert_eq!(
            get(&c, "Ready"),
            ("False".into(), "Progressing".into(), Some(4))
        );
        assert_eq!(
            get(&c, "Reconciling"),
            ("True".into(), "Progressing".into(), Some(4))
        );
        assert_eq!(get(&c, "Stalled").0, "False");
        set_health(
            &mut c,
            &Health::stalled("PartitionFailed", "partition 0 FAILED"),
            Some(5),
            &t(2),
        );
        assert_eq!(
            get(&c, "Stalled"),
            ("True".into(), "PartitionFailed".into(), Some(5))
        );
        assert_eq!(get(&c, "Reconciling").0, "False");
        assert_eq!(get(&c, "Ready").0, "False");
        set_health(
            &mut c,
            &Health::ready("Mirroring", "all 2 partitions MIRRORING"),
            Some(5),
            &t(3),
        );
        assert_eq!(get(&c, "Ready").0, "True");
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn counts_add_up() {
        let c = count([
            PartitionState::Mirroring,
            PartitionState::Mirroring,
            PartitionState::Failed,
        ]);
        assert_eq!((c.total, c.mirroring, c.failed), (3, 2, 1));
        let s = add_counts(&c, &c);
        assert_eq!((s.total, s.mirroring, s.failed), (6, 4, 2));
        assert_eq!(truncate("héllo", 4), "h...");
    }
}
