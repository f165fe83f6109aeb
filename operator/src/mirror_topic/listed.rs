//! Which partitions a `MirrorTopic`'s status lists when the topic has more than the operator
//! lists (`--status-max-partitions`): the worst first, so that what needs a person is always
//! in the object; the counts cover every partition. Pure.

use std::cmp::Reverse;

use kmirror_crds::v1alpha1::{DesiredState, MirrorTopicStatus, PartitionState, PartitionStatus};

use crate::lifecycle::settled_state;

/// Default of `--status-max-partitions`. One listed partition is at most about 1.9 KiB of the
/// object: its status entry with every field at its largest (a 320-character error, a
/// divergence into a 249-character quarantine topic, an open transaction, 19-digit offsets)
/// about 1.3 KiB, plus its entry in the server-side apply `managedFields` about 0.5 KiB
/// (measured in `one_entry_is_small`; a MIRRORING partition's entry is about a quarter of
/// that). 100 entries at their largest are about 185 KiB, an eighth of what etcd takes for one
/// object (1.5 MiB), leaving the rest for conditions, configs not copied and metadata.
pub const DEFAULT_MAX_PARTITIONS: usize = 100;

/// How bad a partition looks (smaller is worse): FAILED; then on its way to another state
/// (PREPARING, STOPPING, PAUSING, UNKNOWN, or MIRRORING in a topic failing over); then settled
/// with an error (e.g. a fetcher that stopped reporting); then settled, by highest lag.
fn badness(p: &PartitionStatus, settled: PartitionState) -> (u8, Reverse<i64>, i32) {
    let class = if p.state == PartitionState::Failed {
        0
    } else if p.state != settled {
        1
    } else if p.last_error.is_some() {
        2
    } else {
        3
    };
    (class, Reverse(p.lag.unwrap_or(0)), p.partition)
}

/// The `max` worst of `partitions` for a topic whose `spec.state` is `desired`, in partition
/// order, and how many are left out.
pub fn worst(
    mut partitions: Vec<PartitionStatus>,
    desired: DesiredState,
    max: usize,
) -> (Vec<PartitionStatus>, usize) {
    if partitions.len() <= max {
        return (partitions, 0);
    }
    let settled = settled_state(desired);
    partitions.sort_by_key(|p| badness(p, settled));
    let omitted = partitions.len() - max;
    partitions.truncate(max);
    partitions.sort_by_key(|p| p.partition);
    (partitions, omitted)
}

/// `status` with at most `max` partitions listed (the worst ones) and `partitionsOmitted`
/// saying how many more there are; a status listing no more than `max` is returned as it is.
pub fn bounded(
    mut status: MirrorTopicStatus,
    desired: DesiredState,
    max: usize,
) -> MirrorTopicStatus {
    let (listed, omitted) = worst(std::mem::take(&mut status.partitions), desired, max);
    status.partitions = listed;
    status.partitions_omitted += i32::try_from(omitted).unwrap_or(i32::MAX);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use PartitionState::*;
    use kmirror_crds::v1alpha1::{DivergenceStatus, OpenTransactionStatus, PartitionCounts};

    fn p(partition: i32, state: PartitionState, lag: Option<i64>) -> PartitionStatus {
        PartitionStatus {
            partition,
            state,
            lag,
            ..Default::default()
        }
    }

    fn numbers(listed: &[PartitionStatus]) -> Vec<i32> {
        listed.iter().map(|p| p.partition).collect()
    }

    #[test]
    fn the_worst_partitions_are_listed() {
        let erring = PartitionStatus {
            last_error: Some("lag unknown: the fetcher has not reported its position".into()),
            ..p(9, Mirroring, None)
        };
        type Row<'a> = (
            &'a str,
            DesiredState,
            Vec<PartitionStatus>,
            usize,
            Vec<i32>,
            usize,
        );
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // name, spec.state, partitions, max, listed (in partition order), omitted
            ("at the limit: all, as they are", DesiredState::Mirroring,
             vec![p(1, Mirroring, Some(0)), p(0, Failed, None)], 2, vec![1, 0], 0),
            ("under the limit", DesiredState::Mirroring,
             vec![p(0, Mirroring, Some(0))], 100, vec![0], 0),
            ("mirroring by highest lag, ties by number", DesiredState::Mirroring,
             vec![p(0, Mirroring, Some(5)), p(1, Mirroring, Some(50)), p(2, Mirroring, Some(5)),
                  p(3, Mirroring, Some(7)), p(4, Mirroring, None)], 3, vec![0, 1, 3], 2),
            ("failed first, then on their way, then by lag", DesiredState::Mirroring,
             vec![p(0, Mirroring, Some(900)), p(1, Preparing, None), p(2, Mirroring, Some(3)),
                  p(3, Failed, Some(0)), p(4, Stopping, None), p(5, Mirroring, Some(1))],
             4, vec![0, 1, 3, 4], 2),
            ("a failed one is listed even with the least lag", DesiredState::Mirroring,
             vec![p(0, Mirroring, Some(10)), p(1, Mirroring, Some(10)), p(2, Failed, Some(0))],
             1, vec![2], 2),
            ("more failed than the limit: the lowest numbers", DesiredState::Mirroring,
             vec![p(3, Failed, None), p(1, Failed, None), p(2, Failed, None), p(0, Mirroring, Some(9))],
             2, vec![1, 2], 2),
            ("an error before lag among mirroring ones", DesiredState::Mirroring,
             vec![p(0, Mirroring, Some(100)), erring.clone()], 1, vec![9], 1),
            ("failing over: still mirroring ones before stopped ones", DesiredState::Stopped,
             vec![p(0, Stopped, Some(0)), p(1, Mirroring, Some(0)), p(2, Stopped, Some(0)),
                  p(3, Stopping, Some(4))], 2, vec![1, 3], 2),
            ("paused: a partition still pausing first", DesiredState::Paused,
             vec![p(0, Paused, Some(0)), p(1, Pausing, None), p(2, Paused, Some(0))],
             1, vec![1], 2),
        ];
        for (name, desired, partitions, max, listed, omitted) in table {
            let (got, left) = worst(partitions, desired, max);
            assert_eq!((numbers(&got), left), (listed, omitted), "{name}");
        }
    }

    #[test]
    fn a_bounded_status_keeps_its_counts_and_says_how_many_are_left_out() {
        let partitions: Vec<PartitionStatus> = (0..12)
            .map(|i| p(i, Mirroring, Some(i64::from(i))))
            .chain([p(12, Failed, None)])
            .collect();
        let counts = PartitionCounts::of(partitions.iter().map(|p| p.state));
        let status = MirrorTopicStatus {
            partition_counts: Some(counts.clone()),
            partitions_summary: Some("12/13".into()),
            max_lag: Some(11),
            partitions,
            ..Default::default()
        };
        let small = bounded(status.clone(), DesiredState::Mirroring, 13);
        assert_eq!(small, status, "at or under the limit: unchanged");
        let b = bounded(status, DesiredState::Mirroring, 5);
        assert_eq!(numbers(&b.partitions), [8, 9, 10, 11, 12]);
        assert_eq!(b.partitions_omitted, 8);
        assert_eq!(b.partition_counts, Some(counts));
        assert_eq!(
            (b.partitions_summary.as_deref(), b.max_lag),
            (Some("12/13"), Some(11))
        );
        // A status kept as it was (the topic cannot be reconciled now) stays bounded.
        let again = bounded(b.clone(), DesiredState::Mirroring, 5);
        assert_eq!(again, b);
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(json["partitionsOmitted"], 8);
        assert_eq!(json["partitionCounts"]["total"], 13);
        let listed_all = serde_json::to_value(bounded(
            MirrorTopicStatus {
                partitions: vec![p(0, Mirroring, Some(0))],
                ..Default::default()
            },
            DesiredState::Mirroring,
            5,
        ))
        .unwrap();
        assert!(
            listed_all.get("partitionsOmitted").is_none(),
            "no partitionsOmitted when every partition is listed: {listed_all}"
        );
    }

    /// The largest status entry one partition can have, and its entry in `managedFields`, stay
    /// small enough for the default.
    #[test]
    fn one_entry_is_small() {
        let worst_case = PartitionStatus {
            partition: 99_999,
            state: Failed,
            state_epoch: i64::MAX,
            source_log_end_offset: Some(i64::MAX),
            source_last_stable_offset: Some(i64::MAX),
            open_source_transaction: Some(OpenTransactionStatus {
                from_offset: i64::MAX,
                since: "2026-12-07T23:59:59.999999999Z".into(),
            }),
            destination_log_end_offset: Some(i64::MAX),
            last_mirrored_offset: Some(i64::MAX),
            lag: Some(i64::MAX),
            lag_seconds: Some(123_456.789),
            offsets_identical: Some(false),
            fetcher_pod: Some(format!("{}-fetcher-9999", "t".repeat(53))),
            retry_attempt: Some(-1),
            // human_line keeps an error to 320 characters.
            last_error: Some("e".repeat(320)),
            last_transition_time: Some("2026-12-07T23:59:59.999999999Z".into()),
            divergence: Some(DivergenceStatus {
                from_offset: i64::MAX,
                to_offset: i64::MAX,
                quarantine_topic: "q".repeat(249),
                quarantined_records: i64::MAX,
                resolution: Some("KeepAndTranslate".into()),
            }),
        };
        let entry = serde_json::to_string(&worst_case).unwrap().len();
        // Server-side apply records each owned field of each list entry in managedFields:
        // `"k:{\"partition\":N}":{".":{},"f:state":{},...}`.
        let fields = serde_json::to_value(&worst_case).unwrap();
        let managed: usize = 30
            + fields
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    k.len()
                        + 8
                        + v.as_object()
                            .map_or(0, |o| o.keys().map(|k| k.len() + 8).sum::<usize>() + 8)
                })
                .sum::<usize>();
        eprintln!("one entry: {entry} bytes, its managedFields: about {managed} bytes");
        assert!(entry + managed <= 2_000, "{entry} + {managed} bytes");
        assert!(
            DEFAULT_MAX_PARTITIONS * (entry + managed) <= 1_536 * 1024 / 8,
            "the default keeps the list within an eighth of etcd's 1.5 MiB"
        );
        let mirroring = PartitionStatus {
            partition: 999,
            state: Mirroring,
            state_epoch: 12,
            source_log_end_offset: Some(123_456_789),
            destination_log_end_offset: Some(123_456_789),
            last_mirrored_offset: Some(123_456_788),
            lag: Some(0),
            lag_seconds: Some(0.0),
            offsets_identical: Some(true),
            fetcher_pod: Some("dr-orders-fetcher-12".into()),
            last_transition_time: Some("2026-12-07T23:59:59.999Z".into()),
            ..Default::default()
        };
        let typical = serde_json::to_string(&mirroring).unwrap().len();
        eprintln!("a MIRRORING partition's entry: {typical} bytes");
        assert!(typical * 3 < entry);
    }
}
