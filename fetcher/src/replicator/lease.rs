//! Holding the write lease on the owned destination partitions. One hub per process (per lease
//! topic, holder and destination) sends the requests and reads the grants of all its holders —
//! one per topic of a pool pod — with one writer, one reader and one thread: every third of
//! the lease duration (sooner while a unit is not granted) it asks for every holder's units in
//! one request, hands each holder the part of a grant that is its own, and — the moment a
//! unit's lease, less the safety margin, runs out — purges that holder's destination producer
//! and fences its wire client (every connection closed abortively, nothing more written), so
//! that nothing more of it reaches the partition, whatever its copy loop is blocked on; the loop
//! then stops with `LeaseExpired`. A clean stop releases the holder's units.
//!
//! A grant holds from when its request was sent (taken before sending), on this process's
//! monotonic clock: a grant that arrives late, after a freeze or a slow network, is still
//! bounded by when it was asked for (`kmirror_state::leases::HolderLeases`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use kmirror_state::lease_io::{LeaseReader, LeaseTopicError, LeaseWriter, ReadFrom};
use kmirror_state::leases::{
    HolderLeases, LEASE_RECORD_VERSION, LeaseGrant, LeaseRecord, LeaseRelease, LeaseRequest,
    LeaseStanding, LeaseUnit, first_seq, lease_topic, partition_of,
};
use kmirror_state::records::now_ms;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer, PurgeConfig};

use super::delivery::DeliveryContext;
use super::stop::Stop;
use crate::config::{FetcherConfig, LeaseSettings};

/// The next request number of this process: every request of the process is numbered from
/// this one counter, so that no holder takes an answer to another request for its own.
fn next_seq() -> u64 {
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    NEXT.get_or_init(|| AtomicU64::new(first_seq(now_ms(), std::process::id())))
        .fetch_add(1, Ordering::SeqCst)
}

/// How often a request is repeated while a unit is not writable.
const RETRY: Duration = Duration::from_secs(1);

/// How long start-up waits for the first grant.
const FIRST_GRANT_TIMEOUT: Duration = Duration::from_secs(120);

/// At most this many units in one request (a unit is ~40 bytes of JSON: well under the lease
/// topic's 1 MB records); the holders of a larger process are asked for in several requests.
const UNITS_PER_REQUEST: usize = 5_000;

/// One holder's leases: one topic's units of the process.
struct Shared {
    leases: Mutex<HolderLeases>,
    units: Vec<LeaseUnit>,
    /// Set once a granted unit's lease ran out: nothing may be written any more.
    lapsed: AtomicBool,
    /// When the last grant renewing every unit arrived (for the stop message).
    last_renewal: Mutex<Option<Instant>>,
    producer: Mutex<Option<Arc<BaseProducer<DeliveryContext>>>>,
    /// The batch engine's destination client, fenced the moment the lease runs out.
    wire: Mutex<Option<kmirror_wire::Client>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HolderLeases> {
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

    /// Whether this holder wants a request sent at `now`.
    fn request_due(&self, now: Instant) -> bool {
        !self.lapsed.load(Ordering::SeqCst) && self.lock().request_due(&self.units, now, RETRY)
    }

    /// Takes in the part of `grant` that is this holder's.
    fn take_grant(&self, grant: &LeaseGrant) {
        let own: Vec<LeaseUnit> = grant
            .units
            .iter()
            .filter(|u| self.units.contains(u))
            .cloned()
            .collect();
        let arrived = Instant::now();
        let taken = self
            .lock()
            .granted(grant.seq, &own, Duration::from_millis(grant.duration_ms));
        // A renewal: every unit granted again.
        if taken && own.len() == self.units.len() {
            *lock(&self.last_renewal) = Some(arrived);
        }
    }

    /// Purges the producer and marks the lease lapsed (once).
    fn lapse(&self) {
        if self.lapsed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(p) = lock(&self.producer).as_ref() {
            p.purge(PurgeConfig::default().queue().inflight());
        }
        if let Some(w) = lock(&self.wire).as_ref() {
            w.fence();
        }
        tracing::warn!(
            units = ?self.units.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "write lease ran out without renewal: stopped writing"
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Who asks: the requests and grants of one hub carry these.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Identity {
    mirror: String,
    holder: String,
    holder_uid: String,
}

/// The lease traffic of one process towards one lease topic: its writer, and the holders its
/// thread asks for.
struct Hub {
    writer: LeaseWriter,
    identity: Identity,
    /// The holders asked for; a request is sent with this lock held, so that a holder taken
    /// out (before its release is sent) is in no later request.
    holders: Mutex<Vec<Arc<Shared>>>,
}

impl Hub {
    /// The hub of `identity` on `destination`'s `topic`, started on first use.
    fn of(
        destination: &ClientConfig,
        topic: &str,
        identity: Identity,
        duration: Duration,
    ) -> Result<Arc<Hub>, Stop> {
        type Key = (super::shared_clients::Key, Identity);
        static HUBS: OnceLock<Mutex<HashMap<Key, Arc<Hub>>>> = OnceLock::new();
        let key = (
            super::shared_clients::key(destination, topic),
            identity.clone(),
        );
        let mut hubs = lock(HUBS.get_or_init(Default::default));
        if let Some(hub) = hubs.get(&key) {
            return Ok(hub.clone());
        }
        let lease_error = |source| Stop::Lease {
            step: "opening the lease topic",
            source,
        };
        let writer = LeaseWriter::new(destination, topic, duration / 3).map_err(lease_error)?;
        let reader = LeaseReader::new(
            destination,
            topic,
            &[partition_of(&identity.holder)],
            ReadFrom::End,
        )
        .map_err(lease_error)?;
        let hub = Arc::new(Hub {
            writer,
            identity,
            holders: Mutex::new(Vec::new()),
        });
        {
            let hub = hub.clone();
            std::thread::Builder::new()
                .name("lease".into())
                .spawn(move || hub.run(&reader))
                .map_err(|e| Stop::Lease {
                    step: "starting the lease thread",
                    source: LeaseTopicError::Thread(e.to_string()),
                })?;
        }
        hubs.insert(key, hub.clone());
        Ok(hub)
    }

    /// The lease thread (for the process's lifetime): sends requests when due, reads grants,
    /// purges a holder whose lease lapsed.
    fn run(&self, reader: &LeaseReader) {
        let mut last_error: Option<Instant> = None;
        loop {
            self.request_if_due();
            self.writer.poll();
            match reader.poll(Duration::from_millis(100)) {
                Ok(Some(LeaseRecord::Grant(g)))
                    if g.holder == self.identity.holder
                        && g.holder_uid == self.identity.holder_uid
                        && g.mirror == self.identity.mirror =>
                {
                    for h in lock(&self.holders).iter() {
                        h.take_grant(&g);
                    }
                    tracing::debug!(seq = g.seq, units = g.units.len(), "lease granted");
                }
                Ok(_) => {}
                Err(e) => {
                    if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        tracing::warn!(error = %e, "reading the lease topic");
                        last_error = Some(Instant::now());
                    }
                }
            }
            let now = Instant::now();
            for h in lock(&self.holders).iter() {
                if h.any_lapsed(now) {
                    h.lapse();
                }
            }
        }
    }

    /// Once some holder wants a request: one request for the units of every holder still
    /// writing (a renewal for all), in chunks of at most [`UNITS_PER_REQUEST`] units.
    fn request_if_due(&self) {
        let holders = lock(&self.holders);
        let now = Instant::now();
        if !holders.iter().any(|h| h.request_due(now)) {
            return;
        }
        let asking: Vec<&Arc<Shared>> = holders
            .iter()
            .filter(|h| !h.lapsed.load(Ordering::SeqCst))
            .collect();
        for chunk in chunks(&asking, |h| h.units.len(), UNITS_PER_REQUEST) {
            let t0 = Instant::now();
            let seq = next_seq();
            for h in chunk {
                h.lock().requesting_as(t0, seq);
            }
            let request = LeaseRecord::Request(LeaseRequest {
                v: LEASE_RECORD_VERSION,
                mirror: self.identity.mirror.clone(),
                holder: self.identity.holder.clone(),
                holder_uid: self.identity.holder_uid.clone(),
                seq,
                units: chunk.iter().flat_map(|h| h.units.iter().cloned()).collect(),
                sent_at_ms: now_ms(),
            });
            if let Err(e) = self.writer.send(&request) {
                tracing::warn!(error = %e, "could not send a lease request");
            }
        }
    }

    /// Takes `shared` out of the requests; gives its units back with `release`.
    fn leave(&self, shared: &Arc<Shared>, release: bool) {
        lock(&self.holders).retain(|h| !Arc::ptr_eq(h, shared));
        if !release {
            return;
        }
        let record = LeaseRecord::Release(LeaseRelease {
            v: LEASE_RECORD_VERSION,
            mirror: self.identity.mirror.clone(),
            holder: self.identity.holder.clone(),
            holder_uid: self.identity.holder_uid.clone(),
            units: shared.units.clone(),
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

/// `items` in consecutive groups whose `size` adds up to at most `limit` (an item larger than
/// `limit` alone in its group).
fn chunks<T>(items: &[T], size: impl Fn(&T) -> usize, limit: usize) -> Vec<&[T]> {
    let (mut groups, mut start, mut total) = (Vec::new(), 0, 0);
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        if i > start && total + n > limit {
            groups.push(&items[start..i]);
            (start, total) = (i, 0);
        }
        total += n;
    }
    if start < items.len() {
        groups.push(&items[start..]);
    }
    groups
}

/// The write lease of one topic's partitions in a fetcher process.
pub(super) struct LeaseHolder {
    shared: Arc<Shared>,
    hub: Arc<Hub>,
    holder: String,
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
        let holder = config.writer.clone().unwrap_or_default();
        let identity = Identity {
            mirror: config.mirror.clone(),
            holder: holder.clone(),
            holder_uid: settings.holder_uid.clone(),
        };
        let hub = Hub::of(
            destination,
            &lease_topic(&config.state_topic),
            identity,
            settings.duration,
        )?;
        let shared = Arc::new(Shared {
            leases: Mutex::new(HolderLeases::new(
                settings.duration,
                settings.safety,
                first_seq(now_ms(), std::process::id()),
            )),
            units: config
                .partitions
                .iter()
                .map(|p| LeaseUnit::new(&config.source_topic, *p))
                .collect(),
            lapsed: AtomicBool::new(false),
            last_renewal: Mutex::new(None),
            producer: Mutex::new(None),
            wire: Mutex::new(None),
        });
        lock(&hub.holders).push(shared.clone());
        let lease = LeaseHolder {
            shared,
            hub,
            holder,
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
        *lock(&self.shared.producer) = Some(producer);
    }

    /// The wire client to fence the moment the lease runs out (fenced at once if it already
    /// has).
    pub(super) fn guard_wire(&self, client: kmirror_wire::Client) {
        if self.lapsed() {
            client.fence();
        }
        *lock(&self.shared.wire) = Some(client);
        if self.lapsed()
            && let Some(w) = lock(&self.shared.wire).as_ref()
        {
            w.fence();
        }
    }

    /// Fails with `LeaseExpired` once the lease ran out (the producer is purged already).
    pub(super) fn check(&self) -> Result<(), Stop> {
        if self.shared.lapsed.load(Ordering::SeqCst) || self.shared.any_lapsed(Instant::now()) {
            self.shared.lapse();
            let since = lock(&self.shared.last_renewal).map_or(self.duration, |t| t.elapsed());
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
    pub(super) fn end(self, release: bool) {
        self.hub.leave(&self.shared, release && !self.lapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(topic: &str, partitions: &[i32]) -> Shared {
        Shared {
            leases: Mutex::new(HolderLeases::new(
                Duration::from_secs(15),
                Duration::from_secs(5),
                1,
            )),
            units: partitions
                .iter()
                .map(|p| LeaseUnit::new(topic, *p))
                .collect(),
            lapsed: AtomicBool::new(false),
            last_renewal: Mutex::new(None),
            producer: Mutex::new(None),
            wire: Mutex::new(None),
        }
    }

    fn grant(seq: u64, units: &[(&str, i32)]) -> LeaseGrant {
        LeaseGrant {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/m".into(),
            holder: "pool-0".into(),
            holder_uid: "uid".into(),
            seq,
            units: units.iter().map(|(t, p)| LeaseUnit::new(*t, *p)).collect(),
            duration_ms: 15_000,
            epoch: 1,
            granted_at_ms: 0,
        }
    }

    #[test]
    fn each_holder_takes_its_own_part_of_a_shared_grant() {
        let (a, b) = (holder("a", &[0, 1]), holder("b", &[0]));
        let t0 = Instant::now();
        for h in [&a, &b] {
            h.lock().requesting_as(t0, 7);
        }
        // A grant of a's units only: a is writable and renewed, b still waits (and asks again).
        let g = grant(7, &[("a", 0), ("a", 1)]);
        a.take_grant(&g);
        b.take_grant(&g);
        let now = Instant::now();
        assert!(a.all_writable(now) && lock(&a.last_renewal).is_some());
        assert!(!b.all_writable(now) && lock(&b.last_renewal).is_none());
        assert!(b.request_due(t0 + RETRY));
        // An answer to another request (another holder's seq) is nobody's here.
        let other = grant(8, &[("b", 0)]);
        b.take_grant(&other);
        assert!(!b.all_writable(Instant::now()));
        // A grant naming a unit of b among others gives b that unit, from when it was asked.
        b.lock().requesting_as(Instant::now(), 9);
        b.take_grant(&grant(9, &[("a", 0), ("b", 0)]));
        assert!(b.all_writable(Instant::now()));
    }

    #[test]
    fn requests_are_chunked_by_units() {
        let sizes = [3, 4, 2, 9, 1, 1];
        let groups: Vec<Vec<usize>> = chunks(&sizes, |n| *n, 6)
            .into_iter()
            .map(<[usize]>::to_vec)
            .collect();
        assert_eq!(groups, vec![vec![3], vec![4, 2], vec![9], vec![1, 1]]);
        assert!(chunks(&[] as &[usize], |n| *n, 6).is_empty());
        assert_eq!(chunks(&sizes, |n| *n, 100).len(), 1);
    }
}
