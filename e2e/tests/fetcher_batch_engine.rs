//! The fetcher's batch engine (`--engine batch`) against the real brokers: source batches reach
//! the destination as they are — same codec, same record counts, same offsets — and the batches
//! that cannot pass as they are (a restart inside a batch, compaction, transactions, old
//! formats) are copied exactly through the record path. The fetcher suites run with the batch
//! engine by default, and their copy tests again with the record engine (docs/testing.md).

use std::time::Duration;

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, destination_args, ensure_state_topic, free_http_addr, metric, partition_labels,
    scrape, source_args, verify, wait_until,
};
use kmirror_e2e::kafka::{
    DestUser, TestRecord, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::wire::{client, fetch_all, v2};
use kmirror_fetcher::Isolation;
use kmirror_wire::Codec;
use rdkafka::ClientConfig;

/// A batch-engine fetcher serving its metrics at `addr`.
fn batch_fetcher(
    bed: &Testbed,
    mirror: &str,
    topic: &str,
    partitions: &str,
    addr: &str,
) -> FetcherProcess {
    let mut a = vec![
        "--mirror".to_string(),
        mirror.to_string(),
        "--source-topic".into(),
        topic.into(),
        "--partitions".into(),
        partitions.into(),
        "--startup-settle-seconds".into(),
        "0.2".into(),
        "--engine".into(),
        "batch".into(),
        "--http-addr".into(),
        addr.into(),
    ];
    a.extend(source_args(bed));
    a.extend(destination_args(bed));
    FetcherProcess::spawn(&a)
}

/// The batch engine's counters of partition 0: (batches passed, batches re-encoded).
fn batch_counters(addr: &str, mirror: &str, topic: &str) -> (f64, f64) {
    let text = scrape(addr);
    let labels = partition_labels(mirror, topic, 0);
    let get = |name| metric(&text, name, &labels).unwrap_or(0.0);
    (
        get("kmirror_fetcher_batches_passed_total"),
        get("kmirror_fetcher_batches_reencoded_total"),
    )
}

/// Runs a batch-engine fetcher on partition 0 until the destination caught up, stops it cleanly
/// and checks that all `records` are there at their source offsets. Returns its counters.
fn copy_all(
    bed: &Testbed,
    source: &ClientConfig,
    mirror: &str,
    topic: &str,
    records: u64,
) -> (f64, f64) {
    let addr = free_http_addr();
    let mut fetcher = batch_fetcher(bed, mirror, topic, "0", &addr);
    wait_until(
        "the destination to catch up",
        Duration::from_secs(300),
        || caught_up(bed, source, topic, 1),
    );
    let counters = batch_counters(&addr, mirror, topic);
    fetcher.signal("TERM");
    assert_eq!(
        fetcher.wait(Duration::from_secs(30)),
        Some(0),
        "{}",
        fetcher.log_text()
    );
    let report = verify(
        bed,
        source,
        mirror,
        topic,
        topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(report.is_clean(), "{report:?}");
    assert!(report.offsets_identical, "{report:?}");
    assert_eq!(report.matched, records, "{report:?}");
    counters
}

/// `topic` with one partition on both sides. The destination keeps what the producer sends
/// (`compression.type=producer`, the default).
async fn topic_pair(bed: &Testbed, source: &ClientConfig, topic: &str) {
    create_topic(source, topic, 1, &[])
        .await
        .expect("source topic");
    create_topic(
        &bed.dest_config(DestUser::Admin),
        topic,
        1,
        &[("max.message.bytes", "4000000")],
    )
    .await
    .expect("destination topic");
}

/// Where a v2 batch's (compressed) records start, after its 61-byte header.
const RECORDS_AT: usize = 61;

fn caught_up(bed: &Testbed, source: &ClientConfig, topic: &str, partitions: i32) -> bool {
    (0..partitions).all(|p| {
        let (_, src_end) = watermarks(source, topic, p).unwrap();
        let (_, dst_end) = watermarks(&bed.dest_config(DestUser::Admin), topic, p).unwrap();
        dst_end == src_end
    })
}

/// (base offset, record count, last offset delta, codec, hash of the records section) of every
/// batch of partition 0.
async fn batch_shapes(config: &ClientConfig, topic: &str) -> Vec<(i64, i32, i32, Codec, u64)> {
    let c = client(config).await;
    let (entries, _) = fetch_all(&c, topic, 0, kmirror_wire::Isolation::ReadUncommitted).await;
    v2(&entries)
        .iter()
        .map(|b| {
            let h = b.header;
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&b.bytes[RECORDS_AT..], &mut hasher);
            (
                h.base_offset,
                h.record_count,
                h.last_offset_delta,
                h.codec(),
                std::hash::Hasher::finish(&hasher),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_dense_lz4_source_arrives_with_its_codec_and_batches() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("batch-lz4");
    topic_pair(bed, &source, &topic).await;
    let records = mixed_records(60_000, 1, 6, 0xBA7C4);
    produce_all(
        &source,
        &topic,
        &records,
        &[("compression.type", "lz4"), ("linger.ms", "20")],
    )
    .expect("produce");
    let mirror = format!("e2e/{topic}");
    let (passed, reencoded) = copy_all(bed, &source, &mirror, &topic, 60_000);

    let source_batches = batch_shapes(&source, &topic).await;
    let destination_batches = batch_shapes(&bed.dest_config(DestUser::Admin), &topic).await;
    assert!(
        source_batches.len() > 10,
        "the source holds many batches: {}",
        source_batches.len()
    );
    assert!(
        source_batches.iter().all(|b| b.3 == Codec::Lz4),
        "the source is lz4"
    );
    assert_eq!(
        destination_batches, source_batches,
        "every destination batch has its source batch's base offset, record count, codec and \
         compressed bytes: passed as it is, not re-encoded"
    );
    assert_eq!(
        (passed, reencoded),
        (source_batches.len() as f64, 0.0),
        "every batch passed, none re-encoded"
    );
}

#[tokio::test]
async fn a_restart_inside_a_batch_copies_the_rest_of_it_through_the_record_path() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("batch-partial");
    topic_pair(bed, &source, &topic).await;
    // One batch of 100 records on the source, of which a record-engine run copied the first
    // ~30 before it was killed: the batch engine must copy the rest of the batch exactly.
    // 100 records of 2 KB: the throttled run below copies its 64 KiB burst (~30 records) at
    // once, then ten a second.
    let records: Vec<TestRecord> = (0..100)
        .map(|i| TestRecord {
            partition: 0,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(format!("{i:04}").repeat(500).into_bytes()),
            headers: vec![("h".into(), format!("{i}").into_bytes())],
        })
        .collect();
    produce_all(
        &source,
        &topic,
        &records,
        &[
            ("compression.type", "zstd"),
            ("linger.ms", "200"),
            ("batch.size", "1000000"),
        ],
    )
    .expect("produce");
    let shapes = batch_shapes(&source, &topic).await;
    assert_eq!(shapes.len(), 1, "one source batch: {shapes:?}");
    let mirror = format!("e2e/{topic}");
    let mut first = {
        let mut a = vec![
            "--mirror".to_string(),
            mirror.clone(),
            "--source-topic".into(),
            topic.clone(),
            "--partitions".into(),
            "0".into(),
            "--startup-settle-seconds".into(),
            "0.2".into(),
            "--throttle-bytes-per-second".into(),
            "20000".into(),
            // The record engine stops inside a batch; the batch engine would copy it whole.
            "--engine".into(),
            "record".into(),
        ];
        a.extend(source_args(bed));
        a.extend(destination_args(bed));
        FetcherProcess::spawn(&a)
    };
    wait_until("some records copied", Duration::from_secs(120), || {
        let (_, end) = watermarks(&bed.dest_config(DestUser::Admin), &topic, 0).unwrap();
        end >= 30
    });
    // Killed: a clean stop would first copy every record it had read.
    first.signal("KILL");
    first.wait(Duration::from_secs(30));
    let (_, copied) = watermarks(&bed.dest_config(DestUser::Admin), &topic, 0).unwrap();
    assert!(
        (1..100).contains(&copied),
        "stopped inside the batch: {copied}"
    );

    let counters = copy_all(bed, &source, &mirror, &topic, 100);
    assert_eq!(
        counters,
        (0.0, 1.0),
        "the rest of the batch took the record path"
    );
}

/// A fetcher of partitions `partitions` with extra arguments.
fn batch_fetcher_with(
    bed: &Testbed,
    mirror: &str,
    topic: &str,
    partitions: &str,
    extra: &[&str],
) -> FetcherProcess {
    let mut a = vec![
        "--mirror".to_string(),
        mirror.to_string(),
        "--source-topic".into(),
        topic.into(),
        "--partitions".into(),
        partitions.into(),
        "--startup-settle-seconds".into(),
        "0.2".into(),
        "--engine".into(),
        "batch".into(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a.extend(source_args(bed));
    a.extend(destination_args(bed));
    FetcherProcess::spawn(&a)
}

/// A broker returns a whole batch larger than a partition's fetch size only to the first
/// partition with data in its answer (KIP-74); the others get its truncated start. A 2 MiB
/// record on partition 1 (over the 1 MiB a partition gets per fetch, as in a pool pod's process
/// with many partitions) must be copied while partition 0 always has data to return — before
/// partition 0 has caught up, not after.
#[tokio::test]
async fn an_oversized_batch_on_the_second_partition_is_copied_while_the_first_has_data() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("batch-kip74");
    create_topic(&source, &topic, 2, &[("max.message.bytes", "4000000")])
        .await
        .expect("source topic");
    create_topic(&dest, &topic, 2, &[("max.message.bytes", "4000000")])
        .await
        .expect("destination topic");
    // Partition 0: a backlog the throttled fetcher needs ~20 s for; partition 1: one 2 MiB
    // record (more than the 1 MiB a partition gets per fetch).
    let mut rng = kmirror_e2e::kafka::Rng::new(0x7474);
    let backlog: Vec<TestRecord> = (0..2_000)
        .map(|i| TestRecord {
            partition: 0,
            key: Some(format!("k{i}").into_bytes()),
            value: Some((0..20_000).map(|_| rng.below(256) as u8).collect()),
            headers: vec![],
        })
        .collect();
    produce_all(&source, &topic, &backlog, &[]).expect("backlog");
    let big = TestRecord {
        partition: 1,
        key: Some(b"big".to_vec()),
        value: Some((0..2 * 1024 * 1024).map(|_| rng.below(256) as u8).collect()),
        headers: vec![],
    };
    produce_all(&source, &topic, &[big], &[("message.max.bytes", "4000000")])
        .expect("the large record");
    let mirror = format!("e2e/{topic}");
    let mut fetcher = batch_fetcher_with(
        bed,
        &mirror,
        &topic,
        "0,1",
        &[
            "--throttle-bytes-per-second",
            "2000000",
            "--consumer-property",
            "max.partition.fetch.bytes=1048576",
        ],
    );
    wait_until(
        "the large record on the destination",
        Duration::from_secs(60),
        || watermarks(&dest, &topic, 1).unwrap().1 == 1,
    );
    let (_, p0_copied) = watermarks(&dest, &topic, 0).unwrap();
    assert!(
        p0_copied < 2_000,
        "partition 1 was copied while partition 0 still had {} records to copy, not after",
        2_000 - p0_copied
    );
    wait_until("partition 0 caught up", Duration::from_secs(120), || {
        caught_up(bed, &source, &topic, 2)
    });
    fetcher.signal("TERM");
    assert_eq!(
        fetcher.wait(Duration::from_secs(30)),
        Some(0),
        "{}",
        fetcher.log_text()
    );
    for (p, records) in [(0, 2_000), (1, 1)] {
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
            report.is_clean() && report.matched == records,
            "partition {p}: {report:?}"
        );
    }
}

/// Timestamps inside a batch need not be in order: a record in the middle can be older than the
/// first and the newest. With a bound on the age on the destination, the record the destination
/// would refuse is named, and the records before it are copied.
#[tokio::test]
async fn a_record_in_the_middle_too_old_for_the_destination_is_named_and_those_before_it_copied() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("batch-old-middle");
    create_topic(&source, &topic, 1, &[])
        .await
        .expect("source topic");
    create_topic(
        &dest,
        &topic,
        1,
        &[("message.timestamp.before.max.ms", "3600000")],
    )
    .await
    .expect("destination topic");
    let now = kmirror_state::records::now_ms();
    // One batch: now, two hours ago, now.
    let mut lingering = source.clone();
    lingering.set("linger.ms", "500");
    kmirror_e2e::kafka::produce_with_timestamps(
        &lingering,
        &topic,
        &[
            (b"first".to_vec(), now),
            (b"two hours old".to_vec(), now - 2 * 3_600_000),
            (b"third".to_vec(), now + 1),
        ],
    );
    let shapes = batch_shapes(&source, &topic).await;
    assert_eq!(shapes.len(), 1, "one source batch: {shapes:?}");
    let mirror = format!("e2e/{topic}");
    let mut fetcher = batch_fetcher_with(bed, &mirror, &topic, "0", &[]);
    let code = fetcher.wait(Duration::from_secs(60));
    assert_ne!(code, Some(0), "{}", fetcher.log_text());
    let message = fetcher.termination_message().unwrap_or_default();
    assert!(
        message.contains("offset 1") && message.contains("message.timestamp.before.max.ms"),
        "the refusal names the record and the limit: {message}"
    );
    let copied = kmirror_e2e::kafka::read_all(&dest, &topic, 0, "read_committed").unwrap();
    assert_eq!(
        copied.iter().map(|r| r.value.clone()).collect::<Vec<_>>(),
        vec![Some(b"first".to_vec())],
        "the record before it was copied, nothing after it"
    );
}

/// A batch larger than the destination's `max.message.bytes` is re-encoded in smaller batches;
/// their size as encoded — record and header framing included — must fit, or the destination
/// refuses records that each fit.
#[tokio::test]
async fn re_encoded_batches_of_records_with_many_headers_fit_the_destination() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("batch-headers");
    create_topic(&source, &topic, 1, &[("max.message.bytes", "4000000")])
        .await
        .expect("source topic");
    create_topic(&dest, &topic, 1, &[("max.message.bytes", "65536")])
        .await
        .expect("destination topic");
    let records: Vec<TestRecord> = (0..200)
        .map(|i| TestRecord {
            partition: 0,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(vec![b'v'; 100]),
            headers: (0..300).map(|h| (format!("h{h}"), b"x".to_vec())).collect(),
        })
        .collect();
    produce_all(
        &source,
        &topic,
        &records,
        &[("linger.ms", "500"), ("message.max.bytes", "4000000")],
    )
    .expect("produce");
    assert!(
        batch_shapes(&source, &topic).await.len() < 10,
        "a few large source batches"
    );
    let mirror = format!("e2e/{topic}");
    let mut fetcher = batch_fetcher_with(bed, &mirror, &topic, "0", &[]);
    wait_until("every record copied", Duration::from_secs(60), || {
        if let Some(code) = fetcher.exited() {
            panic!("the fetcher stopped ({code:?}): {}", fetcher.log_text());
        }
        caught_up(bed, &source, &topic, 1)
    });
    fetcher.signal("TERM");
    assert_eq!(
        fetcher.wait(Duration::from_secs(30)),
        Some(0),
        "{}",
        fetcher.log_text()
    );
    let report = verify(
        bed,
        &source,
        &mirror,
        &topic,
        &topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(report.is_clean() && report.matched == 200, "{report:?}");
}
