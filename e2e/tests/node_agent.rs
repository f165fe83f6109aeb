//! The test bed's node agent runs pods the way the operator relies on: env and volumes from
//! Secrets, restarts with back-off, SIGTERM before the pod object disappears, one loopback IP per
//! pod, and service-account tokens that authenticate against the API server.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::unique_name;
use kmirror_e2e::kube::{
    condition, container_status, in_namespace, is_ready, phase, pod_log, pod_log_path, wait_for,
    wait_for_log,
};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

const TIMEOUT: Duration = Duration::from_secs(30);

async fn create_pod(client: &Client, ns: &str, pod: serde_json::Value) -> anyhow::Result<Pod> {
    let pod: Pod = serde_json::from_value(pod)?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(api.create(&PostParams::default(), &pod).await?)
}

#[tokio::test]
async fn secret_env_and_secret_volume_reach_a_ready_pod() {
    in_namespace("node-secret", |client, ns| async move {
        let bed = Testbed::get();
        let token = unique_name("t0ken");
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "creds"},
            "stringData": {"user": "alice", "token": token}
        }))?;
        Api::<Secret>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &secret)
            .await?;
        let script = r#"
            echo "env-user=$SECRET_USER"
            echo "file-token=$(cat /etc/creds/token)"
            echo "ip=$POD_IP"
            if touch /etc/creds/x 2>/dev/null; then echo creds=rw; else echo creds=ro; fi
            trap 'exit 0' TERM
            while true; do sleep 1; done
        "#;
        create_pod(&client, &ns, serde_json::json!({
            "metadata": {"name": "reader"},
            "spec": {
                "terminationGracePeriodSeconds": 2,
                "containers": [{
                    "name": "main", "image": "busybox",
                    "command": ["/bin/sh", "-c", script],
                    "env": [
                        {"name": "SECRET_USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    ],
                    "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]
                }],
                "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}]
            }
        }))
        .await?;

        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod = wait_for(&pods, "reader", TIMEOUT, "Running and Ready", is_ready).await?;
        let status = container_status(&pod, "main").expect("container status");
        assert!(status.ready, "{status:?}");
        assert_eq!(status.restart_count, 0);
        assert!(status.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
        assert!(ip.starts_with("127.0.0."), "pod IP {ip:?}");

        let file_line = format!("file-token={token}");
        let ip_line = format!("ip={ip}");
        let needles = ["env-user=alice", file_line.as_str(), ip_line.as_str(), "creds=ro"];
        wait_for_log(bed, &ns, "reader", "main", &needles, TIMEOUT).await?;
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn crashing_container_restarts_with_growing_restart_count() {
    in_namespace("node-crash", |client, ns| async move {
        let bed = Testbed::get();
        create_pod(
            &client,
            &ns,
            serde_json::json!({
                "metadata": {"name": "crasher"},
                "spec": {"containers": [{
                    "name": "main", "image": "busybox",
                    "command": ["/bin/sh", "-c", "echo attempt; exit 3"]
                }]}
            }),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let deadline = Instant::now() + TIMEOUT;
        let mut counts: Vec<i32> = Vec::new();
        let mut back_off_seen = false;
        while counts.last().copied().unwrap_or(0) < 3 {
            anyhow::ensure!(Instant::now() < deadline, "restart counts seen: {counts:?}");
            let pod = pods.get("crasher").await?;
            if let Some(status) = container_status(&pod, "main") {
                if counts.last() != Some(&status.restart_count) {
                    counts.push(status.restart_count);
                }
                let waiting = status.state.as_ref().and_then(|s| s.waiting.as_ref());
                if let Some(w) = waiting
                    && w.reason.as_deref() == Some("CrashLoopBackOff")
                {
                    assert!(
                        w.message.as_deref().unwrap_or("").contains("back-off"),
                        "{w:?}"
                    );
                    back_off_seen = true;
                }
                if status.restart_count > 0 {
                    let last = status
                        .last_state
                        .as_ref()
                        .and_then(|s| s.terminated.as_ref());
                    let last = last.expect("a restarted container reports its last termination");
                    assert_eq!(last.exit_code, 3);
                    assert_eq!(last.reason.as_deref(), Some("Error"));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            counts.windows(2).all(|w| w[0] < w[1]),
            "restart counts {counts:?}"
        );
        assert!(
            back_off_seen,
            "no CrashLoopBackOff while restarting (counts {counts:?})"
        );
        let pod = pods.get("crasher").await?;
        assert_eq!(
            phase(&pod),
            "Running",
            "restartPolicy Always keeps the pod Running"
        );
        assert_eq!(condition(&pod, "Ready").as_deref(), Some("False"));
        // The previous instance's log is kept next to the current one.
        let mut previous = pod_log_path(bed, &ns, "crasher", "main").into_os_string();
        previous.push(".1");
        assert_eq!(std::fs::read_to_string(previous)?, "attempt\n");
        Ok(())
    })
    .await;
}

fn marker_dir() -> PathBuf {
    // Outside /tmp: every pod has a private /tmp (so not the cargo target dir, which may be there).
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    assert!(
        !home.starts_with("/tmp"),
        "the marker files must live outside /tmp"
    );
    let dir = home
        .join(".cache/kmirror/e2e-markers")
        .join(unique_name("node-agent"));
    std::fs::create_dir_all(&dir).expect("marker dir");
    dir
}

fn process_exists(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn deleting_a_pod_stops_its_process_before_the_object_disappears() {
    in_namespace("node-delete", |client, ns| async move {
        let dir = marker_dir();
        // On SIGTERM the process takes a second to finish: the object must outlive that.
        // (`$$$$` is the shell's `$$` once the pod's `$(VAR)` expansion has unescaped it.)
        let script = r#"
            echo $$$$ > "$MARKERS/pid"
            trap 'echo term > "$MARKERS/term"; sleep 1; echo done > "$MARKERS/done"; exit 0' TERM
            while true; do sleep 0.2; done
        "#;
        create_pod(
            &client,
            &ns,
            serde_json::json!({
                "metadata": {"name": "graceful"},
                "spec": {
                    "terminationGracePeriodSeconds": 20,
                    "containers": [{
                        "name": "main", "image": "busybox",
                        "command": ["/bin/sh", "-c", script],
                        "env": [{"name": "MARKERS", "value": dir.display().to_string()}]
                    }]
                }
            }),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        wait_for(&pods, "graceful", TIMEOUT, "Running", |p| {
            phase(p) == "Running"
        })
        .await?;
        let deadline = Instant::now() + TIMEOUT;
        let pid: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(dir.join("pid"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            anyhow::ensure!(Instant::now() < deadline, "the pod never wrote its pid");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(process_exists(pid), "pod process {pid} is not running");

        let selector = watcher::Config::default().fields("metadata.name=graceful");
        let mut events = watcher(pods.clone(), selector).default_backoff().boxed();
        // The initial listing: the watch is established before the deletion.
        while let Some(event) = events.next().await {
            if matches!(event?, watcher::Event::InitDone) {
                break;
            }
        }
        pods.delete("graceful", &DeleteParams::default()).await?;
        let deleted_at = Instant::now();
        let gone = tokio::time::timeout(TIMEOUT, async {
            while let Some(event) = events.next().await {
                if let watcher::Event::Delete(_) = event? {
                    return anyhow::Ok(());
                }
            }
            anyhow::bail!("the watch ended")
        })
        .await;
        gone.map_err(|_| anyhow::anyhow!("the pod object was not removed"))??;
        let took = deleted_at.elapsed();

        assert!(
            !process_exists(pid),
            "process {pid} outlived its pod object"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("term"))?,
            "term\n",
            "no SIGTERM"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("done"))?,
            "done\n",
            "the object disappeared before the process finished its SIGTERM handler"
        );
        assert!(
            took >= Duration::from_millis(900),
            "object gone after {took:?}"
        );
        assert!(
            took < Duration::from_secs(15),
            "SIGTERM handling took {took:?}: was it killed?"
        );
        std::fs::remove_dir_all(dir)?;
        Ok(())
    })
    .await;
}

fn http_server(name: &str, ready_port: u16) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "web", "image": "python:3",
                "command": ["python3", "-m", "http.server"],
                "args": ["8080", "--bind", "$(POD_IP)"],
                "workingDir": "/tmp",
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"port": ready_port, "path": "/"}, "periodSeconds": 1}
            }]
        }
    })
}

/// The status code of `GET http://ip:8080/`.
async fn http_status(ip: &str) -> anyhow::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect((ip, 8080)).await?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
    let mut buf = vec![0u8; 64];
    let n = s.read(&mut buf).await?;
    let line = String::from_utf8_lossy(&buf[..n]).into_owned();
    Ok(line.split_whitespace().nth(1).unwrap_or("").parse()?)
}

#[tokio::test]
async fn two_pods_listen_on_the_same_port_and_readiness_follows_the_probe() {
    in_namespace("node-ports", |client, ns| async move {
        create_pod(&client, &ns, http_server("web-a", 8080)).await?;
        create_pod(&client, &ns, http_server("web-b", 8080)).await?;
        // Probes a port nothing listens on: runs, never ready.
        create_pod(&client, &ns, http_server("web-unready", 8081)).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let a = wait_for(&pods, "web-a", TIMEOUT, "Ready", is_ready).await?;
        let b = wait_for(&pods, "web-b", TIMEOUT, "Ready", is_ready).await?;
        let ip = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default()
        };
        let (ip_a, ip_b) = (ip(&a), ip(&b));
        assert_ne!(ip_a, ip_b, "pods share an IP");
        assert_eq!(http_status(&ip_a).await?, 200);
        assert_eq!(http_status(&ip_b).await?, 200);

        wait_for(&pods, "web-unready", TIMEOUT, "Running", |p| {
            phase(p) == "Running"
        })
        .await?;
        // Its own server answers, but the probed port does not: three failed probes later it is
        // still not ready.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let unready = pods.get("web-unready").await?;
        assert_eq!(http_status(&ip(&unready)).await?, 200);
        assert_eq!(phase(&unready), "Running");
        assert_eq!(condition(&unready, "Ready").as_deref(), Some("False"));
        assert_eq!(
            container_status(&unready, "web").map(|s| s.ready),
            Some(false)
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn projected_service_account_token_authenticates_to_the_api_server() {
    in_namespace("node-token", |client, ns| async move {
        let bed = Testbed::get();
        let script = r#"
            SA=/var/run/secrets/kubernetes.io/serviceaccount
            URL="https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat $SA/namespace)/secrets"
            curl -sS --cacert "$SA/ca.crt" -H "Authorization: Bearer $(cat $SA/token)" "$URL" -w '\nstatus=%{http_code}\n'
        "#;
        create_pod(&client, &ns, serde_json::json!({
            "metadata": {"name": "caller"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "curl", "command": ["/bin/sh", "-c", script]}]
            }
        }))
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let done = |p: &Pod| matches!(phase(p), "Succeeded" | "Failed");
        let pod = wait_for(&pods, "caller", TIMEOUT, "completion", done).await?;
        let log = pod_log(bed, &ns, "caller", "main");
        assert_eq!(phase(&pod), "Succeeded", "log:\n{log}");
        // Authenticated as the pod's service account (TLS verified with the projected CA);
        // RBAC denies the request.
        assert!(log.contains("status=403"), "log:\n{log}");
        let user = format!("system:serviceaccount:{ns}:default");
        assert!(log.contains(&user), "the API server did not see {user}; log:\n{log}");
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn a_command_that_cannot_be_found_fails_the_pod_with_a_clear_reason() {
    in_namespace("node-notfound", |client, ns| async move {
        let missing = unique_name("no-such-binary");
        create_pod(
            &client,
            &ns,
            serde_json::json!({
                "metadata": {"name": "broken"},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "x", "command": [missing]}]
                }
            }),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod = wait_for(&pods, "broken", TIMEOUT, "Failed", |p| phase(p) == "Failed").await?;
        let status = container_status(&pod, "main").expect("container status");
        let terminated = status
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("terminated state");
        assert_eq!(terminated.reason.as_deref(), Some("StartError"));
        assert_eq!(terminated.exit_code, 128);
        let message = terminated.message.as_deref().unwrap_or("");
        assert!(
            message.contains(&missing) && message.contains("not found"),
            "{message}"
        );
        Ok(())
    })
    .await;
}

/// What a container writes to its termination message file becomes the message of its
/// `terminated` state, as with a kubelet — also for a container that runs as another user with a
/// read-only root; without a message, `FallbackToLogsOnError` takes the log's tail.
#[tokio::test]
async fn a_termination_message_reaches_the_container_status() {
    in_namespace("node-termination", |client, ns| async move {
        let container = |name: &str, script: &str| {
            serde_json::json!({
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"runAsUser": 1234, "runAsGroup": 1234},
                    "containers": [{
                        "name": "main", "image": "busybox",
                        "command": ["/bin/sh", "-c", script],
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "securityContext": {"readOnlyRootFilesystem": true}
                    }]
                }
            })
        };
        let script = "echo 'log line'; printf 'ForeignWrite on partition 3: why' > /dev/termination-log; exit 10";
        create_pod(&client, &ns, container("with-message", script)).await?;
        create_pod(&client, &ns, container("logs-only", "echo 'the last words'; exit 3")).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        for (name, code, expect) in [
            ("with-message", 10, "ForeignWrite on partition 3: why"),
            ("logs-only", 3, "the last words"),
        ] {
            let pod = wait_for(&pods, name, TIMEOUT, "Failed", |p| phase(p) == "Failed").await?;
            let terminated = container_status(&pod, "main")
                .and_then(|s| s.state.clone())
                .and_then(|s| s.terminated)
                .expect("terminated state");
            assert_eq!(terminated.exit_code, code, "{name}");
            assert_eq!(terminated.message.as_deref(), Some(expect), "{name}");
        }
        Ok(())
    })
    .await;
}

/// A private node agent (its own node name, state and IP range; it binds nothing), killed and
/// cleaned up when dropped.
struct PrivateAgent {
    args: Vec<String>,
    state_dir: PathBuf,
    log: PathBuf,
    child: Option<std::process::Child>,
}

impl PrivateAgent {
    fn new(bed: &Testbed, node: &str, dir: &std::path::Path) -> PrivateAgent {
        let state_dir = dir.join("state");
        let args = [
            "run",
            "--kubeconfig",
            bed.var("KUBECONFIG"),
            "--node-name",
            node,
            "--state-dir",
            &state_dir.display().to_string(),
            "--logs-dir",
            &dir.join("logs").display().to_string(),
            "--no-bind",
            "--pod-ip-first",
            "127.0.3.10",
            "--pod-ip-count",
            "10",
            "--heartbeat-secs",
            "1",
        ]
        .map(str::to_string)
        .to_vec();
        PrivateAgent {
            args,
            state_dir,
            log: dir.join("agent.log"),
            child: None,
        }
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = std::process::Command::new(Testbed::get().var("KMIRROR_NODE_AGENT_BIN"))
            .args(&self.args)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateAgent {
    fn drop(&mut self) {
        self.kill();
        let _ = std::process::Command::new(Testbed::get().var("KMIRROR_NODE_AGENT_BIN"))
            .args(["cleanup", "--grace", "2", "--state-dir"])
            .arg(&self.state_dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn read_pid(path: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

async fn wait_pid(path: &std::path::Path) -> anyhow::Result<i32> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(pid) = read_pid(path) {
            return Ok(pid);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_process_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while process_exists(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

fn pinned_pod(name: &str, node: &str, markers: &std::path::Path) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["/bin/sh", "-c",
                    format!("echo $$$$ > {}/{name}.pid; trap 'exit 0' TERM; while true; do sleep 0.2; done",
                        markers.display())]
            }]
        }
    })
}

#[tokio::test]
async fn a_restarted_agent_adopts_its_pods_and_stops_orphans() {
    in_namespace("node-restart", |client, ns| async move {
        use k8s_openapi::api::core::v1::Node;
        let bed = Testbed::get();
        let node = unique_name("kmirror-test-node");
        let dir = marker_dir();
        let mut agent = PrivateAgent::new(bed, &node, &dir);
        agent.start()?;
        let nodes: Api<Node> = Api::all(client.clone());
        let node_ready = |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        wait_for(&nodes, &node, TIMEOUT, "Ready", node_ready).await?;

        create_pod(&client, &ns, pinned_pod("kept", &node, &dir)).await?;
        create_pod(&client, &ns, pinned_pod("orphan", &node, &dir)).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let running = |p: &Pod| phase(p) == "Running";
        let before = wait_for(&pods, "kept", TIMEOUT, "Running", running).await?;
        wait_for(&pods, "orphan", TIMEOUT, "Running", running).await?;
        let kept_pid = wait_pid(&dir.join("kept.pid")).await?;
        let orphan_pid = wait_pid(&dir.join("orphan.pid")).await?;
        let ip = before
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        assert!(
            ip.starts_with("127.0.3."),
            "pod IP {ip:?} is not from the agent's range"
        );

        // The agent dies; its pods keep running. One pod is force-deleted meanwhile.
        agent.kill();
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        pods.delete("orphan", &force).await?;
        kmirror_e2e::kube::wait_gone(&pods, "orphan", TIMEOUT).await?;
        assert!(process_exists(kept_pid) && process_exists(orphan_pid));

        agent.start()?;
        assert!(
            wait_process_gone(orphan_pid, TIMEOUT).await,
            "the restarted agent left the process of a deleted pod running"
        );
        // Heartbeats resume; the adopted pod is untouched.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            process_exists(kept_pid),
            "the adopted pod's process was stopped"
        );
        let after = wait_for(&pods, "kept", TIMEOUT, "Ready", is_ready).await?;
        let id = |p: &Pod| container_status(p, "main").and_then(|s| s.container_id.clone());
        assert_eq!(id(&after), id(&before), "the container was restarted");
        assert_eq!(
            container_status(&after, "main").map(|s| s.restart_count),
            Some(0)
        );

        // Deleting the adopted pod still stops its process first.
        pods.delete("kept", &DeleteParams::default()).await?;
        kmirror_e2e::kube::wait_gone(&pods, "kept", TIMEOUT).await?;
        assert!(
            !process_exists(kept_pid),
            "process {kept_pid} outlived its pod object"
        );

        drop(agent);
        let _ = nodes.delete(&node, &DeleteParams::default()).await;
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn security_context_user_and_read_only_root_are_honoured() {
    in_namespace("node-user", |client, ns| async move {
        let bed = Testbed::get();
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "creds"}, "stringData": {"user": "bob"}
        }))?;
        Api::<Secret>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &secret)
            .await?;
        let script = r#"
            echo "uid=$(id -u) groups=$(id -G)"
            echo "secret=$(cat /etc/creds/user)"
            echo "token-bytes=$(wc -c < /var/run/secrets/kubernetes.io/serviceaccount/token)"
            if touch /tmp/ok; then echo tmp=rw; fi
            if touch /opt-kmirror-test 2>/dev/null; then echo root=rw; else echo root=ro; fi
            echo "hostname=$(hostname)"
        "#;
        create_pod(&client, &ns, serde_json::json!({
            "metadata": {"name": "unprivileged"},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsUser": 1234, "runAsGroup": 1234, "fsGroup": 4321},
                "containers": [{
                    "name": "main", "image": "busybox",
                    "command": ["/bin/sh", "-c", script],
                    "securityContext": {"readOnlyRootFilesystem": true},
                    "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]
                }],
                "volumes": [{"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o440}}]
            }
        }))
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let done = |p: &Pod| matches!(phase(p), "Succeeded" | "Failed");
        let pod = wait_for(&pods, "unprivileged", TIMEOUT, "completion", done).await?;
        let log = pod_log(bed, &ns, "unprivileged", "main");
        assert_eq!(phase(&pod), "Succeeded", "log:\n{log}");
        for line in [
            "uid=1234 groups=1234 4321",
            "secret=bob",
            "tmp=rw",
            "root=ro",
            "hostname=unprivileged",
        ] {
            assert!(log.contains(line), "missing {line:?} in log:\n{log}");
        }
        assert!(!log.contains("token-bytes=0"), "log:\n{log}");
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn failing_liveness_exec_probe_restarts_the_container() {
    in_namespace("node-liveness", |client, ns| async move {
        // Healthy for two seconds. The exec probe runs inside the container: it sees the
        // pod's private /tmp, not the host's.
        let script = "touch /tmp/healthy; sleep 2; rm /tmp/healthy; while true; do sleep 0.2; done";
        create_pod(
            &client,
            &ns,
            serde_json::json!({
                "metadata": {"name": "flaky"},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main", "image": "busybox",
                        "command": ["/bin/sh", "-c", script],
                        "livenessProbe": {
                            "exec": {"command": ["cat", "/tmp/healthy"]},
                            "periodSeconds": 1, "failureThreshold": 2
                        }
                    }]
                }
            }),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod = wait_for(&pods, "flaky", TIMEOUT, "Running", |p| {
            phase(p) == "Running"
        })
        .await?;
        let status = container_status(&pod, "main").expect("container status");
        assert_eq!(
            status.restart_count, 0,
            "restarted before the probe could fail"
        );
        let restarted = |p: &Pod| container_status(p, "main").is_some_and(|s| s.restart_count >= 1);
        let pod = wait_for(&pods, "flaky", TIMEOUT, "a restart", restarted).await?;
        let last = container_status(&pod, "main")
            .and_then(|s| s.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .cloned()
            .expect("the killed instance's termination");
        assert_eq!(last.exit_code, 143, "not stopped by SIGTERM: {last:?}");
        let started = last.started_at.expect("start time").0;
        let finished = last.finished_at.expect("finish time").0;
        let lived = finished.duration_since(started).as_secs_f64();
        assert!((2.0..10.0).contains(&lived), "the instance lived {lived}s");
        Ok(())
    })
    .await;
}
