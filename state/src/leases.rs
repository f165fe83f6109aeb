//! Write leases on destination partitions: the records of the lease topic (`<stateTopic>.leases`)
//! and their versioned JSON, where each holder's records go, and the holder's validity arithmetic.
//!
//! A fetcher (the holder, named after its pod) asks for the units it serves with a `request`
//! carrying a sequence number; the operator leader answers with a `grant` of the units it allows,
//! for a duration; a fetcher that stopped cleanly writes a `release`. A grant answering request
//! `seq` is valid until the moment that request was sent plus the duration, measured on the
//! holder's monotonic clock ([`HolderLeases`]); the holder writes only while that moment is more
//! than a safety margin away. The protocol is described in `docs/fencing.md`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Version of the lease records' JSON.
pub const LEASE_RECORD_VERSION: u32 = 1;

/// Partitions of the lease topic (fixed: holders find their partition by hashing their name).
pub const LEASE_PARTITIONS: i32 = 16;

/// How long a grant lasts unless configured otherwise. A fetcher stops writing when a third of
/// it plus a second is left without a renewal (19 s): long enough to ride out an operator leader
/// change or a destination broker that holds the lease topic's partition freezing for a while,
/// short enough that a lost node's replacement starts within D + margin (35 s).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(30);

/// What the grantor adds to a grant's duration before it counts the grant as expired: clock
/// drift between the two processes and the time a request takes to arrive.
pub const GRANTOR_MARGIN: Duration = Duration::from_secs(5);

/// The lease topic next to a state topic.
pub fn lease_topic(state_topic: &str) -> String {
    format!("{state_topic}.leases")
}

/// FNV-1a (64 bits).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// The lease-topic partition of a holder's records, requests and answers alike.
pub fn partition_of(holder: &str) -> i32 {
    (fnv1a(holder.as_bytes()) % LEASE_PARTITIONS as u64) as i32
}

/// One leased unit: a source topic's partition (mirrored to the same destination partition).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseUnit {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
}

impl LeaseUnit {
    /// The unit of `topic`'s `partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> LeaseUnit {
        LeaseUnit {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for LeaseUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.topic, self.partition)
    }
}

/// A fetcher asks for its units.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRequest {
    /// Record version.
    pub v: u32,
    /// The mirror, `namespace/name`.
    pub mirror: String,
    /// The holder: the fetcher's pod name.
    pub holder: String,
    /// The pod's UID (a replacement pod of the same name has another).
    pub holder_uid: String,
    /// Increases with every request of one process; a restarted process starts elsewhere.
    pub seq: u64,
    /// The units asked for.
    pub units: Vec<LeaseUnit>,
    /// When it was sent (wall clock, ms since the epoch; informational).
    pub sent_at_ms: i64,
}

/// The operator leader's answer to one request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseGrant {
    /// Record version.
    pub v: u32,
    /// The mirror.
    pub mirror: String,
    /// The holder.
    pub holder: String,
    /// The holder's pod UID.
    pub holder_uid: String,
    /// The request answered.
    pub seq: u64,
    /// The units granted (a subset of those asked for; empty: none).
    pub units: Vec<LeaseUnit>,
    /// How long the grant lasts, counted from when the request was sent.
    pub duration_ms: u64,
    /// The grantor's fencing token (its leadership's start, ms since the epoch).
    pub epoch: i64,
    /// When the grant was written (the grantor's wall clock, ms since the epoch): a new leader
    /// counts a grant it did not write as held until this plus the duration and its margin.
    pub granted_at_ms: i64,
}

/// A fetcher that stopped cleanly gives its units back.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRelease {
    /// Record version.
    pub v: u32,
    /// The mirror.
    pub mirror: String,
    /// The holder.
    pub holder: String,
    /// The holder's pod UID.
    pub holder_uid: String,
    /// The units released.
    pub units: Vec<LeaseUnit>,
}

/// A record of the lease topic.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum LeaseRecord {
    /// A holder asks.
    Request(LeaseRequest),
    /// The grantor answers.
    Grant(LeaseGrant),
    /// A holder gives back.
    Release(LeaseRelease),
}

impl LeaseRecord {
    /// The holder the record is about (its key and partition).
    pub fn holder(&self) -> &str {
        match self {
            LeaseRecord::Request(r) => &r.holder,
            LeaseRecord::Grant(g) => &g.holder,
            LeaseRecord::Release(r) => &r.holder,
        }
    }

    /// The record's JSON.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("lease records serialize")
    }

    /// Parses a record; `None` for what is not a lease record of a known version.
    pub fn from_json(bytes: &[u8]) -> Option<LeaseRecord> {
        let record: LeaseRecord = serde_json::from_slice(bytes).ok()?;
        let v = match &record {
            LeaseRecord::Request(r) => r.v,
            LeaseRecord::Grant(g) => g.v,
            LeaseRecord::Release(r) => r.v,
        };
        (v == LEASE_RECORD_VERSION).then_some(record)
    }
}

/// The first sequence number of a process: its start time in ms times 1024 plus a bit of its
/// pid, so that a restarted holder of the same name never reuses a number an earlier process
/// sent (and a stale grant can never be taken for an answer to a new request).
pub fn first_seq(now_ms: i64, pid: u32) -> u64 {
    (now_ms.max(0) as u64) * 1024 + u64::from(pid % 1024)
}

/// A holder's view of its leases: when each request was sent and until when each unit may be
/// written. Pure: every call is given the time.
#[derive(Debug, Clone)]
pub struct HolderLeases {
    duration: Duration,
    safety: Duration,
    next_seq: u64,
    /// Requests not yet answered, by seq: when they were sent.
    outstanding: BTreeMap<u64, Instant>,
    /// Per unit: until when a grant holds.
    valid_until: BTreeMap<LeaseUnit, Instant>,
    last_request: Option<Instant>,
    last_seq: Option<u64>,
}

/// How a unit's lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStanding {
    /// Writable until at least the given time (the lease's end minus the safety margin).
    Writable(Instant),
    /// Never granted yet.
    NotGranted,
    /// Granted, but the lease (minus the safety margin) has run out.
    Lapsed,
}

impl HolderLeases {
    /// Leases of `duration`, written to only while more than `safety` of them remains; request
    /// numbers start at `first_seq`.
    pub fn new(duration: Duration, safety: Duration, first_seq: u64) -> HolderLeases {
        HolderLeases {
            duration,
            safety,
            next_seq: first_seq,
            outstanding: BTreeMap::new(),
            valid_until: BTreeMap::new(),
            last_request: None,
            last_seq: None,
        }
    }

    /// The lease duration.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Notes a request about to be sent at `t0` (taken before sending); returns its seq.
    pub fn requesting(&mut self, t0: Instant) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.requesting_as(t0, seq)
    }

    /// Notes a request numbered `seq` by the caller (several holders of one process share a
    /// counter, so that none takes another's answer for its own) about to be sent at `t0`.
    pub fn requesting_as(&mut self, t0: Instant, seq: u64) -> u64 {
        self.last_seq = Some(seq);
        self.outstanding.insert(seq, t0);
        // Requests older than a lease can no longer yield a valid grant.
        let duration = self.duration;
        self.outstanding
            .retain(|_, sent| t0.saturating_duration_since(*sent) < duration);
        self.last_request = Some(t0);
        seq
    }

    /// Takes in a grant answering `seq` with `units` for `duration`; returns whether it answered
    /// one of this holder's outstanding requests. A unit's lease runs from when the request was
    /// sent, never from when the answer arrived; it never shrinks (a later request's grant
    /// extends it; a grant that leaves a unit out lets its current lease run out).
    pub fn granted(&mut self, seq: u64, units: &[LeaseUnit], duration: Duration) -> bool {
        // An answer that grants nothing is no answer: the request stays open (and is asked
        // again), so that a grantor that is not this mirror's, answering first, cannot swallow
        // the rightful grant.
        if units.is_empty() {
            return false;
        }
        let Some(sent) = self.outstanding.remove(&seq) else {
            return false;
        };
        let until = sent + duration.min(self.duration);
        for unit in units {
            let entry = self.valid_until.entry(unit.clone()).or_insert(until);
            if *entry < until {
                *entry = until;
            }
        }
        true
    }

    /// How `unit`'s lease stands at `now`.
    pub fn standing(&self, unit: &LeaseUnit, now: Instant) -> LeaseStanding {
        match self.valid_until.get(unit) {
            None => LeaseStanding::NotGranted,
            Some(until) => match until.checked_sub(self.safety) {
                Some(writable_until) if now < writable_until => {
                    LeaseStanding::Writable(writable_until)
                }
                _ => LeaseStanding::Lapsed,
            },
        }
    }

    /// Whether a request is due at `now`: every third of the duration, and every `retry` while
    /// some unit of `units` is not writable (at start, after a grant that left it out) or the
    /// last request is still unanswered (a lost request or answer).
    pub fn request_due(&self, units: &[LeaseUnit], now: Instant, retry: Duration) -> bool {
        let Some(last) = self.last_request else {
            return true;
        };
        let since = now.saturating_duration_since(last);
        if since >= self.duration / 3 {
            return true;
        }
        let all_writable = units
            .iter()
            .all(|u| matches!(self.standing(u, now), LeaseStanding::Writable(_)));
        let unanswered = self
            .last_seq
            .is_some_and(|seq| self.outstanding.contains_key(&seq));
        (!all_writable || unanswered) && since >= retry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);
    const SAFETY: Duration = Duration::from_secs(6);

    fn unit(p: i32) -> LeaseUnit {
        LeaseUnit::new("orders", p)
    }

    #[test]
    fn records_round_trip_as_versioned_json_with_a_kind() {
        let request = LeaseRecord::Request(LeaseRequest {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/dr".into(),
            holder: "orders-0".into(),
            holder_uid: "uid-1".into(),
            seq: 7,
            units: vec![unit(0), unit(1)],
            sent_at_ms: 1,
        });
        let json = String::from_utf8(request.to_json()).unwrap();
        assert!(json.contains(r#""kind":"request""#), "{json}");
        assert!(json.contains(r#""holderUid":"uid-1""#), "{json}");
        assert_eq!(LeaseRecord::from_json(json.as_bytes()), Some(request));
        let grant = LeaseRecord::Grant(LeaseGrant {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/dr".into(),
            holder: "orders-0".into(),
            holder_uid: "uid-1".into(),
            seq: 7,
            units: vec![unit(1)],
            duration_ms: 15000,
            epoch: 3,
            granted_at_ms: 10,
        });
        assert_eq!(LeaseRecord::from_json(&grant.to_json()), Some(grant));
        let release = LeaseRecord::Release(LeaseRelease {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/dr".into(),
            holder: "orders-0".into(),
            holder_uid: "uid-1".into(),
            units: vec![unit(0)],
        });
        assert_eq!(release.holder(), "orders-0");
        assert_eq!(LeaseRecord::from_json(&release.to_json()), Some(release));
    }

    #[test]
    fn unknown_versions_and_other_json_are_not_lease_records() {
        let future =
            r#"{"kind":"release","v":2,"mirror":"m","holder":"h","holderUid":"u","units":[]}"#;
        assert_eq!(LeaseRecord::from_json(future.as_bytes()), None);
        assert_eq!(LeaseRecord::from_json(b"{\"kind\":\"other\"}"), None);
        assert_eq!(LeaseRecord::from_json(b"not json"), None);
    }

    #[test]
    fn a_holder_always_uses_the_same_partition_of_the_lease_topic() {
        let p = partition_of("orders-0");
        assert!((0..LEASE_PARTITIONS).contains(&p));
        assert_eq!(p, partition_of("orders-0"));
        let spread: std::collections::BTreeSet<i32> =
            (0..64).map(|i| partition_of(&format!("t-{i}"))).collect();
        assert!(
            spread.len() > 8,
            "holders spread over the partitions: {spread:?}"
        );
        assert_eq!(lease_topic("__kmirror_state"), "__kmirror_state.leases");
    }

    #[test]
    fn a_restarted_process_never_reuses_a_sequence_number() {
        let earlier = first_seq(1_000_000, 4000);
        // The earlier process sent a million requests; the next one starts a second later.
        assert!(first_seq(1_001_000, 1) > earlier + 1_000_000);
    }

    #[test]
    fn a_grant_holds_from_when_its_request_was_sent_not_from_when_it_arrived() {
        let t0 = Instant::now();
        let mut h = HolderLeases::new(D, SAFETY, 100);
        assert_eq!(h.standing(&unit(0), t0), LeaseStanding::NotGranted);
        let seq = h.requesting(t0);
        assert_eq!(seq, 100);
        // The answer arrives 8 s late (a frozen process, a slow network).
        assert!(h.granted(seq, &[unit(0)], D));
        let writable_until = t0 + D - SAFETY;
        assert_eq!(
            h.standing(&unit(0), t0 + Duration::from_secs(8)),
            LeaseStanding::Writable(writable_until)
        );
        assert_eq!(h.standing(&unit(0), writable_until), LeaseStanding::Lapsed);
        assert_eq!(
            h.standing(&unit(0), t0 + Duration::from_secs(60)),
            LeaseStanding::Lapsed
        );
        assert_eq!(h.standing(&unit(1), t0), LeaseStanding::NotGranted);
    }

    #[test]
    fn only_answers_to_own_outstanding_requests_count_and_only_once() {
        let t0 = Instant::now();
        let mut h = HolderLeases::new(D, SAFETY, 10);
        let seq = h.requesting(t0);
        assert!(!h.granted(seq + 1, &[unit(0)], D), "not a request of ours");
        assert!(!h.granted(9, &[unit(0)], D), "an earlier process's request");
        assert!(h.granted(seq, &[unit(0)], D));
        assert!(!h.granted(seq, &[unit(0)], D), "answered already");
    }

    #[test]
    fn a_grant_never_lasts_longer_than_the_holder_asked_and_never_shrinks_a_lease() {
        let t0 = Instant::now();
        let mut h = HolderLeases::new(D, SAFETY, 1);
        let first = h.requesting(t0);
        let second = h.requesting(t0 + Duration::from_secs(5));
        // A grantor that says a minute gets the holder's own duration.
        assert!(h.granted(second, &[unit(0)], Duration::from_secs(60)));
        let until = t0 + Duration::from_secs(5) + D - SAFETY;
        assert_eq!(h.standing(&unit(0), t0), LeaseStanding::Writable(until));
        // The older request's answer arrives late: the lease stays where it is.
        assert!(h.granted(first, &[unit(0)], D));
        assert_eq!(h.standing(&unit(0), t0), LeaseStanding::Writable(until));
        // A grant that leaves the unit out lets it run out rather than ending it.
        let third = h.requesting(t0 + Duration::from_secs(6));
        assert!(h.granted(third, &[unit(1)], D));
        assert_eq!(h.standing(&unit(0), t0), LeaseStanding::Writable(until));
    }

    #[test]
    fn an_answer_that_grants_nothing_leaves_the_request_to_the_grantor_that_grants() {
        // A grantor that is not this mirror's (another installation on the same destination)
        // may answer first with nothing; the rightful grant that follows must still count.
        let t0 = Instant::now();
        let mut h = HolderLeases::new(D, SAFETY, 1);
        let seq = h.requesting(t0);
        assert!(!h.granted(seq, &[], D), "nothing granted: not an answer");
        assert!(
            h.request_due(
                &[unit(0)],
                t0 + Duration::from_secs(1),
                Duration::from_secs(1)
            ),
            "still unanswered: asked again"
        );
        assert!(h.granted(seq, &[unit(0)], D));
        assert_eq!(
            h.standing(&unit(0), t0),
            LeaseStanding::Writable(t0 + D - SAFETY)
        );
    }

    #[test]
    fn requests_go_every_third_of_the_lease_and_more_often_while_not_writable() {
        let t0 = Instant::now();
        let retry = Duration::from_secs(1);
        let mut h = HolderLeases::new(D, SAFETY, 1);
        let units = [unit(0)];
        assert!(h.request_due(&units, t0, retry), "at start");
        let seq = h.requesting(t0);
        assert!(!h.request_due(&units, t0 + Duration::from_millis(500), retry));
        assert!(
            h.request_due(&units, t0 + Duration::from_secs(1), retry),
            "no grant yet: ask again"
        );
        assert!(h.granted(seq, &units, D));
        assert!(!h.request_due(&units, t0 + Duration::from_secs(2), retry));
        assert!(h.request_due(&units, t0 + Duration::from_secs(5), retry));
        // A renewal whose answer does not come is asked again a second later.
        let t5 = t0 + Duration::from_secs(5);
        let _ = h.requesting(t5);
        assert!(!h.request_due(&units, t5 + Duration::from_millis(500), retry));
        assert!(h.request_due(&units, t5 + Duration::from_secs(1), retry));
    }

    #[test]
    fn requests_older_than_a_lease_are_forgotten() {
        let t0 = Instant::now();
        let mut h = HolderLeases::new(D, SAFETY, 1);
        let old = h.requesting(t0);
        let _ = h.requesting(t0 + D + Duration::from_secs(1));
        assert!(!h.granted(old, &[unit(0)], D), "could not be valid anymore");
    }
}
