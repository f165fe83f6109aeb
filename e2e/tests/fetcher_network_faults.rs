//! The fetcher under network faults on the replicated pair, its clients going through the bed's
//! fault proxy (docs/testbed-faults.md): the connections of a destination leader reset again and
//! again while a fresh fetcher copies a backlog (nothing misplaced, duplicated or lost, and the
//! fetcher copes without stopping), and a source broker cut off (the partitions other brokers lead
//! copy on meanwhile; the cut-off ones catch up once it is back). Each test holds the bed's fault
//! lock for as long as its faults last.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kmirror_e2e::Testbed;
use kmirror_e2e::faults::{self, Cluster};
use kmirror_e2e::fetcher::{
    FetcherProcess, ensure_state_topic_on, r_destination_args, r_source_args, recorded_on,
    wait_until,
};
use kmirror_e2e::kafka::{DestUser, TestRecord, produce_all, unique_name, watermarks};
use kmirror_fetcher::Isolation;
use kmirror_fetcher::verify::{Side, verify_partition};
use rdkafka::ClientConfig;

const WAIT: Duration = Duration::from_secs(120);

/// `n` records of about `size` bytes for partitions `0..partitions`, values naming their wave.
fn records(wave: &str, n: usize, partitions: i32, size: usize) -> Vec<TestRecord> {
    (0..n)
        .map(|i| {
            let mut value = format!("{wave}-{i}-").into_bytes();
            value.resize(size.max(value.len()), b'a' + (i % 26) as u8);
            TestRecord {
                partition: i as i32 % partitions,
                key: Some(format!("k{i}").into_bytes()),
                value: Some(value),
                headers: Vec::new(),
            }
        })
        .collect()
}

/// A topic with `partitions` partitions on both replicated clusters (RF 3).
async fn topic_pair(bed: &Testbed, prefix: &str, partitions: i32) -> String {
    let topic = unique_name(prefix);
    faults::create_replicated_topic(&bed.r_source_config(), &topic, partitions, &[])
        .await
        .expect("source topic");
    faults::create_replicated_topic(&bed.r_dest_config(DestUser::Admin), &topic, partitions, &[])
        .await
        .expect("destination topic");
    topic
}

fn fetcher_args(mirror: &str, topic: &str, partitions: i32, sides: Vec<String>) -> Vec<String> {
    let all: Vec<String> = (0..partitions).map(|p| p.to_string()).collect();
    let mut a: Vec<String> = vec![
        "--mirror".into(),
        mirror.into(),
        "--source-topic".into(),
        topic.into(),
        "--partitions".into(),
        all.join(","),
        "--startup-settle-seconds".into(),
        "0.5".into(),
    ];
    a.extend(sides);
    a
}

fn end(config: &ClientConfig, topic: &str, partition: i32) -> i64 {
    watermarks(config, topic, partition).map_or(-1, |w| w.1)
}

/// Every record of every partition once on the destination, at its source offset, nothing after
/// the copy of the last one (verified through the recorded offset map).
fn assert_exact_copy(bed: &Testbed, mirror: &str, topic: &str, partitions: i32) -> u64 {
    let dest = bed.r_dest_config(DestUser::Admin);
    let mut matched = 0;
    for p in 0..partitions {
        let map = recorded_on(&dest, mirror, topic, p)
            .offset_map()
            .expect("map");
        let report = verify_partition(
            &Side {
                config: bed.r_source_config(),
                topic: topic.to_string(),
            },
            &Side {
                config: dest.clone(),
                topic: topic.to_string(),
            },
            p,
            &map,
            Isolation::ReadCommitted,
            Duration::from_secs(300),
        )
        .expect("verify");
        assert!(
            report.is_clean() && report.offsets_identical && report.trailing == 0,
            "partition {p}: nothing lost, changed, duplicated or misplaced: {report:?}"
        );
        matched += report.matched;
    }
    matched
}

/// Writes waves of records to the source (directly, not through the proxy) until stopped.
fn steady_producer(
    bed: &Testbed,
    topic: &str,
    partitions: i32,
    stop: Arc<AtomicBool>,
) -> JoinHandle<u64> {
    let source = bed.r_source_config();
    let topic = topic.to_string();
    std::thread::spawn(move || {
        let mut sent = 0u64;
        let mut wave = 0;
        while !stop.load(Ordering::Relaxed) {
            let batch = records(&format!("live{wave}"), 300, partitions, 400);
            produce_all(&source, &topic, &batch, &[("acks", "all")]).expect("produce a wave");
            sent += batch.len() as u64;
            wave += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
        sent
    })
}

/// When the batches in flight to a destination broker fail with their
/// connection, the next one must not be appended where an earlier one belongs. The connections of
/// partition 0's destination leader are reset 30 times while a fresh fetcher (a producer ID the
/// destination does not know yet) copies a backlog, and traffic goes on.
#[tokio::test]
async fn destination_leader_connections_reset_30_times_misplace_nothing() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    const PARTITIONS: i32 = 3;
    let topic = topic_pair(bed, "net-reset", PARTITIONS).await;
    let backlog = records("backlog", 30_000, PARTITIONS, 400);
    produce_all(&bed.r_source_config(), &topic, &backlog, &[("acks", "all")]).expect("backlog");
    let leader = faults::offsets(Cluster::RDestination, &topic, 0)
        .expect("destination leader")
        .leader;
    let mirror = format!("e2e/{topic}");
    let mut sides = r_source_args(bed);
    sides.extend(proxied(
        r_destination_args(bed),
        bed.r_dest_proxied_bootstrap(),
    ));
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(&mirror, &topic, PARTITIONS, sides));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer(bed, &topic, PARTITIONS, stop.clone());
    // The resets begin with the first copied record: the fetcher's first produce requests, with
    // a producer ID the destination does not know yet, meet them while it copies the backlog
    // (slowed by 30 ms on every response of that broker).
    wait_until("the first records copied to partition 0", WAIT, || {
        end(&dest, &topic, 0) > 0
    });
    faults::net_latency(
        Cluster::RDestination,
        leader,
        Duration::from_millis(30),
        Duration::ZERO,
        None,
    )
    .expect("latency");
    let resetter = std::thread::spawn(move || {
        faults::net_reset(
            Cluster::RDestination,
            leader,
            30,
            Duration::from_millis(500),
        )
    });
    let resets = resetter
        .join()
        .expect("resetter")
        .expect("connection resets");
    eprintln!("{}", resets.output);
    assert!(
        resets.reset >= 10,
        "connections were reset: {}\nfetcher log tail:\n{}",
        resets.output,
        tail(&fetcher.log_text(), 40)
    );
    stop.store(true, Ordering::Relaxed);
    let live = producer.join().expect("producer");
    faults::net_heal(None).expect("heal");
    let copied_during = end(&dest, &topic, 0);

    let source = bed.r_source_config();
    wait_until(
        "the destination caught up",
        Duration::from_secs(180),
        || {
            (0..PARTITIONS).all(|p| end(&dest, &topic, p) == end(&source, &topic, p))
                || fetcher.exited().is_some()
        },
    );
    assert!(
        fetcher.exited().is_none(),
        "the fetcher copes with reset connections without stopping; log tail:\n{}",
        tail(&fetcher.log_text(), 40)
    );
    let matched = assert_exact_copy(bed, &mirror, &topic, PARTITIONS);
    assert_eq!(matched, backlog.len() as u64 + live, "every record once");
    eprintln!(
        "{matched} records exact after 30 connection resets of broker {leader} \
         (partition 0 had {copied_during} when they ended)"
    );
}

/// One unreachable source broker must not stall the partitions other brokers
/// lead. The broker leading partition 0 is cut off (connections hang, nothing is refused) while
/// every partition gets new records; the others are copied meanwhile, partition 0 after the heal.
#[tokio::test]
async fn a_source_broker_cut_off_stalls_only_the_partitions_it_leads() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let dest = bed.r_dest_config(DestUser::Admin);
    let source = bed.r_source_config();
    ensure_state_topic_on(&dest);
    const PARTITIONS: i32 = 6;
    let topic = topic_pair(bed, "net-cut", PARTITIONS).await;
    produce_all(
        &source,
        &topic,
        &records("before", 600, PARTITIONS, 200),
        &[],
    )
    .expect("first");
    let mirror = format!("e2e/{topic}");
    let mut sides = proxied(r_source_args(bed), bed.r_source_proxied_bootstrap());
    sides.extend(r_destination_args(bed));
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(&mirror, &topic, PARTITIONS, sides));
    wait_until("the first records copied", WAIT, || {
        (0..PARTITIONS).all(|p| end(&dest, &topic, p) == 100)
    });

    let leaders: Vec<i32> = (0..PARTITIONS)
        .map(|p| {
            faults::offsets(Cluster::RSource, &topic, p)
                .expect("leader")
                .leader
        })
        .collect();
    let cut = leaders[0];
    let healthy: Vec<i32> = (0..PARTITIONS)
        .filter(|&p| leaders[p as usize] != cut)
        .collect();
    assert!(
        !healthy.is_empty(),
        "leaders {leaders:?}: every partition on one broker"
    );
    faults::net_cut(Cluster::RSource, cut, None).expect("cut the broker off");
    let cut_at = Instant::now();
    // The fetcher's requests to that broker now hang; new records everywhere.
    produce_all(
        &source,
        &topic,
        &records("during", 600, PARTITIONS, 200),
        &[],
    )
    .expect("second");
    let healthy_done = Instant::now() + Duration::from_secs(25);
    loop {
        let behind: Vec<i32> = healthy
            .iter()
            .copied()
            .filter(|&p| end(&dest, &topic, p) != 200)
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            Instant::now() < healthy_done,
            "broker {cut} cut off (leaders {leaders:?}): partitions {behind:?} led by other \
             brokers were not copied within 25 s; fetcher log tail:\n{}",
            tail(&fetcher.log_text(), 30)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let healthy_after = cut_at.elapsed();
    let stalled: Vec<i64> = (0..PARTITIONS)
        .filter(|&p| leaders[p as usize] == cut)
        .map(|p| end(&dest, &topic, p))
        .collect();
    faults::net_heal(None).expect("heal");
    wait_until("the cut-off partitions caught up", WAIT, || {
        (0..PARTITIONS).all(|p| end(&dest, &topic, p) == 200) || fetcher.exited().is_some()
    });
    assert!(
        fetcher.exited().is_none(),
        "the fetcher waits for the broker instead of stopping; log tail:\n{}",
        tail(&fetcher.log_text(), 40)
    );
    let matched = assert_exact_copy(bed, &mirror, &topic, PARTITIONS);
    assert_eq!(matched, 1200, "every record once");
    eprintln!(
        "broker {cut} cut off: partitions {healthy:?} copied {healthy_after:?} after the cut; \
         the cut-off ones stood at {stalled:?} until the heal"
    );
}

/// `args` (`--…-bootstrap ADDR …`) with the bootstrap address replaced by the proxied one.
fn proxied(mut args: Vec<String>, bootstrap: &str) -> Vec<String> {
    let at = args
        .iter()
        .position(|a| a.ends_with("-bootstrap"))
        .expect("a bootstrap argument");
    args[at + 1] = bootstrap.to_string();
    args
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
