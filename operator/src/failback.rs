//! Failback: a `ClusterMirror` with `spec.reverseOf` copies a failed-over topic back. For each
//! partition, PREPARING reads the forward mirror's last mirrored offset (LMO) from the state topic
//! on this mirror's *source* cluster (the old destination) and compares it with the log of this
//! mirror's destination (the old source):
//!
//! - it ends right after the LMO: the fetcher is seeded to continue after it, so only the delta
//!   written on the new primary crosses back, at identical offsets;
//! - it holds records after the LMO (written there after an immediate failover): those are
//!   **divergent**; they are copied to a quarantine topic first, reported, and the partition waits
//!   for `spec.divergencePolicy`: `KeepAndTranslate` (mirror after them, offsets translated
//!   through the map) or `Recreate` (delete and recreate the topic, then copy everything).

use std::sync::Arc;
use std::time::Duration;

use kmirror_crds::v1alpha1::{ClusterMirror, DivergencePolicy, MirrorTopic, PartitionState};
use kmirror_state::kafka_record::RecordData;
use kmirror_state::offset_map::{OffsetMap, Segment};
use kmirror_state::records::{
    Divergence, FetcherStatus, PartitionRecords, PositionRecord, RecordKind, StateKey,
    map_to_chunks, now_ms,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::clusters::Cluster;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kafka;
use crate::state_cache::StateCache;

/// Suffix of quarantine topics.
pub const QUARANTINE_SUFFIX: &str = ".kmirror-quarantine";

/// What PREPARING may do for a failback partition.
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    /// Ready to mirror (the fetcher is seeded, or starts from scratch after a recreate).
    Ready,
    /// Not yet: `note` says why; `divergence` is the record to persist.
    Blocked {
        /// Why.
        note: String,
        /// Divergence found.
        divergence: Option<Divergence>,
    },
    /// Never, without a human: the reason.
    Refused(String),
}

/// The reverse map seeding a failback fetcher: identity when the forward map was the identity
/// and the destination ends right after the LMO; otherwise one segment that continues after the
/// destination's log end.
pub fn reverse_map(
    forward: &OffsetMap,
    lmo_src: i64,
    lmo_dst: i64,
    destination_end: i64,
) -> OffsetMap {
    if forward.is_identity() && destination_end == lmo_src + 1 && lmo_src == lmo_dst {
        OffsetMap::identity()
    } else {
        OffsetMap::from_segments(vec![Segment {
            src: lmo_dst + 1,
            dst: destination_end,
        }])
        .expect("one segment")
    }
}

/// Reads the committed records of `[from, to)` of a partition.
fn read_range(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    from: i64,
    to: i64,
) -> std::result::Result<Vec<RecordData>, String> {
    if from >= to {
        return Ok(Vec::new());
    }
    let consumer: BaseConsumer<kmirror_state::quiet::QuietEof> = config
        .clone()
        .set("group.id", "kmirror-failback")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create_with_context(kmirror_state::quiet::QuietEof)
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(300)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(out),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(m)) => {
                if m.offset() >= to {
                    return Ok(out);
                }
                out.push(RecordData::from_message(&m));
                if m.offset() + 1 >= to {
                    return Ok(out);
                }
            }
        }
    }
    Err(format!(
        "reading {topic}[{partition}] {from}..{to} timed out"
    ))
}

/// Copies records to the quarantine partition, keeping key, value, headers and timestamp.
fn quarantine(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    records: &[RecordData],
) -> std::result::Result<(), String> {
    if records.is_empty() {
        return Ok(());
    }
    let producer: BaseProducer = config
        .clone()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.max.bytes", "16777216")
        .create()
        .map_err(|e| e.to_string())?;
    for r in records {
        let headers = r.headers.iter().fold(OwnedHeaders::new(), |h, (k, v)| {
            h.insert(Header {
                key: k,
                value: v.as_deref(),
            })
        });
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(partition)
            .headers(headers);
        if let Some(k) = &r.key {
            record = record.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            record = record.payload(v.as_slice());
        }
        if let Some(ts) = r.timestamp {
            record = record.timestamp(ts);
        }
        producer.send(record).map_err(|(e, _)| e.to_string())?;
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| e.to_string())
}

/// Prepares one partition of a reverse mirror.
#[allow(clippy::too_many_arguments)]
pub async fn prepare(
    ctx: &Arc<Context>,
    cm: &ClusterMirror,
    mt: &MirrorTopic,
    source: &Arc<Cluster>,
    destination: &Arc<Cluster>,
    cache: &Arc<StateCache>,
    partition: i32,
    own: &PartitionRecords,
) -> Result<Prepared> {
    let Some(forward) = cm.spec.reverse_of.clone() else {
        return Ok(Prepared::Ready);
    };
    let existing = own.state.as_ref().and_then(|s| s.divergence.clone());
    if existing.as_ref().is_some_and(|d| d.resolution.is_some()) || own.position.is_some() {
        return Ok(Prepared::Ready);
    }
    // The topic the forward mirror copied from is where this mirror writes.
    let forward_topic = mt.destination_topic().to_string();
    let forward_cache = ctx
        .states
        .get(source.key, &source.config, &cm.spec.state_topic)
        .await?;
    forward_cache.wait_loaded(Duration::from_secs(20)).await;
    let records = forward_cache.topic(&forward, &forward_topic);
    let Some(fwd) = records.get(&partition) else {
        return Ok(Prepared::Refused(format!(
            "no failover record of mirror {forward} for topic {forward_topic} partition {partition} in {} on the source: \
             nothing to fail back from",
            cm.spec.state_topic
        )));
    };
    let Some(state) = fwd
        .state
        .as_ref()
        .filter(|s| s.state == PartitionState::Stopped)
    else {
        let s = fwd
            .state
            .as_ref()
            .map_or(PartitionState::Unknown, |s| s.state);
        return Ok(Prepared::Refused(format!(
            "mirror {forward} still has {forward_topic}[{partition}] in {s}: fail it over before failing back (a mirror loop is refused)"
        )));
    };
    let lmo_src = state.last_mirrored_offset.unwrap_or(-1);
    let lmo_dst = state.last_mirrored_destination_offset.unwrap_or(lmo_src);
    let (_, end) = kafka::watermarks(destination, &forward_topic, partition).await?;
    if end < lmo_src + 1 {
        return Ok(Prepared::Refused(format!(
            "{forward_topic}[{partition}] ends at {end}, before the last mirrored offset {lmo_src}: the topic lost records since the failover"
        )));
    }
    let (config, t) = (destination.config.clone(), forward_topic.clone());
    let divergent =
        tokio::task::spawn_blocking(move || read_range(&config, &t, partition, lmo_src + 1, end))
            .await
            .map_err(|e| Error::State(e.to_string()))?
            .map_err(|message| Error::Kafka {
                cluster: "destination",
                message,
            })?;
    if !divergent.is_empty() {
        let mut d = existing.unwrap_or_else(|| Divergence {
            from_offset: divergent[0].offset,
            to_offset: end,
            quarantine_topic: format!("{forward_topic}{QUARANTINE_SUFFIX}"),
            quarantine_base: -1,
            records: divergent.len() as i64,
            quarantined: 0,
            resolution: None,
        });
        if d.quarantine_base < 0 {
            // Create the quarantine topic and note where copies start before copying anything.
            let partitions = kafka::describe_topic(destination, &forward_topic)
                .await?
                .map_or(partition + 1, |t| t.partitions as i32);
            kafka::create_topic(
                destination,
                &d.quarantine_topic,
                partitions,
                &Default::default(),
            )
            .await?;
            let (_, base) = kafka::watermarks(destination, &d.quarantine_topic, partition).await?;
            d.quarantine_base = base;
            return Ok(Prepared::Blocked {
                note: "quarantining divergent records".into(),
                divergence: Some(d),
            });
        }
        if d.quarantined < d.records {
            let (_, qend) = kafka::watermarks(destination, &d.quarantine_topic, partition).await?;
            let done = (qend - d.quarantine_base).max(0) as usize;
            let rest: Vec<RecordData> = divergent.iter().skip(done).cloned().collect();
            let (config, q) = (destination.config.clone(), d.quarantine_topic.clone());
            tokio::task::spawn_blocking(move || quarantine(&config, &q, partition, &rest))
                .await
                .map_err(|e| Error::State(e.to_string()))?
                .map_err(|message| Error::Kafka {
                    cluster: "destination",
                    message,
                })?;
            d.quarantined = d.records;
            tracing::info!(topic = %forward_topic, partition, records = d.records, quarantine = %d.quarantine_topic, "quarantined divergent records");
        }
        let note = format!(
            "divergence: offsets {}..{} of {forward_topic}[{partition}] were written after the failover ({} records, copied to {}); \
             set spec.divergencePolicy to Recreate or KeepAndTranslate",
            d.from_offset, d.to_offset, d.records, d.quarantine_topic
        );
        match mt.spec.divergence_policy {
            None | Some(DivergencePolicy::Recreate) => {
                return Ok(Prepared::Blocked {
                    note,
                    divergence: Some(d),
                });
            }
            Some(DivergencePolicy::KeepAndTranslate) => {
                d.resolution = Some("kept".into());
                seed(mt, source, cache, partition, fwd, lmo_src, lmo_dst, end).await?;
                return Ok(Prepared::Blocked {
                    note: "divergent records kept".into(),
                    divergence: Some(d),
                });
            }
        }
    }
    seed(mt, source, cache, partition, fwd, lmo_src, lmo_dst, end).await?;
    Ok(Prepared::Ready)
}

/// Writes the position (and map) a failback fetcher starts from.
#[allow(clippy::too_many_arguments)]
async fn seed(
    mt: &MirrorTopic,
    source: &Arc<Cluster>,
    cache: &Arc<StateCache>,
    partition: i32,
    forward: &PartitionRecords,
    lmo_src: i64,
    lmo_dst: i64,
    end: i64,
) -> Result<()> {
    let forward_map = forward.offset_map().unwrap_or_default();
    let map = reverse_map(&forward_map, lmo_src, lmo_dst, end);
    let source_cluster_id = source.cluster_id(Duration::from_secs(10)).await?;
    let source_topic_id = kafka::describe_topic(source, &mt.spec.source_topic)
        .await?
        .and_then(|t| t.topic_id);
    let mirror = crate::mirror_topic::mirror_key(mt);
    let chunks = map_to_chunks(&map);
    let position = PositionRecord {
        source_cluster_id,
        source_topic_id,
        destination_topic: mt.destination_topic().to_string(),
        last_mirrored_offset: lmo_dst,
        next_source_offset: lmo_dst + 1,
        destination_offset: end,
        map_chunks: chunks.len() as u32,
        offsets_identical: map.is_identity(),
        status: FetcherStatus::Stopped,
        writer: Some("kmirror-operator (failback)".into()),
        updated_at_ms: now_ms(),
        ..Default::default()
    };
    let mut batch = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        batch.push((
            StateKey::map_chunk(&mirror, &mt.spec.source_topic, partition, i as u32),
            Some(serde_json::to_vec(chunk).expect("chunks serialize")),
        ));
    }
    batch.push((
        StateKey::new(
            RecordKind::Position,
            &mirror,
            &mt.spec.source_topic,
            partition,
        ),
        Some(serde_json::to_vec(&position).expect("positions serialize")),
    ));
    cache.write_records(batch).await
}

/// Deletes and recreates the destination topic (divergence policy `Recreate`): waits until the
/// deletion is visible, then creates it empty with the source's partitions and configs.
pub async fn recreate_destination(
    cm: &ClusterMirror,
    mt: &MirrorTopic,
    source: &Arc<Cluster>,
    destination: &Arc<Cluster>,
    partitions: usize,
) -> Result<()> {
    let topic = mt.destination_topic();
    kafka::delete_topic(destination, topic).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while kafka::describe_topic(destination, topic).await?.is_some() {
        if std::time::Instant::now() > deadline {
            return Err(
                destination.error(format!("topic {topic} still exists 60s after its deletion"))
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let configs = if cm.spec.sync.topic_configs.enabled {
        let source_configs = kafka::topic_configs(source, &mt.spec.source_topic).await?;
        crate::topic_configs::wanted(&source_configs, &cm.spec.sync.topic_configs.exclude)
    } else {
        Default::default()
    };
    // A deletion can take a moment to settle on every broker: retry the creation briefly.
    let mut attempt = 0;
    loop {
        match kafka::create_topic(destination, topic, partitions as i32, &configs).await {
            Ok(()) => break,
            Err(e) if attempt < 20 => {
                attempt += 1;
                tracing::debug!(error = %e, "recreating {topic}: retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
    tracing::info!(
        topic,
        partitions,
        "recreated the destination topic (divergence policy Recreate)"
    );
    Ok(())
}
