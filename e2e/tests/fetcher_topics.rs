//! One fetcher process copying several topics (`--topic`, the building block of fetcher pools):
//! every topic copied exactly, a stop of one topic (a foreign write) leaves the others copying,
//! SIGTERM stops them all cleanly.

use std::time::Duration;

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, destination_args, ensure_state_topic, recorded, source_args, verify, wait_until,
};
use kmirror_e2e::kafka::{
    DestUser, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_fetcher::Isolation;
use kmirror_state::records::{FetcherStatus, StopReason};
use rdkafka::ClientConfig;

const PARTITIONS: i32 = 2;
const WAIT: Duration = Duration::from_secs(120);

/// Three topic pairs with records on the source, and the fetcher arguments copying them all in
/// one process.
async fn three_topics(bed: &Testbed, prefix: &str) -> (Vec<String>, String, Vec<String>) {
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topics: Vec<String> = (0..3)
        .map(|i| unique_name(&format!("{prefix}{i}")))
        .collect();
    for (i, t) in topics.iter().enumerate() {
        create_topic(&source, t, PARTITIONS, &[]).await.unwrap();
        create_topic(&dest, t, PARTITIONS, &[]).await.unwrap();
        produce_all(
            &source,
            t,
            &mixed_records(200, PARTITIONS, 2, i as u64),
            &[],
        )
        .unwrap();
    }
    let mirror = format!("e2e/{}", topics[0]);
    let mut args: Vec<String> = vec!["--mirror".into(), mirror.clone()];
    for t in &topics {
        args.push("--topic".into());
        args.push(format!("{t}=0,1"));
    }
    args.extend(source_args(bed));
    args.extend(destination_args(bed));
    (topics, mirror, args)
}

fn caught_up(bed: &Testbed, source: &ClientConfig, topic: &str) -> bool {
    let dest = bed.dest_config(DestUser::Admin);
    (0..PARTITIONS)
        .all(|p| watermarks(source, topic, p).unwrap().1 == watermarks(&dest, topic, p).unwrap().1)
}

fn assert_exact_copy(bed: &Testbed, mirror: &str, topic: &str, expected: u64) {
    let mut total = 0;
    for p in 0..PARTITIONS {
        let report = verify(
            bed,
            &bed.source_config(),
            mirror,
            topic,
            topic,
            p,
            Isolation::ReadCommitted,
        );
        assert!(report.is_clean(), "{topic}[{p}]: {report:?}");
        assert!(report.offsets_identical, "{topic}[{p}]: {report:?}");
        assert_eq!(report.trailing, 0, "{topic}[{p}]: duplicates: {report:?}");
        total += report.matched;
    }
    assert_eq!(total, expected, "{topic}: every record exactly once");
}

#[tokio::test]
async fn one_process_copies_several_topics_exactly_and_stops_them_all_on_sigterm() {
    let bed = Testbed::get();
    let source = bed.source_config();
    let (topics, mirror, args) = three_topics(bed, "multi").await;
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("every topic copied", WAIT, || {
        topics.iter().all(|t| caught_up(bed, &source, t))
    });
    // More records while all three copy.
    for (i, t) in topics.iter().enumerate() {
        produce_all(
            &source,
            t,
            &mixed_records(100, PARTITIONS, 0, 10 + i as u64),
            &[],
        )
        .unwrap();
    }
    wait_until("the new records copied", WAIT, || {
        topics.iter().all(|t| caught_up(bed, &source, t))
    });
    fetcher.signal("TERM");
    let code = fetcher.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", fetcher.log_text());
    let dest = bed.dest_config(DestUser::Admin);
    for t in &topics {
        for p in 0..PARTITIONS {
            let position = recorded(bed, &mirror, t, p).position.expect("a position");
            assert_eq!(position.status, FetcherStatus::Stopped, "{t}[{p}]");
            assert_eq!(
                position.destination_offset,
                watermarks(&dest, t, p).unwrap().1,
                "{t}[{p}]: the final position is the log end"
            );
        }
        assert_exact_copy(bed, &mirror, t, 300);
    }
}

#[tokio::test]
async fn a_stop_of_one_topic_leaves_the_others_copying() {
    let bed = Testbed::get();
    let source = bed.source_config();
    let (topics, mirror, args) = three_topics(bed, "alone").await;
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("every topic copied", WAIT, || {
        topics.iter().all(|t| caught_up(bed, &source, t))
    });
    // Another client writes into the second topic's destination partition 0; the next copy
    // there lands at a wrong offset and stops that topic.
    let hit = &topics[1];
    produce_all(
        &bed.dest_config(DestUser::Admin),
        hit,
        &mixed_records(1, 1, 0, 99),
        &[],
    )
    .unwrap();
    produce_all(&source, hit, &mixed_records(10, 1, 0, 98), &[]).unwrap();
    wait_until("the hit topic stopped for the foreign write", WAIT, || {
        recorded(bed, &mirror, hit, 0)
            .position
            .is_some_and(|p| p.status == FetcherStatus::Failed)
    });
    let error = recorded(bed, &mirror, hit, 0)
        .position
        .and_then(|p| p.error)
        .expect("the reason is recorded");
    assert_eq!(error.reason, StopReason::ForeignWrite, "{}", error.message);
    assert_eq!(
        fetcher.exited(),
        None,
        "the process copies its other topics on"
    );
    // The other two copy what comes after.
    for t in [&topics[0], &topics[2]] {
        produce_all(&source, t, &mixed_records(50, PARTITIONS, 0, 7), &[]).unwrap();
    }
    wait_until("the other topics copied on", WAIT, || {
        [&topics[0], &topics[2]]
            .iter()
            .all(|t| caught_up(bed, &source, t))
    });
    fetcher.signal("TERM");
    let code = fetcher.wait(Duration::from_secs(30));
    let log = fetcher.log_text();
    assert_eq!(
        code,
        Some(StopReason::ForeignWrite.exit_code()),
        "the process ends with the most serious of its topics' stops: {log}"
    );
    let line = fetcher.termination_message().unwrap_or_default();
    assert!(line.starts_with("ForeignWrite on partition 0: "), "{line}");
    assert!(
        line.contains(hit.as_str()),
        "the message names the topic: {line}"
    );
    for t in [&topics[0], &topics[2]] {
        assert_exact_copy(bed, &mirror, t, 250);
    }
}
