//! Stopping a pod: preStop hooks, SIGTERM, grace period, SIGKILL, clean-up, and deleting the
//! object once nothing runs.

use super::*;

impl PodWorker {
    /// The grace period to use: the deletion's, else the pod's, capped on agent shutdown.
    pub(super) fn grace_seconds(&self, cause: Option<StopCause>) -> u64 {
        let spec_grace = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64;
        match cause {
            Some(StopCause::Deleted) => self
                .pod
                .metadata
                .deletion_grace_period_seconds
                .map(|g| g.max(0) as u64)
                .unwrap_or(spec_grace),
            Some(StopCause::Shutdown) => {
                spec_grace.min(self.shared.config.shutdown_grace.as_secs())
            }
            _ => spec_grace,
        }
    }

    pub(super) fn begin_stop(&mut self, cause: StopCause) {
        if cause == StopCause::Gone
            && self.stopping.is_none()
            && !self.dormant
            && zombie::armed(&self.pod)
        {
            return self.become_zombie();
        }
        if let Some(stopping) = &mut self.stopping {
            // A pod that disappears while stopping: no object left to delete.
            if cause == StopCause::Gone && stopping.cause == StopCause::Deleted {
                stopping.cause = StopCause::Gone;
            }
            return;
        }
        let grace = Duration::from_secs(self.grace_seconds(Some(cause)));
        tracing::info!(pod = %self.label(), ?cause, grace_secs = grace.as_secs(), "stopping pod");
        let deadline = Instant::now() + grace;
        self.stopping = Some(Stopping {
            cause,
            deadline,
            killed: false,
        });
        let pod_ip = self.pod_ip().to_string();
        for idx in 0..self.containers.len() {
            self.containers[idx].next_start = None;
            self.containers[idx].probes.clear();
            let Some(instance) = self.rec(idx).running else {
                continue;
            };
            let spec = &self.containers[idx].spec;
            if cause != StopCause::Gone {
                self.shared.events.normal(
                    &self.pod,
                    "Killing",
                    format!("Stopping container {}", spec.name),
                );
            }
            let hook = spec
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .and_then(|h| Action::of_hook(h, spec, &pod_ip).ok());
            let target = hook
                .as_ref()
                .and_then(|_| self.exec_target(idx, self.running_env(idx)));
            tokio::spawn(async move {
                if let (Some(action), Some(target)) = (hook, target) {
                    let budget = deadline.saturating_duration_since(Instant::now());
                    if let Err(e) = probes::run(&action, budget, &target).await {
                        tracing::warn!("preStop hook failed: {e}");
                    }
                }
                supervisor::signal(instance.shim, Signal::SIGTERM);
            });
        }
    }

    pub(super) async fn continue_stop(&mut self) {
        let Some(stopping) = &self.stopping else {
            return;
        };
        let (cause, deadline, killed) = (stopping.cause, stopping.deadline, stopping.killed);
        let running: Vec<usize> = (0..self.containers.len())
            .filter(|&i| self.rec(i).running.is_some())
            .collect();
        let now = Instant::now();
        if !running.is_empty() {
            if now >= deadline && !killed {
                tracing::info!(pod = %self.label(), "grace period over, killing");
                for &idx in &running {
                    if let Some(instance) = self.rec(idx).running {
                        supervisor::signal(instance.shim, Signal::SIGKILL);
                    }
                }
                if let Some(s) = &mut self.stopping {
                    s.killed = true;
                }
            }
            // Give SIGKILLed shims a moment to be reaped before giving up on them.
            if !(killed && now >= deadline + Duration::from_secs(10)) {
                return;
            }
            tracing::warn!(pod = %self.label(), "container processes did not report their exit");
        }
        if cause == StopCause::Deleted {
            self.publish_status().await;
        }
        if let Err(e) = self.shared.config.state.remove(&self.uid) {
            tracing::warn!(pod = %self.label(), "cannot remove pod directory: {e}");
        }
        if let Some(net) = self.pod_net() {
            net.teardown();
        }
        self.shared
            .ipam
            .lock()
            .expect("ipam lock")
            .release(&self.uid);
        if cause == StopCause::Deleted && !self.delete_object().await {
            // Retried on the next wake-up.
            self.retry_status_at = Some(Instant::now() + RETRY);
            return;
        }
        tracing::info!(pod = %self.label(), ?cause, "pod stopped and cleaned up");
        self.finished = true;
    }

    /// Deletes the pod object now that its processes are gone; true when it is gone.
    pub(super) async fn delete_object(&self) -> bool {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.record.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&self.record.name, &params).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => true,
            Err(e) => {
                tracing::warn!(pod = %self.label(), "cannot delete pod object: {e}");
                false
            }
        }
    }
}

impl PodWorker {
    /// The pod object was removed by force while the zombie switch was on: leave the processes
    /// running, unsupervised, keep their IP and files, and stop working on the pod.
    pub(super) fn become_zombie(&mut self) {
        self.record.zombie_since = Some(now_time());
        for c in &mut self.containers {
            c.next_start = None;
            c.probes.clear();
        }
        self.save();
        let pids: Vec<i32> = zombie::live_shims(&self.record)
            .iter()
            .map(|s| s.pid)
            .collect();
        tracing::warn!(
            pod = %self.label(), uid = %self.uid, shims = ?pids,
            "pod object removed by force: its processes keep running as a zombie ({})",
            zombie::ANNOTATION
        );
        self.shared.zombies.add(self.record.clone());
        self.finished = true;
    }
}
