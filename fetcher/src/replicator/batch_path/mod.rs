//! The batch engine's copy path (`--engine batch`): fetch record batches as bytes with the
//! `kmirror-wire` client, plan each partition's entries (`batch_plan`), decide every record's
//! destination offset with the same [`Cursor`](crate::cursor::Cursor) as the record engine (new
//! map segments persisted before the records behind them), rewrite only the batch header for
//! the destination (the fetcher's own idempotent producer id, epoch and sequence) and produce one
//! batch per partition per request, at most five in flight. Every acknowledgement's base offset
//! is checked against the one the batch had to get; a retriable failure resends the unconfirmed
//! batches unchanged and in order (the broker answers a batch it already has with its first
//! offset); a refusal stops the partition with the source offset. Start-up, the source checks,
//! positions and the stop are the record engine's.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kmirror_wire::records::{BatchProducer, encode_batch};
use kmirror_wire::{
    Client, FetchOptions, FetchPartition, FetchedPartition, KafkaCode, ProduceOptions,
    ProducerIdentity, WireConfig, WireError,
};
use rdkafka::ClientConfig;

use super::batch_plan::{self, Destination, Piece};
use super::limits::DestinationLimits;
use super::position::persist_map;
use super::stop::{Side, Stop};
use super::watchdog::Watchdog;
use super::{ADMIN_TIMEOUT, Fetcher, Unit};
use crate::config::{FetcherConfig, Isolation};
use crate::cursor::Accept;
use crate::memory::MIB;
use kmirror_state::records::now_ms;

/// Batches in flight per partition (the broker keeps the last five per producer and
/// partition to answer resent ones).
const MAX_IN_FLIGHT: usize = 5;

/// A fetch's answer, or its timeout.
type FetchAnswer = Result<Result<Vec<FetchedPartition>, WireError>, tokio::time::error::Elapsed>;

/// Bound on a source request (a fetch waits at most 100 ms for records).
const SOURCE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the source broker may hold a fetch of every partition of the topic for records.
const IDLE_FETCH_WAIT: Duration = Duration::from_millis(500);

/// Pause after a failed fetch or produce before the next attempt.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

mod send;

use send::Sent;

/// One partition of the batch path.
struct Lane {
    /// Next source offset to fetch (past skipped control records and aborted transactions).
    fetch_offset: i64,
    /// Leader epoch of the last batch fetched, for the broker's divergence check.
    last_fetched_epoch: Option<i32>,
    /// Sequence number of the next batch.
    sequence: i32,
    sent: VecDeque<Sent>,
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
    runtime: tokio::runtime::Runtime,
    source: Client,
    destination: Client,
    producer: ProducerIdentity,
    fetch: FetchOptions,
    partition_max_bytes: i32,
    produce: ProduceOptions,
    shape: Destination,
    lanes: BTreeMap<i32, Lane>,
    watchdog: Watchdog,
    /// The fetch on its way, if one is.
    pending_fetch: Option<tokio::task::JoinHandle<FetchAnswer>>,
    /// When a retry was last logged at WARN (retries repeat every few hundred milliseconds
    /// while a broker restarts; one line in five seconds says it).
    retry_warned: Option<Instant>,
}

fn wire_config(config: &ClientConfig, side: Side) -> Result<WireConfig, Stop> {
    let pairs = config
        .config_map()
        .into_keys()
        .map(|k| (k, config.get(k).unwrap_or_default()));
    WireConfig::from_pairs(pairs).map_err(|source| Stop::ConnectWire { side, source })
}

impl BatchPath {
    /// Connects both sides, gets a producer id and starts each partition at its cursor.
    pub(super) fn start(
        config: &FetcherConfig,
        source: &ClientConfig,
        destination: &ClientConfig,
        limits: &DestinationLimits,
        units: &BTreeMap<i32, Unit>,
    ) -> Result<BatchPath, Stop> {
        let mut source_config = wire_config(source, Side::Source)?;
        // A fetch is answered within its wait; a leader that says nothing for longer is hung (or
        // gone), and the sooner its connection is given up, the sooner the new leader is found.
        source_config.request_timeout = source_config.request_timeout.min(SOURCE_REQUEST_TIMEOUT);
        let destination_config = wire_config(destination, Side::Destination)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kmirror-wire")
            .enable_all()
            .build()
            .map_err(|e| Stop::ConnectWire {
                side: Side::Source,
                source: WireError::Connect {
                    broker: "(runtime)".into(),
                    reason: format!("starting the wire runtime: {e}"),
                },
            })?;
        let (source_client, destination_client, producer) = runtime.block_on(async {
            let s = Client::connect(source_config)
                .await
                .map_err(|source| Stop::ConnectWire {
                    side: Side::Source,
                    source,
                })?;
            let d = Client::connect(destination_config)
                .await
                .map_err(|source| Stop::ConnectWire {
                    side: Side::Destination,
                    source,
                })?;
            let id = d
                .init_producer_id()
                .await
                .map_err(|source| Stop::ConnectWire {
                    side: Side::Destination,
                    source,
                })?;
            Ok::<_, Stop>((s, d, id))
        })?;
        // Fetch responses are the engine's memory: the consumer's sizes (derived from the
        // memory budget, or the user's consumerProperties); the broker returns a partition's
        // first batch even when it is larger.
        let size = |key: &str, default: u64| {
            source
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(default)
                .clamp(1024, i32::MAX as u64)
        };
        let response = size("fetch.max.bytes", 50 * MIB);
        let per_partition = size("max.partition.fetch.bytes", MIB);
        let lease = config.lease.is_some();
        tracing::info!(
            producer_id = producer.id,
            producer_epoch = producer.epoch,
            "batch engine connected"
        );
        Ok(BatchPath {
            runtime,
            source: source_client,
            destination: destination_client,
            producer,
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
                            sequence: 0,
                            sent: VecDeque::new(),
                        },
                    )
                })
                .collect(),
            watchdog: Watchdog::new(config.stall_timeout),
            retry_warned: None,
            pending_fetch: None,
        })
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

    /// The source partition's log start and high watermark, asked of its leader with the wire
    /// client (whose metadata follows leader changes as its fetches meet them; an unassigned
    /// librdkafka consumer's does not). `None`: no answer within `timeout`.
    pub(super) fn source_watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Option<(i64, i64)> {
        use kmirror_wire::OffsetSpec;
        let source = self.source.clone();
        let asked = self.runtime.block_on(async {
            tokio::time::timeout(timeout, async {
                for attempt in 0..10 {
                    let listed = source
                        .list_offsets(
                            topic,
                            &[
                                (partition, OffsetSpec::Earliest),
                                (partition, OffsetSpec::Latest),
                            ],
                            kmirror_wire::Isolation::ReadUncommitted,
                        )
                        .await;
                    match listed.as_deref() {
                        Ok([low, high]) if low.error.is_ok() && high.error.is_ok() => {
                            return Some((low.offset, high.offset));
                        }
                        other => {
                            tracing::debug!(partition, attempt, answer = ?other.map(|l| l.len()), "source watermarks; asking again");
                            source.mark_stale();
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
                None
            })
            .await
        });
        asked.ok().flatten()
    }

    /// The source log starts and high watermarks of `partitions` of `topic`: two questions per
    /// leader for all of them (the starts, then the ends); the partitions without an answer
    /// within `timeout` are left out (the caller asks them one by one).
    pub(super) fn source_watermarks_of(
        &self,
        topic: &str,
        partitions: &[i32],
        timeout: Duration,
    ) -> BTreeMap<i32, (i64, i64)> {
        use kmirror_wire::OffsetSpec;
        let source = self.source.clone();
        let listed = self.runtime.block_on(async {
            tokio::time::timeout(timeout, async {
                let mut answers = Vec::new();
                for spec in [OffsetSpec::Earliest, OffsetSpec::Latest] {
                    let asked: Vec<(i32, OffsetSpec)> =
                        partitions.iter().map(|&p| (p, spec)).collect();
                    let listed = source
                        .list_offsets(topic, &asked, kmirror_wire::Isolation::ReadUncommitted)
                        .await?;
                    answers.push(
                        listed
                            .into_iter()
                            .filter(|l| l.error.is_ok())
                            .map(|l| (l.partition, l.offset))
                            .collect::<BTreeMap<i32, i64>>(),
                    );
                }
                Ok::<_, WireError>(answers)
            })
            .await
        });
        let Ok(Ok(answers)) = listed else {
            return BTreeMap::new();
        };
        let [starts, ends] = &answers[..] else {
            return BTreeMap::new();
        };
        starts
            .iter()
            .filter_map(|(&p, &low)| Some((p, (low, *ends.get(&p)?))))
            .collect()
    }

    /// Batches in flight over all partitions.
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

    /// Drops every batch in flight (they may or may not land; the next start reads the
    /// destination log end).
    pub(super) fn purge(&mut self, units: &mut BTreeMap<i32, Unit>) {
        if let Some(fetch) = self.pending_fetch.take() {
            fetch.abort();
        }
        for (p, lane) in self.lanes.iter_mut() {
            lane.sent.clear();
            if let Some(unit) = units.get_mut(p) {
                unit.cursor.forget_inflight();
                lane.fetch_offset = unit.cursor.next_src;
            }
        }
    }
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

    /// One round of the batch engine: fetch what the partitions with room in flight can take
    /// (waiting at most `wait`), copy it, and apply the answers that arrived. Returns the check
    /// a fetched partition called for.
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

    /// Fetches every partition with room in flight from its fetch offset.
    fn fetch_batches(
        &mut self,
        wait: Duration,
    ) -> Result<(Vec<FetchedPartition>, Option<Check>), Stop> {
        let topic = self.config.source_topic.clone();
        let path = self.batch_path();
        let wanted: Vec<FetchPartition> = path
            .lanes
            .iter()
            .filter(|(_, l)| l.sent.len() < MAX_IN_FLIGHT)
            .map(|(&p, l)| FetchPartition {
                partition: p,
                offset: l.fetch_offset,
                max_bytes: path.partition_max_bytes,
                last_fetched_epoch: l.last_fetched_epoch,
            })
            .collect();
        // A fetch runs on the wire runtime and the loop waits for it only a little longer than
        // the broker may: a hung leader must not hold up the heartbeat, the lag refresh and the
        // positions (a stale position would say caught up).
        if path.pending_fetch.is_none() {
            if wanted.is_empty() {
                return Ok((Vec::new(), None));
            }
            // With every partition in the fetch, an answer comes as soon as any has records:
            // the broker may wait longer for them, so that an idle topic asks five times less
            // often (hundreds of topics in a pool pod). A partition left out (its batches in
            // flight) must not wait behind it.
            let max_wait = if wanted.len() == path.lanes.len() {
                wait.max(IDLE_FETCH_WAIT)
            } else {
                wait
            };
            let options = FetchOptions {
                max_wait,
                ..path.fetch
            };
            let source = path.source.clone();
            path.pending_fetch = Some(path.runtime.spawn(async move {
                tokio::time::timeout(
                    max_wait + SOURCE_REQUEST_TIMEOUT + Duration::from_secs(1),
                    source.fetch(&topic, &wanted, &options),
                )
                .await
            }));
        }
        let handle = path.pending_fetch.as_mut().expect("set above");
        let done = path.runtime.block_on(async {
            tokio::time::timeout(wait + Duration::from_millis(100), handle).await
        });
        let Ok(joined) = done else {
            return Ok((Vec::new(), None)); // still out: the loop goes on, and looks again
        };
        path.pending_fetch = None;
        let source = path.source.clone();
        let fetched = match joined {
            Ok(Ok(Ok(f))) => f,
            Ok(Ok(Err(e))) => {
                if path.warn_retry() {
                    tracing::warn!(error = %e, "source fetch failed; fetching again");
                } else {
                    tracing::debug!(error = %e, "source fetch failed; fetching again");
                }
                source.mark_stale();
                std::thread::sleep(RETRY_BACKOFF);
                return Ok((Vec::new(), None));
            }
            Ok(Err(_)) => {
                tracing::warn!("source fetch timed out; fetching again");
                source.mark_stale();
                return Ok((Vec::new(), None));
            }
            Err(e) => {
                tracing::warn!(error = %e, "source fetch task failed; fetching again");
                return Ok((Vec::new(), None));
            }
        };
        let mut check = None;
        let mut ok = Vec::with_capacity(fetched.len());
        let mut backoff = false;
        for f in fetched {
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
                tracing::debug!(partition = f.partition, error = %f.error.name(), "source fetch error; fetching again");
                backoff = true;
            } else {
                ok.push(f);
            }
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
            let mut out = Vec::new();
            for chunk in batch_plan::chunks(&records, shape.max_message_bytes) {
                if refused.is_some() {
                    break;
                }
                let mut first = None;
                let mut last = -1;
                let mut kept = Vec::with_capacity(chunk.len());
                for r in chunk {
                    if let Err(why) = check.limits.check(
                        batch_plan::record_size(r),
                        Some(r.timestamp),
                        check.now_ms,
                    ) {
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
                        last = dst;
                        kept.push(r.clone());
                    }
                }
                let Some(first_dst) = first else { continue };
                let encoded =
                    encode_batch(&kept, codec, 0, BatchProducer::NONE).map_err(|source| {
                        Stop::SourceBatch {
                            topic: unit.labels.topic.clone(),
                            partition,
                            offset: kept[0].offset,
                            source,
                        }
                    })?;
                out.push(Outgoing {
                    batch: encoded,
                    first_dst,
                    last_dst: last,
                    first_src: kept[0].offset,
                    bytes: kept.iter().map(batch_plan::record_size).sum::<usize>() as u64,
                    max_timestamp: kept.iter().map(|r| r.timestamp).max().unwrap_or(-1),
                    passed: false,
                });
            }
            Ok(out)
        }
    }
}
