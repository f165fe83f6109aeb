//! `spec.sync.topicConfigs.exclude` adds to the default excludes; with `replaceDefaultExcludes`
//! it replaces them: two ClusterMirrors of one source topic each, through the operator.

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
