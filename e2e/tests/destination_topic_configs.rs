//! Destination topics the operator creates take every source record unchanged, on the one-broker
//! pair: a source that stamps LogAppendTime is copied as CreateTime records with the source's
//! times, timestamps far from the clock are accepted, records as large as the source broker's
//! default allows fit, and the config sync never takes these back; a bound the spec sets itself
//! is kept, and a record beyond it stops the partition with the offset and the limit.

use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{ClusterMirror, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{ensure_state_topic, verify};
use kmirror_e2e::kafka::{DestUser, Rng, create_topic, read_all, topic_configs, unique_name};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kmirror_fetcher::Isolation;
use kmirror_state::kafka_admin::{ConfigOp, alter_topic_configs};
use kmirror_state::kafka_record::TimestampKind;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use serde_json::{Value, json};

const UNBOUNDED: &str = "9223372036854775807";
const DAY: i64 = 24 * 3600 * 1000;

fn now_ms() -> i64 {
    kmirror_state::records::now_ms()
}

fn alter(config: &ClientConfig, topic: &str, ops: &[ConfigOp]) {
    let admin: AdminClient<DefaultClientContext> = config.create().unwrap();
    alter_topic_configs(admin.inner(), topic, ops, Duration::from_secs(15)).unwrap();
}

/// Starts an operator for a fresh namespace with mirror `dr` (`sync` merged into its spec).
async fn scenario(bed: &Testbed, prefix: &str, sync: Value) -> (Scenario, OperatorProcess) {
    ensure_state_topic(bed);
    let s = Scenario::new(bed, prefix).await;
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    for (k, v) in sync.as_object().unwrap() {
        spec["sync"][k] = v.clone();
    }
    // Several engineers' tests install the CRDs on the shared apiserver: an older schema may
    // have replaced this one's (without `overrides`) since the scenario installed it.
    let cm = json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
                    "metadata": {"name": "dr"}, "spec": spec});
    let api = kube::Api::<ClusterMirror>::namespaced(s.client.clone(), &s.ns);
    let params = kube::api::PatchParams::apply("kmirror-e2e").force();
    let mut attempt = 0;
    while let Err(e) = api
        .patch("dr", &params, &kube::api::Patch::Apply(&cm))
        .await
    {
        attempt += 1;
        assert!(attempt < 10, "apply ClusterMirror: {e}");
        kmirror_e2e::crds::install(&s.client).await.expect("CRDs");
    }
    (s, op)
}

/// Waits until every source record of partition 0 is copied and checks the copy: identical
/// offsets, same content and timestamps.
async fn assert_copied(bed: &Testbed, s: &Scenario, name: &str, topic: &str, records: usize) {
    let t = s
        .wait_topic(
            name,
            "mirroring with zero lag",
            Duration::from_secs(120),
            |t| {
                all_partitions(t, PartitionState::Mirroring, 1)
                    && t.status.as_ref().is_some_and(|s| {
                        s.partitions[0].destination_log_end_offset == Some(records as i64)
                    })
            },
        )
        .await;
    assert!(
        t.status.as_ref().unwrap().partitions[0]
            .last_error
            .is_none(),
        "{:?}",
        t.status
    );
    let report = verify(
        bed,
        &bed.source_config(),
        &format!("{}/dr", s.ns),
        topic,
        topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(
        report.is_clean() && report.offsets_identical && report.matched == records as u64,
        "{report:?}"
    );
}

async fn dest_configs_now(
    bed: &Testbed,
    topic: &str,
) -> std::collections::BTreeMap<String, String> {
    topic_configs(&bed.dest_config(DestUser::Admin), topic)
        .await
        .unwrap()
}

#[tokio::test]
async fn log_append_time_sources_and_far_timestamps_are_copied_unchanged() {
    let bed = Testbed::get();
    let source = bed.source_config();
    let (s, _op) = scenario(bed, "dtc-ts", json!({})).await;

    // A source that accepts any timestamp; the destination broker keeps Kafka's default bound
    // (1 h ahead).
    let far = unique_name("dtc-far");
    create_topic(
        &source,
        &far,
        1,
        &[("message.timestamp.after.max.ms", UNBOUNDED)],
    )
    .await
    .unwrap();
    let now = now_ms();
    let mut values: Vec<(Vec<u8>, i64)> = (0..5)
        .map(|i| (format!("now-{i}").into_bytes(), now))
        .collect();
    values.push((b"next-week".to_vec(), now + 7 * DAY));
    values.push((b"ten-years-ago".to_vec(), now - 3650 * DAY));
    values.extend((0..5).map(|i| (format!("later-{i}").into_bytes(), now)));
    kmirror_e2e::kafka::produce_with_timestamps(&source, &far, &values);

    // A source that stamps its own append time over the producer's.
    let append = unique_name("dtc-append");
    create_topic(
        &source,
        &append,
        1,
        &[("message.timestamp.type", "LogAppendTime")],
    )
    .await
    .unwrap();
    let stamped: Vec<(Vec<u8>, i64)> = (0..10)
        .map(|i| (format!("a-{i}").into_bytes(), now + 30 * DAY))
        .collect();
    kmirror_e2e::kafka::produce_with_timestamps(&source, &append, &stamped);

    s.apply_topic("far", json!({"mirror": "dr", "sourceTopic": far}))
        .await;
    s.apply_topic("append", json!({"mirror": "dr", "sourceTopic": append}))
        .await;
    assert_copied(bed, &s, "far", &far, values.len()).await;
    assert_copied(bed, &s, "append", &append, stamped.len()).await;

    let source_records = read_all(&source, &append, 0, "read_committed").unwrap();
    let copies = read_all(
        &bed.dest_config(DestUser::Admin),
        &append,
        0,
        "read_committed",
    )
    .unwrap();
    assert_eq!(source_records.len(), copies.len());
    for (src, copy) in source_records.iter().zip(&copies) {
        assert_eq!(src.timestamp_kind, Some(TimestampKind::LogAppendTime));
        assert!(
            src.timestamp.unwrap() < now + DAY,
            "the source stamped its own time"
        );
        assert_eq!(
            (copy.timestamp, copy.timestamp_kind),
            (src.timestamp, Some(TimestampKind::CreateTime)),
            "offset {}: the copy keeps the source's append time as its create time",
            src.offset
        );
    }
    for topic in [&far, &append] {
        let configs = dest_configs_now(bed, topic).await;
        for (k, v) in [
            ("message.timestamp.type", "CreateTime"),
            ("message.timestamp.after.max.ms", UNBOUNDED),
            ("message.timestamp.before.max.ms", UNBOUNDED),
        ] {
            assert_eq!(configs.get(k).map(String::as_str), Some(v), "{topic}: {k}");
        }
    }

    // The sync copies a source change but never the source's timestamp policy.
    alter(
        &source,
        &append,
        &[
            ConfigOp::Set("message.timestamp.after.max.ms".into(), "60000".into()),
            ConfigOp::Set("retention.ms".into(), "7200000".into()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while dest_configs_now(bed, &append)
        .await
        .get("retention.ms")
        .map(String::as_str)
        != Some("7200000")
    {
        assert!(Instant::now() < deadline, "retention.ms never synced");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let configs = dest_configs_now(bed, &append).await;
    assert_eq!(
        configs.get("message.timestamp.type").map(String::as_str),
        Some("CreateTime")
    );
    assert_eq!(
        configs
            .get("message.timestamp.after.max.ms")
            .map(String::as_str),
        Some(UNBOUNDED)
    );
    s.cleanup().await;
}

/// The source broker's `message.max.bytes`, raised for as long as it lives (per broker, dynamic;
/// raising it only lets the source take larger records).
struct RaisedSourceLimit<'a> {
    bed: &'a Testbed,
    broker: String,
}

impl<'a> RaisedSourceLimit<'a> {
    fn new(bed: &'a Testbed, bytes: i64) -> RaisedSourceLimit<'a> {
        let admin: AdminClient<DefaultClientContext> = bed.source_config().create().unwrap();
        let md = admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(10))
            .unwrap();
        let broker = md.brokers()[0].id().to_string();
        let raised = RaisedSourceLimit { bed, broker };
        raised.config(&["--add-config", &format!("message.max.bytes={bytes}")]);
        raised
    }

    fn config(&self, change: &[&str]) {
        let mut args = vec![
            "--bootstrap-server",
            self.bed.source_bootstrap(),
            "--entity-type",
            "brokers",
            "--entity-name",
            &self.broker,
            "--alter",
        ];
        args.extend(change);
        self.bed
            .kafka_tool("kafka.admin.ConfigCommand", &args)
            .expect("kafka-configs");
    }
}

impl Drop for RaisedSourceLimit<'_> {
    fn drop(&mut self) {
        self.config(&["--delete-config", "message.max.bytes"]);
    }
}

#[tokio::test]
async fn records_as_large_as_the_source_broker_allows_fit_and_the_sync_keeps_the_limit() {
    let bed = Testbed::get();
    let source = bed.source_config();
    let (s, _op) = scenario(bed, "dtc-size", json!({})).await;
    let topic = unique_name("dtc-big");
    let n = {
        // No topic override: the source's limit is its broker's default.
        let _raised = RaisedSourceLimit::new(bed, 3_000_000);
        create_topic(&source, &topic, 1, &[]).await.unwrap();
        let effective = {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let admin: AdminClient<DefaultClientContext> = source.create().unwrap();
                let r = admin
                    .describe_configs(
                        [&rdkafka::admin::ResourceSpecifier::Topic(&topic)],
                        &rdkafka::admin::AdminOptions::new(),
                    )
                    .await
                    .unwrap()
                    .pop()
                    .unwrap()
                    .unwrap();
                let v = r.get("max.message.bytes").and_then(|e| e.value.clone());
                if v.as_deref() == Some("3000000") || Instant::now() > deadline {
                    break v;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        };
        assert_eq!(effective.as_deref(), Some("3000000"), "the raised default");
        let now = now_ms();
        let mut values: Vec<(Vec<u8>, i64)> = vec![(b"small".to_vec(), now)];
        // Incompressible: the fetcher's compressed batch is as large as the record.
        let mut rng = Rng::new(7);
        values.push(((0..2_000_000).map(|_| rng.next_u64() as u8).collect(), now));
        values.push((b"after".to_vec(), now));
        kmirror_e2e::kafka::produce_with_timestamps(&source, &topic, &values);
        s.apply_topic("big", json!({"mirror": "dr", "sourceTopic": topic}))
            .await;
        assert_copied(bed, &s, "big", &topic, values.len()).await;
        values.len()
    };
    assert_eq!(
        dest_configs_now(bed, &topic)
            .await
            .get("max.message.bytes")
            .map(String::as_str),
        Some("3000000")
    );

    // The source lowers its limit: its log still holds the large record, so the destination
    // keeps the larger limit while other changes sync.
    alter(
        &source,
        &topic,
        &[
            ConfigOp::Set("max.message.bytes".into(), "1000000".into()),
            ConfigOp::Set("retention.ms".into(), "7200000".into()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while dest_configs_now(bed, &topic)
        .await
        .get("retention.ms")
        .map(String::as_str)
        != Some("7200000")
    {
        assert!(Instant::now() < deadline, "retention.ms never synced");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        dest_configs_now(bed, &topic)
            .await
            .get("max.message.bytes")
            .map(String::as_str),
        Some("3000000"),
        "never lowered below what the source held"
    );
    let report = verify(
        bed,
        &source,
        &format!("{}/dr", s.ns),
        &topic,
        &topic,
        0,
        Isolation::ReadCommitted,
    );
    assert!(
        report.is_clean() && report.matched == n as u64,
        "{report:?}"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn a_bound_the_spec_sets_is_kept_and_a_record_beyond_it_is_refused() {
    let bed = Testbed::get();
    let source = bed.source_config();
    let (s, _op) = scenario(
        bed,
        "dtc-own",
        json!({"topicConfigs": {"overrides": {"message.timestamp.after.max.ms": "86400000"}}}),
    )
    .await;
    let topic = unique_name("dtc-bounded");
    create_topic(
        &source,
        &topic,
        1,
        &[("message.timestamp.after.max.ms", UNBOUNDED)],
    )
    .await
    .unwrap();
    let now = now_ms();
    let mut values: Vec<(Vec<u8>, i64)> = (0..3)
        .map(|i| (format!("now-{i}").into_bytes(), now))
        .collect();
    values.push((b"in-two-hours".to_vec(), now + DAY / 12));
    values.push((b"next-week".to_vec(), now + 7 * DAY));
    values.push((b"after".to_vec(), now));
    kmirror_e2e::kafka::produce_with_timestamps(&source, &topic, &values);
    s.apply_topic("bounded", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let t = s
        .wait_topic("bounded", "FAILED", Duration::from_secs(120), |t| {
            all_partitions(t, PartitionState::Failed, 1)
        })
        .await;
    let p = &t.status.as_ref().unwrap().partitions[0];
    let error = p.last_error.clone().unwrap_or_default();
    for word in ["offset 4", "message.timestamp.after.max.ms", "86400000"] {
        assert!(error.contains(word), "{error:?} lacks {word:?}");
    }
    assert_eq!(
        p.destination_log_end_offset,
        Some(4),
        "the records before the refused one are copied, nothing after it"
    );
    let configs = dest_configs_now(bed, &topic).await;
    assert_eq!(
        configs
            .get("message.timestamp.after.max.ms")
            .map(String::as_str),
        Some("86400000")
    );
    assert_eq!(
        configs
            .get("message.timestamp.before.max.ms")
            .map(String::as_str),
        Some(UNBOUNDED)
    );
    s.cleanup().await;
}
