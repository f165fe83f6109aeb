//! Fixtures for unit tests.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kmirror_crds::v1alpha1::{
    ClusterMirror, ClusterMirrorSpec, KafkaConnection, MirrorTopic, MirrorTopicSpec,
    MirrorTopicStatus, PartitionState, PartitionStatus,
};

/// A MirrorTopic in namespace `ns`.
pub fn topic(name: &str, mirror: &str, source: &str) -> MirrorTopic {
    MirrorTopic {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: MirrorTopicSpec {
            mirror: mirror.into(),
            source_topic: source.into(),
            destination_topic: None,
            state: Default::default(),
            failover: Default::default(),
            divergence_policy: None,
            topic_creation: Default::default(),
        },
        status: None,
    }
}

/// A ClusterMirror from `src:9092` to `dst:9092`.
pub fn mirror(name: &str, namespace: &str) -> ClusterMirror {
    let conn = |b: &str| KafkaConnection {
        bootstrap_servers: b.into(),
        ..Default::default()
    };
    ClusterMirror {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: ClusterMirrorSpec {
            source: conn("src:9092"),
            destination: conn("dst:9092"),
            topics: Default::default(),
            sync: Default::default(),
            fetcher: Default::default(),
            topic_creation: Default::default(),
            state_topic: "__kmirror_state".into(),
            reverse_of: None,
        },
        status: None,
    }
}

/// A partition status with only number and state set.
pub fn partition(partition: i32, state: PartitionState) -> PartitionStatus {
    PartitionStatus {
        partition,
        state,
        ..Default::default()
    }
}

/// `t` with these partitions in its status.
pub fn with_status(mut t: MirrorTopic, partitions: Vec<PartitionStatus>) -> MirrorTopic {
    t.status = Some(MirrorTopicStatus {
        phase: Some("Mirroring".into()),
        partitions,
        ..Default::default()
    });
    t
}

/// A condition.
pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ),
        observed_generation: None,
    }
}
