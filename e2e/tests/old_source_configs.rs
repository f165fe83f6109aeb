//! A Kafka 2.8 source whose topics keep old message formats (`message.format.version` 0.9.0
//! and 0.10.2), mirrored by a plain ClusterMirror onto the bed's Kafka 4.1 destination: the
//! destination does not take the removed key, so the operator leaves it out, names it once in
//! the MirrorTopic's status and an Event, and every record arrives at its offset.

use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{
    DestUser, TestRecord, create_topic, produce_all, read_all, topic_configs, unique_name,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kmirror_e2e::wire::{client, fetch_partition};
use kmirror_wire::records::decode_batch;
use kmirror_wire::{Isolation, RawEntry, decode_legacy};
use rdkafka::ClientConfig;
use serde_json::json;

const PARTITIONS: i32 = 2;
/// Records per codec and partition.
const PER_CODEC: usize = 50;
/// Codecs of the old message formats (zstd needs format v2).
const CODECS: [&str; 4] = ["none", "gzip", "snappy", "lz4"];

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

/// Checks that partition `p` of `topic` holds on the destination every source record at its
/// offset, with its key, value and timestamp. The source is read with kmirror's wire client
/// (librdkafka, as built here, does not read these old formats back).
async fn assert_copied(bed: &Testbed, source: &ClientConfig, topic: &str, p: i32, count: i64) {
    let wire = client(source).await;
    let (entries, _) = fetch_partition(&wire, topic, p, 0, Isolation::ReadUncommitted).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_message_formats_mirror_without_the_removed_config() {
    let bed = Testbed::get();
    let Some(bootstrap) = bed.opt_var("KMIRROR_COMPAT28_BOOTSTRAP") else {
        eprintln!("the Kafka 2.8 source is not running (up --compat); nothing to check");
        return;
    };
    let mut source = ClientConfig::new();
    source.set("bootstrap.servers", bootstrap);
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "oldfmt").await;
    let prefix = unique_name("oldfmt");
    // format, librdkafka's fallback version (the producer writes that format itself).
    let formats = [("0.9.0", "0.9.0"), ("0.10.2", "0.10.0")];
    let mut topics = Vec::new();
    for (i, (format, fallback)) in formats.iter().enumerate() {
        let topic = format!("{prefix}-{}", format.replace('.', ""));
        create_topic(
            &source,
            &topic,
            PARTITIONS,
            &[
                ("message.format.version", format),
                ("retention.ms", "604800000"),
            ],
        )
        .await
        .unwrap();
        for (c, codec) in CODECS.iter().enumerate() {
            let old = [
                ("compression.type", *codec),
                ("enable.idempotence", "false"),
                ("api.version.request", "false"),
                ("broker.version.fallback", fallback),
            ];
            let current = [
                ("compression.type", *codec),
                ("enable.idempotence", "false"),
            ];
            // Half the codecs from an old-format producer, half from a current one (the
            // broker converts them to the topic's format).
            let extra: &[(&str, &str)] = if c % 2 == 0 { &old } else { &current };
            produce_all(&source, &topic, &records(i * 10 + c), extra)
                .unwrap_or_else(|e| panic!("{topic} {codec}: {e}"));
        }
        topics.push(topic);
    }
    let per_partition = (PER_CODEC * CODECS.len()) as i64;

    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["source"] = json!({"bootstrapServers": bootstrap});
    spec["topics"] = json!({"include": [{"prefix": format!("{prefix}-")}]});
    s.apply_mirror("dr", spec).await;

    for topic in &topics {
        let name = mirror_topic_of(&s, topic).await.metadata.name.unwrap();
        let deadline = Instant::now() + Duration::from_secs(180);
        let t = loop {
            let t = s.topic(&name).await.expect("MirrorTopic");
            let done = all_partitions(&t, PartitionState::Mirroring, PARTITIONS as usize)
                && t.status.as_ref().is_some_and(|st| {
                    st.partitions
                        .iter()
                        .all(|p| p.destination_log_end_offset == Some(per_partition))
                        && !st.configs_not_copied.is_empty()
                });
            if done {
                break t;
            }
            if Instant::now() > deadline {
                panic!(
                    "{topic}: not mirrored with its configs noted within 180 s; status: {}; events: {:?}",
                    serde_json::to_string_pretty(&t.status).unwrap(),
                    s.events(&name).await
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
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
            assert_copied(bed, &source, topic, p, per_partition).await;
        }
        // Named once: one Event, no failure retried.
        let events = s.events(&name).await;
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
    kmirror_e2e::operator::eventually(
        "the ClusterMirror's topicConfigs summary counting the key",
        Duration::from_secs(30),
        async || {
            let part = s
                .mirror("dr")
                .await
                .status
                .and_then(|st| st.sync.topic_configs);
            part.and_then(|p| p.summary)
                .is_some_and(|m| m.contains("message.format.version (2 topics)"))
        },
    )
    .await;
    s.cleanup().await;
}
