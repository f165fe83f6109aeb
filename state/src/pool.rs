//! Which pod of a fetcher pool copies which partition: rendezvous (highest random weight)
//! hashing over the pod indexes. Pure, and the same in every process: the operator computes it,
//! nothing stores it.
//!
//! Partitions go in slices: partitions `0..16` of a topic are one slice, `16..32` the next, and
//! so on ([`SLICE_PARTITIONS`]). A slice goes to the pod `i` of `0..pods` whose weight
//! `hash(slice, i)` is highest. So a partition's pod depends only on its slice and the pod
//! count: adding or removing a topic moves no other partition, growing the pool moves only
//! slices to the new pod (about `1/pods` of them), and shrinking it moves only the slices of the
//! removed pod. A pool process runs a copy thread (and its clients) per topic it holds a slice
//! of: whole slices keep that to about `topics / pods` threads per pod, where partitions hashed
//! one by one would put a slice of nearly every topic on every pod.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::leases::LeaseUnit;

/// Topics a pool process starts at once (connecting, settling, waiting for their write leases):
/// dozens of topics opening their clients in the same second swamp a destination.
pub const START_CONCURRENCY: usize = 4;

/// How long one topic of a pool process counts as starting at most; then the next one starts
/// anyway.
pub const START_SLOT: Duration = Duration::from_secs(30);

/// How long the last of `topics` topics of a pool process may wait for its turn to start.
pub fn start_wait(topics: usize) -> Duration {
    START_SLOT * topics.div_ceil(START_CONCURRENCY) as u32
}

/// Consecutive partitions of a topic that one pool pod copies together.
pub const SLICE_PARTITIONS: i32 = 16;

/// The pool pod (index in `0..pods`) that copies `unit`; `None` for an empty pool.
pub fn pod_of(unit: &LeaseUnit, pods: u32) -> Option<u32> {
    let key = unit_key(unit);
    (0..pods).max_by_key(|&i| (weight(key, i), std::cmp::Reverse(i)))
}

/// Every unit of `units` by the pod that copies it (pods without units are left out).
pub fn assign<'a>(
    units: impl IntoIterator<Item = &'a LeaseUnit>,
    pods: u32,
) -> BTreeMap<u32, Vec<LeaseUnit>> {
    let mut by_pod: BTreeMap<u32, Vec<LeaseUnit>> = BTreeMap::new();
    for unit in units {
        if let Some(pod) = pod_of(unit, pods) {
            by_pod.entry(pod).or_default().push(unit.clone());
        }
    }
    by_pod
}

/// A stable 64-bit key of the unit's slice: FNV-1a over the topic's bytes, a separator no
/// topic name holds, and the slice number.
fn unit_key(unit: &LeaseUnit) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let slice = unit.partition.max(0) / SLICE_PARTITIONS;
    let bytes = unit.topic.bytes().chain([0u8]).chain(slice.to_be_bytes());
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The weight of pod `pod` for a unit: the key and the pod index mixed (SplitMix64's
/// finalizer), so that every bit of both spreads over the result.
fn weight(key: u64, pod: u32) -> u64 {
    mix(key ^ mix(u64::from(pod).wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(topics: std::ops::Range<u32>, partitions: i32) -> Vec<LeaseUnit> {
        topics
            .flat_map(|t| (0..partitions).map(move |p| LeaseUnit::new(format!("topic-{t}"), p)))
            .collect()
    }

    fn pods_of(units: &[LeaseUnit], pods: u32) -> Vec<Option<u32>> {
        units.iter().map(|u| pod_of(u, pods)).collect()
    }

    #[test]
    fn an_empty_pool_copies_nothing_and_a_single_pod_everything() {
        let u = LeaseUnit::new("orders", 3);
        assert_eq!(pod_of(&u, 0), None);
        assert_eq!(pod_of(&u, 1), Some(0));
        assert!(assign(&units(0..3, 4), 0).is_empty());
    }

    #[test]
    fn the_pool_spreads_slices_evenly() {
        // 500 topics x 10 partitions, the scale run's shape: 500 slices.
        let all = units(0..500, 10);
        for pods in [2u32, 3, 5, 8, 13] {
            let by_pod = assign(&all, pods);
            assert_eq!(by_pod.len(), pods as usize, "every pod gets units");
            let mean = all.len() as f64 / f64::from(pods);
            for (pod, got) in &by_pod {
                let off = (got.len() as f64 - mean).abs() / mean;
                assert!(
                    off < 0.3,
                    "{pods} pods: pod {pod} has {} of mean {mean}",
                    got.len()
                );
            }
            let total: usize = by_pod.values().map(Vec::len).sum();
            assert_eq!(total, all.len(), "each unit on exactly one pod");
            // A topic of 10 partitions is one slice: on one pod.
            for topic in 0..500 {
                let pods_of_topic: std::collections::BTreeSet<_> = all[topic * 10..topic * 10 + 10]
                    .iter()
                    .map(|u| pod_of(u, pods))
                    .collect();
                assert_eq!(pods_of_topic.len(), 1, "topic-{topic} on one pod");
            }
        }
        // A topic of many partitions spreads in slices of 16, not all onto one pod.
        let big = units(0..1, 128);
        let by_pod = assign(&big, 4);
        assert!(by_pod.len() >= 3, "{:?}", by_pod.keys());
        for slice in big.chunks(SLICE_PARTITIONS as usize) {
            let pods: std::collections::BTreeSet<_> = slice.iter().map(|u| pod_of(u, 4)).collect();
            assert_eq!(pods.len(), 1, "a slice stays together");
        }
    }

    #[test]
    fn adding_or_removing_a_topic_moves_no_other_unit() {
        let before = units(0..200, 10);
        let mut after = before.clone();
        after.extend(units(200..210, 10));
        for pods in [3u32, 7] {
            assert_eq!(
                pods_of(&before, pods),
                pods_of(&after[..before.len()], pods)
            );
        }
    }

    #[test]
    fn growing_the_pool_moves_only_units_to_the_new_pod_and_about_their_share() {
        let all = units(0..500, 10);
        for pods in [1u32, 2, 4, 9] {
            let (a, b) = (pods_of(&all, pods), pods_of(&all, pods + 1));
            let moved: Vec<_> = a.iter().zip(&b).filter(|(x, y)| x != y).collect();
            assert!(
                moved.iter().all(|(_, to)| **to == Some(pods)),
                "{pods} -> {}: a unit moved between old pods",
                pods + 1
            );
            let share = moved.len() as f64 / all.len() as f64;
            let expect = 1.0 / f64::from(pods + 1);
            assert!(
                (share - expect).abs() < expect * 0.3,
                "{pods} -> {}: {share} moved, about {expect} expected",
                pods + 1
            );
        }
    }

    #[test]
    fn shrinking_the_pool_moves_only_the_removed_pods_units() {
        let all = units(0..300, 10);
        for pods in [2u32, 5, 8] {
            let (a, b) = (pods_of(&all, pods), pods_of(&all, pods - 1));
            for (x, y) in a.iter().zip(&b) {
                if x != y {
                    assert_eq!(*x, Some(pods - 1), "only the last pod's units move");
                }
            }
        }
    }

    #[test]
    fn the_assignment_does_not_change_between_versions() {
        // Pinned: an operator upgrade must not move units (each move is a stop and a start).
        let got: Vec<Option<u32>> = [("orders", 0), ("orders", 16), ("payments", 7), ("", 0)]
            .iter()
            .map(|(t, p)| pod_of(&LeaseUnit::new(*t, *p), 16))
            .collect();
        assert_eq!(got, PINNED.to_vec());
    }

    const PINNED: [Option<u32>; 4] = [Some(15), Some(12), Some(8), Some(8)];
}
