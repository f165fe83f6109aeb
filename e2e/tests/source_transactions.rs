//! A source transaction left open for minutes (an exactly-once sink with a long checkpoint
//! interval) while other producers keep writing to the same partition: the mirror copies
//! everything a read_committed reader can read, waits for the rest without calling it a stall,
//! measures its lag against the last stable offset, says that a transaction is open and since
//! when — and copies the transaction's records exactly once it commits. Both engines.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, destination_args, ensure_state_topic, free_http_addr, metric, partition_labels,
    recorded, scrape, source_args, verify, wait_until,
};
use kmirror_e2e::kafka::{DestUser, create_topic, unique_name, watermarks};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, eventually};
use kmirror_fetcher::Isolation;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;

/// A transactional producer with a transaction open on partition 0 of `topic`: `records`
/// records written (on the log, uncommitted).
fn open_transaction(source: &ClientConfig, topic: &str, records: usize) -> BaseProducer {
    let producer: BaseProducer = source
        .clone()
        .set("transactional.id", unique_name("long-txn"))
        .set("transaction.timeout.ms", "600000")
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init transactions");
    producer.begin_transaction().expect("begin");
    for i in 0..records {
        producer
            .send(
                BaseRecord::<[u8], [u8]>::to(topic)
                    .partition(0)
                    .key(format!("txn-{i}").as_bytes())
                    .payload(format!("inside the long transaction {i}").as_bytes()),
            )
            .map_err(|(e, _)| e)
            .expect("send in the transaction");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    producer
}

/// A plain producer writing a record to partition 0 every 100 ms until `stop` is set.
fn plain_traffic(
    source: &ClientConfig,
    topic: &str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let producer: BaseProducer = source
        .clone()
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("plain producer");
    let topic = topic.to_string();
    std::thread::spawn(move || {
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let _ = producer.send(
                BaseRecord::<[u8], [u8]>::to(&topic)
                    .partition(0)
                    .key(b"plain")
                    .payload(format!("beside the transaction {sent}").as_bytes()),
            );
            sent += 1;
            producer.poll(Duration::from_millis(100));
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
        sent
    })
}

/// The last stable offset of partition 0 (read_committed latest).
fn last_stable(source: &ClientConfig, topic: &str) -> i64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = source
        .clone()
        .set("group.id", "kmirror-e2e-lso")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    c.fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks")
        .1
}

/// A fetcher run directly (stall timeout 20 s) meets a transaction open for 45 s under traffic:
/// it does not stop as stalled, its lag is 0 against the last stable offset, its position
/// record and metric say a transaction is open from that offset; after the commit it copies
/// every record exactly.
#[test]
fn a_fetcher_waits_for_an_open_transaction_without_calling_it_a_stall() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for engine in ["batch", "record"] {
        let topic = unique_name(&format!("txn-open-{engine}"));
        rt.block_on(async {
            create_topic(&source, &topic, 1, &[]).await.unwrap();
            create_topic(&dest, &topic, 1, &[]).await.unwrap();
        });
        let stop = Arc::new(AtomicBool::new(false));
        let traffic = plain_traffic(&source, &topic, stop.clone());
        std::thread::sleep(Duration::from_secs(1));
        let txn = open_transaction(&source, &topic, 20);
        let mirror = format!("e2e/{topic}");
        let addr = free_http_addr();
        let mut args = vec![
            "--mirror".to_string(),
            mirror.clone(),
            "--source-topic".into(),
            topic.clone(),
            "--partitions".into(),
            "0".into(),
            "--startup-settle-seconds".into(),
            "0.2".into(),
            "--engine".into(),
            engine.into(),
            "--stall-timeout-seconds".into(),
            "20".into(),
            "--http-addr".into(),
            addr.clone(),
        ];
        args.extend(source_args(bed));
        args.extend(destination_args(bed));
        let mut fetcher = FetcherProcess::spawn(&args);
        // Longer than the stall timeout, twice over.
        let open_until = Instant::now() + Duration::from_secs(45);
        while Instant::now() < open_until {
            assert_eq!(
                fetcher.exited(),
                None,
                "{engine}: the fetcher stopped while a transaction was open: {}",
                fetcher.log_text()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        // Still open: the position says so, from the last stable offset.
        let lso = last_stable(&source, &topic);
        let mut reported = None;
        wait_until(
            "the position to say a transaction is open",
            Duration::from_secs(60),
            || {
                reported = recorded(bed, &mirror, &topic, 0)
                    .position
                    .and_then(|p| p.open_transaction);
                reported.is_some()
            },
        );
        let open = reported.expect("reported");
        assert_eq!(
            open.from_offset, lso,
            "{engine}: held at the last stable offset"
        );
        let position = recorded(bed, &mirror, &topic, 0).position.unwrap();
        assert_eq!(position.source_last_stable_offset, Some(open.from_offset));
        assert!(
            position.source_high_watermark.unwrap() > open.from_offset,
            "{engine}: records past the open transaction: {position:?}"
        );
        let labels = partition_labels(&mirror, &topic, 0);
        let text = scrape(&addr);
        assert_eq!(
            metric(&text, "kmirror_fetcher_lag_records", &labels),
            Some(0.0),
            "{engine}: caught up with what can be read"
        );
        let open_seconds = metric(
            &text,
            "kmirror_fetcher_source_transaction_open_seconds",
            &labels,
        )
        .expect("the open-transaction metric");
        assert!(open_seconds >= 30.0, "{engine}: open for {open_seconds}s");
        txn.commit_transaction(Duration::from_secs(30))
            .expect("commit");
        stop.store(true, Ordering::Relaxed);
        traffic.join().unwrap();
        let (_, end) = watermarks(&source, &topic, 0).unwrap();
        wait_until(
            "everything copied after the commit",
            Duration::from_secs(60),
            || {
                recorded(bed, &mirror, &topic, 0)
                    .position
                    .is_some_and(|p| p.source_position.unwrap_or(p.next_source_offset) >= end)
            },
        );
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
        assert!(report.is_exact(), "{engine}: {report:?}");
        assert!(
            metric(
                &scrape(&addr),
                "kmirror_fetcher_source_transaction_open_seconds",
                &labels
            )
            .is_none_or(|v| v == 0.0),
            "{engine}: nothing open any more"
        );
    }
}

/// Through the operator, with its defaults (2-minute stall timeout): a transaction open for three
/// minutes while a plain producer writes to the same partition. The partition stays MIRRORING,
/// its fetcher pod is never replaced, no Warning Event, lag 0, and the status says a source
/// transaction is open from the last stable offset; after the commit, every record is there.
#[tokio::test]
async fn a_three_minute_source_transaction_keeps_the_partition_mirroring_and_says_so() {
    let bed = Testbed::get();
    let s = Scenario::new(bed, "txn-long").await;
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let source = bed.source_config();
    let topic = unique_name("txn-long");
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, 1)
    })
    .await;
    let pods_before: Vec<(String, Option<String>)> = s
        .pods()
        .await
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.uid.clone(),
            )
        })
        .collect();
    assert!(!pods_before.is_empty(), "a fetcher pod runs");
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = plain_traffic(&source, &topic, stop.clone());
    let txn = open_transaction(&source, &topic, 50);
    let opened = Instant::now();
    let partition = async || {
        s.topic("t")
            .await
            .and_then(|t| t.status)
            .and_then(|st| st.partitions.first().cloned())
            .expect("partition status")
    };
    // The state epoch counts transitions: a FAILED and a restart in between would move it.
    let epoch = partition().await.state_epoch;
    let mut said = false;
    while opened.elapsed() < Duration::from_secs(180) {
        let p = partition().await;
        assert_eq!(
            (p.state, p.state_epoch),
            (PartitionState::Mirroring, epoch),
            "MIRRORING all along, no transition, after {:?}: {p:?}",
            opened.elapsed()
        );
        if let Some(open) = &p.open_source_transaction {
            assert_eq!(Some(open.from_offset), p.source_last_stable_offset, "{p:?}");
            assert_eq!(p.lag, Some(0), "no lag while waiting: {p:?}");
            assert_eq!(p.last_error, None, "{p:?}");
            said = true;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let warnings: Vec<(String, String)> = s
        .events("t")
        .await
        .into_iter()
        .filter(|(reason, _)| reason != "Created" && reason != "Mirroring")
        .filter(|(_, note)| note.to_lowercase().contains("stall") || note.contains("FAILED"))
        .collect();
    assert!(warnings.is_empty(), "no stall, no failure: {warnings:?}");
    let pods_after: Vec<(String, Option<String>)> = s
        .pods()
        .await
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.uid.clone(),
            )
        })
        .collect();
    assert_eq!(
        pods_after, pods_before,
        "the fetcher pod was never replaced"
    );
    assert!(
        s.pods().await.iter().all(|p| p
            .status
            .as_ref()
            .and_then(|st| st.container_statuses.as_ref())
            .is_none_or(|cs| cs.iter().all(|c| c.restart_count == 0))),
        "and never restarted"
    );
    assert!(said, "the status said a source transaction is open");
    txn.commit_transaction(Duration::from_secs(30))
        .expect("commit");
    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();
    let (_, end) = watermarks(&source, &topic, 0).unwrap();
    eventually("everything copied", Duration::from_secs(60), async || {
        s.topic("t").await.is_some_and(|t| {
            t.status.as_ref().is_some_and(|st| {
                st.partitions.iter().all(|p| {
                    p.lag == Some(0)
                        && p.open_source_transaction.is_none()
                        && p.source_log_end_offset == Some(end)
                })
            })
        })
    })
    .await;
    let report = verify(
        bed,
        &source,
        &format!("{}/dr", s.ns),
        &topic,
        &topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(report.is_exact(), "{report:?}");
    s.cleanup().await;
}
