//! Holding the write lease on the owned destination partitions: a background thread asks the
//! operator for the units every third of the lease duration (sooner while one is not granted),
//! takes in its grants, and — the moment a unit's lease, less the safety margin, runs out —
//! purges the destination producer so that nothing more of this process reaches the partition,
//! and tells the poll loop to stop with `LeaseExpired`. A clean stop releases the units.
//!
//! A grant holds from when its request was sent (taken before sending), on this process's
//! monotonic clock: a grant that arrives late, after a freeze or a slow network, is still
//! bounded by when it was asked for (`kmirror_state::leases::HolderLeases`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kmirror_state::lease_io::{LeaseReader, LeaseWriter, ReadFrom};
use kmirror_state::leases::{
    HolderLeases, LEASE_RECORD_VERSION, LeaseRecord, LeaseRelease, LeaseRequest, LeaseStanding,
    LeaseUnit, first_seq, lease_topic, partition_of,
};
use kmirror_state::records::now_ms;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer, PurgeConfig};

use super::delivery::DeliveryContext;
use super::stop::Stop;
use crate::config::{FetcherConfig, LeaseSettings};

/// The next request number of this process. Every holder of the process (one per topic of a
/// pool pod) numbers its requests from this one counter: they share the holder name and read the
/// same answers, and each must take only the answers to its own requests.
fn next_seq() -> u64 {
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    NEXT.get_or_init(|| AtomicU64::new(first_seq(now_ms(), std::process::id())))
        .fetch_add(1, Ordering::SeqCst)
}

/// How often a request is repeated while a unit is not writable.
const RETRY: Duration = Duration::from_secs(1);

/// How long start-up waits for the first grant.
const FIRST_GRANT_TIMEOUT: Duration = Duration::from_secs(120);

struct Shared {
    leases: Mutex<HolderLeases>,
    units: Vec<LeaseUnit>,
    /// Set once a granted unit's lease ran out: nothing may be written any more.
    lapsed: AtomicBool,
    /// When the last grant renewing every unit arrived (for the stop message).
    last_renewal: Mutex<Option<Instant>>,
    producer: Mutex<Option<Arc<BaseProducer<DeliveryContext>>>>,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HolderLeases> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether every unit is writable at `now`.
    fn all_writable(&self, now: Instant) -> bool {
        let leases = self.lock();
        self.units
            .iter()
            .all(|u| matches!(leases.standing(u, now), LeaseStanding::Writable(_)))
    }

    /// Whether some unit was granted and has lapsed.
    fn any_lapsed(&self, now: Instant) -> bool {
        let leases = self.lock();
        self.units
            .iter()
            .any(|u| leases.standing(u, now) == LeaseStanding::Lapsed)
    }

    /// Purges the producer and marks the lease lapsed (once).
    fn lapse(&self) {
        if self.lapsed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(p) = self
            .producer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            p.purge(PurgeConfig::default().queue().inflight());
        }
        tracing::warn!(
            units = ?self.units.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "write lease ran out without renewal: stopped writing"
        );
    }
}

/// The write lease of a fetcher process.
pub(super) struct LeaseHolder {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    writer: Arc<LeaseWriter>,
    mirror: String,
    holder: String,
    holder_uid: String,
    duration: Duration,
}

impl LeaseHolder {
    /// Starts holding the lease of `config`'s partitions and waits for the first grant; `None`
    /// when a shutdown came first (nothing was written: a clean stop).
    pub(super) fn acquire(
        config: &FetcherConfig,
        settings: &LeaseSettings,
        destination: &ClientConfig,
        shutdown: &AtomicBool,
    ) -> Result<Option<LeaseHolder>, Stop> {
        let topic = lease_topic(&config.state_topic);
        let holder = config.writer.clone().unwrap_or_default();
        let lease_error = |source| Stop::Lease {
            step: "opening the lease topic",
            source,
        };
        let writer = Arc::new(
            LeaseWriter::new(destination, &topic, settings.duration / 3).map_err(lease_error)?,
        );
        let reader = LeaseReader::new(destination, &topic, &[partition_of(&holder)], ReadFrom::End)
            .map_err(lease_error)?;
        let units: Vec<LeaseUnit> = config
            .partitions
            .iter()
            .map(|p| LeaseUnit::new(&config.source_topic, *p))
            .collect();
        let shared = Arc::new(Shared {
            leases: Mutex::new(HolderLeases::new(
                settings.duration,
                settings.safety,
                first_seq(now_ms(), std::process::id()),
            )),
            units,
            lapsed: AtomicBool::new(false),
            last_renewal: Mutex::new(None),
            producer: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let thread = {
            let shared = shared.clone();
            let writer = writer.clone();
            let mirror = config.mirror.clone();
            let holder = holder.clone();
            let uid = settings.holder_uid.clone();
            std::thread::Builder::new()
                .name("lease".into())
                .spawn(move || hold(&shared, &writer, &reader, &mirror, &holder, &uid))
                .map_err(|e| Stop::Lease {
                    step: "starting the lease thread",
                    source: kmirror_state::lease_io::LeaseTopicError::Thread(e.to_string()),
                })?
        };
        let lease = LeaseHolder {
            shared,
            thread: Some(thread),
            writer,
            mirror: config.mirror.clone(),
            holder,
            holder_uid: settings.holder_uid.clone(),
            duration: settings.duration,
        };
        let deadline = Instant::now() + FIRST_GRANT_TIMEOUT;
        while !lease.shared.all_writable(Instant::now()) {
            if shutdown.load(Ordering::Relaxed) {
                tracing::info!("stopped before a write lease was granted: nothing written");
                lease.end(false);
                return Ok(None);
            }
            if Instant::now() > deadline {
                lease.end(false);
                return Err(Stop::LeaseNotGranted {
                    waited: FIRST_GRANT_TIMEOUT.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::info!(holder = %lease.holder, "write lease granted");
        Ok(Some(lease))
    }

    /// The producer to purge the moment the lease runs out.
    pub(super) fn guard(&self, producer: Arc<BaseProducer<DeliveryContext>>) {
        *self
            .shared
            .producer
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(producer);
    }

    /// Fails with `LeaseExpired` once the lease ran out (the producer is purged already).
    pub(super) fn check(&self) -> Result<(), Stop> {
        if self.shared.lapsed.load(Ordering::SeqCst) || self.shared.any_lapsed(Instant::now()) {
            self.shared.lapse();
            let since = self
                .shared
                .last_renewal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .map_or(self.duration, |t| t.elapsed());
            return Err(Stop::LeaseExpired {
                units: self.shared.units.iter().map(ToString::to_string).collect(),
                seconds: since.as_secs(),
            });
        }
        Ok(())
    }

    /// Whether the lease ran out.
    pub(super) fn lapsed(&self) -> bool {
        self.shared.lapsed.load(Ordering::SeqCst)
    }

    /// Stops renewing; with `release`, gives the units back (only when everything produced is
    /// confirmed: nothing of this process can land any more).
    pub(super) fn end(mut self, release: bool) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if release && !self.lapsed() {
            let record = LeaseRecord::Release(LeaseRelease {
                v: LEASE_RECORD_VERSION,
                mirror: self.mirror.clone(),
                holder: self.holder.clone(),
                holder_uid: self.holder_uid.clone(),
                units: self.shared.units.clone(),
            });
            let sent = self
                .writer
                .send(&record)
                .and_then(|_| self.writer.flush(Duration::from_secs(3)));
            match sent {
                Ok(()) => tracing::info!("write lease released"),
                Err(e) => tracing::warn!(error = %e, "could not release the write lease"),
            }
        }
    }
}

/// The lease thread: reads grants, sends requests when due, purges on lapse.
fn hold(
    shared: &Shared,
    writer: &LeaseWriter,
    reader: &LeaseReader,
    mirror: &str,
    holder: &str,
    uid: &str,
) {
    let mut last_error: Option<Instant> = None;
    while !shared.stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let due = shared.lock().request_due(&shared.units, now, RETRY);
        if due && !shared.lapsed.load(Ordering::SeqCst) {
            let t0 = Instant::now();
            let seq = shared.lock().requesting_as(t0, next_seq());
            let request = LeaseRecord::Request(LeaseRequest {
                v: LEASE_RECORD_VERSION,
                mirror: mirror.to_string(),
                holder: holder.to_string(),
                holder_uid: uid.to_string(),
                seq,
                units: shared.units.clone(),
                sent_at_ms: now_ms(),
            });
            if let Err(e) = writer.send(&request) {
                tracing::warn!(error = %e, "could not send a lease request");
            }
        }
        writer.poll();
        match reader.poll(Duration::from_millis(100)) {
            Ok(Some(LeaseRecord::Grant(g)))
                if g.holder == holder && g.holder_uid == uid && g.mirror == mirror =>
            {
                let mut leases = shared.lock();
                let sent = Instant::now();
                if leases.granted(g.seq, &g.units, Duration::from_millis(g.duration_ms)) {
                    drop(leases);
                    // A renewal: every unit granted again.
                    if shared.units.iter().all(|u| g.units.contains(u)) {
                        *shared
                            .last_renewal
                            .lock()
                            .unwrap_or_else(|p| p.into_inner()) = Some(sent);
                    }
                    tracing::debug!(seq = g.seq, units = g.units.len(), "lease granted");
                }
            }
            Ok(_) => {}
            Err(e) => {
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "reading the lease topic");
                    last_error = Some(Instant::now());
                }
            }
        }
        if shared.any_lapsed(Instant::now()) {
            shared.lapse();
        }
    }
}
