//! Old sources through the operator, with a plain ClusterMirror onto the bed's Kafka 4.1
//! destination. A Kafka 2.8 and a Kafka 2.1 source (the oldest kmirror supports) whose topics
//! keep old message formats (`message.format.version` 0.9.0 and 0.10.2, and one switched to the
//! broker's own format half-way): the destination does not take the removed key, so the
//! operator leaves it out and names it once in the MirrorTopic's status and an Event, and every
//! record — the first wave and a second one written while mirroring — arrives at its offset.
//! From the 2.1 source also group offsets and ACLs are synced, and a topic fails over.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{engine, ensure_state_topic, verify};
use kmirror_e2e::kafka::{
    DestUser, TestRecord, app_acls, app_may, committed_offsets, consume_and_commit, create_topic,
    produce_all, read_all, topic_configs, unique_name, watermarks,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, eventually};
use kmirror_e2e::wire::{client, fetch_partition};
use kmirror_fetcher::Isolation;
use kmirror_state::kafka_admin::{Operation, create_acls};
use kmirror_wire::records::decode_batch;
use kmirror_wire::{Isolation as WireIsolation, RawEntry, decode_legacy};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use serde_json::json;

const PARTITIONS: i32 = 2;
/// Records per codec and partition.
const PER_CODEC: usize = 50;
/// Codecs of the old message formats (zstd needs format v2).
const CODECS: [&str; 4] = ["none", "gzip", "snappy", "lz4"];

/// A ZooKeeper-based source of the bed (`up --compat`).
struct OldSource {
    /// The bed variable with its bootstrap address.
    var: &'static str,
    /// The message format of the broker's own version (what a topic is switched to).
    own_format: &'static str,
}

const KAFKA_2_8: OldSource = OldSource {
    var: "KMIRROR_COMPAT28_BOOTSTRAP",
    own_format: "2.8",
};
const KAFKA_2_1: OldSource = OldSource {
    var: "KMIRROR_COMPAT21_BOOTSTRAP",
    own_format: "2.1",
};

impl OldSource {
    fn connect(&self, bed: &Testbed) -> (String, ClientConfig) {
        let bootstrap = bed
            .opt_var(self.var)
            .unwrap_or_else(|| panic!("{} is not set: make test starts it (up --compat)", self.var))
            .to_string();
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &bootstrap);
        (bootstrap, config)
    }
}

fn records(seed: usize) -> Vec<TestRecord> {
    (0..PER_CODEC * PARTITIONS as usize)
        .map(|i| TestRecord {
            partition: (i % PARTITIONS as usize) as i32,
            key: (i % 3 != 0).then(|| format!("k{seed}-{i}").into_bytes()),
            value: Some(format!("v{seed}-{i}-{}", "x".repeat(i % 40)).into_bytes()),
            headers: vec![], // formats before v2 have no headers
        })
        .collect()
}

/// Writes one codec's records, half the codecs from a producer that writes the topic's old
/// format itself (`fallback`: the broker version it pretends to talk to), half from a current
/// one (the broker converts them to the topic's format).
fn produce_codec(source: &ClientConfig, topic: &str, c: usize, fallback: &str, seed: usize) {
    let codec = CODECS[c];
    let old = [
        ("compression.type", codec),
        ("enable.idempotence", "false"),
        ("api.version.request", "false"),
        ("broker.version.fallback", fallback),
    ];
    let current = [("compression.type", codec), ("enable.idempotence", "false")];
    let extra: &[(&str, &str)] = if c.is_multiple_of(2) { &old } else { &current };
    produce_all(source, topic, &records(seed), extra)
        .unwrap_or_else(|e| panic!("{topic} {codec}: {e}"));
}

/// Sets a source topic's configs with the AlterConfigs request of the day (Kafka 2.1 has no
/// incremental one); it replaces every dynamic config of the topic.
async fn set_topic_configs(source: &ClientConfig, topic: &str, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = source.create().unwrap();
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in configs {
        alter = alter.set(k, v);
    }
    let results = admin
        .alter_configs([&alter], &AdminOptions::new())
        .await
        .unwrap();
    for r in results {
        r.unwrap_or_else(|e| panic!("altering {topic}'s configs: {e:?}"));
    }
}

/// Checks that partition `p` of `topic` holds on the destination every source record at its
/// offset, with its key, value and timestamp, twice: read with kmirror's wire client (which
/// decodes the old formats itself), and by the verifier through the recorded offset map.
async fn assert_copied(
    bed: &Testbed,
    source: &ClientConfig,
    mirror: &str,
    topic: &str,
    p: i32,
    count: i64,
) {
    let wire = client(source).await;
    let (entries, _) = fetch_partition(&wire, topic, p, 0, WireIsolation::ReadUncommitted).await;
    let mut from_source = Vec::new();
    for e in &entries {
        match e {
            RawEntry::Legacy(m) => from_source.extend(decode_legacy(m).expect("decode")),
            RawEntry::Batch(b) => from_source.extend(decode_batch(&b.bytes).expect("decode").1),
        }
    }
    assert_eq!(
        from_source.len() as i64,
        count,
        "{topic}[{p}] on the source"
    );
    let copied = read_all(
        &bed.dest_config(DestUser::Admin),
        topic,
        p,
        "read_committed",
    )
    .unwrap();
    assert_eq!(
        copied.len() as i64,
        count,
        "{topic}[{p}] on the destination"
    );
    for (s, d) in from_source.iter().zip(&copied) {
        let what = format!("{topic}[{p}] offset {}", s.offset);
        assert_eq!(d.offset, s.offset, "{what}: offsets identical");
        assert_eq!(d.key.as_deref(), s.key.as_deref(), "{what}: key");
        assert_eq!(d.value.as_deref(), s.value.as_deref(), "{what}: value");
        assert_eq!(d.timestamp.unwrap_or(-1), s.timestamp, "{what}: timestamp");
    }
    let report = verify(
        bed,
        source,
        mirror,
        topic,
        topic,
        p,
        Isolation::ReadCommitted,
    );
    assert!(
        report.is_exact() && report.offsets_identical && report.matched == count as u64,
        "{topic}[{p}]: the verifier's report: {report:?}"
    );
}

/// The MirrorTopic of `source_topic`, once the ClusterMirror's filter created it.
async fn mirror_topic_of(s: &Scenario, source_topic: &str) -> MirrorTopic {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(t) = s
            .topics()
            .await
            .into_iter()
            .find(|t| t.spec.source_topic == source_topic)
        {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "no MirrorTopic for {source_topic}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until every partition of the MirrorTopic `name` is MIRRORING with `per_partition`
/// records on the destination and the configs not copied noted.
async fn wait_mirrored(s: &Scenario, name: &str, per_partition: i64) -> MirrorTopic {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let t = s.topic(name).await.expect("MirrorTopic");
        let done = all_partitions(&t, PartitionState::Mirroring, PARTITIONS as usize)
            && t.status.as_ref().is_some_and(|st| {
                st.partitions
                    .iter()
                    .all(|p| p.destination_log_end_offset == Some(per_partition))
                    && !st.configs_not_copied.is_empty()
            });
        if done {
            return t;
        }
        if Instant::now() > deadline {
            panic!(
                "{name}: not mirrored ({per_partition} records a partition) with its configs noted within 180 s; status: {}; events: {:?}",
                serde_json::to_string_pretty(&t.status).unwrap(),
                s.events(name).await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn old_formats_mirror_without_the_removed_config(old: OldSource, prefix: &str) {
    let bed = Testbed::get();
    let (bootstrap, source) = old.connect(bed);
    ensure_state_topic(bed);
    let s = Scenario::new(bed, prefix).await;
    let prefix = unique_name(prefix);
    // (format, librdkafka's fallback version (the producer writes that format itself), the
    // format the topic is switched to after half its codecs).
    let formats = [
        ("0.9.0", "0.9.0", None),
        ("0.10.2", "0.10.0", None),
        ("0.10.2", "0.10.0", Some(old.own_format)),
    ];
    let mut topics = Vec::new();
    for (i, (format, fallback, switch_to)) in formats.iter().enumerate() {
        let topic = match switch_to {
            None => format!("{prefix}-{}", format.replace('.', "")),
            Some(_) => format!("{prefix}-mixed"),
        };
        let configs = [
            ("message.format.version", *format),
            ("retention.ms", "604800000"),
        ];
        create_topic(&source, &topic, PARTITIONS, &configs)
            .await
            .unwrap();
        for c in 0..CODECS.len() {
            if let Some(own) = switch_to
                && c == CODECS.len() / 2
            {
                set_topic_configs(
                    &source,
                    &topic,
                    &[
                        ("message.format.version", own),
                        ("retention.ms", "604800000"),
                    ],
                )
                .await;
            }
            produce_codec(&source, &topic, c, fallback, i * 10 + c);
        }
        topics.push(topic);
    }
    let mut per_partition = (PER_CODEC * CODECS.len()) as i64;

    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["source"] = json!({"bootstrapServers": bootstrap});
    spec["topics"] = json!({"include": [{"prefix": format!("{prefix}-")}]});
    // The engine of the pass (`KMIRROR_ENGINE`, docs/testing.md): both read the source.
    spec["fetcher"] = json!({"engine": match engine().as_str() {
        "record" => "Record",
        _ => "Batch",
    }});
    s.apply_mirror("dr", spec).await;
    let mut names = Vec::new();
    for topic in &topics {
        let name = mirror_topic_of(&s, topic).await.metadata.name.unwrap();
        wait_mirrored(&s, &name, per_partition).await;
        names.push(name);
    }
    // A second wave while the topics mirror, in each topic's format of now.
    for (i, topic) in topics.iter().enumerate() {
        produce_codec(&source, topic, 1, formats[i].1, 100 + i);
    }
    per_partition += PER_CODEC as i64;
    let mirror = format!("{}/dr", s.ns);
    for (topic, name) in topics.iter().zip(&names) {
        let t = wait_mirrored(&s, name, per_partition).await;
        let status = t.status.unwrap();
        let notes = &status.configs_not_copied;
        assert_eq!(notes.len(), 1, "only the removed key: {notes:?}");
        assert_eq!(notes[0].name, "message.format.version");
        assert!(
            notes[0].reason.contains("removed in Kafka 4.0"),
            "{}",
            notes[0].reason
        );
        // The other source config is copied; the removed one is not on the destination.
        let dest = topic_configs(&bed.dest_config(DestUser::Admin), topic)
            .await
            .unwrap();
        assert_eq!(
            dest.get("retention.ms").map(String::as_str),
            Some("604800000")
        );
        assert!(!dest.contains_key("message.format.version"), "{dest:?}");
        for p in 0..PARTITIONS {
            assert_copied(bed, &source, &mirror, topic, p, per_partition).await;
        }
        // Named once: one Event, no failure retried.
        let events = s.events(name).await;
        let noted: Vec<_> = events
            .iter()
            .filter(|(reason, _)| reason == "ConfigsNotCopied")
            .collect();
        assert_eq!(noted.len(), 1, "{events:?}");
        assert!(noted[0].1.contains("message.format.version"), "{events:?}");
        assert!(
            !events.iter().any(|(_, m)| m.contains("InvalidConfig")),
            "{events:?}"
        );
    }
    // The mirror's config sync says it too, counted over its topics.
    let counted = format!("message.format.version ({} topics)", topics.len());
    eventually(
        "the ClusterMirror's topicConfigs summary counting the key",
        Duration::from_secs(30),
        async || {
            let part = s
                .mirror("dr")
                .await
                .status
                .and_then(|st| st.sync.topic_configs);
            part.and_then(|p| p.summary)
                .is_some_and(|m| m.contains(&counted))
        },
    )
    .await;
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_2_8_topics_in_old_formats_mirror_without_the_removed_config() {
    old_formats_mirror_without_the_removed_config(KAFKA_2_8, "oldfmt28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_2_1_topics_in_old_formats_mirror_without_the_removed_config() {
    old_formats_mirror_without_the_removed_config(KAFKA_2_1, "oldfmt21").await;
}

/// The record engine reads the source with librdkafka, which cannot read messages in the
/// formats before v2 from Kafka 2.8 on: it stops before copying, naming the offset and the fix,
/// and writes nothing (it used to stall every two minutes, and stamp the time of the copy on a
/// v0 message it did read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_engine_refuses_old_formats_from_kafka_2_8_naming_the_fix() {
    let bed = Testbed::get();
    let (bootstrap, source) = KAFKA_2_8.connect(bed);
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "oldrec28").await;
    let topic = unique_name("oldrec28");
    create_topic(
        &source,
        &topic,
        PARTITIONS,
        &[("message.format.version", "0.10.2")],
    )
    .await
    .unwrap();
    produce_codec(&source, &topic, 1, "0.10.0", 7);
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["source"] = json!({"bootstrapServers": bootstrap});
    spec["fetcher"] = json!({"engine": "Record"});
    s.apply_mirror("dr", spec).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    eventually(
        "every partition's last error naming the format and the fix",
        Duration::from_secs(90),
        async || {
            s.topic("t").await.and_then(|t| t.status).is_some_and(|st| {
                st.partitions.len() == PARTITIONS as usize
                    && st.partitions.iter().all(|p| {
                        p.last_error.as_deref().is_some_and(|e| {
                            e.contains("offset 0 is a message in format v1")
                                && e.contains("spec.fetcher.engine: Batch")
                        })
                    })
            })
        },
    )
    .await;
    let dest = bed.dest_config(DestUser::Admin);
    for p in 0..PARTITIONS {
        assert_eq!(
            watermarks(&dest, &topic, p).unwrap().1,
            0,
            "partition {p}: nothing written"
        );
    }
    s.cleanup().await;
}

/// Runs `kubectl mirror ARGS -n NS`; returns (exit code, stdout and stderr).
fn plugin(bed: &Testbed, ns: &str, args: &[&str]) -> (i32, String) {
    let (code, out, err) = kmirror_e2e::operator::kubectl_mirror(bed, ns, args);
    (code, format!("{out}{err}"))
}

/// From Kafka 2.1, the oldest source, a topic in message format 0.10.2: a consumer group's
/// offsets and the application's ACLs reach the destination (read-only while mirroring), and a
/// graceful failover under traffic stops every partition at its last mirrored offset with the
/// group resuming at its committed record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_2_1_source_syncs_groups_and_acls_and_fails_over() {
    let bed = Testbed::get();
    let (bootstrap, source) = KAFKA_2_1.connect(bed);
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "src21").await;
    let topic = unique_name("src21");
    let group = unique_name("src21-group");
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(
        &source,
        &topic,
        PARTITIONS,
        &[("message.format.version", "0.10.2")],
    )
    .await
    .unwrap();
    let admin: AdminClient<DefaultClientContext> = source.create().unwrap();
    create_acls(
        admin.inner(),
        &app_acls(&topic, &group),
        Duration::from_secs(15),
    )
    .expect("ACLs on the Kafka 2.1 source");
    for wave in 0..20 {
        produce_codec(&source, &topic, wave % CODECS.len(), "0.10.0", 2100 + wave);
    }

    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["source"] = json!({"bootstrapServers": bootstrap});
    s.apply_mirror("dr", spec).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;

    // Group offsets: committed on the source, the same on the destination.
    let committed = consume_and_commit(&source, &topic, &group, PARTITIONS, 400);
    eventually(
        "the group's offsets on the destination",
        Duration::from_secs(60),
        async || committed_offsets(&dest, &group, &topic, PARTITIONS) == committed,
    )
    .await;
    // ACLs: the application may read the mirrored topic, not write it.
    eventually(
        "the application's READ on the destination topic",
        Duration::from_secs(60),
        async || app_may(&dest, &topic, Operation::Read),
    )
    .await;
    assert!(
        !app_may(&dest, &topic, Operation::Write),
        "WRITE is withheld while the topic mirrors"
    );

    // A graceful failover while the source is written.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (source, topic, stop) = (source.clone(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seed = 2200;
            while !stop.load(Ordering::Relaxed) {
                produce_codec(&source, &topic, seed % CODECS.len(), "0.10.0", seed);
                seed += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let (code, out) = plugin(
        bed,
        &s.ns,
        &[
            "failover",
            "dr",
            "--topic",
            &topic,
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    assert_eq!(code, 0, "failover from Kafka 2.1 failed:\n{out}");
    eprintln!(
        "graceful failover from Kafka 2.1 took {:?}",
        started.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let t = s.topic("t").await.unwrap();
    assert!(all_partitions(
        &t,
        PartitionState::Stopped,
        PARTITIONS as usize
    ));
    let status = t.status.unwrap();
    let mirror = format!("{}/dr", s.ns);
    for p in &status.partitions {
        let lmo = p.last_mirrored_offset.expect("last mirrored offset");
        let dest_end = watermarks(&dest, &topic, p.partition).unwrap().1;
        assert_eq!(
            dest_end,
            lmo + 1,
            "partition {}: the destination ends at the last mirrored offset",
            p.partition
        );
        // Every source record up to the cut is on the destination at its offset; nothing else.
        let report = verify(
            bed,
            &source,
            &mirror,
            &topic,
            &topic,
            p.partition,
            Isolation::ReadCommitted,
        );
        assert!(
            report.different == 0
                && report.extra == 0
                && report.offsets_identical
                && report.matched == (lmo + 1) as u64,
            "partition {}: {report:?}",
            p.partition
        );
    }
    // The group resumes on the destination at its committed record.
    assert_eq!(
        committed_offsets(&dest, &group, &topic, PARTITIONS),
        committed
    );
    let first: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| {
            let records = read_all(&dest, &topic, p, "read_committed").unwrap();
            let source_records = read_all(&source, &topic, p, "read_committed").unwrap();
            let at = committed[&p];
            let (d, s) = (
                records
                    .iter()
                    .find(|r| r.offset == at)
                    .expect("destination record"),
                source_records
                    .iter()
                    .find(|r| r.offset == at)
                    .expect("source record"),
            );
            assert!(
                s.same_content(d),
                "partition {p}: record {at} is the source's"
            );
            (p, at)
        })
        .collect();
    assert_eq!(first, committed);
    // The application may write to the failed-over topic.
    eventually(
        "the application's WRITE on the failed-over topic",
        Duration::from_secs(60),
        async || app_may(&dest, &topic, Operation::Write),
    )
    .await;

    // A failback would write into Kafka 2.1, which kmirror cannot: refused up front, naming the
    // release, and nothing is written into the old cluster.
    let ends = |config: &ClientConfig| -> Vec<i64> {
        (0..PARTITIONS)
            .map(|p| watermarks(config, &topic, p).unwrap().1)
            .collect()
    };
    let source_ends = ends(&source);
    let (code, out) = plugin(
        bed,
        &s.ns,
        &[
            "failback",
            "dr",
            "--topic",
            &topic,
            "--wait",
            "--timeout",
            "60s",
        ],
    );
    assert_eq!(
        code, 4,
        "a failback into Kafka 2.1 is refused (exit code 4):\n{out}"
    );
    assert!(
        out.contains("refuses")
            && out.contains("DestinationUnsupported")
            && out.contains("Kafka 2.1 or earlier")
            && !out.contains("timed out"),
        "the plugin stops at the refusal and says why:\n{out}"
    );
    let reverse = s.mirror("dr-failback").await.status.expect("status");
    let reachable = reverse
        .conditions
        .iter()
        .find(|c| c.type_ == "DestinationReachable")
        .expect("DestinationReachable");
    assert_eq!(
        (reachable.status.as_str(), reachable.reason.as_str()),
        ("False", "DestinationUnsupported"),
        "{reachable:?}"
    );
    assert!(
        reachable.message.contains("Kafka 2.1 or earlier")
            && reachable.message.contains("Kafka 3.0 or later"),
        "{}",
        reachable.message
    );
    let events = s.events("dr-failback").await;
    assert!(
        events
            .iter()
            .any(|(reason, _)| reason == "DestinationUnsupported"),
        "{events:?}"
    );
    assert_eq!(ends(&source), source_ends, "nothing written into Kafka 2.1");
    s.cleanup().await;
}
