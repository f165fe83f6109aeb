//! The pod watch: binds pending pods to this node, starts a [`PodWorker`] for every pod bound
//! here and forwards it each change; at start-up it re-adopts pods the agent ran before and
//! stops the processes of pods that no longer exist.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::binding;
use crate::pod_worker::{PodWorker, Shared};
use crate::state::PodRecord;
use crate::supervisor;
use crate::zombie;

struct WorkerHandle {
    tx: watch::Sender<Option<Arc<Pod>>>,
    task: JoinHandle<()>,
}

/// Dispatches pod events to pod workers.
pub struct Controller {
    shared: Arc<Shared>,
    labels: BTreeMap<String, String>,
    workers: HashMap<String, WorkerHandle>,
    saved: HashMap<String, PodRecord>,
    binding: Arc<std::sync::Mutex<HashSet<String>>>,
    shutdown: watch::Receiver<bool>,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

impl Controller {
    /// A controller for the node described by `shared`.
    pub fn new(
        shared: Arc<Shared>,
        labels: BTreeMap<String, String>,
        shutdown: watch::Receiver<bool>,
    ) -> Controller {
        Controller {
            shared,
            labels,
            workers: HashMap::new(),
            saved: HashMap::new(),
            binding: Arc::default(),
            shutdown,
        }
    }

    /// Sorts saved pod state into pods to re-adopt and leftovers to stop.
    pub async fn restore(&mut self) -> Result<(), kube::Error> {
        let config = &self.shared.config;
        let (records, unreadable) = config.state.load_all();
        for uid in unreadable {
            tracing::warn!(%uid, "dropping unreadable pod state");
            let _ = config.state.remove(&uid);
        }
        if records.is_empty() {
            return Ok(());
        }
        let api: Api<Pod> = Api::all(self.shared.client.clone());
        let ours: HashSet<String> = api
            .list(&ListParams::default())
            .await?
            .into_iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&config.node_name)
            })
            .map(|p| uid_of(&p))
            .collect();
        for record in records {
            if record.zombie_since.is_some()
                && !ours.contains(&record.uid)
                && !zombie::live_shims(&record).is_empty()
            {
                if let Some(ip) = record.ip {
                    self.shared
                        .ipam
                        .lock()
                        .expect("ipam lock")
                        .restore(&record.uid, ip);
                }
                tracing::info!(pod = %zombie::label(&record), "a zombie pod still runs; leaving it alone");
                self.shared.zombies.add(record);
                continue;
            }
            if ours.contains(&record.uid) {
                if let Some(ip) = record.ip {
                    let mut ipam = self.shared.ipam.lock().expect("ipam lock");
                    if !ipam.restore(&record.uid, ip) {
                        tracing::warn!(uid = %record.uid, %ip, "saved pod IP is not available");
                    }
                }
                tracing::info!(pod = %format!("{}/{}", record.namespace, record.name), "re-adopting pod");
                self.saved.insert(record.uid.clone(), record);
            } else {
                let state = config.state.clone();
                let grace = config.shutdown_grace;
                tokio::task::spawn_blocking(move || {
                    supervisor::stop_recorded(&record, grace);
                    if let Err(e) = state.remove(&record.uid) {
                        tracing::warn!(uid = %record.uid, "cannot remove pod state: {e}");
                    }
                });
            }
        }
        Ok(())
    }

    /// Watches pods until shutdown, then waits for the workers to stop their pods.
    pub async fn run(mut self) {
        let api: Api<Pod> = Api::all(self.shared.client.clone());
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut listing: Option<HashSet<String>> = None;
        let mut shutdown = self.shutdown.clone();
        let mut reap = tokio::time::interval(Duration::from_secs(2));
        loop {
            self.workers.retain(|_, w| !w.task.is_finished());
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = reap.tick() => {
                    self.shared.zombies.reap(&self.shared.config.state, &self.shared.ipam);
                }
                event = events.next() => match event {
                    None => break,
                    Some(Err(e)) => tracing::warn!("pod watch: {e}"),
                    Some(Ok(watcher::Event::Init)) => listing = Some(HashSet::new()),
                    Some(Ok(watcher::Event::InitApply(pod))) => {
                        if let Some(seen) = &mut listing {
                            seen.insert(uid_of(&pod));
                        }
                        self.on_pod(pod);
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        if let Some(seen) = listing.take() {
                            for (uid, worker) in &self.workers {
                                if !seen.contains(uid) {
                                    let _ = worker.tx.send(None);
                                }
                            }
                        }
                    }
                    Some(Ok(watcher::Event::Apply(pod))) => self.on_pod(pod),
                    Some(Ok(watcher::Event::Delete(pod))) => {
                        if let Some(worker) = self.workers.get(&uid_of(&pod)) {
                            let _ = worker.tx.send(None);
                        }
                    }
                },
            }
        }
        tracing::info!("stopping {} pod(s)", self.workers.len());
        let limit = self.shared.config.shutdown_grace + Duration::from_secs(15);
        // The senders stay alive until the workers are done: a closed channel means "pod gone".
        let (senders, tasks): (Vec<_>, Vec<_>) =
            self.workers.drain().map(|(_, w)| (w.tx, w.task)).unzip();
        if tokio::time::timeout(limit, futures::future::join_all(tasks))
            .await
            .is_err()
        {
            tracing::warn!("pods did not stop within {}s", limit.as_secs());
        }
        drop(senders);
    }

    fn on_pod(&mut self, pod: Pod) {
        let uid = uid_of(&pod);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if node.is_empty() {
            if self.shared.config.bind_pods && binding::wants_binding(&pod, &self.labels) {
                self.bind(pod);
            }
            return;
        }
        if node != self.shared.config.node_name {
            return;
        }
        let pod = Arc::new(pod);
        if let Some(worker) = self.workers.get(&uid) {
            let _ = worker.tx.send(Some(pod));
            return;
        }
        let saved = self.saved.remove(&uid);
        let (tx, rx) = watch::channel(Some(pod.clone()));
        let worker = PodWorker::new(self.shared.clone(), pod, saved);
        let task = tokio::spawn(worker.run(rx, self.shutdown.clone()));
        self.workers.insert(uid, WorkerHandle { tx, task });
    }

    fn bind(&self, pod: Pod) {
        let uid = uid_of(&pod);
        if !self
            .binding
            .lock()
            .expect("binding lock")
            .insert(uid.clone())
        {
            return;
        }
        let shared = self.shared.clone();
        let in_flight = self.binding.clone();
        tokio::spawn(async move {
            let label = format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            );
            let node = &shared.config.node_name;
            for attempt in 1..=5 {
                match binding::bind(&shared.client, &pod, node).await {
                    Ok(()) => {
                        tracing::info!(pod = %label, %node, "bound pod");
                        shared.events.normal(
                            &pod,
                            "Scheduled",
                            format!("Successfully assigned {label} to {node}"),
                        );
                        break;
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                        tracing::debug!(pod = %label, "not bound: {}", e.message);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(pod = %label, attempt, "binding failed: {e}");
                        tokio::time::sleep(Duration::from_secs(attempt)).await;
                    }
                }
            }
            in_flight.lock().expect("binding lock").remove(&uid);
        });
    }
}
