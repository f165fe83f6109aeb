//! Mirroring resumes on its own when the source broker, and separately the destination broker,
//! restart mid-stream — with zero loss and zero duplicates. (Its own test binary: restarting a
//! broker must not disturb other tests.)

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, destination_args, ensure_state_topic, source_args, verify, wait_until,
};
use kmirror_e2e::kafka::{
    DestUser, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::testbed::repo_root;
use kmirror_fetcher::Isolation;

fn restart(broker: &str) {
    let status = Command::new(repo_root().join("e2e/testbed.sh"))
        .args(["restart", broker])
        .status()
        .expect("testbed.sh restart");
    assert!(status.success(), "restarting {broker} failed");
}

#[tokio::test]
async fn broker_restarts_mid_stream_lose_and_duplicate_nothing() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("restarts");
    create_topic(&source, &topic, 3, &[]).await.unwrap();
    create_topic(&dest, &topic, 3, &[]).await.unwrap();
    let mirror = format!("e2e/{topic}");

    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (source, topic, stop) = (source.clone(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut sent, mut seed) = (0u64, 1);
            while !stop.load(Ordering::Relaxed) {
                // Producer retries ride out the source restart (idempotent, long timeout).
                produce_all(
                    &source,
                    &topic,
                    &mixed_records(1000, 3, 0, seed),
                    &[("message.timeout.ms", "300000")],
                )
                .expect("produce");
                sent += 1000;
                seed += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            sent
        })
    };
    let mut args: Vec<String> = [
        "--mirror",
        &mirror,
        "--source-topic",
        &topic,
        "--partitions",
        "0,1,2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(source_args(bed));
    args.extend(destination_args(bed));
    let mut fetcher = FetcherProcess::spawn(&args);
    let progressed = |min: i64| {
        wait_until("mirroring progress", Duration::from_secs(120), || {
            (0..3)
                .map(|p| watermarks(&dest, &topic, p).map(|w| w.1).unwrap_or(0))
                .sum::<i64>()
                > min
        })
    };
    progressed(5000);
    restart("kafka-source");
    let after_source: i64 = (0..3)
        .map(|p| watermarks(&dest, &topic, p).unwrap().1)
        .sum();
    progressed(after_source + 5000);
    assert!(
        fetcher.exited().is_none(),
        "the fetcher rode out the source restart: {}",
        fetcher.log_text()
    );
    restart("kafka-destination");
    let dest = bed.dest_config(DestUser::Admin);
    let after_dest: i64 = (0..3)
        .map(|p| watermarks(&dest, &topic, p).map(|w| w.1).unwrap_or(0))
        .sum();
    progressed(after_dest + 5000);
    assert!(
        fetcher.exited().is_none(),
        "the fetcher rode out the destination restart: {}",
        fetcher.log_text()
    );

    stop.store(true, Ordering::Relaxed);
    let produced = producer.join().unwrap();
    wait_until("catch-up", Duration::from_secs(180), || {
        (0..3).all(|p| {
            watermarks(&source, &topic, p).unwrap().1 == watermarks(&dest, &topic, p).unwrap().1
        })
    });
    fetcher.signal("TERM");
    assert_eq!(
        fetcher.wait(Duration::from_secs(30)),
        Some(0),
        "{}",
        fetcher.log_text()
    );
    let mut total = 0;
    for p in 0..3 {
        let report = verify(
            bed,
            &source,
            &mirror,
            &topic,
            &topic,
            p,
            Isolation::ReadCommitted,
        );
        assert!(
            report.is_clean() && report.trailing == 0 && report.offsets_identical,
            "partition {p}: {report:?}"
        );
        total += report.matched;
    }
    assert_eq!(total, produced);
}
