//! Helpers for tests of the wire client (kmirror-wire) on the bed: settings from the bed's
//! rdkafka configurations, reading whole partitions as raw batches, copying batches by header
//! rewrite.

use std::collections::VecDeque;
use std::time::Duration;

use kmirror_wire::batch::{self, next_sequence};
use kmirror_wire::{
    Client, FetchOptions, FetchPartition, FetchedPartition, InFlightProduce, Isolation, KafkaCode,
    ProduceOptions, ProducerIdentity, RawBatch, RawEntry, Rewrite, WireConfig,
};
use rdkafka::ClientConfig;

use crate::Testbed;
use crate::kafka::{DestUser, create_topic};

/// The same settings for the wire client. rdkafka's `config_map` masks secrets, so the values
/// come from `get`.
pub fn wire_config(c: &ClientConfig) -> WireConfig {
    WireConfig::from_properties(&kmirror_state::connection::properties(c))
        .expect("the bed's client settings parse")
}

/// A connected wire client; panics naming the bootstrap servers.
pub async fn client(c: &ClientConfig) -> Client {
    Client::connect(wire_config(c))
        .await
        .unwrap_or_else(|e| panic!("connecting with {:?}: {e}", c.get("bootstrap.servers")))
}

/// Every complete batch of partition 0 from `from` up to the high watermark.
pub async fn fetch_all(
    client: &Client,
    topic: &str,
    from: i64,
    isolation: Isolation,
) -> (Vec<RawEntry>, Vec<FetchedPartition>) {
    fetch_partition(client, topic, 0, from, isolation).await
}

/// Every complete batch of `partition` from `from` up to the high watermark (the last stable
/// offset for `ReadCommitted`).
pub async fn fetch_partition(
    client: &Client,
    topic: &str,
    partition: i32,
    from: i64,
    isolation: Isolation,
) -> (Vec<RawEntry>, Vec<FetchedPartition>) {
    let options = FetchOptions {
        isolation,
        max_wait: Duration::from_millis(100),
        ..FetchOptions::default()
    };
    let mut entries = Vec::new();
    let mut responses = Vec::new();
    let mut offset = from;
    for _ in 0..1000 {
        let mut fetched = client
            .fetch(topic, &[FetchPartition::new(partition, offset)], &options)
            .await
            .expect("fetch");
        let p = fetched.pop().expect("one partition");
        assert_eq!(
            p.error,
            KafkaCode::NONE,
            "fetch {topic}[{partition}] at {offset}"
        );
        let end = match isolation {
            Isolation::ReadCommitted => p.last_stable_offset,
            Isolation::ReadUncommitted => p.high_watermark,
        };
        for entry in p.batches() {
            let entry = entry.expect("well-formed batch");
            offset = entry.next_offset();
            entries.push(entry);
        }
        responses.push(p);
        if offset >= end {
            return (entries, responses);
        }
    }
    panic!("fetching {topic} did not reach its end");
}

/// The magic v2 batches of `entries` (panics on old formats).
pub fn v2(entries: &[RawEntry]) -> Vec<RawBatch> {
    entries
        .iter()
        .map(|e| match e {
            RawEntry::Batch(b) => b.clone(),
            RawEntry::Legacy(m) => panic!("unexpected magic {} message", m.magic),
        })
        .collect()
}

/// Destination topic for raw batches: the broker keeps the producer's codec.
pub async fn destination_topic(bed: &Testbed, topic: &str) {
    create_topic(
        &bed.dest_config(DestUser::Admin),
        topic,
        1,
        &[
            ("compression.type", "producer"),
            ("max.message.bytes", "4000000"),
        ],
    )
    .await
    .expect("destination topic");
}

/// The destination as the mirror principal over SCRAM-SHA-512.
pub fn mirror_config(bed: &Testbed) -> ClientConfig {
    bed.dest_config_with(DestUser::Mirror, "SCRAM-SHA-512")
}

/// Rewrites and produces `batches` to `topic`-0 with at most five in flight; returns the
/// offsets the broker assigned and the sequence after the last batch.
pub async fn copy_batches(
    dest: &Client,
    topic: &str,
    producer: ProducerIdentity,
    first_sequence: i32,
    batches: &[RawBatch],
) -> (Vec<i64>, i32) {
    let mut sequence = first_sequence;
    let mut offsets = Vec::new();
    let mut in_flight = VecDeque::new();
    for b in batches {
        let rewritten = batch::rewrite(
            &b.bytes,
            &Rewrite {
                producer_id: producer.id,
                producer_epoch: producer.epoch,
                base_sequence: sequence,
            },
        )
        .expect("rewrite");
        sequence = next_sequence(sequence, b.header.record_count);
        if in_flight.len() == 5 {
            let pending: InFlightProduce = in_flight.pop_front().unwrap();
            offsets.push(pending.wait().await.expect("produce").base_offset);
        }
        in_flight.push_back(
            dest.send_produce(topic, 0, rewritten, &ProduceOptions::default())
                .await
                .expect("send"),
        );
    }
    for pending in in_flight {
        offsets.push(pending.wait().await.expect("produce").base_offset);
    }
    (offsets, sequence)
}
