//! What the fetcher refuses or reports, on the one-broker pair (no broker is disturbed): a
//! record the destination would refuse (too large, a timestamp beyond its bounds) stops the
//! partition with `RecordRefused` naming the offset and the limit, and no record lands at a
//! wrong offset; retention overtaking a stopped mirror is `DataLoss` with the exact range (and,
//! with the skip policy, a metric); a destination that lost confirmed records is
//! `DestinationTruncated`; a multi-partition fetcher that skips lost records keeps its other
//! partitions; header keys that are not UTF-8 are copied byte for byte; prefix alignment
//! finishes on a compacted destination; a refused first start leaves no position behind that
//! would poison the next; `read_uncommitted` needs an explicit flag; the verifier fails on
//! trailing duplicates.

use std::time::Duration;

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, binary, destination_args, ensure_state_topic, free_http_addr, metric,
    partition_labels, recorded, scrape, source_args, verify, wait_until,
};
use kmirror_e2e::kafka::{
    DestUser, Rng, TestRecord, create_topic, delete_records, delete_topic, produce_all,
    unique_name, watermarks,
};
use kmirror_fetcher::Isolation;
use kmirror_state::records::FetcherError;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;

fn fetcher_args(bed: &Testbed, mirror: &str, topic: &str, partitions: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--mirror",
        mirror,
        "--source-topic",
        topic,
        "--partitions",
        partitions,
        "--startup-settle-seconds",
        "0.2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(source_args(bed));
    a.extend(destination_args(bed));
    a
}

fn with(mut args: Vec<String>, extra: &[&str]) -> Vec<String> {
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `n` records of about `size` bytes on partition `partition`, values `prefix-i`.
fn records(prefix: &str, n: usize, size: usize) -> Vec<TestRecord> {
    (0..n)
        .map(|i| {
            let mut value = format!("{prefix}-{i}-").into_bytes();
            value.resize(size.max(value.len()), b'x');
            TestRecord {
                partition: 0,
                key: Some(format!("k{i}").into_bytes()),
                value: Some(value),
                headers: Vec::new(),
            }
        })
        .collect()
}

/// Random bytes (incompressible).
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

async fn alter_topic_config(config: &ClientConfig, topic: &str, key: &str, value: &str) {
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin");
    let change = AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value);
    for r in admin
        .alter_configs([&change], &AdminOptions::new())
        .await
        .expect("alter configs")
    {
        r.expect("altered");
    }
}

/// The error a fetcher recorded with its position, with its reason as written (camelCase).
fn recorded_error(bed: &Testbed, mirror: &str, topic: &str, partition: i32) -> (String, String) {
    let position = recorded(bed, mirror, topic, partition)
        .position
        .expect("a recorded position");
    let FetcherError { reason, message } = position.error.expect("a recorded error");
    let reason = serde_json::to_value(reason).unwrap();
    (reason.as_str().unwrap().to_string(), message)
}

fn now_ms() -> i64 {
    kmirror_state::records::now_ms()
}

fn dest_end(bed: &Testbed, topic: &str, partition: i32) -> i64 {
    watermarks(&bed.dest_config(DestUser::Admin), topic, partition)
        .expect("destination watermarks")
        .1
}

fn caught_up(bed: &Testbed, mirror: &str, topic: &str, partitions: i32) -> bool {
    let source = bed.source_config();
    (0..partitions).all(|p| {
        let (_, end) = watermarks(&source, topic, p).unwrap();
        recorded(bed, mirror, topic, p)
            .position
            .is_some_and(|pos| pos.next_source_offset >= end)
    })
}

/// The destination's copy of source offsets `0..n` is exactly the source's.
fn assert_prefix_copied(bed: &Testbed, mirror: &str, topic: &str, n: i64) {
    assert_eq!(
        dest_end(bed, topic, 0),
        n,
        "the destination holds {n} records"
    );
    let report = verify(
        bed,
        &bed.source_config(),
        mirror,
        topic,
        topic,
        0,
        Isolation::ReadCommitted,
    );
    assert_eq!(
        report.matched, n as u64,
        "every record below {n} sits at its own offset: {report:?}"
    );
    assert_eq!(report.different + report.extra, 0, "{report:?}");
}

#[tokio::test]
async fn a_record_over_the_destination_limit_is_refused_without_shifting_offsets() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    for codec in ["lz4", "none"] {
        let topic = unique_name(&format!("refused-size-{codec}"));
        create_topic(&source, &topic, 1, &[("max.message.bytes", "3000000")])
            .await
            .unwrap();
        create_topic(&dest, &topic, 1, &[("max.message.bytes", "200000")])
            .await
            .unwrap();
        let mut all = records("small", 20, 1000);
        all.push(TestRecord {
            partition: 0,
            key: Some(b"big".to_vec()),
            value: Some(random_bytes(500_000, 20)),
            headers: Vec::new(),
        });
        all.extend(records("after", 20, 1000));
        produce_all(&source, &topic, &all, &[]).unwrap();
        let mirror = format!("e2e/{topic}");
        let args = with(
            fetcher_args(bed, &mirror, &topic, "0"),
            &["--producer-property", &format!("compression.type={codec}")],
        );
        let mut fetcher = FetcherProcess::spawn(&args);
        let code = fetcher.wait(Duration::from_secs(90));
        let log = fetcher.log_text();
        assert_eq!(code, Some(18), "RecordRefused ({codec}); log:\n{log}");
        let (reason, message) = recorded_error(bed, &mirror, &topic, 0);
        assert_eq!(reason, "recordRefused", "{message}");
        for word in ["source offset 20", "max.message.bytes", "200000", &topic] {
            assert!(message.contains(word), "{message:?} lacks {word:?}");
        }
        assert!(!message.contains("another client"), "{message}");
        assert!(!message.contains('\n'), "{message}");
        // Nothing after the refused record landed (at a wrong offset or at all).
        assert_prefix_copied(bed, &mirror, &topic, 20);

        // Raising the limit lets the mirror finish with identical offsets.
        alter_topic_config(&dest, &topic, "max.message.bytes", "1000000").await;
        let mut fetcher = FetcherProcess::spawn(&args);
        wait_until("catch-up", Duration::from_secs(90), || {
            caught_up(bed, &mirror, &topic, 1)
        });
        fetcher.signal("TERM");
        assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
        let report = verify(
            bed,
            &source,
            &mirror,
            &topic,
            &topic,
            0,
            Isolation::ReadCommitted,
        );
        assert!(
            report.is_clean() && report.offsets_identical && report.matched == 41,
            "{report:?}"
        );
    }
}

#[tokio::test]
async fn a_timestamp_beyond_the_destination_bounds_is_refused() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("refused-future");
    // The source accepts any timestamp; the destination keeps Kafka's default bound (1 h ahead).
    create_topic(
        &source,
        &topic,
        1,
        &[("message.timestamp.after.max.ms", "9223372036854775807")],
    )
    .await
    .unwrap();
    create_topic(&dest, &topic, 1, &[]).await.unwrap();
    let now = now_ms();
    let week = 7 * 24 * 3600 * 1000;
    let mut values: Vec<(Vec<u8>, i64)> = (0..10)
        .map(|i| (format!("now-{i}").into_bytes(), now))
        .collect();
    values.push((b"next-week".to_vec(), now + week));
    values.extend((0..10).map(|i| (format!("later-{i}").into_bytes(), now)));
    kmirror_e2e::kafka::produce_with_timestamps(&source, &topic, &values);
    let mirror = format!("e2e/{topic}");
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0"));
    let code = fetcher.wait(Duration::from_secs(90));
    assert_eq!(
        code,
        Some(18),
        "RecordRefused; log:\n{}",
        fetcher.log_text()
    );
    let (reason, message) = recorded_error(bed, &mirror, &topic, 0);
    assert_eq!(reason, "recordRefused", "{message}");
    for word in [
        "source offset 10",
        "message.timestamp.after.max.ms",
        "3600000",
        &topic,
    ] {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
    assert_prefix_copied(bed, &mirror, &topic, 10);
}

#[tokio::test]
async fn retention_overtaking_a_stopped_mirror_is_data_loss_with_the_range() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("data-loss");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    create_topic(&dest, &topic, 1, &[]).await.unwrap();
    produce_all(&source, &topic, &records("first", 100, 100), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(bed, &mirror, &topic, "0");
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &mirror, &topic, 1)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));

    // While the mirror is stopped, retention removes records it never copied.
    produce_all(&source, &topic, &records("second", 100, 100), &[]).unwrap();
    delete_records(&source, &topic, 0, 150).await.unwrap();
    let mut fetcher = FetcherProcess::spawn(&args);
    let code = fetcher.wait(Duration::from_secs(60));
    assert_eq!(code, Some(14), "DataLoss; log:\n{}", fetcher.log_text());
    let (reason, message) = recorded_error(bed, &mirror, &topic, 0);
    assert_eq!(reason, "dataLoss", "{message}");
    for word in ["source offsets 100–149", "50 records", "retention.ms"] {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
    assert_eq!(
        dest_end(bed, &topic, 0),
        100,
        "nothing was copied after the hole"
    );

    // With the skip policy the fetcher records the hole, counts the loss, and goes on.
    let addr = free_http_addr();
    let mut fetcher = FetcherProcess::spawn(&with(
        args.clone(),
        &["--on-source-truncation", "skip", "--http-addr", &addr],
    ));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &mirror, &topic, 1)
    });
    let labels = partition_labels(&mirror, &topic, 0);
    let text = scrape(&addr);
    assert_eq!(
        metric(&text, "kmirror_fetcher_data_loss_records_total", &labels),
        Some(50.0),
        "{text}"
    );
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let position = recorded(bed, &mirror, &topic, 0).position.unwrap();
    let loss = serde_json::to_value(&position).unwrap()["dataLoss"].clone();
    assert_eq!(loss["fromOffset"], 100, "{loss}");
    assert_eq!(loss["toOffset"], 150, "{loss}");
    assert_eq!(loss["records"], 50, "{loss}");
    let note = loss["message"].as_str().unwrap_or_default();
    assert!(note.contains("source offsets 100–149"), "{note}");
    let report = verify(
        bed,
        &source,
        &mirror,
        &topic,
        &topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(
        report.is_clean() && report.matched == 50 && !report.offsets_identical,
        "the records after the hole are at translated offsets: {report:?}"
    );
}

#[tokio::test]
async fn a_multi_partition_fetcher_keeps_every_partition_when_one_skips_lost_records() {
    // The fetcher reads at most one batch (5 000 records) ahead of what it wrote, plus the
    // consumer's small queue; retention then deletes partition 1 two batches beyond what was
    // written, so the deleted range is one the fetcher has certainly not read yet, however the
    // machine schedules it.
    const SIBLINGS: usize = 2000;
    const LONG: usize = 14_000;
    const AHEAD: i64 = 11_000;
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("skip-siblings");
    create_topic(&source, &topic, 3, &[]).await.unwrap();
    create_topic(&dest, &topic, 3, &[]).await.unwrap();
    let mut all = Vec::new();
    for p in 0..3 {
        let n = if p == 1 { LONG } else { SIBLINGS };
        all.extend(records(&format!("p{p}"), n, 100).into_iter().map(|mut r| {
            r.partition = p;
            r
        }));
    }
    // Small source batches: the batch engine copies a batch whole, so its read-ahead is at
    // least one source batch.
    produce_all(&source, &topic, &all, &[("batch.size", "16384")]).unwrap();
    let mirror = format!("e2e/{topic}");
    let addr = free_http_addr();
    // Slow and with a small read-ahead, so that retention overtakes partition 1's position.
    let mut fetcher = FetcherProcess::spawn(&with(
        fetcher_args(bed, &mirror, &topic, "0,1,2"),
        &[
            "--on-source-truncation",
            "skip",
            "--throttle-bytes-per-second",
            "100000",
            "--consumer-property",
            "queued.max.messages.kbytes=64",
            "--consumer-property",
            "fetch.max.bytes=1048576",
            "--consumer-property",
            "max.partition.fetch.bytes=20000",
            "--http-addr",
            &addr,
        ],
    ));
    wait_until(
        "some progress on partition 1",
        Duration::from_secs(60),
        || dest_end(bed, &topic, 1) >= 50,
    );
    let before = dest_end(bed, &topic, 1);
    let deleted_to = before + AHEAD;
    assert!(
        deleted_to < LONG as i64,
        "the fetcher already wrote {before} records of partition 1"
    );
    delete_records(&source, &topic, 1, deleted_to)
        .await
        .unwrap();
    wait_until(
        "every partition to catch up",
        Duration::from_secs(120),
        || caught_up(bed, &mirror, &topic, 3),
    );
    let text = scrape(&addr);
    let lost = metric(
        &text,
        "kmirror_fetcher_data_loss_records_total",
        &partition_labels(&mirror, &topic, 1),
    )
    .unwrap_or_default();
    assert!(
        lost > 0.0 && lost <= AHEAD as f64,
        "{lost} records counted lost (deleted up to {deleted_to}, {before} written):\n{text}"
    );
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    for p in [0, 2] {
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
            report.is_clean() && report.offsets_identical && report.matched == SIBLINGS as u64,
            "partition {p}: {report:?}"
        );
    }
    let report = verify(
        bed,
        &source,
        &mirror,
        &topic,
        &topic,
        1,
        Isolation::ReadCommitted,
    );
    assert!(
        report.is_clean() && report.matched == LONG as u64 - deleted_to as u64,
        "partition 1 from the new log start {deleted_to}: {report:?}"
    );
}

#[tokio::test]
async fn header_keys_that_are_not_utf8_are_copied_byte_for_byte() {
    use kmirror_e2e::wire::{client, fetch_all};
    use kmirror_wire::batch::Codec;
    use kmirror_wire::records::{BatchProducer, Header, Record, decode_batch, encode_batch};
    use kmirror_wire::{Isolation as WireIsolation, ProduceOptions, RawEntry};
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("header-bytes");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    create_topic(&dest, &topic, 1, &[]).await.unwrap();
    let key: &'static [u8] = b"\xff\xfekey\xc3";
    let records: Vec<Record> = (0..5)
        .map(|i| Record {
            offset: i,
            timestamp: now_ms(),
            key: Some(format!("k{i}").into_bytes().into()),
            value: Some(format!("v{i}").into_bytes().into()),
            headers: vec![
                Header {
                    key: bytes::Bytes::from_static(key),
                    value: Some(bytes::Bytes::from_static(b"\x00\x01")),
                },
                Header {
                    key: bytes::Bytes::from_static(b"plain"),
                    value: None,
                },
            ],
        })
        .collect();
    let wire_source = client(&source).await;
    let batch = encode_batch(&records, Codec::None, 0, BatchProducer::NONE).unwrap();
    wire_source
        .send_produce(&topic, 0, batch, &ProduceOptions::default())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    let mirror = format!("e2e/{topic}");
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0"));
    wait_until("catch-up", Duration::from_secs(60), || {
        fetcher.exited().is_some() || dest_end(bed, &topic, 0) == 5
    });
    assert_eq!(
        fetcher.exited(),
        None,
        "the fetcher died:\n{}",
        fetcher.log_text()
    );
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let wire_dest = client(&dest).await;
    let (entries, _) = fetch_all(&wire_dest, &topic, 0, WireIsolation::ReadUncommitted).await;
    let mut copied = Vec::new();
    for e in entries {
        let RawEntry::Batch(b) = e else { continue };
        copied.extend(decode_batch(&b.bytes).unwrap().1);
    }
    assert_eq!(copied.len(), 5);
    for (c, r) in copied.iter().zip(&records) {
        assert_eq!(c.headers, r.headers, "offset {}", c.offset);
        assert_eq!(
            (&c.key, &c.value, c.timestamp),
            (&r.key, &r.value, r.timestamp)
        );
    }
}

#[tokio::test]
async fn prefix_alignment_finishes_on_a_compacted_destination() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    for policy in ["compact", "compact,delete"] {
        let topic = unique_name("prefix-compacted");
        create_topic(&source, &topic, 1, &[]).await.unwrap();
        create_topic(&dest, &topic, 1, &[("cleanup.policy", policy)])
            .await
            .unwrap();
        produce_all(&source, &topic, &records("r", 400, 10), &[]).unwrap();
        delete_records(&source, &topic, 0, 300).await.unwrap();
        let mirror = format!("e2e/{topic}");
        let mut fetcher = FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0"));
        wait_until(
            &format!("catch-up on a {policy} destination"),
            Duration::from_secs(60),
            || fetcher.exited().is_some() || caught_up(bed, &mirror, &topic, 1),
        );
        assert_eq!(fetcher.exited(), None, "{policy}:\n{}", fetcher.log_text());
        fetcher.signal("TERM");
        assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
        let position = recorded(bed, &mirror, &topic, 0).position.unwrap();
        assert!(
            position
                .prefix_alignment
                .is_some_and(|p| p.done && p.target == 300),
            "{position:?}"
        );
        let (low, high) = watermarks(&dest, &topic, 0).unwrap();
        assert_eq!(high, 400);
        if policy == "compact" {
            // DeleteRecords is refused on a compact-only topic: the placeholders stay as
            // tombstones of one key until compaction removes them, and the fetcher says so.
            assert_eq!(low, 0);
            assert!(
                fetcher.log_text().contains("POLICY_VIOLATION")
                    || fetcher.log_text().contains("PolicyViolation"),
                "{}",
                fetcher.log_text()
            );
        } else {
            assert_eq!(low, 300, "the placeholders were deleted");
        }
        let report = verify(
            bed,
            &source,
            &mirror,
            &topic,
            &topic,
            0,
            Isolation::ReadCommitted,
        );
        assert!(
            report.is_clean() && report.offsets_identical && report.matched == 100,
            "{policy}: {report:?}"
        );
    }
}

#[tokio::test]
async fn a_refused_first_start_leaves_no_position_that_poisons_the_next() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("refused-first-start");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    create_topic(&dest, &topic, 1, &[]).await.unwrap();
    produce_all(&source, &topic, &records("src", 50, 10), &[]).unwrap();
    // Someone else's records on the destination: the first start is refused.
    produce_all(&dest, &topic, &records("foreign", 3, 10), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(bed, &mirror, &topic, "0");
    let mut fetcher = FetcherProcess::spawn(&args);
    assert_eq!(
        fetcher.wait(Duration::from_secs(60)),
        Some(15),
        "DestinationNotEmpty; log:\n{}",
        fetcher.log_text()
    );
    let position = recorded(bed, &mirror, &topic, 0).position;
    assert!(
        position
            .as_ref()
            .is_none_or(|p| !p.source_cluster_id.is_empty()),
        "a position without a source cluster ID: {position:?}"
    );
    // The person fixes it (an empty destination topic) and the next start mirrors.
    delete_topic(&dest, &topic).await.unwrap();
    wait_until("the topic recreated", Duration::from_secs(60), || {
        futures::executor::block_on(create_topic(&dest, &topic, 1, &[])).is_ok()
    });
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("catch-up", Duration::from_secs(60), || {
        fetcher.exited().is_some() || caught_up(bed, &mirror, &topic, 1)
    });
    assert_eq!(fetcher.exited(), None, "{}", fetcher.log_text());
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
}

#[tokio::test]
async fn a_destination_that_lost_confirmed_records_is_destination_truncated() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("dest-truncated");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    create_topic(&dest, &topic, 1, &[]).await.unwrap();
    produce_all(&source, &topic, &records("r", 100, 10), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(bed, &mirror, &topic, "0");
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &mirror, &topic, 1)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    // The destination topic is recreated empty: the 100 confirmed records are gone.
    delete_topic(&dest, &topic).await.unwrap();
    wait_until("the topic recreated", Duration::from_secs(60), || {
        futures::executor::block_on(create_topic(&dest, &topic, 1, &[])).is_ok()
    });
    let mut fetcher = FetcherProcess::spawn(&args);
    let code = fetcher.wait(Duration::from_secs(60));
    assert_eq!(
        code,
        Some(16),
        "DestinationTruncated; log:\n{}",
        fetcher.log_text()
    );
    let (reason, message) = recorded_error(bed, &mirror, &topic, 0);
    assert_eq!(reason, "destinationTruncated", "{message}");
    for word in ["ends at offset 0", "100", "copied again"] {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
    // Resuming is safe: the next start copies the lost records again at the same offsets.
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("catch-up", Duration::from_secs(60), || {
        fetcher.exited().is_some() || dest_end(bed, &topic, 0) == 100
    });
    assert_eq!(fetcher.exited(), None, "{}", fetcher.log_text());
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let report = verify(
        bed,
        &source,
        &mirror,
        &topic,
        &topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(
        report.is_clean() && report.offsets_identical && report.matched == 100,
        "{report:?}"
    );
}

#[tokio::test]
async fn read_uncommitted_needs_an_explicit_flag() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("uncommitted");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    create_topic(&dest, &topic, 1, &[]).await.unwrap();
    produce_all(&source, &topic, &records("r", 10, 10), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let args = with(
        fetcher_args(bed, &mirror, &topic, "0"),
        &["--isolation-level", "read_uncommitted"],
    );
    let mut fetcher = FetcherProcess::spawn(&args);
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(2));
    let log = fetcher.log_text();
    assert!(log.contains("--allow-uncommitted"), "{log}");
    assert!(log.contains("aborted"), "{log}");
    assert_eq!(dest_end(bed, &topic, 0), 0, "nothing copied");
    let mut fetcher = FetcherProcess::spawn(&with(args, &["--allow-uncommitted"]));
    wait_until("catch-up", Duration::from_secs(60), || {
        fetcher.exited().is_some() || dest_end(bed, &topic, 0) == 10
    });
    assert_eq!(fetcher.exited(), None, "{}", fetcher.log_text());
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
}

#[tokio::test]
async fn the_verifier_fails_on_trailing_duplicates() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("trailing");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    create_topic(&dest, &topic, 1, &[]).await.unwrap();
    let all = records("r", 30, 10);
    produce_all(&source, &topic, &all, &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0"));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &mirror, &topic, 1)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let run = || {
        let mut cmd = std::process::Command::new(binary("kmirror-verify"));
        cmd.args(["--mirror", &mirror, "--source-topic", &topic])
            .args(source_args(bed))
            .args(destination_args(bed))
            .env("RUST_LOG", "warn");
        cmd.output().expect("run kmirror-verify")
    };
    let clean = run();
    assert_eq!(clean.status.code(), Some(0), "{clean:?}");
    // The last five records once more, as a producer retrying without idempotence would.
    produce_all(&dest, &topic, &all[25..], &[]).unwrap();
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(r#""trailing":5"#), "{stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
}

/// A destination topic someone created with `message.timestamp.type=LogAppendTime` replaces
/// every copied timestamp: the verifier names that cause (and counts it) instead of a bare
/// "content differs", and fails.
#[tokio::test]
async fn the_verifier_names_a_destination_that_replaces_timestamps() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("ts-type");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    create_topic(
        &dest,
        &topic,
        1,
        &[("message.timestamp.type", "LogAppendTime")],
    )
    .await
    .unwrap();
    // Timestamps an hour old: the broker's append time cannot equal them.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let old: Vec<(Vec<u8>, i64)> = (0..10)
        .map(|i| (format!("v{i}").into_bytes(), now - 3_600_000 + i))
        .collect();
    kmirror_e2e::kafka::produce_with_timestamps(&source, &topic, &old);
    let mirror = format!("e2e/{topic}");
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0"));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &mirror, &topic, 1)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let out = std::process::Command::new(binary("kmirror-verify"))
        .args(["--mirror", &mirror, "--source-topic", &topic])
        .args(source_args(bed))
        .args(destination_args(bed))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kmirror-verify");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(r#""timestampTypeDiffers":10"#),
        "the verifier does not name the timestamp type: {stdout}"
    );
    assert!(stdout.contains("LogAppendTime"), "{stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
}
