//! Status projection: conditions that keep their transition time, per-partition status, topic
//! phase and mirror-wide counts. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kmirror_crds::v1alpha1::{PartitionCounts, PartitionState, PartitionStatus};

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

/// The value of a condition, if set.
pub fn condition_is(conditions: &[Condition], type_: &str) -> Option<bool> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status == "True")
}

/// Cuts a message to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
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
            Failed, Stopping, Preparing, Unknown, Paused, Mirroring, Stopped,
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
    let mut c = PartitionCounts::default();
    for s in partitions {
        c.total += 1;
        match s {
            PartitionState::Unknown => c.unknown += 1,
            PartitionState::Preparing => c.preparing += 1,
            PartitionState::Mirroring => c.mirroring += 1,
            PartitionState::Paused => c.paused += 1,
            PartitionState::Stopping => c.stopping += 1,
            PartitionState::Stopped => c.stopped += 1,
            PartitionState::Failed => c.failed += 1,
        }
    }
    c
}

/// Adds two counts.
pub fn add_counts(a: &PartitionCounts, b: &PartitionCounts) -> PartitionCounts {
    PartitionCounts {
        total: a.total + b.total,
        unknown: a.unknown + b.unknown,
        preparing: a.preparing + b.preparing,
        mirroring: a.mirroring + b.mirroring,
        paused: a.paused + b.paused,
        stopping: a.stopping + b.stopping,
        stopped: a.stopped + b.stopped,
        failed: a.failed + b.failed,
    }
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
