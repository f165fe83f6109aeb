//! Startup, readiness and liveness probes (and preStop hooks, which use the same actions):
//! `httpGet` (plain HTTP against the pod IP by default), `tcpSocket`, and `exec` inside the
//! container's namespaces; with the probe's delay, period, timeout and thresholds.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ExecAction, HTTPGetAction, LifecycleHandler, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::launch::UserSpec;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// `startupProbe`.
    Startup,
    /// `readinessProbe`.
    Readiness,
    /// `livenessProbe`.
    Liveness,
}

/// What a probe or hook does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// HTTP GET; a 2xx or 3xx answer is a success.
    Http {
        /// Host to connect to.
        host: String,
        /// Port.
        port: u16,
        /// Request path.
        path: String,
        /// Extra request headers.
        headers: Vec<(String, String)>,
    },
    /// A TCP connection that opens is a success.
    Tcp {
        /// Host to connect to.
        host: String,
        /// Port.
        port: u16,
    },
    /// A command in the container; exit code 0 is a success.
    Exec {
        /// The command.
        command: Vec<String>,
    },
    /// Wait (preStop `sleep`).
    Sleep(Duration),
    /// Something the node agent does not implement (gRPC probes): counted as a success.
    Unsupported(String),
}

fn port_number(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("no container port named {name:?}")),
    }
}

fn http(a: &HTTPGetAction, container: &Container, pod_ip: &str) -> Result<Action, String> {
    if a.scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"))
    {
        return Ok(Action::Unsupported("HTTPS probes".into()));
    }
    Ok(Action::Http {
        host: a
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string()),
        port: port_number(&a.port, container)?,
        path: a
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into()),
        headers: a
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    })
}

fn tcp(a: &TCPSocketAction, container: &Container, pod_ip: &str) -> Result<Action, String> {
    Ok(Action::Tcp {
        host: a
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string()),
        port: port_number(&a.port, container)?,
    })
}

fn exec(a: &ExecAction) -> Action {
    Action::Exec {
        command: a.command.clone().unwrap_or_default(),
    }
}

impl Action {
    /// The action of a probe.
    pub fn of_probe(probe: &Probe, container: &Container, pod_ip: &str) -> Result<Action, String> {
        if let Some(a) = &probe.http_get {
            http(a, container, pod_ip)
        } else if let Some(a) = &probe.tcp_socket {
            tcp(a, container, pod_ip)
        } else if let Some(a) = &probe.exec {
            Ok(exec(a))
        } else {
            Ok(Action::Unsupported("gRPC probes".into()))
        }
    }

    /// The action of a lifecycle hook.
    pub fn of_hook(
        hook: &LifecycleHandler,
        container: &Container,
        pod_ip: &str,
    ) -> Result<Action, String> {
        if let Some(a) = &hook.http_get {
            http(a, container, pod_ip)
        } else if let Some(a) = &hook.tcp_socket {
            tcp(a, container, pod_ip)
        } else if let Some(a) = &hook.exec {
            Ok(exec(a))
        } else if let Some(s) = &hook.sleep {
            Ok(Action::Sleep(Duration::from_secs(s.seconds.max(0) as u64)))
        } else {
            Ok(Action::Unsupported("empty hook".into()))
        }
    }
}

/// How to run `exec` actions inside a container.
#[derive(Debug, Clone)]
pub struct ExecTarget {
    /// The container's main process (its namespaces are joined).
    pub pid: i32,
    /// The container's environment.
    pub env: Vec<(String, String)>,
    /// The container's user.
    pub user: Option<UserSpec>,
    /// The container's working directory.
    pub cwd: PathBuf,
}

/// Runs `action` with `timeout`; `Err` carries the failure message.
pub async fn run(action: &Action, timeout: Duration, target: &ExecTarget) -> Result<(), String> {
    let work = async {
        match action {
            Action::Http {
                host,
                port,
                path,
                headers,
            } => http_get(host, *port, path, headers).await,
            Action::Tcp { host, port } => TcpStream::connect((host.as_str(), *port))
                .await
                .map(drop)
                .map_err(|e| format!("dial tcp {host}:{port}: {e}")),
            Action::Exec { command } => exec_in(command, target).await,
            Action::Sleep(d) => {
                tokio::time::sleep(*d).await;
                Ok(())
            }
            Action::Unsupported(_) => Ok(()),
        }
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(format!("timed out after {}s", timeout.as_secs_f64())),
    }
}

async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let mut stream = TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("Get \"http://{host}:{port}{path}\": {e}"))?;
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {host}:{port}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("User-Agent: kube-probe/kmirror\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed HTTP response from {host}:{port}"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

async fn exec_in(command: &[String], target: &ExecTarget) -> Result<(), String> {
    if command.is_empty() {
        return Err("exec: no command".into());
    }
    let mut cmd = tokio::process::Command::new("/proc/self/exe");
    cmd.arg0("kmirror-node-agent")
        .arg("enter")
        .arg("--pid")
        .arg(target.pid.to_string())
        .arg("--cwd")
        .arg(&target.cwd);
    if let Some(user) = &target.user {
        cmd.arg("--uid").arg(user.uid.to_string());
        cmd.arg("--gid").arg(user.gid.to_string());
        for g in &user.groups {
            cmd.arg("--group").arg(g.to_string());
        }
    }
    cmd.arg("--")
        .args(command)
        .env_clear()
        .envs(target.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let out = cmd.output().await.map_err(|e| format!("exec: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        let text: String = text.trim().chars().take(512).collect();
        Err(format!(
            "command {:?} exited with {}: {text}",
            command.join(" "),
            out.status.code().unwrap_or(-1)
        ))
    }
}

/// Settings of one probe plus its running result.
#[derive(Debug, Clone)]
pub struct ProbeState {
    /// Which probe.
    pub kind: ProbeKind,
    /// What it does.
    pub action: Action,
    /// Per-attempt timeout.
    pub timeout: Duration,
    period: Duration,
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
    /// The current result: `None` before the first verdict.
    pub result: Option<bool>,
    /// When the next attempt is due.
    pub next_due: Instant,
    /// An attempt is running.
    pub in_flight: bool,
    /// The last failure message.
    pub last_error: Option<String>,
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(v.filter(|s| *s > 0).unwrap_or(default) as u64)
}

impl ProbeState {
    /// A probe for a container instance that started at `started`.
    pub fn new(kind: ProbeKind, probe: &Probe, action: Action, started: Instant) -> ProbeState {
        ProbeState {
            kind,
            action,
            timeout: secs(probe.timeout_seconds, 1),
            period: secs(probe.period_seconds, 10),
            success_threshold: probe.success_threshold.filter(|s| *s > 0).unwrap_or(1) as u32,
            failure_threshold: probe.failure_threshold.filter(|s| *s > 0).unwrap_or(3) as u32,
            successes: 0,
            failures: 0,
            result: None,
            next_due: started
                + Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            in_flight: false,
            last_error: None,
        }
    }

    /// Records an attempt's outcome; returns whether the verdict changed.
    pub fn record(&mut self, outcome: Result<(), String>, now: Instant) -> bool {
        self.in_flight = false;
        self.next_due = now + self.period;
        let before = self.result;
        match outcome {
            Ok(()) => {
                self.failures = 0;
                self.successes += 1;
                self.last_error = None;
                if self.successes >= self.success_threshold {
                    self.result = Some(true);
                }
            }
            Err(message) => {
                self.successes = 0;
                self.failures += 1;
                self.last_error = Some(message);
                if self.failures >= self.failure_threshold {
                    self.result = Some(false);
                }
            }
        }
        before != self.result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(json: serde_json::Value) -> Probe {
        serde_json::from_value(json).unwrap()
    }

    fn container() -> Container {
        serde_json::from_value(serde_json::json!({"name": "c",
            "ports": [{"name": "http", "containerPort": 8080}]}))
        .unwrap()
    }

    #[test]
    fn actions_from_specs() {
        let p = probe(serde_json::json!({"httpGet": {"port": "http", "path": "/ready"}}));
        assert_eq!(
            Action::of_probe(&p, &container(), "127.0.0.10").unwrap(),
            Action::Http {
                host: "127.0.0.10".into(),
                port: 8080,
                path: "/ready".into(),
                headers: vec![]
            }
        );
        let p = probe(serde_json::json!({"tcpSocket": {"port": 9092, "host": "127.0.0.1"}}));
        assert_eq!(
            Action::of_probe(&p, &container(), "127.0.0.10").unwrap(),
            Action::Tcp {
                host: "127.0.0.1".into(),
                port: 9092
            }
        );
        let p = probe(serde_json::json!({"httpGet": {"port": "metrics"}}));
        assert!(Action::of_probe(&p, &container(), "x").is_err());
    }

    #[test]
    fn thresholds_decide_the_verdict() {
        let now = Instant::now();
        let p = probe(serde_json::json!({"exec": {"command": ["true"]},
            "initialDelaySeconds": 2, "periodSeconds": 1, "failureThreshold": 2, "successThreshold": 2}));
        let mut s = ProbeState::new(
            ProbeKind::Readiness,
            &p,
            Action::Exec { command: vec![] },
            now,
        );
        assert_eq!(s.next_due, now + Duration::from_secs(2));
        assert_eq!(s.result, None);
        assert!(!s.record(Ok(()), now));
        assert!(s.record(Ok(()), now));
        assert_eq!(s.result, Some(true));
        assert_eq!(s.next_due, now + Duration::from_secs(1));
        assert!(!s.record(Err("no".into()), now));
        assert_eq!(s.result, Some(true), "one failure is below the threshold");
        assert!(s.record(Err("no".into()), now));
        assert_eq!(s.result, Some(false));
        assert_eq!(s.last_error.as_deref(), Some("no"));
    }

    #[tokio::test]
    async fn http_and_tcp_actions_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for status in ["200 OK", "503 Service Unavailable"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await.unwrap();
                let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                s.write_all(reply.as_bytes()).await.unwrap();
            }
        });
        let target = ExecTarget {
            pid: 0,
            env: vec![],
            user: None,
            cwd: "/".into(),
        };
        let action = Action::Http {
            host: "127.0.0.1".into(),
            port,
            path: "/".into(),
            headers: vec![],
        };
        assert_eq!(run(&action, Duration::from_secs(2), &target).await, Ok(()));
        let err = run(&action, Duration::from_secs(2), &target)
            .await
            .unwrap_err();
        assert!(err.contains("503"), "{err}");
        server.await.unwrap();
        let closed = Action::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        assert!(run(&closed, Duration::from_secs(2), &target).await.is_err());
    }
}
