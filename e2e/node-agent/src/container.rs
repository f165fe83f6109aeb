//! One container of a pod as the pod worker drives it: what it waits for, its probes, and the
//! restart decision after it ends.

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::time::Instant;

use crate::probes::{ProbeKind, ProbeState};
use crate::state::{ContainerRecord, Termination};
use crate::status::CurrentState;

/// In-memory state of one container (the durable part is its [`ContainerRecord`]).
#[derive(Debug)]
pub struct ContainerRuntime {
    /// The container's spec.
    pub spec: Container,
    /// An init container.
    pub init: bool,
    /// Instance counter; results of older instances are ignored.
    pub seq: u64,
    /// When to start the next instance; `None`: do not start one.
    pub next_start: Option<Instant>,
    /// Why the container is not running (shown as `state.waiting`).
    pub waiting: Option<(String, Option<String>)>,
    /// Probes of the running instance.
    pub probes: Vec<ProbeState>,
    /// Readiness to report until the readiness probe has a verdict (kept across agent restarts).
    pub ready_hint: bool,
    /// Monotonic start of the running instance (for back-off resets).
    pub run_started: Option<Instant>,
    /// The agent is stopping this instance; SIGKILL at this time.
    pub kill_deadline: Option<Instant>,
}

impl ContainerRuntime {
    /// A container that should start as soon as possible.
    pub fn new(spec: Container, init: bool) -> ContainerRuntime {
        ContainerRuntime {
            spec,
            init,
            seq: 0,
            next_start: Some(Instant::now()),
            waiting: None,
            probes: Vec::new(),
            ready_hint: false,
            run_started: None,
            kill_deadline: None,
        }
    }

    fn probe(&self, kind: ProbeKind) -> Option<&ProbeState> {
        self.probes.iter().find(|p| p.kind == kind)
    }

    /// Past the startup probe (or none).
    pub fn started(&self, record: &ContainerRecord) -> bool {
        record.running.is_some()
            && self
                .probe(ProbeKind::Startup)
                .is_none_or(|p| p.result == Some(true))
    }

    /// Ready: started and passing the readiness probe (or none).
    pub fn ready(&self, record: &ContainerRecord) -> bool {
        self.started(record)
            && match self.probe(ProbeKind::Readiness) {
                None => true,
                Some(p) => p.result.unwrap_or(self.ready_hint),
            }
    }

    /// Probes that may run now: startup first; readiness and liveness once started.
    pub fn active_probe_kinds(&self, record: &ContainerRecord) -> Vec<ProbeKind> {
        if self.started(record) {
            vec![ProbeKind::Readiness, ProbeKind::Liveness]
        } else {
            vec![ProbeKind::Startup]
        }
    }

    /// The state to report.
    pub fn current_state(&self, record: &ContainerRecord, default_waiting: &str) -> CurrentState {
        if let Some(instance) = &record.running {
            return CurrentState::Running {
                started_at: instance.started_at.clone(),
            };
        }
        match (&record.last, self.next_start) {
            (Some(last), None) => CurrentState::Terminated(last.clone()),
            _ => {
                let (reason, message) = self
                    .waiting
                    .clone()
                    .unwrap_or_else(|| (default_waiting.to_string(), None));
                CurrentState::Waiting { reason, message }
            }
        }
    }

    /// The termination to report as `lastState`.
    pub fn last_state(&self, record: &ContainerRecord) -> Option<Termination> {
        match self.current_state(record, "") {
            CurrentState::Terminated(_) => record.previous.clone(),
            _ => record.last.clone(),
        }
    }

    /// Init container that completed successfully.
    pub fn succeeded(&self, record: &ContainerRecord) -> bool {
        record.running.is_none()
            && self.next_start.is_none()
            && record.last.as_ref().is_some_and(|t| t.exit_code == 0)
    }
}

/// Whether a container that ended with `exit_code` is started again.
pub fn should_restart(restart_policy: &str, init: bool, exit_code: i32) -> bool {
    match (restart_policy, init) {
        // Init containers must complete; Always behaves like OnFailure for them.
        (_, true) if exit_code == 0 => false,
        ("Never", _) => false,
        ("OnFailure", _) | (_, true) => exit_code != 0,
        _ => true,
    }
}

/// The message of a `CrashLoopBackOff` wait.
pub fn back_off_message(
    delay: Duration,
    container: &str,
    pod: &str,
    ns: &str,
    uid: &str,
) -> String {
    format!(
        "back-off {}s restarting failed container={container} pod={pod}_{ns}({uid})",
        delay.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_policy_decisions() {
        assert!(should_restart("Always", false, 0));
        assert!(should_restart("Always", false, 1));
        assert!(!should_restart("OnFailure", false, 0));
        assert!(should_restart("OnFailure", false, 2));
        assert!(!should_restart("Never", false, 2));
        assert!(!should_restart("Always", true, 0));
        assert!(should_restart("Always", true, 1));
        assert!(!should_restart("Never", true, 1));
    }

    #[test]
    fn reported_state_follows_the_record() {
        let spec: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        let mut c = ContainerRuntime::new(spec, false);
        let mut rec = ContainerRecord::default();
        assert!(matches!(
            c.current_state(&rec, "ContainerCreating"),
            CurrentState::Waiting { reason, .. } if reason == "ContainerCreating"
        ));
        let term = Termination {
            exit_code: 1,
            signal: None,
            reason: "Error".into(),
            message: None,
            started_at: None,
            finished_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            container_id: None,
        };
        rec.last = Some(term.clone());
        c.waiting = Some(("CrashLoopBackOff".into(), Some("back-off 1s".into())));
        assert!(
            matches!(c.current_state(&rec, "x"), CurrentState::Waiting { reason, .. } if reason == "CrashLoopBackOff")
        );
        assert_eq!(c.last_state(&rec), Some(term.clone()));
        c.next_start = None;
        assert_eq!(c.current_state(&rec, "x"), CurrentState::Terminated(term));
        assert_eq!(c.last_state(&rec), None);
        assert!(!c.ready(&rec));
        assert!(!c.succeeded(&rec));
    }
}
