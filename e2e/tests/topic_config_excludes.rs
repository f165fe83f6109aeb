//! Which configs reach the destination topics, through the operator: `spec.sync.topicConfigs.exclude`
//! adds to the default excludes and with `replaceDefaultExcludes` replaces them; a value the
//! destination refuses is left out and named in the MirrorTopic's status with the broker's
//! message, once, while the topic mirrors.

use std::collections::BTreeMap;
use std::time::Duration;

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{DestUser, create_topic, topic_configs, unique_name};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, eventually};
use serde_json::json;

const SOURCE_CONFIGS: [(&str, &str); 3] = [
    ("retention.ms", "3600000"),
    ("segment.ms", "7200000"),
    ("min.insync.replicas", "1"),
];

async fn destination_configs(bed: &Testbed, topic: &str) -> BTreeMap<String, String> {
    topic_configs(&bed.dest_config(DestUser::Admin), topic)
        .await
        .unwrap()
}

#[tokio::test]
async fn exclude_adds_to_the_defaults_and_replace_default_excludes_replaces_them() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "excludes").await;
    let added = unique_name("excl-added");
    let replaced = unique_name("excl-replaced");
    for topic in [&added, &replaced] {
        create_topic(&bed.source_config(), topic, 1, &SOURCE_CONFIGS)
            .await
            .unwrap();
    }
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    for (mirror, topic, sync) in [
        ("added", &added, json!({"exclude": ["segment.ms"]})),
        (
            "replaced",
            &replaced,
            json!({"exclude": ["segment.ms"], "replaceDefaultExcludes": true}),
        ),
    ] {
        let mut spec = Scenario::mirror_spec(bed);
        spec["topics"] = json!({"include": [{"name": topic}]});
        spec["sync"]["topicConfigs"] = sync;
        s.apply_mirror(mirror, spec).await;
    }
    for topic in [&added, &replaced] {
        eventually(
            &format!("a MirrorTopic of {topic} mirroring"),
            Duration::from_secs(90),
            async || {
                s.topics().await.iter().any(|t| {
                    &t.spec.source_topic == topic && all_partitions(t, PartitionState::Mirroring, 1)
                })
            },
        )
        .await;
    }
    let added_configs = destination_configs(bed, &added).await;
    assert_eq!(
        added_configs.get("retention.ms").map(String::as_str),
        Some("3600000"),
        "{added_configs:?}"
    );
    assert!(
        !added_configs.contains_key("segment.ms"),
        "excluded: {added_configs:?}"
    );
    assert!(
        !added_configs.contains_key("min.insync.replicas"),
        "still excluded by default: {added_configs:?}"
    );
    let replaced_configs = destination_configs(bed, &replaced).await;
    assert_eq!(
        replaced_configs
            .get("min.insync.replicas")
            .map(String::as_str),
        Some("1"),
        "the defaults replaced: copied: {replaced_configs:?}"
    );
    assert!(
        !replaced_configs.contains_key("segment.ms"),
        "excluded: {replaced_configs:?}"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn a_value_the_destination_refuses_is_named_with_the_broker_message() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "refused").await;
    let topic = unique_name("refused");
    create_topic(
        &bed.source_config(),
        &topic,
        1,
        &[("retention.ms", "3600000")],
    )
    .await
    .unwrap();
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["topics"] = json!({"include": [{"name": topic}]});
    spec["sync"]["topicConfigs"] = json!({"overrides": {"segment.bytes": "1"}});
    s.apply_mirror("dr", spec).await;
    eventually(
        "the topic mirroring with the refused config named",
        Duration::from_secs(90),
        async || {
            s.topics().await.iter().any(|t| {
                all_partitions(t, PartitionState::Mirroring, 1)
                    && t.status
                        .as_ref()
                        .is_some_and(|st| !st.configs_not_copied.is_empty())
            })
        },
    )
    .await;
    let t = s.topics().await.pop().unwrap();
    let notes = t.status.unwrap().configs_not_copied;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].name, "segment.bytes");
    // Kafka's own words: "Invalid value 1 for configuration segment.bytes: ...".
    assert!(
        notes[0]
            .reason
            .contains("Invalid value 1 for configuration segment.bytes")
            && notes[0].reason.contains("spec.sync.topicConfigs.overrides"),
        "{}",
        notes[0].reason
    );
    let configs = destination_configs(bed, &topic).await;
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("3600000"),
        "the rest is copied: {configs:?}"
    );
    // Later syncs do not send it again: they succeed, and no reconcile fails.
    let name = t.metadata.name.unwrap();
    let first = s.mirror("dr").await;
    let first_success = first
        .status
        .and_then(|st| st.sync.topic_configs)
        .and_then(|p| p.last_success_time);
    eventually(
        "two more config syncs",
        Duration::from_secs(30),
        async || {
            let part = s
                .mirror("dr")
                .await
                .status
                .and_then(|st| st.sync.topic_configs);
            part.as_ref().is_some_and(|p| {
                p.last_error.is_none()
                    && p.last_success_time.is_some()
                    && p.last_success_time != first_success
            })
        },
    )
    .await;
    let events = s.events(&name).await;
    assert!(
        !events.iter().any(|(reason, _)| reason == "ReconcileFailed"),
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|(reason, _)| reason == "ConfigsNotCopied")
            .count(),
        1,
        "{events:?}"
    );
    s.cleanup().await;
}
