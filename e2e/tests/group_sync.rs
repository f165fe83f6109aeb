//! Consumer-group offset sync against the real clusters: offsets copied exactly, active groups
//! skipped, a group that cannot be synced reported without holding back the others, and the
//! one-shot `kmirror-sync-groups` command.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{
    DestUser, committed_offsets, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{eventually, mirrored_topic as mirrored};
use kmirror_state::kafka_admin::{
    AclBinding, Operation, PatternType, Permission, ResourceType, create_acls, delete_acls,
};
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(15);

fn commit(config: &ClientConfig, group: &str, topic: &str, offsets: &[(i32, i64)]) {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
            .unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
}

fn committed(config: &ClientConfig, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    committed_offsets(config, group, topic, partitions)
        .into_values()
        .map(|o| (o >= 0).then_some(o))
        .collect()
}

#[tokio::test]
async fn group_offsets_are_copied_exactly_and_active_groups_are_skipped() {
    let bed = Testbed::get();
    let (s, _op, topic) = mirrored(bed, "sync-groups", 2, &[]).await;
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(2000, 2, 0, 51),
        &[],
    )
    .unwrap();
    let dest = bed.dest_config(DestUser::Admin);
    eventually("catch-up", Duration::from_secs(60), async || {
        (0..2).all(|p| watermarks(&dest, &topic, p).unwrap().1 == 1000)
    })
    .await;
    let group = unique_name("billing");
    let busy = unique_name("busy");
    commit(&bed.source_config(), &group, &topic, &[(0, 321), (1, 777)]);
    // A group that is active on the destination must not be touched.
    let stop = Arc::new(AtomicBool::new(false));
    let member = {
        let (config, busy, topic, stop) = (dest.clone(), busy.clone(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let consumer: BaseConsumer = config
                .clone()
                .set("group.id", &busy)
                .set("enable.auto.commit", "false")
                .create()
                .unwrap();
            consumer.subscribe(&[&topic]).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = consumer.poll(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    commit(&bed.source_config(), &busy, &topic, &[(0, 5)]);
    let t0 = Instant::now();
    eventually(
        "group offsets on the destination",
        Duration::from_secs(10),
        async || committed(&dest, &group, &topic, 2) == vec![Some(321), Some(777)],
    )
    .await;
    eprintln!(
        "group offsets synced after {:?} (interval 3s)",
        t0.elapsed()
    );
    eventually(
        "the active group reported",
        Duration::from_secs(15),
        async || {
            s.mirror("dr")
                .await
                .status
                .and_then(|st| st.sync.consumer_groups)
                .and_then(|g| g.summary)
                .is_some_and(|summary| summary.contains(&busy))
        },
    )
    .await;
    assert_ne!(
        committed(&dest, &busy, &topic, 1),
        vec![Some(5)],
        "an active group is not overwritten"
    );
    stop.store(true, Ordering::Relaxed);
    member.join().unwrap();
    s.cleanup().await;
}

#[tokio::test]
async fn one_shot_group_sync_command_copies_offsets_exactly() {
    use kmirror_e2e::fetcher::{
        FetcherProcess, destination_args, source_args, target_dir, wait_until,
    };
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("sync-once");
    create_topic(&source, &topic, 2, &[]).await.unwrap();
    create_topic(&dest, &topic, 2, &[]).await.unwrap();
    produce_all(&source, &topic, &mixed_records(400, 2, 0, 81), &[]).unwrap();
    let mirror = format!("e2e/{topic}");
    let mut args: Vec<String> = [
        "--mirror",
        &mirror,
        "--source-topic",
        &topic,
        "--partitions",
        "0,1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(source_args(bed));
    args.extend(destination_args(bed));
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("catch-up", Duration::from_secs(60), || {
        (0..2).all(|p| watermarks(&dest, &topic, p).unwrap().1 == 200)
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let group = unique_name("once");
    commit(&source, &group, &topic, &[(0, 123), (1, 45)]);
    let mut cmd = std::process::Command::new(target_dir().join("debug/kmirror-sync-groups"));
    cmd.args([
        "--mirror",
        &mirror,
        "--source-topic",
        &topic,
        "--group",
        &group,
    ]);
    cmd.args(source_args(bed)).args(destination_args(bed));
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 groups synced"), "{stdout}");
    assert_eq!(
        committed(&dest, &group, &topic, 2),
        vec![Some(123), Some(45)]
    );
}

/// A group the destination refuses (here: an ACL denies the mirror's principal the group) fails
/// on its own: the groups after it in the same round are synced, the status names the group and
/// the broker's reason, and once the refusal is lifted the group is synced too.
#[tokio::test]
async fn a_group_the_destination_refuses_does_not_stop_the_others() {
    let bed = Testbed::get();
    let (s, _op, topic) = mirrored(bed, "sync-groups-refused", 1, &[]).await;
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(100, 1, 0, 91),
        &[],
    )
    .unwrap();
    let dest = bed.dest_config(DestUser::Admin);
    eventually("catch-up", Duration::from_secs(60), async || {
        watermarks(&dest, &topic, 0).unwrap().1 == 100
    })
    .await;
    // Groups are synced in name order: the refused one comes first.
    let refused = unique_name("a-refused");
    let fine = unique_name("b-fine");
    let deny = AclBinding {
        resource_type: ResourceType::Group,
        name: refused.clone(),
        pattern: PatternType::Literal,
        principal: "User:mirror".into(),
        host: "*".into(),
        operation: Operation::All,
        permission: Permission::Deny,
    };
    let dest_admin: AdminClient<DefaultClientContext> = dest.create().unwrap();
    create_acls(dest_admin.inner(), std::slice::from_ref(&deny), TIMEOUT).unwrap();
    commit(&bed.source_config(), &refused, &topic, &[(0, 40)]);
    commit(&bed.source_config(), &fine, &topic, &[(0, 60)]);
    eventually(
        "the other group synced",
        Duration::from_secs(20),
        async || committed(&dest, &fine, &topic, 1) == vec![Some(60)],
    )
    .await;
    eventually(
        "the refused group named in status",
        Duration::from_secs(20),
        async || {
            s.mirror("dr")
                .await
                .status
                .and_then(|st| st.sync.consumer_groups)
                .and_then(|g| g.last_error)
                .is_some_and(|e| e.contains(&refused) && e.contains("uthoriz"))
        },
    )
    .await;
    assert_eq!(
        committed(&dest, &refused, &topic, 1),
        vec![None],
        "the refused group has no offsets on the destination"
    );
    delete_acls(dest_admin.inner(), std::slice::from_ref(&deny), TIMEOUT).unwrap();
    eventually(
        "the group synced once the destination allows it",
        Duration::from_secs(20),
        async || committed(&dest, &refused, &topic, 1) == vec![Some(40)],
    )
    .await;
    s.cleanup().await;
}
