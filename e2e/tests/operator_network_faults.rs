//! Fetcher pods cut off the network while their processes live, through the operator: the node
//! they ran on is lost (pod objects force-deleted, processes still running, no route to anything)
//! past their write leases, their replacements copy, then the network comes back. One of them
//! runs on and must stop writing before its replacement is created; the other is frozen as well
//! (a paused VM), with produce requests still in its kernel's send queue, so it cannot stop by
//! itself: when its network returns, the kernel delivers those requests, after its replacement's
//! writes. Neither may land anything then: zero duplicates, every record at its source offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::faults::net::{pod_freeze, pod_net_unsent};
use kmirror_e2e::faults::{self, Cluster, create_replicated_topic};
use kmirror_e2e::fetcher::ensure_state_topic_on;
use kmirror_e2e::kafka::{DestUser, mixed_records, produce_all, unique_name, watermarks};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, pods_per_partition};
use kmirror_e2e::soak::verify::verify_topic;
use rdkafka::ClientConfig;
use serde_json::json;

const PARTITIONS: i32 = 2;

/// Writes bursts of records until stopped (each with a record of about 1 MB in every
/// partition, so that a write waits in a send queue while its broker does not read); returns
/// how many.
fn steady_producer(source: ClientConfig, topic: String, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut seed = 7000;
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let large = if seed % 3 == 0 {
                PARTITIONS as usize
            } else {
                0
            };
            let records = mixed_records(150, PARTITIONS, large, seed);
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

/// The pod's IP and UID.
fn ip_and_uid(pods: &[k8s_openapi::api::core::v1::Pod], name: &str) -> (String, String) {
    let pod = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .expect("the fetcher pod");
    let ip = pod
        .status
        .as_ref()
        .and_then(|st| st.pod_ip.clone())
        .expect("its pod IP");
    (ip, pod.metadata.uid.clone().expect("its UID"))
}

#[tokio::test]
async fn pods_cut_off_past_their_lease_land_nothing_when_their_network_returns_frozen_or_not() {
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
            // One pod per partition: one lost pod runs on, the other is frozen.
            "fetcher": {"partitionsPerPod": 1}
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
    let per_partition = pods_per_partition(&pods);
    let running = per_partition[&0][0].clone();
    let frozen = per_partition[&1][0].clone();
    assert_ne!(running, frozen, "one pod per partition");
    let (running_ip, running_uid) = ip_and_uid(&pods, &running);
    let (frozen_ip, frozen_uid) = ip_and_uid(&pods, &frozen);

    // Partition 1's destination leader stops reading for a moment (well within its session
    // timeout, so it stays the leader): once its receive buffer is full, the frozen pod's next
    // write — a batch with a record of about 1 MB — waits in the pod's send queue. The pod is
    // frozen at once, before its request times out (a request given up on closes its
    // connection abortively, and the kernel drops what it held).
    let leader = faults::offsets(Cluster::RDestination, &topic, 1)
        .expect("partition 1 on the destination")
        .leader;
    let broker = Cluster::RDestination.broker(leader);
    eprintln!("{}", faults::sigstop_broker(&broker).expect("sigstop"));
    let queued_by = Instant::now() + Duration::from_secs(3);
    let queued = loop {
        let (bytes, said) = pod_net_unsent(&frozen_ip).expect("pod-net-unsent");
        if bytes >= 100_000 || Instant::now() >= queued_by {
            break (bytes, said);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The node is lost: the pod is frozen (a paused VM), then neither pod has a network; their
    // objects go below.
    eprintln!("{}", pod_freeze(&frozen_ip).expect("pod-freeze"));
    eprintln!(
        "{}",
        faults::pod_net_cut(&s.ns, &frozen).expect("pod-net-cut")
    );
    eprintln!(
        "{}",
        faults::pod_net_cut(&s.ns, &running).expect("pod-net-cut")
    );
    eprintln!("{}", faults::sigcont_broker(&broker).expect("sigcont"));
    eprintln!("before the cut: {}", queued.1);
    assert!(
        queued.0 >= 100_000,
        "a write of the frozen pod waits in its send queue while broker {broker} does not read: \
         {}",
        queued.1
    );
    let (still_queued, said) = pod_net_unsent(&frozen_ip).expect("pod-net-unsent");
    eprintln!("cut off and frozen with writes under way: {said}");
    assert!(still_queued > 0, "{said}");
    let cut_at = dest_total(&dest, &topic);
    eprintln!("{}", faults::zombie(&s.ns, &running).expect("zombie"));
    eprintln!("{}", faults::zombie(&s.ns, &frozen).expect("zombie"));
    let injected = Instant::now();
    let mut replaced_after = None;
    let mut frozen_replaced = false;
    let mut running_ended_after = None;
    // Replacements come once the lost pods' last grants have run out (D + margin = 35 s), and
    // copy on.
    let replaced = |pods: &[k8s_openapi::api::core::v1::Pod], name: &str, uid: &str| {
        pods.iter().any(|p| {
            p.metadata.name.as_deref() == Some(name) && p.metadata.uid.as_deref() != Some(uid)
        })
    };
    while injected.elapsed() < Duration::from_secs(150) {
        let now = s.pods().await;
        if replaced_after.is_none() && replaced(&now, &running, &running_uid) {
            replaced_after = Some(injected.elapsed());
        }
        frozen_replaced = frozen_replaced || replaced(&now, &frozen, &frozen_uid);
        if running_ended_after.is_none() && !is_zombie(&s.ns, &running) {
            running_ended_after = Some(injected.elapsed());
        }
        if replaced_after.is_some() && frozen_replaced && dest_total(&dest, &topic) > cut_at + 600 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let replaced_after = replaced_after.expect("a replacement for the pod that ran on");
    assert!(frozen_replaced, "a replacement for the frozen pod");
    let copied_by_replacements = dest_total(&dest, &topic) - cut_at;
    assert!(
        copied_by_replacements > 600,
        "the replacements copy ({copied_by_replacements} records since the cut)"
    );

    // The network comes back to whatever of the lost pods still runs, by IP (the pod objects
    // are gone). A lost pod whose processes all ended has no network left to restore.
    for (name, ip) in [(&running, &running_ip), (&frozen, &frozen_ip)] {
        if is_zombie(&s.ns, name) {
            eprintln!(
                "{}",
                faults::verb(&["pod-net-restore", ip]).expect("restore")
            );
        } else {
            eprintln!("{name}: its processes had ended before its network could return");
        }
    }
    // The frozen pod's kernel delivers what its send queue held (its next retransmission).
    let restored_at = Instant::now();
    let delivered = loop {
        let (bytes, said) = pod_net_unsent(&frozen_ip).expect("pod-net-unsent");
        if running_ended_after.is_none() && !is_zombie(&s.ns, &running) {
            running_ended_after = Some(injected.elapsed());
        }
        if bytes == 0 {
            break said;
        }
        assert!(
            restored_at.elapsed() < Duration::from_secs(150),
            "the frozen pod's kernel still holds its writes 150 s after its network returned: \
             {said}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "the frozen pod's send queue went out {:?} after its network returned: {delivered}",
        restored_at.elapsed()
    );
    let killed = faults::zombie_kill(&format!("{}/{frozen}", s.ns)).unwrap_or_default();
    eprintln!("{killed}");
    let killed = faults::zombie_kill(&format!("{}/{running}", s.ns)).unwrap_or_default();
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
    let running_ended_after = running_ended_after.unwrap_or_else(|| {
        panic!("the cut-off pod's process still ran after its network returned ({killed})")
    });
    assert!(
        running_ended_after <= replaced_after,
        "the cut-off pod stopped ({running_ended_after:?}) before its replacement was created \
         ({replaced_after:?})"
    );
    eprintln!(
        "cut off past their leases: the pod that ran on ended {running_ended_after:?} after the \
         cut, its replacement was created after {replaced_after:?}; the frozen pod's queued \
         writes ({still_queued} bytes) reached the destination after its replacement copied and \
         were refused; {sent} records exact"
    );
    s.cleanup().await;
    drop(op);
}
