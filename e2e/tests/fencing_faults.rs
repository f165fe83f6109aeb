//! One writer per destination partition, under faults on the replicated pair: a fetcher whose
//! pod object is force-deleted while its process keeps running (a lost node) stops writing
//! before its replacement starts, and destination leader moves and a frozen destination follower
//! under load while fetchers restart leave no duplicate either — the destination stays the exact
//! copy of the source, every record at its source offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::faults::Cluster;
use kmirror_e2e::faults::{self, create_replicated_topic};
use kmirror_e2e::fetcher::ensure_state_topic_on;
use kmirror_e2e::kafka::{DestUser, mixed_records, produce_all, unique_name, watermarks};
use kmirror_e2e::operator::{
    OperatorProcess, Scenario, all_partitions, fetcher_processes, pods_per_partition,
};
use kmirror_e2e::soak::verify::verify_topic;
use kube::Api;
use rdkafka::ClientConfig;
use serde_json::json;

const PARTITIONS: i32 = 2;

/// Writes bursts of records with pauses between them (traffic as it often is: the destination
/// log end stands still for a moment between bursts) until stopped; returns how many.
fn bursty_producer(source: ClientConfig, topic: String, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut seed = 1000;
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let records = mixed_records(200, PARTITIONS, 0, seed);
            produce_all(&source, &topic, &records, &[("acks", "all")]).expect("produce a burst");
            sent += records.len() as u64;
            seed += 1;
            std::thread::sleep(Duration::from_millis(1500 + (seed % 4) * 400));
        }
        sent
    })
}

/// Whether `ns/pod` is listed as a zombie (its processes still run).
fn is_zombie(ns: &str, pod: &str) -> bool {
    faults::zombies()
        .expect("zombies")
        .lines()
        .any(|l| l.starts_with(&format!("{ns}/{pod} ")))
}

fn mirror_spec(bed: &Testbed) -> serde_json::Value {
    json!({
        "source": {"bootstrapServers": bed.var("KMIRROR_R_SOURCE_BOOTSTRAP")},
        "destination": {
            "bootstrapServers": bed.var("KMIRROR_R_DEST_BOOTSTRAP"),
            "allowInsecure": true,
            "sasl": {"mechanism": "PLAIN", "username": "mirror",
                     "password": {"name": "destination-credentials", "key": "password"}}
        },
        "sync": {"interval": "5s"},
        "fetcher": {"partitionsPerPod": PARTITIONS}
    })
}

/// The destination has caught up with the source on every partition.
fn caught_up(source: &ClientConfig, dest: &ClientConfig, topic: &str) -> bool {
    (0..PARTITIONS).all(|p| {
        matches!((watermarks(source, topic, p), watermarks(dest, topic, p)),
            (Ok((_, s)), Ok((_, d))) if s == d)
    })
}

#[tokio::test]
async fn a_zombie_fetcher_stops_writing_before_its_replacement_writes() {
    let bed = faults::replicated();
    let _faults = faults::exclusive();
    let source = bed.r_source_config();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    let s = Scenario::new(bed, "fence-zombie").await;
    let topic = unique_name("fence");
    create_replicated_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    s.apply_mirror("dr", mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = bursty_producer(source.clone(), topic.clone(), stop.clone());

    s.wait_topic("t", "MIRRORING", Duration::from_secs(180), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;
    // Copying: the destination grows.
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..PARTITIONS)
        .map(|p| watermarks(&dest, &topic, p).map_or(0, |w| w.1))
        .sum::<i64>()
        < 400
    {
        assert!(Instant::now() < deadline, "no copies on the destination");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let pods = s.pods().await;
    let serving = pods_per_partition(&pods);
    let pod = serving[&0][0].clone();
    let old_uid = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pod.as_str()))
        .and_then(|p| p.metadata.uid.clone())
        .expect("the fetcher pod's UID");

    // The node is lost: the pod object goes, its fetcher keeps running.
    let said = faults::zombie(&s.ns, &pod).expect("zombie");
    eprintln!("{said}");
    let injected = Instant::now();
    let mut replaced_after = None;
    let mut zombie_ended_after = None;
    // A replacement comes once the zombie's last grant has run out: D + margin = 35 s.
    let mut zombie_seen = false;
    while injected.elapsed() < Duration::from_secs(75) {
        // The pod object is gone, yet its process runs: never next to a second process for
        // the same partitions.
        let processes = fetcher_processes(&format!("{}/dr", s.ns));
        if let Some(pids) = processes.get(&0) {
            assert!(
                pids.len() <= 1,
                "partition 0 served by two fetcher processes: {pids:?}"
            );
            zombie_seen |= zombie_ended_after.is_none() && pids.len() == 1;
        }
        if replaced_after.is_none()
            && s.pods().await.iter().any(|p| {
                p.metadata.name.as_deref() == Some(pod.as_str())
                    && p.metadata.uid.as_deref() != Some(old_uid.as_str())
            })
        {
            replaced_after = Some(injected.elapsed());
        }
        if zombie_ended_after.is_none() && !is_zombie(&s.ns, &pod) {
            zombie_ended_after = Some(injected.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let killed = faults::zombie_kill(&format!("{}/{pod}", s.ns)).unwrap_or_default();
    eprintln!(
        "replacement pod after {replaced_after:?}; the zombie ended by itself after \
         {zombie_ended_after:?}; {killed}"
    );

    stop.store(true, Ordering::Relaxed);
    let sent = producer.join().expect("producer");
    let deadline = Instant::now() + Duration::from_secs(180);
    while !caught_up(&source, &dest, &topic) {
        if Instant::now() > deadline {
            let t = s.topic("t").await.map(|t| t.status);
            panic!(
                "the destination did not catch up: {}\noperator log tail: {}",
                serde_json::to_string_pretty(&t).unwrap(),
                tail(&op.log_text(), 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let t = s.topic("t").await.expect("the MirrorTopic");
    let status = serde_json::to_string_pretty(&t.status).unwrap();
    assert!(
        all_partitions(&t, PartitionState::Mirroring, PARTITIONS as usize),
        "every partition mirrors on after the zombie: {status}"
    );
    let checks = verify_topic(bed, &s.ns, "dr", &topic, false);
    let mut matched = 0;
    for c in &checks {
        let r = c.report.as_ref().expect("a verifier report");
        assert!(
            r.missing == 0 && r.different == 0 && r.extra == 0 && r.trailing == 0,
            "partition {}: no record lost, changed or written twice: {r:?}",
            c.partition
        );
        assert!(r.offsets_identical, "partition {}: {r:?}", c.partition);
        matched += r.matched;
    }
    assert_eq!(checks.len(), PARTITIONS as usize, "{checks:?}");
    assert_eq!(matched, sent, "every record is on the destination once");
    assert!(zombie_seen, "the process check saw the zombie's process");
    let replaced_after = replaced_after.expect("a replacement pod was created");
    let zombie_ended_after = zombie_ended_after.expect("the zombie stopped by itself");
    assert!(
        zombie_ended_after <= replaced_after,
        "the zombie stopped ({zombie_ended_after:?}) before its replacement was created \
         ({replaced_after:?})"
    );
    eprintln!(
        "zombie: stopped writing and exited {zombie_ended_after:?} after its pod object went; \
         replacement created after {replaced_after:?}; {sent} records"
    );
    s.cleanup().await;
    drop(op);
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Every partition verified: nothing lost, changed or written twice, offsets identical; returns
/// the records matched.
fn assert_exact_copy(bed: &Testbed, ns: &str, topic: &str) -> u64 {
    let checks = verify_topic(bed, ns, "dr", topic, false);
    assert_eq!(checks.len(), PARTITIONS as usize, "{checks:?}");
    let mut matched = 0;
    for c in &checks {
        let r = c.report.as_ref().expect("a verifier report");
        assert!(
            r.missing == 0 && r.different == 0 && r.extra == 0 && r.trailing == 0,
            "partition {}: no record lost, changed or written twice: {r:?}",
            c.partition
        );
        assert!(r.offsets_identical, "partition {}: {r:?}", c.partition);
        matched += r.matched;
    }
    matched
}

#[tokio::test]
async fn destination_leader_moves_and_a_frozen_follower_while_fetchers_restart_duplicate_nothing() {
    let bed = faults::replicated();
    let _faults = faults::exclusive();
    let source = bed.r_source_config();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    let s = Scenario::new(bed, "fence-moves").await;
    let topic = unique_name("fencemv");
    create_replicated_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    s.apply_mirror("dr", mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = bursty_producer(source.clone(), topic.clone(), stop.clone());
    s.wait_topic("t", "MIRRORING", Duration::from_secs(180), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;
    let wait_grown = |at_least: i64| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while (0..PARTITIONS)
            .map(|p| watermarks(&dest, &topic, p).map_or(0, |w| w.1))
            .sum::<i64>()
            < at_least
        {
            assert!(Instant::now() < deadline, "no copies on the destination");
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    wait_grown(400);

    // The destination leader of partition 0 moves twice under load.
    for _ in 0..2 {
        let said = faults::move_leader(Cluster::RDestination, &topic, 0, None).expect("move");
        eprintln!("{}", said.lines().last().unwrap_or_default());
        std::thread::sleep(Duration::from_secs(3));
    }
    // A destination follower of partition 1 freezes; the fetcher pod is replaced meanwhile (its
    // successor settles on the log end every in-sync replica holds), then the follower thaws.
    let said = faults::freeze_follower(Cluster::RDestination, &topic, 1).expect("freeze");
    eprintln!("{}", said.lines().last().unwrap_or_default());
    std::thread::sleep(Duration::from_secs(3));
    let pods = s.pods().await;
    let pod = pods_per_partition(&pods)[&1][0].clone();
    Api::<Pod>::namespaced(s.client.clone(), &s.ns)
        .delete(&pod, &Default::default())
        .await
        .expect("delete the fetcher pod");
    std::thread::sleep(Duration::from_secs(6));
    faults::thaw().expect("thaw");

    stop.store(true, Ordering::Relaxed);
    let sent = producer.join().expect("producer");
    let deadline = Instant::now() + Duration::from_secs(180);
    while !caught_up(&source, &dest, &topic) {
        if Instant::now() > deadline {
            let t = s.topic("t").await.map(|t| t.status);
            panic!(
                "the destination did not catch up: {}\noperator log tail: {}",
                serde_json::to_string_pretty(&t).unwrap(),
                tail(&op.log_text(), 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let t = s.topic("t").await.expect("the MirrorTopic");
    assert!(
        all_partitions(&t, PartitionState::Mirroring, PARTITIONS as usize),
        "every partition mirrors on: {}",
        serde_json::to_string_pretty(&t.status).unwrap()
    );
    assert_eq!(assert_exact_copy(bed, &s.ns, &topic), sent);
    s.cleanup().await;
    drop(op);
}
