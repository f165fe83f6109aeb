//! The replication engine: source partitions in, destination partitions out, at the offsets the
//! offset map dictates, with the destination log as the only checkpoint.
//!
//! With leases (`lease`, run by the operator), nothing is written before the operator grants the
//! partitions and nothing after the grant runs out (docs/fencing.md).
//!
//! A run has four parts, each in its own module:
//! 1. **start-up** (`startup`, its decisions pure in `start_plan`): check the source cluster ID
//!    and topic ID against what the state topic recorded; wait until the destination log end is
//!    stable and every in-sync replica holds it (`settle`, all partitions together: the leader's
//!    own log end, `log_end`, equals the high watermark; a previous incarnation's last requests
//!    drain) and derive the next source offset from it through the offset map; compare the last
//!    destination record with its source record (a foreign write fails); on an empty
//!    destination whose source log starts above 0, align the prefix;
//! 2. **the poll loop** (`poll_loop`): poll a batch, record gaps in the map (persisted before the
//!    records that follow them), produce, re-check the source range and identity, refresh the
//!    lag, persist positions periodically, honour the throttle and SIGTERM;
//! 3. **delivery** (`delivery`): an idempotent producer whose every delivery report's offset is
//!    checked against the one the record had to get;
//! 4. **stop** (`finish`): flush — or, after a failed delivery or a finding that forbids
//!    writing on, purge — what the producer holds, and persist the final position with the
//!    outcome.
//!
//! Every way to fail is a variant of `Stop` (module `stop`), named after the step that failed or
//! what a check found; `Stop::reason` is the one place that maps it to the recorded
//! [`StopReason`]. What the destination accepts is read at start (`limits`) and checked before
//! each record is produced; whether the source still holds what was mirrored is judged in
//! `source_check` from its watermarks and where a leader epoch ends (`epochs`). Positions and
//! map chunks are written by `position`; client configurations live in `clients`.

mod batch_path;
mod batch_plan;
mod clients;
mod delivery;
mod epochs;
mod finish;
mod lease;
mod limits;
mod log_end;
mod old_formats;
mod poll_loop;
mod position;
mod prefix;
mod settle;
mod shared_clients;
mod source_check;
mod source_ends;
mod start_plan;
mod startup;
mod stop;
mod watchdog;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::BaseProducer;

use crate::config::FetcherConfig;
use crate::cursor::Cursor;
use crate::metrics::{FetcherMetrics, PartitionLabels};
use crate::throttle::Throttle;
use delivery::DeliveryContext;
use epochs::SourceEpochs;
use kmirror_state::records::{DataLossRecord, PrefixAlignment, StopReason, now_ms};
use kmirror_state::store::StateWriter;
use limits::DestinationLimits;

pub use limits::Refusal;
pub use stop::{Side, Stop};

/// Bound on admin calls, watermark reads and state flushes.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(15);

/// Why the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Clean shutdown (SIGTERM): everything produced is confirmed and the position persisted.
    Stopped,
    /// Stopped for a reason; exit with its code.
    Failed {
        /// The reason.
        reason: StopReason,
        /// The partition the finding is about alone (the others only stopped with it); `None`
        /// for a stop of the whole process.
        partition: Option<i32>,
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

    /// One line for a person: the reason and what to do (none for a clean stop).
    pub fn summary(&self) -> Option<String> {
        match self {
            Outcome::Stopped => None,
            Outcome::Failed {
                reason,
                partition,
                message,
            } => Some(kmirror_state::stop_line::render(
                *reason, *partition, message,
            )),
        }
    }

    fn failed(stop: &Stop) -> Outcome {
        Outcome::Failed {
            reason: stop.reason(),
            partition: stop.partition(),
            message: stop.to_string(),
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

    /// The loop made progress now.
    pub fn beat(&self) {
        self.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Sets readiness.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
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

/// One mirrored partition of a running fetcher.
struct Unit {
    cursor: Cursor,
    labels: PartitionLabels,
    /// Number of the state record holding the map's first chunk (chunks below it were removed
    /// with the segments they held, below the source log start).
    first_chunk: u32,
    /// Map chunks already persisted in full (only the last one is rewritten), counted from
    /// `first_chunk`.
    sealed_chunks: usize,
    /// Chunk records persisted so far, counted from `first_chunk`.
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
    /// When the position was last written (a heartbeat rewrites it when nothing changed).
    position_written: Instant,
    /// The latest records skipped because the source deleted them before they were copied.
    data_loss: Option<DataLossRecord>,
    /// Since when the source's high watermark has stayed below the next offset.
    beyond_end_since: Option<Instant>,
    /// The source's last stable offset at the last look (read_committed).
    last_stable: Option<i64>,
    /// A source transaction holding the last stable offset below the high watermark.
    open_transaction: Option<kmirror_state::records::OpenTransaction>,
    /// Whether reading from the source moves (made at the first lag refresh).
    source_watch: Option<watchdog::SourceWatch>,
}

impl Unit {
    /// A unit at `cursor`, with map chunks `first_chunk..recorded_chunks` already in the state
    /// topic.
    fn new(
        cursor: Cursor,
        labels: PartitionLabels,
        prefix: Option<PrefixAlignment>,
        first_chunk: u32,
        recorded_chunks: usize,
    ) -> Unit {
        let recorded = recorded_chunks.saturating_sub(first_chunk as usize);
        Unit {
            cursor,
            labels,
            first_chunk,
            sealed_chunks: recorded.saturating_sub(1),
            persisted_chunks: recorded,
            prefix,
            high_watermark: None,
            source_position: 0,
            lag_seconds: 0.0,
            last_timestamp: None,
            records: 0,
            position_dirty: true,
            position_written: Instant::now(),
            data_loss: None,
            beyond_end_since: None,
            last_stable: None,
            open_transaction: None,
            source_watch: None,
        }
    }
}

/// A running fetcher: its clients, its identity facts and its partitions.
struct Fetcher<'a> {
    config: &'a FetcherConfig,
    handles: &'a Handles,
    source_config: ClientConfig,
    destination_config: ClientConfig,
    consumer: BaseConsumer,
    producer: Arc<BaseProducer<DeliveryContext>>,
    /// The write lease, when the operator grants them.
    lease: Option<&'a lease::LeaseHolder>,
    source_admin: Arc<AdminClient<DefaultClientContext>>,
    state: StateWriter,
    /// What the destination topic accepts.
    limits: DestinationLimits,
    /// Where source leader epochs end (asked when something looks wrong).
    epochs: SourceEpochs,
    /// The destination leaders' own log ends (asked at start).
    log_ends: log_end::DestinationLogEnds,
    source_cluster_id: String,
    source_topic_id: Option<String>,
    units: BTreeMap<i32, Unit>,
    throttle: Option<Throttle>,
    /// The wire client of the source (watermarks for both engines; fetches for the batch one).
    source_wire: source_ends::SourceWire,
    /// The source partitions' ends, asked in the background.
    source_ends: source_ends::SourceEnds,
    /// The batch engine's copy path (`--engine batch`); `None`: the record engine.
    batch: Option<batch_path::BatchPath>,
}

impl Fetcher<'_> {
    fn labels(&self, partition: i32) -> PartitionLabels {
        PartitionLabels::new(&self.config.mirror, &self.config.source_topic, partition)
    }
}

/// Runs the fetcher until SIGTERM (via `handles.shutdown`) or a stop reason. With leases, it
/// writes nothing before the operator grants them and stops writing when they run out.
pub fn run(config: &FetcherConfig, handles: &Handles) -> Outcome {
    let lease = match &config.lease {
        None => None,
        Some(settings) => {
            let acquired = clients::cluster_config(config, Side::Destination)
                .and_then(|d| lease::LeaseHolder::acquire(config, settings, &d, &handles.shutdown));
            match acquired {
                Ok(Some(l)) => Some(l),
                Ok(None) => return Outcome::Stopped,
                Err(stop) => return finish::start_failed(config, &stop),
            }
        }
    };
    let mut fetcher = match Fetcher::start(config, handles, lease.as_ref()) {
        Ok(f) => f,
        Err(Stop::StartInterrupted) => {
            if let Some(l) = lease {
                l.end(true);
            }
            tracing::info!("{}", Stop::StartInterrupted);
            return Outcome::Stopped;
        }
        Err(stop) => {
            let stop = match &lease {
                Some(l) if l.lapsed() => l.check().err().unwrap_or(stop),
                _ => stop,
            };
            if let Some(l) = lease {
                l.end(false);
            }
            return finish::start_failed(config, &stop);
        }
    };
    let result = fetcher.mirror();
    let (outcome, confirmed) = fetcher.finish(result);
    if let Some(l) = lease {
        // Everything produced is confirmed: the next holder may start at once.
        l.end(confirmed);
    }
    outcome
}
