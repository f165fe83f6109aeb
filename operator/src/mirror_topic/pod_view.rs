//! What a reconcile knows about the fetcher pods of a topic, and what each partition's fetcher is
//! doing. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kmirror_state::records::{FetcherStatus, PositionRecord, StopReason};
use kmirror_state::stop_line;
use kube::ResourceExt;

use crate::lifecycle::FetcherObservation;
use crate::pods::{ANNOTATION_PARTITIONS, ANNOTATION_SPEC_HASH, LABEL_INDEX, group_of};

/// One fetcher pod as a reconcile sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    /// The pod's name.
    pub name: String,
    /// The pod's UID (a replacement of the same name has another).
    pub uid: String,
    /// Partitions it serves (annotation).
    pub partitions: Vec<i32>,
    /// Hash of what it runs (annotation).
    pub hash: String,
    /// Hash of the operator that made it (annotation; empty: one from before rollouts).
    pub operator: String,
    /// Being deleted.
    pub terminating: bool,
    /// Its container is ready.
    pub ready: bool,
    /// Its container terminated: exit code (None: killed) and message.
    pub exited: Option<(Option<i32>, Option<String>)>,
}

impl PodView {
    /// The view of a pod.
    pub fn of(pod: &Pod) -> PodView {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let partitions = annotations
            .get(ANNOTATION_PARTITIONS)
            .map(|s| s.split(',').filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let container = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .next();
        let terminated = container
            .as_ref()
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.clone());
        let phase_done = matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed"));
        let exited = match terminated {
            Some(t) => Some((Some(t.exit_code), t.message.clone())),
            None if phase_done => Some((None, status.message.clone())),
            None => None,
        };
        PodView {
            name: pod.name_any(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            partitions,
            hash: annotations
                .get(ANNOTATION_SPEC_HASH)
                .cloned()
                .unwrap_or_default(),
            operator: annotations
                .get(crate::rollout::ANNOTATION_OPERATOR)
                .cloned()
                .unwrap_or_default(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            ready: container.map(|c| c.ready).unwrap_or(false),
            exited,
        }
    }

    /// The pod's group index (label), -1 when it has none.
    pub fn index_of(pod: &Pod) -> i32 {
        pod.labels()
            .get(LABEL_INDEX)
            .and_then(|i| i.parse().ok())
            .unwrap_or(-1)
    }
}

/// What the fetcher of `partition` is doing, from the pods by group index and the partition's
/// position record (`position`, to tell a stop about another partition of the same process).
pub fn fetcher_of(
    pods: &BTreeMap<i32, PodView>,
    partition: i32,
    partitions_per_pod: i32,
    position: Option<&PositionRecord>,
) -> FetcherObservation {
    match pods.get(&group_of(partition, partitions_per_pod)) {
        Some(p) if p.partitions.contains(&partition) => {
            if p.terminating {
                FetcherObservation::Terminating
            } else if let Some((code, message)) = &p.exited {
                if stopped_for_another(partition, *code, message.as_deref(), position) {
                    // For this partition the process ended cleanly: nothing is wrong with it.
                    FetcherObservation::Exited {
                        code: Some(0),
                        message: None,
                    }
                } else {
                    FetcherObservation::Exited {
                        code: *code,
                        message: message.clone(),
                    }
                }
            } else {
                FetcherObservation::Running { ready: p.ready }
            }
        }
        Some(p) if p.terminating => FetcherObservation::Terminating,
        _ => FetcherObservation::Absent,
    }
}

/// Whether a process that exited with `code` (and termination `message`) stopped for a finding
/// about another of its partitions, not about `partition`: its stop line names another
/// partition; or, without a stop line (a node that keeps no termination message), the code
/// names a finding that can be about one partition while `partition`'s position — written at
/// the stop — says it stopped cleanly. (The partition a finding is about always gets its reason
/// recorded; a stop of the whole process records one for every partition.)
fn stopped_for_another(
    partition: i32,
    code: Option<i32>,
    message: Option<&str>,
    position: Option<&PositionRecord>,
) -> bool {
    if let Some(about) = message.and_then(stop_line::partition_of) {
        return about != partition;
    }
    let finding = code
        .and_then(StopReason::from_exit_code)
        .is_some_and(StopReason::about_one_partition);
    finding && position.is_some_and(|p| p.status == FetcherStatus::Stopped && p.error.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::records::FetcherError;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_pod_is_seen_through_its_annotations_and_status() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "t-fetcher-1", "labels": {"kmirror.io/fetcher-index": "1"},
                "annotations": {"kmirror.io/partitions": "2,3", "kmirror.io/spec-hash": "abc"}},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "fetcher", "ready": false,
                "image": "i", "imageID": "", "restartCount": 0,
                "state": {"terminated": {"exitCode": 10, "message": "foreign write"}}}]}
        }));
        let v = PodView::of(&p);
        assert_eq!(PodView::index_of(&p), 1);
        assert_eq!(
            (v.name.as_str(), v.partitions.as_slice(), v.hash.as_str()),
            ("t-fetcher-1", &[2, 3][..], "abc")
        );
        assert_eq!(v.exited, Some((Some(10), Some("foreign write".into()))));
        let pods = BTreeMap::from([(1, v)]);
        assert_eq!(
            fetcher_of(&pods, 3, 2, None),
            FetcherObservation::Exited {
                code: Some(10),
                message: Some("foreign write".into())
            }
        );
        assert_eq!(fetcher_of(&pods, 0, 2, None), FetcherObservation::Absent);
    }

    #[test]
    fn a_stop_about_one_partition_is_a_clean_exit_for_the_others_of_the_pod() {
        let line = "ForeignWrite on partition 2: offset 7 was written by another client";
        let pods = BTreeMap::from([(
            1,
            PodView {
                partitions: vec![2, 3],
                exited: Some((Some(10), Some(line.into()))),
                ..Default::default()
            },
        )]);
        assert_eq!(
            fetcher_of(&pods, 2, 2, None),
            FetcherObservation::Exited {
                code: Some(10),
                message: Some(line.into())
            }
        );
        assert_eq!(
            fetcher_of(&pods, 3, 2, None),
            FetcherObservation::Exited {
                code: Some(0),
                message: None
            }
        );
    }

    #[test]
    fn without_a_stop_line_the_position_tells_who_stopped_cleanly() {
        let log_tail = "{\"level\":\"ERROR\",\"message\":\"a record landed at 51\"}";
        let pods = BTreeMap::from([(
            0,
            PodView {
                partitions: vec![0, 1],
                exited: Some((Some(10), Some(log_tail.into()))),
                ..Default::default()
            },
        )]);
        let position = |status, reason: Option<StopReason>| PositionRecord {
            status,
            error: reason.map(|reason| FetcherError {
                reason,
                message: "m".into(),
            }),
            ..Default::default()
        };
        let clean = position(FetcherStatus::Stopped, None);
        let failed = position(FetcherStatus::Failed, Some(StopReason::ForeignWrite));
        let heartbeat = position(FetcherStatus::Running, None);
        assert_eq!(
            fetcher_of(&pods, 1, 2, Some(&clean)),
            FetcherObservation::Exited {
                code: Some(0),
                message: None
            }
        );
        for (p, what) in [
            (Some(&failed), "failed"),
            (Some(&heartbeat), "not final"),
            (None, "none"),
        ] {
            assert_eq!(
                fetcher_of(&pods, 0, 2, p),
                FetcherObservation::Exited {
                    code: Some(10),
                    message: Some(log_tail.into())
                },
                "{what}: the exit code stands"
            );
        }
        // Exit code → what partition 1 (clean final position) sees. A finding that can be about
        // one partition is about another one here; a stop of the whole process keeps its code:
        // the clean position is from an earlier run (this one failed before it wrote any) — it
        // is retried with its backoff, or failed.
        for (code, seen) in [
            (16, 0),
            (18, 0),
            (1, 1),
            (11, 11),
            (12, 12),
            (19, 19),
            (20, 20),
        ] {
            let pods = BTreeMap::from([(
                0,
                PodView {
                    partitions: vec![0, 1],
                    exited: Some((Some(code), None)),
                    ..Default::default()
                },
            )]);
            assert_eq!(
                fetcher_of(&pods, 1, 2, Some(&clean)),
                FetcherObservation::Exited {
                    code: Some(seen),
                    message: None
                },
                "exit code {code}"
            );
        }
    }

    #[test]
    fn a_terminating_pod_holds_its_whole_group() {
        let pods = BTreeMap::from([(
            0,
            PodView {
                partitions: vec![0],
                terminating: true,
                ..Default::default()
            },
        )]);
        assert_eq!(
            fetcher_of(&pods, 0, 2, None),
            FetcherObservation::Terminating
        );
        assert_eq!(
            fetcher_of(&pods, 1, 2, None),
            FetcherObservation::Terminating,
            "a partition joining the group waits for the old pod to go"
        );
    }
}
