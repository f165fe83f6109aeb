//! `--wait` of every changing command: follow the changed topics until each partition is in the
//! state the topic's `spec.state` asks for, printing progress, within a timeout derived from the
//! topics' drain timeouts unless `--timeout` gives one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kmirror_crds::duration::parse_duration;
use kmirror_crds::v1alpha1::{DesiredState, FailoverSpec, MirrorTopic, PartitionState};
use tokio::time::Instant;

use crate::client::Kube;
use crate::error::{Error, Result};
use crate::render::{self, Progress};
use crate::select::object_name;
use crate::util::format_duration;

use super::line;

/// How often a wait looks at the topics again.
const POLL: Duration = Duration::from_secs(1);

/// Added to twice the drain timeout for the default `--timeout`: once drained, a failover
/// still stops the fetcher, lets its write lease lapse, runs the final consumer-group offset
/// sync and sets the ACLs; a start (resume, failback) creates the destination partitions and a
/// fetcher pod. Seconds to tens of seconds on a healthy cluster.
pub const MARGIN: Duration = Duration::from_secs(60);

/// What a wait follows, for its messages.
pub struct Job<'a> {
    /// What is waited for, e.g. `the failover of mirror "dr"`.
    pub what: String,
    /// The mirror whose topics are followed (for the `status --watch` hint).
    pub mirror: &'a str,
    /// The reverse mirror's name when following a failback: a partition with divergence on a
    /// topic without `divergencePolicy` ends the wait with how to resolve it.
    pub divergence_of: Option<&'a str>,
}

/// The partition state a topic's `spec.state` asks for.
pub fn target(t: &MirrorTopic) -> PartitionState {
    match t.spec.state {
        DesiredState::Mirroring => PartitionState::Mirroring,
        DesiredState::Paused => PartitionState::Paused,
        DesiredState::Stopped => PartitionState::Stopped,
    }
}

/// The default `--timeout`: twice the largest drain timeout plus [`MARGIN`]. A graceful
/// failover drains for up to its drain timeout before the operator reports it still draining
/// (and keeps draining); twice that leaves the drain as long again, with the operator's report
/// in the progress, before the wait gives up, and the margin covers the steps after the drain.
/// A drain timeout that does not parse counts as the CRD's default (5m), as the operator does.
pub fn default_timeout<'a>(drain_timeouts: impl IntoIterator<Item = &'a str>) -> Duration {
    let default =
        parse_duration(&FailoverSpec::default().drain_timeout).unwrap_or(Duration::from_secs(300));
    let drain = drain_timeouts
        .into_iter()
        .map(|d| parse_duration(d).unwrap_or(default))
        .max()
        .unwrap_or(default);
    drain * 2 + MARGIN
}

/// The timeout of a wait on `topics` and how it was chosen (for the first progress line).
pub fn budget(explicit: Option<Duration>, topics: &[MirrorTopic]) -> (Duration, String) {
    if let Some(t) = explicit {
        return (t, "--timeout".to_string());
    }
    let drains: Vec<&str> = topics
        .iter()
        .map(|t| t.spec.failover.drain_timeout.as_str())
        .collect();
    let timeout = default_timeout(drains.iter().copied());
    let drain = (timeout - MARGIN) / 2;
    (
        timeout,
        format!(
            "twice the drain timeout {} plus {}; --timeout sets another",
            format_duration(drain),
            format_duration(MARGIN)
        ),
    )
}

/// Counts of partitions per target state, e.g. `3 partitions PAUSED` or
/// `4 partitions MIRRORING, 2 STOPPED`.
pub fn summary(topics: &[MirrorTopic]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in topics {
        let n = t
            .status
            .as_ref()
            .map_or(0, |s| s.counts().total.max(0) as usize);
        if n > 0 {
            *counts.entry(target(t).to_string()).or_default() += n;
        }
    }
    let parts: Vec<String> = counts
        .iter()
        .enumerate()
        .map(|(i, (state, n))| {
            if i == 0 {
                format!("{n} partitions {state}")
            } else {
                format!("{n} {state}")
            }
        })
        .collect();
    if parts.is_empty() {
        "0 partitions".to_string()
    } else {
        parts.join(", ")
    }
}

/// Follows `topics` until every partition of each is in the state its `spec.state` asks for,
/// printing a line whenever a topic's progress changes and each new failure. Returns the final
/// topics. Ends with [`Error::Refused`] when the operator refuses a topic, [`Error::Diverged`]
/// on unresolved failback divergence, [`Error::TimedOut`] after the timeout.
pub async fn follow(
    kube: &Kube,
    topics: &[MirrorTopic],
    explicit: Option<Duration>,
    job: &Job<'_>,
) -> Result<Vec<MirrorTopic>> {
    let ns = kube.namespace.as_str();
    let what = job.what.as_str();
    let (timeout, why) = budget(explicit, topics);
    line(&format!(
        "waiting up to {} for {what} ({why})",
        format_duration(timeout)
    ));
    let generations: BTreeMap<String, Option<i64>> = topics
        .iter()
        .map(|t| (object_name(t).to_string(), t.metadata.generation))
        .collect();
    let deadline = Instant::now() + timeout;
    let mut last_line: BTreeMap<String, String> = BTreeMap::new();
    let mut failures_seen: BTreeSet<String> = BTreeSet::new();
    loop {
        // One list per round, however many topics are followed.
        let mut listed: BTreeMap<String, MirrorTopic> = kube
            .topics(Some(ns))
            .await?
            .into_iter()
            .map(|t| (object_name(&t).to_string(), t))
            .collect();
        let mut current = Vec::new();
        for (name, generation) in &generations {
            let t = listed.remove(name).ok_or_else(|| {
                Error::failed(format!(
                    "MirrorTopic {name:?} was deleted while waiting for {what}"
                ))
            })?;
            current.push((t, *generation));
        }
        let progress: Vec<(Progress, PartitionState)> = current
            .iter()
            .map(|(t, g)| (render::progress(t, target(t), *g), target(t)))
            .collect();
        let lines = |p: &Progress, target| render::progress_line(p, target);
        for ((t, _), (p, target)) in current.iter().zip(&progress) {
            let text = lines(p, *target);
            if last_line.get(object_name(t)) != Some(&text) {
                line(&text);
                last_line.insert(object_name(t).to_string(), text);
            }
            for f in render::failed_lines(p) {
                if failures_seen.insert(f.clone()) {
                    line(&format!("  {f}"));
                }
            }
        }
        if let Some(reverse) = job.divergence_of {
            divergence_check(&current, reverse, ns)?;
        }
        if progress.iter().all(|(p, _)| p.complete()) {
            return Ok(current.into_iter().map(|(t, _)| t).collect());
        }
        let refused: Vec<String> = progress.iter().filter_map(|(p, _)| p.refused()).collect();
        if !refused.is_empty() {
            return Err(Error::Refused(format!(
                "the operator refuses {what}: {}",
                refused.join("; ")
            )));
        }
        let now = Instant::now();
        if now >= deadline {
            let mut summary: Vec<String> = progress.iter().map(|(p, t)| lines(p, *t)).collect();
            summary.extend(progress.iter().flat_map(|(p, _)| render::failed_lines(p)));
            return Err(Error::TimedOut(format!(
                "timed out after {} waiting for {what}: {}. The change is made and may still \
                 complete: follow it with `kubectl mirror status {} -n {ns} --watch`",
                format_duration(timeout),
                summary.join("; "),
                job.mirror
            )));
        }
        tokio::time::sleep(POLL.min(deadline - now)).await;
    }
}

/// Fails when a topic without a divergence policy has unresolved divergence, after printing
/// where the divergent records are.
fn divergence_check(current: &[(MirrorTopic, Option<i64>)], reverse: &str, ns: &str) -> Result<()> {
    let mut waiting = Vec::new();
    for (t, _) in current {
        if t.spec.divergence_policy.is_some() {
            continue;
        }
        let found = render::unresolved_divergences(t);
        for (partition, d) in &found {
            line(&format!(
                "{}[{partition}]: {} were written to the old source after the last mirrored \
                 offset; copies are in quarantine topic {}",
                t.spec.source_topic,
                render::offset_range(d.from_offset, d.to_offset),
                d.quarantine_topic
            ));
        }
        if !found.is_empty() {
            waiting.push(t.spec.source_topic.clone());
        }
    }
    if waiting.is_empty() {
        return Ok(());
    }
    let topics: Vec<String> = waiting.iter().map(|t| format!("--topic {t}")).collect();
    Err(Error::Diverged(format!(
        "divergence found on failback of {}: choose what happens to the divergent records with \
         `kubectl mirror resolve {reverse} -n {ns} {} --policy Recreate|KeepAndTranslate`",
        waiting.join(", "),
        topics.join(" ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{partition, topic, with_status};

    #[test]
    fn default_timeout_from_drain_timeouts() {
        let s = Duration::from_secs;
        let table: [(&[&str], Duration); 6] = [
            (&[], s(11 * 60)),                  // no topic: the CRD's default 5m
            (&["5m"], s(11 * 60)),              // the default: 2 × 5m + 1m
            (&["10s"], s(80)),                  // 2 × 10s + 1m
            (&["10s", "2m", "30s"], s(5 * 60)), // the largest counts
            (&["1h"], s(2 * 3600 + 60)),
            (&["forever"], s(11 * 60)), // unparsable: the default, as the operator reads it
        ];
        for (drains, expected) in table {
            assert_eq!(
                default_timeout(drains.iter().copied()),
                expected,
                "{drains:?}"
            );
        }
    }

    #[test]
    fn explicit_timeout_wins() {
        let mut t = topic("dr-orders", "dr", "orders");
        t.spec.failover.drain_timeout = "10s".into();
        let (timeout, why) = budget(Some(Duration::from_secs(1)), std::slice::from_ref(&t));
        assert_eq!(
            (timeout, why.as_str()),
            (Duration::from_secs(1), "--timeout")
        );
        let (timeout, why) = budget(None, std::slice::from_ref(&t));
        assert_eq!(timeout, Duration::from_secs(80));
        assert_eq!(
            why,
            "twice the drain timeout 10s plus 1m; --timeout sets another"
        );
    }

    #[test]
    fn targets_and_summary_follow_spec_state() {
        let mut paused = with_status(
            topic("a", "dr", "a"),
            vec![
                partition(0, PartitionState::Paused),
                partition(1, PartitionState::Paused),
            ],
        );
        paused.spec.state = DesiredState::Paused;
        let mut stopped = with_status(
            topic("b", "dr", "b"),
            vec![partition(0, PartitionState::Stopped)],
        );
        stopped.spec.state = DesiredState::Stopped;
        let mirroring = topic("c", "dr", "c");
        assert_eq!(target(&paused), PartitionState::Paused);
        assert_eq!(target(&stopped), PartitionState::Stopped);
        assert_eq!(target(&mirroring), PartitionState::Mirroring);
        assert_eq!(
            summary(std::slice::from_ref(&paused)),
            "2 partitions PAUSED"
        );
        assert_eq!(
            summary(&[paused, stopped, mirroring]),
            "2 partitions PAUSED, 1 STOPPED"
        );
        assert_eq!(summary(&[]), "0 partitions");
    }
}
