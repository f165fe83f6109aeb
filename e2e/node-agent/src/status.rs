//! Pod status from the runtime view of its containers: phase, conditions and container statuses,
//! with the kubelet's rules. Pure functions; the pod worker decides what the containers do.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::state::Termination;

/// What a container is doing now.
#[derive(Debug, Clone, PartialEq)]
pub enum CurrentState {
    /// Not running: not started yet, or waiting to be restarted.
    Waiting {
        /// `ContainerCreating`, `PodInitializing`, `CrashLoopBackOff`, `CreateContainerConfigError`...
        reason: String,
        /// Details.
        message: Option<String>,
    },
    /// Running since `started_at`.
    Running {
        /// Start time.
        started_at: Time,
    },
    /// Ended and will not be restarted.
    Terminated(Termination),
}

/// One container as the status reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerView {
    /// Name.
    pub name: String,
    /// The image as the spec names it (not used to run anything).
    pub image: String,
    /// The executable that ran.
    pub image_id: String,
    /// Current (or latest) instance ID.
    pub container_id: Option<String>,
    /// Current state.
    pub state: CurrentState,
    /// The previous termination.
    pub last_state: Option<Termination>,
    /// Passing its readiness probe (or running without one).
    pub ready: bool,
    /// Past its startup probe (or running without one).
    pub started: bool,
    /// Restarts so far.
    pub restart_count: i32,
}

/// A pod as the status reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    /// Init containers, in spec order.
    pub init_containers: Vec<ContainerView>,
    /// Regular containers, in spec order.
    pub containers: Vec<ContainerView>,
    /// `Always`, `OnFailure` or `Never`.
    pub restart_policy: String,
    /// Every init container completed successfully.
    pub init_done: bool,
    /// Volumes and IP are set up (`PodReadyToStartContainers`).
    pub sandbox_ready: bool,
    /// The pod IP.
    pub pod_ip: Option<String>,
    /// The node IP.
    pub host_ip: String,
    /// When the node agent accepted the pod.
    pub start_time: Time,
    /// `metadata.generation` observed.
    pub observed_generation: Option<i64>,
    /// The pod is being deleted: once nothing runs, its phase is terminal.
    pub deleting: bool,
}

fn failed(t: &Termination) -> bool {
    t.exit_code != 0
}

/// The pod phase.
pub fn phase(view: &PodView) -> &'static str {
    let init_failed = view.init_containers.iter().any(|c| {
        view.restart_policy == "Never"
            && matches!(&c.state, CurrentState::Terminated(t) if failed(t))
    });
    if init_failed {
        return "Failed";
    }
    if !view.init_done {
        return "Pending";
    }
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &view.containers {
        match &c.state {
            CurrentState::Running { .. } => running += 1,
            CurrentState::Waiting { .. } if c.last_state.is_some() => stopped += 1,
            CurrentState::Waiting { .. } => waiting += 1,
            CurrentState::Terminated(t) => {
                stopped += 1;
                if !failed(t) {
                    succeeded += 1;
                }
            }
        }
    }
    let all_succeeded = succeeded == view.containers.len();
    if view.deleting && running == 0 {
        if all_succeeded { "Succeeded" } else { "Failed" }
    } else if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        match view.restart_policy.as_str() {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        }
    } else {
        "Pending"
    }
}

fn terminated(t: &Termination) -> ContainerStateTerminated {
    ContainerStateTerminated {
        container_id: t.container_id.clone(),
        exit_code: t.exit_code,
        finished_at: Some(t.finished_at.clone()),
        message: t.message.clone(),
        reason: Some(t.reason.clone()),
        signal: t.signal,
        started_at: t.started_at.clone(),
    }
}

fn container_status(c: &ContainerView) -> ContainerStatus {
    let state = match &c.state {
        CurrentState::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        CurrentState::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at.clone()),
            }),
            ..Default::default()
        },
        CurrentState::Terminated(t) => ContainerState {
            terminated: Some(terminated(t)),
            ..Default::default()
        },
    };
    let last_state = c.last_state.as_ref().map(|t| ContainerState {
        terminated: Some(terminated(t)),
        ..Default::default()
    });
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: c.container_id.clone(),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ready: c.ready,
        started: Some(c.started),
        restart_count: c.restart_count,
        ..Default::default()
    }
}

/// A condition; the transition time is kept from `previous` when the status did not change.
fn condition(
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    previous: &[PodCondition],
    now: &Time,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: if ok { None } else { reason.map(str::to_string) },
        message: if ok { None } else { message },
        last_transition_time: Some(since),
        ..Default::default()
    }
}

fn names(containers: &[&ContainerView]) -> String {
    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    format!("[{}]", names.join(" "))
}

/// The pod status; `previous` conditions keep their transition times.
pub fn build(view: &PodView, previous: &[PodCondition], now: &Time) -> PodStatus {
    let phase = phase(view);
    let terminal = phase == "Succeeded" || phase == "Failed";
    let unready: Vec<&ContainerView> = view.containers.iter().filter(|c| !c.ready).collect();
    let uninitialized: Vec<&ContainerView> = view
        .init_containers
        .iter()
        .filter(|c| !matches!(&c.state, CurrentState::Terminated(t) if !failed(t)))
        .collect();
    let (ready_reason, ready_message) = if terminal {
        ("PodCompleted", None)
    } else {
        (
            "ContainersNotReady",
            Some(format!(
                "containers with unready status: {}",
                names(&unready)
            )),
        )
    };
    let ready = unready.is_empty() && !terminal;
    let conditions = vec![
        condition(
            "PodReadyToStartContainers",
            view.sandbox_ready,
            Some("VolumesNotReady"),
            None,
            previous,
            now,
        ),
        condition(
            "Initialized",
            view.init_done,
            Some(if terminal {
                "PodCompleted"
            } else {
                "ContainersNotInitialized"
            }),
            Some(format!(
                "containers with incomplete status: {}",
                names(&uninitialized)
            )),
            previous,
            now,
        ),
        condition(
            "Ready",
            ready,
            Some(ready_reason),
            ready_message.clone(),
            previous,
            now,
        ),
        condition(
            "ContainersReady",
            ready,
            Some(ready_reason),
            ready_message,
            previous,
            now,
        ),
        condition("PodScheduled", true, None, None, previous, now),
    ];
    let pod_ips = view
        .pod_ip
        .as_ref()
        .map(|ip| vec![PodIP { ip: ip.clone() }]);
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        container_statuses: Some(view.containers.iter().map(container_status).collect()),
        init_container_statuses: if view.init_containers.is_empty() {
            None
        } else {
            Some(view.init_containers.iter().map(container_status).collect())
        },
        host_ip: Some(view.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: view.host_ip.clone(),
        }]),
        pod_ip: view.pod_ip.clone(),
        pod_ips,
        start_time: Some(view.start_time.clone()),
        qos_class: None,
        observed_generation: view.observed_generation,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn term(code: i32) -> Termination {
        Termination {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: Some(t(1)),
            finished_at: t(2),
            container_id: Some("process://1".into()),
        }
    }

    fn c(name: &str, state: CurrentState, last: Option<Termination>, ready: bool) -> ContainerView {
        ContainerView {
            name: name.into(),
            image: "img".into(),
            image_id: "/bin/sh".into(),
            container_id: None,
            state,
            last_state: last,
            ready,
            started: ready,
            restart_count: 0,
        }
    }

    fn running() -> CurrentState {
        CurrentState::Running { started_at: t(1) }
    }

    fn waiting(reason: &str) -> CurrentState {
        CurrentState::Waiting {
            reason: reason.into(),
            message: None,
        }
    }

    fn pod(policy: &str, containers: Vec<ContainerView>) -> PodView {
        PodView {
            init_containers: vec![],
            containers,
            restart_policy: policy.into(),
            init_done: true,
            sandbox_ready: true,
            pod_ip: Some("127.0.0.10".into()),
            host_ip: "127.0.0.1".into(),
            start_time: t(0),
            observed_generation: Some(1),
            deleting: false,
        }
    }

    #[test]
    fn phases() {
        assert_eq!(
            phase(&pod(
                "Always",
                vec![c("a", waiting("ContainerCreating"), None, false)]
            )),
            "Pending"
        );
        assert_eq!(
            phase(&pod("Always", vec![c("a", running(), None, true)])),
            "Running"
        );
        let crashing = c("a", waiting("CrashLoopBackOff"), Some(term(1)), false);
        assert_eq!(phase(&pod("Always", vec![crashing])), "Running");
        let done = c("a", CurrentState::Terminated(term(0)), None, false);
        assert_eq!(phase(&pod("Never", vec![done.clone()])), "Succeeded");
        assert_eq!(phase(&pod("OnFailure", vec![done.clone()])), "Succeeded");
        let bad = c("b", CurrentState::Terminated(term(2)), None, false);
        assert_eq!(
            phase(&pod("Never", vec![done.clone(), bad.clone()])),
            "Failed"
        );
        assert_eq!(
            phase(&pod(
                "Never",
                vec![bad.clone(), c("c", running(), None, true)]
            )),
            "Running"
        );
        let mut deleted = pod("Always", vec![done.clone()]);
        deleted.deleting = true;
        assert_eq!(phase(&deleted), "Succeeded");
        deleted.containers.push(bad);
        assert_eq!(phase(&deleted), "Failed");

        let mut init = pod(
            "Never",
            vec![c("a", waiting("PodInitializing"), None, false)],
        );
        init.init_done = false;
        init.init_containers = vec![c("i", running(), None, false)];
        assert_eq!(phase(&init), "Pending");
        init.init_containers = vec![c("i", CurrentState::Terminated(term(1)), None, false)];
        assert_eq!(phase(&init), "Failed");
    }

    #[test]
    fn conditions_and_container_statuses() {
        let view = pod(
            "Always",
            vec![
                c("a", running(), None, true),
                c("b", running(), Some(term(137)), false),
            ],
        );
        let status = build(&view, &[], &t(10));
        let conds = status.conditions.unwrap();
        let get = |ty: &str| conds.iter().find(|c| c.type_ == ty).unwrap().clone();
        assert_eq!(get("Ready").status, "False");
        assert_eq!(
            get("Ready").message.as_deref(),
            Some("containers with unready status: [b]")
        );
        assert_eq!(get("PodScheduled").status, "True");
        assert_eq!(get("Initialized").status, "True");
        let statuses = status.container_statuses.unwrap();
        assert_eq!(
            statuses[1]
                .last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            137
        );
        assert!(statuses[0].state.as_ref().unwrap().running.is_some());
        assert_eq!(status.pod_ips.unwrap()[0].ip, "127.0.0.10");
        assert_eq!(status.phase.as_deref(), Some("Running"));

        // Transition times survive while the status stays the same.
        let ready_view = pod("Always", vec![c("a", running(), None, true)]);
        let first = build(&ready_view, &[], &t(20)).conditions.unwrap();
        let again = build(&ready_view, &first, &t(30)).conditions.unwrap();
        let ready_at = |cs: &[PodCondition]| {
            cs.iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(ready_at(&again), Some(t(20)));
        let not_ready = pod("Always", vec![c("a", running(), None, false)]);
        let flipped = build(&not_ready, &again, &t(40)).conditions.unwrap();
        assert_eq!(ready_at(&flipped), Some(t(40)));
    }

    #[test]
    fn completed_pods_are_not_ready() {
        let view = pod(
            "Never",
            vec![c("a", CurrentState::Terminated(term(0)), None, false)],
        );
        let status = build(&view, &[], &t(1));
        let ready = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodCompleted"))
        );
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    }
}
