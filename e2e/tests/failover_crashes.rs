//! The operator crashes (a failpoint aborts it, like a SIGKILL) at every step of a graceful
//! failover's end, and of a failback with divergence under each policy; a new operator finishes
//! the same failover or failback. After a failover the last mirrored offset is the source end
//! seen when STOPPING began, the consumer group's offsets on the destination are never moved
//! back once the topic became writable, and the application holds WRITE exactly when the topic
//! is STOPPED. After a failback the divergent records are quarantined once, and the old source
//! ends up holding what the policy says, record for record.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{
    DestUser, app_acls, app_may, committed_offsets, consume_and_commit, create_topic,
    mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kmirror_e2e::soak::mirror::plugin;
use kmirror_fetcher::Isolation;
use kmirror_fetcher::verify::{Side, verify_partition};
use kmirror_state::kafka_admin::{Operation, create_acls};
use kmirror_state::kafka_record::RecordData;
use kmirror_state::offset_map::OffsetMap;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use serde_json::json;

const PARTITIONS: i32 = 2;
const T: Duration = Duration::from_secs(15);

/// Fails a 2-partition topic over gracefully with an operator that crashes at `failpoint`,
/// then lets a fresh operator finish; checks the end state.
async fn crash_at(failpoint: &str) {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "fo-crash").await;
    let topic = unique_name("fo-crash");
    let group = unique_name("fo-crash-group");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    let admin: AdminClient<DefaultClientContext> = source.create().unwrap();
    create_acls(admin.inner(), &app_acls(&topic, &group), T).unwrap();
    produce_all(&source, &topic, &mixed_records(600, PARTITIONS, 0, 11), &[]).unwrap();
    let mut op =
        OperatorProcess::spawn_with_env(bed, &s.ns, &[], &[("KMIRROR_FAILPOINTS", failpoint)]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;
    // The group read part of the topic on the source.
    let committed = consume_and_commit(&source, &topic, &group, PARTITIONS, 100);
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| watermarks(&source, &topic, p).unwrap().1)
        .collect();
    assert!(
        !app_may(&dest, &topic, Operation::Write),
        "not writable while mirroring"
    );

    s.patch_topic("t", json!({"state": "Stopped"})).await;
    crashed(&s, &mut op, failpoint, &topic).await;
    let t = s.topic("t").await.unwrap();
    assert!(
        !all_partitions(&t, PartitionState::Stopped, PARTITIONS as usize),
        "not STOPPED yet at {failpoint}"
    );
    // While the operator is down: if the topic is writable already, the applications act on
    // the new primary — they write, and a consumer of the group moves on and commits.
    let writable = app_may(&dest, &topic, Operation::Write);
    assert_eq!(
        writable,
        failpoint == "failover-writable",
        "WRITE is granted exactly at the last step (crashed at {failpoint})"
    );
    let mut expected_group = committed.clone();
    if writable {
        let app = bed.dest_config(DestUser::App);
        produce_all(&app, &topic, &mixed_records(50, PARTITIONS, 0, 12), &[]).unwrap();
        expected_group = consume_and_commit(&dest, &topic, &group, PARTITIONS, 250);
        assert_ne!(expected_group, committed);
    }

    // A new operator finishes the same failover.
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let t = s
        .wait_topic("t", "STOPPED", Duration::from_secs(120), |t| {
            all_partitions(t, PartitionState::Stopped, PARTITIONS as usize)
        })
        .await;
    let lmos: BTreeMap<i32, Option<i64>> = t
        .status
        .as_ref()
        .unwrap()
        .partitions
        .iter()
        .map(|p| (p.partition, p.last_mirrored_offset))
        .collect();
    for p in 0..PARTITIONS {
        assert_eq!(
            lmos[&p],
            Some(ends[p as usize] - 1),
            "partition {p}: the last mirrored offset is the source end seen when STOPPING \
             began (crashed at {failpoint})"
        );
    }
    assert!(
        app_may(&dest, &topic, Operation::Write),
        "writable once STOPPED"
    );
    assert_eq!(
        committed_offsets(&dest, &group, &topic, PARTITIONS),
        expected_group,
        "the group on the destination: synced once, never moved back (crashed at {failpoint})"
    );
    drop(op);
    s.cleanup().await;
}

#[tokio::test]
async fn a_crash_after_the_last_mirrored_offset_is_recorded() {
    crash_at("failover-lmo-recorded").await;
}

#[tokio::test]
async fn a_crash_after_the_final_group_sync() {
    crash_at("failover-groups-synced").await;
}

#[tokio::test]
async fn a_crash_after_the_topic_became_writable() {
    crash_at("failover-writable").await;
}

/// Waits until `op` died at a failpoint (fails when it never gets there).
async fn crashed(s: &Scenario, op: &mut OperatorProcess, failpoint: &str, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(150);
    while op.alive() {
        let statuses: Vec<String> = s
            .topics()
            .await
            .iter()
            .map(|t| serde_json::to_string(&t.status).unwrap_or_default())
            .collect();
        assert!(
            Instant::now() < deadline,
            "the operator never reached failpoint {failpoint} ({topic}): {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = op.log_text();
    assert!(
        log.contains("failpoint reached") && log.contains(&format!("failpoint=\"{failpoint}\"")),
        "the operator died elsewhere than at {failpoint}: {log}"
    );
}

fn records(config: &ClientConfig, topic: &str) -> Vec<RecordData> {
    kmirror_e2e::kafka::read_all(config, topic, 0, "read_committed").unwrap()
}

/// An immediate failover of a 1-partition topic (500 records), 30 records written to the old
/// source afterwards (divergent) and 40 to the new primary; then a failback with `policy`,
/// run by operators that crash at each of `failpoints` in turn, and finished by a last one.
async fn failback_crashing_at(policy: &str, failpoints: &[&str]) {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "fb-crash").await;
    let topic = unique_name("fb-crash");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, 1, &[]).await.unwrap();
    produce_all(&source, &topic, &mixed_records(500, 1, 0, 5), &[]).unwrap();
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic(
        "t",
        json!({"mirror": "dr", "sourceTopic": topic, "failover": {"mode": "Immediate"}}),
    )
    .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, 1)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while watermarks(&dest, &topic, 0).unwrap().1 != 500 {
        assert!(Instant::now() < deadline, "no catch-up");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    plugin(
        bed,
        &s.ns,
        &[
            "failover",
            "dr",
            "--all",
            "--immediate",
            "--wait",
            "--timeout",
            "2m",
        ],
    )
    .expect("failover");
    let divergent = mixed_records(30, 1, 0, 66);
    produce_all(&source, &topic, &divergent, &[]).unwrap();
    produce_all(&dest, &topic, &mixed_records(40, 1, 0, 77), &[]).unwrap();
    drop(op);

    let mut op =
        OperatorProcess::spawn_with_env(bed, &s.ns, &[], &[("KMIRROR_FAILPOINTS", failpoints[0])]);
    plugin(bed, &s.ns, &["failback", "dr", "--all"]).expect("failback");
    plugin(
        bed,
        &s.ns,
        &["resolve", "dr-failback", "--all", "--policy", policy],
    )
    .expect("resolve");
    for (i, failpoint) in failpoints.iter().enumerate() {
        crashed(&s, &mut op, failpoint, &topic).await;
        op = match failpoints.get(i + 1) {
            Some(next) => {
                OperatorProcess::spawn_with_env(bed, &s.ns, &[], &[("KMIRROR_FAILPOINTS", next)])
            }
            None => OperatorProcess::spawn(bed, &s.ns, &[]),
        };
    }
    let reverse = s
        .topics()
        .await
        .into_iter()
        .find(|t| t.spec.mirror == "dr-failback")
        .expect("the failback topic");
    let reverse = reverse.metadata.name.clone().unwrap();
    s.wait_topic(&reverse, "MIRRORING", Duration::from_secs(150), |t| {
        all_partitions(t, PartitionState::Mirroring, 1)
    })
    .await;

    // Quarantined once, byte for byte.
    let quarantine = format!("{topic}.kmirror-quarantine");
    let quarantined = records(&source, &quarantine);
    assert_eq!(
        quarantined.len(),
        30,
        "each divergent record quarantined once"
    );
    assert!(
        quarantined
            .iter()
            .zip(&divergent)
            .all(|(q, d)| q.value == d.value && q.key == d.key),
        "the quarantine holds the divergent records, in order"
    );
    let primary = records(&dest, &topic);
    let want_end = if policy == "Recreate" { 540 } else { 570 };
    let deadline = Instant::now() + Duration::from_secs(90);
    while watermarks(&source, &topic, 0).map(|w| w.1).unwrap_or(0) != want_end {
        assert!(
            Instant::now() < deadline,
            "the old source holds {:?}, not {want_end}",
            watermarks(&source, &topic, 0)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let old_source = records(&source, &topic);
    if policy == "Recreate" {
        let report = verify_partition(
            &Side {
                config: dest.clone(),
                topic: topic.clone(),
            },
            &Side {
                config: source.clone(),
                topic: topic.clone(),
            },
            0,
            &OffsetMap::identity(),
            Isolation::ReadCommitted,
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(
            report.is_clean() && report.offsets_identical && report.matched == 540,
            "the recreated topic is the new primary's log: {report:?}"
        );
    } else {
        assert!(
            old_source[500..530]
                .iter()
                .zip(&divergent)
                .all(|(a, b)| a.value == b.value),
            "divergent records kept"
        );
        assert!(
            old_source[530..]
                .iter()
                .zip(&primary[500..])
                .all(|(a, b)| a.same_content(b)),
            "the new primary's 40 records follow them"
        );
    }
    drop(op);
    s.cleanup().await;
}

#[tokio::test]
async fn failback_keeping_divergence_survives_a_crash_after_each_step() {
    failback_crashing_at(
        "KeepAndTranslate",
        &[
            "failback-quarantine-created",
            "failback-quarantined",
            "failback-seeded",
        ],
    )
    .await;
}

#[tokio::test]
async fn failback_recreating_the_topic_survives_a_crash_after_each_step() {
    failback_crashing_at(
        "Recreate",
        &[
            "failback-divergence-recorded",
            "failback-recreated",
            "failback-forgotten",
        ],
    )
    .await;
}
