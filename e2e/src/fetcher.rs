//! Running `kmirror-fetcher` processes against the test bed, and checking their result with
//! the verifier.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::FetcherEngine;
use kmirror_fetcher::Isolation;
use kmirror_fetcher::verify::{Report, Side, verify_partition};
use kmirror_state::offset_map::OffsetMap;
use kmirror_state::records::PartitionRecords;
use kmirror_state::store;
use rdkafka::ClientConfig;

use crate::Testbed;
use crate::kafka::unique_name;
use crate::testbed::repo_root;

/// The cargo target directory the workspace builds into.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// Path of a workspace binary, built (once per test process) if needed.
/// `KMIRROR_E2E_BIN_DIR` runs the tests against the binaries of another build found there (e.g.
/// the code before a fix, to see a test fail on it); the others come from this build.
/// `KMIRROR_E2E_BUILT=1` says the build below is done already (`make test` builds it before its
/// tests): each test is its own process there, and a few hundred `cargo build` runs that find
/// nothing to do would still queue on cargo's lock.
pub fn binary(name: &str) -> PathBuf {
    if let Some(other) = std::env::var_os("KMIRROR_E2E_BIN_DIR")
        .map(|d| PathBuf::from(d).join(name))
        .filter(|p| p.is_file())
    {
        return other;
    }
    if std::env::var_os("KMIRROR_E2E_BUILT").is_some_and(|v| v == "1") {
        return target_dir().join("debug").join(name);
    }
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = crate::testbed::cargo()
            // The very build `make test` does before its tests (same packages, same targets,
            // hence the same dependency features): a no-op there. Building only the three
            // packages would resolve other features and compile every shared dependency again.
            .args(["build", "--workspace", "--bins", "--tests"])
            .current_dir(repo_root())
            .status()
            .expect("run cargo build");
        assert!(
            status.success(),
            "cargo build of the fetcher, operator and kubectl plugin failed"
        );
    });
    target_dir().join("debug").join(name)
}

/// The copy engine of the fetchers these tests start: `KMIRROR_ENGINE` when set (the second pass
/// of `make test` sets `record`, see docs/testing.md), else the engine a ClusterMirror gets by
/// default (`spec.fetcher.engine`), which the fetcher's own flag default (`record`) is not.
/// A test that needs one engine passes `--engine`, which wins over the variable.
pub fn engine() -> String {
    std::env::var("KMIRROR_ENGINE").unwrap_or_else(|_| {
        match FetcherEngine::default() {
            FetcherEngine::Batch => "batch",
            FetcherEngine::Record => "record",
        }
        .to_string()
    })
}

/// A fetcher child process; killed when dropped.
pub struct FetcherProcess {
    child: Child,
    /// Its log file (stderr and stdout).
    pub log: PathBuf,
    /// Its termination message file (a container's `/dev/termination-log`).
    pub termination: PathBuf,
}

/// Arguments for the fetcher's source side: the bed's source over PLAINTEXT.
pub fn source_args(bed: &Testbed) -> Vec<String> {
    vec!["--source-bootstrap".into(), bed.source_bootstrap().into()]
}

/// Arguments for the fetcher's destination side: the bed's destination as the mirror user.
pub fn destination_args(bed: &Testbed) -> Vec<String> {
    let mut a = vec![
        "--destination-bootstrap".to_string(),
        bed.dest_bootstrap().to_string(),
    ];
    for p in [
        "security.protocol=SASL_PLAINTEXT".to_string(),
        "sasl.mechanism=PLAIN".to_string(),
        format!("sasl.username={}", bed.var("KMIRROR_MIRROR_USER")),
        format!("sasl.password={}", bed.var("KMIRROR_MIRROR_PASSWORD")),
    ] {
        a.push("--destination-property".into());
        a.push(p);
    }
    a
}

impl FetcherProcess {
    /// Starts a fetcher with the given arguments (the caller supplies topic, partitions, and
    /// the cluster arguments, e.g. from [`source_args`] and [`destination_args`]).
    pub fn spawn(args: &[String]) -> FetcherProcess {
        FetcherProcess::spawn_with_env(args, &[])
    }

    /// [`FetcherProcess::spawn`] with extra environment variables (e.g. the `KMIRROR_*` twins of
    /// flags, which an older build ignores instead of refusing).
    pub fn spawn_with_env(args: &[String], env: &[(&str, &str)]) -> FetcherProcess {
        let name = unique_name("fetcher");
        let log = std::env::temp_dir().join(format!("{name}.log"));
        let termination = std::env::temp_dir().join(format!("{name}.termination"));
        let file = std::fs::File::create(&log).expect("fetcher log file");
        let mut defaults = vec!["--position-interval-seconds", "0.5"];
        if !args.iter().any(|a| a == "--http-addr") {
            defaults.extend(["--http-addr", "none"]);
        }
        let child = Command::new(binary("kmirror-fetcher"))
            .args(args)
            .args(defaults)
            // KMIRROR_E2E_FETCHER_LOG: another filter when chasing a failure (e.g. "debug").
            .env(
                "RUST_LOG",
                std::env::var("KMIRROR_E2E_FETCHER_LOG")
                    .unwrap_or_else(|_| "info,librdkafka=warn".into()),
            )
            // Its own message file, not the host's /dev/termination-log.
            .env("KMIRROR_TERMINATION_MESSAGE_PATH", &termination)
            .env("KMIRROR_ENGINE", engine())
            .envs(env.iter().copied())
            .stdout(Stdio::from(file.try_clone().expect("log handle")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("start kmirror-fetcher");
        FetcherProcess {
            child,
            log,
            termination,
        }
    }

    /// The termination message it left, if any.
    pub fn termination_message(&self) -> Option<String> {
        std::fs::read_to_string(&self.termination).ok()
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for the exit code (None: killed by a signal); panics after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for fetcher") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "fetcher did not exit within {timeout:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Exited already?
    pub fn exited(&mut self) -> Option<Option<i32>> {
        self.child
            .try_wait()
            .expect("poll fetcher")
            .map(|s| s.code())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for FetcherProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Arguments for the fetcher's source side: the replicated source over PLAINTEXT.
pub fn r_source_args(bed: &Testbed) -> Vec<String> {
    vec![
        "--source-bootstrap".into(),
        bed.var("KMIRROR_R_SOURCE_BOOTSTRAP").into(),
    ]
}

/// Arguments for the fetcher's destination side: the replicated destination as the mirror user.
pub fn r_destination_args(bed: &Testbed) -> Vec<String> {
    let mut a = destination_args(bed);
    a[1] = bed.var("KMIRROR_R_DEST_BOOTSTRAP").to_string();
    a
}

/// The state recorded for a partition of a mirror.
pub fn recorded(bed: &Testbed, mirror: &str, topic: &str, partition: i32) -> PartitionRecords {
    recorded_on(
        &bed.dest_config(crate::kafka::DestUser::Admin),
        mirror,
        topic,
        partition,
    )
}

/// The state recorded for a partition of a mirror in the state topic of the destination
/// `destination` (e.g. the replicated one).
pub fn recorded_on(
    destination: &ClientConfig,
    mirror: &str,
    topic: &str,
    partition: i32,
) -> PartitionRecords {
    let units = store::load(
        destination,
        kmirror_crds::v1alpha1::DEFAULT_STATE_TOPIC,
        |k| k.mirror == mirror && k.topic == topic && k.partition == partition,
        Duration::from_secs(60),
    )
    .expect("load state");
    units
        .get(&(mirror.to_string(), topic.to_string(), partition))
        .cloned()
        .unwrap_or_default()
}

/// The offset map recorded for a partition.
pub fn recorded_map(bed: &Testbed, mirror: &str, topic: &str, partition: i32) -> OffsetMap {
    recorded(bed, mirror, topic, partition)
        .offset_map()
        .expect("recorded offset map")
}

/// Verifies one partition with the recorded map.
pub fn verify(
    bed: &Testbed,
    source: &ClientConfig,
    mirror: &str,
    source_topic: &str,
    destination_topic: &str,
    partition: i32,
    isolation: Isolation,
) -> Report {
    let map = recorded_map(bed, mirror, source_topic, partition);
    verify_partition(
        &Side {
            config: source.clone(),
            topic: source_topic.to_string(),
        },
        &Side {
            config: bed.dest_config(crate::kafka::DestUser::Admin),
            topic: destination_topic.to_string(),
        },
        partition,
        &map,
        isolation,
        Duration::from_secs(300),
    )
    .expect("verify")
}

/// Ensures the state topic exists on the destination.
pub fn ensure_state_topic(bed: &Testbed) {
    ensure_state_topic_on(&bed.dest_config(crate::kafka::DestUser::Admin));
}

/// Ensures the state topic exists on the destination `destination` (e.g. the replicated one).
pub fn ensure_state_topic_on(destination: &ClientConfig) {
    store::ensure_state_topic(destination, kmirror_crds::v1alpha1::DEFAULT_STATE_TOPIC)
        .expect("state topic");
}

/// A free loopback address for a fetcher's HTTP endpoints.
pub fn free_http_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").to_string()
}

/// The Prometheus text of `GET http://ADDR/metrics` (empty when nothing answers).
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The labels of a partition's series as a fetcher prints them, for the mirror `namespace/name`.
pub fn partition_labels(mirror: &str, topic: &str, partition: i32) -> String {
    let (namespace, name) = mirror.split_once('/').unwrap_or(("", mirror));
    format!(r#"namespace="{namespace}",name="{name}",topic="{topic}",partition="{partition}""#)
}

/// The value of the series `name{labels}` in a Prometheus text (labels as printed, e.g.
/// `namespace="e2e",name="t",topic="t",partition="0"`: [`partition_labels`]).
pub fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until `done()` holds, polling; panics with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
