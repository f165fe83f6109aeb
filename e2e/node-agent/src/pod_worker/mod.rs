//! One task per pod bound to this node: sets up the pod (IP, directory, volumes), runs init
//! containers in order and then the containers, restarts them per `restartPolicy` with back-off,
//! runs probes, publishes the pod status, and on deletion stops the processes (SIGTERM, grace
//! period, SIGKILL), removes the pod's files and only then deletes the pod object.

mod probing;
mod report;
mod start;
mod stop;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::AgentConfig;
use crate::container::{ContainerRuntime, back_off_message, should_restart};
use crate::downward::PodFacts;
use crate::events::Events;
use crate::ipam::Ipam;
use crate::launch::{BindMount, ExitRecord, LaunchSpec};
use crate::probes::{self, Action, ExecTarget, ProbeKind, ProbeState};
use crate::sources::{self, References};
use crate::state::{ContainerRecord, Instance, PodRecord, Termination};
use crate::status::{self, ContainerView, PodView};
use crate::supervisor::{self, ContainerFiles, Shim};
use crate::token::TokenCache;
use crate::volumes::{self, HostVolume};
use crate::{env, logs, ns_bin_path, payload, resolve, sandbox, termination, zombie};

/// What every pod worker shares.
pub struct Shared {
    /// API client.
    pub client: Client,
    /// Agent settings.
    pub config: AgentConfig,
    /// Pod IP allocation.
    pub ipam: Mutex<Ipam>,
    /// Event publisher.
    pub events: Events,
    /// Per-namespace directories searched first for container commands.
    pub bin_paths: crate::ns_bin_path::NamespaceBinPaths,
    /// Pods whose objects were removed by force while their processes were left running.
    pub zombies: crate::zombie::Zombies,
}

/// The outcome of an instance, sent by its waiter task.
struct Exit {
    idx: usize,
    seq: u64,
    record: ExitRecord,
}

/// The outcome of a probe attempt.
struct ProbeResult {
    idx: usize,
    seq: u64,
    kind: ProbeKind,
    outcome: Result<(), String>,
}

/// Why the pod's processes are being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopCause {
    /// The pod has a deletionTimestamp: stop, clean up, delete the object.
    Deleted,
    /// The pod object is gone: stop and clean up.
    Gone,
    /// The agent stops: stop and clean up, leave the object.
    Shutdown,
}

struct Stopping {
    cause: StopCause,
    deadline: Instant,
    killed: bool,
}

const RETRY: Duration = Duration::from_secs(2);

/// The pod worker.
pub struct PodWorker {
    shared: Arc<Shared>,
    uid: String,
    pod: Arc<Pod>,
    record: PodRecord,
    containers: Vec<ContainerRuntime>,
    base_mounts: Vec<BindMount>,
    volumes: Option<BTreeMap<String, HostVolume>>,
    volume_error: Option<String>,
    next_volume_refresh: Instant,
    tokens: TokenCache,
    exits: (mpsc::UnboundedSender<Exit>, mpsc::UnboundedReceiver<Exit>),
    probe_results: (
        mpsc::UnboundedSender<ProbeResult>,
        mpsc::UnboundedReceiver<ProbeResult>,
    ),
    last_published: Option<serde_json::Value>,
    retry_status_at: Option<Instant>,
    stopping: Option<Stopping>,
    /// A pod that finished before this agent (re)started: it is never run again.
    dormant: bool,
    /// The zombie switch was seen on the pod and noted in its directory.
    zombie_noted: bool,
    finished: bool,
}

fn now_time() -> Time {
    // API times have second precision; match it so that comparisons with the object hold.
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH))
}

impl PodWorker {
    /// A worker for `pod`, resuming `saved` state if the agent ran it before.
    pub fn new(shared: Arc<Shared>, pod: Arc<Pod>, saved: Option<PodRecord>) -> PodWorker {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let containers: Vec<ContainerRuntime> = spec
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| ContainerRuntime::new(c, true))
            .chain(
                spec.containers
                    .into_iter()
                    .map(|c| ContainerRuntime::new(c, false)),
            )
            .collect();
        let api_phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        // Without saved state a finished or deleted pod has nothing running here: never start it.
        let dormant = saved.is_none()
            && (matches!(api_phase.as_deref(), Some("Succeeded" | "Failed"))
                || pod.metadata.deletion_timestamp.is_some());
        let record = saved.unwrap_or_else(|| PodRecord {
            uid: uid.clone(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            ip: None,
            start_time: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.clone())
                .unwrap_or_else(now_time),
            init_done: !containers.iter().any(|c| c.init),
            containers: BTreeMap::new(),
            zombie_since: None,
            isolated_network: false,
        });
        PodWorker {
            shared,
            uid,
            pod,
            record,
            containers,
            base_mounts: Vec::new(),
            volumes: None,
            volume_error: None,
            next_volume_refresh: Instant::now(),
            tokens: TokenCache::default(),
            exits: mpsc::unbounded_channel(),
            probe_results: mpsc::unbounded_channel(),
            last_published: None,
            retry_status_at: None,
            stopping: None,
            dormant,
            zombie_noted: false,
            finished: false,
        }
    }

    fn label(&self) -> String {
        format!("{}/{}", self.record.namespace, self.record.name)
    }

    fn policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    fn host_network(&self) -> bool {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false)
    }

    fn pod_ip(&self) -> Ipv4Addr {
        match (self.record.ip, self.pod_net()) {
            (_, Some(net)) => net.pod_addr,
            (Some(ip), None) => ip,
            (None, None) => self.shared.config.host_ip,
        }
    }

    /// The pod's own network namespace, when its namespace asked for one (`netns.rs`).
    fn pod_net(&self) -> Option<crate::netns::PodNet> {
        let ip = self.record.ip.filter(|_| self.record.isolated_network)?;
        crate::netns::PodNet::of(ip).ok()
    }

    /// Whether a new pod's namespace asks for an isolated network (read once, at the start).
    async fn wants_isolated_network(&self) -> bool {
        use k8s_openapi::api::core::v1::Namespace;
        let api: kube::Api<Namespace> = kube::Api::all(self.shared.client.clone());
        match api.get_opt(&self.record.namespace).await {
            Ok(Some(ns)) => ns
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::netns::ANNOTATION))
                .is_some_and(|v| v == crate::netns::ISOLATED),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(pod = %self.label(), "cannot read the namespace's network annotation: {e}");
                false
            }
        }
    }

    fn facts(&self) -> PodFacts {
        let config = &self.shared.config;
        PodFacts {
            pod_ip: self.pod_ip().to_string(),
            host_ip: config.host_ip.to_string(),
            node_name: config.node_name.clone(),
            allocatable: config.allocatable,
        }
    }

    fn rec(&self, idx: usize) -> ContainerRecord {
        let name = &self.containers[idx].spec.name;
        self.record
            .containers
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    fn rec_mut(&mut self, idx: usize) -> &mut ContainerRecord {
        let name = self.containers[idx].spec.name.clone();
        self.record.containers.entry(name).or_default()
    }

    fn save(&self) {
        if self.dormant {
            return;
        }
        if let Err(e) = self.shared.config.state.save(&self.record) {
            tracing::error!(pod = %self.label(), "cannot save pod state: {e}");
        }
    }

    /// Runs the pod until it is deleted (or the agent stops).
    pub async fn run(
        mut self,
        mut pod_rx: watch::Receiver<Option<Arc<Pod>>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let (mut pod_closed, mut shutdown_closed) = (false, false);
        if *shutdown.borrow_and_update() {
            self.begin_stop(StopCause::Shutdown);
        } else {
            if self.record.ip.is_none() && !self.host_network() && !self.dormant {
                self.record.isolated_network = self.wants_isolated_network().await;
            }
            self.start_up();
        }
        while !self.finished {
            self.reconcile().await;
            if self.finished {
                break;
            }
            self.publish_status().await;
            let wake = self.next_wakeup();
            tokio::select! {
                changed = pod_rx.changed(), if !pod_closed => {
                    let latest = match changed {
                        Ok(()) => pod_rx.borrow_and_update().clone(),
                        Err(_) => {
                            pod_closed = true;
                            None
                        }
                    };
                    match latest {
                        Some(pod) => self.pod = pod,
                        None => self.begin_stop(StopCause::Gone),
                    }
                }
                changed = shutdown.changed(), if !shutdown_closed => {
                    shutdown_closed = changed.is_err();
                    if changed.is_err() || *shutdown.borrow_and_update() {
                        self.begin_stop(StopCause::Shutdown);
                    }
                }
                Some(exit) = self.exits.1.recv() => self.on_exit(exit),
                Some(result) = self.probe_results.1.recv() => self.on_probe(result),
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
        tracing::debug!(pod = %self.label(), "pod worker finished");
    }

    /// IP, sandbox, and adoption of instances that survived an agent restart.
    fn start_up(&mut self) {
        if self.dormant {
            for c in &mut self.containers {
                c.next_start = None;
            }
            tracing::info!(pod = %self.label(), "pod finished or deleted before this agent ran it; not starting it");
            return;
        }
        if self.record.ip.is_none() && !self.host_network() {
            let allocated = self
                .shared
                .ipam
                .lock()
                .expect("ipam lock")
                .allocate(&self.uid);
            match allocated {
                Ok(ip) => self.record.ip = Some(ip),
                Err(e) => {
                    self.record.isolated_network = false;
                    tracing::error!(pod = %self.label(), "{e}");
                    for c in &mut self.containers {
                        c.waiting = Some(("ContainerCreating".into(), Some(e.to_string())));
                        c.next_start = None;
                    }
                }
            }
        }
        if let Some(net) = self.pod_net() {
            match net.setup() {
                Ok(()) => {
                    tracing::info!(pod = %self.label(), netns = %net.netns, ip = %net.pod_addr, "isolated pod network")
                }
                Err(e) => {
                    let message = format!("cannot set up the pod's isolated network: {e}");
                    tracing::error!(pod = %self.label(), "{message}");
                    for c in &mut self.containers {
                        c.waiting = Some(("ContainerCreating".into(), Some(message.clone())));
                        c.next_start = None;
                    }
                }
            }
        }
        let pod_dir = self.shared.config.state.pod_dir(&self.uid);
        let api_host = self.shared.config.api_host.clone();
        match sandbox::prepare(&pod_dir, &self.pod, self.pod_ip(), &api_host) {
            Ok(mounts) => self.base_mounts = mounts,
            Err(e) => tracing::error!(pod = %self.label(), "cannot prepare pod directory: {e}"),
        }
        self.seed_restart_counts();
        let policy = self.policy();
        for idx in 0..self.containers.len() {
            let rec = self.rec(idx);
            if let Some(instance) = &rec.running {
                let label = self.label();
                let ready_hint = self.api_ready(&self.containers[idx].spec.name);
                let c = &mut self.containers[idx];
                c.next_start = None;
                c.seq += 1;
                c.run_started = Some(Instant::now());
                c.ready_hint = ready_hint;
                let seq = c.seq;
                tracing::info!(pod = %label, container = %c.spec.name, pid = instance.shim.pid, "adopting running container");
                self.spawn_waiter(idx, seq, Shim::Adopted(instance.shim));
                self.setup_probes(idx);
            } else if let Some(last) = &rec.last {
                let c = &mut self.containers[idx];
                if !should_restart(&policy, c.init, last.exit_code) {
                    c.next_start = None;
                }
            }
        }
        self.save();
    }

    /// Without saved state, restart counts continue from the pod's status.
    fn seed_restart_counts(&mut self) {
        let Some(status) = self.pod.status.clone() else {
            return;
        };
        let all = status
            .init_container_statuses
            .unwrap_or_default()
            .into_iter()
            .chain(status.container_statuses.unwrap_or_default());
        for cs in all {
            let ran = cs
                .last_state
                .as_ref()
                .is_some_and(|s| s.terminated.is_some())
                || cs
                    .state
                    .as_ref()
                    .is_some_and(|s| s.running.is_some() || s.terminated.is_some());
            let entry = self.record.containers.entry(cs.name.clone()).or_default();
            if ran && entry.running.is_none() && entry.last.is_none() && entry.restart_count == 0 {
                entry.restart_count = cs.restart_count + 1;
            }
        }
    }

    fn api_ready(&self, name: &str) -> bool {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == name))
            .is_some_and(|c| c.ready)
    }

    /// One pass over everything that may be due.
    async fn reconcile(&mut self) {
        if !self.zombie_noted && !self.dormant && zombie::armed(&self.pod) {
            zombie::note_armed(&self.shared.config.state.pod_dir(&self.uid));
            self.zombie_noted = true;
        }
        if self.stopping.is_none() && self.pod.metadata.deletion_timestamp.is_some() {
            let forced = self.pod.metadata.deletion_grace_period_seconds == Some(0);
            if forced && zombie::armed(&self.pod) && !self.dormant {
                self.delete_object().await;
                self.become_zombie();
                return;
            }
            self.begin_stop(StopCause::Deleted);
        }
        if self.stopping.is_some() {
            self.continue_stop().await;
            return;
        }
        if self.dormant {
            return;
        }
        let now = Instant::now();
        if now >= self.next_volume_refresh {
            self.refresh_volumes().await;
        }
        if self.volumes.is_none() {
            return;
        }
        self.start_due_containers().await;
        self.enforce_kill_deadlines();
        self.run_due_probes();
    }

    async fn refresh_volumes(&mut self) {
        let result = self.try_refresh_volumes().await;
        let now = Instant::now();
        match result {
            Ok(vols) => {
                if self.volume_error.take().is_some() {
                    tracing::info!(pod = %self.label(), "volumes are ready");
                }
                self.volumes = Some(vols);
                self.next_volume_refresh = now + self.shared.config.volume_refresh;
            }
            Err(message) => {
                if self.volume_error.as_deref() != Some(message.as_str()) {
                    tracing::warn!(pod = %self.label(), "volumes not ready: {message}");
                    self.shared
                        .events
                        .warning(&self.pod, "FailedMount", message.clone());
                }
                self.volume_error = Some(message);
                self.next_volume_refresh = now + RETRY;
            }
        }
    }

    async fn try_refresh_volumes(&mut self) -> Result<BTreeMap<String, HostVolume>, String> {
        let client = self.shared.client.clone();
        let keys = payload::token_keys(&self.pod);
        self.tokens
            .refresh(&client, &self.pod, &keys)
            .await
            .map_err(|e| format!("service account token: {e}"))?;
        let refs = References::of_volumes(&self.pod);
        let fetched = sources::fetch(&client, &self.record.namespace, &refs)
            .await
            .map_err(|e| e.to_string())?;
        let pod_dir = self.shared.config.state.pod_dir(&self.uid);
        volumes::materialise(
            &pod_dir,
            &self.pod,
            &self.facts(),
            &fetched,
            &self.tokens.tokens(),
            sandbox::volume_owner(&self.pod),
        )
        .map_err(|e| e.to_string())
    }

    fn next_wakeup(&self) -> Instant {
        let mut wake = Instant::now() + Duration::from_secs(30);
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                wake = wake.min(t);
            }
        };
        if let Some(s) = &self.stopping {
            consider(Some(s.deadline));
            if s.killed {
                consider(Some(s.deadline + Duration::from_secs(10)));
            }
            consider(self.retry_status_at);
            return wake;
        }
        if !self.dormant {
            consider(Some(self.next_volume_refresh));
        }
        consider(self.retry_status_at);
        for (idx, c) in self.containers.iter().enumerate() {
            let running = self
                .record
                .containers
                .get(&c.spec.name)
                .is_some_and(|r| r.running.is_some());
            if !running {
                let blocked = !c.init && !self.record.init_done;
                if !blocked {
                    consider(c.next_start);
                }
                continue;
            }
            consider(c.kill_deadline);
            let rec = self.rec(idx);
            let kinds = c.active_probe_kinds(&rec);
            for p in c
                .probes
                .iter()
                .filter(|p| kinds.contains(&p.kind) && !p.in_flight)
            {
                consider(Some(p.next_due));
            }
        }
        wake
    }
}
