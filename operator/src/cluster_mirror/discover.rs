//! Topic discovery: a `MirrorTopic` for every source topic matching the mirror's filters, owned by
//! the mirror; topics that no longer match are kept and named.

use std::collections::BTreeMap;

use kmirror_crds::filter::Selector;
use kmirror_crds::v1alpha1::{MirrorTopic, MirrorTopicSpec};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use crate::context::{Context, FIELD_MANAGER, Note};
use crate::error::Cause;
use crate::kafka;
use crate::pods::fnv1a;
use crate::scope::MirrorScope;
use crate::sync::PartResult;

/// Label on `MirrorTopic`s created from the topic filters.
pub const LABEL_CREATED_BY: &str = "kmirror.io/created-by-mirror";

/// The name of the `MirrorTopic` created for `topic`: `<mirror>-<topic>`, lowercased and made a
/// valid object name; a hash suffix keeps different topics apart.
pub fn topic_object_name(mirror: &str, topic: &str) -> String {
    let raw = format!("{mirror}-{topic}");
    let clean: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let clean = clean
        .trim_matches(|c: char| c == '-' || c == '.')
        .to_string();
    if clean == raw && clean.len() <= 253 {
        return clean;
    }
    let hash = format!("{:08x}", fnv1a(raw.as_bytes()) as u32);
    let keep = clean.len().min(253 - 9);
    format!("{}-{hash}", clean[..keep].trim_end_matches(['-', '.']))
}

/// Creates a `MirrorTopic` for every source topic matching the filters that has none.
pub async fn discover_topics(ctx: &Context, scope: &MirrorScope) -> PartResult {
    let cm = &scope.mirror;
    let selector = Selector::topics(&cm.spec.topics).map_err(|e| Cause::Invalid(e.to_string()))?;
    if cm.spec.topics.include.is_empty() {
        return Ok("no include filter: only explicit MirrorTopics".into());
    }
    let ns = cm.namespace().unwrap_or_default();
    let name = cm.name_any();
    let api: Api<MirrorTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let existing: BTreeMap<String, MirrorTopic> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|t| t.spec.mirror == name)
        .map(|t| (t.spec.source_topic.clone(), t))
        .collect();
    let matching: Vec<String> = kafka::list_topics(&scope.source)
        .await?
        .into_iter()
        .filter(|t| selector.matches(t))
        .collect();
    let mut created = Vec::new();
    for topic in &matching {
        if existing.contains_key(topic) {
            continue;
        }
        let object_name = topic_object_name(&name, topic);
        let mt = MirrorTopic {
            metadata: ObjectMeta {
                name: Some(object_name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(BTreeMap::from([
                    (LABEL_CREATED_BY.to_string(), name.clone()),
                    (
                        "app.kubernetes.io/managed-by".to_string(),
                        "kmirror-operator".to_string(),
                    ),
                ])),
                owner_references: Some(vec![cm.controller_owner_ref(&()).expect("stored object")]),
                ..Default::default()
            },
            spec: MirrorTopicSpec {
                mirror: name.clone(),
                source_topic: topic.clone(),
                destination_topic: None,
                state: Default::default(),
                failover: Default::default(),
                divergence_policy: None,
                topic_creation: Default::default(),
            },
            status: None,
        };
        api.patch(
            &object_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&mt),
        )
        .await?;
        created.push(topic.clone());
    }
    if !created.is_empty() {
        ctx.publish(
            cm,
            &Note::normal(
                "TopicsDiscovered",
                "Discover",
                format!("created MirrorTopics for {}", created.join(", ")),
            ),
        )
        .await;
    }
    let no_longer: Vec<&String> = existing
        .iter()
        .filter(|(t, mt)| !selector.matches(t) && mt.labels().contains_key(LABEL_CREATED_BY))
        .map(|(t, _)| t)
        .collect();
    let mut summary = format!(
        "{} matching source topics, {} new",
        matching.len(),
        created.len()
    );
    if !no_longer.is_empty() {
        summary.push_str(&format!(
            "; no longer matching (kept, delete them to stop mirroring): {}",
            no_longer
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_valid_and_distinct() {
        assert_eq!(topic_object_name("dr", "orders"), "dr-orders");
        let a = topic_object_name("dr", "Orders_EU");
        let b = topic_object_name("dr", "orders-eu");
        assert_ne!(a, b);
        assert!(a.starts_with("dr-orders-eu-"), "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        );
        let long = topic_object_name("dr", &"x".repeat(300));
        assert!(long.len() <= 253);
    }
}
