//! The replication loop: source partitions in, destination partitions out, at the offsets the
//! offset map dictates, with the destination log as the only checkpoint.
//!
//! Start-up, per owned partition:
//! 1. check the source cluster ID and topic ID against what the state topic recorded;
//! 2. wait until the destination log end is stable (a previous incarnation's last requests
//!    drain) and derive the next source offset from it through the offset map;
//! 3. compare the last destination record with its source record (a foreign write fails);
//! 4. on an empty destination whose source log starts above 0: prefix alignment.
//!
//! Then the loop: poll a batch, record gaps in the map (persisted before the records that
//! follow them), produce with an idempotent producer, check every delivered offset, persist
//! positions periodically, re-check the source identity, honour the throttle and SIGTERM.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use crate::config::{FetcherConfig, TruncationPolicy};
use crate::cursor::{Accept, Cursor};
use crate::metrics::{FetcherMetrics, PartitionLabels};
use crate::throttle::Throttle;
use kmirror_state::kafka_admin::describe_topics;
use kmirror_state::kafka_record::{PLACEHOLDER_HEADER, read_record_at, timestamp_ms};
use kmirror_state::offset_map::OffsetMap;
use kmirror_state::records::{
    FetcherError, FetcherStatus, PartitionRecords, PositionRecord, PrefixAlignment, RecordKind,
    StateKey, StopReason, map_to_chunks, now_ms,
};
use kmirror_state::store::{self, StateWriter};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(15);
const MAX_BATCH_RECORDS: usize = 5000;
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// Why the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Clean shutdown (SIGTERM): everything produced is confirmed and the position persisted.
    Stopped,
    /// Stopped for a reason; exit with its code.
    Failed {
        /// The reason.
        reason: StopReason,
        /// Human-readable explanation.
        message: String,
    },
}

impl Outcome {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Stopped => 0,
            Outcome::Failed { reason, .. } => reason.exit_code(),
        }
    }
}

/// Liveness and readiness, shared with the HTTP endpoints.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    heartbeat_ms: AtomicI64,
}

impl Health {
    /// Start-up checks passed and the loop runs.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The loop made progress within `max_age`.
    pub fn is_alive(&self, max_age: Duration) -> bool {
        let last = self.heartbeat_ms.load(Ordering::Relaxed);
        last == 0 || now_ms() - last <= max_age.as_millis() as i64
    }

    fn beat(&self) {
        self.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
    }
}

/// What the loop shares with the rest of the process.
#[derive(Clone, Default)]
pub struct Handles {
    /// Set to stop cleanly.
    pub shutdown: Arc<AtomicBool>,
    /// Metrics.
    pub metrics: Arc<FetcherMetrics>,
    /// Health.
    pub health: Arc<Health>,
}

#[derive(Debug)]
struct Stop {
    reason: StopReason,
    message: String,
}

impl Stop {
    fn new(reason: StopReason, message: impl Into<String>) -> Stop {
        Stop {
            reason,
            message: message.into(),
        }
    }
    fn error(message: impl Into<String>) -> Stop {
        Stop::new(StopReason::Error, message)
    }
}

impl<E: std::fmt::Display> From<E> for Stop {
    fn from(e: E) -> Stop {
        Stop::error(e.to_string())
    }
}

/// One produced record awaiting its delivery report.
struct Pending {
    partition: i32,
    expected_dst: i64,
    bytes: usize,
    timestamp: Option<i64>,
}

struct Delivery {
    pending: Pending,
    result: Result<i64, String>,
}

/// Collects delivery reports; the loop drains them.
#[derive(Default)]
struct DeliveryContext {
    deliveries: Mutex<Vec<Delivery>>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, pending: Box<Pending>) {
        let result = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.to_string()),
        };
        self.deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Delivery {
                pending: *pending,
                result,
            });
    }
}

struct Unit {
    cursor: Cursor,
    labels: PartitionLabels,
    /// Map chunks already persisted in full (only the last one is rewritten).
    sealed_chunks: usize,
    /// Chunk records persisted so far.
    persisted_chunks: usize,
    prefix: Option<PrefixAlignment>,
    high_watermark: Option<i64>,
    /// Next source offset accounting for offsets the consumer skipped (transaction markers,
    /// aborted records) once everything before them is confirmed.
    source_position: i64,
    lag_seconds: f64,
    last_timestamp: Option<i64>,
    records: u64,
    position_dirty: bool,
}

struct Fetcher<'a> {
    config: &'a FetcherConfig,
    handles: &'a Handles,
    source_config: ClientConfig,
    destination_config: ClientConfig,
    consumer: BaseConsumer,
    producer: BaseProducer<DeliveryContext>,
    source_admin: AdminClient<DefaultClientContext>,
    state: StateWriter,
    source_cluster_id: String,
    source_topic_id: Option<String>,
    units: BTreeMap<i32, Unit>,
    throttle: Option<Throttle>,
}

/// Runs the fetcher until SIGTERM (via `handles.shutdown`) or a stop reason.
pub fn run(config: &FetcherConfig, handles: &Handles) -> Outcome {
    let mut fetcher = match Fetcher::start(config, handles) {
        Ok(f) => f,
        Err(stop) => {
            tracing::error!(reason = ?stop.reason, "{}", stop.message);
            if stop.reason != StopReason::Error
                && let Err(e) = record_start_failure(config, &stop)
            {
                tracing::warn!(error = %e.message, "could not record the failure in the state topic");
            }
            return Outcome::Failed {
                reason: stop.reason,
                message: stop.message,
            };
        }
    };
    let outcome = fetcher.mirror();
    fetcher.finish(outcome)
}

/// Marks the recorded positions of the owned partitions as failed with the stop reason, so the
/// operator (and a human) can read why the fetcher refused to start.
fn record_start_failure(config: &FetcherConfig, stop: &Stop) -> Result<(), Stop> {
    let destination = config.destination.client_config()?;
    let records = store::load(
        &destination,
        &config.state_topic,
        |k| {
            k.kind == RecordKind::Position
                && k.mirror == config.mirror
                && k.topic == config.source_topic
        },
        Duration::from_secs(30),
    )?;
    let writer = StateWriter::new(&destination, &config.state_topic)?;
    for &partition in &config.partitions {
        let key = (
            config.mirror.clone(),
            config.source_topic.clone(),
            partition,
        );
        let mut position = records
            .get(&key)
            .and_then(|r| r.position.clone())
            .unwrap_or_else(|| PositionRecord {
                destination_topic: config.destination_topic.clone(),
                last_mirrored_offset: -1,
                ..Default::default()
            });
        position.status = FetcherStatus::Failed;
        position.error = Some(FetcherError {
            reason: stop.reason,
            message: stop.message.clone(),
        });
        position.writer = config.writer.clone();
        position.updated_at_ms = now_ms();
        let key = StateKey::new(
            RecordKind::Position,
            &config.mirror,
            &config.source_topic,
            partition,
        );
        writer.send(&key, Some(&position))?;
    }
    writer.flush(Duration::from_secs(10))?;
    Ok(())
}

fn source_consumer_config(config: &FetcherConfig) -> Result<ClientConfig, Stop> {
    let mut c = config.source.client_config()?;
    set_default(
        &mut c,
        "group.id",
        &format!("kmirror-fetcher.{}", config.mirror),
    );
    set_default(&mut c, "fetch.max.bytes", "52428800");
    set_default(&mut c, "max.partition.fetch.bytes", "8388608");
    set_default(&mut c, "fetch.wait.max.ms", "100");
    set_default(&mut c, "queued.max.messages.kbytes", "65536");
    c.set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "error")
        .set("isolation.level", config.isolation.as_kafka_str());
    Ok(c)
}

fn producer_config(config: &FetcherConfig) -> Result<ClientConfig, Stop> {
    let mut c = config.destination.client_config()?;
    set_default(&mut c, "linger.ms", "5");
    set_default(&mut c, "batch.size", "1000000");
    set_default(&mut c, "batch.num.messages", "10000");
    set_default(&mut c, "compression.type", "lz4");
    set_default(&mut c, "message.max.bytes", "16777216");
    set_default(&mut c, "queue.buffering.max.kbytes", "131072");
    set_default(&mut c, "message.timeout.ms", "300000");
    c.set("enable.idempotence", "true").set("acks", "all");
    Ok(c)
}

fn set_default(c: &mut ClientConfig, key: &str, value: &str) {
    if c.get(key).is_none() {
        c.set(key, value);
    }
}

impl<'a> Fetcher<'a> {
    fn start(config: &'a FetcherConfig, handles: &'a Handles) -> Result<Fetcher<'a>, Stop> {
        let source_config = source_consumer_config(config)?;
        let destination_config = config.destination.client_config()?;
        let consumer: BaseConsumer = source_config.create()?;
        let producer: BaseProducer<DeliveryContext> =
            producer_config(config)?.create_with_context(DeliveryContext::default())?;
        let source_admin: AdminClient<DefaultClientContext> =
            config.source.client_config()?.create()?;
        let state = StateWriter::new(&destination_config, &config.state_topic)?;
        let source_cluster_id = consumer
            .client()
            .fetch_cluster_id(ADMIN_TIMEOUT)
            .ok_or_else(|| {
                Stop::error("the source cluster did not report a cluster ID (unreachable?)")
            })?;
        let mut fetcher = Fetcher {
            config,
            handles,
            source_config,
            destination_config,
            consumer,
            producer,
            source_admin,
            state,
            source_cluster_id,
            source_topic_id: None,
            units: BTreeMap::new(),
            throttle: config
                .throttle_bytes_per_second
                .map(|r| Throttle::new(r, Instant::now())),
        };
        fetcher.source_topic_id = fetcher.describe_source()?;
        let records = store::load(
            &fetcher.destination_config,
            &config.state_topic,
            |k| {
                k.mirror == config.mirror
                    && k.topic == config.source_topic
                    && config.partitions.contains(&k.partition)
            },
            Duration::from_secs(60),
        )?;
        for &partition in &config.partitions {
            let recorded = records
                .get(&(
                    config.mirror.clone(),
                    config.source_topic.clone(),
                    partition,
                ))
                .cloned()
                .unwrap_or_default();
            fetcher.prepare_partition(partition, &recorded)?;
        }
        let mut tpl = TopicPartitionList::new();
        for (p, unit) in &fetcher.units {
            tpl.add_partition_offset(
                &config.source_topic,
                *p,
                Offset::Offset(unit.cursor.next_src),
            )?;
        }
        fetcher.consumer.assign(&tpl)?;
        for unit in fetcher.units.values_mut() {
            unit.position_dirty = true;
            handles
                .metrics
                .set_state(&unit.labels, PartitionState::Mirroring);
        }
        fetcher.persist_positions(FetcherStatus::Running, None)?;
        handles.health.ready.store(true, Ordering::Relaxed);
        handles.health.beat();
        tracing::info!(
            mirror = %config.mirror,
            topic = %config.source_topic,
            partitions = ?config.partitions,
            starts = ?fetcher.units.iter().map(|(p, u)| (*p, u.cursor.next_src)).collect::<Vec<_>>(),
            "mirroring"
        );
        Ok(fetcher)
    }

    /// Describes the source topic and checks its ID against nothing (start-up) or the recorded
    /// one (refresh). Returns the current topic ID.
    fn describe_source(&self) -> Result<Option<String>, Stop> {
        let topic = &self.config.source_topic;
        let description = describe_topics(self.source_admin.inner(), &[topic], ADMIN_TIMEOUT)?
            .pop()
            .flatten()
            .ok_or_else(|| {
                Stop::new(
                    StopReason::SourceTopicDeleted,
                    format!("source topic {topic} does not exist"),
                )
            })?;
        if let Some(&p) = self
            .config
            .partitions
            .iter()
            .find(|&&p| p < 0 || p as usize >= description.partitions)
        {
            return Err(Stop::error(format!(
                "source topic {topic} has {} partitions; partition {p} does not exist",
                description.partitions
            )));
        }
        Ok(description.topic_id)
    }

    fn labels(&self, partition: i32) -> PartitionLabels {
        PartitionLabels {
            mirror: self.config.mirror.clone(),
            topic: self.config.source_topic.clone(),
            partition,
        }
    }

    /// Destination watermarks once the log end has stopped moving.
    fn settled_destination_watermarks(&self, partition: i32) -> Result<(i64, i64), Stop> {
        let topic = &self.config.destination_topic;
        let mut last = self.consumer_fetch_destination(partition)?;
        for _ in 0..30 {
            std::thread::sleep(self.config.startup_settle);
            let now = self.consumer_fetch_destination(partition)?;
            if now.1 == last.1 {
                return Ok(now);
            }
            tracing::warn!(
                partition,
                from = last.1,
                to = now.1,
                "destination log end still moving; waiting"
            );
            last = now;
        }
        Err(Stop::error(format!(
            "the log end of {topic}[{partition}] keeps moving: another client writes to it"
        )))
    }

    fn consumer_fetch_destination(&self, partition: i32) -> Result<(i64, i64), Stop> {
        let reader: BaseConsumer = self
            .destination_config
            .clone()
            .set("group.id", "kmirror-fetcher-watermarks")
            .create()?;
        reader
            .fetch_watermarks(&self.config.destination_topic, partition, ADMIN_TIMEOUT)
            .map_err(|e| match e {
                KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                    Stop::error(format!(
                        "destination topic {} (partition {partition}) does not exist",
                        self.config.destination_topic
                    ))
                }
                e => Stop::error(format!(
                    "destination watermarks of partition {partition}: {e}"
                )),
            })
    }

    fn prepare_partition(
        &mut self,
        partition: i32,
        recorded: &PartitionRecords,
    ) -> Result<(), Stop> {
        let config = self.config;
        let position = recorded.position.as_ref();
        if let Some(p) = position {
            if p.source_cluster_id != self.source_cluster_id {
                return Err(Stop::new(
                    StopReason::SourceClusterChanged,
                    format!(
                        "the source cluster ID is {} but this mirror recorded {}: the source was replaced",
                        self.source_cluster_id, p.source_cluster_id
                    ),
                ));
            }
            if let (Some(was), Some(now)) = (&p.source_topic_id, &self.source_topic_id)
                && was != now
            {
                return Err(Stop::new(
                    StopReason::SourceTopicRecreated,
                    format!(
                        "source topic {} was deleted and recreated (topic ID {was} is now {now}); \
                         refusing to mix two topics in one destination",
                        config.source_topic
                    ),
                ));
            }
        }
        let (_, dst_end) = self.settled_destination_watermarks(partition)?;
        let (src_low, src_high) =
            self.consumer
                .fetch_watermarks(&config.source_topic, partition, ADMIN_TIMEOUT)?;
        let mut prefix = position.and_then(|p| p.prefix_alignment);
        let map = match position {
            Some(_) => recorded.offset_map().map_err(Stop::error)?,
            None if dst_end > 0 => {
                return Err(Stop::new(
                    StopReason::DestinationNotEmpty,
                    format!(
                        "destination {}[{partition}] already holds {dst_end} records and this mirror has no \
                         state for it: refusing to append to data kmirror did not write",
                        config.destination_topic
                    ),
                ));
            }
            None if src_low > 0 && src_low <= config.prefix_alignment_limit => {
                prefix = Some(PrefixAlignment {
                    target: src_low,
                    done: false,
                });
                OffsetMap::identity()
            }
            None if src_low > 0 => {
                tracing::warn!(
                    partition,
                    src_low,
                    limit = config.prefix_alignment_limit,
                    "source log starts beyond the prefix alignment limit; offsets will be translated"
                );
                OffsetMap::starting_at(src_low)
            }
            None => OffsetMap::identity(),
        };
        let labels = self.labels(partition);
        let mut unit = Unit {
            cursor: Cursor::resume(partition, map, dst_end),
            labels,
            sealed_chunks: 0,
            persisted_chunks: recorded
                .position
                .as_ref()
                .map_or(0, |p| p.map_chunks as usize),
            prefix,
            high_watermark: None,
            source_position: 0,
            lag_seconds: 0.0,
            last_timestamp: None,
            records: 0,
            position_dirty: true,
        };
        unit.sealed_chunks = unit.persisted_chunks.saturating_sub(1);
        if position.is_none() {
            // Record the identity (and any alignment plan or starting map) before writing data.
            self.write_position(&unit, FetcherStatus::Running, None)?;
            self.write_map(&mut unit)?;
            self.state.flush(ADMIN_TIMEOUT)?;
        }
        if unit.cursor.next_src > src_high {
            return Err(self.beyond_source_end(partition, unit.cursor.next_src, src_high));
        }
        self.verify_last_record(&unit)?;
        let pending_alignment = unit.prefix.filter(|p| !p.done);
        if pending_alignment.is_none() && unit.cursor.next_src < src_low {
            self.source_truncated(&mut unit, src_low)?;
        }
        self.units.insert(partition, unit);
        if let Some(p) = pending_alignment {
            self.align_prefix(partition, p.target)?;
        }
        Ok(())
    }

    /// The destination holds more records than the source has: foreign writes, or a source that
    /// lost records it once had (unclean leader election, restore from backup).
    fn beyond_source_end(&self, partition: i32, next_src: i64, src_high: i64) -> Stop {
        Stop::new(
            StopReason::ForeignWrite,
            format!(
                "destination {}[{partition}] holds copies up to source offset {} but the source log ends at {src_high}: \
                 another client wrote to the destination partition, or the source lost records",
                self.config.destination_topic,
                next_src - 1
            ),
        )
    }

    /// Placeholders for destination offsets up to `target`, then DeleteRecords, so that the
    /// destination log starts where the source log starts and offsets stay identical.
    fn align_prefix(&mut self, partition: i32, target: i64) -> Result<(), Stop> {
        let from = self.units[&partition].cursor.next_dst;
        tracing::info!(
            partition,
            target,
            from,
            "aligning an empty destination with a source log starting above 0"
        );
        let headers = OwnedHeaders::new().insert(Header {
            key: PLACEHOLDER_HEADER,
            value: Some(b"1".as_slice()),
        });
        loop {
            let unit = self
                .units
                .get_mut(&partition)
                .expect("unit inserted before alignment");
            if unit.cursor.next_dst >= target {
                break;
            }
            let expected = unit.cursor.accept_placeholder();
            let mut record = BaseRecord::<(), [u8], Box<Pending>>::with_opaque_to(
                &self.config.destination_topic,
                Box::new(Pending {
                    partition,
                    expected_dst: expected,
                    bytes: 0,
                    timestamp: None,
                }),
            )
            .partition(partition)
            .payload(&[][..])
            .headers(headers.clone());
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        self.producer.poll(Duration::from_millis(20));
                        self.drain_deliveries()?;
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            }
            self.producer.poll(Duration::ZERO);
            self.drain_deliveries()?;
        }
        self.flush_producer(Duration::from_secs(120))?;
        let admin: AdminClient<DefaultClientContext> = self.destination_config.create()?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(
            &self.config.destination_topic,
            partition,
            Offset::Offset(target),
        )?;
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        futures::executor::block_on(admin.delete_records(&tpl, &options))?;
        let unit = self
            .units
            .get_mut(&partition)
            .expect("unit inserted before alignment");
        unit.prefix = Some(PrefixAlignment { target, done: true });
        unit.cursor = Cursor::resume(partition, unit.cursor.map.clone(), target);
        self.write_position(&self.units[&partition], FetcherStatus::Running, None)?;
        self.state.flush(ADMIN_TIMEOUT)?;
        Ok(())
    }

    /// The last destination record must be the copy of its source record; anything else was
    /// written by someone else.
    fn verify_last_record(&self, unit: &Unit) -> Result<(), Stop> {
        let dst_last = unit.cursor.confirmed_dst - 1;
        let aligned_to = unit.prefix.map_or(0, |p| p.target);
        if dst_last < aligned_to.max(0) {
            return Ok(());
        }
        let open = unit.cursor.map.last();
        if open.dst == unit.cursor.confirmed_dst && unit.cursor.confirmed_dst > 0 {
            // The open segment was recorded ahead (a gap, or records kept on failback) and
            // nothing was written in it yet: the record before it is not a copy to compare.
            return Ok(());
        }
        let partition = unit.cursor.partition;
        let src = unit.cursor.map.dst_to_src(dst_last);
        let destination = read_record_at(
            &self.destination_config,
            &self.config.destination_topic,
            partition,
            dst_last,
            ADMIN_TIMEOUT,
        )?;
        let source = read_record_at(
            &self.source_config,
            &self.config.source_topic,
            partition,
            src,
            ADMIN_TIMEOUT,
        )?;
        match (destination, source) {
            (Some(d), Some(s)) if d.offset == dst_last && s.offset == src => {
                if !d.same_content(&s) {
                    return Err(Stop::new(
                        StopReason::ForeignWrite,
                        format!(
                            "destination {}[{partition}] offset {dst_last} is not the copy of source offset {src}: \
                             another client wrote to the destination partition",
                            self.config.destination_topic
                        ),
                    ));
                }
            }
            _ => tracing::info!(
                partition,
                dst_last,
                src,
                "last record not comparable (compacted or deleted); skipping the check"
            ),
        }
        Ok(())
    }

    fn source_truncated(&mut self, unit: &mut Unit, src_low: i64) -> Result<(), Stop> {
        let partition = unit.cursor.partition;
        let lost = src_low - unit.cursor.next_src;
        let message = format!(
            "source {}[{partition}] now starts at offset {src_low}, but offsets {}..{src_low} were never mirrored \
             ({lost} records deleted by retention before they were copied)",
            self.config.source_topic, unit.cursor.next_src
        );
        match self.config.on_source_truncation {
            TruncationPolicy::Fail => Err(Stop::new(StopReason::SourceTruncated, message)),
            TruncationPolicy::Skip => {
                tracing::warn!(partition, lost, "{message}; continuing as configured");
                unit.cursor.map.record_gap(src_low, unit.cursor.next_dst);
                unit.cursor.next_src = src_low;
                self.write_map(unit)?;
                self.state.flush(ADMIN_TIMEOUT)?;
                Ok(())
            }
        }
    }

    fn write_position(
        &self,
        unit: &Unit,
        status: FetcherStatus,
        error: Option<FetcherError>,
    ) -> Result<(), Stop> {
        let cursor = &unit.cursor;
        let chunks = map_to_chunks(&cursor.map).len().max(unit.persisted_chunks) as u32;
        let record = PositionRecord {
            source_cluster_id: self.source_cluster_id.clone(),
            source_topic_id: self.source_topic_id.clone(),
            destination_topic: self.config.destination_topic.clone(),
            last_mirrored_offset: cursor.last_mirrored_src,
            next_source_offset: cursor.confirmed_next_src(),
            destination_offset: cursor.confirmed_dst,
            map_chunks: chunks,
            offsets_identical: cursor.map.is_identity(),
            prefix_alignment: unit.prefix,
            status,
            error,
            source_high_watermark: unit.high_watermark,
            source_position: Some(unit.source_position.max(cursor.confirmed_next_src())),
            lag_seconds: Some(unit.lag_seconds),
            records_mirrored: unit.records,
            writer: self.config.writer.clone(),
            updated_at_ms: now_ms(),
        };
        let key = StateKey::new(
            RecordKind::Position,
            &self.config.mirror,
            &self.config.source_topic,
            cursor.partition,
        );
        self.state.send(&key, Some(&record))?;
        Ok(())
    }

    /// Writes the map chunks that changed since the last write (not flushed).
    fn write_map(&self, unit: &mut Unit) -> Result<(), Stop> {
        persist_map(&self.state, self.config, unit)
    }

    fn persist_positions(
        &mut self,
        status: FetcherStatus,
        error: Option<FetcherError>,
    ) -> Result<(), Stop> {
        for unit in self.units.values() {
            if unit.position_dirty || status != FetcherStatus::Running {
                self.write_position(unit, status, error.clone())?;
            }
        }
        for unit in self.units.values_mut() {
            unit.position_dirty = false;
        }
        Ok(())
    }

    fn drain_deliveries(&mut self) -> Result<(), Stop> {
        drain(&self.producer, &mut self.units, self.handles, self.config)
    }

    /// Polls a batch of source records (waiting at most `wait` for the first), records gaps
    /// (persisted before the records behind them), and produces the batch.
    fn mirror_once(&mut self, wait: Duration) -> Result<(), Stop> {
        let mut truncation_check = false;
        let mut identity_check = false;
        {
            let Fetcher {
                consumer,
                producer,
                units,
                state,
                config,
                handles,
                throttle,
                ..
            } = self;
            let mut batch: Vec<(BorrowedMessage<'_>, Option<OwnedHeaders>, usize)> = Vec::new();
            let mut bytes = 0usize;
            let mut timeout = wait;
            while batch.len() < MAX_BATCH_RECORDS && bytes < MAX_BATCH_BYTES {
                match consumer.poll(timeout) {
                    None => break,
                    Some(Ok(m)) => {
                        // Headers are parsed once per record (librdkafka re-parses on every
                        // call when a record has none).
                        let headers = m.headers().map(|h| {
                            h.iter()
                                .fold(OwnedHeaders::new_with_capacity(h.count()), |acc, h| {
                                    acc.insert(h)
                                })
                        });
                        let size = message_size(&m, headers.as_ref());
                        bytes += size;
                        batch.push((m, headers, size));
                    }
                    Some(Err(KafkaError::MessageConsumption(
                        RDKafkaErrorCode::AutoOffsetReset,
                    ))) => {
                        truncation_check = true;
                        break;
                    }
                    Some(Err(KafkaError::MessageConsumption(
                        RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
                    ))) => {
                        identity_check = true;
                        break;
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "source consumer error (librdkafka retries)");
                        break;
                    }
                }
                timeout = Duration::ZERO;
            }
            // Pass 1: decide every record's destination offset; persist new map segments first.
            let mut decisions = Vec::with_capacity(batch.len());
            let mut gaps: Vec<i32> = Vec::new();
            for (m, _, _) in &batch {
                let unit = units.get_mut(&m.partition()).ok_or_else(|| {
                    Stop::error(format!("record from unowned partition {}", m.partition()))
                })?;
                let decision = unit.cursor.accept(m.offset());
                if let Accept::Produce { gap: true, .. } = decision {
                    handles.metrics.gaps.get_or_create(&unit.labels).inc();
                    if !gaps.contains(&m.partition()) {
                        gaps.push(m.partition());
                    }
                }
                decisions.push(decision);
            }
            for p in gaps {
                let unit = units.get_mut(&p).expect("owned partition");
                persist_map(state, config, unit)?;
            }
            if !decisions.is_empty()
                && decisions
                    .iter()
                    .any(|d| matches!(d, Accept::Produce { gap: true, .. }))
            {
                state.flush(ADMIN_TIMEOUT)?;
            }
            // Pass 2: produce.
            for ((m, headers, size), decision) in batch.into_iter().zip(decisions) {
                let Accept::Produce { expected_dst, .. } = decision else {
                    continue;
                };
                let pending = Box::new(Pending {
                    partition: m.partition(),
                    expected_dst,
                    bytes: size,
                    timestamp: timestamp_ms(m.timestamp()),
                });
                let mut record = BaseRecord::<[u8], [u8], Box<Pending>>::with_opaque_to(
                    &config.destination_topic,
                    pending,
                )
                .partition(m.partition());
                if let Some(k) = m.key() {
                    record = record.key(k);
                }
                if let Some(v) = m.payload() {
                    record = record.payload(v);
                }
                if let Some(h) = headers {
                    record = record.headers(h);
                }
                if let Some(ts) = timestamp_ms(m.timestamp()) {
                    record = record.timestamp(ts);
                }
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                            record = r;
                            producer.poll(Duration::from_millis(10));
                            drain(producer, units, handles, config)?;
                        }
                        Err((e, _)) => {
                            return Err(Stop::error(format!(
                                "producing to {}[{}]: {e}",
                                config.destination_topic,
                                m.partition()
                            )));
                        }
                    }
                }
                if let Some(t) = throttle.as_mut() {
                    let mut wait = t.take(size, Instant::now());
                    while !wait.is_zero() {
                        let slice = wait.min(Duration::from_millis(50));
                        producer.poll(slice);
                        drain(producer, units, handles, config)?;
                        wait -= slice;
                    }
                }
            }
        }
        if truncation_check {
            self.check_source_truncation()?;
        }
        if identity_check {
            tracing::warn!("the source reports the topic unknown; checking its identity");
            self.check_source_identity()?;
        }
        Ok(())
    }

    fn check_source_truncation(&mut self) -> Result<(), Stop> {
        let partitions: Vec<i32> = self.units.keys().copied().collect();
        for p in partitions {
            let (low, high) =
                self.consumer
                    .fetch_watermarks(&self.config.source_topic, p, ADMIN_TIMEOUT)?;
            let next_src = self.units[&p].cursor.next_src;
            if next_src > high {
                return Err(self.beyond_source_end(p, next_src, high));
            }
            let mut unit = self.units.remove(&p).expect("owned partition");
            let result = if unit.cursor.next_src < low {
                self.source_truncated(&mut unit, low).map(|_| true)
            } else {
                Ok(false)
            };
            let next_src = unit.cursor.next_src;
            self.units.insert(p, unit);
            if result? {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(&self.config.source_topic, p, Offset::Offset(next_src))?;
                self.consumer
                    .incremental_assign(&tpl)
                    .or_else(|_| self.consumer.assign(&tpl))?;
            }
        }
        Ok(())
    }

    fn check_source_identity(&mut self) -> Result<(), Stop> {
        let cluster_id = self.consumer.client().fetch_cluster_id(ADMIN_TIMEOUT);
        if let Some(id) = cluster_id
            && id != self.source_cluster_id
        {
            return Err(Stop::new(
                StopReason::SourceClusterChanged,
                format!(
                    "the source cluster ID changed from {} to {id}",
                    self.source_cluster_id
                ),
            ));
        }
        let topic_id = self.describe_source()?;
        if let (Some(was), Some(now)) = (&self.source_topic_id, &topic_id)
            && was != now
        {
            return Err(Stop::new(
                StopReason::SourceTopicRecreated,
                format!(
                    "source topic {} was deleted and recreated (topic ID {was} is now {now}); refusing to continue",
                    self.config.source_topic
                ),
            ));
        }
        Ok(())
    }

    fn refresh_lag(&mut self) {
        let metrics = &self.handles.metrics;
        let positions: BTreeMap<i32, i64> = self
            .consumer
            .position()
            .map(|tpl| {
                tpl.elements()
                    .iter()
                    .filter_map(|e| match e.offset() {
                        Offset::Offset(o) => Some((e.partition(), o)),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        for (p, unit) in self.units.iter_mut() {
            let confirmed = unit.cursor.confirmed_next_src();
            let mut next = confirmed;
            if unit.cursor.inflight() == 0
                && let Some(&position) = positions.get(p)
            {
                next = next.max(position);
            }
            if next != unit.source_position {
                unit.source_position = next;
                unit.position_dirty = true;
            }
            if let Ok((_, high)) = self.consumer.fetch_watermarks(
                &self.config.source_topic,
                *p,
                Duration::from_secs(5),
            ) {
                if unit.high_watermark != Some(high) {
                    unit.position_dirty = true;
                }
                unit.high_watermark = Some(high);
                let lag = (high - next).max(0);
                metrics.lag_records.get_or_create(&unit.labels).set(lag);
                let seconds = match (lag, unit.last_timestamp) {
                    (0, _) | (_, None) => 0.0,
                    (_, Some(ts)) => ((now_ms() - ts) as f64 / 1000.0).max(0.0),
                };
                metrics.lag_seconds.get_or_create(&unit.labels).set(seconds);
                unit.lag_seconds = seconds;
            }
            metrics
                .offsets_identical
                .get_or_create(&unit.labels)
                .set(i64::from(unit.cursor.map.is_identity()));
            metrics
                .last_mirrored_offset
                .get_or_create(&unit.labels)
                .set(unit.cursor.last_mirrored_src);
        }
    }

    fn mirror(&mut self) -> Result<(), Stop> {
        let mut last_position = Instant::now();
        let mut last_refresh = Instant::now();
        self.refresh_lag();
        while !self.handles.shutdown.load(Ordering::Relaxed) {
            self.handles.health.beat();
            self.mirror_once(Duration::from_millis(100))?;
            self.producer.poll(Duration::ZERO);
            self.drain_deliveries()?;
            if last_position.elapsed() >= self.config.position_interval {
                self.refresh_lag();
                self.persist_positions(FetcherStatus::Running, None)?;
                last_position = Instant::now();
            }
            if last_refresh.elapsed() >= self.config.metadata_refresh {
                self.check_source_identity()?;
                last_refresh = Instant::now();
            }
        }
        Ok(())
    }

    fn flush_producer(&mut self, timeout: Duration) -> Result<(), Stop> {
        let deadline = Instant::now() + timeout;
        loop {
            self.producer.poll(Duration::from_millis(50));
            self.drain_deliveries()?;
            if self.producer.in_flight_count() == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Stop::error(format!(
                    "{} records still unconfirmed by the destination after {timeout:?}",
                    self.producer.in_flight_count()
                )));
            }
        }
    }

    /// Ends the run: flush what can be flushed, persist the final positions with the outcome.
    fn finish(mut self, result: Result<(), Stop>) -> Outcome {
        let flush_budget = self
            .config
            .shutdown_timeout
            .saturating_sub(Duration::from_secs(3));
        let flushed = self.flush_producer(flush_budget);
        let (status, error, outcome) = match (result, flushed) {
            (Ok(()), Ok(())) => (FetcherStatus::Stopped, None, Outcome::Stopped),
            (Ok(()), Err(stop)) | (Err(stop), _) => {
                let status = if stop.reason.retryable() {
                    FetcherStatus::Stopped
                } else {
                    FetcherStatus::Failed
                };
                let error = FetcherError {
                    reason: stop.reason,
                    message: stop.message.clone(),
                };
                (
                    status,
                    Some(error),
                    Outcome::Failed {
                        reason: stop.reason,
                        message: stop.message,
                    },
                )
            }
        };
        if let Outcome::Failed { reason, message } = &outcome {
            tracing::error!(?reason, "{message}");
        }
        self.handles.health.ready.store(false, Ordering::Relaxed);
        let persisted = self
            .persist_positions(status, error)
            .and_then(|_| self.state.flush(Duration::from_secs(3)).map_err(Stop::from));
        if let Err(e) = persisted {
            tracing::warn!(error = %e.message, "could not persist the final position (the destination log remains the checkpoint)");
        }
        for unit in self.units.values() {
            let state = if status == FetcherStatus::Failed {
                PartitionState::Failed
            } else {
                PartitionState::Stopped
            };
            self.handles.metrics.set_state(&unit.labels, state);
        }
        outcome
    }
}

fn message_size(m: &BorrowedMessage<'_>, headers: Option<&OwnedHeaders>) -> usize {
    m.key().map_or(0, <[u8]>::len)
        + m.payload().map_or(0, <[u8]>::len)
        + headers.map_or(0, |h| {
            h.iter()
                .map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len))
                .sum::<usize>()
        })
}

/// Writes the map chunks of `unit` that changed since the last write (not flushed).
fn persist_map(state: &StateWriter, config: &FetcherConfig, unit: &mut Unit) -> Result<(), Stop> {
    let chunks = map_to_chunks(&unit.cursor.map);
    for (i, chunk) in chunks.iter().enumerate().skip(unit.sealed_chunks) {
        let key = StateKey::map_chunk(
            &config.mirror,
            &config.source_topic,
            unit.cursor.partition,
            i as u32,
        );
        state.send(&key, Some(chunk))?;
    }
    unit.persisted_chunks = chunks.len();
    unit.sealed_chunks = chunks.len().saturating_sub(1);
    Ok(())
}

/// Applies the delivery reports collected so far: every offset is checked against the one the
/// record had to get.
fn drain(
    producer: &BaseProducer<DeliveryContext>,
    units: &mut BTreeMap<i32, Unit>,
    handles: &Handles,
    config: &FetcherConfig,
) -> Result<(), Stop> {
    let deliveries = std::mem::take(
        &mut *producer
            .context()
            .deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    let metrics = &handles.metrics;
    for delivery in deliveries {
        let p = delivery.pending;
        let unit = units.get_mut(&p.partition).ok_or_else(|| {
            Stop::error(format!("delivery for unowned partition {}", p.partition))
        })?;
        let actual = delivery.result.map_err(|e| {
            Stop::error(format!(
                "writing to {}[{}] failed: {e}",
                config.destination_topic, p.partition
            ))
        })?;
        unit.cursor.delivered(p.expected_dst, actual).map_err(|m| {
            Stop::new(
                StopReason::ForeignWrite,
                format!(
                    "destination {}[{}]: a record expected at offset {} landed at {}: another client wrote to \
                     the destination partition",
                    config.destination_topic, p.partition, m.expected, m.actual
                ),
            )
        })?;
        if p.timestamp.is_some() || p.bytes > 0 {
            unit.records += 1;
            metrics.records.get_or_create(&unit.labels).inc();
            metrics
                .bytes
                .get_or_create(&unit.labels)
                .inc_by(p.bytes as u64);
            unit.last_timestamp = p.timestamp.or(unit.last_timestamp);
        }
        unit.position_dirty = true;
    }
    Ok(())
}
