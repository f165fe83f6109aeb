//! The poll loop: poll a batch from the source, decide every record's destination offset
//! (new map segments are persisted before the records behind them), produce the batch, and
//! between batches re-check the source range and identity, refresh the lag and persist
//! positions.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::{Offset, TopicPartitionList};

use super::delivery::{self, DeliveryContext, Pending};
use super::position::persist_map;
use super::start_plan::{
    SourceRange, check_cluster_id, check_source_range, check_topic_id, skip_source_gap,
};
use super::stop::Stop;
use super::{ADMIN_TIMEOUT, Fetcher, Handles, Unit};
use crate::config::FetcherConfig;
use crate::cursor::Accept;
use crate::metrics::FetcherMetrics;
use crate::throttle::Throttle;
use kmirror_state::kafka_record::timestamp_ms;
use kmirror_state::records::{FetcherStatus, now_ms};
use kmirror_state::store::StateWriter;

const MAX_BATCH_RECORDS: usize = 5000;
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// A polled source record, its headers (parsed once: librdkafka re-parses on every call when a
/// record has none) and its size.
struct Polled<'c> {
    message: BorrowedMessage<'c>,
    headers: Option<OwnedHeaders>,
    size: usize,
}

/// A check the consumer's errors call for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The consumer's position is out of the source log (retention, truncation).
    SourceRange,
    /// The source reports the topic or partition unknown.
    SourceIdentity,
}

/// Records polled in one go, and the check that ended the poll early, if any.
struct Batch<'c> {
    records: Vec<Polled<'c>>,
    check: Option<Check>,
}

/// Polls up to a batch of records, waiting at most `wait` for the first.
fn poll_batch(consumer: &BaseConsumer, wait: Duration) -> Batch<'_> {
    let mut records = Vec::new();
    let mut check = None;
    let mut bytes = 0usize;
    let mut timeout = wait;
    while records.len() < MAX_BATCH_RECORDS && bytes < MAX_BATCH_BYTES {
        match consumer.poll(timeout) {
            None => break,
            Some(Ok(message)) => {
                let headers = message.headers().map(|h| {
                    h.iter()
                        .fold(OwnedHeaders::new_with_capacity(h.count()), |acc, h| {
                            acc.insert(h)
                        })
                });
                let size = message_size(&message, headers.as_ref());
                bytes += size;
                records.push(Polled {
                    message,
                    headers,
                    size,
                });
            }
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset))) => {
                check = Some(Check::SourceRange);
                break;
            }
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
            ))) => {
                check = Some(Check::SourceIdentity);
                break;
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "source consumer error (librdkafka retries)");
                break;
            }
        }
        timeout = Duration::ZERO;
    }
    Batch { records, check }
}

/// Decides every record's destination offset. Returns the decisions and the partitions whose
/// map gained a segment.
fn accept_batch(
    units: &mut BTreeMap<i32, Unit>,
    metrics: &FetcherMetrics,
    records: &[Polled<'_>],
) -> Result<(Vec<Accept>, Vec<i32>), Stop> {
    let mut decisions = Vec::with_capacity(records.len());
    let mut gaps: Vec<i32> = Vec::new();
    for polled in records {
        let partition = polled.message.partition();
        let unit = units.get_mut(&partition).ok_or(Stop::UnownedPartition {
            what: "record from",
            partition,
        })?;
        let decision = unit.cursor.accept(polled.message.offset());
        if let Accept::Produce { gap: true, .. } = decision {
            metrics.gaps.get_or_create(&unit.labels).inc();
            if !gaps.contains(&partition) {
                gaps.push(partition);
            }
        }
        decisions.push(decision);
    }
    Ok((decisions, gaps))
}

/// Persists the maps of `gaps` durably (before any record behind a new segment is produced).
fn persist_gaps(
    state: &StateWriter,
    config: &FetcherConfig,
    units: &mut BTreeMap<i32, Unit>,
    gaps: &[i32],
) -> Result<(), Stop> {
    if gaps.is_empty() {
        return Ok(());
    }
    for p in gaps {
        let unit = units.get_mut(p).expect("owned partition");
        persist_map(state, config, unit)?;
    }
    state.flush(ADMIN_TIMEOUT).map_err(Stop::WriteState)
}

/// Produces the records decided to be copied, honouring the throttle.
fn produce_batch(
    producer: &BaseProducer<DeliveryContext>,
    units: &mut BTreeMap<i32, Unit>,
    handles: &Handles,
    config: &FetcherConfig,
    throttle: &mut Option<Throttle>,
    records: Vec<Polled<'_>>,
    decisions: Vec<Accept>,
) -> Result<(), Stop> {
    let topic = &config.destination_topic;
    for (polled, decision) in records.into_iter().zip(decisions) {
        let Accept::Produce { expected_dst, .. } = decision else {
            continue;
        };
        let Polled {
            message: m,
            headers,
            size,
        } = polled;
        let pending = Box::new(Pending {
            partition: m.partition(),
            expected_dst,
            bytes: size,
            timestamp: timestamp_ms(m.timestamp()),
        });
        let mut record = BaseRecord::<[u8], [u8], Box<Pending>>::with_opaque_to(topic, pending)
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
        delivery::send(producer, units, handles, record)?;
        if let Some(t) = throttle.as_mut() {
            let mut wait = t.take(size, Instant::now());
            while !wait.is_zero() {
                let slice = wait.min(Duration::from_millis(50));
                producer.poll(slice);
                delivery::drain(producer, units, handles, topic)?;
                wait -= slice;
            }
        }
    }
    Ok(())
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

impl Fetcher<'_> {
    /// Copies until SIGTERM or a stop.
    pub(super) fn mirror(&mut self) -> Result<(), Stop> {
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

    /// Polls a batch (waiting at most `wait` for the first record), records its gaps, produces
    /// it, then runs the check the consumer asked for.
    fn mirror_once(&mut self, wait: Duration) -> Result<(), Stop> {
        let check = {
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
            let batch = poll_batch(consumer, wait);
            let (decisions, gaps) = accept_batch(units, &handles.metrics, &batch.records)?;
            persist_gaps(state, config, units, &gaps)?;
            produce_batch(
                producer,
                units,
                handles,
                config,
                throttle,
                batch.records,
                decisions,
            )?;
            batch.check
        };
        match check {
            None => Ok(()),
            Some(Check::SourceRange) => self.check_source_range(),
            Some(Check::SourceIdentity) => {
                tracing::warn!("the source reports the topic unknown; checking its identity");
                self.check_source_identity()
            }
        }
    }

    /// The consumer's position left the source log: find out which partition and why. Skipped
    /// records (policy skip) re-position the consumer.
    fn check_source_range(&mut self) -> Result<(), Stop> {
        let partitions: Vec<i32> = self.units.keys().copied().collect();
        for p in partitions {
            let (low, high) = self.source_watermarks(p, ADMIN_TIMEOUT)?;
            let next_src = self.units[&p].cursor.next_src;
            let SourceRange::Skip { from, to } =
                check_source_range(self.config, p, next_src, low, high)?
            else {
                continue;
            };
            let lost = Stop::SourceTruncated {
                topic: self.config.source_topic.clone(),
                partition: p,
                next: from,
                log_start: to,
            };
            tracing::warn!(
                partition = p,
                lost = to - from,
                "{lost}; continuing as configured"
            );
            let unit = self.units.get_mut(&p).expect("owned partition");
            skip_source_gap(&mut unit.cursor, to);
            persist_map(&self.state, self.config, unit)?;
            self.flush_state()?;
            self.reposition(p, to)?;
        }
        Ok(())
    }

    /// Moves the consumer of partition `p` to source offset `next_src`.
    fn reposition(&mut self, p: i32, next_src: i64) -> Result<(), Stop> {
        let topic = &self.config.source_topic;
        let assign = |source| Stop::AssignSource {
            topic: topic.clone(),
            source,
        };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(next_src))
            .map_err(assign)?;
        self.consumer
            .incremental_assign(&tpl)
            .or_else(|_| self.consumer.assign(&tpl))
            .map_err(assign)
    }

    /// The source must still be the recorded cluster and topic.
    fn check_source_identity(&mut self) -> Result<(), Stop> {
        if let Some(id) = self.consumer.client().fetch_cluster_id(ADMIN_TIMEOUT) {
            check_cluster_id(&self.source_cluster_id, &id)?;
        }
        let topic_id = self.describe_source()?;
        check_topic_id(
            &self.config.source_topic,
            self.source_topic_id.as_deref(),
            topic_id.as_deref(),
        )
    }

    /// Updates each partition's source position, high watermark and lag (metrics and the next
    /// position record).
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
}
