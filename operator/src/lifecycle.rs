//! The partition state machine, as a pure function of what the operator observes. This module
//! is the only place that interprets `spec.state`.
//!
//! The reconciler gathers observations (recorded state, desired state, the fetcher pod, the
//! fetcher's position record, the source topic, the failback gate), [`decide`]s, persists the
//! transition (if any) to the state topic, and only then acts (create or delete pods, finish a
//! failover). [`settled_state`], [`awaits_failback`] and [`may_enter_stopping`] tell the rest of
//! the reconcile what `spec.state` means for it.

use std::time::Duration;

use kmirror_crds::v1alpha1::{DesiredState, FailoverMode, PartitionState};
use kmirror_state::records::{FetcherStatus, PartitionStateRecord, PositionRecord, StopReason};

/// What the operator sees of the pod that runs a partition's fetcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetcherObservation {
    /// No pod.
    Absent,
    /// A pod exists and has not terminated.
    Running {
        /// The readiness probe passes.
        ready: bool,
    },
    /// The pod is being deleted.
    Terminating,
    /// The fetcher container terminated.
    Exited {
        /// Its exit code (None: killed by a signal).
        code: Option<i32>,
        /// Termination message, if any.
        message: Option<String>,
    },
}

/// What the operator sees of the source topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceObservation {
    /// The topic exists; `end` is its log end (high watermark) when known.
    Present {
        /// Source log end of this partition.
        end: Option<i64>,
    },
    /// The topic was found missing, not yet on a second look: it may be a glitch.
    Missing,
    /// The topic no longer exists: missing on two looks apart at the recorded source cluster.
    Deleted,
    /// The topic was deleted and recreated (its topic ID differs from the recorded one).
    Recreated,
    /// The source cluster cannot be reached.
    Unreachable,
}

/// Whether a PREPARING partition of a reverse mirror may start mirroring.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FailbackGate {
    /// Yes (also every partition that is not failing back).
    #[default]
    Open,
    /// Not yet: why.
    Wait(String),
    /// Never, without a human: why.
    Refuse(String),
}

/// Everything [`decide`] needs for one partition.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// Lifecycle record from the state topic (None: UNKNOWN).
    pub recorded: Option<&'a PartitionStateRecord>,
    /// `spec.state`.
    pub desired: DesiredState,
    /// `spec.failover.mode`.
    pub mode: FailoverMode,
    /// `spec.failover.drainTimeout`.
    pub drain_timeout: Duration,
    /// The fetcher pod.
    pub fetcher: FetcherObservation,
    /// The fetcher's position record.
    pub position: Option<&'a PositionRecord>,
    /// The source topic.
    pub source: SourceObservation,
    /// Now, in ms since the epoch.
    pub now_ms: i64,
    /// The user asked to retry failed partitions (annotation changed).
    pub retry_requested: bool,
    /// A jitter factor in [0, 1) for the retry backoff.
    pub jitter: f64,
    /// The failback gate of a PREPARING partition.
    pub failback: FailbackGate,
}

/// A state change to persist.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The new state.
    pub to: PartitionState,
    /// Error (FAILED) or note.
    pub error: Option<String>,
    /// Why the fetcher stopped, when a stop causes the transition.
    pub reason: Option<StopReason>,
    /// Retry attempt to record: failures so far, -1 when not retryable.
    pub retry_attempt: i32,
}

/// What to do for one partition.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// Persist this transition first.
    pub transition: Option<Transition>,
    /// The partition wants its fetcher running.
    pub run_fetcher: bool,
    /// The fetcher's pod has terminated and must be removed (before any replacement).
    pub remove_exited_pod: bool,
    /// STOPPING is complete on the data path: persist the last mirrored offset, run the final
    /// group-offset sync and the WRITE ACLs, then go STOPPED.
    pub finish_stop: bool,
    /// Something to tell the user (draining progress, waiting for backoff).
    pub note: Option<String>,
    /// Look again after this long.
    pub requeue_after: Option<Duration>,
}

/// The reason given when the source topic is gone for good: the destination is not promoted.
pub const SOURCE_GONE: &str = "the source topic no longer exists (missing on two looks at the same source cluster); the destination keeps its records and stays read-only: set spec.state: Stopped to fail over and make it writable";

/// Why a graceful failover ended in FAILED: what stopped the fetcher, and the way out.
fn drain_blocked(text: &str) -> String {
    format!(
        "graceful failover cannot drain: {text}; set spec.failover.mode: Immediate to fail over \
         at the last mirrored offset"
    )
}

/// How soon a partition whose source topic was found missing is looked at again.
pub const MISSING_LOOK_AGAIN: Duration = Duration::from_secs(5);

/// The reason given when the source topic changed identity.
pub const RECREATED: &str = "the source topic was deleted and recreated (its topic ID changed); refusing to mix two topics in one destination";

/// First retry delay.
pub const BACKOFF_BASE: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A MIRRORING stretch longer than this resets the retry count.
pub const STABLE_AFTER: Duration = Duration::from_secs(600);

/// Delay before retry number `attempt` (1-based), with jitter of up to +50 %.
pub fn backoff(attempt: i32, jitter: f64) -> Duration {
    let exp = attempt.clamp(1, 20) - 1;
    let base = BACKOFF_BASE
        .saturating_mul(1u32 << exp.min(16))
        .min(BACKOFF_MAX);
    base.mul_f64(1.0 + 0.5 * jitter.clamp(0.0, 1.0))
        .min(BACKOFF_MAX.mul_f64(1.5))
}

fn go(to: PartitionState, error: Option<String>, retry_attempt: i32) -> Option<Transition> {
    Some(Transition {
        to,
        error,
        reason: None,
        retry_attempt,
    })
}

/// A transition caused by a stop for `reason`.
fn stop(
    to: PartitionState,
    reason: StopReason,
    text: String,
    retry_attempt: i32,
) -> Option<Transition> {
    Some(Transition {
        to,
        error: Some(text),
        reason: Some(reason),
        retry_attempt,
    })
}

/// Why a fetcher that exited stopped, from its position record or exit code.
fn exit_reason(
    code: Option<i32>,
    message: &Option<String>,
    position: Option<&PositionRecord>,
) -> (StopReason, String) {
    let recorded = position
        .filter(|p| p.status == FetcherStatus::Failed)
        .and_then(|p| p.error.clone());
    if let Some(e) = recorded
        && code.and_then(StopReason::from_exit_code) == Some(e.reason)
    {
        return (e.reason, crate::status::human_line(&e.message));
    }
    let reason = code
        .and_then(StopReason::from_exit_code)
        .unwrap_or(StopReason::Error);
    let text = match (code, message) {
        (_, Some(m)) if !m.trim().is_empty() => crate::status::human_line(m),
        (Some(c), _) => format!("the fetcher exited with code {c}"),
        (None, _) => "the fetcher was killed".to_string(),
    };
    (reason, text)
}

/// The state a partition settles in for a desired state.
pub fn settled_state(desired: DesiredState) -> PartitionState {
    match desired {
        DesiredState::Mirroring => PartitionState::Mirroring,
        DesiredState::Paused => PartitionState::Paused,
        DesiredState::Stopped => PartitionState::Stopped,
    }
}

/// Whether a partition in `state` passes the failback gate before it mirrors: it is PREPARING
/// and asked to mirror (not failed over, not paused: a pause waits in PAUSED and passes the gate
/// when it resumes).
pub fn awaits_failback(state: PartitionState, desired: DesiredState) -> bool {
    state == PartitionState::Preparing && desired == DesiredState::Mirroring
}

/// Whether a partition may enter STOPPING in this reconcile (so the source log end, the drain
/// target of a graceful failover, is worth reading first). A superset of what [`decide`] does.
pub fn may_enter_stopping(state: PartitionState, desired: DesiredState) -> bool {
    use PartitionState::*;
    match state {
        Unknown | Stopping | Stopped => false,
        Mirroring | Preparing | Pausing | Paused | Failed => desired == DesiredState::Stopped,
    }
}

/// Whether the source log end of a partition is worth reading before deciding: it enters
/// STOPPING (the end becomes the drain target) or is STOPPING without a recorded target.
pub fn needs_source_end(
    recorded: Option<&PartitionStateRecord>,
    desired: DesiredState,
    source: SourceObservation,
) -> bool {
    match recorded.map_or(PartitionState::Unknown, |r| r.state) {
        PartitionState::Stopping => {
            recorded.is_some_and(|r| r.drain_target.is_none())
                && matches!(source, SourceObservation::Present { .. })
        }
        state => may_enter_stopping(state, desired),
    }
}

/// The lifecycle decision for one partition.
pub fn decide(o: &Observed<'_>) -> Decision {
    use PartitionState::*;
    let state = o.recorded.map_or(Unknown, |r| r.state);
    let attempt = o.recorded.map_or(0, |r| r.retry_attempt);
    let since = o.recorded.map_or(o.now_ms, |r| r.updated_at_ms);
    let mut d = Decision::default();
    match state {
        Unknown => d.transition = go(Preparing, None, 0),
        Preparing if o.desired == DesiredState::Paused => {
            d.transition = go(Paused, None, attempt);
        }
        Preparing if !awaits_failback(state, o.desired) => {
            d.transition = go(Stopping, None, attempt);
        }
        Preparing => match &o.failback {
            FailbackGate::Open => d.transition = go(Mirroring, None, attempt),
            FailbackGate::Wait(note) => {
                d.note = Some(note.clone());
                d.requeue_after = Some(Duration::from_secs(3));
            }
            FailbackGate::Refuse(reason) => d.transition = go(Failed, Some(reason.clone()), -1),
        },
        Mirroring => match o.desired {
            DesiredState::Stopped => {
                d.transition = go(Stopping, None, attempt);
                d.run_fetcher = o.mode == FailoverMode::Graceful;
            }
            // The fetcher stops first; PAUSED once it is gone.
            DesiredState::Paused => d.transition = go(Pausing, None, attempt),
            DesiredState::Mirroring => match &o.fetcher {
                FetcherObservation::Exited { code: Some(0), .. } => {
                    // A clean stop nobody asked for (e.g. someone deleted the process): restart.
                    d.remove_exited_pod = true;
                }
                FetcherObservation::Exited { code, message } => {
                    let (reason, text) = exit_reason(*code, message, o.position);
                    d.remove_exited_pod = true;
                    if reason == StopReason::SourceTopicDeleted {
                        // Never a failover on its own; FAILED for good once a second look
                        // confirms the deletion, retried until then.
                        d.transition = if o.source == SourceObservation::Deleted {
                            stop(Failed, reason, SOURCE_GONE.into(), -1)
                        } else {
                            stop(Failed, reason, text, attempt.max(0) + 1)
                        };
                    } else if reason.retryable() {
                        let stable = o.now_ms - since > STABLE_AFTER.as_millis() as i64;
                        let next = if stable { 1 } else { attempt.max(0) + 1 };
                        d.transition = stop(Failed, reason, text, next);
                    } else {
                        d.transition = stop(Failed, reason, text, -1);
                    }
                }
                _ => match o.source {
                    SourceObservation::Deleted => {
                        d.transition = stop(
                            Failed,
                            StopReason::SourceTopicDeleted,
                            SOURCE_GONE.into(),
                            -1,
                        );
                    }
                    SourceObservation::Missing => {
                        d.run_fetcher = true;
                        d.requeue_after = Some(MISSING_LOOK_AGAIN);
                        d.note = Some(
                            "the source topic was not found; looking again before calling it deleted"
                                .into(),
                        );
                    }
                    SourceObservation::Recreated => {
                        d.transition = stop(
                            Failed,
                            StopReason::SourceTopicRecreated,
                            RECREATED.into(),
                            -1,
                        );
                    }
                    _ => d.run_fetcher = true,
                },
            },
        },
        Pausing => match (o.desired, &o.fetcher) {
            (DesiredState::Stopped, _) => d.transition = go(Stopping, None, attempt),
            // Its fetcher is gone (a resume asked meanwhile goes on from PAUSED).
            (_, FetcherObservation::Absent) => d.transition = go(Paused, None, attempt),
            (_, FetcherObservation::Exited { .. }) => d.remove_exited_pod = true,
            (_, _) => {
                d.note = Some("the fetcher is stopping (flushing, persisting its position)".into());
                d.requeue_after = Some(Duration::from_secs(1));
            }
        },
        Paused => match o.desired {
            DesiredState::Mirroring => d.transition = go(Preparing, None, attempt),
            DesiredState::Stopped => d.transition = go(Stopping, None, attempt),
            DesiredState::Paused => {}
        },
        Stopping => {
            let drained = match (o.source, o.position) {
                (SourceObservation::Deleted, _) => true,
                (SourceObservation::Present { end: Some(end) }, Some(p)) => {
                    p.source_position.unwrap_or(p.next_source_offset) >= end
                }
                _ => false,
            };
            let exited = matches!(o.fetcher, FetcherObservation::Exited { .. });
            let drain = o.mode == FailoverMode::Graceful && !drained && !exited;
            let blocked = match &o.fetcher {
                FetcherObservation::Exited { code, message }
                    if o.mode == FailoverMode::Graceful && !drained =>
                {
                    let (reason, text) = exit_reason(*code, message, o.position);
                    (!reason.retryable()).then_some((reason, text))
                }
                _ => None,
            };
            if let Some((reason, text)) = blocked {
                // The drain cannot go on: FAILED with the reason, not a restart every 2 s.
                d.remove_exited_pod = true;
                d.transition = stop(Failed, reason, drain_blocked(&text), -1);
            } else if drain {
                d.run_fetcher = true;
                let waited = Duration::from_millis((o.now_ms - since).max(0) as u64);
                let lag = match (o.source, o.position) {
                    (SourceObservation::Present { end: Some(end) }, Some(p)) => {
                        format!(
                            "{} records",
                            (end - p.source_position.unwrap_or(p.next_source_offset)).max(0)
                        )
                    }
                    _ => "unknown lag".to_string(),
                };
                d.note = Some(if waited > o.drain_timeout {
                    format!(
                        "graceful failover still draining after the {:?} drain timeout ({lag} behind{}); waiting — \\
                         set spec.failover.mode: Immediate to stop now",
                        o.drain_timeout,
                        if o.source == SourceObservation::Unreachable {
                            ", source unreachable"
                        } else {
                            ""
                        }
                    )
                } else {
                    format!("draining before failover: {lag} behind")
                });
                d.requeue_after = Some(Duration::from_secs(2));
            } else {
                d.remove_exited_pod = exited;
                d.finish_stop = matches!(o.fetcher, FetcherObservation::Absent);
            }
        }
        Stopped => {
            if o.desired == DesiredState::Mirroring {
                if o.source == SourceObservation::Deleted {
                    d.note = Some("the source topic does not exist; staying STOPPED".into());
                } else {
                    d.transition = go(Preparing, None, 0);
                }
            }
        }
        Failed => {
            d.remove_exited_pod = matches!(o.fetcher, FetcherObservation::Exited { .. });
            let reason = o.recorded.and_then(|r| r.reason);
            let cannot_drain = o.desired == DesiredState::Stopped
                && o.mode == FailoverMode::Graceful
                && attempt < 0
                && o.source != SourceObservation::Deleted
                && reason.is_some_and(|r| !r.retryable());
            if cannot_drain {
                d.note = Some(format!(
                    "a graceful failover cannot drain a partition FAILED for {}: set \
                     spec.failover.mode: Immediate to fail over at the last mirrored offset",
                    reason.map_or("an error", StopReason::as_str)
                ));
            } else if o.desired == DesiredState::Stopped {
                d.transition = Some(Transition {
                    to: Stopping,
                    error: o.recorded.and_then(|r| r.error.clone()),
                    reason: o.recorded.and_then(|r| r.reason),
                    retry_attempt: attempt,
                });
            } else if attempt >= 0 && o.source == SourceObservation::Deleted {
                // Retrying cannot bring the topic back: wait for a person.
                d.transition = stop(
                    Failed,
                    StopReason::SourceTopicDeleted,
                    SOURCE_GONE.into(),
                    -1,
                );
            } else if attempt < 0 {
                if o.retry_requested {
                    d.transition = go(Preparing, None, 0);
                }
            } else {
                let wait = backoff(attempt.max(1), o.jitter);
                let due = since + wait.as_millis() as i64;
                if o.now_ms >= due {
                    d.transition = go(Preparing, None, attempt);
                } else {
                    d.requeue_after = Some(Duration::from_millis((due - o.now_ms) as u64));
                    d.note = Some(format!(
                        "retry {attempt} in {}s",
                        (due - o.now_ms + 999) / 1000
                    ));
                }
            }
        }
    }
    if let Some(t) = &d.transition {
        debug_assert!(
            state.can_transition_to(t.to),
            "{state} -> {} is not a lifecycle transition",
            t.to
        );
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use PartitionState::*;
    use kmirror_state::records::FetcherError;

    fn record(state: PartitionState, attempt: i32, at: i64) -> PartitionStateRecord {
        PartitionStateRecord {
            state,
            state_epoch: 1,
            retry_attempt: attempt,
            updated_at_ms: at,
            ..Default::default()
        }
    }

    fn observed<'a>(recorded: Option<&'a PartitionStateRecord>) -> Observed<'a> {
        Observed {
            recorded,
            desired: DesiredState::Mirroring,
            mode: FailoverMode::Graceful,
            drain_timeout: Duration::from_secs(300),
            fetcher: FetcherObservation::Absent,
            position: None,
            source: SourceObservation::Present { end: Some(100) },
            now_ms: 1_000_000,
            retry_requested: false,
            jitter: 0.0,
            failback: FailbackGate::Open,
        }
    }

    fn to(d: &Decision) -> Option<PartitionState> {
        d.transition.as_ref().map(|t| t.to)
    }

    #[test]
    fn happy_path_to_mirroring() {
        assert_eq!(to(&decide(&observed(None))), Some(Preparing));
        let r = record(Preparing, 0, 0);
        assert_eq!(to(&decide(&observed(Some(&r)))), Some(Mirroring));
        let r = record(Mirroring, 0, 0);
        let d = decide(&observed(Some(&r)));
        assert_eq!(d.transition, None);
        assert!(d.run_fetcher);
    }

    #[test]
    fn pause_and_resume() {
        let r = record(Mirroring, 0, 0);
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Paused;
        let d = decide(&o);
        assert_eq!(to(&d), Some(Pausing), "the fetcher stops first");
        assert!(!d.run_fetcher);
        // PAUSING while the fetcher still runs or terminates; PAUSED once it is gone.
        let r = record(Pausing, 0, 0);
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Paused;
        for fetcher in [
            FetcherObservation::Running { ready: true },
            FetcherObservation::Terminating,
        ] {
            o.fetcher = fetcher;
            let d = decide(&o);
            assert_eq!(to(&d), None);
            assert!(!d.run_fetcher && d.note.is_some());
        }
        o.fetcher = FetcherObservation::Exited {
            code: Some(0),
            message: None,
        };
        assert!(decide(&o).remove_exited_pod);
        o.fetcher = FetcherObservation::Absent;
        assert_eq!(to(&decide(&o)), Some(Paused));
        // A resume asked meanwhile goes on from PAUSED; a failover goes at once.
        o.desired = DesiredState::Mirroring;
        assert_eq!(to(&decide(&o)), Some(Paused));
        o.desired = DesiredState::Stopped;
        o.fetcher = FetcherObservation::Running { ready: true };
        assert_eq!(to(&decide(&o)), Some(Stopping));
        let r = record(Paused, 0, 0);
        let o = observed(Some(&r));
        assert_eq!(
            to(&decide(&o)),
            Some(Preparing),
            "resume goes through PREPARING"
        );
    }

    #[test]
    fn a_topic_created_paused_never_mirrors() {
        let mut o = observed(None);
        o.desired = DesiredState::Paused;
        assert_eq!(to(&decide(&o)), Some(Preparing));
        let r = record(Preparing, 0, 0);
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Paused;
        // Not even past the failback gate: resuming later goes through PREPARING and the gate.
        o.failback = FailbackGate::Wait("checking".into());
        let d = decide(&o);
        assert_eq!(to(&d), Some(Paused), "PREPARING → PAUSED directly");
        assert!(!d.run_fetcher);
    }

    #[test]
    fn graceful_failover_drains_then_finishes() {
        let r = record(Mirroring, 0, 0);
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Stopped;
        o.fetcher = FetcherObservation::Running { ready: true };
        let d = decide(&o);
        assert_eq!(to(&d), Some(Stopping));
        assert!(d.run_fetcher, "graceful keeps copying");

        let r = record(Stopping, 0, o.now_ms - 1000);
        let behind = PositionRecord {
            next_source_offset: 60,
            source_position: Some(60),
            ..Default::default()
        };
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Stopped;
        o.fetcher = FetcherObservation::Running { ready: true };
        o.position = Some(&behind);
        let d = decide(&o);
        assert!(d.run_fetcher && !d.finish_stop);
        assert!(d.note.unwrap().contains("40 records behind"));

        let caught_up = PositionRecord {
            next_source_offset: 100,
            source_position: Some(100),
            ..Default::default()
        };
        o.position = Some(&caught_up);
        let d = decide(&o);
        assert!(!d.run_fetcher, "drained: stop the fetcher");
        assert!(!d.finish_stop, "not before the pod is gone");
        o.fetcher = FetcherObservation::Absent;
        assert!(decide(&o).finish_stop);
    }

    #[test]
    fn a_drain_that_cannot_go_on_ends_in_failed_not_in_restarts() {
        let failed_position = PositionRecord {
            next_source_offset: 60,
            status: FetcherStatus::Failed,
            error: Some(FetcherError {
                reason: StopReason::ForeignWrite,
                message: "someone wrote at 60".into(),
            }),
            ..Default::default()
        };
        let r = record(Stopping, 0, 0);
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Stopped;
        o.position = Some(&failed_position);
        o.fetcher = FetcherObservation::Exited {
            code: Some(10),
            message: None,
        };
        let d = decide(&o);
        let t = d.transition.clone().expect("a transition");
        assert_eq!(
            (t.to, t.retry_attempt, t.reason),
            (Failed, -1, Some(StopReason::ForeignWrite))
        );
        assert!(
            t.error
                .as_deref()
                .is_some_and(|e| e.contains("someone wrote at 60")
                    && e.contains("spec.failover.mode: Immediate")),
            "{t:?}"
        );
        assert!(d.remove_exited_pod && !d.run_fetcher);
        // A retryable exit during the drain restarts the fetcher as before.
        o.fetcher = FetcherObservation::Exited {
            code: Some(1),
            message: Some("broker down".into()),
        };
        o.position = None;
        assert_eq!(decide(&o).transition, None);
        // FAILED for good with a graceful failover asked: stays, says how to go on.
        let mut failed = record(Failed, -1, 0);
        failed.reason = Some(StopReason::ForeignWrite);
        let mut o = observed(Some(&failed));
        o.desired = DesiredState::Stopped;
        let d = decide(&o);
        assert_eq!(d.transition, None);
        assert!(d.note.unwrap().contains("Immediate"));
        o.mode = FailoverMode::Immediate;
        assert_eq!(
            to(&decide(&o)),
            Some(Stopping),
            "an immediate failover goes on"
        );
        o.mode = FailoverMode::Graceful;
        o.source = SourceObservation::Deleted;
        assert_eq!(
            to(&decide(&o)),
            Some(Stopping),
            "nothing to drain from a deleted topic"
        );
    }

    #[test]
    fn drain_timeout_reports_and_waits() {
        let r = record(Stopping, 0, 0);
        let behind = PositionRecord {
            next_source_offset: 10,
            ..Default::default()
        };
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Stopped;
        o.drain_timeout = Duration::from_secs(60);
        o.fetcher = FetcherObservation::Running { ready: true };
        o.position = Some(&behind);
        let d = decide(&o);
        assert!(d.run_fetcher && !d.finish_stop);
        assert!(d.note.unwrap().contains("drain timeout"));
    }

    #[test]
    fn immediate_failover_does_not_wait_for_the_source() {
        let r = record(Stopping, 0, 0);
        let mut o = observed(Some(&r));
        o.desired = DesiredState::Stopped;
        o.mode = FailoverMode::Immediate;
        o.source = SourceObservation::Unreachable;
        o.fetcher = FetcherObservation::Running { ready: false };
        let d = decide(&o);
        assert!(!d.run_fetcher && !d.finish_stop);
        o.fetcher = FetcherObservation::Absent;
        assert!(decide(&o).finish_stop);
    }

    #[test]
    fn non_retryable_failures_keep_their_reason() {
        let r = record(Mirroring, 0, 0);
        let position = PositionRecord {
            status: FetcherStatus::Failed,
            error: Some(FetcherError {
                reason: StopReason::ForeignWrite,
                message: "someone wrote".into(),
            }),
            ..Default::default()
        };
        let mut o = observed(Some(&r));
        o.position = Some(&position);
        o.fetcher = FetcherObservation::Exited {
            code: Some(10),
            message: None,
        };
        let d = decide(&o);
        let t = d.transition.unwrap();
        assert_eq!(
            (t.to, t.retry_attempt, t.error.as_deref(), t.reason),
            (
                Failed,
                -1,
                Some("someone wrote"),
                Some(StopReason::ForeignWrite)
            )
        );
        assert!(d.remove_exited_pod);

        let failed = record(Failed, -1, 0);
        let mut o = observed(Some(&failed));
        assert_eq!(decide(&o).transition, None, "not retried without a request");
        o.retry_requested = true;
        assert_eq!(to(&decide(&o)), Some(Preparing));
        o.retry_requested = false;
        o.desired = DesiredState::Stopped;
        assert_eq!(to(&decide(&o)), Some(Stopping), "failover stays possible");
    }

    #[test]
    fn retryable_failures_back_off() {
        let r = record(Mirroring, 2, 999_000);
        let mut o = observed(Some(&r));
        o.fetcher = FetcherObservation::Exited {
            code: Some(1),
            message: Some("broker down".into()),
        };
        let t = decide(&o).transition.unwrap();
        assert_eq!(
            (t.to, t.retry_attempt, t.reason),
            (Failed, 3, Some(StopReason::Error))
        );
        let failed = record(Failed, 3, 1_000_000);
        let mut o = observed(Some(&failed));
        o.now_ms = 1_000_000 + 19_000;
        let d = decide(&o);
        assert_eq!(d.transition, None);
        assert!(d.requeue_after.unwrap() <= Duration::from_secs(1));
        o.now_ms = 1_000_000 + 20_000;
        assert_eq!(to(&decide(&o)), Some(Preparing));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1, 0.0), Duration::from_secs(5));
        assert_eq!(backoff(2, 0.0), Duration::from_secs(10));
        assert_eq!(backoff(4, 0.0), Duration::from_secs(40));
        assert_eq!(backoff(30, 0.0), BACKOFF_MAX);
        assert!(backoff(1, 0.99) > Duration::from_secs(7));
    }

    #[test]
    fn a_missing_source_topic_never_fails_over_on_its_own() {
        let deleted_exit = FetcherObservation::Exited {
            code: Some(13),
            message: Some("the source topic orders no longer exists".into()),
        };
        let running = FetcherObservation::Running { ready: true };
        #[rustfmt::skip]
        type Row = (&'static str, PartitionState, i32, SourceObservation, FetcherObservation, Option<(PartitionState, i32)>);
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // name, state, attempt, source, fetcher → (to, retry attempt)
            ("missing once: keeps mirroring, looks again", Mirroring, 0, SourceObservation::Missing, running.clone(), None),
            ("confirmed deleted: FAILED for good, not STOPPING", Mirroring, 0, SourceObservation::Deleted, running.clone(), Some((Failed, -1))),
            ("the fetcher saw it missing once: retried", Mirroring, 0, SourceObservation::Missing, deleted_exit.clone(), Some((Failed, 1))),
            ("the fetcher saw it missing, confirmed: FAILED for good", Mirroring, 0, SourceObservation::Deleted, deleted_exit.clone(), Some((Failed, -1))),
            ("a retry pending when the deletion is confirmed: FAILED for good", Failed, 2, SourceObservation::Deleted, FetcherObservation::Absent, Some((Failed, -1))),
            ("FAILED for good stays", Failed, -1, SourceObservation::Deleted, FetcherObservation::Absent, None),
        ];
        for (name, state, attempt, source, fetcher, expect) in table {
            let r = record(state, attempt, 0);
            let mut o = observed(Some(&r));
            o.source = source;
            o.fetcher = fetcher;
            let d = decide(&o);
            let got = d.transition.as_ref().map(|t| (t.to, t.retry_attempt));
            assert_eq!(got, expect, "{name}");
            if let Some(t) = &d.transition {
                assert_eq!(t.reason, Some(StopReason::SourceTopicDeleted), "{name}");
                if t.retry_attempt < 0 {
                    assert_eq!(t.error.as_deref(), Some(SOURCE_GONE), "{name}");
                }
            }
            if source == SourceObservation::Missing && d.transition.is_none() {
                assert!(d.run_fetcher, "{name}");
                assert_eq!(d.requeue_after, Some(MISSING_LOOK_AGAIN), "{name}");
            }
        }
        // The user fails over: STOPPING drains nothing from a deleted topic, then STOPPED.
        let failed = record(Failed, -1, 0);
        let mut o = observed(Some(&failed));
        o.source = SourceObservation::Deleted;
        o.desired = DesiredState::Stopped;
        assert_eq!(to(&decide(&o)), Some(Stopping));
        let s = record(Stopping, 0, 0);
        let mut o = observed(Some(&s));
        o.source = SourceObservation::Deleted;
        o.desired = DesiredState::Stopped;
        assert!(
            decide(&o).finish_stop,
            "nothing to drain from a deleted topic"
        );
        let stopped = record(Stopped, 0, 0);
        let mut o = observed(Some(&stopped));
        o.source = SourceObservation::Deleted;
        assert_eq!(
            decide(&o).transition,
            None,
            "no re-mirroring of a deleted topic"
        );
        let r = record(Mirroring, 0, 0);
        let mut o = observed(Some(&r));
        o.source = SourceObservation::Recreated;
        let t = decide(&o).transition.unwrap();
        assert_eq!(
            (t.to, t.retry_attempt, t.reason),
            (Failed, -1, Some(StopReason::SourceTopicRecreated))
        );
    }

    #[test]
    fn the_failback_gate_holds_or_refuses_preparing_partitions() {
        let r = record(Preparing, 0, 0);
        let mut o = observed(Some(&r));
        o.failback = FailbackGate::Wait("quarantining".into());
        let d = decide(&o);
        assert_eq!(d.transition, None);
        assert_eq!(d.note.as_deref(), Some("quarantining"));
        assert_eq!(d.requeue_after, Some(Duration::from_secs(3)));
        o.failback = FailbackGate::Refuse("a mirror loop".into());
        let t = decide(&o).transition.unwrap();
        assert_eq!((t.to, t.retry_attempt), (Failed, -1));
        o.desired = DesiredState::Stopped;
        assert_eq!(
            to(&decide(&o)),
            Some(Stopping),
            "failing over again passes no gate"
        );
        assert!(!awaits_failback(Preparing, DesiredState::Stopped));
        assert!(!awaits_failback(Preparing, DesiredState::Paused));
        assert!(awaits_failback(Preparing, DesiredState::Mirroring));
    }

    #[test]
    fn every_entry_into_stopping_is_foreseen() {
        let records: Vec<PartitionStateRecord> = PartitionState::ALL
            .iter()
            .map(|s| record(*s, 0, 0))
            .collect();
        let fetchers = [
            FetcherObservation::Absent,
            FetcherObservation::Running { ready: true },
            FetcherObservation::Terminating,
            FetcherObservation::Exited {
                code: Some(13),
                message: None,
            },
            FetcherObservation::Exited {
                code: Some(1),
                message: None,
            },
        ];
        let sources = [
            SourceObservation::Present { end: Some(10) },
            SourceObservation::Missing,
            SourceObservation::Deleted,
            SourceObservation::Recreated,
            SourceObservation::Unreachable,
        ];
        for r in &records {
            for desired in [
                DesiredState::Mirroring,
                DesiredState::Paused,
                DesiredState::Stopped,
            ] {
                for fetcher in &fetchers {
                    for source in sources {
                        let mut o = observed(Some(r));
                        o.desired = desired;
                        o.fetcher = fetcher.clone();
                        o.source = source;
                        let enters = r.state != Stopping && to(&decide(&o)) == Some(Stopping);
                        assert!(
                            !enters || may_enter_stopping(r.state, desired),
                            "{} {desired:?} {fetcher:?} {source:?} enters STOPPING unforeseen",
                            r.state
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn settled_states() {
        assert_eq!(settled_state(DesiredState::Mirroring), Mirroring);
        assert_eq!(settled_state(DesiredState::Paused), Paused);
        assert_eq!(settled_state(DesiredState::Stopped), Stopped);
    }
}
