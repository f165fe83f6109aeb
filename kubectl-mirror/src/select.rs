//! Choosing the `MirrorTopic`s a command acts on: `--topic` (source topic or object name) or
//! `--all`.

use kmirror_crds::v1alpha1::MirrorTopic;

use crate::error::{Error, Result, TopicNotFound};

/// The object name of a MirrorTopic ("" if unset).
pub fn object_name(t: &MirrorTopic) -> &str {
    t.metadata.name.as_deref().unwrap_or("")
}

/// How a topic is listed in messages: its source topic, with the object name when it differs.
pub fn describe(t: &MirrorTopic) -> String {
    let name = object_name(t);
    if name == t.spec.source_topic {
        name.to_string()
    } else {
        format!("{} (MirrorTopic {name})", t.spec.source_topic)
    }
}

/// Whether `wanted` names this topic: its `spec.sourceTopic` or its object name.
pub fn matches(t: &MirrorTopic, wanted: &str) -> bool {
    t.spec.source_topic == wanted || object_name(t) == wanted
}

/// Picks topics of one mirror. `wanted` empty means all of them. Every wanted name must match;
/// the first that does not gives an error listing the mirror's topics. The result keeps the
/// order of `topics` and holds each topic once.
pub fn select<'a>(
    topics: &'a [MirrorTopic],
    mirror: &str,
    namespace: &str,
    wanted: &[String],
) -> Result<Vec<&'a MirrorTopic>> {
    if wanted.is_empty() {
        if topics.is_empty() {
            return Err(Error::failed(format!(
                "ClusterMirror {mirror:?} in namespace {namespace:?} has no MirrorTopics"
            )));
        }
        return Ok(topics.iter().collect());
    }
    for w in wanted {
        if !topics.iter().any(|t| matches(t, w)) {
            return Err(Error::TopicNotFound(TopicNotFound {
                topic: w.clone(),
                mirror: mirror.to_string(),
                namespace: namespace.to_string(),
                available: topics.iter().map(describe).collect(),
            }));
        }
    }
    Ok(topics
        .iter()
        .filter(|t| wanted.iter().any(|w| matches(t, w)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::topic;

    #[test]
    fn selects_by_source_topic_or_object_name() {
        let topics = vec![
            topic("dr-orders", "dr", "orders"),
            topic("payments", "dr", "payments"),
            topic("dr-audit", "dr", "audit"),
        ];
        let names = |sel: Vec<&MirrorTopic>| -> Vec<String> {
            sel.into_iter()
                .map(|t| object_name(t).to_string())
                .collect()
        };
        assert_eq!(
            names(select(&topics, "dr", "ns", &["orders".into(), "dr-audit".into()]).unwrap()),
            ["dr-orders", "dr-audit"]
        );
        assert_eq!(
            names(select(&topics, "dr", "ns", &["orders".into(), "dr-orders".into()]).unwrap()),
            ["dr-orders"]
        );
        assert_eq!(select(&topics, "dr", "ns", &[]).unwrap().len(), 3);
        let err = select(&topics, "dr", "ns", &["nope".into()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topic \"nope\" not found in ClusterMirror \"dr\" in namespace \"ns\"; its topics are: \
             orders (MirrorTopic dr-orders), payments, audit (MirrorTopic dr-audit)"
        );
        assert!(
            select(&[], "dr", "ns", &[])
                .unwrap_err()
                .to_string()
                .contains("has no MirrorTopics")
        );
    }
}
