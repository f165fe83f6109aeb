//! Progress of topics towards a target state, the failed partitions among them, and the last
//! mirrored offsets and unresolved divergences a failover or failback reports.

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState, PartitionStatus};

use super::*;

/// Where the partitions of one topic stand with respect to a target state.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The topic as named in messages (its source topic).
    pub label: String,
    /// Partitions reported.
    pub total: usize,
    /// Partitions in the target state.
    pub done: usize,
    /// Partitions in FAILED, with their last error.
    pub failed: Vec<(i32, String)>,
    /// Sum of the reported lags, if any is reported.
    pub lag: Option<i64>,
    /// The status describes an older spec than the one just written.
    pub stale: bool,
    /// Why the topic is not ready: the reason and message of its `Ready` condition when that
    /// is False.
    pub not_ready: Option<(String, String)>,
}

/// `Ready` reasons that do not clear by waiting: a person must change something first.
const REFUSALS: [&str; 5] = [
    "DestinationUnsupported",
    "ClusterIdMismatch",
    "InvalidSpec",
    "InvalidMirror",
    "ReplicationFactorTooLarge",
];

impl Progress {
    /// Why the operator refuses the topic, if it does (`reason: message`).
    pub fn refused(&self) -> Option<String> {
        self.not_ready
            .as_ref()
            .filter(|(reason, _)| REFUSALS.contains(&reason.as_str()))
            .map(|(reason, message)| format!("{}: {reason}: {message}", self.label))
    }

    /// Every partition reached the target (and the status is current).
    pub fn complete(&self) -> bool {
        !self.stale && self.total > 0 && self.done == self.total
    }
}

/// Progress of a topic towards `target`; `generation` is the topic's generation after the
/// change being followed (`None`: do not check `observedGeneration`).
pub fn progress(t: &MirrorTopic, target: PartitionState, generation: Option<i64>) -> Progress {
    let status = t.status.as_ref();
    let parts: &[PartitionStatus] = status.map(|s| s.partitions.as_slice()).unwrap_or(&[]);
    let stale = match (generation, status.and_then(|s| s.observed_generation)) {
        (Some(g), Some(observed)) => observed < g,
        _ => false,
    };
    let lags: Vec<i64> = parts.iter().filter_map(|p| p.lag).collect();
    // From the counts: a large topic lists only some partitions (the FAILED ones first).
    let counts = status.map(|s| s.counts()).unwrap_or_default();
    Progress {
        label: t.spec.source_topic.clone(),
        total: counts.total.max(0) as usize,
        done: counts.get(target).max(0) as usize,
        failed: parts
            .iter()
            .filter(|p| p.state == PartitionState::Failed)
            .map(|p| {
                (
                    p.partition,
                    one_line(p.last_error.as_deref().unwrap_or("no reason reported")),
                )
            })
            .collect(),
        lag: (!lags.is_empty()).then(|| lags.iter().sum()),
        stale,
        not_ready: status
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.status == "False" && !c.message.is_empty())
            .map(|c| (c.reason.clone(), one_line(&c.message))),
    }
}

/// One progress line, e.g. `orders: 3/6 partitions STOPPED, lag 120`.
pub fn progress_line(p: &Progress, target: PartitionState) -> String {
    if p.total == 0 {
        let why = p
            .not_ready
            .as_ref()
            .map_or(String::new(), |(reason, message)| {
                format!(" ({reason}: {message})")
            });
        return format!(
            "{}: waiting for the operator to report partitions{why}",
            p.label
        );
    }
    let mut line = format!("{}: {}/{} partitions {target}", p.label, p.done, p.total);
    if !p.failed.is_empty() {
        line.push_str(&format!(", {} FAILED", p.failed.len()));
    }
    if let Some(lag) = p.lag {
        line.push_str(&format!(", lag {lag}"));
    }
    if p.stale {
        line.push_str(" (status not yet updated for the change)");
    }
    line
}

/// The failed partitions of a progress, one `topic[partition] FAILED: reason` each.
pub fn failed_lines(p: &Progress) -> Vec<String> {
    p.failed
        .iter()
        .map(|(partition, reason)| format!("{}[{partition}] FAILED: {reason}", p.label))
        .collect()
}

/// The last mirrored offset of every partition of the topics, as a table.
pub fn last_mirrored_table(topics: &[&MirrorTopic]) -> String {
    let mut rows = Vec::new();
    for t in topics {
        let view = topic_view(t);
        for p in &view.partitions {
            rows.push(vec![
                view.source_topic.clone(),
                p.partition.to_string(),
                p.state.to_string(),
                opt(p.last_mirrored_offset),
            ]);
        }
    }
    table(
        &["TOPIC", "PARTITION", "STATE", "LAST-MIRRORED-OFFSET"],
        &rows,
    )
}

/// Partitions of a topic whose divergence still waits for a policy.
pub fn unresolved_divergences(t: &MirrorTopic) -> Vec<(i32, DivergenceView)> {
    topic_view(t)
        .partitions
        .into_iter()
        .filter_map(|p| match p.divergence {
            Some(d) if d.resolution.is_none() => Some((p.partition, d)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{partition, topic, with_status};
    use kmirror_crds::v1alpha1::PartitionCounts;

    #[test]
    fn a_large_topic_progresses_by_its_counts() {
        // 12 partitions, 3 listed: all STOPPED there, 9 not listed still MIRRORING.
        let mut t = with_status(
            topic("dr-wide", "dr", "wide"),
            (0..3)
                .map(|p| partition(p, PartitionState::Stopped))
                .collect(),
        );
        let st = t.status.as_mut().unwrap();
        st.partitions_omitted = 9;
        st.partition_counts = Some(PartitionCounts {
            total: 12,
            stopped: 3,
            mirroring: 9,
            ..Default::default()
        });
        let p = progress(&t, PartitionState::Stopped, None);
        assert_eq!(
            progress_line(&p, PartitionState::Stopped),
            "wide: 3/12 partitions STOPPED"
        );
        assert!(!p.complete());
        t.status.as_mut().unwrap().partition_counts = Some(PartitionCounts {
            total: 12,
            stopped: 12,
            ..Default::default()
        });
        assert!(progress(&t, PartitionState::Stopped, None).complete());
    }
}
