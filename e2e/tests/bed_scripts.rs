//! The test bed's shell helpers judge a broker's log correctly however long the log has grown.
//!
//! No bed needed: each case sources the helpers into `bash -euo pipefail` (as `e2e/testbed.sh`
//! runs them) with a run directory of its own.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use kmirror_e2e::testbed::repo_root;

/// A run directory of its own under the system temp dir, removed on drop.
struct RunDir(PathBuf);

impl RunDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("kmirror-bed-scripts-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).expect("create run dir");
        Self(dir)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.0.join("logs").join(format!("{name}.log"))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `script` after sourcing the bed's helpers; true when it exits 0.
fn bed_shell(run: &Path, script: &str) -> bool {
    let bed = repo_root().join("e2e/bed");
    let status = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail; . '{}/common.sh'; . '{}/kafka.sh'; {script}",
            bed.display(),
            bed.display()
        ))
        .env("KMIRROR_RUN_DIR", run)
        .env("KMIRROR_CACHE", run.join("cache"))
        .status()
        .expect("run bash");
    status.success()
}

/// `lines` lines of broker chatter.
fn chatter(lines: usize) -> String {
    let mut text = String::new();
    for i in 0..lines {
        let _ = writeln!(
            text,
            "[2026-12-02 02:12:{:02},000] INFO [GroupCoordinator id=1] Loaded group g-{i} with 0 members. (org.apache.kafka)",
            i % 60
        );
    }
    text
}

const STARTED: &str = "[2026-12-02 02:12:50,136] INFO [KafkaRaftServer nodeId=1] Kafka Server started (kafka.server.KafkaRaftServer)\n";

#[test]
fn a_restart_is_seen_even_when_the_broker_logged_a_lot_after_it() {
    let run = RunDir::new("restart");
    let port = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port_number = port.local_addr().expect("addr").port();
    // Before the restart: an older start and a long history.
    let before = format!("{}{STARTED}{}", chatter(2_000), chatter(2_000));
    let lines_before = before.lines().count();
    // After it: the new start, then far more than a pipe's buffer of log.
    let after = format!("{}{STARTED}{}", chatter(200), chatter(20_000));
    std::fs::write(run.log("kafka-source"), format!("{before}{after}")).expect("write log");

    assert!(
        bed_shell(
            &run.0,
            &format!("kafka_started_after source {port_number} {lines_before}")
        ),
        "a broker that logged its start and listens counts as started, however much it logged since"
    );
}

#[test]
fn an_earlier_start_does_not_count_for_a_restart() {
    let run = RunDir::new("earlier");
    let port = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port_number = port.local_addr().expect("addr").port();
    let before = format!("{}{STARTED}{}", chatter(200), chatter(20_000));
    let lines_before = before.lines().count();
    std::fs::write(run.log("kafka-source"), format!("{before}{}", chatter(50))).expect("write log");

    assert!(
        !bed_shell(
            &run.0,
            &format!("kafka_started_after source {port_number} {lines_before}")
        ),
        "only log lines after the restart may say the broker started"
    );
}

#[test]
fn a_broker_that_logged_its_start_but_does_not_listen_has_not_started() {
    let run = RunDir::new("closed");
    let port_number = {
        let port = TcpListener::bind("127.0.0.1:0").expect("bind");
        port.local_addr().expect("addr").port()
    };
    std::fs::write(run.log("kafka-source"), format!("{STARTED}{}", chatter(20)))
        .expect("write log");

    assert!(!bed_shell(
        &run.0,
        &format!("kafka_started_after source {port_number} 0")
    ));
}
