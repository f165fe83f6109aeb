//! One writer per destination partition, under faults on the replicated pair: a fetcher whose
//! pod object is force-deleted while its process keeps running (a lost node) stops writing
//! before its replacement starts, so the destination stays the exact copy of the source — no
//! duplicate, no foreign write, every record at its source offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::faults::{self, create_replicated_topic};
use kmirror_e2e::fetcher::ensure_state_topic_on;
use kmirror_e2e::kafka::{DestUser, mixed_records, produce_all, unique_name, watermarks};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, pods_per_partition};
use kmirror_e2e::soak::verify::verify_topic;
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
    while injected.elapsed() < Duration::from_secs(45) {
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
