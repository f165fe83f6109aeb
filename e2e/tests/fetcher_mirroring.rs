//! The fetcher against the real brokers: identical offsets for every codec, prefix alignment,
//! exact gap translation, foreign writes, recreated topics, old sources, throttling.

use std::time::{Duration, Instant};

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, destination_args, ensure_state_topic, partition_labels, recorded, recorded_map,
    source_args, verify, wait_until,
};
use kmirror_e2e::kafka::{
    DestUser, TestRecord, create_topic, delete_records, delete_topic, mixed_records, produce_all,
    read_all, unique_name, watermarks,
};
use kmirror_fetcher::Isolation;
use kmirror_state::records::{FetcherStatus, StopReason};
use rdkafka::ClientConfig;

fn fetcher_args(
    bed: &Testbed,
    mirror: &str,
    topic: &str,
    partitions: &str,
    source: Vec<String>,
) -> Vec<String> {
    let mut a = vec![
        "--mirror".to_string(),
        mirror.to_string(),
        "--source-topic".into(),
        topic.into(),
        "--partitions".into(),
        partitions.into(),
        "--startup-settle-seconds".into(),
        "0.2".into(),
    ];
    a.extend(source);
    a.extend(destination_args(bed));
    a
}

/// Creates `topic` on the source (with `configs`) and on the destination.
async fn topics(
    bed: &Testbed,
    source: &ClientConfig,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    create_topic(source, topic, partitions, configs)
        .await
        .expect("source topic");
    create_topic(
        &bed.dest_config(DestUser::Admin),
        topic,
        partitions,
        &[("max.message.bytes", "4000000")],
    )
    .await
    .expect("destination topic");
}

fn caught_up(
    bed: &Testbed,
    source: &ClientConfig,
    topic: &str,
    partitions: i32,
    map_aware: bool,
) -> bool {
    (0..partitions).all(|p| {
        let (_, src_end) = watermarks(source, topic, p).unwrap();
        let (_, dst_end) = watermarks(&bed.dest_config(DestUser::Admin), topic, p).unwrap();
        if map_aware {
            let pos = recorded(bed, &format!("e2e/{topic}"), topic, p).position;
            pos.is_some_and(|pos| pos.source_position.unwrap_or(pos.next_source_offset) >= src_end)
        } else {
            dst_end == src_end
        }
    })
}

async fn mirror_codec(codec: &str) {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name(&format!("codec-{codec}"));
    topics(bed, &source, &topic, 3, &[]).await;
    let records = mixed_records(200_000, 3, 12, 0xC0DEC + codec.len() as u64);
    produce_all(&source, &topic, &records, &[("compression.type", codec)]).expect("produce");
    let mirror = format!("e2e/{topic}");
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(
        bed,
        &mirror,
        &topic,
        "0,1,2",
        source_args(bed),
    ));
    wait_until(
        "the destination to catch up",
        Duration::from_secs(300),
        || caught_up(bed, &source, &topic, 3, false),
    );
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
        assert!(report.is_clean(), "partition {p}: {report:?}");
        assert!(report.offsets_identical, "partition {p}: {report:?}");
        assert_eq!(report.trailing, 0);
        assert_eq!(report.matched, report.source_records);
        total += report.matched;
    }
    assert_eq!(total, 200_000);
}

#[tokio::test]
async fn codec_none_mirrors_at_identical_offsets() {
    mirror_codec("none").await;
}

#[tokio::test]
async fn codec_gzip_mirrors_at_identical_offsets() {
    mirror_codec("gzip").await;
}

#[tokio::test]
async fn codec_snappy_mirrors_at_identical_offsets() {
    mirror_codec("snappy").await;
}

#[tokio::test]
async fn codec_lz4_mirrors_at_identical_offsets() {
    mirror_codec("lz4").await;
}

#[tokio::test]
async fn codec_zstd_mirrors_at_identical_offsets() {
    mirror_codec("zstd").await;
}

#[tokio::test]
async fn source_log_starting_above_zero_is_prefix_aligned() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("prefix");
    topics(bed, &source, &topic, 1, &[]).await;
    produce_all(&source, &topic, &mixed_records(1000, 1, 0, 7), &[]).unwrap();
    delete_records(&source, &topic, 0, 400).await.unwrap();
    assert_eq!(watermarks(&source, &topic, 0).unwrap(), (400, 1000));

    let mirror = format!("e2e/{topic}");
    let mut fetcher =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &source, &topic, 1, false)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));

    let dest = bed.dest_config(DestUser::Admin);
    assert_eq!(
        watermarks(&dest, &topic, 0).unwrap(),
        (400, 1000),
        "destination log starts where the source's does"
    );
    let copied = read_all(&dest, &topic, 0, "read_uncommitted").unwrap();
    assert_eq!(copied.len(), 600);
    assert_eq!(
        copied[0].offset, 400,
        "a consumer from the beginning starts at 400"
    );
    assert!(
        copied.iter().all(|r| !r.is_placeholder()),
        "no placeholder is visible"
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
    assert!(
        report.is_clean() && report.offsets_identical && report.matched == 600,
        "{report:?}"
    );
    let position = recorded(bed, &mirror, &topic, 0).position.unwrap();
    assert!(position.offsets_identical);
    assert_eq!(
        position.prefix_alignment.map(|p| (p.target, p.done)),
        Some((400, true))
    );
}

#[tokio::test]
async fn compacted_topic_gaps_are_translated_exactly() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("compacted");
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "100"),
        ("min.cleanable.dirty.ratio", "0.001"),
        ("min.compaction.lag.ms", "0"),
        ("delete.retention.ms", "0"),
    ];
    topics(bed, &source, &topic, 1, &configs).await;
    // 300 keys rewritten at random: compaction leaves the latest value per key, scattered.
    let mut rng = kmirror_e2e::kafka::Rng::new(42);
    let records: Vec<TestRecord> = (0..2000)
        .map(|i| TestRecord {
            partition: 0,
            key: Some(format!("key-{}", rng.below(300)).into_bytes()),
            value: Some(format!("value-{i}").into_bytes()),
            headers: vec![],
        })
        .collect();
    for chunk in records.chunks(200) {
        produce_all(&source, &topic, chunk, &[]).unwrap();
        std::thread::sleep(Duration::from_millis(150)); // roll segments
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        produce_all(&source, &topic, &records[..1], &[]).unwrap(); // keeps rolling the active segment
        let all = read_all(&source, &topic, 0, "read_committed").unwrap();
        let (_, end) = watermarks(&source, &topic, 0).unwrap();
        if (all.len() as i64) < end / 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner did not compact {topic}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    // The cleaner may take another pass over what is already compacted: the comparison below
    // needs a source that no longer changes (three equal reads, two seconds apart).
    let mut compacted = read_all(&source, &topic, 0, "read_committed").unwrap();
    let mut equal = 0;
    while equal < 2 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(60),
            "the log cleaner of {topic} did not settle"
        );
        std::thread::sleep(Duration::from_secs(2));
        let again = read_all(&source, &topic, 0, "read_committed").unwrap();
        equal = if again.len() == compacted.len() {
            equal + 1
        } else {
            0
        };
        compacted = again;
    }
    let gaps = compacted
        .windows(2)
        .filter(|w| w[1].offset != w[0].offset + 1)
        .count();
    assert!(
        gaps > 5,
        "the compacted source must have gaps, found {gaps}"
    );

    let mirror = format!("e2e/{topic}");
    let mut fetcher =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &source, &topic, 1, true)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));

    let map = recorded_map(bed, &mirror, &topic, 0);
    let source_records = read_all(&source, &topic, 0, "read_committed").unwrap();
    let copies = read_all(
        &bed.dest_config(DestUser::Admin),
        &topic,
        0,
        "read_uncommitted",
    )
    .unwrap();
    assert_eq!(
        copies.len(),
        source_records.len(),
        "every surviving source record is on the destination"
    );
    for (s, d) in source_records.iter().zip(&copies) {
        assert_eq!(
            map.src_to_dst(s.offset),
            d.offset,
            "map translates source offset {} exactly",
            s.offset
        );
        assert_eq!(map.dst_to_src(d.offset), s.offset);
        assert!(
            s.same_content(d),
            "record at source offset {} differs",
            s.offset
        );
    }
    assert!(!map.is_identity());
    let report = verify(
        bed,
        &source,
        &mirror,
        &topic,
        &topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test]
async fn transactional_source_commits_are_mirrored_and_aborts_are_not() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("txn");
    topics(bed, &source, &topic, 1, &[]).await;
    let producer: BaseProducer = source
        .clone()
        .set("transactional.id", unique_name("e2e-txn"))
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    let mut committed = Vec::new();
    for txn in 0..12 {
        producer.begin_transaction().unwrap();
        let commit = txn % 3 != 1;
        for i in 0..(5 + txn) {
            let value = format!("{}-{txn}-{i}", if commit { "committed" } else { "aborted" });
            producer
                .send(BaseRecord::<str, str>::to(&topic).key("k").payload(&value))
                .unwrap();
            if commit {
                committed.push(value);
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        if commit {
            producer
                .commit_transaction(Duration::from_secs(30))
                .unwrap();
        } else {
            producer.abort_transaction(Duration::from_secs(30)).unwrap();
        }
    }
    let mirror = format!("e2e/{topic}");
    let mut fetcher =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &source, &topic, 1, true)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));

    let copies = read_all(
        &bed.dest_config(DestUser::Admin),
        &topic,
        0,
        "read_uncommitted",
    )
    .unwrap();
    let values: Vec<String> = copies
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(
        values, committed,
        "exactly the committed records, in order; no aborted record"
    );
    let map = recorded_map(bed, &mirror, &topic, 0);
    let source_records = read_all(&source, &topic, 0, "read_committed").unwrap();
    for (s, d) in source_records.iter().zip(&copies) {
        assert_eq!(map.src_to_dst(s.offset), d.offset);
        assert_eq!(map.dst_to_src(d.offset), s.offset);
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
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test]
async fn foreign_write_on_the_destination_stops_the_fetcher() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("foreign");
    topics(bed, &source, &topic, 1, &[]).await;
    produce_all(&source, &topic, &mixed_records(100, 1, 0, 1), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let mut fetcher =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &source, &topic, 1, false)
    });
    // Someone else writes to the destination partition, then the source moves on.
    produce_all(
        &bed.dest_config(DestUser::Admin),
        &topic,
        &mixed_records(1, 1, 0, 2),
        &[],
    )
    .unwrap();
    produce_all(&source, &topic, &mixed_records(10, 1, 0, 3), &[]).unwrap();
    let code = fetcher.wait(Duration::from_secs(60));
    assert_eq!(
        code,
        Some(StopReason::ForeignWrite.exit_code()),
        "{}",
        fetcher.log_text()
    );
    assert!(
        fetcher
            .log_text()
            .contains("another client wrote to the destination partition")
    );
    let line = fetcher.termination_message().unwrap_or_default();
    assert!(
        line.starts_with("ForeignWrite on partition 0: "),
        "the termination message names the partition: {line}"
    );
    let position = recorded(bed, &mirror, &topic, 0).position.unwrap();
    assert_eq!(position.status, FetcherStatus::Failed);
    let error = position.error.expect("the position records the reason");
    assert_eq!(error.reason, StopReason::ForeignWrite);
    assert!(error.message.contains("landed at"), "{}", error.message);

    // A new incarnation refuses too: the last destination record is not a copy.
    let mut again =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    assert_eq!(
        again.wait(Duration::from_secs(60)),
        Some(StopReason::ForeignWrite.exit_code()),
        "{}",
        again.log_text()
    );
}

#[tokio::test]
async fn recreated_source_topic_is_refused() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("recreated");
    topics(bed, &source, &topic, 1, &[]).await;
    produce_all(&source, &topic, &mixed_records(50, 1, 0, 4), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let mut fetcher =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &source, &topic, 1, false)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let before = recorded(bed, &mirror, &topic, 0)
        .position
        .unwrap()
        .source_topic_id;
    assert!(before.is_some(), "a 4.x source reports topic IDs");

    delete_topic(&source, &topic).await.unwrap();
    wait_until("topic deletion", Duration::from_secs(30), || {
        create_topic_blocking(&source, &topic).is_ok()
    });
    produce_all(&source, &topic, &mixed_records(50, 1, 0, 5), &[]).unwrap();
    let mut fetcher =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    let code = fetcher.wait(Duration::from_secs(60));
    assert_eq!(
        code,
        Some(StopReason::SourceTopicRecreated.exit_code()),
        "{}",
        fetcher.log_text()
    );
    assert!(
        fetcher.log_text().contains("was deleted and recreated"),
        "{}",
        fetcher.log_text()
    );
    let position = recorded(bed, &mirror, &topic, 0).position.unwrap();
    assert_eq!(
        position.error.map(|e| e.reason),
        Some(StopReason::SourceTopicRecreated)
    );
}

fn create_topic_blocking(config: &ClientConfig, topic: &str) -> anyhow::Result<()> {
    futures::executor::block_on(create_topic(config, topic, 1, &[]))
}

async fn mirror_from_old_source(bed: &Testbed, var: &str) -> Option<String> {
    let bootstrap = bed.opt_var(var)?.to_string();
    ensure_state_topic(bed);
    let mut source = ClientConfig::new();
    source.set("bootstrap.servers", &bootstrap);
    let topic = unique_name("compat");
    topics(bed, &source, &topic, 2, &[]).await;
    produce_all(&source, &topic, &mixed_records(5000, 2, 2, 9), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(
        bed,
        &mirror,
        &topic,
        "0,1",
        vec!["--source-bootstrap".into(), bootstrap],
    );
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("catch-up", Duration::from_secs(120), || {
        caught_up(bed, &source, &topic, 2, false)
    });
    fetcher.signal("TERM");
    assert_eq!(
        fetcher.wait(Duration::from_secs(30)),
        Some(0),
        "{}",
        fetcher.log_text()
    );
    for p in 0..2 {
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
            report.is_clean() && report.offsets_identical && report.matched == 2500,
            "{var} p{p}: {report:?}"
        );
    }
    recorded(bed, &mirror, &topic, 0)
        .position
        .unwrap()
        .source_topic_id
}

#[tokio::test]
async fn older_sources_mirror_at_identical_offsets() {
    let bed = Testbed::get();
    let v39 = mirror_from_old_source(bed, "KMIRROR_COMPAT39_BOOTSTRAP").await;
    assert!(
        bed.opt_var("KMIRROR_COMPAT39_BOOTSTRAP").is_some(),
        "make test starts the 3.9 source (up --compat)"
    );
    assert!(v39.is_some(), "Kafka 3.9 reports topic IDs");
    // Kafka 2.8 may or may not report topic IDs, 2.1 does not; the identity check then rests on
    // the cluster ID and the topic name. Either way mirroring must be exact.
    for var in ["KMIRROR_COMPAT28_BOOTSTRAP", "KMIRROR_COMPAT21_BOOTSTRAP"] {
        assert!(
            bed.opt_var(var).is_some(),
            "make test starts the ZooKeeper-based sources (up --compat): {var}"
        );
        let id = mirror_from_old_source(bed, var).await;
        eprintln!("{var}: source topic ID {id:?}");
    }
}

#[tokio::test]
async fn throttle_bounds_the_byte_rate() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("throttle");
    topics(bed, &source, &topic, 1, &[]).await;
    // 40 MB of 2 KB records.
    let records: Vec<TestRecord> = (0..20_000)
        .map(|i| TestRecord {
            partition: 0,
            key: None,
            value: Some(vec![b'a' + (i % 26) as u8; 2000]),
            headers: vec![],
        })
        .collect();
    produce_all(&source, &topic, &records, &[]).unwrap();
    let limit = 2_000_000u64;
    let mirror = format!("e2e/{topic}");
    let mut args = fetcher_args(bed, &mirror, &topic, "0", source_args(bed));
    args.extend(["--throttle-bytes-per-second".to_string(), limit.to_string()]);
    let mut fetcher = FetcherProcess::spawn(&args);
    let dest = bed.dest_config(DestUser::Admin);
    wait_until("mirroring to start", Duration::from_secs(60), || {
        watermarks(&dest, &topic, 0).unwrap().1 > 1000
    });
    std::thread::sleep(Duration::from_secs(1));
    let (_, start) = watermarks(&dest, &topic, 0).unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let (_, end) = watermarks(&dest, &topic, 0).unwrap();
    let seconds = t0.elapsed().as_secs_f64();
    let rate = (end - start) as f64 * 2000.0 / seconds;
    eprintln!(
        "throttled rate over {seconds:.1}s: {:.0} B/s (limit {limit})",
        rate
    );
    assert!(
        rate <= limit as f64 * 1.2,
        "rate {rate:.0} B/s exceeds the limit by more than 20 %"
    );
    assert!(
        rate >= limit as f64 * 0.5,
        "rate {rate:.0} B/s is far below the limit: the throttle is too strict"
    );
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
}

#[tokio::test]
async fn http_endpoints_report_health_readiness_and_metrics() {
    use kmirror_e2e::operator::{free_port, http_get};
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("http");
    topics(bed, &source, &topic, 1, &[]).await;
    produce_all(&source, &topic, &mixed_records(500, 1, 0, 8), &[]).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut args = fetcher_args(bed, &format!("e2e/{topic}"), &topic, "0", source_args(bed));
    args.extend(["--http-addr".to_string(), addr.clone()]);
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("/readyz", Duration::from_secs(60), || {
        http_get(&addr, "/readyz").is_some()
    });
    assert_eq!(http_get(&addr, "/healthz").as_deref(), Some("ok"));
    wait_until("catch-up", Duration::from_secs(60), || {
        caught_up(bed, &source, &topic, 1, false)
    });
    wait_until("metrics", Duration::from_secs(30), || {
        http_get(&addr, "/metrics").is_some_and(|m| {
            m.contains(&format!(
                "kmirror_fetcher_records_total{{{}}} 500",
                partition_labels(&format!("e2e/{topic}"), &topic, 0)
            ))
        })
    });
    let metrics = http_get(&addr, "/metrics").unwrap();
    for series in [
        "kmirror_fetcher_bytes_total",
        "kmirror_fetcher_lag_records",
        "kmirror_fetcher_lag_seconds",
        "kmirror_fetcher_offsets_identical",
        "kmirror_fetcher_partition_state",
    ] {
        assert!(metrics.contains(series), "{series} missing from /metrics");
    }
    assert!(metrics.contains("state=\"MIRRORING\"} 1"), "state series");
    let build = format!(
        r#"kmirror_build_info{{component="fetcher",version="{}","#,
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with(&build) && l.contains("git_sha=\"") && l.ends_with("} 1")),
        "no {build}…}} 1 in /metrics"
    );
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
}

/// The cluster ID a cluster reports.
fn cluster_id_of(config: &ClientConfig) -> String {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = config.create().expect("client");
    c.client()
        .fetch_cluster_id(Duration::from_secs(10))
        .expect("a cluster ID")
}

/// A pinned cluster ID (`spec.source.clusterId` / `spec.destination.clusterId`, passed by the
/// operator) that the cluster does not report stops the fetcher before it writes anything:
/// exit 20 (ClusterIdMismatch, not retried) with both IDs in the reason. The right pins mirror.
#[tokio::test]
async fn a_pinned_cluster_id_the_cluster_does_not_report_stops_the_fetcher_before_any_write() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("pinned");
    topics(bed, &source, &topic, 1, &[]).await;
    produce_all(&source, &topic, &mixed_records(50, 1, 0, 41), &[]).unwrap();
    let (source_id, dest_id) = (cluster_id_of(&source), cluster_id_of(&dest));
    let wrong = "AAAAAAAAAAAAAAAAAAAAAA";
    let mirror = format!("e2e/{topic}");
    for (flag, right) in [
        ("--source-cluster-id", &source_id),
        ("--destination-cluster-id", &dest_id),
    ] {
        let mut args = fetcher_args(bed, &mirror, &topic, "0", source_args(bed));
        args.extend([flag.to_string(), wrong.to_string()]);
        let mut fetcher = FetcherProcess::spawn(&args);
        let code = fetcher.wait(Duration::from_secs(60));
        let log = fetcher.log_text();
        assert_eq!(
            code,
            Some(StopReason::ClusterIdMismatch.exit_code()),
            "{flag}: {log}"
        );
        assert!(
            log.contains(wrong) && log.contains(right.as_str()) && log.contains("clusterId pins"),
            "{flag}: the reason names both IDs:\n{log}"
        );
        assert_eq!(
            watermarks(&dest, &topic, 0).unwrap().1,
            0,
            "{flag}: nothing written"
        );
    }
    let mut args = fetcher_args(bed, &mirror, &topic, "0", source_args(bed));
    args.extend([
        "--source-cluster-id".to_string(),
        source_id,
        "--destination-cluster-id".to_string(),
        dest_id,
    ]);
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until(
        "mirrored with the right pins",
        Duration::from_secs(60),
        || watermarks(&dest, &topic, 0).map(|w| w.1).unwrap_or(-1) == 50,
    );
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
}

/// An idle partition's position is rewritten every heartbeat (30 s), unchanged: its age tells
/// the operator whether the lag it shows is current (a fetcher that stopped reporting shows no
/// lag, never "caught up").
#[tokio::test]
async fn an_idle_partition_position_is_rewritten_every_heartbeat() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let topic = unique_name("heartbeat");
    topics(bed, &source, &topic, 1, &[]).await;
    produce_all(&source, &topic, &mixed_records(20, 1, 0, 3), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let mut fetcher =
        FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0", source_args(bed)));
    wait_until("caught up", Duration::from_secs(60), || {
        caught_up(bed, &source, &topic, 1, true)
    });
    // Settled: the writes that follow a catch-up are over.
    std::thread::sleep(Duration::from_secs(5));
    let first = recorded(bed, &mirror, &topic, 0).position.unwrap();
    // Nothing changes from here on; the heartbeat still rewrites the position.
    let deadline = Instant::now() + Duration::from_secs(45);
    let later = loop {
        let pos = recorded(bed, &mirror, &topic, 0).position.unwrap();
        if pos.updated_at_ms > first.updated_at_ms {
            break pos;
        }
        assert!(
            Instant::now() < deadline,
            "the position of an idle partition was not rewritten in 45 s: {}",
            fetcher.log_text()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    assert_eq!(
        (
            later.next_source_offset,
            later.destination_offset,
            later.status
        ),
        (
            first.next_source_offset,
            first.destination_offset,
            FetcherStatus::Running
        ),
        "the same position, written again"
    );
    fetcher.kill();
}
