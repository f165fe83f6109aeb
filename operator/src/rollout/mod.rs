//! Fetcher pod rollouts: after an operator upgrade (or any change of the operator's side of the
//! fetcher pod — its default image, resources, flags), every fetcher pod's spec hash changes.
//! Such pods, outdated only because another operator made them, are not deleted by the plans
//! that run them (a topic's, a pool's) but offered to the mirror's rollout ([`plan`]): at most
//! `--fetcher-max-unavailable` replacements of a `ClusterMirror` at a time, each caught up
//! before the next. Pods that must go for correctness (gone, exited, a partition that moves, a
//! change of the mirror's own spec with the same operator) are replaced at once, as before.
//!
//! Each fetcher pod carries the hash of the operator that made it
//! ([`ANNOTATION_OPERATOR`]: version and default fetcher image); a pod without it was made by
//! an operator from before rollouts and is treated as another operator's. The [`Board`] keeps,
//! per mirror, what each topic's reconcile and the pool last reported (candidates, pods,
//! partitions) and the replacements in progress, in memory: an operator restarted in the middle
//! of a rollout forgets the replacement in progress (the next may start before it caught up).

pub mod plan;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kmirror_state::leases::LeaseUnit;

use crate::pods::fnv1a;
use plan::{Candidate, Decision, Input, PodFacts, Replacement, UnitFacts};

/// Annotation with the hash of the operator (version and default fetcher image) that made a
/// fetcher pod.
pub const ANNOTATION_OPERATOR: &str = "kmirror.io/operator-template";

/// The source name of a mirror's pool in [`Board::step`].
pub const POOL: &str = "";

/// How long a report of a topic counts without being renewed (a deleted topic's goes).
const REPORT_TTL_MS: i64 = 120_000;

/// How soon a topic with a pod being replaced is looked at again (until it is caught up).
pub const ROLLOUT_REQUEUE: Duration = Duration::from_secs(2);

/// The hash of this operator's side of fetcher pods: its version and the default image.
pub fn operator_template(fetcher_image: &str) -> String {
    let text = format!("{}\n{fetcher_image}", env!("CARGO_PKG_VERSION"));
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// Marks `pod` as made by the operator of `template`.
pub fn stamp(pod: &mut Pod, template: &str) {
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_OPERATOR.into(), template.into());
}

/// The rollout's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most replacements of one mirror in progress at once.
    pub max_unavailable: usize,
    /// How long one may take to catch up before it is reported and the rollout goes on.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_unavailable: 1,
            timeout: Duration::from_secs(600),
        }
    }
}

/// What a topic's reconcile (or a mirror's pool) reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Its pods outdated only because another operator made them.
    pub candidates: Vec<Candidate>,
    /// Its fetcher pods by name.
    pub pods: BTreeMap<String, PodFacts>,
    /// Its partitions.
    pub units: BTreeMap<LeaseUnit, UnitFacts>,
}

/// A mirror's rollout as its status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// A replacement of the current (or last) rollout that was not caught up in time.
    pub stalled: Option<String>,
    /// Replacements in progress and pods waiting for one.
    pub active: bool,
}

#[derive(Default)]
struct MirrorBoard {
    reports: BTreeMap<String, (Report, i64)>,
    in_progress: BTreeMap<String, Replacement>,
    stalled: Option<String>,
    active: bool,
    /// A rollout ran in this operator's life.
    rolled: bool,
}

/// An event about the mirror's rollout (action `Rollout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// A warning, else a normal event.
    pub warning: bool,
    /// Its reason.
    pub reason: &'static str,
    /// What a person reads.
    pub text: String,
    /// The pod it is about (its related object: each pod's events stay apart).
    pub pod: Option<String>,
}

impl Notice {
    fn normal(reason: &'static str, pod: Option<&str>, text: impl Into<String>) -> Notice {
        Notice {
            warning: false,
            reason,
            text: text.into(),
            pod: pod.map(str::to_string),
        }
    }
}

/// What one step of a mirror's rollout decided.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// UIDs of the pods to replace now (of every topic of the mirror).
    pub admitted: BTreeSet<String>,
    /// Events for the mirror.
    pub notes: Vec<Notice>,
    /// A pool pod was admitted: the pool should look now.
    pub pool_admitted: bool,
}

/// A topic to reconcile now: namespace and name.
pub type Wake = (String, String);

/// The rollouts of every mirror, in memory.
pub struct Board {
    mirrors: Mutex<HashMap<String, MirrorBoard>>,
    /// Topics with a pod admitted by another topic's reconcile: they delete it on their next
    /// look, which this brings forward (topics waiting for the rollout look at their usual pace).
    wake: tokio::sync::mpsc::UnboundedSender<Wake>,
    wakes: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Wake>>>,
}

impl Default for Board {
    fn default() -> Self {
        let (wake, wakes) = tokio::sync::mpsc::unbounded_channel();
        Board {
            mirrors: Default::default(),
            wake,
            wakes: Mutex::new(Some(wakes)),
        }
    }
}

impl Board {
    /// The topics to reconcile now (once: the controller that reconciles them takes it).
    pub fn take_wakes(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Wake>> {
        self.wakes.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Whether a pod `source` reported is being replaced (its topic looks every
    /// [`ROLLOUT_REQUEUE`] until it is caught up).
    pub fn busy(&self, key: &str, source: &str) -> bool {
        let map = self.mirrors.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).is_some_and(|b| {
            b.reports.get(source).is_some_and(|(r, _)| {
                b.in_progress.keys().any(|name| {
                    r.pods.contains_key(name) || r.candidates.iter().any(|c| &c.name == name)
                })
            })
        })
    }

    /// UIDs of the pods of mirror `key` whose replacement has started.
    pub fn admitted(&self, key: &str) -> BTreeSet<String> {
        let map = self.mirrors.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).map_or_else(BTreeSet::new, |b| {
            b.in_progress.values().map(|r| r.old_uid.clone()).collect()
        })
    }

    /// The rollout of mirror `key` for its status (none when it never rolled in this
    /// operator's life).
    pub fn summary(&self, key: &str) -> Option<Summary> {
        let map = self.mirrors.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).filter(|b| b.rolled).map(|b| Summary {
            stalled: b.stalled.clone(),
            active: b.active,
        })
    }

    /// Takes in what `source` (a topic, or the pool) of mirror `key` reports, and decides.
    pub fn step(
        &self,
        key: &str,
        source: &str,
        report: Report,
        limits: Limits,
        now_ms: i64,
    ) -> Step {
        let mut map = self.mirrors.lock().unwrap_or_else(|p| p.into_inner());
        let board = map.entry(key.to_string()).or_default();
        board.reports.insert(source.to_string(), (report, now_ms));
        board
            .reports
            .retain(|_, (_, at)| now_ms - *at <= REPORT_TTL_MS);
        let mut candidates = Vec::new();
        let mut pods = BTreeMap::new();
        let mut units = BTreeMap::new();
        let mut reporter: BTreeMap<String, String> = BTreeMap::new();
        for (from, (r, _)) in &board.reports {
            candidates.extend(r.candidates.iter().cloned());
            reporter.extend(r.candidates.iter().map(|c| (c.name.clone(), from.clone())));
            pods.extend(r.pods.iter().map(|(k, v)| (k.clone(), v.clone())));
            units.extend(r.units.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        candidates.sort_by(|a, b| a.name.cmp(&b.name));
        let decision = plan::decide(&Input {
            candidates: &candidates,
            in_progress: &board.in_progress,
            pods: &pods,
            units: &units,
            max_unavailable: limits.max_unavailable,
            timeout_ms: limits.timeout.as_millis() as i64,
            now_ms,
        });
        let notes = apply(board, &decision, limits);
        let namespace = key.split('/').next().unwrap_or_default();
        let mut pool_admitted = false;
        for (c, _) in &decision.start {
            match reporter.get(&c.name).map(String::as_str) {
                Some(POOL) => pool_admitted = true,
                Some(topic) if topic != source => {
                    let _ = self.wake.send((namespace.to_string(), topic.to_string()));
                }
                _ => {}
            }
        }
        Step {
            admitted: board
                .in_progress
                .values()
                .map(|r| r.old_uid.clone())
                .collect(),
            notes,
            pool_admitted,
        }
    }
}

/// Applies a decision to a mirror's board; the events it makes.
fn apply(board: &mut MirrorBoard, d: &Decision, limits: Limits) -> Vec<Notice> {
    let mut notes = Vec::new();
    for name in &d.caught_up {
        board.in_progress.remove(name);
        tracing::info!(pod = %name, "fetcher pod replaced and caught up");
        notes.push(Notice::normal(
            "FetcherCaughtUp",
            Some(name),
            format!("fetcher pod {name}: replaced, its partitions caught up"),
        ));
    }
    for (name, why) in &d.stalled {
        board.in_progress.remove(name);
        let text = format!(
            "fetcher pod {name}: {why}; the rollout goes on with the next pod (at most {} \
             replacement(s) at a time)",
            limits.max_unavailable
        );
        tracing::warn!(pod = %name, "{text}");
        board.stalled = Some(text.clone());
        notes.push(Notice {
            warning: true,
            reason: "FetcherRolloutStalled",
            text,
            pod: Some(name.clone()),
        });
    }
    if !d.start.is_empty() && !board.active {
        board.active = true;
        board.rolled = true;
        board.stalled = None;
    }
    for (c, r) in &d.start {
        board.in_progress.insert(c.name.clone(), r.clone());
        let text = format!(
            "replacing fetcher pod {}: another operator version or pod template made it; {} \
             more wait, at most {} at a time, each caught up first",
            c.name, d.queued, limits.max_unavailable
        );
        tracing::info!(pod = %c.name, queued = d.queued, "{text}");
        notes.push(Notice::normal("FetcherReplaced", Some(&c.name), text));
    }
    if board.active && board.in_progress.is_empty() && d.queued == 0 && d.start.is_empty() {
        board.active = false;
        notes.push(Notice::normal(
            "FetcherRolloutComplete",
            None,
            "every fetcher pod runs this operator's pod template",
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_crds::v1alpha1::PartitionState;

    fn report(candidates: &[(&str, &str, i32)], ready: &[(&str, &str)]) -> Report {
        Report {
            candidates: candidates
                .iter()
                .map(|(n, u, p)| Candidate {
                    name: n.to_string(),
                    uid: u.to_string(),
                    units: vec![LeaseUnit::new("t", *p)],
                })
                .collect(),
            pods: ready
                .iter()
                .map(|(n, u)| {
                    let facts = PodFacts {
                        uid: u.to_string(),
                        ready: true,
                        terminating: false,
                    };
                    (n.to_string(), facts)
                })
                .collect(),
            units: (0..2)
                .map(|p| {
                    let facts = UnitFacts {
                        state: PartitionState::Mirroring,
                        writer_uid: ready.get(p as usize).map(|(_, u)| u.to_string()),
                        reached: Some(10),
                        source_end: Some(10),
                        stable_end: None,
                    };
                    (LeaseUnit::new("t", p), facts)
                })
                .collect(),
        }
    }

    #[test]
    fn the_board_admits_one_then_the_next_and_tells_the_mirror() {
        let b = Board::default();
        b.step("ns/dr", "t", report(&[], &[]), Limits::default(), 0);
        assert_eq!(b.summary("ns/dr"), None, "no rollout yet: nothing to show");
        let limits = Limits::default();
        let old = [("p-0", "o0", 0), ("p-1", "o1", 1)];
        let s = b.step(
            "ns/dr",
            "t",
            report(&old, &[("p-0", "o0"), ("p-1", "o1")]),
            limits,
            0,
        );
        assert_eq!(s.admitted, BTreeSet::from(["o0".to_string()]));
        assert_eq!(s.notes[0].reason, "FetcherReplaced");
        assert!(s.notes[0].text.contains("1 more wait"), "{:?}", s.notes);
        assert_eq!(b.admitted("ns/dr"), s.admitted);
        // p-0 replaced (n0) and caught up: p-1 next.
        let s = b.step(
            "ns/dr",
            "t",
            report(&old[1..], &[("p-0", "n0"), ("p-1", "o1")]),
            limits,
            1_000,
        );
        assert_eq!(s.admitted, BTreeSet::from(["o1".to_string()]));
        let s = b.step(
            "ns/dr",
            "t",
            report(&[], &[("p-0", "n0"), ("p-1", "n1")]),
            limits,
            2_000,
        );
        assert!(s.admitted.is_empty());
        let reasons: Vec<&str> = s.notes.iter().map(|n| n.reason).collect();
        assert_eq!(reasons, ["FetcherCaughtUp", "FetcherRolloutComplete"]);
        assert_eq!(b.summary("ns/dr").unwrap(), Summary::default());
    }

    #[test]
    fn a_pod_admitted_by_another_topics_look_wakes_its_topic() {
        let limits = Limits::default();
        // Admitted by its own topic's look: nobody to wake; that topic is busy.
        let b = Board::default();
        let mut wakes = b.take_wakes().unwrap();
        b.step("ns/dr", "t2", report(&[("q-0", "o0", 0)], &[]), limits, 0);
        assert!(wakes.try_recv().is_err());
        assert!(b.busy("ns/dr", "t2"));
        // Admitted by another topic's look: its topic is woken.
        let b = Board::default();
        let mut wakes = b.take_wakes().unwrap();
        b.mirrors
            .lock()
            .unwrap()
            .entry("ns/dr".into())
            .or_default()
            .reports
            .insert("t2".into(), (report(&[("q-0", "o0", 0)], &[]), 0));
        let s = b.step("ns/dr", "t1", Report::default(), limits, 0);
        assert_eq!(s.admitted, BTreeSet::from(["o0".to_string()]));
        assert_eq!(wakes.try_recv().unwrap(), ("ns".into(), "t2".into()));
        assert!(!b.busy("ns/dr", "t1") && b.busy("ns/dr", "t2"));
    }

    #[test]
    fn a_stall_is_a_warning_and_stays_in_the_summary_until_the_next_rollout() {
        let b = Board::default();
        let limits = Limits {
            max_unavailable: 1,
            timeout: Duration::from_secs(1),
        };
        let old = [("p-0", "o0", 0)];
        b.step("ns/dr", "t", report(&old, &[("p-0", "o0")]), limits, 0);
        let s = b.step("ns/dr", "t", report(&[], &[]), limits, 1_000);
        assert_eq!(s.notes[0].reason, "FetcherRolloutStalled");
        assert!(
            s.notes[0].text.contains("p-0: not caught up after 1s"),
            "{:?}",
            s.notes
        );
        let summary = b.summary("ns/dr").unwrap();
        assert!(summary.stalled.is_some() && !summary.active, "{summary:?}");
    }

    #[test]
    fn the_operator_template_changes_with_the_image() {
        assert_ne!(operator_template("a:1"), operator_template("a:2"));
        assert_eq!(operator_template("a:1"), operator_template("a:1"));
    }
}
