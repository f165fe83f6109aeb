//! The fetcher survives SIGKILL at random moments and SIGTERM under load: the destination log
//! stays the exact copy of the source, with no record lost and none duplicated.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, destination_args, ensure_state_topic, recorded, source_args, verify, wait_until,
};
use kmirror_e2e::kafka::{
    DestUser, Rng, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_fetcher::Isolation;
use rdkafka::ClientConfig;

fn args(bed: &Testbed, mirror: &str, topic: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--mirror",
        mirror,
        "--source-topic",
        topic,
        "--partitions",
        "0,1,2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(source_args(bed));
    a.extend(destination_args(bed));
    a
}

/// Keeps producing batches to the source until stopped.
fn background_producer(
    source: ClientConfig,
    topic: String,
    stop: Arc<AtomicBool>,
    batch: usize,
) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut seed = 1;
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let records = mixed_records(batch, 3, 0, seed);
            produce_all(&source, &topic, &records, &[("compression.type", "lz4")])
                .expect("background produce");
            sent += batch as u64;
            seed += 1;
        }
        sent
    })
}

async fn setup(bed: &Testbed, prefix: &str) -> (ClientConfig, String, String) {
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name(prefix);
    create_topic(&source, &topic, 3, &[]).await.unwrap();
    create_topic(&bed.dest_config(DestUser::Admin), &topic, 3, &[])
        .await
        .unwrap();
    let mirror = format!("e2e/{topic}");
    (source, topic, mirror)
}

fn assert_exact_copy(
    bed: &Testbed,
    source: &ClientConfig,
    mirror: &str,
    topic: &str,
    expected_total: u64,
) {
    let mut total = 0;
    for p in 0..3 {
        let report = verify(
            bed,
            source,
            mirror,
            topic,
            topic,
            p,
            Isolation::ReadCommitted,
        );
        assert!(report.is_clean(), "partition {p}: {report:?}");
        assert_eq!(
            report.trailing, 0,
            "partition {p}: duplicates at the end: {report:?}"
        );
        assert!(report.offsets_identical, "partition {p}: {report:?}");
        total += report.matched;
    }
    assert_eq!(
        total, expected_total,
        "every produced record is on the destination exactly once"
    );
}

fn wait_caught_up(bed: &Testbed, source: &ClientConfig, topic: &str) {
    wait_until(
        "the destination to catch up",
        Duration::from_secs(180),
        || {
            (0..3).all(|p| {
                watermarks(source, topic, p).unwrap().1
                    == watermarks(&bed.dest_config(DestUser::Admin), topic, p)
                        .unwrap()
                        .1
            })
        },
    );
}

#[tokio::test]
async fn sigkill_at_random_moments_loses_and_duplicates_nothing() {
    let bed = Testbed::get();
    let (source, topic, mirror) = setup(bed, "sigkill").await;
    let stop = Arc::new(AtomicBool::new(false));
    let producer = background_producer(source.clone(), topic.clone(), stop.clone(), 2000);
    let mut rng = Rng::new(0x5EED);
    let dest = bed.dest_config(DestUser::Admin);
    let mut kills = 0;
    while kills < 12 {
        let mut fetcher = FetcherProcess::spawn(&args(bed, &mirror, &topic));
        // Let it copy something, then kill it at a random moment.
        let before: i64 = (0..3)
            .map(|p| watermarks(&dest, &topic, p).unwrap().1)
            .sum();
        let deadline = Instant::now() + Duration::from_secs(60);
        while (0..3)
            .map(|p| watermarks(&dest, &topic, p).unwrap().1)
            .sum::<i64>()
            == before
        {
            assert!(
                Instant::now() < deadline,
                "the fetcher made no progress: {}",
                fetcher.log_text()
            );
            assert!(
                fetcher.exited().is_none(),
                "the fetcher exited: {}",
                fetcher.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
        fetcher.signal("KILL");
        assert_eq!(
            fetcher.wait(Duration::from_secs(10)),
            None,
            "killed by SIGKILL"
        );
        kills += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let produced = producer.join().unwrap();
    let mut fetcher = FetcherProcess::spawn(&args(bed, &mirror, &topic));
    wait_caught_up(bed, &source, &topic);
    fetcher.signal("TERM");
    assert_eq!(
        fetcher.wait(Duration::from_secs(30)),
        Some(0),
        "{}",
        fetcher.log_text()
    );
    eprintln!("{kills} SIGKILLs, {produced} records produced meanwhile");
    assert_exact_copy(bed, &source, &mirror, &topic, produced);
}

#[tokio::test]
async fn sigterm_under_load_exits_cleanly_and_resumes_exactly() {
    let bed = Testbed::get();
    let (source, topic, mirror) = setup(bed, "sigterm").await;
    // A backlog so that the fetcher is busy when the signal arrives.
    let backlog = mixed_records(150_000, 3, 0, 77);
    produce_all(&source, &topic, &backlog, &[("compression.type", "lz4")]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = background_producer(source.clone(), topic.clone(), stop.clone(), 2000);
    let mut fetcher = FetcherProcess::spawn(&args(bed, &mirror, &topic));
    let dest = bed.dest_config(DestUser::Admin);
    wait_until("mirroring under way", Duration::from_secs(60), || {
        (0..3)
            .map(|p| watermarks(&dest, &topic, p).unwrap().1)
            .sum::<i64>()
            > 20_000
    });
    let grace = Duration::from_secs(20);
    let t0 = Instant::now();
    fetcher.signal("TERM");
    let code = fetcher.wait(grace + Duration::from_secs(5));
    let took = t0.elapsed();
    eprintln!("SIGTERM under load: exit {code:?} after {took:?}");
    assert_eq!(code, Some(0), "{}", fetcher.log_text());
    assert!(took < grace, "exit within the grace period ({took:?})");
    // The final position matches the destination log end exactly.
    for p in 0..3 {
        let position = recorded(bed, &mirror, &topic, p).position.unwrap();
        let (_, end) = watermarks(&dest, &topic, p).unwrap();
        assert_eq!(
            position.destination_offset, end,
            "partition {p}: persisted position equals the log end"
        );
        assert_eq!(position.last_mirrored_offset, end - 1);
    }
    let mut fetcher = FetcherProcess::spawn(&args(bed, &mirror, &topic));
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let produced = producer.join().unwrap() + backlog.len() as u64;
    wait_caught_up(bed, &source, &topic);
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    assert_exact_copy(bed, &source, &mirror, &topic, produced);
}

/// A fetcher pod deleted while it still waits for its first write lease (the operator replaced
/// it, or its MirrorTopic went away) stops cleanly at once: exit 0, no claim that the operator
/// granted nothing for two minutes, and nothing written.
#[tokio::test]
async fn sigterm_before_the_first_write_lease_is_a_clean_stop() {
    let bed = Testbed::get();
    let (source, topic, mirror) = setup(bed, "lease-wait").await;
    produce_all(&source, &topic, &mixed_records(30, 3, 0, 5), &[]).unwrap();
    let mut a = args(bed, &mirror, &topic);
    // A holder no operator allows: no grant ever comes.
    a.extend(
        [
            "--writer",
            "nobody-fetcher-0",
            "--lease-holder-uid",
            "uid-nobody",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut fetcher = FetcherProcess::spawn(&a);
    std::thread::sleep(Duration::from_secs(3));
    fetcher.signal("TERM");
    let code = fetcher.wait(Duration::from_secs(20));
    let log = fetcher.log_text();
    assert_eq!(code, Some(0), "a clean stop: {log}");
    assert!(
        !log.contains("no write lease from the operator"),
        "a stop is no missing grant: {log}"
    );
    let dest = bed.dest_config(DestUser::Admin);
    for p in 0..3 {
        assert_eq!(
            watermarks(&dest, &topic, p).unwrap().1,
            0,
            "nothing written"
        );
    }
}

/// A SIGTERM that arrives while the fetcher still starts up (here: waiting for the destination
/// log end to settle, which a slow or loaded destination makes long) is a clean stop at once:
/// exit 0 well before start-up would have ended, nothing written, and a later start copies
/// everything exactly.
#[tokio::test]
async fn sigterm_during_start_up_is_a_clean_stop_at_once() {
    let bed = Testbed::get();
    let (source, topic, mirror) = setup(bed, "start-term").await;
    let records = mixed_records(60, 3, 0, 9);
    produce_all(&source, &topic, &records, &[]).unwrap();
    let mut a = args(bed, &mirror, &topic);
    // Start-up waits this long for the destination log end to stay put.
    a.extend(
        ["--startup-settle-seconds", "30"]
            .iter()
            .map(|s| s.to_string()),
    );
    let mut fetcher = FetcherProcess::spawn(&a);
    std::thread::sleep(Duration::from_secs(4));
    let t0 = Instant::now();
    fetcher.signal("TERM");
    let code = fetcher.wait(Duration::from_secs(40));
    let took = t0.elapsed();
    let log = fetcher.log_text();
    eprintln!("SIGTERM during start-up: exit {code:?} after {took:?}");
    assert_eq!(code, Some(0), "a clean stop: {log}");
    assert!(
        took < Duration::from_secs(10),
        "start-up went on for {took:?} after SIGTERM (it would settle for 30 s): {log}"
    );
    let dest = bed.dest_config(DestUser::Admin);
    for p in 0..3 {
        assert_eq!(
            watermarks(&dest, &topic, p).unwrap().1,
            0,
            "nothing written"
        );
    }
    let mut fetcher = FetcherProcess::spawn(&args(bed, &mirror, &topic));
    wait_caught_up(bed, &source, &topic);
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    assert_exact_copy(bed, &source, &mirror, &topic, records.len() as u64);
}
