//! The operator's alerting series on the real bed: a consumer group the destination refuses is
//! counted in `kmirror_operator_group_sync_failures_total{namespace,name,group}` and named in the
//! mirror's status while the other groups are still synced; a failing group-sync pass leaves
//! `kmirror_operator_group_sync_last_success_timestamp_seconds` as it was, one after the refusal
//! is lifted moves it; the state topic reads as available
//! (`kmirror_operator_state_topic_available`); the operator says which build it is
//! (`kmirror_build_info`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{
    DestUser, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kmirror_state::kafka_admin::{
    AclBinding, Operation, PatternType, Permission, ResourceType, create_acls, delete_acls,
};
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(15);

fn commit(config: &ClientConfig, group: &str, topic: &str, offset: i64) {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(offset))
        .unwrap();
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
}

fn committed(config: &ClientConfig, group: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    match consumer.committed_offsets(tpl, TIMEOUT).ok()?.elements()[0].offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

/// The mirror principal may do nothing with `group` on the destination.
fn deny(group: &str) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Group,
        name: group.into(),
        pattern: PatternType::Literal,
        principal: "User:mirror".into(),
        host: "*".into(),
        operation: Operation::All,
        permission: Permission::Deny,
    }
}

#[tokio::test]
async fn a_refused_group_is_counted_and_named_while_the_others_sync() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "group-fail").await;
    let topic = unique_name("groups");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    produce_all(&source, &topic, &mixed_records(100, 1, 0, 71), &[]).unwrap();
    // Sorted by name the refused group comes first: it must not keep the other from syncing.
    let refused = unique_name("a-refused");
    let fine = unique_name("b-fine");
    let admin: AdminClient<DefaultClientContext> = dest.create().unwrap();
    create_acls(admin.inner(), &[deny(&refused)], TIMEOUT).unwrap();
    commit(&source, &refused, &topic, 40);
    commit(&source, &fine, &topic, 60);

    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, 1)
    })
    .await;

    let failures = format!(
        r#"kmirror_operator_group_sync_failures_total{{namespace="{}",name="dr",group="{refused}"}}"#,
        s.ns
    );
    let last_success = format!(
        r#"kmirror_operator_group_sync_last_success_timestamp_seconds{{namespace="{}",name="dr"}} "#,
        s.ns
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let synced = committed(&dest, &fine, &topic) == Some(60);
        let counted = op.metric(&failures).unwrap_or(0.0);
        let named = s
            .mirror("dr")
            .await
            .status
            .and_then(|st| st.sync.consumer_groups)
            .and_then(|g| g.last_error)
            .filter(|e| e.contains(&refused));
        if let Some(named) = named.as_ref().filter(|_| synced && counted >= 1.0) {
            eprintln!("after {counted} failed runs: {named}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "synced {synced}, {failures} = {counted}, named {named:?}; destination watermarks {:?}\n{}",
            watermarks(&dest, &topic, 0),
            op.metrics_text().unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        committed(&dest, &refused, &topic),
        None,
        "nothing is committed for the refused group"
    );
    // Lag per partition, by the mirror's namespace and name.
    let lag = format!(
        r#"kmirror_operator_partition_lag_records{{namespace="{}",name="dr",topic="{topic}",partition="0"}} "#,
        s.ns
    );
    assert!(op.metric(&lag).is_some(), "no {lag}");
    assert_eq!(
        op.metric(r#"kmirror_operator_state_topic_available{state_topic="__kmirror_state"}"#),
        Some(1.0)
    );

    // While a group fails, no pass counts as a success (the passes before the topic mirrored
    // had nothing to sync, and did count).
    let before = op.metric(&last_success);
    let failed_runs = op.counter(&failures);
    let deadline = Instant::now() + Duration::from_secs(30);
    while op.counter(&failures) <= failed_runs {
        assert!(Instant::now() < deadline, "no further failed pass");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(op.metric(&last_success), before, "{last_success}");
    let build = op
        .metrics_text()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("kmirror_build_info{"))
        .map(str::to_string);
    let build = build.expect("kmirror_build_info");
    assert!(
        build.contains(&format!(r#"version="{}""#, env!("CARGO_PKG_VERSION")))
            && build.contains(r#"component="operator""#)
            && build.contains("git_sha=\"")
            && build.ends_with(" 1"),
        "{build}"
    );

    let lifted = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    delete_acls(admin.inner(), &[deny(&refused)], TIMEOUT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let at = loop {
        if let Some(at) = op
            .metric(&last_success)
            .filter(|at| *at >= lifted.as_secs_f64() - 1.0)
        {
            break at;
        }
        assert!(
            Instant::now() < deadline,
            "no successful group sync after the refusal was lifted\n{}",
            op.metrics_text().unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert!(
        at >= lifted.as_secs_f64() - 1.0 && at <= now.as_secs_f64() + 1.0,
        "last success {at}, lifted at {lifted:?}, now {now:?}"
    );
    eprintln!(
        "a group sync succeeded {:.1} s after the refusal was lifted",
        at - lifted.as_secs_f64()
    );
    assert_eq!(committed(&dest, &refused, &topic), Some(40));
    s.cleanup().await;
}
