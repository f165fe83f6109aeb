//! Raw record batches through the wire client (kmirror-wire) on the real brokers: every codec
//! copied by header rewrite and read back with librdkafka, transactions with aborts, pipelined
//! batches and broker-side deduplication, fetch and produce errors, what a CreateTime topic does
//! with LogAppendTime batches, and old message formats.

use std::time::Duration;

use bytes::Bytes;
use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::{
    DestUser, TestRecord, create_topic, mixed_records, produce_all, read_all, unique_name,
};
use kmirror_e2e::wire::{client, copy_batches, destination_topic, fetch_all, mirror_config, v2};
use kmirror_wire::batch;
use kmirror_wire::records::decode_batch;
use kmirror_wire::{
    BatchHeader, Codec, FetchOptions, FetchPartition, Isolation, KafkaCode, OffsetSpec,
    ProduceOptions, RawBatch, RawEntry, Rewrite, WireError,
};
use rdkafka::ClientConfig;

fn records(n: usize, seed: u64) -> Vec<TestRecord> {
    mixed_records(n, 1, 0, seed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_copies_raw_batches_of_every_codec() {
    let bed = Testbed::get();
    let source = client(&bed.source_config()).await;
    let dest = client(&mirror_config(bed)).await;
    for (codec_name, codec) in [
        ("lz4", Codec::Lz4),
        ("zstd", Codec::Zstd),
        ("gzip", Codec::Gzip),
        ("snappy", Codec::Snappy),
    ] {
        let topic = unique_name(&format!("wire-codec-{codec_name}"));
        create_topic(&bed.source_config(), &topic, 1, &[])
            .await
            .unwrap();
        destination_topic(bed, &topic).await;
        let produced = records(3000, 7);
        produce_all(
            &bed.source_config(),
            &topic,
            &produced,
            &[("compression.type", codec_name), ("linger.ms", "50")],
        )
        .unwrap();

        let (entries, _) = fetch_all(&source, &topic, 0, Isolation::ReadCommitted).await;
        let batches = v2(&entries);
        assert!(batches.len() > 1, "{codec_name}: several batches");
        let mut next = 0;
        let mut decoded = Vec::new();
        for b in &batches {
            let h = batch::verify_crc(&b.bytes).expect("source CRC");
            assert_eq!(h, b.header);
            assert_eq!(h.base_offset, next, "{codec_name}: batches are contiguous");
            assert_eq!(h.magic, 2);
            assert_eq!(h.codec(), codec, "{codec_name}");
            assert!(h.is_dense() && !h.is_transactional() && !h.is_control());
            assert!(h.producer_id >= 0, "rdkafka's idempotent producer id");
            assert!(h.max_timestamp >= h.base_timestamp);
            next = h.next_offset();
            decoded.extend(decode_batch(&b.bytes).expect("decode").1);
        }
        assert_eq!(next, 3000);
        for (r, want) in decoded.iter().zip(&produced) {
            assert_eq!(r.key.as_deref(), want.key.as_deref());
            assert_eq!(r.value.as_deref(), want.value.as_deref());
            let headers: Vec<(String, Vec<u8>)> = r
                .headers
                .iter()
                .map(|h| {
                    (
                        String::from_utf8(h.key.to_vec()).unwrap(),
                        h.value.clone().unwrap_or_default().to_vec(),
                    )
                })
                .collect();
            assert_eq!(headers, want.headers);
        }

        let producer = dest.init_producer_id().await.expect("producer id");
        let (offsets, _) = copy_batches(&dest, &topic, producer, 0, &batches).await;
        let expected: Vec<i64> = batches.iter().map(|b| b.header.base_offset).collect();
        assert_eq!(offsets, expected, "{codec_name}: identical offsets");

        // The destination stored the batches as they were: codec and record counts.
        let (dest_entries, _) = fetch_all(&dest, &topic, 0, Isolation::ReadCommitted).await;
        let dest_batches = v2(&dest_entries);
        let shape = |bs: &[RawBatch]| -> Vec<(i64, i32, Codec)> {
            bs.iter()
                .map(|b| {
                    (
                        b.header.base_offset,
                        b.header.record_count,
                        b.header.codec(),
                    )
                })
                .collect()
        };
        assert_eq!(shape(&dest_batches), shape(&batches), "{codec_name}");
        assert!(
            dest_batches
                .iter()
                .all(|b| b.header.producer_id == producer.id)
        );

        // librdkafka reads the same records at the same offsets.
        let src = read_all(&bed.source_config(), &topic, 0, "read_committed").unwrap();
        let dst = read_all(
            &bed.dest_config(DestUser::Admin),
            &topic,
            0,
            "read_committed",
        )
        .unwrap();
        assert_eq!(src.len(), 3000);
        assert_eq!(
            src, dst,
            "{codec_name}: key, value, headers, timestamp and offset"
        );
        eprintln!(
            "{codec_name}: {} batches, {} bytes copied",
            batches.len(),
            batches.iter().map(|b| b.bytes.len()).sum::<usize>()
        );
    }
}

/// Produces transactions with rdkafka: (records, commit?) each.
fn transactions(config: &ClientConfig, topic: &str, txns: &[(usize, bool)]) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = config
        .clone()
        .set("transactional.id", unique_name("wire-txn"))
        .set("compression.type", "lz4")
        .create()
        .unwrap();
    let t = Duration::from_secs(30);
    producer.init_transactions(t).unwrap();
    let mut n = 0;
    for &(count, commit) in txns {
        producer.begin_transaction().unwrap();
        for _ in 0..count {
            let value = format!("txn-record-{n}");
            n += 1;
            producer
                .send(
                    BaseRecord::<(), str>::to(topic)
                        .partition(0)
                        .payload(&value),
                )
                .map_err(|(e, _)| e)
                .unwrap();
        }
        producer.flush(t).unwrap();
        if commit {
            producer.commit_transaction(t).unwrap();
        } else {
            producer.abort_transaction(t).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_sees_transactions_and_aborts() {
    let bed = Testbed::get();
    let topic = unique_name("wire-txn");
    create_topic(&bed.source_config(), &topic, 1, &[])
        .await
        .unwrap();
    transactions(
        &bed.source_config(),
        &topic,
        &[(5, true), (3, false), (4, true)],
    );
    let source = client(&bed.source_config()).await;

    // 5 records + commit marker, 3 aborted + abort marker, 4 + commit marker.
    let latest = |isolation| {
        let source = source.clone();
        let topic = topic.clone();
        async move {
            source
                .list_offsets(&topic, &[(0, OffsetSpec::Latest)], isolation)
                .await
                .unwrap()[0]
                .offset
        }
    };
    assert_eq!(
        latest(Isolation::ReadCommitted).await,
        15,
        "last stable offset"
    );
    assert_eq!(
        latest(Isolation::ReadUncommitted).await,
        15,
        "high watermark"
    );

    let (committed, responses) = fetch_all(&source, &topic, 0, Isolation::ReadCommitted).await;
    let aborted: Vec<_> = responses.iter().flat_map(|r| r.aborted.clone()).collect();
    assert_eq!(aborted.len(), 1, "one aborted transaction: {aborted:?}");
    assert_eq!(aborted[0].first_offset, 6);
    let batches = v2(&committed);
    let shape: Vec<(i64, i32, bool, bool)> = batches
        .iter()
        .map(|b| {
            let h = &b.header;
            (
                h.base_offset,
                h.record_count,
                h.is_transactional(),
                h.is_control(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 5, true, false),
            (5, 1, true, true),
            (6, 3, true, false),
            (9, 1, true, true),
            (10, 4, true, false),
            (14, 1, true, true),
        ],
        "the aborted batch is returned under read_committed, listed as aborted"
    );
    assert_eq!(aborted[0].producer_id, batches[2].header.producer_id);
    let (_, markers) = decode_batch(&batches[3].bytes).unwrap();
    assert_eq!(
        markers[0].control_type(),
        Some(kmirror_wire::records::ControlType::Abort)
    );
    let (_, markers) = decode_batch(&batches[1].bytes).unwrap();
    assert_eq!(
        markers[0].control_type(),
        Some(kmirror_wire::records::ControlType::Commit)
    );
    let (_, responses) = fetch_all(&source, &topic, 0, Isolation::ReadUncommitted).await;
    assert!(responses.iter().all(|r| r.aborted.is_empty()));

    // Committed data batches rewrite into plain idempotent batches; control batches refuse.
    let rw = Rewrite {
        producer_id: 1,
        producer_epoch: 0,
        base_sequence: 0,
    };
    let out = batch::rewrite(&batches[0].bytes, &rw).unwrap();
    let h = BatchHeader::parse(&out).unwrap();
    assert!(!h.is_transactional());
    assert!(matches!(
        batch::rewrite(&batches[1].bytes, &rw),
        Err(kmirror_wire::BatchError::Control { base_offset: 5 })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_pipelines_batches_and_the_broker_deduplicates_resends() {
    let bed = Testbed::get();
    let topic = unique_name("wire-seq");
    destination_topic(bed, &topic).await;
    let dest = client(&mirror_config(bed)).await;
    let producer = dest.init_producer_id().await.unwrap();
    let batches: Vec<Bytes> = (0..6)
        .map(|i| {
            let recs: Vec<_> = (0..10)
                .map(|j| kmirror_wire::records::Record {
                    offset: 0,
                    timestamp: 1_700_000_000_000 + j,
                    key: Some(Bytes::from(format!("k{i}-{j}"))),
                    value: Some(Bytes::from(format!("v{i}-{j}"))),
                    headers: vec![],
                })
                .collect();
            kmirror_wire::records::encode_batch(
                &recs,
                Codec::Lz4,
                0,
                kmirror_wire::records::BatchProducer {
                    producer_id: producer.id,
                    producer_epoch: producer.epoch,
                    base_sequence: i * 10,
                },
            )
            .unwrap()
        })
        .collect();
    // Five in flight, then the sixth.
    let mut in_flight = Vec::new();
    for b in &batches[..5] {
        in_flight.push(
            dest.send_produce(&topic, 0, b.clone(), &ProduceOptions::default())
                .await
                .unwrap(),
        );
    }
    let mut offsets = Vec::new();
    for p in in_flight {
        offsets.push(p.wait().await.unwrap().base_offset);
    }
    assert_eq!(offsets, vec![0, 10, 20, 30, 40]);
    let produced = dest
        .produce(&topic, 0, batches[5].clone(), &ProduceOptions::default())
        .await
        .unwrap();
    assert_eq!(produced.base_offset, 50);

    // The same batch again: a duplicate, answered with its original offset, not appended.
    let again = dest
        .produce(&topic, 0, batches[4].clone(), &ProduceOptions::default())
        .await
        .unwrap();
    assert_eq!(
        again.base_offset, 40,
        "duplicate answered with the first offset"
    );
    let end = dest
        .list_offsets(
            &topic,
            &[(0, OffsetSpec::Latest)],
            Isolation::ReadUncommitted,
        )
        .await
        .unwrap();
    assert_eq!(end[0].offset, 60, "nothing appended twice");

    // A gap in the sequence is refused.
    let skipped = kmirror_wire::batch::rewrite(
        &batches[0],
        &Rewrite {
            producer_id: producer.id,
            producer_epoch: producer.epoch,
            base_sequence: 70,
        },
    )
    .unwrap();
    let err = dest
        .produce(&topic, 0, skipped, &ProduceOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            WireError::Produce {
                error: KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_reports_fetch_and_produce_errors() {
    let bed = Testbed::get();
    let source = client(&bed.source_config()).await;
    let topic = unique_name("wire-errors");
    create_topic(&bed.source_config(), &topic, 1, &[])
        .await
        .unwrap();
    produce_all(&bed.source_config(), &topic, &records(3, 2), &[]).unwrap();
    let fetched = source
        .fetch(
            &topic,
            &[FetchPartition::new(0, 100)],
            &FetchOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(fetched[0].error, KafkaCode::OFFSET_OUT_OF_RANGE);
    assert_eq!(
        fetched[0].high_watermark, -1,
        "no watermark with this error"
    );

    // The last fetched epoch reaches the leader: the current one is fine at the log end, one
    // the log never had cannot be placed (a real divergence needs a leader change, which a
    // one-broker bed cannot make).
    let epoch = source.topic(&topic).await.unwrap().partitions[&0].leader_epoch;
    let at_end = |last_fetched_epoch| FetchPartition {
        last_fetched_epoch,
        ..FetchPartition::new(0, 3)
    };
    let fetched = source
        .fetch(
            &topic,
            &[at_end(None)],
            &FetchOptions {
                max_wait: Duration::from_millis(10),
                ..FetchOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (fetched[0].error, fetched[0].high_watermark),
        (KafkaCode::NONE, 3)
    );
    for (last, expected) in [
        (epoch, KafkaCode::NONE),
        (epoch + 5, KafkaCode::OFFSET_OUT_OF_RANGE),
    ] {
        let fetched = source
            .fetch(
                &topic,
                &[at_end(Some(last))],
                &FetchOptions {
                    max_wait: Duration::from_millis(10),
                    ..FetchOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(fetched[0].error, expected, "last fetched epoch {last}");
        assert_eq!(fetched[0].diverging_epoch, None);
    }
    let err = source.topic("wire-no-such-topic").await.unwrap_err();
    assert!(
        err.to_string().contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{err}"
    );

    // A batch over the destination topic's max.message.bytes.
    let dest_topic = unique_name("wire-small");
    create_topic(
        &bed.dest_config(DestUser::Admin),
        &dest_topic,
        1,
        &[("max.message.bytes", "2000")],
    )
    .await
    .unwrap();
    let dest = client(&mirror_config(bed)).await;
    let producer = dest.init_producer_id().await.unwrap();
    let big = kmirror_wire::records::encode_batch(
        &[kmirror_wire::records::Record {
            offset: 0,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(vec![7u8; 5000])),
            headers: vec![],
        }],
        Codec::None,
        0,
        kmirror_wire::records::BatchProducer {
            producer_id: producer.id,
            producer_epoch: producer.epoch,
            base_sequence: 0,
        },
    )
    .unwrap();
    let err = dest
        .produce(&dest_topic, 0, big, &ProduceOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            WireError::Produce {
                error: KafkaCode::MESSAGE_TOO_LARGE,
                ..
            }
        ),
        "{err}"
    );
}

/// What a CreateTime destination does with a batch whose LogAppendTime bit is set (a raw copy
/// from a LogAppendTime source topic): it accepts it, clears the bit, and readers then see the
/// records' own create times instead of the source's append time. Such batches must take the
/// record path to keep the timestamps readers saw on the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_log_append_time_batches_on_a_create_time_topic() {
    let bed = Testbed::get();
    let topic = unique_name("wire-lat");
    destination_topic(bed, &topic).await;
    let dest = client(&mirror_config(bed)).await;
    let producer = dest.init_producer_id().await.unwrap();
    let recs: Vec<_> = (0..3)
        .map(|j| kmirror_wire::records::Record {
            offset: 0,
            timestamp: 1_700_000_000_000 + j,
            key: None,
            value: Some(Bytes::from(format!("v{j}"))),
            headers: vec![],
        })
        .collect();
    let plain = kmirror_wire::records::encode_batch(
        &recs,
        Codec::Lz4,
        0,
        kmirror_wire::records::BatchProducer {
            producer_id: producer.id,
            producer_epoch: producer.epoch,
            base_sequence: 0,
        },
    )
    .unwrap();
    let mut b = plain.to_vec();
    let attributes = i16::from_be_bytes([b[21], b[22]]) | (1 << 3);
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let (_, as_sent) = decode_batch(&Bytes::from(b.clone())).unwrap();
    assert!(
        as_sent.iter().all(|r| r.timestamp == 1_700_000_000_002),
        "LogAppendTime: every record reads the batch's max timestamp"
    );
    let produced = dest
        .produce(&topic, 0, Bytes::from(b), &ProduceOptions::default())
        .await
        .expect("accepted");
    assert_eq!(produced.base_offset, 0);
    let (entries, _) = fetch_all(&dest, &topic, 0, Isolation::ReadUncommitted).await;
    let stored = &v2(&entries)[0];
    assert_eq!(
        stored.header.timestamp_type(),
        kmirror_wire::batch::TimestampType::CreateTime,
        "the broker cleared the bit"
    );
    assert_eq!(stored.header.codec(), Codec::Lz4);
    let (_, read) = decode_batch(&stored.bytes).unwrap();
    let times: Vec<i64> = read.iter().map(|r| r.timestamp).collect();
    assert_eq!(
        times,
        vec![1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002],
        "readers see the create times, not the append time"
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Kafka 2.8 keeps a topic pinned to message format 0.10 in magic 1: the fetch returns those
/// messages as they are (compressed wrappers included), and `decode_legacy` reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_decodes_old_message_formats() {
    let bed = Testbed::get();
    let Some(bootstrap) = bed.opt_var("KMIRROR_COMPAT28_BOOTSTRAP") else {
        eprintln!("the Kafka 2.8 source is not running (up --compat); nothing to check");
        return;
    };
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    let topic = unique_name("wire-magic1");
    create_topic(&config, &topic, 1, &[("message.format.version", "0.10.2")])
        .await
        .unwrap();
    let started_ms = now_ms();
    let mut produced = records(400, 11);
    for r in &mut produced {
        r.headers.clear(); // magic 1 has no headers (and no idempotent producers)
    }
    produce_all(
        &config,
        &topic,
        &produced[..200],
        &[("compression.type", "lz4"), ("enable.idempotence", "false")],
    )
    .unwrap();
    produce_all(
        &config,
        &topic,
        &produced[200..],
        &[
            ("compression.type", "none"),
            ("enable.idempotence", "false"),
        ],
    )
    .unwrap();

    let c = client(&config).await;
    let (entries, _) = fetch_all(&c, &topic, 0, Isolation::ReadUncommitted).await;
    let mut decoded = Vec::new();
    for e in &entries {
        match e {
            RawEntry::Legacy(m) => {
                assert_eq!(m.magic, 1);
                decoded.extend(kmirror_wire::decode_legacy(m).expect("decode"));
            }
            RawEntry::Batch(b) => panic!(
                "expected magic 1, got a v2 batch at {}",
                b.header.base_offset
            ),
        }
    }
    // librdkafka (as built here) answers this topic with NOT_IMPLEMENTED, so the records are
    // compared with what was produced; Kafka's own console consumer reads the same.
    assert_eq!(decoded.len(), 400);
    let window = started_ms - 1000..=now_ms() + 1000;
    for (i, (d, p)) in decoded.iter().zip(&produced).enumerate() {
        assert_eq!(d.offset, i as i64);
        assert_eq!(d.key.as_deref(), p.key.as_deref());
        assert_eq!(d.value.as_deref(), p.value.as_deref());
        assert!(window.contains(&d.timestamp), "create time of record {i}");
    }
    let wrappers = entries
        .iter()
        .filter(|e| matches!(e, RawEntry::Legacy(m) if m.attributes & 7 != 0))
        .count();
    assert!(wrappers > 0, "the lz4 records came in compressed wrappers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_asks_where_a_leader_epoch_ends() {
    let bed = Testbed::get();
    let source = client(&bed.source_config()).await;
    let topic = unique_name("wire-epochs");
    create_topic(&bed.source_config(), &topic, 2, &[])
        .await
        .unwrap();
    produce_all(&bed.source_config(), &topic, &records(40, 3), &[]).unwrap();
    let (_, high) = kmirror_e2e::kafka::watermarks(&bed.source_config(), &topic, 0).unwrap();
    let epoch = source.topic(&topic).await.unwrap().partitions[&0].leader_epoch;
    let ends = source
        .offset_for_leader_epoch(&topic, &[(0, epoch), (1, epoch)])
        .await
        .expect("the broker answers OffsetForLeaderEpoch");
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0].partition, 0);
    assert_eq!(ends[0].error, KafkaCode::NONE, "{ends:?}");
    assert_eq!(ends[0].leader_epoch, epoch, "{ends:?}");
    assert_eq!(
        ends[0].end_offset, high,
        "the current epoch ends at the log end"
    );
    assert_eq!(ends[1].partition, 1);
}

/// A batch of `n` records of producer `(id, epoch)` from `base_sequence`, values tagged `tag`.
fn sequenced_batch(tag: &str, n: i64, producer: (i64, i16), base_sequence: i32) -> Bytes {
    let recs: Vec<_> = (0..n)
        .map(|j| kmirror_wire::records::Record {
            offset: j,
            timestamp: 1_700_000_000_000 + j,
            key: Some(Bytes::from(format!("k{j}"))),
            value: Some(Bytes::from(format!("{tag}-{j}"))),
            headers: vec![],
        })
        .collect();
    kmirror_wire::records::encode_batch(
        &recs,
        Codec::None,
        0,
        kmirror_wire::records::BatchProducer {
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence,
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_goes_on_as_the_last_batchs_producer_makes_the_broker_refuse_late_batches_of_the_one_before()
 {
    let bed = Testbed::get();
    let topic = unique_name("wire-last-writer");
    destination_topic(bed, &topic).await;
    let dest = client(&mirror_config(bed)).await;
    let opts = ProduceOptions::default();
    let end = || async {
        dest.list_offsets(
            &topic,
            &[(0, OffsetSpec::Latest)],
            Isolation::ReadUncommitted,
        )
        .await
        .unwrap()[0]
            .offset
    };
    // Nothing written yet: nothing to go on as.
    let none = dest
        .last_writers(&topic, &[(0, 0)].into_iter().collect())
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:?}");

    // The writer before: 10 records, then two batches it still has under way (not yet sent).
    let before = dest.init_producer_id().await.unwrap();
    let id = (before.id, before.epoch);
    let first = dest
        .produce(&topic, 0, sequenced_batch("old", 10, id, 0), &opts)
        .await
        .unwrap();
    assert_eq!(first.base_offset, 0);
    let late_same = sequenced_batch("old", 10, id, 10);
    let late_other = sequenced_batch("old", 4, id, 10);

    // Its successor reads the last batch and goes on as that producer.
    let writers = dest
        .last_writers(&topic, &[(0, end().await)].into_iter().collect())
        .await
        .unwrap();
    let w = writers[&0];
    assert_eq!((w.producer, w.next_sequence), (before, 10), "{writers:?}");
    let second = dest
        .produce(
            &topic,
            0,
            sequenced_batch(
                "new",
                10,
                (w.producer.id, w.producer.epoch),
                w.next_sequence,
            ),
            &opts,
        )
        .await
        .unwrap();
    assert_eq!(second.base_offset, 10);
    let third = dest
        .produce(
            &topic,
            0,
            sequenced_batch("new", 5, (w.producer.id, w.producer.epoch), 20),
            &opts,
        )
        .await
        .unwrap();
    assert_eq!(third.base_offset, 20);
    assert_eq!(end().await, 25);

    // The late batches of the writer before arrive now: neither is appended.
    let other = dest.produce(&topic, 0, late_other, &opts).await;
    assert!(
        matches!(&other, Err(WireError::Produce { error, .. })
            if *error == KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        "a late batch with an older sequence is refused: {other:?}"
    );
    // Same sequences as one of the successor's batches: answered as that duplicate, not
    // appended (and at the offset the successor's batch has).
    let same = dest.produce(&topic, 0, late_same, &opts).await.unwrap();
    assert_eq!(same.base_offset, 10);
    assert_eq!(end().await, 25, "nothing of the writer before was appended");

    // Without the continuation (the successor a new producer), the late batch of the writer
    // before is appended after the successor's records: what the continuation prevents.
    let topic2 = unique_name("wire-last-writer-new");
    destination_topic(bed, &topic2).await;
    let old = dest.init_producer_id().await.unwrap();
    let old = (old.id, old.epoch);
    dest.produce(&topic2, 0, sequenced_batch("old", 10, old, 0), &opts)
        .await
        .unwrap();
    let fresh = dest.init_producer_id().await.unwrap();
    dest.produce(
        &topic2,
        0,
        sequenced_batch("new", 3, (fresh.id, fresh.epoch), 0),
        &opts,
    )
    .await
    .unwrap();
    let appended = dest
        .produce(&topic2, 0, sequenced_batch("old", 10, old, 10), &opts)
        .await
        .unwrap();
    assert_eq!(
        appended.base_offset, 13,
        "a late batch of the writer before lands after a new producer's records"
    );
}
