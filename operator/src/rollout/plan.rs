//! The rollout's decision: which fetcher pods, outdated only because another operator (another
//! version or pod template) made them, are replaced now — at most `max_unavailable`
//! replacements of a `ClusterMirror` in progress at a time, each until it is caught up or its
//! time is up. Pure.
//!
//! Caught up: the replacement pod (same name, another UID) is Ready and each of its partitions
//! is MIRRORING with a position the new pod wrote, at or beyond the source end observed when
//! its replacement started (its last stable offset, when that is lower: a fetcher that reads
//! committed records copies up to it). A partition that no longer runs a fetcher (paused,
//! stopped by a failover) needs nothing. A replacement not caught up within `timeout` is
//! reported stalled, with the reason, and no longer holds its place: the rollout goes on.

use std::collections::{BTreeMap, BTreeSet};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_state::leases::LeaseUnit;

/// A pod the rollout may replace: it runs what it should, only made by another operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Pod name (its replacement has the same).
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// The partitions it runs.
    pub units: Vec<LeaseUnit>,
}

/// A replacement in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// UID of the pod replaced.
    pub old_uid: String,
    /// Its partitions, each with the source end observed when the replacement started.
    pub targets: BTreeMap<LeaseUnit, Option<i64>>,
    /// When it started (ms).
    pub started_ms: i64,
}

/// A fetcher pod as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodFacts {
    /// UID.
    pub uid: String,
    /// Its container is Ready.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
}

/// A partition as its topic's last reconcile saw it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitFacts {
    /// Its lifecycle state.
    pub state: PartitionState,
    /// UID of the pod that wrote its position.
    pub writer_uid: Option<String>,
    /// How far it copied: the next source offset (transaction markers and aborted records
    /// skipped included).
    pub reached: Option<i64>,
    /// The source's last stable offset the fetcher saw, when it reads committed records only.
    pub stable_end: Option<i64>,
    /// The source's log end.
    pub source_end: Option<i64>,
}

/// What the decision is made from: one mirror.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Pods the rollout may replace.
    pub candidates: &'a [Candidate],
    /// Replacements in progress, by pod name.
    pub in_progress: &'a BTreeMap<String, Replacement>,
    /// The mirror's fetcher pods by name.
    pub pods: &'a BTreeMap<String, PodFacts>,
    /// The mirror's partitions.
    pub units: &'a BTreeMap<LeaseUnit, UnitFacts>,
    /// Most replacements in progress at once (at least 1).
    pub max_unavailable: usize,
    /// How long a replacement may take to catch up (ms).
    pub timeout_ms: i64,
    /// Now (ms).
    pub now_ms: i64,
}

/// What to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Replace these now (in progress from now on, with these targets).
    pub start: Vec<(Candidate, Replacement)>,
    /// Replacements caught up: done.
    pub caught_up: Vec<String>,
    /// Replacements not caught up in time: pod name and why; they no longer hold a place.
    pub stalled: Vec<(String, String)>,
    /// Replacements still catching up: pod name and what it waits for.
    pub waiting: Vec<(String, String)>,
    /// Candidates that wait for a free place.
    pub queued: usize,
}

/// Whether the replacement of `name` is caught up; else what it waits for.
pub fn caught_up(
    name: &str,
    r: &Replacement,
    pods: &BTreeMap<String, PodFacts>,
    units: &BTreeMap<LeaseUnit, UnitFacts>,
) -> Result<(), String> {
    let pod = match pods.get(name) {
        None => return Err("its replacement is not created yet".into()),
        Some(p) if p.uid == r.old_uid => return Err("the old pod is still there".into()),
        Some(p) if p.terminating => return Err("its replacement is being deleted".into()),
        Some(p) if !p.ready => return Err("its replacement is not Ready".into()),
        Some(p) => p,
    };
    for (unit, target) in &r.targets {
        let Some(f) = units.get(unit) else {
            return Err(format!("{unit}: no state seen"));
        };
        match f.state {
            PartitionState::Mirroring => {}
            PartitionState::Pausing
            | PartitionState::Paused
            | PartitionState::Stopping
            | PartitionState::Stopped => continue,
            other => return Err(format!("{unit} is {}", other.as_str())),
        }
        if f.writer_uid.as_deref() != Some(pod.uid.as_str()) {
            return Err(format!(
                "{unit}: the new pod has not written its position yet"
            ));
        }
        let Some(target) = target.map(|t| f.stable_end.map_or(t, |s| t.min(s))) else {
            continue;
        };
        let reached = f.reached.unwrap_or(0);
        if reached < target {
            return Err(format!(
                "{unit} copied up to offset {reached} of {target} (the source end when its \
                 replacement started)"
            ));
        }
    }
    Ok(())
}

/// The decision.
pub fn decide(input: &Input<'_>) -> Decision {
    let mut out = Decision::default();
    let mut busy = 0;
    for (name, r) in input.in_progress {
        match caught_up(name, r, input.pods, input.units) {
            Ok(()) => out.caught_up.push(name.clone()),
            Err(why) if input.now_ms - r.started_ms >= input.timeout_ms => {
                let after = (input.now_ms - r.started_ms) / 1000;
                out.stalled
                    .push((name.clone(), format!("not caught up after {after}s: {why}")));
            }
            Err(why) => {
                busy += 1;
                out.waiting.push((name.clone(), why));
            }
        }
    }
    let free = input.max_unavailable.max(1).saturating_sub(busy);
    let mut seen = BTreeSet::new();
    let waiting: Vec<&Candidate> = input
        .candidates
        .iter()
        .filter(|c| seen.insert(c.name.clone()))
        // One admitted before and still there is in progress: its topic deletes it on its next
        // look.
        .filter(|c| !input.in_progress.contains_key(&c.name))
        .collect();
    out.queued = waiting.len().saturating_sub(free);
    for c in waiting.into_iter().take(free) {
        let targets = c
            .units
            .iter()
            .map(|u| (u.clone(), input.units.get(u).and_then(|f| f.source_end)))
            .collect();
        let r = Replacement {
            old_uid: c.uid.clone(),
            targets,
            started_ms: input.now_ms,
        };
        out.start.push((c.clone(), r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;
    const TIMEOUT: i64 = 600_000;

    fn unit(p: i32) -> LeaseUnit {
        LeaseUnit::new("orders", p)
    }

    /// Pod `orders-fetcher-<p>` running partition `p`, made by the old operator.
    fn old(p: i32) -> Candidate {
        Candidate {
            name: format!("orders-fetcher-{p}"),
            uid: format!("old-{p}"),
            units: vec![unit(p)],
        }
    }

    /// A world of `n` partitions, each mirrored by its own pod up to offset 100 (source end
    /// 100), the pods Ready with the old UIDs.
    struct World {
        pods: BTreeMap<String, PodFacts>,
        units: BTreeMap<LeaseUnit, UnitFacts>,
        in_progress: BTreeMap<String, Replacement>,
    }

    fn world(n: i32) -> World {
        World {
            pods: (0..n)
                .map(|p| {
                    let facts = PodFacts {
                        uid: format!("old-{p}"),
                        ready: true,
                        terminating: false,
                    };
                    (format!("orders-fetcher-{p}"), facts)
                })
                .collect(),
            units: (0..n)
                .map(|p| {
                    let facts = UnitFacts {
                        state: PartitionState::Mirroring,
                        writer_uid: Some(format!("old-{p}")),
                        reached: Some(100),
                        stable_end: None,
                        source_end: Some(100),
                    };
                    (unit(p), facts)
                })
                .collect(),
            in_progress: BTreeMap::new(),
        }
    }

    impl World {
        fn decide(&self, candidates: &[Candidate], n: usize, now: i64) -> Decision {
            decide(&Input {
                candidates,
                in_progress: &self.in_progress,
                pods: &self.pods,
                units: &self.units,
                max_unavailable: n,
                timeout_ms: TIMEOUT,
                now_ms: now,
            })
        }

        /// Applies a decision as the board does: started replacements go in progress (their
        /// old pods are deleted and gone), finished ones leave.
        fn apply(&mut self, d: &Decision) {
            for name in d.caught_up.iter().chain(d.stalled.iter().map(|(n, _)| n)) {
                self.in_progress.remove(name);
            }
            for (c, r) in &d.start {
                self.in_progress.insert(c.name.clone(), r.clone());
                self.pods.remove(&c.name);
            }
        }

        /// The replacement of partition `p`'s pod runs (`ready`) and copied up to `reached`.
        fn replaced(&mut self, p: i32, ready: bool, reached: i64) {
            let uid = format!("new-{p}");
            let pod = PodFacts {
                uid: uid.clone(),
                ready,
                terminating: false,
            };
            self.pods.insert(format!("orders-fetcher-{p}"), pod);
            let f = self.units.get_mut(&unit(p)).unwrap();
            f.writer_uid = Some(uid);
            f.reached = Some(reached);
        }
    }

    fn names(d: &Decision) -> Vec<&str> {
        d.start.iter().map(|(c, _)| c.name.as_str()).collect()
    }

    #[test]
    fn nothing_outdated_nothing_replaced() {
        let w = world(3);
        let d = w.decide(&[], 1, NOW);
        assert_eq!(d, Decision::default());
    }

    #[test]
    fn one_at_a_time_each_caught_up_before_the_next() {
        let mut w = world(5);
        let all: Vec<Candidate> = (0..5).map(old).collect();
        let d = w.decide(&all, 1, NOW);
        assert_eq!(names(&d), ["orders-fetcher-0"]);
        assert_eq!(d.queued, 4);
        assert_eq!(
            d.start[0].1.targets[&unit(0)],
            Some(100),
            "the source end now"
        );
        w.apply(&d);
        // Five outdated, one in progress (its replacement not even created): none more.
        let rest: Vec<Candidate> = (1..5).map(old).collect();
        let d = w.decide(&rest, 1, NOW + 1_000);
        assert!(d.start.is_empty(), "{d:?}");
        assert_eq!(
            d.waiting,
            [(
                "orders-fetcher-0".to_string(),
                "its replacement is not created yet".to_string()
            )]
        );
        // Created but not Ready; Ready but behind the end seen at the start: still none.
        w.replaced(0, false, 100);
        assert!(w.decide(&rest, 1, NOW + 2_000).start.is_empty());
        w.replaced(0, true, 90);
        let d = w.decide(&rest, 1, NOW + 3_000);
        assert!(d.start.is_empty());
        assert!(
            d.waiting[0].1.contains("copied up to offset 90 of 100"),
            "{d:?}"
        );
        // Caught up: done, and the next starts in the same decision.
        w.replaced(0, true, 100);
        let d = w.decide(&rest, 1, NOW + 4_000);
        assert_eq!(d.caught_up, ["orders-fetcher-0"]);
        assert_eq!(names(&d), ["orders-fetcher-1"]);
    }

    #[test]
    fn the_position_must_be_the_new_pods_and_the_partition_mirroring() {
        let mut w = world(1);
        w.apply(&w.decide(&[old(0)], 1, NOW));
        w.replaced(0, true, 100);
        w.units.get_mut(&unit(0)).unwrap().writer_uid = Some("old-0".into());
        let d = w.decide(&[], 1, NOW);
        assert!(
            d.waiting[0].1.contains("has not written its position"),
            "{d:?}"
        );
        w.replaced(0, true, 100);
        w.units.get_mut(&unit(0)).unwrap().state = PartitionState::Failed;
        let d = w.decide(&[], 1, NOW);
        assert!(d.waiting[0].1.contains("is FAILED"), "{d:?}");
        // Paused meanwhile: it needs no fetcher, nothing to wait for.
        w.units.get_mut(&unit(0)).unwrap().state = PartitionState::Paused;
        assert_eq!(w.decide(&[], 1, NOW).caught_up, ["orders-fetcher-0"]);
        // Reading committed records only: the last stable offset is as far as it can copy.
        w.units.get_mut(&unit(0)).unwrap().state = PartitionState::Mirroring;
        w.replaced(0, true, 95);
        w.units.get_mut(&unit(0)).unwrap().stable_end = Some(95);
        assert_eq!(w.decide(&[], 1, NOW).caught_up, ["orders-fetcher-0"]);
    }

    #[test]
    fn two_at_a_time() {
        let mut w = world(5);
        let all: Vec<Candidate> = (0..5).map(old).collect();
        let d = w.decide(&all, 2, NOW);
        assert_eq!(names(&d), ["orders-fetcher-0", "orders-fetcher-1"]);
        w.apply(&d);
        // One of the two caught up: one more.
        w.replaced(1, true, 100);
        let rest: Vec<Candidate> = (2..5).map(old).collect();
        let d = w.decide(&rest, 2, NOW + 1_000);
        assert_eq!(d.caught_up, ["orders-fetcher-1"]);
        assert_eq!(names(&d), ["orders-fetcher-2"]);
        assert_eq!(d.queued, 2);
    }

    #[test]
    fn a_pool_pod_is_caught_up_when_all_its_partitions_are() {
        let mut w = world(0);
        let units = [LeaseUnit::new("a", 0), LeaseUnit::new("b", 3)];
        for u in &units {
            let facts = UnitFacts {
                state: PartitionState::Mirroring,
                writer_uid: Some("old-pool".into()),
                reached: Some(50),
                source_end: Some(50),
                stable_end: None,
            };
            w.units.insert(u.clone(), facts);
        }
        let pool = |i: u32| Candidate {
            name: format!("dr-pool-{i}"),
            uid: format!("old-pool-{i}"),
            units: units.to_vec(),
        };
        let d = w.decide(&[pool(0), pool(1)], 1, NOW);
        assert_eq!(names(&d), ["dr-pool-0"]);
        w.apply(&d);
        w.pods.insert(
            "dr-pool-0".into(),
            PodFacts {
                uid: "new".into(),
                ready: true,
                terminating: false,
            },
        );
        w.units.get_mut(&units[0]).unwrap().writer_uid = Some("new".into());
        let d = w.decide(&[pool(1)], 1, NOW);
        assert!(d.start.is_empty());
        assert!(d.waiting[0].1.starts_with("b[3]"), "{d:?}");
        w.units.get_mut(&units[1]).unwrap().writer_uid = Some("new".into());
        let d = w.decide(&[pool(1)], 1, NOW);
        assert_eq!(names(&d), ["dr-pool-1"]);
    }

    #[test]
    fn a_stuck_replacement_is_reported_and_the_rollout_goes_on() {
        let mut w = world(3);
        let all: Vec<Candidate> = (0..3).map(old).collect();
        w.apply(&w.decide(&all, 1, NOW));
        w.replaced(0, false, 0);
        let rest: Vec<Candidate> = (1..3).map(old).collect();
        assert!(w.decide(&rest, 1, NOW + TIMEOUT - 1).start.is_empty());
        let d = w.decide(&rest, 1, NOW + TIMEOUT);
        assert_eq!(
            d.stalled,
            [(
                "orders-fetcher-0".to_string(),
                "not caught up after 600s: its replacement is not Ready".to_string()
            )]
        );
        assert_eq!(names(&d), ["orders-fetcher-1"]);
    }

    #[test]
    fn a_pod_admitted_but_not_deleted_yet_is_not_admitted_twice() {
        let mut w = world(3);
        let all: Vec<Candidate> = (0..3).map(old).collect();
        let d = w.decide(&all, 2, NOW);
        for (c, r) in &d.start {
            w.in_progress.insert(c.name.clone(), r.clone());
        }
        // Its topic has not looked yet: the old pods still run and are still candidates.
        let d = w.decide(&all, 2, NOW + 1_000);
        assert!(d.start.is_empty(), "{d:?}");
        assert_eq!(d.waiting.len(), 2);
    }

    #[test]
    fn a_pod_deleted_elsewhere_takes_no_place() {
        // Pod 0 was deleted by someone else: it is no candidate (its topic creates it again at
        // once) and holds no place; the rollout replaces pod 1.
        let mut w = world(3);
        w.pods.remove("orders-fetcher-0");
        let d = w.decide(&[old(1), old(2)], 1, NOW);
        assert_eq!(names(&d), ["orders-fetcher-1"]);
    }
}
