//! The batch engine's copy path (`--engine batch`): fetch record batches as bytes with the
//! `kmirror-wire` client, plan each partition's entries (`batch_plan`), decide every record's
//! destination offset with the same [`Cursor`](crate::cursor::Cursor) as the record engine (new
//! map segments persisted before the records behind them), rewrite only the batch header for
//! the destination and produce one batch per partition per request (`send`: in order, on one
//! connection per partition, and nothing more after a failure until every earlier batch is
//! accounted for). Every
//! acknowledgement's base offset is checked against the one the batch had to get; a refusal
//! stops the partition with the source offset.
//!
//! A partition is written as the producer that appended the destination's last batch (its id
//! and epoch, the sequence after that batch: [`kmirror_wire::LastWriter`]) where there is one,
//! else as the fetcher's own idempotent producer. The broker appends a batch of that producer
//! only in sequence, so nothing a writer before this one still had under way — a zombie's
//! request that reaches the broker late — can land after this fetcher's batches.
//!
//! Fetches go to each leader on their own (`kmirror_wire::Client::fetch_groups`): a leader that
//! does not answer holds up only the partitions it leads. Each request puts the partitions that
//! got only the truncated start of an oversized batch last time first (a broker returns a whole
//! batch larger than the partition's fetch size only to the first partition with data in its
//! answer), and turns the order of the others round. Start-up, the source checks, positions and
//! the stop are the record engine's.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kmirror_wire::{
    Client, FetchOptions, FetchPartition, FetchedPartition, KafkaCode, ProduceOptions,
    ProducerIdentity,
};
use rdkafka::ClientConfig;
use tokio::sync::mpsc;

use super::batch_plan::{self, Destination, Piece};
use super::limits::DestinationLimits;
use super::position::persist_map;
use super::source_ends::{SOURCE_REQUEST_TIMEOUT, SourceWire, wire_config};
use super::stop::{Side, Stop};
use super::watchdog::Watchdog;
use super::{ADMIN_TIMEOUT, Fetcher, Unit};
use crate::config::{FetcherConfig, Isolation};
use crate::cursor::Accept;
use crate::memory::MIB;
use kmirror_state::records::now_ms;

/// Batches queued or in flight per partition (the broker keeps the last five per producer and
/// partition to answer resent ones).
const MAX_IN_FLIGHT: usize = 5;

/// How long the source broker may hold a fetch of every partition of the topic for records.
const IDLE_FETCH_WAIT: Duration = Duration::from_millis(500);

/// Pause after a failed fetch or produce before the next attempt.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// Reads of the destination's last batches at start-up before a retriable failure stops it.
const LAST_WRITER_ATTEMPTS: u32 = 25;

mod send;
mod window;

use send::Sent;
use window::Window;

/// One partition of the batch path.
struct Lane {
    /// Next source offset to fetch (past skipped control records and aborted transactions).
    fetch_offset: i64,
    /// Leader epoch of the last batch fetched, for the broker's divergence check.
    last_fetched_epoch: Option<i32>,
    /// A fetch of this partition is out (its answer not yet taken).
    fetch_out: bool,
    /// The last answer held only the truncated start of a batch larger than the fetch size:
    /// this partition goes first in its next request.
    starved: bool,
    /// The producer this partition's batches are written as: the one that appended the
    /// destination's last batch where it can be continued, else the fetcher's own.
    producer: ProducerIdentity,
    /// Sequence number of the next batch.
    sequence: i32,
    /// Batches not yet confirmed, in order: queued, then on the wire.
    sent: VecDeque<Sent>,
    /// How many of them may be on the wire.
    window: Window,
}

/// What a fetched partition calls for besides copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// The fetch offset is outside the source log, or the log diverged before it.
    SourceRange,
    /// The source does not know the topic or partition.
    SourceIdentity,
}

/// The batch engine's clients and in-flight batches.
pub(super) struct BatchPath {
    runtime: Arc<tokio::runtime::Runtime>,
    source: Client,
    destination: Client,
    fetch: FetchOptions,
    partition_max_bytes: i32,
    produce: ProduceOptions,
    shape: Destination,
    lanes: BTreeMap<i32, Lane>,
    watchdog: Watchdog,
    /// Answers of the fetches out, each leader's as it comes.
    fetched_tx: mpsc::UnboundedSender<Vec<FetchedPartition>>,
    fetched_rx: mpsc::UnboundedReceiver<Vec<FetchedPartition>>,
    /// Turns the order of the partitions in each fetch round.
    turn: usize,
    /// When a retry was last logged at WARN (retries repeat every few hundred milliseconds
    /// while a broker restarts; one line in five seconds says it).
    retry_warned: Option<Instant>,
}

impl BatchPath {
    /// Connects to the destination, gets a producer id and starts each partition at its cursor.
    /// With write leases, no destination request may outlive the lease's safety margin.
    pub(super) fn start(
        config: &FetcherConfig,
        source: &SourceWire,
        source_config: &ClientConfig,
        destination: &ClientConfig,
        limits: &DestinationLimits,
        units: &BTreeMap<i32, Unit>,
    ) -> Result<BatchPath, Stop> {
        let lease = config.lease.is_some();
        let mut destination_config = wire_config(destination, Side::Destination)?;
        if lease {
            let bound = crate::config::LEASE_REQUEST_TIMEOUT;
            destination_config.request_timeout = destination_config.request_timeout.min(bound);
            destination_config.connect_timeout = destination_config.connect_timeout.min(bound);
        }
        let runtime = source.runtime.clone();
        let ends: BTreeMap<i32, i64> = units.iter().map(|(&p, u)| (p, u.cursor.next_dst)).collect();
        let (destination_client, producer, last_writers) = runtime.block_on(async {
            let connect_failed = |source| Stop::ConnectWire {
                side: Side::Destination,
                source,
            };
            let d = Client::connect(destination_config)
                .await
                .map_err(connect_failed)?;
            let id = d.init_producer_id().await.map_err(connect_failed)?;
            // Leaders move and topics appear: a few seconds of retries.
            let mut attempts = 0;
            let last = loop {
                match d.last_writers(&config.destination_topic, &ends).await {
                    Ok(last) => break last,
                    Err(e) if e.is_retriable() && attempts < LAST_WRITER_ATTEMPTS => {
                        attempts += 1;
                        tracing::debug!(error = %e, "reading the destination's last batches again");
                        tokio::time::sleep(RETRY_BACKOFF).await;
                    }
                    Err(e) => return Err(connect_failed(e)),
                }
            };
            Ok::<_, Stop>((d, id, last))
        })?;
        // Fetch responses are the engine's memory: the consumer's sizes (derived from the
        // memory budget, or the user's consumerProperties); the broker returns a partition's
        // first batch even when it is larger.
        let size = |key: &str, default: u64| {
            source_config
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(default)
                .clamp(1024, i32::MAX as u64)
        };
        let response = size("fetch.max.bytes", 50 * MIB);
        let per_partition = size("max.partition.fetch.bytes", MIB);
        tracing::info!(
            producer_id = producer.id,
            producer_epoch = producer.epoch,
            partitions = units.len(),
            "batch engine connected ({continued} partitions go on as the producer of their \
             destination's last batch)",
            continued = last_writers.len()
        );
        for (p, w) in &last_writers {
            tracing::debug!(
                partition = p,
                producer_id = w.producer.id,
                producer_epoch = w.producer.epoch,
                sequence = w.next_sequence,
                "going on as the destination's last writer"
            );
        }
        let (fetched_tx, fetched_rx) = mpsc::unbounded_channel();
        Ok(BatchPath {
            runtime,
            source: source.client.clone(),
            destination: destination_client,
            fetch: FetchOptions {
                isolation: match config.isolation {
                    Isolation::ReadCommitted => kmirror_wire::Isolation::ReadCommitted,
                    Isolation::ReadUncommitted => kmirror_wire::Isolation::ReadUncommitted,
                },
                max_wait: Duration::from_millis(100),
                min_bytes: 1,
                max_bytes: response as i32,
            },
            partition_max_bytes: per_partition as i32,
            produce: ProduceOptions {
                acks: -1,
                // With leases, no request may outlive the lease's safety margin.
                timeout: if lease {
                    crate::config::LEASE_REQUEST_TIMEOUT
                } else {
                    Duration::from_secs(30)
                },
            },
            shape: Destination {
                max_message_bytes: limits.max_message_bytes,
                create_time: limits.create_time,
                before_ms: limits.before.map(|(b, _)| b),
                after_ms: limits.after.map(|(b, _)| b),
                now_ms: 0,
            },
            lanes: units
                .iter()
                .map(|(&p, unit)| {
                    (
                        p,
                        Lane {
                            fetch_offset: unit.cursor.next_src,
                            last_fetched_epoch: epoch_before(unit),
                            fetch_out: false,
                            starved: false,
                            producer: last_writers.get(&p).map_or(producer, |w| w.producer),
                            sequence: last_writers.get(&p).map_or(0, |w| w.next_sequence),
                            sent: VecDeque::new(),
                            window: Window::new(),
                        },
                    )
                })
                .collect(),
            watchdog: Watchdog::new(config.stall_timeout),
            fetched_tx,
            fetched_rx,
            turn: 0,
            retry_warned: None,
        })
    }

    /// The destination client, for the write lease to fence the moment it runs out.
    pub(super) fn destination(&self) -> &Client {
        &self.destination
    }

    /// Whether a retry should be logged at WARN now (at most once in five seconds).
    fn warn_retry(&mut self) -> bool {
        let now = Instant::now();
        let due = self
            .retry_warned
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(5));
        if due {
            self.retry_warned = Some(now);
        }
        due
    }

    /// Batches queued or in flight over all partitions.
    fn in_flight(&self) -> usize {
        self.lanes.values().map(|l| l.sent.len()).sum()
    }

    /// Where each partition fetches next.
    pub(super) fn positions(&self) -> BTreeMap<i32, i64> {
        self.lanes
            .iter()
            .map(|(&p, l)| (p, l.fetch_offset))
            .collect()
    }

    /// Fetches `p` from its cursor again (after a source check).
    pub(super) fn reposition(&mut self, p: i32, unit: &Unit) {
        if let Some(lane) = self.lanes.get_mut(&p) {
            lane.fetch_offset = unit.cursor.next_src;
            lane.last_fetched_epoch = epoch_before(unit);
        }
    }

    /// Drops every batch queued or in flight (they may or may not land; the next start reads
    /// the destination log end). Answers of fetches still out are ignored when they come (their
    /// fetch offset is no lane's any more, or the lane fetches again from its cursor).
    pub(super) fn purge(&mut self, units: &mut BTreeMap<i32, Unit>) {
        for (p, lane) in self.lanes.iter_mut() {
            lane.sent.clear();
            if let Some(unit) = units.get_mut(p) {
                unit.cursor.forget_inflight();
                lane.fetch_offset = unit.cursor.next_src;
            }
        }
    }

    /// The order of the partitions to fetch now: those with room for batches and no fetch out,
    /// the starved first, then the others turned round by one place each round.
    fn next_fetch_order(&mut self) -> Vec<i32> {
        let ready: Vec<i32> = self
            .lanes
            .iter()
            .filter(|(_, l)| !l.fetch_out && l.sent.len() < MAX_IN_FLIGHT)
            .map(|(&p, _)| p)
            .collect();
        let order = fetch_order(&ready, |p| self.lanes[&p].starved, self.turn);
        self.turn = self.turn.wrapping_add(1);
        order
    }
}

/// `ready` partitions in request order: the starved first, then the rest from place
/// `turn % len` on, wrapping round.
fn fetch_order(ready: &[i32], starved: impl Fn(i32) -> bool, turn: usize) -> Vec<i32> {
    let (first, rest): (Vec<i32>, Vec<i32>) = ready.iter().partition(|&&p| starved(p));
    let mut order = first;
    if !rest.is_empty() {
        let at = turn % rest.len();
        order.extend(rest[at..].iter().chain(&rest[..at]));
    }
    order
}

/// The leader epoch of the record right before the cursor, when known.
fn epoch_before(unit: &Unit) -> Option<i32> {
    unit.cursor
        .last_accepted
        .filter(|&(o, e)| o == unit.cursor.next_src - 1 && e >= 0)
        .map(|(_, e)| e)
}

/// A batch to put on the wire: its bytes and bookkeeping.
struct Outgoing {
    batch: Bytes,
    first_dst: i64,
    last_dst: i64,
    first_src: i64,
    bytes: u64,
    max_timestamp: i64,
    passed: bool,
}

impl Fetcher<'_> {
    fn batch_path(&mut self) -> &mut BatchPath {
        self.batch.as_mut().expect("the batch engine runs")
    }

    /// One round of the batch engine: ask for what the partitions with room can take, copy the
    /// answers that came (waiting at most `wait` for one) and apply the destination's answers.
    /// Returns the check a fetched partition called for.
    pub(super) fn mirror_batches(&mut self, wait: Duration) -> Result<Option<Check>, Stop> {
        let all_full = self
            .batch_path()
            .lanes
            .values()
            .all(|l| l.sent.len() >= MAX_IN_FLIGHT);
        if all_full {
            // Nothing to fetch for until the destination answers.
            self.drain_batches(true)?;
            return Ok(None);
        }
        let (fetched, check) = self.fetch_batches(wait)?;
        for f in fetched {
            self.copy_fetched(f)?;
        }
        self.drain_batches(false)?;
        Ok(check)
    }

    /// Asks each partition with room and no fetch out for records from its fetch offset (each
    /// leader on its own), and takes the answers that came within `wait`.
    fn fetch_batches(
        &mut self,
        wait: Duration,
    ) -> Result<(Vec<FetchedPartition>, Option<Check>), Stop> {
        let topic = self.config.source_topic.clone();
        let path = self.batch_path();
        let order = path.next_fetch_order();
        let out = path.lanes.values().filter(|l| l.fetch_out).count();
        if !order.is_empty() {
            // With every partition asked at once, an answer comes as soon as any has records:
            // the broker may wait longer for them, so that an idle topic asks five times less
            // often (hundreds of topics in a pool pod). A partition left out (its batches in
            // flight) must not wait behind it.
            let max_wait = if order.len() == path.lanes.len() {
                wait.max(IDLE_FETCH_WAIT)
            } else {
                wait
            };
            let options = FetchOptions {
                max_wait,
                ..path.fetch
            };
            let wanted: Vec<FetchPartition> = order
                .iter()
                .map(|p| {
                    let l = &path.lanes[p];
                    FetchPartition {
                        partition: *p,
                        offset: l.fetch_offset,
                        max_bytes: path.partition_max_bytes,
                        last_fetched_epoch: l.last_fetched_epoch,
                    }
                })
                .collect();
            for p in &order {
                path.lanes.get_mut(p).expect("listed").fetch_out = true;
            }
            let (source, tx) = (path.source.clone(), path.fetched_tx.clone());
            let timeout = max_wait + SOURCE_REQUEST_TIMEOUT + Duration::from_secs(1);
            path.runtime.spawn(async move {
                let planned = source
                    .fetch_groups(&topic, &wanted, &options, timeout)
                    .await;
                match planned {
                    Ok((failed, groups)) => {
                        if !failed.is_empty() {
                            let _ = tx.send(failed);
                        }
                        for group in groups {
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                let _ = tx.send(group.answer.await);
                            });
                        }
                    }
                    Err(e) => {
                        source.mark_stale();
                        let failure = e.to_string();
                        let _ = tx.send(
                            wanted
                                .iter()
                                .map(|p| FetchedPartition {
                                    partition: p.partition,
                                    fetch_offset: p.offset,
                                    error: KafkaCode::NETWORK_EXCEPTION,
                                    high_watermark: -1,
                                    last_stable_offset: -1,
                                    log_start_offset: -1,
                                    aborted: Vec::new(),
                                    diverging_epoch: None,
                                    leader_epoch: -1,
                                    records: Bytes::new(),
                                    failure: Some(failure.clone()),
                                })
                                .collect(),
                        );
                    }
                }
            });
        }
        // The answers that came; if none yet, wait a little for the first (a loop that never
        // waits would spin). A leader that does not answer holds up only its own partitions,
        // and the loop goes on (heartbeat, lag, positions) while it is out.
        let mut answers: Vec<FetchedPartition> = Vec::new();
        while let Ok(a) = path.fetched_rx.try_recv() {
            answers.extend(a);
        }
        if answers.is_empty() && (out > 0 || !order.is_empty()) {
            let rx = &mut path.fetched_rx;
            let first = path.runtime.block_on(async {
                tokio::time::timeout(wait + Duration::from_millis(100), rx.recv()).await
            });
            if let Ok(Some(a)) = first {
                answers.extend(a);
            }
            while let Ok(a) = path.fetched_rx.try_recv() {
                answers.extend(a);
            }
        }
        let mut check = None;
        let mut ok = Vec::with_capacity(answers.len());
        let mut backoff = false;
        let mut failure = None;
        for f in answers {
            let Some(lane) = path.lanes.get_mut(&f.partition) else {
                continue;
            };
            lane.fetch_out = false;
            if f.fetch_offset != lane.fetch_offset {
                continue; // repositioned while the fetch was out
            }
            if f.diverging_epoch.is_some() || f.error == KafkaCode::OFFSET_OUT_OF_RANGE {
                tracing::warn!(
                    partition = f.partition,
                    offset = f.fetch_offset,
                    diverging = ?f.diverging_epoch,
                    error = %f.error.name(),
                    "the source log does not hold the fetch offset as read"
                );
                check = Some(Check::SourceRange);
            } else if f.error == KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
                || f.error == KafkaCode::UNKNOWN_TOPIC_ID
            {
                check.get_or_insert(Check::SourceIdentity);
                backoff = true;
            } else if !f.error.is_ok() {
                tracing::debug!(partition = f.partition, error = %f.error.name(), failure = ?f.failure, "source fetch error; fetching again");
                failure = failure.or(f.failure.clone().map(|why| (f.partition, why)));
                backoff = true;
            } else {
                ok.push(f);
            }
        }
        if let Some((partition, why)) = failure {
            if path.warn_retry() {
                tracing::warn!(partition, "source fetch failed ({why}); fetching again");
            }
            path.source.mark_stale();
        }
        if backoff && ok.is_empty() {
            std::thread::sleep(RETRY_BACKOFF);
        }
        Ok((ok, check))
    }

    /// Plans one fetched partition, records its offsets (persisting new map segments first) and
    /// sends its batches.
    fn copy_fetched(&mut self, fetched: FetchedPartition) -> Result<(), Stop> {
        let p = fetched.partition;
        let topic = self.config.source_topic.clone();
        let (shape, from) = {
            let path = self.batch_path();
            let lane = path.lanes.get(&p).ok_or(Stop::UnownedPartition {
                what: "batches from",
                partition: p,
            })?;
            (path.shape, lane.fetch_offset)
        };
        if fetched.fetch_offset != from {
            return Ok(()); // repositioned while the fetch was out
        }
        let now = now_ms();
        let shape = Destination {
            now_ms: now,
            ..shape
        };
        let plan = batch_plan::plan(from, fetched.records.clone(), &fetched.aborted, shape)
            .map_err(|source| Stop::SourceBatch {
                topic: topic.clone(),
                partition: p,
                offset: from,
                source,
            })?;
        // Records came but not one whole entry: the start of a batch larger than this
        // partition's share of the answer. Asked first next time, the broker returns it whole.
        let starved = plan.next_offset == from && !fetched.records.is_empty();
        if starved {
            tracing::debug!(
                partition = p,
                offset = from,
                bytes = fetched.records.len(),
                "only the start of an oversized batch came; asking for it first next time"
            );
        }
        self.batch_path()
            .lanes
            .get_mut(&p)
            .expect("checked above")
            .starved = starved;
        let mut outgoing = Vec::with_capacity(plan.pieces.len());
        let mut gap = false;
        // A record the destination would refuse: what comes before it is copied, then the
        // partition stops naming it.
        let mut refused = None;
        {
            let unit = self.units.get_mut(&p).expect("owned partition");
            let check = RecordCheck {
                limits: &self.limits,
                topic: &self.config.destination_topic,
                now_ms: now,
            };
            for piece in plan.pieces {
                outgoing.extend(accept_piece(
                    unit,
                    &self.handles.metrics,
                    piece,
                    shape,
                    &check,
                    &mut gap,
                    &mut refused,
                )?);
                if refused.is_some() {
                    break;
                }
            }
        }
        if gap {
            self.handles
                .metrics
                .gaps
                .get_or_create(&self.units[&p].labels)
                .inc();
            let unit = self.units.get_mut(&p).expect("owned partition");
            persist_map(&self.state, self.config, unit)?;
            self.state.flush(ADMIN_TIMEOUT).map_err(Stop::WriteState)?;
        }
        {
            let lane = self.batch_path().lanes.get_mut(&p).expect("checked above");
            lane.fetch_offset = plan.next_offset;
            if plan.last_epoch.is_some() {
                lane.last_fetched_epoch = plan.last_epoch;
            }
        }
        for out in outgoing {
            self.send_batch(p, out)?;
        }
        refused.map_or(Ok(()), Err)
    }
}

/// What each record of the record path is checked against before it is accepted.
struct RecordCheck<'a> {
    limits: &'a DestinationLimits,
    topic: &'a str,
    now_ms: i64,
}

/// Records the offsets of one planned piece in the cursor and turns it into outgoing batches.
fn accept_piece(
    unit: &mut Unit,
    metrics: &crate::metrics::FetcherMetrics,
    piece: Piece,
    shape: Destination,
    check: &RecordCheck<'_>,
    gap: &mut bool,
    refused: &mut Option<Stop>,
) -> Result<Vec<Outgoing>, Stop> {
    let partition = unit.cursor.partition;
    let mut accept = |offset: i64, epoch: i32| -> Result<Option<i64>, Stop> {
        match unit
            .cursor
            .accept(offset, epoch)
            .map_err(|source| Stop::OffsetMapOrder { partition, source })?
        {
            Accept::Skip => Ok(None),
            Accept::Produce {
                expected_dst,
                gap: g,
            } => {
                *gap |= g;
                Ok(Some(expected_dst))
            }
        }
    };
    match piece {
        Piece::Pass(b) => {
            let h = b.header;
            let mut first = None;
            let mut last = -1;
            for o in h.base_offset..=h.last_offset() {
                if let Some(dst) = accept(o, h.partition_leader_epoch)? {
                    first.get_or_insert(dst);
                    last = dst;
                }
            }
            metrics.batches_passed.get_or_create(&unit.labels).inc();
            Ok(first
                .map(|first_dst| Outgoing {
                    bytes: b.bytes.len() as u64,
                    batch: b.bytes,
                    first_dst,
                    last_dst: last,
                    first_src: h.base_offset,
                    max_timestamp: h.max_timestamp,
                    passed: true,
                })
                .into_iter()
                .collect())
        }
        Piece::Records {
            records,
            epoch,
            codec,
            why,
        } => {
            tracing::debug!(
                partition,
                why = why.label(),
                records = records.len(),
                "records re-encoded"
            );
            metrics.batches_reencoded.get_or_create(&unit.labels).inc();
            // Each record is checked first: a refusal copies the records before it and names it.
            let mut kept = Vec::with_capacity(records.len());
            let mut first = None;
            for r in &records {
                if let Err(why) =
                    check
                        .limits
                        .check(batch_plan::record_size(r), Some(r.timestamp), check.now_ms)
                {
                    *refused = Some(Stop::RecordRefused {
                        topic: check.topic.to_string(),
                        partition,
                        source_offset: r.offset,
                        why,
                    });
                    break;
                }
                if let Some(dst) = accept(r.offset, epoch)? {
                    first.get_or_insert(dst);
                    kept.push(r.clone());
                }
            }
            let Some(mut next_dst) = first else {
                return Ok(Vec::new());
            };
            // Destination offsets of the records kept are consecutive from the first.
            let mut out = Vec::new();
            let mut at = 0;
            let encoded = batch_plan::encode_fitting(&kept, codec, shape.max_message_bytes)
                .map_err(|source| Stop::SourceBatch {
                    topic: unit.labels.topic.clone(),
                    partition,
                    offset: kept[0].offset,
                    source,
                })?;
            for (count, batch) in encoded {
                let run = &kept[at..at + count];
                out.push(Outgoing {
                    batch,
                    first_dst: next_dst,
                    last_dst: next_dst + count as i64 - 1,
                    first_src: run[0].offset,
                    bytes: run.iter().map(batch_plan::record_size).sum::<usize>() as u64,
                    max_timestamp: run.iter().map(|r| r.timestamp).max().unwrap_or(-1),
                    passed: false,
                });
                next_dst += count as i64;
                at += count;
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fetch_order;

    /// name, ready, starved, turn → request order
    type Row = (&'static str, Vec<i32>, Vec<i32>, usize, Vec<i32>);

    #[test]
    fn starved_partitions_go_first_and_the_rest_turn_round() {
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // name, ready, starved, turn → request order
            ("nothing ready", vec![], vec![], 3, vec![]),
            ("turn 0: in order", vec![0, 1, 2], vec![], 0, vec![0, 1, 2]),
            ("turn 1: the second first", vec![0, 1, 2], vec![], 1, vec![1, 2, 0]),
            ("the turn wraps", vec![0, 1, 2], vec![], 5, vec![2, 0, 1]),
            ("a starved partition first, whatever the turn", vec![0, 1, 2], vec![2], 0, vec![2, 0, 1]),
            ("several starved, in order, then the rest turned", vec![0, 1, 2, 3], vec![1, 3], 1, vec![1, 3, 2, 0]),
            ("only starved ones", vec![4, 5], vec![4, 5], 7, vec![4, 5]),
        ];
        for (name, ready, starved, turn, expect) in table {
            assert_eq!(
                fetch_order(&ready, |p| starved.contains(&p), turn),
                expect,
                "{name}"
            );
        }
    }
}
