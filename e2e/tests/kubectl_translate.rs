//! `kubectl mirror translate` against the real bed, on the topics whose offsets differ: a
//! transactional source (committed and aborted transactions interleaved) and a source compacted
//! before it was mirrored. Every source offset translates to the destination offset where the
//! first copied record at or after it is (read back from the destination, key, value and
//! headers), every copy translates back to its source offset, the verifier finds the topics
//! clean, and an offset not mirrored yet is reported with its reason and exit code 1.

use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{ensure_state_topic, recorded};
use kmirror_e2e::kafka::{
    DestUser, TestRecord, create_topic, produce_all, read_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{
    OperatorProcess, Scenario, all_partitions, eventually, kubectl_mirror,
};
use kmirror_state::kafka_record::RecordData;
use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{Value, json};

/// Transactions of 2 to 6 records on partition 0, every third aborted; the records carry a
/// header.
fn transactions(source: &ClientConfig, topic: &str) {
    let producer: BaseProducer = source
        .clone()
        .set("transactional.id", unique_name("translate-txn"))
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init transactions");
    for txn in 0..15 {
        producer.begin_transaction().expect("begin");
        let commit = txn % 3 != 1;
        for i in 0..(2 + txn % 5) {
            let value = format!("{}-{txn}-{i}", if commit { "committed" } else { "aborted" });
            producer
                .send(
                    BaseRecord::<str, str>::to(topic)
                        .partition(0)
                        .key(&format!("k{i}"))
                        .payload(&value)
                        .headers(OwnedHeaders::new().insert(Header {
                            key: "txn",
                            value: Some(&txn.to_string()),
                        })),
                )
                .map_err(|(e, _)| e)
                .expect("send in a transaction");
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
        if commit {
            producer
                .commit_transaction(Duration::from_secs(30))
                .expect("commit");
        } else {
            producer
                .abort_transaction(Duration::from_secs(30))
                .expect("abort");
        }
    }
}

/// Writes 60 keys rewritten at random to a compacted topic until the cleaner has removed at
/// least half of the log and leaves it as it is (three equal reads, 1.5 s apart).
fn compacted(source: &ClientConfig, topic: &str) {
    let mut rng = kmirror_e2e::kafka::Rng::new(7);
    let records: Vec<TestRecord> = (0..600)
        .map(|i| TestRecord {
            partition: 0,
            key: Some(format!("key-{}", rng.below(60)).into_bytes()),
            value: Some(format!("value-{i}").into_bytes()),
            headers: vec![("n".into(), i.to_string().into_bytes())],
        })
        .collect();
    for chunk in records.chunks(100) {
        produce_all(source, topic, chunk, &[]).expect("produce");
        std::thread::sleep(Duration::from_millis(150)); // roll segments
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        produce_all(source, topic, &records[..1], &[]).expect("produce"); // rolls the segment
        let all = read_all(source, topic, 0, "read_committed").expect("read the source");
        let (_, end) = watermarks(source, topic, 0).expect("watermarks");
        if (all.len() as i64) < end / 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner did not compact {topic}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let read = || -> Vec<i64> {
        read_all(source, topic, 0, "read_committed")
            .expect("read the source")
            .iter()
            .map(|r| r.offset)
            .collect()
    };
    let (mut last, mut equal) = (read(), 0);
    while equal < 2 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(30),
            "the log cleaner of {topic} did not settle"
        );
        std::thread::sleep(Duration::from_millis(1500));
        let again = read();
        equal = if again == last { equal + 1 } else { 0 };
        last = again;
    }
}

/// Runs `kubectl mirror translate dr --topic TOPIC` for `offsets` of partition 0; returns the
/// exit code and the translations of the JSON document.
fn translate(
    bed: &Testbed,
    ns: &str,
    topic: &str,
    direction: &str,
    offsets: &[i64],
) -> (i32, Vec<Value>) {
    let pairs: Vec<String> = offsets.iter().map(|o| format!("0:{o}")).collect();
    let pairs = pairs.join(",");
    let (code, stdout, stderr) = kubectl_mirror(
        bed,
        ns,
        &[
            "translate",
            "dr",
            "--topic",
            topic,
            "--offsets",
            &pairs,
            "--direction",
            direction,
            "-o",
            "json",
        ],
    );
    let doc: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("translate printed no document ({e}): {stdout}\n{stderr}"));
    let translations = doc["translations"].as_array().cloned().unwrap_or_default();
    assert_eq!(translations.len(), offsets.len(), "{doc}");
    (code, translations)
}

/// Checks both directions for one mirrored topic against its source and destination records.
fn check_topic(bed: &Testbed, ns: &str, topic: &str, source: &[RecordData], copies: &[RecordData]) {
    let (_, source_end) = watermarks(&bed.source_config(), topic, 0).expect("source watermarks");
    let (_, copies_end) =
        watermarks(&bed.dest_config(DestUser::Admin), topic, 0).expect("destination watermarks");
    // Every source offset, records and gaps alike: the first copy at or after it.
    let offsets: Vec<i64> = (0..=source_end).collect();
    let (code, there) = translate(bed, ns, topic, "source-to-destination", &offsets);
    assert_eq!(code, 0, "{there:?}");
    let mut gaps = 0;
    for (o, t) in offsets.iter().zip(&there) {
        assert_eq!(t["offset"], json!(o));
        assert_eq!(t["how"], "mapped", "{topic}: source offset {o}: {t}");
        let translated = t["translated"].as_i64().expect("a translated offset");
        // The first surviving source record at or after `o`, and where its copy is.
        let next = source.iter().position(|r| r.offset >= *o);
        match next {
            Some(i) => {
                let copy = copies
                    .iter()
                    .find(|c| c.offset == translated)
                    .unwrap_or_else(|| {
                        panic!("{topic}: no copy at destination offset {translated}")
                    });
                assert!(
                    source[i].same_content(copy),
                    "{topic}: source offset {o} translated to destination offset {translated}, \
                     which holds another record than source offset {}",
                    source[i].offset
                );
                if source[i].offset != *o {
                    gaps += 1;
                }
            }
            None => assert_eq!(translated, copies_end, "{topic}: after the last copy"),
        }
    }
    assert!(gaps > 3, "{topic}: the source must have gaps, found {gaps}");
    eprintln!(
        "{topic}: {} source offsets ({gaps} without a record of their own) and {} copies \
         translated",
        source_end + 1,
        copies.len()
    );
    // Back: every copy to its source record.
    let offsets: Vec<i64> = copies.iter().map(|c| c.offset).collect();
    let (code, back) = translate(bed, ns, topic, "destination-to-source", &offsets);
    assert_eq!(code, 0, "{back:?}");
    for (copy, t) in copies.iter().zip(&back) {
        let src = t["translated"].as_i64().expect("a translated offset");
        let original = source
            .iter()
            .find(|r| r.offset == src)
            .unwrap_or_else(|| panic!("{topic}: no source record at {src} ({t})"));
        assert!(
            original.same_content(copy),
            "{topic}: destination offset {} translated back to source offset {src}, another record",
            copy.offset
        );
    }
    // Not mirrored yet: no number, the reason, exit code 1; the others are still printed.
    let (code, out) = translate(
        bed,
        ns,
        topic,
        "source-to-destination",
        &[source[0].offset, source_end + 5],
    );
    assert_eq!(code, 1, "{out:?}");
    assert!(out[0]["translated"].is_i64(), "{out:?}");
    assert_eq!(out[1]["how"], "not-mirrored", "{out:?}");
    assert!(out[1]["translated"].is_null(), "{out:?}");
    assert!(
        out[1]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not mirrored yet")),
        "{out:?}"
    );
}

#[tokio::test]
async fn translate_matches_the_copies_on_transactional_and_compacted_topics() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let s = Scenario::new(bed, "translate").await;
    let txn = unique_name("translate-txn");
    let compact = unique_name("translate-compact");
    create_topic(&source, &txn, 1, &[]).await.unwrap();
    create_topic(
        &source,
        &compact,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.001"),
            ("min.compaction.lag.ms", "0"),
            ("delete.retention.ms", "0"),
        ],
    )
    .await
    .unwrap();
    transactions(&source, &txn);
    compacted(&source, &compact);

    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    // The destination copies are not compacted again: every copy stays readable.
    spec["sync"]["topicConfigs"] = json!({"exclude": ["cleanup.policy"]});
    s.apply_mirror("dr", spec).await;
    s.apply_topic("txn", json!({"mirror": "dr", "sourceTopic": txn}))
        .await;
    s.apply_topic("compact", json!({"mirror": "dr", "sourceTopic": compact}))
        .await;
    for name in ["txn", "compact"] {
        s.wait_topic(name, "MIRRORING", Duration::from_secs(60), |t| {
            all_partitions(t, PartitionState::Mirroring, 1)
        })
        .await;
    }
    let mirror = format!("{}/dr", s.ns);
    for topic in [&txn, &compact] {
        let (_, end) = watermarks(&source, topic, 0).unwrap();
        eventually(
            &format!("{topic} copied to its end"),
            Duration::from_secs(60),
            async || {
                recorded(bed, &mirror, topic, 0).position.is_some_and(|p| {
                    p.next_source_offset.max(p.source_position.unwrap_or(0)) >= end
                })
            },
        )
        .await;
    }
    // Unchanging from here on (the cleaner may still remove duplicates of the compacted source's
    // tail: each record read then is still one that was copied).
    let dest = bed.dest_config(DestUser::Admin);
    for topic in [&txn, &compact] {
        let source_records = read_all(&source, topic, 0, "read_committed").unwrap();
        let copies = read_all(&dest, topic, 0, "read_uncommitted").unwrap();
        assert!(copies.len() >= source_records.len() && !copies.is_empty());
        check_topic(bed, &s.ns, topic, &source_records, &copies);
    }
    // The table names the direction and how.
    let (code, stdout, stderr) = kubectl_mirror(
        bed,
        &s.ns,
        &[
            "translate",
            "dr",
            "--topic",
            "txn",
            "--partition",
            "0",
            "--offset",
            "0",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("TOPIC")
            && stdout.contains("DESTINATION-OFFSET")
            && stdout.contains("mapped"),
        "{stdout}"
    );
    // The verifier, on the same offset maps: every record matched.
    for name in ["txn", "compact"] {
        let (code, stdout, stderr) =
            kubectl_mirror(bed, &s.ns, &["verify", "dr", "--topic", name, "-o", "json"]);
        assert_eq!(code, 0, "verify {name}: {stdout}\n{stderr}");
        let doc: Value = serde_json::from_str(&stdout).unwrap();
        let report = &doc["topics"][0]["reports"][0];
        assert_eq!(report["offsetsIdentical"], false, "{report}");
        assert_eq!(report["missing"], 0, "{report}");
        assert!(report["matched"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(report["matched"], report["sourceRecords"], "{report}");
    }
    s.cleanup().await;
}
