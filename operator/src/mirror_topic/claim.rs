//! One owner per source topic: of the `MirrorTopic`s of one `ClusterMirror` that name the same
//! source topic, the oldest (then the first by name) mirrors it and the others are refused. They
//! would share its state records (keyed by mirror and source topic), run a second set of
//! fetchers, and deleting one would tombstone the records the other mirrors by. Pure.

use kmirror_crds::v1alpha1::MirrorTopic;
use kube::ResourceExt;

/// Whether a topic may mirror its source topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// It owns the source topic.
    Owner,
    /// Another `MirrorTopic` (named) owns it.
    TakenBy(String),
}

/// Who came first: creation time (a missing one counts as last), then name.
fn seniority(t: &MirrorTopic) -> (bool, Option<k8s_openapi::jiff::Timestamp>, String) {
    let created = t.metadata.creation_timestamp.as_ref().map(|c| c.0);
    (created.is_none(), created, t.name_any())
}

/// Whether `me` owns its source topic among `peers` (the namespace's `MirrorTopic`s; `me` may be
/// among them). A peer being deleted still owns it until it is gone: its fetchers may still run.
pub fn claim(me: &MirrorTopic, peers: &[MirrorTopic]) -> Claim {
    let mine = seniority(me);
    peers
        .iter()
        .filter(|p| {
            p.name_any() != me.name_any()
                && p.namespace() == me.namespace()
                && p.spec.mirror == me.spec.mirror
                && p.spec.source_topic == me.spec.source_topic
        })
        .filter(|p| seniority(p) < mine)
        .min_by_key(|p| seniority(p))
        .map_or(Claim::Owner, |p| Claim::TakenBy(p.name_any()))
}

/// The one line a refused topic shows in its status and Event.
pub fn taken_message(me: &MirrorTopic, owner: &str) -> String {
    format!(
        "source topic {} of ClusterMirror {} is already mirrored by MirrorTopic {owner}: one \
         MirrorTopic per source topic and mirror; delete this one or change spec.sourceTopic",
        me.spec.source_topic, me.spec.mirror
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn topic(name: &str, mirror: &str, source: &str, created: Option<&str>) -> MirrorTopic {
        let mut t: MirrorTopic = serde_json::from_value(json!({
            "apiVersion": "kmirror.io/v1alpha1",
            "kind": "MirrorTopic",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"mirror": mirror, "sourceTopic": source},
        }))
        .unwrap();
        t.metadata.creation_timestamp = created.map(|c| Time(c.parse().unwrap()));
        t
    }

    #[test]
    fn the_first_topic_owns_its_source_topic() {
        let t0 = Some("2026-12-01T10:00:00Z");
        let t1 = Some("2026-12-01T11:00:00Z");
        let a = topic("a", "dr", "orders", t1);
        #[rustfmt::skip]
        let table: Vec<(&str, MirrorTopic, Vec<MirrorTopic>, Claim)> = vec![
            ("alone", a.clone(), vec![a.clone()], Claim::Owner),
            ("an older topic of the same source", a.clone(),
             vec![a.clone(), topic("b", "dr", "orders", t0)], Claim::TakenBy("b".into())),
            ("a younger topic of the same source", a.clone(),
             vec![topic("b", "dr", "orders", Some("2026-12-01T12:00:00Z"))], Claim::Owner),
            ("another source topic", a.clone(), vec![topic("b", "dr", "payments", t0)], Claim::Owner),
            ("another mirror", a.clone(), vec![topic("b", "dr2", "orders", t0)], Claim::Owner),
            ("same second: the first name wins", topic("b", "dr", "orders", t1),
             vec![topic("a", "dr", "orders", t1)], Claim::TakenBy("a".into())),
            ("same second, the first name asks", a.clone(),
             vec![topic("b", "dr", "orders", t1)], Claim::Owner),
            ("the oldest of several owns it", a.clone(),
             vec![topic("c", "dr", "orders", Some("2026-12-01T10:30:00Z")), topic("b", "dr", "orders", t0)],
             Claim::TakenBy("b".into())),
            ("no creation time counts as last", topic("b", "dr", "orders", None),
             vec![a.clone()], Claim::TakenBy("a".into())),
        ];
        for (name, me, peers, expect) in table {
            assert_eq!(claim(&me, &peers), expect, "{name}");
        }
        let message = taken_message(&a, "b");
        assert!(
            message.contains("already mirrored by MirrorTopic b") && !message.contains('\n'),
            "{message}"
        );
    }
}
