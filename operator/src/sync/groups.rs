//! Consumer-group offset sync: committed offsets of included groups on mirrored topics are
//! translated through the offset map (identity when offsets are identical), clamped to the
//! destination's log start/end, and committed on the destination without a leader epoch.
//! Groups with active members on the destination are skipped and reported. Offsets are read and
//! written with the admin API on the clusters' admin clients (no consumer per group); a group
//! that fails is reported and the others are synced regardless. A few groups are synced at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kmirror_crds::filter::Selector;
use kmirror_crds::v1alpha1::MirrorTopic;
use kmirror_state::kafka_admin::{alter_group_offsets, list_group_offsets};
use kmirror_state::offset_map::OffsetMap;
use kmirror_state::records::PartitionRecords;
use rdkafka::{Offset, TopicPartitionList};

use super::{Mirrored, PartResult};
use crate::clusters::Cluster;
use crate::error::{Cause, KafkaError};
use crate::metrics::{GroupLabels, Metrics};
use crate::scope::MirrorScope;
use crate::state_cache::StateCache;

const TIMEOUT: Duration = Duration::from_secs(15);

/// Groups synced at once (each group is a few round trips to each cluster, most of a round's
/// time is waiting for them).
const GROUP_WORKERS: usize = 4;

/// (log start, log end) of destination partitions, by (topic, partition), read once per round.
type Watermarks = Mutex<BTreeMap<(String, i32), (i64, i64)>>;

/// One mirrored topic as the group sync sees it.
#[derive(Clone, Debug)]
pub struct TopicPlan {
    /// Source topic.
    pub source: String,
    /// Destination topic.
    pub destination: String,
    /// Partitions to sync.
    pub partitions: Vec<i32>,
    /// Offset map per partition (absent: identity).
    pub maps: BTreeMap<i32, OffsetMap>,
}

/// The outcome of syncing groups.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GroupReport {
    /// Groups whose offsets were committed on the destination.
    pub synced: Vec<String>,
    /// Groups already in step.
    pub unchanged: usize,
    /// Groups skipped because they have active members on the destination.
    pub active: Vec<String>,
    /// Groups whose offsets could not be synced, with why; the others are synced regardless.
    pub failed: Vec<(String, String)>,
}

impl GroupReport {
    /// A one-line summary for status.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} groups synced, {} unchanged",
            self.synced.len(),
            self.unchanged
        );
        if !self.active.is_empty() {
            s.push_str(&format!(
                ", {} skipped (active members on the destination: {})",
                self.active.len(),
                self.active.join(", ")
            ));
        }
        s
    }

    /// Why the sync failed, when a group failed: one line naming the groups.
    pub fn failure(&self) -> Option<String> {
        let (group, why) = self.failed.first()?;
        let more = match self.failed.len() {
            1 => String::new(),
            n => format!(" (and {} more groups)", n - 1),
        };
        Some(format!(
            "{} of {} groups failed; group {group}: {why}{more}",
            self.failed.len(),
            self.failed.len() + self.synced.len() + self.unchanged + self.active.len()
        ))
    }
}

/// What syncing one group did.
enum GroupOutcome {
    Synced,
    Unchanged,
    Active,
    NothingCommitted,
}

fn plans(
    cache: &StateCache,
    topics: &[&MirrorTopic],
    include: impl Fn(i32, &PartitionRecords) -> bool,
) -> Vec<TopicPlan> {
    topics
        .iter()
        .map(|t| {
            let records = cache.topic(&t.mirror_key(), &t.spec.source_topic);
            let chosen: BTreeMap<i32, &PartitionRecords> = records
                .iter()
                .filter(|(p, r)| include(**p, r))
                .map(|(p, r)| (*p, r))
                .collect();
            TopicPlan {
                source: t.spec.source_topic.clone(),
                destination: t.destination_topic().to_string(),
                partitions: chosen.keys().copied().collect(),
                maps: chosen
                    .iter()
                    .map(|(p, r)| (*p, r.offset_map().unwrap_or_default()))
                    .collect(),
            }
        })
        .filter(|p| !p.partitions.is_empty())
        .collect()
}

/// Syncs the selected groups once over `plans` (blocking; run it off the async runtime).
pub fn sync_blocking(
    source: &Cluster,
    destination: &Cluster,
    selector: &Selector,
    plans: &[TopicPlan],
) -> std::result::Result<GroupReport, String> {
    let groups = source
        .admin
        .inner()
        .fetch_group_list(None, TIMEOUT)
        .map_err(|e| format!("listing source groups: {e}"))?;
    let mut names: Vec<String> = groups
        .groups()
        .iter()
        .map(|g| g.name().to_string())
        .filter(|g| selector.matches(g) && !g.starts_with("kmirror-"))
        .collect();
    names.sort();
    names.dedup();
    let next = AtomicUsize::new(0);
    let watermarks: Watermarks = Mutex::new(BTreeMap::new());
    let mut outcomes: Vec<(String, std::result::Result<GroupOutcome, String>)> =
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..GROUP_WORKERS.min(names.len()))
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(group) = names.get(i) else {
                                return done;
                            };
                            let outcome =
                                sync_group(source, destination, plans, group, &watermarks);
                            done.push((group.clone(), outcome));
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    let mut report = GroupReport::default();
    for (group, outcome) in outcomes {
        match outcome {
            Ok(GroupOutcome::Synced) => report.synced.push(group),
            Ok(GroupOutcome::Unchanged) => report.unchanged += 1,
            Ok(GroupOutcome::Active) => report.active.push(group),
            Ok(GroupOutcome::NothingCommitted) => {}
            Err(why) => {
                tracing::warn!(%group, error = %why, "cannot sync the group's offsets");
                report.failed.push((group, why));
            }
        }
    }
    Ok(report)
}

/// Syncs one group's offsets (the log ends of destination partitions are read once per run,
/// shared by the workers).
fn sync_group(
    source: &Cluster,
    destination: &Cluster,
    plans: &[TopicPlan],
    group: &str,
    watermarks: &Watermarks,
) -> std::result::Result<GroupOutcome, String> {
    // Everything the group committed, then what of it is mirrored (asking for the mirrored
    // partitions instead — thousands — costs the client a search of that list per answer).
    let committed = list_group_offsets(source.admin.inner(), group, None, TIMEOUT)
        .map_err(|e| format!("reading its offsets on the source: {e}"))?;
    let by_source: HashMap<&str, &TopicPlan> =
        plans.iter().map(|p| (p.source.as_str(), p)).collect();
    let mut target = TopicPartitionList::new();
    for e in &committed {
        let Some(plan) = by_source
            .get(e.topic.as_str())
            .filter(|p| p.partitions.contains(&e.partition))
        else {
            continue;
        };
        if let Some((_, why)) = &e.error {
            return Err(format!(
                "reading its offset of {}[{}] on the source: {why}",
                e.topic, e.partition
            ));
        }
        let Some(offset) = e.offset else {
            continue;
        };
        let partition = e.partition;
        let key = (plan.destination.clone(), partition);
        let known = watermarks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .copied();
        let bounds = match known {
            Some(w) => w,
            // Asked outside the lock (two workers may ask the same partition once each).
            None => {
                let w = destination
                    .admin
                    .inner()
                    .fetch_watermarks(&plan.destination, partition, TIMEOUT)
                    .map_err(|err| {
                        format!(
                            "offsets of {}[{partition}] on the destination: {err}",
                            plan.destination
                        )
                    })?;
                watermarks
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, w);
                w
            }
        };
        let map = plan.maps.get(&partition).cloned().unwrap_or_default();
        let translated = map.translate_committed(offset, bounds);
        target
            .add_partition_offset(&plan.destination, partition, Offset::Offset(translated))
            .map_err(|err| err.to_string())?;
    }
    if target.count() == 0 {
        return Ok(GroupOutcome::NothingCommitted);
    }
    let described = destination
        .admin
        .inner()
        .fetch_group_list(Some(group), TIMEOUT)
        .map_err(|e| format!("describing it on the destination: {e}"))?;
    if described.groups().iter().any(|g| !g.members().is_empty()) {
        return Ok(GroupOutcome::Active);
    }
    let current = list_group_offsets(destination.admin.inner(), group, Some(&target), TIMEOUT)
        .map_err(|e| format!("reading its offsets on the destination: {e}"))?;
    let same = target.elements().iter().all(|t| {
        current.iter().any(|c| {
            c.topic == t.topic()
                && c.partition == t.partition()
                && c.error.is_none()
                && c.offset.map(Offset::Offset) == Some(t.offset())
        })
    });
    if same {
        return Ok(GroupOutcome::Unchanged);
    }
    alter_group_offsets(destination.admin.inner(), group, &target, TIMEOUT)
        .map_err(|e| format!("committing its offsets on the destination: {e}"))?;
    Ok(GroupOutcome::Synced)
}

/// Syncs the groups of the mirror over the partitions of its mirrored topics that are not
/// failed over (or, with `only`, over those partitions of that one topic — the final sync of a
/// failover). A partition past its final sync may be written and consumed on the new primary:
/// its groups are never moved again. Each group that fails counts in
/// `kmirror_operator_group_sync_failures_total`; the part fails when one did.
pub async fn sync(
    scope: &MirrorScope,
    metrics: &Metrics,
    topics: &[Mirrored],
    only: Option<(&MirrorTopic, &[i32])>,
) -> PartResult {
    let plans = match only {
        Some((t, partitions)) => plans(&scope.cache, &[t], |p, _| partitions.contains(&p)),
        None => {
            let chosen: Vec<&MirrorTopic> = topics
                .iter()
                .filter(|t| !t.stopped)
                .map(|t| &t.topic)
                .collect();
            plans(&scope.cache, &chosen, |_, r| !super::failed_over(r))
        }
    };
    if plans.is_empty() {
        return Ok("no mirrored topics to sync groups for".into());
    }
    let groups = &scope.mirror.spec.sync.consumer_groups;
    let selector = Selector::compile(
        &groups.include,
        &groups.exclude,
        "spec.sync.consumerGroups",
        true,
    )
    .map_err(|e| Cause::Invalid(e.to_string()))?;
    let (s, d) = (scope.source.clone(), scope.destination.clone());
    let report = tokio::task::spawn_blocking(move || sync_blocking(&s, &d, &selector, &plans))
        .await
        .map_err(|e| scope.source.error(e))?
        .map_err(|message| KafkaError {
            cluster: "source",
            message,
        })?;
    if !report.synced.is_empty() {
        tracing::info!(groups = ?report.synced, "synced consumer-group offsets");
    }
    let (namespace, name) = crate::metrics::split_key(&scope.key);
    for (group, _) in &report.failed {
        metrics
            .group_sync_failures
            .get_or_create(&GroupLabels {
                namespace: namespace.clone(),
                name: name.clone(),
                group: group.clone(),
            })
            .inc();
    }
    match report.failure() {
        Some(message) => Err(Cause::Kafka(KafkaError {
            cluster: "destination",
            message,
        })),
        None => Ok(report.summary()),
    }
}

/// The last group-offset sync of `partitions` of a topic being failed over (skipped when
/// disabled).
pub async fn final_sync(
    scope: &MirrorScope,
    metrics: &Metrics,
    mt: &MirrorTopic,
    partitions: &[i32],
) -> Result<(), Cause> {
    if !scope.mirror.spec.sync.consumer_groups.enabled {
        return Ok(());
    }
    sync(scope, metrics, &[], Some((mt, partitions)))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_past_its_final_sync_is_never_synced_again() {
        use kmirror_crds::v1alpha1::PartitionState::*;
        use kmirror_state::records::PartitionStateRecord;
        let at = |state, final_sync_done| PartitionRecords {
            state: Some(PartitionStateRecord {
                state,
                final_sync_done,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!super::super::failed_over(&PartitionRecords::default()));
        assert!(!super::super::failed_over(&at(Mirroring, false)));
        assert!(
            !super::super::failed_over(&at(Stopping, false)),
            "draining: still synced"
        );
        assert!(
            super::super::failed_over(&at(Stopping, true)),
            "may become writable any moment"
        );
        assert!(super::super::failed_over(&at(Stopped, false)));
    }

    #[test]
    fn summary_names_skipped_groups() {
        let mut r = GroupReport {
            synced: vec!["a".into()],
            unchanged: 2,
            active: vec!["busy".into()],
            failed: Vec::new(),
        };
        assert_eq!(
            r.summary(),
            "1 groups synced, 2 unchanged, 1 skipped (active members on the destination: busy)"
        );
        assert_eq!(r.failure(), None);
        r.failed = vec![
            (
                "pay".into(),
                "reading its offsets on the source: timed out".into(),
            ),
            (
                "ship".into(),
                "describing it on the destination: timed out".into(),
            ),
        ];
        assert_eq!(
            r.failure().as_deref(),
            Some(
                "2 of 6 groups failed; group pay: reading its offsets on the source: timed out \
                 (and 1 more groups)"
            )
        );
    }
}
