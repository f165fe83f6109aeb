//! Pool pods: their names, the units annotation, the pod built for an assignment, and what a
//! topic's reconcile sees of them (one view per partition). Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::ClusterMirror;
use kmirror_state::records::{FetcherStatus, PartitionRecords};
use kube::{Resource, ResourceExt};

use kmirror_state::pool::start_wait;

use crate::mirror_topic::pod_view::PodView;
use crate::pods::{
    ANNOTATION_SPEC_HASH, LABEL_INDEX, PodParts, fetcher_args, fetcher_pod, fnv1a, label_value,
    run_hash,
};

/// Label on pool pods naming their `ClusterMirror` (pods of per-topic fetchers have none).
pub const LABEL_POOL: &str = "kmirror.io/pool";
/// Annotation listing a pool pod's units: `topic=0,1;other=3` (Kafka topic names hold neither
/// `;` nor `=`).
pub const ANNOTATION_UNITS: &str = "kmirror.io/units";

/// A pool pod's units: source topic → (destination topic, partitions).
pub type Units = BTreeMap<String, (String, BTreeSet<i32>)>;

/// Name of pool pod `index` of mirror `mirror`.
pub fn pool_pod_name(mirror: &str, index: u32) -> String {
    let suffix = format!("-pool-{index}");
    let max = 63 - suffix.len();
    if mirror.len() <= max {
        format!("{mirror}{suffix}")
    } else {
        let hash = format!("{:08x}", fnv1a(mirror.as_bytes()) as u32);
        let keep = max - hash.len() - 1;
        format!("{}-{hash}{suffix}", mirror[..keep].trim_end_matches('-'))
    }
}

/// The units annotation of `units` (source topics and partitions; destinations are in the
/// arguments).
pub fn encode_units(units: &Units) -> String {
    units
        .iter()
        .map(|(topic, (_, partitions))| {
            let ps: Vec<String> = partitions.iter().map(ToString::to_string).collect();
            format!("{topic}={}", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// The units of a pod's annotation: source topic → partitions.
pub fn decode_units(text: &str) -> BTreeMap<String, BTreeSet<i32>> {
    text.split(';')
        .filter_map(|part| {
            let (topic, partitions) = part.split_once('=')?;
            let ps = partitions
                .split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect();
            Some((topic.to_string(), ps))
        })
        .collect()
}

/// The units a pod lists (none for a pod without the annotation).
pub fn units_of(pod: &Pod) -> BTreeMap<String, BTreeSet<i32>> {
    pod.annotations()
        .get(ANNOTATION_UNITS)
        .map(|t| decode_units(t))
        .unwrap_or_default()
}

/// The pool index of a pool pod (`None`: not one).
pub fn index_of(pod: &Pod) -> Option<u32> {
    pod.labels().get(LABEL_POOL)?;
    pod.labels().get(LABEL_INDEX)?.parse().ok()
}

/// Everything a pool pod is built from.
pub struct PoolPod<'a> {
    /// The mirror.
    pub mirror: &'a ClusterMirror,
    /// Pool index.
    pub index: u32,
    /// Its units.
    pub units: &'a Units,
    /// Image when the mirror sets none.
    pub default_image: &'a str,
    /// Hash of the referenced Secrets' versions.
    pub secrets_version: &'a str,
}

impl PoolPod<'_> {
    fn args(
        &self,
    ) -> (
        Vec<String>,
        Vec<k8s_openapi::api::core::v1::Volume>,
        Vec<k8s_openapi::api::core::v1::VolumeMount>,
    ) {
        let mut topic_args = Vec::new();
        for (source, (destination, partitions)) in self.units {
            let ps: Vec<String> = partitions.iter().map(ToString::to_string).collect();
            topic_args.push("--topic".to_string());
            topic_args.push(format!("{source}:{destination}={}", ps.join(",")));
        }
        fetcher_args(self.mirror, topic_args)
    }

    /// Hash of what the pod runs: another hash replaces the pod.
    pub fn hash(&self) -> String {
        let (args, _, _) = self.args();
        run_hash(self.mirror, &args, self.default_image, self.secrets_version)
    }

    /// The pod, owned by the `ClusterMirror`.
    pub fn build(&self) -> Pod {
        let mirror = self.mirror.name_any();
        let parts = PodParts {
            name: pool_pod_name(&mirror, self.index),
            labels: BTreeMap::from([
                (LABEL_POOL.to_string(), label_value(&mirror)),
                (LABEL_INDEX.to_string(), self.index.to_string()),
            ]),
            annotations: BTreeMap::from([
                (ANNOTATION_UNITS.to_string(), encode_units(self.units)),
                (ANNOTATION_SPEC_HASH.to_string(), self.hash()),
            ]),
            owner: self
                .mirror
                .controller_owner_ref(&())
                .expect("a stored ClusterMirror has a name and uid"),
            args: self.args(),
        };
        fetcher_pod(self.mirror, self.default_image, parts)
    }
}

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

/// Whether a pod is a pool pod of the mirror named `mirror`.
pub fn in_pool(pod: &Pod, mirror: &str) -> bool {
    pod.labels().get(LABEL_POOL) == Some(&label_value(mirror))
}

/// The owner UID of a pod's controller (for a pool pod: its `ClusterMirror`).
pub fn controller_uid(pod: &Pod) -> Option<String> {
    pod.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::records::{FetcherError, PositionRecord, StopReason, now_ms};

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

    fn units(pairs: &[(&str, &str, &[i32])]) -> Units {
        pairs
            .iter()
            .map(|(s, d, ps)| (s.to_string(), (d.to_string(), ps.iter().copied().collect())))
            .collect()
    }

    #[test]
    fn the_units_annotation_round_trips() {
        let u = units(&[("orders", "orders", &[0, 2]), ("pay.v1", "dr.pay.v1", &[5])]);
        let text = encode_units(&u);
        assert_eq!(text, "orders=0,2;pay.v1=5");
        let back = decode_units(&text);
        assert_eq!(back["orders"], BTreeSet::from([0, 2]));
        assert_eq!(back["pay.v1"], BTreeSet::from([5]));
        assert!(decode_units("").is_empty());
    }

    #[test]
    fn a_pool_pod_runs_every_unit_with_its_destination_and_is_owned_by_the_mirror() {
        let cm = mirror();
        let u = units(&[("orders", "dr.orders", &[0, 2]), ("pay", "pay", &[1])]);
        let pool_pod = PoolPod {
            mirror: &cm,
            index: 2,
            units: &u,
            default_image: "img",
            secrets_version: "s1",
        };
        let pod = pool_pod.build();
        assert_eq!(pod.name_any(), "dr-pool-2");
        assert_eq!(index_of(&pod), Some(2));
        assert!(in_pool(&pod, "dr"));
        assert_eq!(controller_uid(&pod).as_deref(), Some("cm-uid"));
        let args = pod.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        let topics: Vec<&String> = args
            .iter()
            .zip(args.iter().skip(1))
            .filter(|(a, _)| *a == "--topic")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(topics, ["orders:dr.orders=0,2", "pay:pay=1"]);
        assert_eq!(args[..2], ["--mirror".to_string(), "ns/dr".to_string()]);
        assert!(!args.contains(&"--source-topic".to_string()));
        // What it runs is in its hash: another unit set, image or Secret version replaces it.
        let other = units(&[("orders", "dr.orders", &[0])]);
        let hash = |u: &Units, secrets: &str| {
            PoolPod {
                mirror: &cm,
                index: 2,
                units: u,
                default_image: "img",
                secrets_version: secrets,
            }
            .hash()
        };
        assert_eq!(hash(&u, "s1"), annotated_hash(&pod));
        assert_ne!(hash(&u, "s1"), hash(&other, "s1"));
        assert_ne!(hash(&u, "s1"), hash(&u, "s2"));
        assert!(pool_pod_name(&"m".repeat(80), 7).len() <= 63);
    }

    fn annotated_hash(pod: &Pod) -> String {
        pod.annotations()[ANNOTATION_SPEC_HASH].clone()
    }

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
