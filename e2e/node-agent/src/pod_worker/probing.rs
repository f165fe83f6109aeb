//! Running probes against a pod's containers and acting on their verdicts.

use super::*;

impl PodWorker {
    pub(super) fn setup_probes(&mut self, idx: usize) {
        let pod_ip = self.pod_ip().to_string();
        let c = &mut self.containers[idx];
        let started = Instant::now();
        c.probes.clear();
        let specs = [
            (ProbeKind::Startup, c.spec.startup_probe.clone()),
            (ProbeKind::Readiness, c.spec.readiness_probe.clone()),
            (ProbeKind::Liveness, c.spec.liveness_probe.clone()),
        ];
        for (kind, probe) in specs {
            let Some(probe) = probe else { continue };
            match Action::of_probe(&probe, &c.spec, &pod_ip) {
                Ok(action) => {
                    if let Action::Unsupported(what) = &action {
                        tracing::warn!(container = %c.spec.name, "{what} are not supported; the probe always succeeds");
                    }
                    c.probes
                        .push(ProbeState::new(kind, &probe, action, started));
                }
                Err(e) => tracing::warn!(container = %c.spec.name, "invalid {kind:?} probe: {e}"),
            }
        }
    }

    pub(super) fn exec_target(&self, idx: usize, env: Vec<(String, String)>) -> Option<ExecTarget> {
        let c = &self.containers[idx];
        let dir = self
            .shared
            .config
            .state
            .container_dir(&self.uid, &c.spec.name);
        let pid = ContainerFiles::new(&dir).main_pid()?;
        Some(ExecTarget {
            pid,
            env,
            user: sandbox::container_user(&self.pod, &c.spec).ok().flatten(),
            cwd: c
                .spec
                .working_dir
                .clone()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "/".into())
                .into(),
        })
    }

    /// The environment of a running container, from its launch spec.
    pub(super) fn running_env(&self, idx: usize) -> Vec<(String, String)> {
        let dir = self
            .shared
            .config
            .state
            .container_dir(&self.uid, &self.containers[idx].spec.name);
        std::fs::read(ContainerFiles::new(&dir).launch)
            .ok()
            .and_then(|b| serde_json::from_slice::<LaunchSpec>(&b).ok())
            .map(|l| l.env)
            .unwrap_or_else(|| self.base_env())
    }

    pub(super) fn run_due_probes(&mut self) {
        let now = Instant::now();
        for idx in 0..self.containers.len() {
            let rec = self.rec(idx);
            if rec.running.is_none() || self.containers[idx].kill_deadline.is_some() {
                continue;
            }
            let kinds = self.containers[idx].active_probe_kinds(&rec);
            let due: Vec<usize> = self.containers[idx]
                .probes
                .iter()
                .enumerate()
                .filter(|(_, p)| kinds.contains(&p.kind) && !p.in_flight && p.next_due <= now)
                .map(|(i, _)| i)
                .collect();
            for p in due {
                let needs_exec =
                    matches!(self.containers[idx].probes[p].action, Action::Exec { .. });
                let target = if needs_exec {
                    self.exec_target(idx, self.running_env(idx))
                } else {
                    None
                };
                let c = &mut self.containers[idx];
                let probe = &mut c.probes[p];
                probe.in_flight = true;
                let (action, timeout, kind, seq) =
                    (probe.action.clone(), probe.timeout, probe.kind, c.seq);
                let target = target.unwrap_or(ExecTarget {
                    pid: 0,
                    env: Vec::new(),
                    user: None,
                    cwd: "/".into(),
                });
                let tx = self.probe_results.0.clone();
                tokio::spawn(async move {
                    let outcome = probes::run(&action, timeout, &target).await;
                    let _ = tx.send(ProbeResult {
                        idx,
                        seq,
                        kind,
                        outcome,
                    });
                });
            }
        }
    }

    pub(super) fn on_probe(&mut self, result: ProbeResult) {
        let label = self.label();
        let Some(c) = self.containers.get_mut(result.idx) else {
            return;
        };
        if c.seq != result.seq {
            return;
        }
        let Some(probe) = c.probes.iter_mut().find(|p| p.kind == result.kind) else {
            return;
        };
        let failed_now = result.outcome.is_err();
        let changed = probe.record(result.outcome, Instant::now());
        let verdict = probe.result;
        let message = probe.last_error.clone().unwrap_or_default();
        let name = c.spec.name.clone();
        if failed_now {
            tracing::debug!(pod = %label, container = %name, "{:?} probe failed: {message}", result.kind);
        }
        if !changed {
            return;
        }
        tracing::info!(pod = %label, container = %name, "{:?} probe verdict: {verdict:?}", result.kind);
        if verdict == Some(false) {
            self.shared.events.warning(
                &self.pod,
                "Unhealthy",
                format!("{:?} probe failed: {message}", result.kind),
            );
            if matches!(result.kind, ProbeKind::Liveness | ProbeKind::Startup) {
                self.kill_container(
                    result.idx,
                    &format!(
                        "Container {name} failed {:?} probe, will be restarted",
                        result.kind
                    ),
                );
            }
        }
    }

    /// Stops a running container (SIGTERM now, SIGKILL after its grace period).
    pub(super) fn kill_container(&mut self, idx: usize, why: &str) {
        let Some(instance) = self.rec(idx).running else {
            return;
        };
        let grace = self.grace_seconds(None);
        tracing::info!(pod = %self.label(), "{why}");
        self.shared
            .events
            .normal(&self.pod, "Killing", why.to_string());
        supervisor::signal(instance.shim, Signal::SIGTERM);
        self.containers[idx].kill_deadline = Some(Instant::now() + Duration::from_secs(grace));
    }

    pub(super) fn enforce_kill_deadlines(&mut self) {
        let now = Instant::now();
        for idx in 0..self.containers.len() {
            let due = self.containers[idx].kill_deadline.is_some_and(|d| d <= now);
            if let (true, Some(instance)) = (due, self.rec(idx).running) {
                supervisor::signal(instance.shim, Signal::SIGKILL);
                self.containers[idx].kill_deadline = None;
            }
        }
    }
}
