//! Running `kmirror-operator` against the test bed (as a local process with the admin
//! kubeconfig, scoped to one namespace) and observing what it does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::Testbed;
use crate::fetcher::binary;
use crate::kafka::unique_name;

/// A local operator process; killed when dropped.
pub struct OperatorProcess {
    child: Child,
    /// Log file.
    pub log: PathBuf,
    /// Address of its HTTP endpoints.
    pub http: String,
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl OperatorProcess {
    /// Starts an operator watching `namespace`, with extra arguments.
    pub fn spawn(bed: &Testbed, namespace: &str, extra: &[&str]) -> OperatorProcess {
        Self::spawn_with_env(bed, namespace, extra, &[])
    }

    /// Starts an operator watching `namespace`, with extra arguments and environment (e.g.
    /// `KMIRROR_FAILPOINTS`: where it crashes).
    pub fn spawn_with_env(
        bed: &Testbed,
        namespace: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> OperatorProcess {
        let operator = binary("kmirror-operator");
        let log = std::env::temp_dir().join(format!("{}.log", unique_name("operator")));
        let file = std::fs::File::create(&log).expect("operator log");
        let http = format!("127.0.0.1:{}", free_port());
        // A test that passes its own fetcher image (an upgrade) replaces the default one.
        let image: &[&str] = if extra.contains(&"--fetcher-image") {
            &[]
        } else {
            &["--fetcher-image", "kmirror:test"]
        };
        let child = Command::new(operator)
            .args(["--namespace", namespace, "--http-addr", &http])
            .args(image)
            .args(extra)
            .env("KUBECONFIG", bed.var("KUBECONFIG"))
            .env("RUST_LOG", "info,kube=warn,librdkafka=warn")
            // Tests read progress (lag, last mirrored offset) from the status: refreshed every
            // 2 s rather than the default 10 s (a test of the default passes the flag).
            .env("KMIRROR_STATUS_PROGRESS_INTERVAL_MS", "2000")
            .envs(env.iter().copied())
            .stdout(Stdio::from(file.try_clone().expect("log")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("start kmirror-operator");
        OperatorProcess { child, log, http }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait up to `timeout` for the exit; the exit code, None when it did not
    /// exit in time (it is killed then) or was killed by a signal.
    pub fn terminate(&mut self, timeout: std::time::Duration) -> Option<i32> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(exit)) = self.child.try_wait() {
                return exit.code();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.kill();
        None
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running?
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// The text of `/metrics`, if it answers.
    pub fn metrics_text(&self) -> Option<String> {
        http_get(&self.http, "/metrics")
    }

    /// A counter's value: 0 while the series has no line yet. Retries the scrape for 30 s (a
    /// busy machine can miss the 5 s read timeout) and panics when /metrics never answers, so
    /// a failed scrape is never read as 0.
    pub fn counter(&self, series: &str) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(body) = self.metrics_text() {
                return body
                    .lines()
                    .find(|l| l.starts_with(series))
                    .and_then(|l| l.rsplit(' ').next())
                    .map_or(0.0, |v| v.parse().expect("a counter is a number"));
            }
            assert!(Instant::now() < deadline, "/metrics did not answer in 30 s");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The value of a metric series (first line starting with `series`).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let body = http_get(&self.http, "/metrics")?;
        body.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A minimal HTTP GET over loopback (the body, for status 200).
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// A namespace with helpers to create mirrors and wait for their status.
pub struct Scenario {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Namespace.
    pub ns: String,
}

impl Scenario {
    /// A fresh namespace (the restricted Pod Security Standard enforced) with the CRDs installed
    /// and the destination's `mirror` credentials in Secret `destination-credentials` (key
    /// `password`).
    pub async fn new(bed: &Testbed, prefix: &str) -> Scenario {
        let client = bed.kube_client().await.expect("kube client");
        crate::crds::install(&client).await.expect("CRDs");
        let ns = crate::namespace::create_restricted(&client, prefix)
            .await
            .expect("namespace");
        let s = Scenario { client, ns };
        s.secret(
            "destination-credentials",
            "password",
            bed.var("KMIRROR_MIRROR_PASSWORD"),
        )
        .await;
        s
    }

    /// Creates or replaces a Secret with one key, labelled for kmirror to read
    /// (`kmirror.io/credentials: "true"`).
    pub async fn secret(&self, name: &str, key: &str, value: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": {"kmirror.io/credentials": "true"}},
            "stringData": {key: value}
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .patch(
                name,
                &PatchParams::apply("kmirror-e2e").force(),
                &Patch::Apply(&secret),
            )
            .await
            .expect("apply secret");
    }

    /// A ClusterMirror spec from the bed's source (PLAINTEXT) to its destination (mirror user).
    pub fn mirror_spec(bed: &Testbed) -> Value {
        json!({
            "source": {"bootstrapServers": bed.source_bootstrap()},
            "destination": {
                "bootstrapServers": bed.dest_bootstrap(),
                "allowInsecure": true,
                "sasl": {"mechanism": "PLAIN", "username": "mirror",
                         "password": {"name": "destination-credentials", "key": "password"}}
            },
            "sync": {"interval": "3s"}
        })
    }

    /// Server-side applies a ClusterMirror.
    pub async fn apply_mirror(&self, name: &str, spec: Value) {
        let cm = json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror", "metadata": {"name": name}, "spec": spec});
        Api::<ClusterMirror>::namespaced(self.client.clone(), &self.ns)
            .patch(
                name,
                &PatchParams::apply("kmirror-e2e").force(),
                &Patch::Apply(&cm),
            )
            .await
            .expect("apply ClusterMirror");
    }

    /// Server-side applies a MirrorTopic.
    pub async fn apply_topic(&self, name: &str, spec: Value) {
        let mt = json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic", "metadata": {"name": name}, "spec": spec});
        Api::<MirrorTopic>::namespaced(self.client.clone(), &self.ns)
            .patch(
                name,
                &PatchParams::apply("kmirror-e2e").force(),
                &Patch::Apply(&mt),
            )
            .await
            .expect("apply MirrorTopic");
    }

    /// Merge-patches a MirrorTopic's spec.
    pub async fn patch_topic(&self, name: &str, spec: Value) {
        Api::<MirrorTopic>::namespaced(self.client.clone(), &self.ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("patch MirrorTopic");
    }

    /// The MirrorTopic, if it exists.
    pub async fn topic(&self, name: &str) -> Option<MirrorTopic> {
        Api::<MirrorTopic>::namespaced(self.client.clone(), &self.ns)
            .get_opt(name)
            .await
            .expect("get MirrorTopic")
    }

    /// All MirrorTopics.
    pub async fn topics(&self) -> Vec<MirrorTopic> {
        Api::<MirrorTopic>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .expect("list MirrorTopics")
            .items
    }

    /// The ClusterMirror.
    pub async fn mirror(&self, name: &str) -> ClusterMirror {
        Api::<ClusterMirror>::namespaced(self.client.clone(), &self.ns)
            .get(name)
            .await
            .expect("get ClusterMirror")
    }

    /// Fetcher pods of the namespace.
    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().labels("app.kubernetes.io/name=kmirror-fetcher"))
            .await
            .expect("list pods")
            .items
    }

    /// Reasons and notes of the events about an object.
    pub async fn events(&self, name: &str) -> Vec<(String, String)> {
        Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect()
    }

    /// Waits until `check` holds for the MirrorTopic; returns it.
    pub async fn wait_topic(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&MirrorTopic) -> bool,
    ) -> MirrorTopic {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.topic(name).await
                && check(&t)
            {
                return t;
            }
            if Instant::now() > deadline {
                let t = self.topic(name).await;
                panic!(
                    "timed out after {timeout:?} waiting for {what}; MirrorTopic {name}: {}",
                    serde_json::to_string_pretty(&t.map(|t| t.status)).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Waits until `check` holds for the ClusterMirror.
    pub async fn wait_mirror(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&ClusterMirror) -> bool,
    ) -> ClusterMirror {
        let deadline = Instant::now() + timeout;
        loop {
            let m = self.mirror(name).await;
            if check(&m) {
                return m;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; ClusterMirror {name}: {}",
                    serde_json::to_string_pretty(&m.status).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Deletes the mirrors (their finalizers stop fetchers while the operator still runs), then
    /// the namespace. Call it before the operator process is dropped.
    pub async fn cleanup(&self) {
        let mirrors = Api::<ClusterMirror>::namespaced(self.client.clone(), &self.ns);
        let topics = Api::<MirrorTopic>::namespaced(self.client.clone(), &self.ns);
        let _ = mirrors
            .delete_collection(&Default::default(), &ListParams::default())
            .await;
        let _ = topics
            .delete_collection(&Default::default(), &ListParams::default())
            .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let left = topics
                .list(&ListParams::default())
                .await
                .map(|l| l.items.len())
                .unwrap_or(0)
                + mirrors
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or(0);
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        remove_finalizers(&self.client, &self.ns).await;
        crate::namespace::delete(&self.client, &self.ns).await;
    }

    /// Creates an object from JSON in the namespace (for kinds without a helper).
    pub async fn create<K>(&self, object: Value) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let object: K = serde_json::from_value(object).unwrap();
        Api::<K>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &object)
            .await
            .expect("create")
    }
}

/// Strips kmirror finalizers in a namespace (when no operator is left to honour them).
pub async fn remove_finalizers(client: &kube::Client, ns: &str) {
    let strip = serde_json::json!({"metadata": {"finalizers": null}});
    let topics = Api::<MirrorTopic>::namespaced(client.clone(), ns);
    for t in topics
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let _ = topics
            .patch(
                &t.metadata.name.unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&strip),
            )
            .await;
    }
    let mirrors = Api::<ClusterMirror>::namespaced(client.clone(), ns);
    for m in mirrors
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let _ = mirrors
            .patch(
                &m.metadata.name.unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&strip),
            )
            .await;
    }
}

impl Drop for Scenario {
    /// A test that panicked never reached `cleanup`: remove what it left (on a separate thread,
    /// since drop is not async), so that its namespace does not hang in Terminating.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        // A new client: the test's one is bound to the runtime that is unwinding right now.
        let ns = self.ns.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let Ok(client) = Testbed::get().kube_client().await else {
                    return;
                };
                remove_finalizers(&client, &ns).await;
                crate::namespace::delete(&client, &ns).await;
            });
        })
        .join();
    }
}

/// Whether the MirrorTopic has `count` partitions, every one in `state` (from the status's
/// counts: a large topic lists only some partitions).
pub fn all_partitions(
    t: &MirrorTopic,
    state: kmirror_crds::v1alpha1::PartitionState,
    count: usize,
) -> bool {
    t.status.as_ref().is_some_and(|s| {
        let c = s.counts();
        c.total as usize == count && s.all_in(state)
    })
}

/// Condition status by type.
pub fn condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<(String, String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Partition → pods (names) that serve it, among pods that still exist.
pub fn pods_per_partition(pods: &[Pod]) -> BTreeMap<i32, Vec<String>> {
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for pod in pods {
        let parts = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kmirror.io/partitions").cloned())
            .unwrap_or_default();
        for p in parts.split(',').filter_map(|p| p.parse().ok()) {
            out.entry(p)
                .or_default()
                .push(pod.metadata.name.clone().unwrap_or_default());
        }
    }
    out
}

/// The fetcher *processes* running on this machine for `mirror` (`namespace/name`), by
/// partition: what a pod listing cannot show (a pod object force-deleted while its process
/// runs on, a process that outlives its pod). Read from `/proc`.
pub fn fetcher_processes(mirror: &str) -> BTreeMap<i32, Vec<u32>> {
    let mut out: BTreeMap<i32, Vec<u32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.first().is_some_and(|a| a.ends_with("kmirror-fetcher")) {
            continue;
        }
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        if value("--mirror").as_deref() != Some(mirror) {
            continue;
        }
        for p in value("--partitions")
            .unwrap_or_default()
            .split(',')
            .filter_map(|p| p.parse().ok())
        {
            out.entry(p).or_default().push(pid);
        }
    }
    out
}

/// A scenario with an operator, a ClusterMirror `dr` (the bed's usual connections, sync every
/// 3 s) and a MirrorTopic `t` over a new source topic of `partitions` partitions, waited for
/// until every partition is MIRRORING. Returns the scenario, the operator and the topic.
pub async fn mirrored_topic(
    bed: &Testbed,
    prefix: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> (Scenario, OperatorProcess, String) {
    crate::fetcher::ensure_state_topic(bed);
    let s = Scenario::new(bed, prefix).await;
    let topic = unique_name(prefix);
    crate::kafka::create_topic(&bed.source_config(), &topic, partitions, configs)
        .await
        .unwrap();
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(60), |t| {
        all_partitions(
            t,
            kmirror_crds::v1alpha1::PartitionState::Mirroring,
            partitions as usize,
        )
    })
    .await;
    (s, op, topic)
}

/// Polls `check` every 300 ms until it holds; panics naming `what` after `timeout`.
pub async fn eventually<F: AsyncFnMut() -> bool>(what: &str, timeout: Duration, mut check: F) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Runs `kubectl mirror ARGS -n NS` against the bed; returns (exit code, stdout, stderr).
pub fn kubectl_mirror(bed: &Testbed, ns: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(crate::fetcher::target_dir().join("debug/kubectl-mirror"))
        .args(args)
        .args(["-n", ns])
        .env("KUBECONFIG", bed.var("KUBECONFIG"))
        .output()
        .expect("run kubectl-mirror");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
