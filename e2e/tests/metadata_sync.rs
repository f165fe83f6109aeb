//! Metadata sync against the real clusters: topic configs, partitions, ACLs, and source topic
//! deletion (consumer-group offsets: `group_sync.rs`).

use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::verify;
use kmirror_e2e::kafka::app_acl as acl;
use kmirror_e2e::kafka::{
    DestUser, delete_topic, mixed_records, produce_all, topic_configs, unique_name, watermarks,
};
use kmirror_e2e::operator::{all_partitions, condition, eventually, mirrored_topic as mirrored};
use kmirror_fetcher::Isolation;
use kmirror_state::kafka_admin::{
    ConfigOp, Operation, ResourceType, alter_topic_configs, create_acls, delete_acls,
};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(15);

fn alter(config: &ClientConfig, topic: &str, ops: &[ConfigOp]) {
    let admin: AdminClient<DefaultClientContext> = config.create().unwrap();
    alter_topic_configs(admin.inner(), topic, ops, TIMEOUT).unwrap();
}

#[tokio::test]
async fn topic_config_changes_follow_the_source_except_excluded_ones() {
    let bed = Testbed::get();
    let (s, _op, topic) = mirrored(bed, "sync-cfg", 1, &[("retention.ms", "3600000")]).await;
    let dest = bed.dest_config(DestUser::Admin);
    assert_eq!(
        topic_configs(&dest, &topic)
            .await
            .unwrap()
            .get("retention.ms")
            .map(String::as_str),
        Some("3600000")
    );
    alter(
        &bed.source_config(),
        &topic,
        &[
            ConfigOp::Set("retention.ms".into(), "7200000".into()),
            ConfigOp::Set("min.insync.replicas".into(), "1".into()),
            ConfigOp::Set("max.message.bytes".into(), "2000000".into()),
        ],
    );
    let changed = Instant::now();
    eventually(
        "retention.ms on the destination",
        Duration::from_secs(10),
        async || {
            topic_configs(&dest, &topic)
                .await
                .unwrap()
                .get("retention.ms")
                .map(String::as_str)
                == Some("7200000")
        },
    )
    .await;
    eprintln!(
        "config change reached the destination after {:?} (interval 3s)",
        changed.elapsed()
    );
    let configs = topic_configs(&dest, &topic).await.unwrap();
    assert_eq!(
        configs.get("max.message.bytes").map(String::as_str),
        Some("2000000")
    );
    assert!(
        !configs.contains_key("min.insync.replicas"),
        "excluded by default: {configs:?}"
    );
    let m = s.mirror("dr").await;
    let part = m.status.unwrap().sync.topic_configs.unwrap();
    assert!(
        part.last_success_time.is_some() && part.last_error.is_none(),
        "{part:?}"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn partitions_added_on_the_source_are_mirrored_at_identical_offsets() {
    let bed = Testbed::get();
    let (s, _op, topic) = mirrored(bed, "sync-parts", 2, &[]).await;
    let admin: AdminClient<DefaultClientContext> = bed.source_config().create().unwrap();
    admin
        .create_partitions([&NewPartitions::new(&topic, 4)], &AdminOptions::new())
        .await
        .unwrap();
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(4000, 4, 0, 41),
        &[],
    )
    .unwrap();
    s.wait_topic(
        "t",
        "4 partitions MIRRORING",
        Duration::from_secs(60),
        |t| all_partitions(t, PartitionState::Mirroring, 4),
    )
    .await;
    let dest = bed.dest_config(DestUser::Admin);
    eventually(
        "catch-up of the new partitions",
        Duration::from_secs(60),
        async || (0..4).all(|p| watermarks(&dest, &topic, p).map(|w| w.1).unwrap_or(-1) == 1000),
    )
    .await;
    for p in 0..4 {
        let report = verify(
            bed,
            &bed.source_config(),
            &format!("{}/dr", s.ns),
            &topic,
            &topic,
            p,
            Isolation::ReadCommitted,
        );
        assert!(
            report.is_clean() && report.offsets_identical && report.matched == 1000,
            "partition {p}: {report:?}"
        );
    }
    s.cleanup().await;
}

#[tokio::test]
async fn source_acls_become_read_only_destination_acls_and_deletions_follow() {
    let bed = Testbed::get();
    let (s, _op, topic) = mirrored(bed, "sync-acls", 1, &[]).await;
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(100, 1, 0, 61),
        &[],
    )
    .unwrap();
    let group = unique_name("app-group");
    let source_acls = vec![
        acl(ResourceType::Topic, &topic, Operation::Read),
        acl(ResourceType::Topic, &topic, Operation::Write),
        acl(ResourceType::Topic, &topic, Operation::Describe),
        acl(ResourceType::Group, &group, Operation::Read),
    ];
    let source_admin: AdminClient<DefaultClientContext> = bed.source_config().create().unwrap();
    create_acls(source_admin.inner(), &source_acls, TIMEOUT).unwrap();
    let app = bed.dest_config(DestUser::App);
    let consume = |group: &str| -> Result<usize, String> {
        let consumer: BaseConsumer = app
            .clone()
            .set("group.id", group)
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&[&topic]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(8);
        let mut n = 0;
        while Instant::now() < deadline && n < 100 {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(_)) => n += 1,
                Some(Err(e)) => return Err(e.to_string()),
                None => {}
            }
        }
        Ok(n)
    };
    let g = group.clone();
    eventually(
        "app can consume on the destination",
        Duration::from_secs(40),
        async || consume(&g) == Ok(100),
    )
    .await;
    let produced = kmirror_e2e::kafka::produce_all(
        &app,
        &topic,
        &mixed_records(1, 1, 0, 62),
        // Not idempotent: the refusal is the record's own (an idempotent producer without
        // IDEMPOTENT_WRITE fails earlier, fatally, and reports its records purged).
        &[
            ("message.timeout.ms", "5000"),
            ("enable.idempotence", "false"),
        ],
    );
    let err = produced.expect_err("app must not write to a mirrored topic");
    assert!(
        err.to_string().contains("TopicAuthorizationFailed")
            || err.to_string().contains("authoriz"),
        "{err}"
    );
    // The fetcher principal keeps writing: mirroring goes on.
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(10, 1, 0, 63),
        &[],
    )
    .unwrap();
    let dest = bed.dest_config(DestUser::Admin);
    eventually("mirroring continues", Duration::from_secs(30), async || {
        watermarks(&dest, &topic, 0).unwrap().1 == 110
    })
    .await;

    // ACLs removed on the source disappear from the destination.
    delete_acls(source_admin.inner(), &source_acls, TIMEOUT).unwrap();
    let g = group.clone();
    eventually(
        "app loses access on the destination",
        Duration::from_secs(40),
        async || matches!(consume(&format!("{g}-2")), Err(e) if e.contains("uthoriz")),
    )
    .await;
    let summary = s.mirror("dr").await.status.unwrap().sync.acls.unwrap();
    assert!(summary.last_error.is_none(), "{summary:?}");
    let _ = RDKafkaErrorCode::TopicAuthorizationFailed;
    s.cleanup().await;
}

/// Whether every partition's last error contains `text`.
fn every_error_says(t: &MirrorTopic, text: &str) -> bool {
    t.status.as_ref().is_some_and(|st| {
        st.partitions
            .iter()
            .all(|p| p.last_error.as_deref().is_some_and(|e| e.contains(text)))
    })
}

/// A source topic that disappears is not a failover: a mistaken deletion, a wrong bootstrap
/// address or a metadata glitch must not make the destination writable on its own. Seen missing
/// on two looks at the same source cluster, the partition goes FAILED with the reason and the
/// fix, the destination keeps its data and stays read-only (not STOPPED); the user fails over
/// explicitly (spec.state: Stopped) and gets STOPPED with the last mirrored offset.
#[tokio::test]
async fn deleting_the_source_topic_fails_the_mirror_topic_read_only_until_a_failover() {
    let bed = Testbed::get();
    let (s, _op, topic) = mirrored(bed, "sync-delete", 1, &[]).await;
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(100, 1, 0, 71),
        &[],
    )
    .unwrap();
    let dest = bed.dest_config(DestUser::Admin);
    eventually("catch-up", Duration::from_secs(60), async || {
        watermarks(&dest, &topic, 0).unwrap().1 == 100
    })
    .await;
    delete_topic(&bed.source_config(), &topic).await.unwrap();
    // The fetcher may see the deletion first (FAILED, retried: the topic could be back at the
    // next look); FAILED for good comes with the operator's second look.
    let t = s
        .wait_topic(
            "t",
            "FAILED for good, not writable",
            Duration::from_secs(90),
            |t| {
                let stopped = t.status.as_ref().is_some_and(|st| {
                    st.partitions.iter().any(|p| {
                        matches!(p.state, PartitionState::Stopping | PartitionState::Stopped)
                    })
                });
                assert!(
                    !stopped,
                    "a missing source topic failed the topic over: {:?}",
                    t.status
                );
                all_partitions(t, PartitionState::Failed, 1)
                    && every_error_says(t, "no longer exists")
            },
        )
        .await;
    let status = t.status.unwrap();
    let p = &status.partitions[0];
    let reason = p.last_error.clone().unwrap_or_default();
    assert!(
        reason.contains("no longer exists") && reason.contains("spec.state: Stopped"),
        "the reason names what happened and the fix: {p:?}"
    );
    assert_eq!(
        condition(&status.conditions, "Ready").map(|c| c.0),
        Some("False".to_string()),
        "desired Mirroring, got FAILED"
    );
    // It stays so: nothing promotes the destination but the user.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let later = s.topic("t").await.unwrap().status.unwrap();
    assert_eq!(
        later.partitions[0].state,
        PartitionState::Failed,
        "{later:?}"
    );
    assert_eq!(
        watermarks(&dest, &topic, 0).unwrap().1,
        100,
        "destination data kept"
    );
    // The user fails over: STOPPED, with the last mirrored offset.
    s.apply_topic(
        "t",
        json!({"mirror": "dr", "sourceTopic": topic, "state": "Stopped"}),
    )
    .await;
    let t = s
        .wait_topic("t", "STOPPED", Duration::from_secs(90), |t| {
            all_partitions(t, PartitionState::Stopped, 1)
        })
        .await;
    let p = &t.status.unwrap().partitions[0];
    assert_eq!(
        p.last_mirrored_offset,
        Some(99),
        "the last mirrored offset is kept: {p:?}"
    );
    s.cleanup().await;
}

/// Once a topic is failed over the destination is the primary: the old source's later ACL
/// changes and new partitions do not reach it, and deleting its (Stopped) MirrorTopic leaves
/// the applications' ACLs in place.
#[tokio::test]
async fn a_failed_over_topic_no_longer_follows_the_old_source_and_keeps_its_acls() {
    let bed = Testbed::get();
    let (s, _op, topic) = mirrored(bed, "sync-after-fo", 2, &[]).await;
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(100, 2, 0, 71),
        &[],
    )
    .unwrap();
    let source_acls = kmirror_e2e::kafka::app_acls(&topic, &unique_name("fo-group"));
    let source_admin: AdminClient<DefaultClientContext> = bed.source_config().create().unwrap();
    create_acls(source_admin.inner(), &source_acls, TIMEOUT).unwrap();
    let dest = bed.dest_config(DestUser::Admin);
    let dest_admin: AdminClient<DefaultClientContext> = dest.create().unwrap();
    let app_writes = || {
        kmirror_state::kafka_admin::describe_acls(
            dest_admin.inner(),
            &acl(ResourceType::Topic, &topic, Operation::Write),
            TIMEOUT,
        )
        .is_ok_and(|b| !b.is_empty())
    };
    // The ACL sync has seen the app's bindings (READ reaches the destination while mirroring)
    // before the failover: the failover applies the set the sync read.
    eventually(
        "the app's READ reached the destination",
        Duration::from_secs(60),
        async || {
            kmirror_state::kafka_admin::describe_acls(
                dest_admin.inner(),
                &acl(ResourceType::Topic, &topic, Operation::Read),
                TIMEOUT,
            )
            .is_ok_and(|b| !b.is_empty())
        },
    )
    .await;
    s.patch_topic(
        "t",
        json!({"state": "Stopped", "failover": {"mode": "Immediate"}}),
    )
    .await;
    s.wait_topic("t", "STOPPED", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Stopped, 2)
    })
    .await;
    eventually(
        "the app may write to the new primary",
        Duration::from_secs(30),
        async || app_writes(),
    )
    .await;

    // The old source drops the app's WRITE and grows to 4 partitions.
    delete_acls(
        source_admin.inner(),
        &[acl(ResourceType::Topic, &topic, Operation::Write)],
        TIMEOUT,
    )
    .unwrap();
    source_admin
        .create_partitions([&NewPartitions::new(&topic, 4)], &AdminOptions::new())
        .await
        .unwrap();
    let partitions = |config: &ClientConfig| -> usize {
        let c: BaseConsumer = config.create().unwrap();
        c.fetch_metadata(Some(&topic), TIMEOUT).unwrap().topics()[0]
            .partitions()
            .len()
    };
    eventually(
        "the source has 4 partitions",
        Duration::from_secs(30),
        async || partitions(&bed.source_config()) == 4,
    )
    .await;
    // Three sync intervals (3 s) and reconciles later, nothing followed.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(app_writes(), "the app keeps WRITE on the new primary");
    assert_eq!(partitions(&dest), 2, "the new primary keeps its partitions");
    let t = s.topic("t").await.unwrap();
    let st = t.status.as_ref().unwrap();
    assert!(
        st.partitions.len() == 2 && all_partitions(&t, PartitionState::Stopped, 2),
        "{st:?}"
    );

    // Deleting the failed-over MirrorTopic leaves the applications' ACLs alone.
    let api: kube::Api<kmirror_crds::v1alpha1::MirrorTopic> =
        kube::Api::namespaced(s.client.clone(), &s.ns);
    api.delete("t", &Default::default()).await.unwrap();
    eventually(
        "the MirrorTopic is gone",
        Duration::from_secs(60),
        async || s.topic("t").await.is_none(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        app_writes(),
        "deleting the MirrorTopic removed the app's WRITE on the new primary"
    );
    s.cleanup().await;
}
