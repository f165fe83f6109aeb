//! What each topic of a pooled mirror asks of its pool, as its last reconcile planned it: the
//! partitions that want a fetcher and those whose copy ended inside a running pool pod (that pod
//! is restarted). Kept in memory; every topic reports again on its next reconcile, so a new
//! leader's pool waits for all its topics before it changes a pod.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One topic's demand.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicDemand {
    /// Source topic.
    pub source_topic: String,
    /// Destination topic.
    pub destination_topic: String,
    /// Partitions that want a fetcher.
    pub wanted: BTreeSet<i32>,
    /// Partitions whose copy ended inside a running pool pod, with that pod's UID: the pod is
    /// restarted (it starts them again if they are still wanted).
    pub restart: BTreeMap<i32, String>,
}

/// A mirror's demand.
#[derive(Debug, Clone, Default)]
pub struct MirrorDemand {
    /// By `MirrorTopic` name.
    pub topics: BTreeMap<String, TopicDemand>,
    /// The referenced Secrets' versions the topics last saw.
    pub secrets_version: String,
    /// When the demand last changed.
    pub changed_at: Option<Instant>,
    /// Since when a change waits for the pool.
    pub pending_since: Option<Instant>,
    /// When the pool first looked at this mirror (for the wait for every topic's report).
    pub first_look: Option<Instant>,
}

/// A change is acted on once the demand was quiet this long (a burst of new topics — a mirror
/// applied, a leader starting — moves pods once, not once per topic)…
pub const QUIET: Duration = Duration::from_secs(2);
/// …or once it waited this long (a mirror of hundreds of topics reports for a minute or two).
pub const PATIENCE: Duration = Duration::from_secs(30);
/// How long a pool waits for a topic of its mirror to report — counted from the topic's
/// creation and from the pool's first look (a new leader) — before it acts without it.
pub const REPORT_WAIT: Duration = Duration::from_secs(60);

impl MirrorDemand {
    /// Whether the pool may act at `now`: the demand settled (or waited long enough), and every
    /// topic in `topics` (name → age) reported, but for topics older than [`REPORT_WAIT`] once
    /// the pool looked that long (a topic that cannot report — an invalid spec — holds nothing
    /// up for long).
    pub fn settled(&self, now: Instant, topics: &BTreeMap<String, Duration>) -> bool {
        let quiet = self
            .changed_at
            .is_none_or(|t| now.saturating_duration_since(t) >= QUIET);
        let patient = self
            .pending_since
            .is_some_and(|t| now.saturating_duration_since(t) >= PATIENCE);
        let looked_long = self
            .first_look
            .is_some_and(|t| now.saturating_duration_since(t) >= REPORT_WAIT);
        let reported = topics.iter().all(|(name, age)| {
            self.topics.contains_key(name) || (looked_long && *age >= REPORT_WAIT)
        });
        (quiet || patient) && reported
    }
}

/// Every pooled mirror's demand (by `namespace/name`), and a wake-up for the pool.
#[derive(Debug, Default)]
pub struct Demands {
    mirrors: Mutex<BTreeMap<String, MirrorDemand>>,
    /// Woken on every change.
    pub changed: tokio::sync::Notify,
}

impl Demands {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, MirrorDemand>> {
        self.mirrors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets topic `name`'s demand in `mirror`; wakes the pool when it changed.
    pub fn report(&self, mirror: &str, name: &str, demand: TopicDemand, secrets_version: &str) {
        let now = Instant::now();
        let changed = {
            let mut mirrors = self.lock();
            let m = mirrors.entry(mirror.to_string()).or_default();
            let changed =
                m.topics.get(name) != Some(&demand) || m.secrets_version != secrets_version;
            if changed {
                m.topics.insert(name.to_string(), demand);
                m.secrets_version = secrets_version.to_string();
                m.changed_at = Some(now);
                m.pending_since.get_or_insert(now);
            }
            changed
        };
        if changed {
            self.changed.notify_one();
        }
    }

    /// Topic `name` of `mirror` wants nothing any more (stopped, refused, being deleted).
    pub fn withdraw(&self, mirror: &str, name: &str, source_topic: &str) {
        let (secrets, destination) = {
            let mirrors = self.lock();
            let m = mirrors.get(mirror);
            (
                m.map(|m| m.secrets_version.clone()).unwrap_or_default(),
                m.and_then(|m| m.topics.get(name))
                    .map(|t| t.destination_topic.clone())
                    .unwrap_or_default(),
            )
        };
        let demand = TopicDemand {
            source_topic: source_topic.to_string(),
            destination_topic: destination,
            ..Default::default()
        };
        self.report(mirror, name, demand, &secrets);
    }

    /// Forgets topic `name` of `mirror` (it is gone).
    pub fn forget(&self, mirror: &str, name: &str) {
        if let Some(m) = self.lock().get_mut(mirror) {
            m.topics.remove(name);
        }
    }

    /// A copy of `mirror`'s demand, noting the pool's first look.
    pub fn of(&self, mirror: &str) -> MirrorDemand {
        let mut mirrors = self.lock();
        let m = mirrors.entry(mirror.to_string()).or_default();
        m.first_look.get_or_insert_with(Instant::now);
        m.clone()
    }

    /// The pool acted on `mirror`'s demand as of `seen` (a change after it stays pending).
    pub fn acted(&self, mirror: &str, seen: Option<Instant>) {
        if let Some(m) = self.lock().get_mut(mirror)
            && m.changed_at == seen
        {
            m.pending_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(wanted: &[i32]) -> TopicDemand {
        TopicDemand {
            source_topic: "t".into(),
            destination_topic: "t".into(),
            wanted: wanted.iter().copied().collect(),
            restart: BTreeMap::new(),
        }
    }

    #[test]
    fn a_change_waits_for_quiet_or_patience_and_every_topic_to_report() {
        let d = Demands::default();
        d.report("ns/dr", "a", demand(&[0]), "s");
        let m = d.of("ns/dr");
        let t0 = m.changed_at.unwrap();
        let old = REPORT_WAIT * 2;
        let topics = BTreeMap::from([("a".to_string(), old)]);
        assert!(!m.settled(t0, &topics), "just changed");
        assert!(m.settled(t0 + QUIET, &topics), "quiet");
        let both = BTreeMap::from([("a".to_string(), old), ("b".to_string(), Duration::ZERO)]);
        assert!(!m.settled(t0 + QUIET, &both), "b has not reported");
        let mut late = m.clone();
        late.first_look = Some(t0);
        assert!(
            !late.settled(t0 + REPORT_WAIT, &both),
            "b is new: the pool waits for it"
        );
        let both_old = BTreeMap::from([("a".to_string(), old), ("b".to_string(), old)]);
        assert!(
            !late.settled(t0 + QUIET, &both_old),
            "a new leader waits for old topics too"
        );
        assert!(
            late.settled(t0 + REPORT_WAIT, &both_old),
            "an old topic that never reports holds nothing up for long"
        );
        // Changes that keep coming are acted on after the patience.
        let mut busy = m.clone();
        busy.changed_at = Some(t0 + PATIENCE);
        busy.pending_since = Some(t0 + QUIET);
        assert!(!busy.settled(t0 + PATIENCE, &topics));
        busy.pending_since = Some(t0);
        assert!(busy.settled(t0 + PATIENCE, &topics));
    }

    #[test]
    fn the_same_report_is_no_change_and_a_withdrawal_wants_nothing() {
        let d = Demands::default();
        d.report("ns/dr", "a", demand(&[0, 1]), "s");
        let first = d.of("ns/dr").changed_at;
        d.report("ns/dr", "a", demand(&[0, 1]), "s");
        assert_eq!(d.of("ns/dr").changed_at, first);
        d.acted("ns/dr", first);
        assert_eq!(d.of("ns/dr").pending_since, None);
        d.withdraw("ns/dr", "a", "t");
        let m = d.of("ns/dr");
        assert!(m.topics["a"].wanted.is_empty());
        assert_eq!(m.topics["a"].destination_topic, "t");
        assert!(m.pending_since.is_some());
        d.forget("ns/dr", "a");
        assert!(d.of("ns/dr").topics.is_empty());
    }
}
