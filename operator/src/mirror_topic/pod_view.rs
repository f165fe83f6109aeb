//! What a reconcile knows about the fetcher pods of a topic, and what each partition's fetcher is
//! doing. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
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

/// What the fetcher of `partition` is doing, from the pods by group index.
pub fn fetcher_of(
    pods: &BTreeMap<i32, PodView>,
    partition: i32,
    partitions_per_pod: i32,
) -> FetcherObservation {
    match pods.get(&group_of(partition, partitions_per_pod)) {
        Some(p) if p.partitions.contains(&partition) => {
            if p.terminating {
                FetcherObservation::Terminating
            } else if let Some((code, message)) = &p.exited {
                FetcherObservation::Exited {
                    code: *code,
                    message: message.clone(),
                }
            } else {
                FetcherObservation::Running { ready: p.ready }
            }
        }
        Some(p) if p.terminating => FetcherObservation::Terminating,
        _ => FetcherObservation::Absent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            fetcher_of(&pods, 3, 2),
            FetcherObservation::Exited {
                code: Some(10),
                message: Some("foreign write".into())
            }
        );
        assert_eq!(fetcher_of(&pods, 0, 2), FetcherObservation::Absent);
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
        assert_eq!(fetcher_of(&pods, 0, 2), FetcherObservation::Terminating);
        assert_eq!(
            fetcher_of(&pods, 1, 2),
            FetcherObservation::Terminating,
            "a partition joining the group waits for the old pod to go"
        );
    }
}
