//! The grantor's ledger of write leases, in memory: which fetcher pod each unit may be granted
//! to (what reconciles allow), which holder was granted each unit until when, and the answers to
//! requests. Pure: every call is given the time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kmirror_state::leases::{LeaseGrant, LeaseRelease, LeaseRequest, LeaseUnit};

/// A lease holder: a fetcher pod, by name and UID (a replacement of the same name differs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
}

/// A unit of a mirror.
type Key = (String, LeaseUnit);

/// An unexpired grant of a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Who holds it.
    pub holder: Holder,
    /// Until when the grantor counts it as held.
    pub until: Instant,
}

/// The ledger.
#[derive(Debug, Default)]
pub struct Ledger {
    allowed: BTreeMap<Key, Holder>,
    grants: BTreeMap<Key, Hold>,
    /// The mirrors this operator's reconciles named: only their requests are answered.
    mirrors: BTreeSet<String>,
}

impl Ledger {
    /// Keeps, of what `mirror`'s `topic` allows, only units whose holder is among `pods` (the
    /// fetcher pods that exist and are not being deleted): a pod object that went away gets no
    /// more grants from this moment on.
    pub fn keep_pods(&mut self, mirror: &str, topic: &str, pods: &[Holder]) {
        self.mirrors.insert(mirror.to_string());
        self.allowed
            .retain(|(m, u), h| !(m == mirror && u.topic == topic) || pods.iter().any(|p| p == h));
    }

    /// Sets what `mirror`'s `topic` allows: each partition mirrored by the pod the plan assigns
    /// it to (partitions left out get no grants).
    pub fn allow(&mut self, mirror: &str, topic: &str, assigned: &BTreeMap<i32, Holder>) {
        self.mirrors.insert(mirror.to_string());
        self.allowed
            .retain(|(m, u), _| !(m == mirror && u.topic == topic));
        for (p, h) in assigned {
            self.allowed
                .insert((mirror.to_string(), LeaseUnit::new(topic, *p)), h.clone());
        }
    }

    /// Whether requests of `mirror` are this grantor's to answer: a reconcile of this operator
    /// named it. Another kmirror installation may share the destination (and so the lease
    /// topic); its fetchers' requests are left to its own leader.
    pub fn answers(&self, mirror: &str) -> bool {
        self.mirrors.contains(mirror)
    }

    /// The unexpired grant of a unit at `now`.
    pub fn hold(&self, mirror: &str, unit: &LeaseUnit, now: Instant) -> Option<&Hold> {
        self.grants
            .get(&(mirror.to_string(), unit.clone()))
            .filter(|h| h.until > now)
    }

    /// Answers `request` at `now` (just before the grant is written): the units asked for that
    /// are allowed to this holder and held by no other; each is recorded as held until
    /// `now + duration + margin`.
    pub fn answer(
        &mut self,
        request: &LeaseRequest,
        now: Instant,
        duration: Duration,
        margin: Duration,
    ) -> Vec<LeaseUnit> {
        let holder = Holder {
            name: request.holder.clone(),
            uid: request.holder_uid.clone(),
        };
        let mut granted = Vec::new();
        for unit in &request.units {
            let key = (request.mirror.clone(), unit.clone());
            if self.allowed.get(&key) != Some(&holder) {
                continue;
            }
            if let Some(other) = self.grants.get(&key)
                && other.until > now
                && other.holder != holder
            {
                continue;
            }
            self.grants.insert(
                key,
                Hold {
                    holder: holder.clone(),
                    until: now + duration + margin,
                },
            );
            granted.push(unit.clone());
        }
        granted
    }

    /// Takes in a grant read from the lease topic that this process did not make (a previous
    /// leader's): held until it was written plus its duration and `margin`, on this clock.
    pub fn observed(&mut self, grant: &LeaseGrant, now: Instant, now_ms: i64, margin: Duration) {
        let age = Duration::from_millis((now_ms - grant.granted_at_ms).max(0) as u64);
        let Some(left) = (Duration::from_millis(grant.duration_ms) + margin).checked_sub(age)
        else {
            return;
        };
        let holder = Holder {
            name: grant.holder.clone(),
            uid: grant.holder_uid.clone(),
        };
        for unit in &grant.units {
            let key = (grant.mirror.clone(), unit.clone());
            let until = now + left;
            match self.grants.get(&key) {
                Some(h) if h.until >= until => {}
                _ => {
                    self.grants.insert(
                        key,
                        Hold {
                            holder: holder.clone(),
                            until,
                        },
                    );
                }
            }
        }
    }

    /// A holder gave its units back: they are free at once.
    pub fn released(&mut self, release: &LeaseRelease) {
        for unit in &release.units {
            let key = (release.mirror.clone(), unit.clone());
            if self.grants.get(&key).is_some_and(|h| {
                h.holder.name == release.holder && h.holder.uid == release.holder_uid
            }) {
                self.grants.remove(&key);
            }
        }
    }

    /// Forgets grants that ran out before `now`.
    pub fn prune(&mut self, now: Instant) {
        self.grants.retain(|_, h| h.until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::leases::LEASE_RECORD_VERSION;

    const D: Duration = Duration::from_secs(15);
    const MARGIN: Duration = Duration::from_secs(5);

    fn pod(name: &str, uid: &str) -> Holder {
        Holder {
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn request(h: &Holder, partitions: &[i32]) -> LeaseRequest {
        LeaseRequest {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/dr".into(),
            holder: h.name.clone(),
            holder_uid: h.uid.clone(),
            seq: 1,
            units: partitions.iter().map(|p| LeaseUnit::new("t", *p)).collect(),
            sent_at_ms: 0,
        }
    }

    fn assigned(pairs: &[(i32, &Holder)]) -> BTreeMap<i32, Holder> {
        pairs.iter().map(|(p, h)| (*p, (*h).clone())).collect()
    }

    #[test]
    fn only_requests_of_mirrors_its_reconciles_named_are_answered() {
        // Another kmirror installation (other namespaces, its own leader) may share the
        // destination and so the lease topic: its requests are not this grantor's to answer.
        let a = pod("t-0", "a");
        let mut l = Ledger::default();
        assert!(!l.answers("ns/dr"), "no reconcile named it yet");
        l.allow("ns/dr", "t", &assigned(&[(0, &a)]));
        assert!(l.answers("ns/dr"));
        assert!(!l.answers("other-install/dr"));
        // A mirror whose pods all went away is still this grantor's: it refuses, explicitly.
        l.keep_pods("ns/dr", "t", &[]);
        assert!(l.answers("ns/dr"));
        assert!(
            l.answer(&request(&a, &[0]), Instant::now(), D, MARGIN)
                .is_empty()
        );
    }

    #[test]
    fn grants_only_what_is_allowed_to_that_very_pod() {
        let now = Instant::now();
        let old = pod("t-0", "uid-old");
        let new = pod("t-0", "uid-new");
        let mut l = Ledger::default();
        assert!(
            l.answer(&request(&old, &[0]), now, D, MARGIN).is_empty(),
            "nothing allowed yet"
        );
        l.allow("ns/dr", "t", &assigned(&[(0, &old)]));
        assert_eq!(
            l.answer(&request(&old, &[0, 1]), now, D, MARGIN),
            vec![LeaseUnit::new("t", 0)],
            "partition 1 is not assigned to it"
        );
        assert!(
            l.answer(&request(&new, &[0]), now, D, MARGIN).is_empty(),
            "a pod of the same name with another UID is another holder"
        );
        let hold = l.hold("ns/dr", &LeaseUnit::new("t", 0), now).unwrap();
        assert_eq!(hold.holder, old);
        assert_eq!(hold.until, now + D + MARGIN);
    }

    #[test]
    fn a_pod_object_that_went_away_gets_no_more_grants_and_its_lease_runs_out() {
        let now = Instant::now();
        let zombie = pod("t-0", "uid-1");
        let mut l = Ledger::default();
        l.allow("ns/dr", "t", &assigned(&[(0, &zombie)]));
        assert_eq!(l.answer(&request(&zombie, &[0]), now, D, MARGIN).len(), 1);
        // The pod object is force-deleted: the next reconcile sees no such pod.
        l.keep_pods("ns/dr", "t", &[]);
        let later = now + Duration::from_secs(4);
        assert!(
            l.answer(&request(&zombie, &[0]), later, D, MARGIN)
                .is_empty()
        );
        let unit = LeaseUnit::new("t", 0);
        assert!(
            l.hold("ns/dr", &unit, later).is_some(),
            "still held until the grant ends"
        );
        assert!(l.hold("ns/dr", &unit, now + D + MARGIN).is_none());
    }

    #[test]
    fn a_unit_held_by_another_pod_is_not_granted_until_that_grant_ends_or_is_released() {
        let now = Instant::now();
        let old = pod("t-0", "uid-old");
        let new = pod("t-0", "uid-new");
        let mut l = Ledger::default();
        l.allow("ns/dr", "t", &assigned(&[(0, &old)]));
        l.answer(&request(&old, &[0]), now, D, MARGIN);
        l.allow("ns/dr", "t", &assigned(&[(0, &new)]));
        assert!(
            l.answer(&request(&new, &[0]), now + D, D, MARGIN)
                .is_empty()
        );
        assert_eq!(
            l.answer(&request(&new, &[0]), now + D + MARGIN, D, MARGIN)
                .len(),
            1
        );
        // A clean stop frees the unit at once.
        let mut l = Ledger::default();
        l.allow("ns/dr", "t", &assigned(&[(0, &old)]));
        l.answer(&request(&old, &[0]), now, D, MARGIN);
        l.released(&LeaseRelease {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/dr".into(),
            holder: old.name.clone(),
            holder_uid: "someone-else".into(),
            units: vec![LeaseUnit::new("t", 0)],
        });
        assert!(
            l.hold("ns/dr", &LeaseUnit::new("t", 0), now).is_some(),
            "not its lease"
        );
        l.released(&LeaseRelease {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/dr".into(),
            holder: old.name.clone(),
            holder_uid: old.uid.clone(),
            units: vec![LeaseUnit::new("t", 0)],
        });
        assert!(l.hold("ns/dr", &LeaseUnit::new("t", 0), now).is_none());
    }

    #[test]
    fn grants_of_a_previous_leader_count_from_when_they_were_written() {
        let now = Instant::now();
        let mut l = Ledger::default();
        let grant = |at: i64| LeaseGrant {
            v: LEASE_RECORD_VERSION,
            mirror: "ns/dr".into(),
            holder: "t-0".into(),
            holder_uid: "u".into(),
            seq: 1,
            units: vec![LeaseUnit::new("t", 0)],
            duration_ms: 15_000,
            epoch: 1,
            granted_at_ms: at,
        };
        // Written 12 s ago: held 8 s more (15 s + 5 s margin).
        l.observed(&grant(88_000), now, 100_000, MARGIN);
        let unit = LeaseUnit::new("t", 0);
        assert_eq!(
            l.hold("ns/dr", &unit, now).unwrap().until,
            now + Duration::from_secs(8)
        );
        // Written 30 s ago: long over.
        let mut l = Ledger::default();
        l.observed(&grant(70_000), now, 100_000, MARGIN);
        assert!(l.hold("ns/dr", &unit, now).is_none());
    }

    #[test]
    fn allowing_a_topic_again_replaces_what_it_allowed_and_leaves_others() {
        let now = Instant::now();
        let a = pod("t-0", "a");
        let b = pod("u-0", "b");
        let mut l = Ledger::default();
        l.allow("ns/dr", "t", &assigned(&[(0, &a), (1, &a)]));
        l.allow("ns/dr", "u", &assigned(&[(0, &b)]));
        l.allow("ns/dr", "t", &assigned(&[(1, &a)]));
        assert_eq!(l.answer(&request(&a, &[0, 1]), now, D, MARGIN).len(), 1);
        let mut req = request(&b, &[0]);
        req.units = vec![LeaseUnit::new("u", 0)];
        assert_eq!(l.answer(&req, now, D, MARGIN).len(), 1);
        l.prune(now + D + MARGIN);
        assert!(l.hold("ns/dr", &LeaseUnit::new("u", 0), now).is_none());
    }
}
