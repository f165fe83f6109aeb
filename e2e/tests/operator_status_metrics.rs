//! The operator's alerting series and status on the real bed: a consumer group the destination
//! refuses is counted in `kmirror_operator_group_sync_failures_total{namespace,name,group}` and
//! named in the mirror's status while the other groups are still synced; a failing group-sync
//! pass leaves `kmirror_operator_group_sync_last_success_timestamp_seconds` as it was, one after
//! the refusal is lifted moves it; the state topic reads as available
//! (`kmirror_operator_state_topic_available`); the operator says which build it is
//! (`kmirror_build_info`); a topic with more partitions than the operator lists
//! (`--status-max-partitions`) lists its worst ones and counts them all, and
//! `kubectl mirror status --partitions all` shows every one.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::TestRecord;
use kmirror_e2e::kafka::{
    DestUser, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, kubectl_mirror};
use kmirror_state::kafka_admin::{
    AclBinding, Operation, PatternType, Permission, ResourceType, create_acls, delete_acls,
};
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Value, json};

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

/// The listed partitions' numbers and states, the counts, and how many are not listed.
fn listing(t: &kmirror_crds::v1alpha1::MirrorTopic) -> String {
    let s = t.status.clone().unwrap_or_default();
    let listed: Vec<String> = s
        .partitions
        .iter()
        .map(|p| format!("{}:{}", p.partition, p.state))
        .collect();
    format!(
        "listed [{}], counts {:?}, omitted {}",
        listed.join(" "),
        s.partition_counts,
        s.partitions_omitted
    )
}

#[tokio::test]
async fn a_large_topic_lists_its_worst_partitions_and_the_plugin_shows_all() {
    const PARTITIONS: i32 = 12;
    const LISTED: usize = 5;
    const BROKEN: i32 = 7;
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "bounded").await;
    let topic = unique_name("wide");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    produce_all(&source, &topic, &mixed_records(48, PARTITIONS, 0, 5), &[]).unwrap();
    let on_source = watermarks(&source, &topic, BROKEN).unwrap().1;

    // Set through the environment too, so that the same test runs against an operator without
    // the flag (KMIRROR_E2E_BIN_DIR) and shows what it lists.
    let _op =
        OperatorProcess::spawn_with_env(bed, &s.ns, &[], &[("KMIRROR_STATUS_MAX_PARTITIONS", "5")]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;

    // Partition 7 FAILED: another client writes to its destination once its records are copied,
    // then the source moves on (ForeignWrite, not retried).
    let deadline = Instant::now() + Duration::from_secs(60);
    while watermarks(&dest, &topic, BROKEN).map(|w| w.1).unwrap_or(0) < on_source {
        assert!(Instant::now() < deadline, "partition {BROKEN} not copied");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let one = |p: i32, seed| TestRecord {
        partition: p,
        ..mixed_records(1, 1, 0, seed).remove(0)
    };
    produce_all(&dest, &topic, &[one(BROKEN, 11)], &[]).unwrap();
    produce_all(&source, &topic, &[one(BROKEN, 12)], &[]).unwrap();
    let failed = s
        .wait_topic("t", "partition 7 FAILED", Duration::from_secs(60), |t| {
            t.status
                .as_ref()
                .is_some_and(|st| st.counts().failed == 1 && st.counts().mirroring == 11)
        })
        .await;
    let st = failed.status.clone().unwrap();
    eprintln!("FAILED: {}", listing(&failed));
    assert_eq!(st.partitions.len(), LISTED, "{}", listing(&failed));
    let counts = st.counts();
    assert_eq!(
        (counts.total, counts.failed, counts.mirroring),
        (PARTITIONS, 1, 11),
        "{}",
        listing(&failed)
    );
    assert_eq!(st.partitions_omitted, PARTITIONS - LISTED as i32);
    assert!(
        st.partitions
            .iter()
            .any(|p| p.partition == BROKEN && p.state == PartitionState::Failed),
        "the FAILED partition is listed: {}",
        listing(&failed)
    );
    assert_eq!(st.partitions_summary.as_deref(), Some("11/12"));
    let object = serde_json::to_vec(&failed).unwrap().len();
    eprintln!("the MirrorTopic of 12 partitions listing 5: {object} bytes as JSON");

    // The plugin: by default what the status holds and what it leaves out; with
    // --partitions all, every partition from the state topic.
    let (code, table, err) = kubectl_mirror(bed, &s.ns, &["status", "dr"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("7 more partitions not shown (7 MIRRORING")
            && table.contains("--partitions all shows them"),
        "{table}"
    );
    let (code, out, err) = kubectl_mirror(
        bed,
        &s.ns,
        &["status", "dr", "--partitions", "all", "-o", "json"],
    );
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let shown = &doc["mirrors"][0]["topics"][0];
    let partitions: Vec<(i64, String)> = shown["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().unwrap(),
                p["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(i64, String)> = (0..i64::from(PARTITIONS))
        .map(|p| {
            let state = if p == i64::from(BROKEN) {
                "FAILED"
            } else {
                "MIRRORING"
            };
            (p, state.to_string())
        })
        .collect();
    assert_eq!(partitions, expected, "{out}");
    assert_eq!(shown["partitionsOmitted"], 0, "{out}");
    let (code, table, err) = kubectl_mirror(bed, &s.ns, &["status", "dr", "--partitions", "all"]);
    assert_eq!(code, 0, "{err}");
    assert!(!table.contains("not shown"), "{table}");
    assert_eq!(
        table.lines().filter(|l| l.contains("MIRRORING")).count(),
        11,
        "{table}"
    );

    // Failover: every partition STOPPED, decided from the counts (5 listed).
    s.patch_topic(
        "t",
        json!({"state": "Stopped", "failover": {"mode": "Immediate"}}),
    )
    .await;
    let stopped = s
        .wait_topic("t", "all STOPPED", Duration::from_secs(90), |t| {
            all_partitions(t, PartitionState::Stopped, PARTITIONS as usize)
                && t.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        })
        .await;
    let st = stopped.status.clone().unwrap();
    assert_eq!(
        (st.partitions.len(), st.partitions_omitted),
        (LISTED, 7),
        "{}",
        listing(&stopped)
    );
    s.wait_mirror(
        "dr",
        "12 partitions STOPPED",
        Duration::from_secs(30),
        |m| {
            m.status.as_ref().is_some_and(|st| {
                st.partitions.stopped == PARTITIONS && st.partitions.total == PARTITIONS
            })
        },
    )
    .await;
    if std::env::var_os("KMIRROR_WRITE_FIXTURES").is_some() {
        let dir = kmirror_e2e::testbed::repo_root().join("deploy/argocd/testdata");
        for (file, object) in [
            ("mirrortopic-failed-large.json", &failed),
            ("mirrortopic-stopped-large.json", &stopped),
        ] {
            let mut v = serde_json::to_value(object).unwrap();
            if let Some(metadata) = v["metadata"].as_object_mut() {
                metadata.remove("managedFields");
            }
            std::fs::write(dir.join(file), serde_json::to_string_pretty(&v).unwrap()).unwrap();
        }
    }
    s.cleanup().await;
}
