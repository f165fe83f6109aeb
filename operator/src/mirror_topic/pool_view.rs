//! What a topic's reconcile sees of its mirror's pool pods: one view per partition, and a
//! partition's stop inside a running pool pod read from its position. Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kmirror_state::pool::start_wait;
use kmirror_state::records::{FetcherStatus, PartitionRecords};

use super::pod_view::PodView;
use crate::pool::pod::units_of;

/// How long a pool pod may run without a position of one of its partitions before that
/// partition counts as stopped, beyond the wait for its topic's turn to start
/// (`kmirror_state::pool::start_wait`): longer than a start-up takes (the first write lease is
/// waited for up to 120 s), so only a copy that ended before it recorded anything (a refusal at
/// start of a partition never mirrored) is caught — silently it would look like copying forever.
pub const FIRST_POSITION_WITHIN: Duration = Duration::from_secs(180);

/// What a reconcile of source topic `topic` sees of the pool pods at `now_ms`: per partition, the
/// pod that lists it (a pod being deleted first: nothing else may start it meanwhile), as a
/// one-partition view. A partition whose copy ended inside a running pod — its position written
/// by that very pod (its UID) with a final status — is seen as exited, with the recorded reason's
/// exit code: the other partitions of the pod copy on. So is one the pod never wrote a position
/// of within [`FIRST_POSITION_WITHIN`] of its start.
pub fn views(
    topic: &str,
    pods: &[Pod],
    records: &BTreeMap<i32, PartitionRecords>,
    now_ms: i64,
) -> BTreeMap<i32, PodView> {
    let mut out: BTreeMap<i32, PodView> = BTreeMap::new();
    for pod in pods {
        let Some(partitions) = units_of(pod).remove(topic) else {
            continue;
        };
        let base = PodView::of(pod);
        let grace = FIRST_POSITION_WITHIN + start_wait(units_of(pod).len());
        let age_ms = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| now_ms - t.0.as_millisecond());
        for p in partitions {
            if out.get(&p).is_some_and(|v| v.terminating) {
                continue;
            }
            let mut view = PodView {
                partitions: vec![p],
                ..base.clone()
            };
            if !view.terminating {
                let own = records
                    .get(&p)
                    .and_then(|r| r.position.as_ref())
                    .filter(|pos| pos.writer_uid.as_deref() == Some(base.uid.as_str()));
                match own {
                    // Its own final position says how this partition ended — also when the
                    // whole process ended (the pod's message may be about another topic).
                    Some(pos) if pos.status != FetcherStatus::Running => {
                        let code = pos.error.as_ref().map_or(0, |e| e.reason.exit_code());
                        let message = pos.error.as_ref().map(|e| e.message.clone());
                        view.exited = Some((Some(code), message));
                    }
                    None if view.exited.is_none() && age_ms > grace.as_millis() as i64 => {
                        let message = format!(
                            "pool pod {} recorded no position of partition {p} in the {}s since \
                             it started: its copy ended before it began (see the pod's log)",
                            base.name,
                            grace.as_secs()
                        );
                        view.exited = Some((None, Some(message)));
                    }
                    _ => {}
                }
            }
            out.insert(p, view);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::records::{FetcherError, PositionRecord, StopReason, now_ms};

    fn pool_pod(name: &str, uid: &str, annotation: &str, terminating: bool) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid,
                "labels": {"kmirror.io/pool": "dr", "kmirror.io/fetcher-index": "0"},
                "annotations": {"kmirror.io/units": annotation}},
            "status": {"phase": "Running", "containerStatuses": [{"name": "fetcher",
                "ready": true, "image": "i", "imageID": "", "restartCount": 0,
                "state": {"running": {}}}]}
        }))
        .unwrap();
        if terminating {
            pod.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
        }
        pod
    }

    #[test]
    fn a_topic_sees_its_partitions_in_the_pool_and_a_stop_inside_a_running_pod() {
        let pods = [
            pool_pod("dr-pool-0", "u0", "orders=0,1;pay=0", false),
            pool_pod("dr-pool-1", "u1", "orders=2", false),
            pool_pod("dr-pool-2", "u2", "orders=3", true),
            pool_pod("dr-pool-3", "u3", "orders=3", false),
        ];
        let position = |uid: &str, status, reason: Option<StopReason>| PartitionRecords {
            position: Some(PositionRecord {
                writer_uid: Some(uid.into()),
                status,
                error: reason.map(|reason| FetcherError {
                    reason,
                    message: "offset 7 was written by another client".into(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let records = BTreeMap::from([
            // Stopped inside dr-pool-0 for a foreign write: exited with its code.
            (
                0,
                position("u0", FetcherStatus::Failed, Some(StopReason::ForeignWrite)),
            ),
            // A clean stop of an earlier pod of the same name: not this pod's.
            (1, position("u-old", FetcherStatus::Stopped, None)),
            // Copying in dr-pool-1.
            (2, position("u1", FetcherStatus::Running, None)),
        ]);
        let v = views("orders", &pods, &records, now_ms());
        assert_eq!(v.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(
            v[&0].exited,
            Some((
                Some(10),
                Some("offset 7 was written by another client".into())
            ))
        );
        assert_eq!(v[&0].partitions, [0]);
        assert_eq!(v[&1].exited, None, "a record of another pod instance");
        assert_eq!(
            (v[&2].name.as_str(), v[&2].exited.clone()),
            ("dr-pool-1", None)
        );
        assert!(
            v[&3].terminating,
            "a partition still listed by a pod being deleted waits for it"
        );
        assert!(views("other", &pods, &records, now_ms()).is_empty());
        // A pod that ran three minutes without a position of orders[3]: its copy never began.
        let mut old = pool_pod("dr-pool-9", "u9", "orders=3", false);
        let started = k8s_openapi::jiff::Timestamp::from_millisecond(
            now_ms() - (FIRST_POSITION_WITHIN + start_wait(1)).as_millis() as i64 - 1000,
        )
        .unwrap();
        old.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(started),
        );
        let v = views("orders", &[old.clone()], &records, now_ms());
        let (code, message) = v[&3].exited.clone().expect("seen as ended");
        assert_eq!(code, None);
        assert!(
            message
                .unwrap()
                .contains("recorded no position of partition 3")
        );
        let young = views(
            "orders",
            &[old],
            &records,
            started.as_millisecond() + 60_000,
        );
        assert_eq!(
            young[&3].exited, None,
            "a minute after its start it may still be starting"
        );
    }
}
