//! Pool pods: their names, the units annotation and the pod built for an assignment. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::ClusterMirror;
use kube::{Resource, ResourceExt};

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
}
