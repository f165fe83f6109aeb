//! Fetcher pods: names, partition groups and the pod spec. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, Pod, PodSecurityContext, PodSpec, Probe, ResourceRequirements,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kmirror_crds::bytes::parse_byte_size;
use kmirror_crds::v1alpha1::{
    ClusterMirror, DEFAULT_FETCHER_MEMORY_BUDGET, FetcherEngine, IsolationLevel, MirrorTopic,
};
use kube::Resource;
use kube::api::ObjectMeta;

use crate::connection::pod_connection;

pub mod template;

/// Label on every fetcher pod naming its `MirrorTopic`.
pub const LABEL_MIRROR_TOPIC: &str = "kmirror.io/mirror-topic";
/// Label naming the `ClusterMirror`.
pub const LABEL_MIRROR: &str = "kmirror.io/mirror";
/// Label with the pod's group index.
pub const LABEL_INDEX: &str = "kmirror.io/fetcher-index";
/// Annotation listing the partitions a pod serves.
pub const ANNOTATION_PARTITIONS: &str = "kmirror.io/partitions";
/// Annotation with the hash of everything that requires a new pod when it changes.
pub const ANNOTATION_SPEC_HASH: &str = "kmirror.io/spec-hash";
/// Port of the fetcher's HTTP endpoints.
pub const HTTP_PORT: i32 = 9464;

/// Partitions per pod of a mirror's per-topic pods: `spec.fetcher.partitionsPerPod`; with a
/// pool, a reconcile sees one view per partition, so 1.
pub fn partitions_per_pod(mirror: &ClusterMirror) -> i32 {
    if mirror.spec.fetcher.pool.is_some() {
        1
    } else {
        mirror.spec.fetcher.partitions_per_pod.max(1)
    }
}

/// The group (pod index) a partition belongs to.
pub fn group_of(partition: i32, partitions_per_pod: i32) -> i32 {
    partition / partitions_per_pod.max(1)
}

/// Deterministic name of the pod of group `index`.
pub fn pod_name(mirror_topic: &str, index: i32) -> String {
    let suffix = format!("-fetcher-{index}");
    let max = 63 - suffix.len();
    if mirror_topic.len() <= max {
        format!("{mirror_topic}{suffix}")
    } else {
        let hash = format!("{:08x}", fnv1a(mirror_topic.as_bytes()) as u32);
        let keep = max - hash.len() - 1;
        format!(
            "{}-{hash}{suffix}",
            mirror_topic[..keep].trim_end_matches('-')
        )
    }
}

/// A label value for an object name: the name itself when it fits in 63 characters, else a
/// prefix and a hash of the whole name.
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let hash = format!("{:08x}", fnv1a(name.as_bytes()) as u32);
    format!("{}-{hash}", name[..54].trim_end_matches(['-', '.']))
}

/// FNV-1a, for short stable hashes in names and annotations.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// Everything a fetcher pod is built from.
pub struct FetcherPod<'a> {
    /// The topic.
    pub topic: &'a MirrorTopic,
    /// Its mirror.
    pub mirror: &'a ClusterMirror,
    /// Group index.
    pub index: i32,
    /// Partitions of the group that need a fetcher.
    pub partitions: &'a [i32],
    /// Image when the mirror does not set one.
    pub default_image: &'a str,
    /// Hash of the referenced Secrets' versions: a change replaces the pod.
    pub secrets_version: &'a str,
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(HTTP_PORT),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(3),
        ..Default::default()
    }
}

impl FetcherPod<'_> {
    /// The fetcher's command-line arguments.
    pub fn args(
        &self,
    ) -> (
        Vec<String>,
        Vec<k8s_openapi::api::core::v1::Volume>,
        Vec<k8s_openapi::api::core::v1::VolumeMount>,
    ) {
        let mt = &self.topic.spec;
        let partitions: Vec<String> = self.partitions.iter().map(ToString::to_string).collect();
        let topic_args = vec![
            "--source-topic".into(),
            mt.source_topic.clone(),
            "--destination-topic".into(),
            self.topic.destination_topic().to_string(),
            "--partitions".into(),
            partitions.join(","),
        ];
        fetcher_args(self.mirror, topic_args)
    }

    /// Hash of what the pod runs; a different hash means the pod must be replaced.
    pub fn spec_hash(&self) -> String {
        let (args, _, _) = self.args();
        run_hash(self.mirror, &args, self.default_image, self.secrets_version)
    }

    /// The pod, owned by the `MirrorTopic`.
    pub fn build(&self) -> Pod {
        let topic_name = self.topic.metadata.name.clone().unwrap_or_default();
        let partitions: Vec<String> = self.partitions.iter().map(ToString::to_string).collect();
        let parts = PodParts {
            name: pod_name(&topic_name, self.index),
            labels: BTreeMap::from([
                (LABEL_MIRROR_TOPIC.to_string(), topic_name),
                (LABEL_INDEX.to_string(), self.index.to_string()),
            ]),
            annotations: BTreeMap::from([
                (ANNOTATION_PARTITIONS.to_string(), partitions.join(",")),
                (ANNOTATION_SPEC_HASH.to_string(), self.spec_hash()),
            ]),
            owner: self
                .topic
                .controller_owner_ref(&())
                .expect("a stored MirrorTopic has a name and uid"),
            args: self.args(),
        };
        fetcher_pod(self.mirror, self.default_image, parts)
    }
}

/// A fetcher's command-line arguments: the mirror, what it copies (`topic_args`), then the
/// mirror's settings and both connections (with the volumes and mounts of their Secrets).
pub fn fetcher_args(
    mirror: &ClusterMirror,
    topic_args: Vec<String>,
) -> (
    Vec<String>,
    Vec<k8s_openapi::api::core::v1::Volume>,
    Vec<k8s_openapi::api::core::v1::VolumeMount>,
) {
    let spec = &mirror.spec;
    let ns = mirror.metadata.namespace.clone().unwrap_or_default();
    let name = mirror.metadata.name.clone().unwrap_or_default();
    let mut args = vec!["--mirror".into(), format!("{ns}/{name}")];
    args.extend(topic_args);
    args.extend([
        "--state-topic".into(),
        spec.state_topic.clone(),
        "--isolation-level".into(),
        match spec.fetcher.isolation_level {
            IsolationLevel::ReadCommitted => "read_committed",
            IsolationLevel::ReadUncommitted => "read_uncommitted",
        }
        .into(),
        "--prefix-alignment-limit".into(),
        spec.fetcher.prefix_alignment_limit.to_string(),
        "--memory-budget".into(),
        memory_budget(spec.fetcher.memory_budget.as_deref(), &resources_of(mirror)).to_string(),
        "--http-port".into(),
        HTTP_PORT.to_string(),
    ]);
    args.push("--engine".into());
    args.push(
        match spec.fetcher.engine {
            FetcherEngine::Batch => "batch",
            FetcherEngine::Record => "record",
        }
        .into(),
    );
    if let Some(t) = spec.fetcher.throttle_bytes_per_second {
        args.push("--throttle-bytes-per-second".into());
        args.push(t.to_string());
    }
    // A pinned cluster ID is checked by the fetcher too: a hard stop where it reads and
    // writes, not only an operator condition.
    for (flag, pinned) in [
        ("--source-cluster-id", &spec.source.cluster_id),
        ("--destination-cluster-id", &spec.destination.cluster_id),
    ] {
        if let Some(id) = pinned {
            args.push(flag.into());
            args.push(id.clone());
        }
    }
    let source = pod_connection(&spec.source, "source", &spec.fetcher.consumer_properties);
    let destination = pod_connection(
        &spec.destination,
        "destination",
        &spec.fetcher.producer_properties,
    );
    args.extend(source.args);
    args.extend(destination.args);
    let mut volumes = source.volumes;
    volumes.extend(destination.volumes);
    let mut mounts = source.mounts;
    mounts.extend(destination.mounts);
    (args, volumes, mounts)
}

/// Hash of what a fetcher pod of `mirror` runs with `args`: its image, resources, pod template
/// and the referenced Secrets' versions too; a different hash means the pod must be replaced.
pub fn run_hash(
    mirror: &ClusterMirror,
    args: &[String],
    default_image: &str,
    secrets_version: &str,
) -> String {
    let image = image_of(mirror, default_image);
    let resources = serde_json::to_string(&mirror.spec.fetcher.resources).unwrap_or_default();
    let text = format!(
        "{}\n{image}\n{resources}\n{secrets_version}{}",
        args.join("\n"),
        template::hash_part(&mirror.spec.fetcher.template)
    );
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// The container's resources: the spec's, or small defaults that bound the damage of one
/// fetcher (requests 100m CPU and 128Mi; a 512Mi memory limit, above a fetcher's peak).
fn resources_of(mirror: &ClusterMirror) -> ResourceRequirements {
    mirror
        .spec
        .fetcher
        .resources
        .clone()
        .unwrap_or_else(default_resources)
}

fn image_of(mirror: &ClusterMirror, default_image: &str) -> String {
    mirror
        .spec
        .fetcher
        .image
        .clone()
        .unwrap_or_else(|| default_image.to_string())
}

/// What makes a fetcher pod besides its mirror's settings.
pub struct PodParts {
    /// Pod name.
    pub name: String,
    /// Labels beyond the mirror's `podLabels` and the common ones.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// The controlling owner.
    pub owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    /// The fetcher's arguments, volumes and mounts ([`fetcher_args`]).
    pub args: (
        Vec<String>,
        Vec<k8s_openapi::api::core::v1::Volume>,
        Vec<k8s_openapi::api::core::v1::VolumeMount>,
    ),
}

/// A fetcher pod of `mirror` in its namespace, with the mirror's pod template applied.
pub fn fetcher_pod(mirror: &ClusterMirror, default_image: &str, parts: PodParts) -> Pod {
    let (args, volumes, mounts) = parts.args;
    let mut labels: BTreeMap<String, String> = mirror.spec.fetcher.pod_labels.clone();
    labels.insert("app.kubernetes.io/name".into(), "kmirror-fetcher".into());
    labels.insert(
        "app.kubernetes.io/managed-by".into(),
        "kmirror-operator".into(),
    );
    labels.insert(
        LABEL_MIRROR.into(),
        mirror.metadata.name.clone().unwrap_or_default(),
    );
    labels.extend(parts.labels);
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(parts.name),
            namespace: mirror.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(parts.annotations),
            owner_references: Some(vec![parts.owner]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(30),
            service_account_name: mirror.spec.fetcher.service_account_name.clone(),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                fs_group: Some(65532),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "fetcher".into(),
                image: Some(image_of(mirror, default_image)),
                image_pull_policy: mirror.spec.fetcher.image_pull_policy.clone(),
                command: Some(vec!["kmirror-fetcher".into()]),
                args: Some(args),
                env: Some(vec![
                    field_env("POD_NAME", "metadata.name"),
                    // With its UID the fetcher writes only under a write lease.
                    field_env("POD_UID", "metadata.uid"),
                    field_env("POD_IP", "status.podIP"),
                    EnvVar {
                        name: "KMIRROR_LOG_FORMAT".into(),
                        value: Some("json".into()),
                        ..Default::default()
                    },
                    EnvVar {
                        name: "KMIRROR_SHUTDOWN_TIMEOUT_SECONDS".into(),
                        value: Some("25".into()),
                        ..Default::default()
                    },
                ]),
                ports: Some(vec![ContainerPort {
                    name: Some("http".into()),
                    container_port: HTTP_PORT,
                    ..Default::default()
                }]),
                readiness_probe: Some(probe("/readyz", 5, 3)),
                liveness_probe: Some(probe("/healthz", 10, 6)),
                resources: Some(resources_of(mirror)),
                volume_mounts: Some(mounts),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    privileged: Some(false),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                termination_message_policy: Some("FallbackToLogsOnError".into()),
                ..Default::default()
            }],
            volumes: Some(volumes),
            ..Default::default()
        }),
        status: None,
    };
    template::apply(&mut pod, &mirror.spec.fetcher.template);
    pod
}

/// Groups partitions into pods: index → partitions, in order.
pub fn groups(partitions: &[i32], partitions_per_pod: i32) -> BTreeMap<i32, Vec<i32>> {
    let mut out: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for &p in partitions {
        out.entry(group_of(p, partitions_per_pod))
            .or_default()
            .push(p);
    }
    out
}

/// A fetcher's memory budget in bytes: `spec.fetcher.memoryBudget` (validated) or 96Mi, at most
/// three quarters of the container's memory limit, leaving the rest for what the budget does not
/// cover (allocator slack, a record larger than usual).
pub fn memory_budget(spec_budget: Option<&str>, resources: &ResourceRequirements) -> u64 {
    let wanted = spec_budget
        .and_then(|b| parse_byte_size(b).ok())
        .unwrap_or(DEFAULT_FETCHER_MEMORY_BUDGET);
    let limit = resources
        .limits
        .as_ref()
        .and_then(|l| l.get("memory"))
        .and_then(|q| parse_byte_size(&q.0).ok());
    match limit {
        Some(limit) => wanted.min(limit / 4 * 3),
        None => wanted,
    }
}

/// Resources of a fetcher container whose ClusterMirror sets none.
pub fn default_resources() -> ResourceRequirements {
    let q = |v: &str| Quantity(v.to_string());
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), q("100m")),
            ("memory".to_string(), q("128Mi")),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), q("512Mi"))])),
        ..Default::default()
    }
}

/// Whether `pod` is controlled by the object with UID `owner_uid` (its controller owner
/// reference): labels alone can be made to collide, the UID cannot.
pub fn controlled_by(pod: &k8s_openapi::api::core::v1::Pod, owner_uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects() -> (MirrorTopic, ClusterMirror) {
        let mut mt: MirrorTopic = serde_json::from_value(serde_json::json!({
            "apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
            "metadata": {"name": "orders", "namespace": "ns", "uid": "u-1"},
            "spec": {"mirror": "dr", "sourceTopic": "orders"}
        }))
        .unwrap();
        mt.metadata.uid = Some("u-1".into());
        let cm: ClusterMirror = serde_json::from_value(serde_json::json!({
            "apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
            "metadata": {"name": "dr", "namespace": "ns"},
            "spec": {
                "source": {"bootstrapServers": "src:9092"},
                "destination": {"bootstrapServers": "dst:9092",
                    "sasl": {"mechanism": "PLAIN", "username": "mirror", "password": {"name": "creds", "key": "pw"}}},
                "fetcher": {"throttleBytesPerSecond": 1048576}
            }
        }))
        .unwrap();
        (mt, cm)
    }

    #[test]
    fn label_values_fit() {
        assert_eq!(label_value("orders"), "orders");
        let long = "x".repeat(200);
        assert!(label_value(&long).len() <= 63);
        assert_ne!(label_value(&long), label_value(&format!("{long}y")));
    }

    #[test]
    fn names_are_stable_and_short() {
        assert_eq!(pod_name("orders", 3), "orders-fetcher-3");
        let long = "a".repeat(80);
        let name = pod_name(&long, 12);
        assert!(name.len() <= 63, "{name}");
        assert_eq!(name, pod_name(&long, 12));
        assert_ne!(pod_name(&format!("{long}x"), 12), name);
    }

    #[test]
    fn partitions_pack_into_groups() {
        let g = groups(&[0, 1, 2, 3, 4, 7], 3);
        assert_eq!(g[&0], vec![0, 1, 2]);
        assert_eq!(g[&1], vec![3, 4]);
        assert_eq!(g[&2], vec![7]);
        assert_eq!(groups(&[0, 1], 1).len(), 2);
    }

    #[test]
    fn the_memory_budget_is_the_spec_or_96mi_within_the_limit() {
        let limit = |l: Option<&str>| ResourceRequirements {
            limits: l.map(|l| BTreeMap::from([("memory".to_string(), Quantity(l.into()))])),
            ..Default::default()
        };
        const MI: u64 = 1 << 20;
        // (spec budget, container memory limit) → budget
        for (spec, lim, want) in [
            (None, Some("512Mi"), 96 * MI),
            (Some("256Mi"), Some("512Mi"), 256 * MI),
            (Some("1Gi"), Some("512Mi"), 384 * MI),
            (None, Some("64Mi"), 48 * MI),
            (None, Some("100Mi"), 75 * MI),
            (Some("1Gi"), None, 1024 * MI),
            (None, Some("1.5Gi"), 96 * MI),
        ] {
            assert_eq!(
                memory_budget(spec, &limit(lim)),
                want,
                "budget {spec:?}, limit {lim:?}"
            );
        }
    }

    #[test]
    fn pod_is_locked_down_and_owned() {
        let (mt, cm) = objects();
        let fp = FetcherPod {
            topic: &mt,
            mirror: &cm,
            index: 0,
            partitions: &[0, 1],
            default_image: "kmirror:dev",
            secrets_version: "v1",
        };
        let pod = fp.build();
        assert_eq!(pod.metadata.name.as_deref(), Some("orders-fetcher-0"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("MirrorTopic", Some(true))
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let c = &spec.containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(spec.security_context.unwrap().run_as_non_root, Some(true));
        let resources = c.resources.as_ref().unwrap();
        assert_eq!(
            resources.limits.as_ref().unwrap()["memory"].0,
            "512Mi",
            "a memory limit by default"
        );
        assert!(resources.requests.as_ref().unwrap().contains_key("cpu"));
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--mirror ns/dr"));
        assert!(args.contains("--partitions 0,1"));
        assert!(args.contains("--throttle-bytes-per-second 1048576"));
        assert!(
            args.contains("--engine batch"),
            "the batch engine by default"
        );
        assert!(
            args.contains("--memory-budget 100663296"),
            "96Mi by default"
        );
        assert!(args.contains(
            "--destination-property-file sasl.password=/etc/kmirror/destination/sasl-password/value"
        ));
        assert_eq!(c.image.as_deref(), Some("kmirror:dev"));
        assert_eq!(
            spec.volumes.unwrap()[0]
                .secret
                .as_ref()
                .unwrap()
                .secret_name
                .as_deref(),
            Some("creds")
        );
    }

    #[test]
    fn the_record_engine_is_passed_on() {
        let (mt, mut cm) = objects();
        cm.spec.fetcher.engine = FetcherEngine::Record;
        let fp = FetcherPod {
            topic: &mt,
            mirror: &cm,
            index: 0,
            partitions: &[0],
            default_image: "i",
            secrets_version: "v1",
        };
        let pod = fp.build();
        let args = pod.spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap()
            .join(" ");
        assert!(args.contains("--engine record"), "{args}");
    }

    #[test]
    fn hash_changes_with_what_needs_a_new_pod() {
        let (mt, cm) = objects();
        let a = FetcherPod {
            topic: &mt,
            mirror: &cm,
            index: 0,
            partitions: &[0, 1],
            default_image: "i",
            secrets_version: "v1",
        };
        let b = FetcherPod {
            partitions: &[0],
            ..a
        };
        let c = FetcherPod {
            secrets_version: "v2",
            ..a
        };
        let a2 = FetcherPod { ..a };
        assert_eq!(a.spec_hash(), a2.spec_hash());
        assert_ne!(a.spec_hash(), b.spec_hash());
        assert_ne!(a.spec_hash(), c.spec_hash());
    }
}
