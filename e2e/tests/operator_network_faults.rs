//! A fetcher pod cut off the network while its process lives, through the operator: the node it
//! ran on is lost (its pod object force-deleted, the process still running, no route to anything)
//! past its write lease, its replacement copies, then the network comes back. The lost pod must
//! have stopped writing before its replacement was created, and nothing it had under way may
//! land afterwards: zero duplicates, every record at its source offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::faults::{self, create_replicated_topic};
use kmirror_e2e::fetcher::ensure_state_topic_on;
use kmirror_e2e::kafka::{DestUser, mixed_records, produce_all, unique_name, watermarks};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, pods_per_partition};
use kmirror_e2e::soak::verify::verify_topic;
use rdkafka::ClientConfig;
use serde_json::json;

const PARTITIONS: i32 = 2;

/// Writes bursts of records until stopped; returns how many.
fn steady_producer(source: ClientConfig, topic: String, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut seed = 7000;
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let records = mixed_records(150, PARTITIONS, 0, seed);
            produce_all(&source, &topic, &records, &[("acks", "all")]).expect("produce a burst");
            sent += records.len() as u64;
            seed += 1;
            std::thread::sleep(Duration::from_millis(250));
        }
        sent
    })
}

fn dest_total(dest: &ClientConfig, topic: &str) -> i64 {
    (0..PARTITIONS)
        .map(|p| watermarks(dest, topic, p).map_or(0, |w| w.1))
        .sum()
}

/// Whether `ns/pod` is listed as a zombie (its processes still run).
fn is_zombie(ns: &str, pod: &str) -> bool {
    faults::zombies()
        .expect("zombies")
        .lines()
        .any(|l| l.starts_with(&format!("{ns}/{pod} ")))
}

#[tokio::test]
async fn a_fetcher_pod_cut_off_past_its_lease_writes_nothing_when_its_network_returns() {
    let bed = faults::replicated();
    let _faults = faults::exclusive();
    let source = bed.r_source_config();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    let s = Scenario::new(bed, "net-zombie").await;
    faults::isolate_namespace(&s.client, &s.ns)
        .await
        .expect("isolated pod networks");
    let topic = unique_name("netz");
    create_replicated_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    s.apply_mirror(
        "dr",
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
        }),
    )
    .await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer(source.clone(), topic.clone(), stop.clone());
    s.wait_topic("t", "MIRRORING", Duration::from_secs(180), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while dest_total(&dest, &topic) < 600 {
        assert!(Instant::now() < deadline, "no copies on the destination");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let pods = s.pods().await;
    let pod = pods_per_partition(&pods)[&0][0].clone();
    let old = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pod.as_str()))
        .expect("the fetcher pod");
    let old_uid = old.metadata.uid.clone().expect("its UID");
    let ip = old
        .status
        .as_ref()
        .and_then(|st| st.pod_ip.clone())
        .expect("its pod IP");

    // The node is lost: no network for the pod's process, and its object goes.
    eprintln!("{}", faults::pod_net_cut(&s.ns, &pod).expect("pod-net-cut"));
    let cut_at = dest_total(&dest, &topic);
    eprintln!("{}", faults::zombie(&s.ns, &pod).expect("zombie"));
    let injected = Instant::now();
    let mut replaced_after = None;
    let mut zombie_ended_after = None;
    // A replacement comes once the zombie's last grant has run out (D + margin = 35 s), and
    // copies on.
    while injected.elapsed() < Duration::from_secs(150) {
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
        if replaced_after.is_some() && dest_total(&dest, &topic) > cut_at + 600 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let replaced_after = replaced_after.expect("a replacement pod was created");
    let copied_by_replacement = dest_total(&dest, &topic) - cut_at;
    assert!(
        copied_by_replacement > 600,
        "the replacement copies ({copied_by_replacement} records since the cut)"
    );

    // The network comes back to whatever of the lost pod still runs.
    // By its IP: the pod object is gone. A lost pod whose processes all ended has no network
    // left to restore.
    if is_zombie(&s.ns, &pod) {
        let restored = faults::verb(&["pod-net-restore", &ip]).expect("pod-net-restore");
        eprintln!("{restored}");
    } else {
        eprintln!("the lost pod's processes had ended before its network could return");
    }
    let restored_at = Instant::now();
    while zombie_ended_after.is_none() && restored_at.elapsed() < Duration::from_secs(60) {
        if !is_zombie(&s.ns, &pod) {
            zombie_ended_after = Some(injected.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let killed = faults::zombie_kill(&format!("{}/{pod}", s.ns)).unwrap_or_default();
    stop.store(true, Ordering::Relaxed);
    let sent = producer.join().expect("producer");
    let deadline = Instant::now() + Duration::from_secs(180);
    while !(0..PARTITIONS).all(|p| {
        matches!((watermarks(&source, &topic, p), watermarks(&dest, &topic, p)),
            (Ok((_, a)), Ok((_, b))) if a <= b)
    }) {
        assert!(
            Instant::now() < deadline,
            "the destination did not catch up; operator log:\n{}",
            op.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let checks = verify_topic(bed, &s.ns, "dr", &topic, false);
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
    assert_eq!(matched, sent, "every record is on the destination once");
    let zombie_ended_after = zombie_ended_after.unwrap_or_else(|| {
        panic!("the cut-off pod's process still ran 60 s after its network returned ({killed})")
    });
    assert!(
        zombie_ended_after <= replaced_after,
        "the cut-off pod stopped ({zombie_ended_after:?}) before its replacement was created \
         ({replaced_after:?})"
    );
    eprintln!(
        "cut off past its lease: the lost pod's process ended {zombie_ended_after:?} after the \
         cut, its replacement was created after {replaced_after:?}; {sent} records exact"
    );
    s.cleanup().await;
    drop(op);
}
