//! Starting container instances (environment, mounts, user, command lookup, shim) and
//! recording how they end: restart policy and back-off.

use super::*;

impl PodWorker {
    pub(super) async fn start_due_containers(&mut self) {
        let now = Instant::now();
        if !self.record.init_done {
            let pending = (0..self.containers.len())
                .filter(|&i| self.containers[i].init)
                .find(|&i| !self.containers[i].succeeded(&self.rec(i)));
            match pending {
                None => {
                    self.record.init_done = true;
                    self.save();
                }
                Some(idx) => {
                    let c = &self.containers[idx];
                    if self.rec(idx).running.is_none() && c.next_start.is_some_and(|t| t <= now) {
                        self.start_container(idx).await;
                    }
                    return;
                }
            }
        }
        for idx in 0..self.containers.len() {
            let c = &self.containers[idx];
            let due = !c.init && c.next_start.is_some_and(|t| t <= now);
            if due && self.rec(idx).running.is_none() {
                self.start_container(idx).await;
            }
        }
    }

    pub(super) fn config_error(&mut self, idx: usize, reason: &str, message: String) {
        let label = self.label();
        let c = &mut self.containers[idx];
        if c.waiting.as_ref().map(|w| &w.1) != Some(&Some(message.clone())) {
            tracing::warn!(pod = %label, container = %c.spec.name, "{reason}: {message}");
            self.shared
                .events
                .warning(&self.pod, "Failed", message.clone());
        }
        let c = &mut self.containers[idx];
        c.waiting = Some((reason.to_string(), Some(message)));
        c.next_start = Some(Instant::now() + RETRY);
    }

    pub(super) fn base_env(&self) -> Vec<(String, String)> {
        let config = &self.shared.config;
        let mut base = vec![
            ("PATH".to_string(), config.path_var.clone()),
            ("HOSTNAME".to_string(), self.record.name.clone()),
            ("HOME".to_string(), "/".to_string()),
        ];
        base.extend(config.service_env());
        base
    }

    pub(super) async fn start_container(&mut self, idx: usize) {
        let spec = self.containers[idx].spec.clone();
        let client = self.shared.client.clone();
        let refs = References::of_container_env(&spec);
        let fetched = match sources::fetch(&client, &self.record.namespace, &refs).await {
            Ok(s) => s,
            Err(e) => return self.config_error(idx, "ContainerCreating", e.to_string()),
        };
        let env =
            match env::container_env(&self.pod, &spec, self.base_env(), &self.facts(), &fetched) {
                Ok(env) => env,
                Err(e) => {
                    return self.config_error(idx, "CreateContainerConfigError", e.to_string());
                }
            };
        let argv = env::expand_command(&spec, &env);
        if spec.command.as_ref().is_none_or(|c| c.is_empty()) {
            let message = "the node agent runs no images: the container needs a command".into();
            return self.config_error(idx, "CreateContainerConfigError", message);
        }
        let user = match sandbox::container_user(&self.pod, &spec) {
            Ok(u) => u,
            Err(e) => return self.config_error(idx, "CreateContainerConfigError", e),
        };
        let volumes = self.volumes.clone().unwrap_or_default();
        let mut mounts = self.base_mounts.clone();
        match volumes::container_mounts(&spec, &volumes, &env) {
            Ok(m) => mounts.extend(m),
            Err(e) => return self.config_error(idx, "CreateContainerConfigError", e.to_string()),
        }
        let config = &self.shared.config;
        let log = logs::container_log(
            &config.logs_dir,
            &self.record.namespace,
            &self.record.name,
            &spec.name,
        );
        if let Err(e) = logs::rotate(&log) {
            tracing::warn!(pod = %self.label(), "cannot rotate {}: {e}", log.display());
        }
        let was_started_before = self.rec(idx).last.is_some();
        let namespace_dirs = self
            .shared
            .bin_paths
            .dirs(&self.shared.client, &self.record.namespace)
            .await;
        let config = &self.shared.config;
        let bin_dirs = ns_bin_path::search_dirs(&namespace_dirs, &config.bin_dirs);
        let program = match resolve::resolve(&argv[0], &bin_dirs, &config.path_var) {
            Ok(p) => p,
            Err(e) => {
                if was_started_before {
                    self.rec_mut(idx).restart_count += 1;
                }
                let record = ExitRecord::start_error(e.to_string(), Timestamp::now().to_string());
                return self.finish_instance(idx, record, None);
            }
        };
        let dir = config.state.container_dir(&self.uid, &spec.name);
        let files = ContainerFiles::new(&dir);
        match termination::prepare(&files.termination) {
            Ok(()) => mounts.push(BindMount {
                source: files.termination.clone(),
                target: termination::target(&spec),
                read_only: false,
            }),
            Err(e) => tracing::warn!(
                pod = %self.label(), container = %spec.name,
                "no termination message file: {e}"
            ),
        }
        let working_dir = spec
            .working_dir
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/".into());
        let launch = LaunchSpec {
            program: program.clone(),
            argv: argv.clone(),
            env: env.clone(),
            working_dir: PathBuf::from(&working_dir),
            hostname: self.record.name.chars().take(63).collect(),
            user: user.clone(),
            mounts,
            read_only_root: spec
                .security_context
                .as_ref()
                .and_then(|s| s.read_only_root_filesystem)
                .unwrap_or(false),
            log_file: log.clone(),
            exit_file: files.exit.clone(),
            pid_file: files.pid.clone(),
            netns: self.pod_net().map(|n| n.path()),
        };
        if was_started_before {
            self.rec_mut(idx).restart_count += 1;
        }
        let shim = match supervisor::start(&launch, &files) {
            Ok(shim) => shim,
            Err(e) => {
                let message = format!("cannot start the container shim: {e}");
                let record = ExitRecord::start_error(message, Timestamp::now().to_string());
                return self.finish_instance(idx, record, None);
            }
        };
        let id = shim.id();
        let instance = Instance {
            shim: id,
            started_at: now_time(),
            container_id: format!("process://{}", id.pid),
            image_id: program.display().to_string(),
        };
        let rec = self.rec_mut(idx);
        rec.running = Some(instance);
        rec.image_id = Some(program.display().to_string());
        let c = &mut self.containers[idx];
        c.seq += 1;
        c.next_start = None;
        c.waiting = None;
        c.ready_hint = false;
        c.run_started = Some(Instant::now());
        c.kill_deadline = None;
        let seq = c.seq;
        self.save();
        tracing::info!(
            pod = %self.label(), container = %spec.name, pid = id.pid,
            program = %program.display(), ip = %self.pod_ip(), "started container"
        );
        self.shared.events.normal(
            &self.pod,
            "Started",
            format!("Started container {} ({})", spec.name, program.display()),
        );
        self.spawn_waiter(idx, seq, shim);
        self.setup_probes(idx);
    }

    /// The files of container `idx`'s instance (launch spec, exit record, message, ...).
    fn files_of(&self, idx: usize) -> ContainerFiles {
        ContainerFiles::new(
            &self
                .shared
                .config
                .state
                .container_dir(&self.uid, &self.containers[idx].spec.name),
        )
    }

    pub(super) fn spawn_waiter(&self, idx: usize, seq: u64, shim: Shim) {
        let files = self.files_of(idx);
        let tx = self.exits.0.clone();
        tokio::spawn(async move {
            let record = supervisor::wait(shim, &files.exit).await;
            let _ = tx.send(Exit { idx, seq, record });
        });
    }

    pub(super) fn on_exit(&mut self, exit: Exit) {
        if self
            .containers
            .get(exit.idx)
            .is_none_or(|c| c.seq != exit.seq)
        {
            return;
        }
        let started = self.containers[exit.idx].run_started;
        self.finish_instance(exit.idx, exit.record, started);
    }

    /// Records the end of an instance (or a failed start) and schedules what comes next.
    pub(super) fn finish_instance(
        &mut self,
        idx: usize,
        exit: ExitRecord,
        run_started: Option<Instant>,
    ) {
        let label = self.label();
        let policy = self.policy();
        let backoff = self.shared.config.backoff;
        let log = logs::container_log(
            &self.shared.config.logs_dir,
            &self.record.namespace,
            &self.record.name,
            &self.containers[idx].spec.name,
        );
        let fallback_to_logs = self.containers[idx]
            .spec
            .termination_message_policy
            .as_deref()
            == Some("FallbackToLogsOnError");
        let files = self.files_of(idx);
        let rec = self.rec_mut(idx);
        let instance = rec.running.take();
        let mut message = exit
            .message
            .clone()
            .or_else(|| termination::read(&files.termination));
        if message.is_none() && exit.exit_code != 0 && fallback_to_logs {
            message = logs::tail(&log, 2048);
        }
        let termination = Termination {
            exit_code: exit.exit_code,
            signal: exit.signal,
            reason: exit.reason.clone(),
            message,
            started_at: instance.as_ref().map(|i| i.started_at.clone()),
            finished_at: exit
                .finished_at
                .parse::<Timestamp>()
                .map(|t| Time(Timestamp::from_second(t.as_second()).unwrap_or(t)))
                .unwrap_or_else(|_| now_time()),
            container_id: instance.as_ref().map(|i| i.container_id.clone()),
        };
        rec.previous = rec.last.take();
        rec.last = Some(termination);
        let ran_for = run_started.map(|s| s.elapsed()).unwrap_or_default();
        let streak = backoff.streak_after_run(rec.streak, ran_for);
        let delay = backoff.delay(streak);
        let restart = should_restart(&policy, self.containers[idx].init, exit.exit_code)
            && self.stopping.is_none();
        let rec = self.rec_mut(idx);
        rec.streak = if restart { streak + 1 } else { streak };
        let c = &mut self.containers[idx];
        c.probes.clear();
        c.kill_deadline = None;
        c.run_started = None;
        let name = c.spec.name.clone();
        tracing::info!(
            pod = %label, container = %name, exit_code = exit.exit_code, reason = %exit.reason,
            message = exit.message.as_deref().unwrap_or(""), restart, "container ended"
        );
        if restart {
            c.next_start = Some(Instant::now() + delay);
            c.waiting = if delay.is_zero() {
                None
            } else {
                let message = back_off_message(
                    delay,
                    &name,
                    &self.record.name,
                    &self.record.namespace,
                    &self.uid,
                );
                self.shared
                    .events
                    .warning(&self.pod, "BackOff", message.clone());
                Some(("CrashLoopBackOff".into(), Some(message)))
            };
        } else {
            c.next_start = None;
            c.waiting = None;
        }
        if exit.reason == "StartError" {
            let message = exit.message.clone().unwrap_or_default();
            self.shared.events.warning(&self.pod, "Failed", message);
        }
        self.save();
    }
}
