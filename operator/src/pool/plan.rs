//! The pool's plan: from its topics' demand and the pods that exist, which pool pods to delete
//! and which to create. Pure.
//!
//! Every wanted unit goes to the pod rendezvous hashing picks (`kmirror_state::pool`). A pod
//! whose units (or anything else it runs) differ from its assignment is deleted — its fetcher
//! stops cleanly, writes its last positions and releases its write leases — and created again
//! with the new assignment only once no other pod lists any of its units: a unit changes pods
//! through the same stop → fence → start as a restart, one writer at a time (the write leases
//! fence a pod that outlives its object).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::ClusterMirror;
use kmirror_state::leases::LeaseUnit;
use kmirror_state::pool::assign;

use super::demand::MirrorDemand;
use super::pod::{PoolPod, Units};
use crate::rollout::plan::Candidate;

/// A pool pod as the pool sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Existing {
    /// Pool index.
    pub index: u32,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// What it runs (annotation).
    pub hash: String,
    /// Its units: source topic → partitions.
    pub units: BTreeMap<String, BTreeSet<i32>>,
    /// Being deleted.
    pub terminating: bool,
    /// Its process ended.
    pub exited: bool,
    /// Hash of the operator that made it (empty: one from before rollouts).
    pub operator: String,
}

/// What the plan is made from.
pub struct Input<'a> {
    /// The mirror.
    pub mirror: &'a ClusterMirror,
    /// Pods in the pool (`None`: the mirror has no pool any more: every pool pod goes).
    pub pods: Option<u32>,
    /// Its topics' demand.
    pub demand: &'a MirrorDemand,
    /// The pool pods that exist.
    pub existing: &'a [Existing],
    /// Units a fetcher outside the pool still runs (a per-topic pod from before the pool).
    pub held_elsewhere: &'a BTreeSet<LeaseUnit>,
    /// Image when the mirror sets none.
    pub default_image: &'a str,
    /// Hash of this operator's side of fetcher pods ([`crate::rollout`]).
    pub operator_template: &'a str,
    /// UIDs of the pods the mirror's rollout replaces now.
    pub rollout_admitted: &'a BTreeSet<String>,
}

/// What to do.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Pods to delete: name and UID.
    pub delete: Vec<(String, String)>,
    /// Pods to create.
    pub create: Vec<Pod>,
    /// Every wanted unit by pool index.
    pub assignment: BTreeMap<u32, Units>,
    /// Pods that wait, and for what.
    pub waiting: Vec<String>,
    /// Pods outdated only because another operator made them: the rollout's to replace (they
    /// are in `delete` only once it admitted them).
    pub rollout: Vec<Candidate>,
}

/// The units of every topic that wants a fetcher, by pool index.
pub fn assignment(demand: &MirrorDemand, pods: u32) -> BTreeMap<u32, Units> {
    let mut destinations: BTreeMap<&str, &str> = BTreeMap::new();
    let mut units: Vec<LeaseUnit> = Vec::new();
    for t in demand.topics.values() {
        destinations.insert(&t.source_topic, &t.destination_topic);
        units.extend(t.wanted.iter().map(|p| LeaseUnit::new(&t.source_topic, *p)));
    }
    assign(&units, pods)
        .into_iter()
        .map(|(index, units)| {
            let mut by_topic: Units = BTreeMap::new();
            for u in units {
                let destination = destinations[u.topic.as_str()].to_string();
                by_topic
                    .entry(u.topic.clone())
                    .or_insert_with(|| (destination, BTreeSet::new()))
                    .1
                    .insert(u.partition);
            }
            (index, by_topic)
        })
        .collect()
}

/// The plan.
pub fn plan(input: &Input<'_>) -> Plan {
    let demand = input.demand;
    let assignment = input
        .pods
        .map(|n| assignment(demand, n))
        .unwrap_or_default();
    fn build<'a>(input: &Input<'a>, index: u32, units: &'a Units) -> PoolPod<'a> {
        PoolPod {
            mirror: input.mirror,
            index,
            units,
            default_image: input.default_image,
            secrets_version: &input.demand.secrets_version,
        }
    }
    let restart: BTreeSet<(&str, i32, &str)> = demand
        .topics
        .values()
        .flat_map(|t| {
            t.restart
                .iter()
                .map(|(p, uid)| (t.source_topic.as_str(), *p, uid.as_str()))
        })
        .collect();
    let mut out = Plan::default();
    for pod in input.existing.iter().filter(|p| !p.terminating) {
        let stale = match assignment.get(&pod.index) {
            None => true,
            Some(units) => {
                let must = pod.exited
                    || pod.units.iter().any(|(topic, ps)| {
                        ps.iter()
                            .any(|p| restart.contains(&(topic.as_str(), *p, pod.uid.as_str())))
                    })
                    || pod.units.len() != units.len()
                    || units
                        .iter()
                        .any(|(topic, (_, ps))| pod.units.get(topic) != Some(ps));
                let outdated = pod.hash != build(input, pod.index, units).hash();
                if !must && outdated && pod.operator != input.operator_template {
                    // Outdated only because another operator made it: the rollout's.
                    out.rollout.push(Candidate {
                        name: pod.name.clone(),
                        uid: pod.uid.clone(),
                        units: pod
                            .units
                            .iter()
                            .flat_map(|(t, ps)| ps.iter().map(move |p| LeaseUnit::new(t, *p)))
                            .collect(),
                    });
                    input.rollout_admitted.contains(&pod.uid)
                } else {
                    must || outdated
                }
            }
        };
        if stale {
            out.delete.push((pod.name.clone(), pod.uid.clone()));
        }
    }
    for (index, units) in &assignment {
        if input.existing.iter().any(|p| p.index == *index) {
            continue;
        }
        let elsewhere = |topic: &str, p: i32| {
            input.held_elsewhere.contains(&LeaseUnit::new(topic, p))
                || input.existing.iter().any(|e| {
                    e.index != *index && e.units.get(topic).is_some_and(|ps| ps.contains(&p))
                })
        };
        let held: Vec<String> = units
            .iter()
            .flat_map(|(topic, (_, ps))| {
                ps.iter()
                    .filter(|p| elsewhere(topic, **p))
                    .map(move |p| format!("{topic}[{p}]"))
            })
            .collect();
        if held.is_empty() {
            let mut pod = build(input, *index, units).build();
            crate::rollout::stamp(&mut pod, input.operator_template);
            out.create.push(pod);
        } else {
            out.waiting.push(format!(
                "pool pod {index} waits for the pods that still run {}",
                held.join(", ")
            ));
        }
    }
    out.assignment = assignment;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::demand::TopicDemand;
    use crate::pool::pod::pool_pod_name;
    use kube::ResourceExt;

    fn mirror() -> ClusterMirror {
        let mut cm: ClusterMirror = serde_json::from_value(serde_json::json!({
            "apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
            "metadata": {"name": "dr", "namespace": "ns"},
            "spec": {
                "source": {"bootstrapServers": "src:9092"},
                "destination": {"bootstrapServers": "dst:9092"},
                "fetcher": {"pool": {"pods": 3}}
            }
        }))
        .unwrap();
        cm.metadata.uid = Some("cm-uid".into());
        cm
    }

    fn demand(topics: &[(&str, i32)]) -> MirrorDemand {
        MirrorDemand {
            topics: topics
                .iter()
                .map(|(t, n)| {
                    let d = TopicDemand {
                        source_topic: t.to_string(),
                        destination_topic: t.to_string(),
                        wanted: (0..*n).collect(),
                        restart: BTreeMap::new(),
                    };
                    (t.to_string(), d)
                })
                .collect(),
            secrets_version: "s".into(),
            ..Default::default()
        }
    }

    /// The pods a plan's creations become once they run.
    fn running(cm: &ClusterMirror, d: &MirrorDemand, pods: u32) -> Vec<Existing> {
        assignment(d, pods)
            .into_iter()
            .map(|(index, units)| Existing {
                index,
                name: pool_pod_name("dr", index),
                uid: format!("uid-{index}"),
                hash: PoolPod {
                    mirror: cm,
                    index,
                    units: &units,
                    default_image: "img",
                    secrets_version: "s",
                }
                .hash(),
                units: units.into_iter().map(|(t, (_, ps))| (t, ps)).collect(),
                ..Default::default()
            })
            .collect()
    }

    fn plan_of(
        cm: &ClusterMirror,
        d: &MirrorDemand,
        pods: Option<u32>,
        existing: &[Existing],
    ) -> Plan {
        plan(&Input {
            mirror: cm,
            pods,
            demand: d,
            existing,
            held_elsewhere: &BTreeSet::new(),
            default_image: "img",
            operator_template: "",
            rollout_admitted: &BTreeSet::new(),
        })
    }

    #[test]
    fn a_new_pool_creates_a_pod_per_index_with_units_and_then_rests() {
        let cm = mirror();
        // Slices of 16 partitions: 12 of them.
        let d = demand(&[("a", 64), ("b", 64), ("c", 64)]);
        let p = plan_of(&cm, &d, Some(3), &[]);
        assert!(p.delete.is_empty());
        let names: Vec<String> = p.create.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["dr-pool-0", "dr-pool-1", "dr-pool-2"]);
        let units: usize = p
            .assignment
            .values()
            .flat_map(|u| u.values().map(|(_, ps)| ps.len()))
            .sum();
        assert_eq!(units, 192, "every unit once");
        let now = running(&cm, &d, 3);
        let again = plan_of(&cm, &d, Some(3), &now);
        assert!(
            again.delete.is_empty() && again.create.is_empty(),
            "{again:?}"
        );
    }

    #[test]
    fn a_new_topic_replaces_only_the_pods_it_lands_on_and_moves_nothing() {
        let cm = mirror();
        let before = demand(&[("a", 10), ("b", 10)]);
        let now = running(&cm, &before, 3);
        let after = demand(&[("a", 10), ("b", 10), ("c", 1)]);
        let p = plan_of(&cm, &after, Some(3), &now);
        assert_eq!(
            p.delete.len(),
            1,
            "only the pod that gets c[0]: {:?}",
            p.delete
        );
        for e in &now {
            for (topic, ps) in &e.units {
                assert_eq!(
                    &p.assignment[&e.index][topic].1, ps,
                    "pod {} keeps its units",
                    e.index
                );
            }
        }
    }

    #[test]
    fn growing_the_pool_starts_the_new_pod_only_after_its_units_left_their_old_pods() {
        let cm = mirror();
        let d = demand(&[("a", 160)]);
        let now = running(&cm, &d, 3);
        let p = plan_of(&cm, &d, Some(4), &now);
        let moved: BTreeSet<i32> = p.assignment[&3]["a"].1.clone();
        assert!(!moved.is_empty());
        // Exactly the pods that lose units are replaced; the new one waits for them.
        let losing: BTreeSet<String> = now
            .iter()
            .filter(|e| e.units["a"].iter().any(|u| moved.contains(u)))
            .map(|e| e.name.clone())
            .collect();
        let deleted: BTreeSet<String> = p.delete.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(deleted, losing);
        assert!(p.create.is_empty(), "the new pod waits: {:?}", p.waiting);
        assert!(p.waiting[0].starts_with("pool pod 3 waits"));
        // Once they are gone, it starts, as do their replacements.
        let left: Vec<Existing> = now
            .into_iter()
            .filter(|e| !losing.contains(&e.name))
            .collect();
        let p = plan_of(&cm, &d, Some(4), &left);
        assert!(p.delete.is_empty());
        assert_eq!(p.create.len(), losing.len() + 1);
    }

    #[test]
    fn terminating_pods_and_fetchers_outside_the_pool_hold_their_units() {
        let cm = mirror();
        let d = demand(&[("a", 64)]);
        let mut now = running(&cm, &d, 2);
        // Pod 1 is being deleted: its replacement waits for it to be gone.
        now[1].terminating = true;
        let held_by_1 = now[1].clone();
        let p = plan_of(&cm, &d, Some(2), &now[..1]);
        assert_eq!(p.create.len(), 1, "pod 1 is gone: created");
        let p = plan_of(&cm, &d, Some(2), &now);
        assert!(p.create.is_empty() && p.delete.is_empty(), "{p:?}");
        // A per-topic pod still runs a unit of pod 1.
        let unit = held_by_1.units["a"].iter().next().copied().unwrap();
        let elsewhere = BTreeSet::from([LeaseUnit::new("a", unit)]);
        let p = plan(&Input {
            mirror: &cm,
            pods: Some(2),
            demand: &d,
            existing: &now[..1],
            held_elsewhere: &elsewhere,
            default_image: "img",
            operator_template: "",
            rollout_admitted: &BTreeSet::new(),
        });
        assert!(p.create.is_empty());
        assert!(
            p.waiting[0].contains(&format!("a[{unit}]")),
            "{:?}",
            p.waiting
        );
    }

    #[test]
    fn exits_restarts_and_a_removed_pool_delete_pods() {
        let cm = mirror();
        let mut d = demand(&[("a", 64)]);
        let mut now = running(&cm, &d, 2);
        now[0].exited = true;
        let p = plan_of(&cm, &d, Some(2), &now);
        assert_eq!(p.delete, [(now[0].name.clone(), now[0].uid.clone())]);
        now[0].exited = false;
        // A unit whose copy ended inside pod 1 restarts pod 1 — only that pod instance.
        let unit = now[1].units["a"].iter().next().copied().unwrap();
        d.topics.get_mut("a").unwrap().restart = BTreeMap::from([(unit, "uid-1".to_string())]);
        let p = plan_of(&cm, &d, Some(2), &now);
        assert_eq!(p.delete, [(now[1].name.clone(), "uid-1".to_string())]);
        d.topics.get_mut("a").unwrap().restart = BTreeMap::from([(unit, "older".to_string())]);
        assert!(plan_of(&cm, &d, Some(2), &now).delete.is_empty());
        // No pool any more: every pool pod goes, none is created.
        let p = plan_of(&cm, &d, None, &now);
        assert_eq!(p.delete.len(), 2);
        assert!(p.create.is_empty());
        // Nothing wanted: the pods go.
        let none = demand(&[("a", 0)]);
        assert_eq!(plan_of(&cm, &none, Some(2), &now).delete.len(), 2);
    }

    #[test]
    fn pool_pods_of_another_operator_wait_for_the_rollout() {
        let cm = mirror();
        let d = demand(&[("a", 64)]);
        let mut now = running(&cm, &d, 2);
        for e in &mut now {
            e.hash = "older".into();
            e.operator = "older".into();
        }
        let with = |existing: &[Existing], admitted: &BTreeSet<String>| {
            plan(&Input {
                mirror: &cm,
                pods: Some(2),
                demand: &d,
                existing,
                held_elsewhere: &BTreeSet::new(),
                default_image: "img",
                operator_template: "this",
                rollout_admitted: admitted,
            })
        };
        let p = with(&now, &BTreeSet::new());
        assert!(p.delete.is_empty() && p.create.is_empty(), "{p:?}");
        let names: Vec<&str> = p.rollout.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["dr-pool-0", "dr-pool-1"]);
        assert_eq!(
            p.rollout[0].units.len(),
            now[0].units["a"].len(),
            "its partitions"
        );
        let p = with(&now, &BTreeSet::from(["uid-1".to_string()]));
        assert_eq!(p.delete, [("dr-pool-1".to_string(), "uid-1".to_string())]);
        // Gone: created again at once, with this operator's mark.
        let p = with(&now[..1], &BTreeSet::new());
        assert_eq!(p.create.len(), 1);
        assert_eq!(
            p.create[0].annotations()[crate::rollout::ANNOTATION_OPERATOR],
            "this"
        );
        // A pod whose units change (another pool size) goes at once.
        now[0].units.get_mut("a").unwrap().insert(1_000);
        let p = with(&now, &BTreeSet::new());
        assert_eq!(p.delete, [(now[0].name.clone(), now[0].uid.clone())]);
    }
}
