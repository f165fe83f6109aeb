//! The poll loop: poll a batch from the source, decide every record's destination offset
//! (new map segments are persisted before the records behind them), check each record against
//! what the destination accepts, produce the batch, and between batches re-check the source
//! range and identity, refresh the lag, prune the map below the source log start and persist
//! positions. A consumer reset (librdkafka stops fetching a partition after an out-of-range
//! offset or a detected log truncation) is judged partition by partition: re-position, wait,
//! skip or report what retention deleted, or stop because the source diverged.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::{Offset, TopicPartitionList};

use super::delivery::{self, DeliveryContext, Pending, Target};
use super::limits::DestinationLimits;
use super::position::persist_map;
use super::source_check::{Finding, Known, SourceLog, judge};
use super::source_ends::{open_transaction, reported};
use super::start_plan::{check_cluster_id, check_pinned, check_topic_id, skip_source_gap};
use super::stop::Stop;
use super::watchdog::{SourceStall, SourceWatch};
use super::{ADMIN_TIMEOUT, Fetcher, Handles, Unit};
use crate::config::{FetcherConfig, TruncationPolicy};
use crate::cursor::Accept;
use crate::metrics::FetcherMetrics;
use crate::throttle::Throttle;
use kmirror_state::kafka_record::{header_bytes, leader_epoch, set_leader_epoch, timestamp_ms};
use kmirror_state::records::{FetcherStatus, now_ms};
use kmirror_state::store::StateWriter;

/// How long the source's high watermark may stay below the next offset, with nothing showing
/// that its log still holds what was read from it, before that counts as divergence.
const BEYOND_END_LIMIT: Duration = Duration::from_secs(30);

const MAX_BATCH_RECORDS: usize = 5000;
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// A polled source record, its headers (copied as they are, whatever their keys' encoding),
/// its size and its source leader epoch (-1: unknown).
struct Polled<'c> {
    message: BorrowedMessage<'c>,
    headers: Option<OwnedHeaders>,
    size: usize,
    epoch: i32,
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
                let headers = message.headers().map(|h| h.detach());
                let size = message_size(&message, headers.is_some());
                let epoch = leader_epoch(&message).unwrap_or(-1);
                bytes += size;
                records.push(Polled {
                    message,
                    headers,
                    size,
                    epoch,
                });
            }
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset))) => {
                // librdkafka stopped fetching a partition (offset out of range, or a log
                // truncation it detected); which one it does not say.
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
        let decision = unit
            .cursor
            .accept(polled.message.offset(), polled.epoch)
            .map_err(|source| Stop::OffsetMapOrder { partition, source })?;
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

/// Produces the records decided to be copied, honouring the throttle. A record the destination
/// would refuse stops the batch before it is produced.
fn produce_batch(
    producer: &BaseProducer<DeliveryContext>,
    units: &mut BTreeMap<i32, Unit>,
    handles: &Handles,
    target: Target<'_>,
    throttle: &mut Option<Throttle>,
    records: Vec<Polled<'_>>,
    decisions: Vec<Accept>,
) -> Result<(), Stop> {
    let topic = target.topic;
    let limits: &DestinationLimits = target.limits;
    let now = now_ms();
    for (polled, decision) in records.into_iter().zip(decisions) {
        let Accept::Produce { expected_dst, .. } = decision else {
            continue;
        };
        let Polled {
            message: m,
            headers,
            size,
            ..
        } = polled;
        let timestamp = timestamp_ms(m.timestamp());
        if let Err(why) = limits.check(size, timestamp, now) {
            return Err(Stop::RecordRefused {
                topic: topic.to_string(),
                partition: m.partition(),
                source_offset: m.offset(),
                why,
            });
        }
        let pending = Box::new(Pending {
            partition: m.partition(),
            expected_dst,
            source_offset: m.offset(),
            bytes: size,
            timestamp,
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
        // A message without a timestamp (format v0) is copied without one, not stamped with
        // the time of the copy (librdkafka stamps a record that sets none).
        record = record.timestamp(timestamp.unwrap_or(-1));
        delivery::send(producer, units, handles, target, record)?;
        if let Some(t) = throttle.as_mut() {
            let mut wait = t.take(size, Instant::now());
            while !wait.is_zero() {
                let slice = wait.min(Duration::from_millis(50));
                producer.poll(slice);
                delivery::drain(producer, units, handles, target)?;
                wait -= slice;
            }
        }
    }
    Ok(())
}

fn message_size(m: &BorrowedMessage<'_>, has_headers: bool) -> usize {
    m.key().map_or(0, <[u8]>::len)
        + m.payload().map_or(0, <[u8]>::len)
        + if has_headers { header_bytes(m) } else { 0 }
}

impl Fetcher<'_> {
    /// Copies until SIGTERM or a stop.
    pub(super) fn mirror(&mut self) -> Result<(), Stop> {
        let mut last_position = Instant::now();
        let mut last_refresh = Instant::now();
        self.refresh_lag(Duration::from_secs(5))?;
        while !self.handles.shutdown.load(Ordering::Relaxed) {
            self.handles.health.beat();
            self.check_lease()?;
            self.mirror_once(Duration::from_millis(100))?;
            self.producer.poll(Duration::ZERO);
            self.drain_deliveries()?;
            if last_position.elapsed() >= self.config.position_interval {
                let log_starts = self.refresh_lag(Duration::ZERO)?;
                self.prune_maps(&log_starts)?;
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

    /// Fails with `LeaseExpired` once the write lease ran out.
    fn check_lease(&self) -> Result<(), Stop> {
        self.lease.map_or(Ok(()), |l| l.check())
    }

    /// Polls a batch (waiting at most `wait` for the first record), records its gaps, produces
    /// it, then runs the check the consumer asked for.
    fn mirror_once(&mut self, wait: Duration) -> Result<(), Stop> {
        let check = if self.batch.is_some() {
            self.mirror_batches(wait)?.map(|c| match c {
                super::batch_path::Check::SourceRange => Check::SourceRange,
                super::batch_path::Check::SourceIdentity => Check::SourceIdentity,
            })
        } else {
            let Fetcher {
                consumer,
                producer,
                units,
                state,
                config,
                handles,
                throttle,
                limits,
                lease,
                ..
            } = self;
            let batch = poll_batch(consumer, wait);
            let (decisions, gaps) = accept_batch(units, &handles.metrics, &batch.records)?;
            persist_gaps(state, config, units, &gaps)?;
            if let Some(l) = lease {
                l.check()?;
            }
            let target = Target {
                topic: &config.destination_topic,
                limits,
            };
            produce_batch(
                producer,
                units,
                handles,
                target,
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

    /// The consumer stopped fetching a partition (which one librdkafka does not say): judge each
    /// partition from the source's watermarks and where the epoch of its last record ends, and
    /// re-position every partition whose source still holds what was read from it. Never fetches
    /// on from a position the source no longer agrees with.
    fn check_source_range(&mut self) -> Result<(), Stop> {
        // Records delivered so far count as confirmed in what follows.
        self.producer.poll(Duration::ZERO);
        self.drain_deliveries()?;
        let partitions: Vec<i32> = self.units.keys().copied().collect();
        for p in partitions {
            let (low, high) = self.source_watermarks(p, ADMIN_TIMEOUT)?;
            let (next, known) = {
                let c = &self.units[&p].cursor;
                let known = c
                    .last_accepted
                    .filter(|&(_, e)| e >= 0)
                    .map(|(offset, epoch)| Known { offset, epoch });
                (c.next_src, known)
            };
            let epoch_end = known.and_then(|k| {
                self.epochs
                    .end_of(&self.config.source_topic, p, k.epoch)
                    .map(|e| e.end_offset)
            });
            let finding = judge(
                next,
                known,
                &SourceLog {
                    low,
                    high,
                    epoch_end,
                },
            );
            tracing::warn!(
                partition = p,
                next,
                low,
                high,
                ?epoch_end,
                ?finding,
                "consumer reset"
            );
            match finding {
                Finding::Covered => {
                    self.units.get_mut(&p).expect("owned").beyond_end_since = None;
                    self.reposition(p)?;
                }
                Finding::Behind => self.reposition(p)?,
                Finding::BeyondEnd => {
                    let unit = self.units.get_mut(&p).expect("owned");
                    let since = *unit.beyond_end_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= BEYOND_END_LIMIT {
                        let c = &unit.cursor;
                        return Err(Stop::SourceDiverged {
                            topic: self.config.source_topic.clone(),
                            partition: p,
                            source_from: high.max(low),
                            source_to: next,
                            destination_from: c.map.src_to_dst(high.max(low)),
                            destination_to: c.next_dst,
                            evidence: format!(
                                "the source log has ended at {high} for {}s, below offset {next} \
                                 that was read from it",
                                since.elapsed().as_secs()
                            ),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(500));
                    self.reposition(p)?;
                }
                Finding::Lost { from, to } => match self.config.on_source_truncation {
                    TruncationPolicy::Fail => {
                        return Err(Stop::DataLoss {
                            topic: self.config.source_topic.clone(),
                            partition: p,
                            next: from,
                            log_start: to,
                        });
                    }
                    TruncationPolicy::Skip => self.skip_lost(p, from, to)?,
                },
                Finding::Diverged { from, evidence } => {
                    let c = &self.units[&p].cursor;
                    return Err(Stop::SourceDiverged {
                        topic: self.config.source_topic.clone(),
                        partition: p,
                        source_from: from,
                        source_to: next,
                        destination_from: c.map.src_to_dst(from),
                        destination_to: c.next_dst,
                        evidence,
                    });
                }
            }
        }
        Ok(())
    }

    /// Skips `[from, to)`, deleted on the source before it was copied (policy skip): the hole
    /// goes into the map (persisted before anything after it is produced), the loss is counted
    /// and noted, and the consumer continues at `to`.
    fn skip_lost(&mut self, p: i32, from: i64, to: i64) -> Result<(), Stop> {
        // Everything produced before the hole lands first, so that the hole's segment follows it.
        self.flush_producer(Duration::from_secs(120))?;
        let mut unit = self.units.remove(&p).expect("owned partition");
        let skipped =
            skip_source_gap(&mut unit.cursor, to).map_err(|source| Stop::OffsetMapOrder {
                partition: p,
                source,
            });
        if skipped.is_ok() {
            self.note_data_loss(&mut unit, from, to);
        }
        let persisted = skipped.and_then(|_| persist_map(&self.state, self.config, &mut unit));
        self.units.insert(p, unit);
        persisted?;
        self.flush_state()?;
        self.reposition(p)
    }

    /// Moves the consumer of partition `p` to its cursor's next source offset (with the leader
    /// epoch of the record before it, so that librdkafka validates the position), leaving the
    /// other partitions' fetching as it is.
    fn reposition(&mut self, p: i32) -> Result<(), Stop> {
        if let Some(path) = self.batch.as_mut() {
            path.reposition(p, &self.units[&p]);
            tracing::info!(
                partition = p,
                next_src = self.units[&p].cursor.next_src,
                "source fetch re-positioned"
            );
            return Ok(());
        }
        let topic = &self.config.source_topic;
        let assign = |source| Stop::AssignSource {
            topic: topic.clone(),
            source,
        };
        let cursor = &self.units[&p].cursor;
        let next_src = cursor.next_src;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(next_src))
            .map_err(assign)?;
        if let Some((offset, epoch)) = cursor.last_accepted
            && offset == next_src - 1
            && epoch >= 0
        {
            set_leader_epoch(&mut tpl, topic, p, epoch);
        }
        // A partition librdkafka stopped fetching cannot be seeked: take it out of the
        // assignment and put it back at the offset.
        self.consumer.incremental_unassign(&tpl).map_err(assign)?;
        self.consumer.incremental_assign(&tpl).map_err(assign)?;
        tracing::info!(partition = p, next_src, "source consumer re-positioned");
        Ok(())
    }

    /// The source must still be the recorded cluster and topic.
    fn check_source_identity(&mut self) -> Result<(), Stop> {
        if let Some(id) = self.consumer.client().fetch_cluster_id(ADMIN_TIMEOUT) {
            check_pinned(
                "source",
                self.config.pinned_cluster_ids.source.as_deref(),
                &id,
            )?;
            check_cluster_id(&self.source_cluster_id, &id)?;
        }
        let topic_id = match self.describe_source() {
            // No answer (the source is restarting, unreachable, slow) is not a verdict: copying
            // waits for the source anyway, and the check runs again at the next interval.
            Err(Stop::DescribeSourceTopic { source, .. }) => {
                tracing::warn!(error = %source, "could not describe the source topic; checking again later");
                return Ok(());
            }
            other => other?,
        };
        check_topic_id(
            &self.config.source_topic,
            self.source_topic_id.as_deref(),
            topic_id.as_deref(),
        )
    }

    /// Takes the latest answer about the source partitions' ends (waiting at most `wait` for
    /// it) and updates each partition's source position, ends, open transaction and lag — against
    /// the end its reader can reach: the last stable offset under read_committed — (metrics and
    /// the next position record), and watches whether reading moves. Returns the source log
    /// starts it read (none while the answer is still out).
    fn refresh_lag(&mut self, wait: Duration) -> Result<BTreeMap<i32, i64>, Stop> {
        let Some(answer) = self.source_ends.poll(&self.source_wire, wait) else {
            return Ok(BTreeMap::new());
        };
        let mut log_starts = BTreeMap::new();
        let mut stalled = None;
        let metrics = &self.handles.metrics;
        let isolation = self.config.isolation;
        let now = now_ms();
        let positions: BTreeMap<i32, i64> = match &self.batch {
            Some(path) => path.positions(),
            None => self
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
                .unwrap_or_default(),
        };
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
            // An unanswered query makes the ends (and so the lag) unknown: repeating the last
            // ones would call a partition caught up that the source has moved past.
            let ends = answer.get(p).copied().flatten();
            if ends.is_none() {
                tracing::debug!(partition = p, "no source watermarks");
            }
            if let Some(e) = ends {
                log_starts.insert(*p, e.log_start);
            }
            let high = ends.map(|e| e.high_watermark);
            let last_stable = ends
                .filter(|_| isolation == crate::config::Isolation::ReadCommitted)
                .map(|e| e.last_stable);
            let readable = ends.map(|e| e.readable(isolation));
            if unit.high_watermark != high || unit.last_stable != last_stable {
                unit.position_dirty = true;
            }
            unit.high_watermark = high;
            unit.last_stable = last_stable;
            let open = open_transaction(unit.open_transaction, ends, isolation, now);
            if reported(open, now) != reported(unit.open_transaction, now) {
                unit.position_dirty = true;
                if let Some(t) = reported(open, now) {
                    tracing::info!(
                        partition = p,
                        from_offset = t.from_offset,
                        "a source transaction holds the last stable offset; waiting for it (not a fault)"
                    );
                }
            }
            unit.open_transaction = open;
            metrics
                .transaction_open_seconds
                .get_or_create(&unit.labels)
                .set(open.map_or(0.0, |t| ((now - t.since_ms).max(0) as f64) / 1000.0));
            let stall_after = self.config.stall_timeout;
            let watch = unit
                .source_watch
                .get_or_insert_with(|| SourceWatch::new(stall_after));
            // Reading moves, or there is nothing its reader could read: an open transaction
            // holding the last stable offset is no stall.
            match watch.observe(Instant::now(), next, readable) {
                Some(SourceStall::Unread { high, waited, .. }) => {
                    stalled.get_or_insert((*p, next, Some(high), waited));
                }
                Some(SourceStall::Unanswered { waited, .. }) => {
                    stalled.get_or_insert((*p, next, None, waited));
                }
                None => {}
            }
            if let Some(end) = readable {
                let lag = (end - next).max(0);
                metrics.lag_records.get_or_create(&unit.labels).set(lag);
                let seconds = match (lag, unit.last_timestamp) {
                    (0, _) | (_, None) => 0.0,
                    (_, Some(ts)) => ((now - ts) as f64 / 1000.0).max(0.0),
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
        match stalled {
            Some((partition, next, high, waited)) => Err(Stop::SourceStalled {
                topic: self.config.source_topic.clone(),
                partition,
                next,
                high,
                seconds: waited.as_secs(),
            }),
            None => Ok(log_starts),
        }
    }
}
