//! The write-lease grantor (the leader only runs reconciles, so only the leader grants): one per
//! lease topic (`<stateTopic>.leases` on a destination), a background thread that reads every
//! request and answers it from the [`ledger`], and what reconciles ask of it — which units a
//! replaced pod's predecessor may still write (`holds`, before a replacement is created or a
//! failover makes a partition writable) and which pod may hold each unit (`allow`).
//!
//! At start the grantor reads the lease topic back over more than one lease duration, so that
//! grants a previous leader wrote count as held until they run out; until it has read that far
//! every unit counts as held. The protocol is described in `docs/fencing.md`.

pub mod ledger;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kmirror_state::lease_io::{
    LeaseReader, LeaseTopicError, LeaseWriter, ReadFrom, ensure_lease_topic,
};
use kmirror_state::leases::{
    DEFAULT_LEASE_DURATION, GRANTOR_MARGIN, LEASE_PARTITIONS, LEASE_RECORD_VERSION, LeaseGrant,
    LeaseRecord, LeaseUnit, lease_topic,
};
use kmirror_state::records::now_ms;
use rdkafka::ClientConfig;

use ledger::{Holder, Ledger};

/// How far back the lease topic is read at start: a lease, its margin, and slack for clocks.
const READ_BACK: Duration = Duration::from_secs(
    kmirror_state::leases::DEFAULT_LEASE_DURATION.as_secs()
        + kmirror_state::leases::GRANTOR_MARGIN.as_secs()
        + 25,
);

/// A unit some holder may still write to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHold {
    /// The holder (pod name), or why it is unknown.
    pub holder: String,
    /// How long the hold lasts at most.
    pub remaining: Duration,
}

/// One lease topic's grantor.
pub struct Grantor {
    ledger: Mutex<Ledger>,
    caught_up: AtomicBool,
    stop: AtomicBool,
    duration: Duration,
    margin: Duration,
}

impl Grantor {
    /// Ensures the lease topic next to `state_topic` and starts answering requests.
    fn start(config: &ClientConfig, state_topic: &str) -> Result<Arc<Grantor>, LeaseTopicError> {
        let topic = lease_topic(state_topic);
        ensure_lease_topic(config, &topic)?;
        let writer = LeaseWriter::new(config, &topic, Duration::from_secs(5))?;
        let partitions: Vec<i32> = (0..LEASE_PARTITIONS).collect();
        let reader = LeaseReader::new(
            config,
            &topic,
            &partitions,
            ReadFrom::Time(now_ms() - READ_BACK.as_millis() as i64),
        )?;
        let grantor = Arc::new(Grantor {
            ledger: Mutex::new(Ledger::default()),
            caught_up: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            duration: DEFAULT_LEASE_DURATION,
            margin: GRANTOR_MARGIN,
        });
        let g = Arc::downgrade(&grantor);
        std::thread::Builder::new()
            .name("lease-grantor".into())
            .spawn(move || grant(g, &writer, &reader, now_ms()))
            .map_err(|e| LeaseTopicError::Thread(e.to_string()))?;
        tracing::info!(topic, "granting write leases");
        Ok(grantor)
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a reconcile of `mirror`'s `topic` observes: from now on only the fetcher pods in
    /// `pods` (existing, not being deleted) may be granted its units; returns the partitions
    /// some holder may still write to, and for how long at most.
    pub fn holds(
        &self,
        mirror: &str,
        topic: &str,
        partitions: &[i32],
        pods: &[Holder],
    ) -> BTreeMap<i32, LeaseHold> {
        let mut ledger = self.ledger();
        ledger.keep_pods(mirror, topic, pods);
        if !self.caught_up.load(Ordering::SeqCst) {
            return partitions
                .iter()
                .map(|p| {
                    let hold = LeaseHold {
                        holder: "unknown (reading the lease topic)".into(),
                        remaining: Duration::from_secs(1),
                    };
                    (*p, hold)
                })
                .collect();
        }
        let now = Instant::now();
        partitions
            .iter()
            .filter_map(|p| {
                let hold = ledger.hold(mirror, &LeaseUnit::new(topic, *p), now)?;
                Some((
                    *p,
                    LeaseHold {
                        holder: hold.holder.name.clone(),
                        remaining: hold.until - now,
                    },
                ))
            })
            .collect()
    }

    /// Sets which pod may hold each partition of `mirror`'s `topic` (those the plan runs a
    /// fetcher for, in the pod that exists for it).
    pub fn allow(&self, mirror: &str, topic: &str, assigned: &BTreeMap<i32, Holder>) {
        self.ledger().allow(mirror, topic, assigned);
    }
}

impl Drop for Grantor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The grantor thread: reads the lease topic, answers requests, notes releases and the grants
/// of earlier leaders.
fn grant(
    grantor: std::sync::Weak<Grantor>,
    writer: &LeaseWriter,
    reader: &LeaseReader,
    epoch: i64,
) {
    let mut last_error: Option<Instant> = None;
    let mut last_prune = Instant::now();
    loop {
        let Some(g) = grantor.upgrade() else { return };
        if g.stop.load(Ordering::SeqCst) {
            return;
        }
        let polled = reader.poll(Duration::from_millis(100));
        if !g.caught_up.load(Ordering::SeqCst) && reader.caught_up() {
            g.caught_up.store(true, Ordering::SeqCst);
            tracing::info!("lease topic read back: granting");
        }
        match polled {
            Ok(Some(LeaseRecord::Request(r)))
                if g.caught_up.load(Ordering::SeqCst) && g.ledger().answers(&r.mirror) =>
            {
                let now = Instant::now();
                let units = g.ledger().answer(&r, now, g.duration, g.margin);
                let answer = LeaseRecord::Grant(LeaseGrant {
                    v: LEASE_RECORD_VERSION,
                    mirror: r.mirror.clone(),
                    holder: r.holder.clone(),
                    holder_uid: r.holder_uid.clone(),
                    seq: r.seq,
                    units,
                    duration_ms: g.duration.as_millis() as u64,
                    epoch,
                    granted_at_ms: now_ms(),
                });
                if let Err(e) = writer.send(&answer) {
                    tracing::warn!(error = %e, holder = %r.holder, "could not answer a lease request");
                }
            }
            Ok(Some(LeaseRecord::Grant(grant))) if grant.epoch != epoch => {
                g.ledger()
                    .observed(&grant, Instant::now(), now_ms(), g.margin);
            }
            Ok(Some(LeaseRecord::Release(r))) => g.ledger().released(&r),
            Ok(_) => {}
            Err(e) => {
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "reading the lease topic");
                    last_error = Some(Instant::now());
                }
            }
        }
        writer.poll();
        if last_prune.elapsed() > Duration::from_secs(10) {
            g.ledger().prune(Instant::now());
            last_prune = Instant::now();
        }
    }
}

/// Grantors by (destination configuration, state topic).
#[derive(Default)]
pub struct Grantors {
    grantors: Mutex<HashMap<(u64, String), Arc<Grantor>>>,
    /// Held while a grantor starts: concurrent reconciles of a new mirror start one, not one
    /// each (every extra one opened the lease topic and read it back before it was dropped).
    starting: tokio::sync::Mutex<()>,
}

impl Grantors {
    /// The grantor of the lease topic next to `state_topic` on the destination identified by
    /// `key`, started on first use.
    pub async fn get(
        &self,
        key: u64,
        config: &ClientConfig,
        state_topic: &str,
    ) -> Result<Arc<Grantor>, LeaseTopicError> {
        let k = (key, state_topic.to_string());
        let started = || {
            self.grantors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&k)
                .cloned()
        };
        if let Some(g) = started() {
            return Ok(g);
        }
        let _starting = self.starting.lock().await;
        if let Some(g) = started() {
            return Ok(g);
        }
        let (config, t) = (config.clone(), state_topic.to_string());
        let grantor = tokio::task::spawn_blocking(move || Grantor::start(&config, &t))
            .await
            .map_err(|e| LeaseTopicError::Thread(e.to_string()))??;
        let mut grantors = self.grantors.lock().unwrap_or_else(|p| p.into_inner());
        Ok(grantors.entry(k).or_insert(grantor).clone())
    }
}
