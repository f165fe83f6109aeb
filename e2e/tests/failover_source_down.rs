//! Immediate failover while the source broker is down. (Its own test binary: it stops the
//! source broker, which must not disturb other tests; the broker is restarted afterwards.)

use std::process::Command;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::fetcher::{ensure_state_topic, target_dir};
use kmirror_e2e::kafka::{
    DestUser, app_acls, app_may, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kmirror_e2e::testbed::repo_root;
use kmirror_e2e::{Testbed, has_row};
use kmirror_state::kafka_admin::{Operation, create_acls};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use serde_json::json;

/// Partitions of the failed-over topic, and records in each.
const PARTITIONS: i32 = 100;
const PER_PARTITION: usize = 30;

struct SourceDown;

impl SourceDown {
    fn stop() -> SourceDown {
        let ok = Command::new(repo_root().join("e2e/testbed.sh"))
            .args(["stop", "kafka-source"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "stopping the source broker failed");
        SourceDown
    }
}

impl Drop for SourceDown {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("e2e/testbed.sh"))
            .args(["start", "kafka-source"])
            .status();
    }
}

/// With the source down, an immediate failover of 100 partitions finishes, reports each
/// partition's last mirrored offset, and makes the destination writable for the applications:
/// their WRITE ACLs come from the last ACL set synced from the source (kept in the state topic),
/// since the source cannot be asked. The application principal writes, not a super user. (The
/// time it takes is printed: the source is not asked again once it did not answer.)
#[tokio::test]
async fn immediate_failover_with_the_source_down_completes_and_reports_the_lmo() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "fo-down").await;
    let topic = unique_name("fo-down");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    let admin: AdminClient<DefaultClientContext> = source.create().unwrap();
    create_acls(
        admin.inner(),
        &app_acls(&topic, "fo-down-app"),
        Duration::from_secs(10),
    )
    .unwrap();
    produce_all(
        &source,
        &topic,
        &mixed_records(PER_PARTITION * PARTITIONS as usize, PARTITIONS, 0, 3),
        &[],
    )
    .unwrap();
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = json!({"partitionsPerPod": 25});
    s.apply_mirror("dr", spec).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(120), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while (0..PARTITIONS).any(|p| watermarks(&dest, &topic, p).unwrap().1 != PER_PARTITION as i64) {
        assert!(Instant::now() < deadline, "no catch-up");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The ACL sync copied the app's bindings, WRITE withheld while the topic mirrors.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !app_may(&dest, &topic, Operation::Read) {
        assert!(
            Instant::now() < deadline,
            "the app's READ ACL was not synced"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        !app_may(&dest, &topic, Operation::Write),
        "WRITE while mirroring"
    );
    let down = SourceDown::stop();
    let started = Instant::now();
    let out = Command::new(target_dir().join("debug/kubectl-mirror"))
        .args([
            "failover",
            "dr",
            "--all",
            "--immediate",
            "--wait",
            "--timeout",
            "2m",
            "-n",
            &s.ns,
        ])
        .env("KUBECONFIG", bed.var("KUBECONFIG"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "failover failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "immediate failover with the source down took {:?}:\n{stdout}",
        started.elapsed()
    );
    let t = s.topic("t").await.unwrap();
    assert!(all_partitions(
        &t,
        PartitionState::Stopped,
        PARTITIONS as usize
    ));
    for p in t.status.unwrap().partitions {
        assert_eq!(
            p.last_mirrored_offset,
            Some(PER_PARTITION as i64 - 1),
            "partition {}: LMO reported",
            p.partition
        );
    }
    let lmo = (PER_PARTITION - 1).to_string();
    for p in 0..PARTITIONS {
        let p = p.to_string();
        assert!(
            has_row(&stdout, &[&topic, &p, "STOPPED", &lmo]),
            "the plugin reports partition {p}'s LMO: {stdout}"
        );
    }
    // The destination is writable for the applications at once.
    assert!(
        app_may(&dest, &topic, Operation::Write),
        "the app has no WRITE ACL after the failover with the source down"
    );
    produce_all(
        &bed.dest_config(DestUser::App),
        &topic,
        &mixed_records(PARTITIONS as usize, PARTITIONS, 0, 4),
        &[("message.timeout.ms", "10000")],
    )
    .expect("the app writes to the failed-over topic");
    drop(down);
    s.cleanup().await;
}
