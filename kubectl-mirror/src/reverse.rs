//! Failback, the pure part: the reverse `ClusterMirror` and its `MirrorTopic`s built from the
//! mirror that was failed over, and the check that a topic is failed over.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kmirror_crds::v1alpha1::{
    ClusterMirror, ClusterMirrorSpec, DesiredState, DivergencePolicy, FailoverSpec, MirrorTopic,
    MirrorTopicSpec, PartitionState, TopicSelection,
};

use crate::select::object_name;
use crate::util;

/// Annotation on a reverse `MirrorTopic`: `namespace/name` of the topic it copies back.
pub const ANNOTATION_REVERSE_OF: &str = "kmirror.io/reverse-of";

/// The reverse mirror's default name: `<mirror>-failback` (made a valid name).
pub fn default_name(mirror: &str) -> String {
    util::object_name(&format!("{mirror}-failback"))
}

/// The name of the reverse topic of `old_topic`: `<reverse>-<old topic>` (made a valid name).
pub fn topic_name(reverse: &str, old_topic: &str) -> String {
    util::object_name(&format!("{reverse}-{old_topic}"))
}

/// `namespace/name` of a mirror.
pub fn key(m: &ClusterMirror) -> String {
    format!(
        "{}/{}",
        m.metadata.namespace.as_deref().unwrap_or(""),
        m.metadata.name.as_deref().unwrap_or("")
    )
}

/// The reverse of `old`, named `name` in the same namespace: source and destination swapped
/// verbatim (Secret references included), `reverseOf` set, state topic, sync and fetcher
/// settings copied, no topic filters (the reverse mirror gets explicit topics). The ACL
/// sync's `fetcherPrincipal` is left out: it names a principal of the old destination, and
/// the default (derived from the new destination's SASL user) is the right one.
pub fn reverse_mirror(old: &ClusterMirror, name: &str) -> ClusterMirror {
    let mut sync = old.spec.sync.clone();
    sync.acls.fetcher_principal = None;
    ClusterMirror {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: old.metadata.namespace.clone(),
            ..Default::default()
        },
        spec: ClusterMirrorSpec {
            source: old.spec.destination.clone(),
            destination: old.spec.source.clone(),
            topics: TopicSelection::default(),
            sync,
            fetcher: old.spec.fetcher.clone(),
            topic_creation: Default::default(),
            state_topic: old.spec.state_topic.clone(),
            reverse_of: Some(key(old)),
        },
        status: None,
    }
}

/// The reverse topic of `old` for mirror `reverse`: it copies the old destination topic back
/// into the old source topic.
pub fn reverse_topic(
    old: &MirrorTopic,
    reverse: &str,
    policy: Option<DivergencePolicy>,
) -> MirrorTopic {
    let namespace = old.metadata.namespace.clone();
    MirrorTopic {
        metadata: ObjectMeta {
            name: Some(topic_name(reverse, object_name(old))),
            namespace: namespace.clone(),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_REVERSE_OF.to_string(),
                format!("{}/{}", namespace.unwrap_or_default(), object_name(old)),
            )])),
            ..Default::default()
        },
        spec: MirrorTopicSpec {
            mirror: reverse.to_string(),
            source_topic: old.destination_topic().to_string(),
            destination_topic: Some(old.spec.source_topic.clone()),
            state: DesiredState::Mirroring,
            failover: FailoverSpec::default(),
            divergence_policy: policy,
            topic_creation: Default::default(),
        },
        status: None,
    }
}

/// Why `t` is not failed over yet (`None`: it is: spec Stopped, every partition STOPPED).
pub fn not_failed_over(t: &MirrorTopic) -> Option<String> {
    let parts = t
        .status
        .as_ref()
        .map(|s| s.partitions.as_slice())
        .unwrap_or(&[]);
    if t.spec.state != DesiredState::Stopped {
        return Some(format!("its spec.state is {:?}, not Stopped", t.spec.state));
    }
    if parts.is_empty() {
        return Some("no partition status is reported yet".to_string());
    }
    let pending: Vec<String> = parts
        .iter()
        .filter(|p| p.state != PartitionState::Stopped)
        .map(|p| format!("{} is {}", p.partition, p.state))
        .collect();
    // From the counts: a large topic lists only some partitions (those not STOPPED first).
    let counts = t.status.as_ref().map(|s| s.counts()).unwrap_or_default();
    let unlisted = counts.total - counts.stopped - pending.len() as i32;
    if pending.is_empty() && unlisted <= 0 {
        return None;
    }
    let mut why = format!("partition {}", pending.join(", partition "));
    if pending.is_empty() {
        why = format!("{unlisted} partitions are not STOPPED");
    } else if unlisted > 0 {
        why.push_str(&format!(", and {unlisted} more not STOPPED"));
    }
    Some(why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{mirror, partition, topic, with_status};
    use kmirror_crds::v1alpha1::{SaslConfig, SaslMechanism, SecretKeyRef, TlsConfig};

    #[test]
    fn reverse_mirror_swaps_connections_and_copies_settings() {
        let mut old = mirror("dr", "shop");
        old.spec.source.tls = Some(TlsConfig {
            ca: Some(SecretKeyRef {
                name: "src-tls".into(),
                key: "ca.crt".into(),
            }),
            client_cert: None,
            client_key: None,
            verify_hostname: true,
        });
        old.spec.destination.sasl = Some(SaslConfig {
            mechanism: SaslMechanism::ScramSha512,
            username: Some("mirror".into()),
            username_secret: None,
            password: Some(SecretKeyRef {
                name: "creds".into(),
                key: "password".into(),
            }),
            oauth: None,
        });
        old.spec.topics.include = vec![kmirror_crds::v1alpha1::NameFilter {
            prefix: Some("orders".into()),
            ..Default::default()
        }];
        old.spec.state_topic = "__state".into();
        old.spec.sync.interval = "7s".into();
        old.spec.sync.acls.fetcher_principal = Some("User:mirror".into());
        old.spec.fetcher.partitions_per_pod = 3;
        let r = reverse_mirror(&old, "dr-failback");
        assert_eq!(r.metadata.name.as_deref(), Some("dr-failback"));
        assert_eq!(r.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(r.spec.source, old.spec.destination);
        assert_eq!(r.spec.destination, old.spec.source);
        assert_eq!(r.spec.reverse_of.as_deref(), Some("shop/dr"));
        assert_eq!(r.spec.state_topic, "__state");
        assert_eq!(r.spec.sync.interval, "7s");
        assert_eq!(r.spec.sync.acls.fetcher_principal, None);
        assert_eq!(r.spec.fetcher, old.spec.fetcher);
        assert!(r.spec.topics.include.is_empty());
    }

    #[test]
    fn reverse_topic_swaps_topics() {
        let mut old = topic("dr-orders", "dr", "orders");
        old.spec.destination_topic = Some("orders-dr".into());
        let r = reverse_topic(&old, "dr-failback", Some(DivergencePolicy::Recreate));
        assert_eq!(r.metadata.name.as_deref(), Some("dr-failback-dr-orders"));
        assert_eq!(r.spec.mirror, "dr-failback");
        assert_eq!(r.spec.source_topic, "orders-dr");
        assert_eq!(r.spec.destination_topic.as_deref(), Some("orders"));
        assert_eq!(r.spec.divergence_policy, Some(DivergencePolicy::Recreate));
        assert_eq!(r.spec.state, DesiredState::Mirroring);
        assert_eq!(
            r.metadata.annotations.unwrap()[ANNOTATION_REVERSE_OF],
            "ns/dr-orders"
        );
        let same = reverse_topic(&topic("dr-pay", "dr", "pay"), "back", None);
        assert_eq!(same.spec.source_topic, "pay");
        assert_eq!(same.spec.destination_topic.as_deref(), Some("pay"));
        let long = reverse_topic(&topic(&"t".repeat(60), "dr", "x"), "dr-failback", None);
        assert!(long.metadata.name.unwrap().len() <= util::MAX_NAME);
    }

    #[test]
    fn failed_over_check() {
        let mut t = with_status(
            topic("dr-orders", "dr", "orders"),
            vec![
                partition(0, PartitionState::Stopped),
                partition(1, PartitionState::Mirroring),
                partition(2, PartitionState::Stopping),
            ],
        );
        assert_eq!(
            not_failed_over(&t).unwrap(),
            "its spec.state is Mirroring, not Stopped"
        );
        t.spec.state = DesiredState::Stopped;
        assert_eq!(
            not_failed_over(&t).unwrap(),
            "partition 1 is MIRRORING, partition 2 is STOPPING"
        );
        for p in &mut t.status.as_mut().unwrap().partitions {
            p.state = PartitionState::Stopped;
        }
        assert_eq!(not_failed_over(&t), None);
        // A large topic lists only some partitions: the counts decide.
        let st = t.status.as_mut().unwrap();
        st.partitions_omitted = 9;
        st.partition_counts = Some(kmirror_crds::v1alpha1::PartitionCounts {
            total: 12,
            stopped: 10,
            stopping: 2,
            ..Default::default()
        });
        assert_eq!(not_failed_over(&t).unwrap(), "2 partitions are not STOPPED");
        t.status.as_mut().unwrap().partitions[2].state = PartitionState::Stopping;
        assert_eq!(
            not_failed_over(&t).unwrap(),
            "partition 2 is STOPPING, and 1 more not STOPPED"
        );
        let st = t.status.as_mut().unwrap();
        st.partitions[2].state = PartitionState::Stopped;
        st.partition_counts = Some(kmirror_crds::v1alpha1::PartitionCounts {
            total: 12,
            stopped: 12,
            ..Default::default()
        });
        assert_eq!(not_failed_over(&t), None);
        let mut bare = topic("dr-x", "dr", "x");
        bare.spec.state = DesiredState::Stopped;
        assert!(
            not_failed_over(&bare)
                .unwrap()
                .contains("no partition status")
        );
        assert_eq!(default_name("dr"), "dr-failback");
    }
}
