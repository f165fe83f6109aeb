//! Failover and failback end to end: the operator, fetcher pods on the node agent, real Kafka,
//! and the `kubectl mirror` plugin.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{
    DestUser, TestRecord, app_acls, consume_and_commit, create_topic, mixed_records, produce_all,
    read_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kmirror_e2e::{Testbed, has_row};
use kmirror_fetcher::Isolation;
use kmirror_fetcher::verify::{Side, verify_partition};
use kmirror_state::kafka_admin::create_acls;
use kmirror_state::offset_map::OffsetMap;
use kmirror_state::store;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use serde_json::json;

const T: Duration = Duration::from_secs(15);

fn plugin(bed: &Testbed, ns: &str, args: &[&str]) -> (i32, String, String) {
    kmirror_e2e::operator::kubectl_mirror(bed, ns, args)
}

fn keep_producing(
    source: ClientConfig,
    topic: String,
    partitions: i32,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut seed = 1000;
        while !stop.load(Ordering::Relaxed) {
            produce_all(
                &source,
                &topic,
                &mixed_records(200, partitions, 0, seed),
                &[],
            )
            .unwrap();
            sent.fetch_add(200, Ordering::Relaxed);
            seed += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

async fn mirror(bed: &Testbed, s: &Scenario, topic: &str, partitions: i32) {
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(60), |t| {
        all_partitions(t, PartitionState::Mirroring, partitions as usize)
    })
    .await;
}

#[tokio::test]
async fn graceful_failover_resumes_consumers_at_the_same_offsets_and_lets_the_app_write() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "fo-graceful").await;
    let topic = unique_name("fo");
    let group = unique_name("fo-group");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, 2, &[]).await.unwrap();
    let admin: AdminClient<DefaultClientContext> = source.create().unwrap();
    create_acls(admin.inner(), &app_acls(&topic, &group), T).unwrap();
    produce_all(&source, &topic, &mixed_records(2000, 2, 0, 7), &[]).unwrap();
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    mirror(bed, &s, &topic, 2).await;

    // A consumer group reads part of the topic on the source and commits.
    let committed = consume_and_commit(&source, &topic, &group, 2, 400);
    // A producer keeps writing while we fail over.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let producer = keep_producing(source.clone(), topic.clone(), 2, stop.clone(), sent.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let (code, out, err) = plugin(
        bed,
        &s.ns,
        &[
            "failover",
            "dr",
            "--topic",
            &topic,
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    assert_eq!(code, 0, "failover failed:\n{out}\n{err}");
    eprintln!("graceful failover took {:?}:\n{out}", started.elapsed());
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let t = s.topic("t").await.unwrap();
    assert!(all_partitions(&t, PartitionState::Stopped, 2));

    // The group resumes on the destination at exactly the next record: nothing re-delivered,
    // nothing skipped.
    let consumer: BaseConsumer = dest
        .clone()
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let source_records: BTreeMap<i32, Vec<_>> = (0..2)
        .map(|p| (p, read_all(&source, &topic, p, "read_committed").unwrap()))
        .collect();
    let mut first: BTreeMap<i32, i64> = BTreeMap::new();
    let mut redelivered = 0;
    let mut skipped = 0;
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while first.len() < 2 || seen < 200 {
        assert!(
            Instant::now() < deadline,
            "the consumer did not resume on the destination"
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let p = m.partition();
            let expected_next = first.get(&p).map_or(committed[&p], |_| -1);
            if expected_next >= 0 {
                first.insert(p, m.offset());
                if m.offset() < expected_next {
                    redelivered += expected_next - m.offset();
                }
                if m.offset() > expected_next {
                    skipped += m.offset() - expected_next;
                }
            }
            let copy = kmirror_state::kafka_record::RecordData::from_message(&m);
            assert!(
                source_records[&p]
                    .iter()
                    .any(|r| r.offset == m.offset() && r.same_content(&copy)),
                "destination record {p}@{} is the source's",
                m.offset()
            );
            seen += 1;
        }
    }
    eprintln!(
        "group {group} resumed at {first:?} (committed {committed:?}): {redelivered} re-delivered, {skipped} skipped"
    );
    assert_eq!((redelivered, skipped), (0, 0));
    assert_eq!(first, committed);

    // app may now write to the destination.
    let app = bed.dest_config(DestUser::App);
    let mut written = false;
    let deadline = Instant::now() + Duration::from_secs(40);
    while !written {
        written = produce_all(
            &app,
            &topic,
            &mixed_records(10, 2, 0, 99),
            &[("message.timeout.ms", "5000")],
        )
        .is_ok();
        assert!(
            Instant::now() < deadline,
            "app cannot produce to the failed-over topic"
        );
    }
    // LMOs are reported per partition: a row each, as the status has them.
    let status = s.topic("t").await.unwrap().status.unwrap();
    for p in &status.partitions {
        let (partition, lmo) = (
            p.partition.to_string(),
            p.last_mirrored_offset.unwrap().to_string(),
        );
        assert!(
            has_row(&out, &[&topic, &partition, "STOPPED", &lmo]),
            "the plugin prints partition {partition}'s last mirrored offset {lmo}: {out}"
        );
    }

    s.cleanup().await;
}

#[tokio::test]
async fn failback_after_a_graceful_failover_copies_only_the_delta_at_identical_offsets() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "fo-back").await;
    let topic = unique_name("fo-back");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, 2, &[]).await.unwrap();
    produce_all(&source, &topic, &mixed_records(2000, 2, 0, 17), &[]).unwrap();
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    mirror(bed, &s, &topic, 2).await;
    // The applications stop writing to the source, then the topic fails over gracefully.
    let (code, out, err) = plugin(
        bed,
        &s.ns,
        &[
            "failover",
            "dr",
            "--topic",
            &topic,
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    assert_eq!(code, 0, "failover failed:\n{out}\n{err}");
    let lmo_ends: Vec<i64> = s
        .topic("t")
        .await
        .unwrap()
        .status
        .unwrap()
        .partitions
        .iter()
        .map(|p| p.last_mirrored_offset.unwrap() + 1)
        .collect();
    let before: Vec<i64> = (0..2)
        .map(|p| watermarks(&source, &topic, p).unwrap().1)
        .collect();
    assert_eq!(
        before, lmo_ends,
        "the source ends at the last mirrored offsets: no divergence"
    );
    // The new primary takes writes.
    produce_all(&dest, &topic, &mixed_records(333, 2, 0, 18), &[]).unwrap();
    let new_on_primary: i64 = (0..2)
        .map(|p| watermarks(&dest, &topic, p).unwrap().1)
        .sum::<i64>()
        - lmo_ends.iter().sum::<i64>();
    assert_eq!(new_on_primary, 333);
    let (code, out, err) = plugin(
        bed,
        &s.ns,
        &[
            "failback",
            "dr",
            "--topic",
            &topic,
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    assert_eq!(code, 0, "failback failed:\n{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..2).any(|p| {
        watermarks(&source, &topic, p).unwrap().1 != watermarks(&dest, &topic, p).unwrap().1
    }) {
        assert!(Instant::now() < deadline, "failback did not catch up");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let crossed: i64 = (0..2)
        .map(|p| watermarks(&source, &topic, p).unwrap().1)
        .sum::<i64>()
        - before.iter().sum::<i64>();
    eprintln!("failback copied {crossed} records ({new_on_primary} written on the new primary)");
    assert_eq!(crossed, new_on_primary, "only the delta crossed back");
    for p in 0..2 {
        let report = verify_partition(
            &Side {
                config: dest.clone(),
                topic: topic.clone(),
            },
            &Side {
                config: source.clone(),
                topic: topic.clone(),
            },
            p,
            &OffsetMap::identity(),
            Isolation::ReadCommitted,
            Duration::from_secs(120),
        )
        .unwrap();
        assert!(
            report.is_clean() && report.offsets_identical && report.trailing == 0,
            "old source equals new primary: {report:?}"
        );
    }
    s.cleanup().await;
}

/// Records by (partition) read from a topic.
fn records_of(
    config: &ClientConfig,
    topic: &str,
    p: i32,
) -> Vec<kmirror_state::kafka_record::RecordData> {
    read_all(config, topic, p, "read_committed").unwrap()
}

#[tokio::test]
async fn failback_with_divergence_quarantines_and_applies_both_policies() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "fo-diverge").await;
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let keep = unique_name("keep");
    let recreate = unique_name("recreate");
    for t in [&keep, &recreate] {
        create_topic(&source, t, 1, &[]).await.unwrap();
        produce_all(&source, t, &mixed_records(500, 1, 0, 5), &[]).unwrap();
    }
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    for (name, t) in [("keep", &keep), ("recreate", &recreate)] {
        s.apply_topic(
            name,
            json!({"mirror": "dr", "sourceTopic": t, "failover": {"mode": "Immediate"}}),
        )
        .await;
    }
    for name in ["keep", "recreate"] {
        s.wait_topic(name, "MIRRORING", Duration::from_secs(60), |t| {
            all_partitions(t, PartitionState::Mirroring, 1)
        })
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while [&keep, &recreate]
        .iter()
        .any(|t| watermarks(&dest, t, 0).unwrap().1 != 500)
    {
        assert!(Instant::now() < deadline, "no catch-up");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Immediate failover; then the old source receives extra writes (divergence) and the new
    // primary receives its own.
    let (code, out, err) = plugin(
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
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let divergent: Vec<TestRecord> = mixed_records(30, 1, 0, 66);
    for t in [&keep, &recreate] {
        produce_all(&source, t, &divergent, &[]).unwrap();
        produce_all(&dest, t, &mixed_records(40, 1, 0, 77), &[]).unwrap();
    }
    let (code, out, err) = plugin(bed, &s.ns, &["failback", "dr", "--all"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let reverse_topics = s
        .topics()
        .await
        .into_iter()
        .filter(|t| t.spec.mirror == "dr-failback")
        .collect::<Vec<_>>();
    assert_eq!(reverse_topics.len(), 2);
    let reverse_name = |t: &str| {
        reverse_topics
            .iter()
            .find(|r| r.destination_topic() == t)
            .unwrap()
            .metadata
            .name
            .clone()
            .unwrap()
    };
    // Divergence is reported per partition with its offset range; the records are quarantined
    // byte for byte.
    for t in [&keep, &recreate] {
        let mt = s
            .wait_topic(
                &reverse_name(t),
                "divergence reported",
                Duration::from_secs(90),
                |m| {
                    m.status.as_ref().is_some_and(|st| {
                        st.partitions.iter().any(|p| {
                            p.divergence
                                .as_ref()
                                .is_some_and(|d| d.quarantined_records == 30)
                        })
                    })
                },
            )
            .await;
        let d = mt.status.unwrap().partitions[0].divergence.clone().unwrap();
        assert_eq!((d.from_offset, d.to_offset), (500, 530), "{d:?}");
        let quarantined = records_of(&source, &d.quarantine_topic, 0);
        let originals: Vec<_> = records_of(&source, t, 0)
            .into_iter()
            .filter(|r| r.offset >= 500)
            .collect();
        assert_eq!(quarantined.len(), 30);
        assert!(
            quarantined
                .iter()
                .zip(&originals)
                .all(|(q, o)| q.same_content(o)),
            "quarantine holds exact copies"
        );
    }
    // Policy KeepAndTranslate: the divergent records stay; the new primary's delta follows them.
    let (code, out, err) = plugin(
        bed,
        &s.ns,
        &[
            "resolve",
            "dr-failback",
            "--topic",
            &keep,
            "--policy",
            "KeepAndTranslate",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    s.wait_topic(
        &reverse_name(&keep),
        "MIRRORING",
        Duration::from_secs(90),
        |t| all_partitions(t, PartitionState::Mirroring, 1),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while watermarks(&source, &keep, 0).unwrap().1 != 570 {
        assert!(
            Instant::now() < deadline,
            "keep: delta not copied ({:?})",
            watermarks(&source, &keep, 0)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let old_source = records_of(&source, &keep, 0);
    let primary = records_of(&dest, &keep, 0);
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
        "delta copied after them"
    );
    let map = store::load(&source, "__kmirror_state", |k| k.topic == keep, T).unwrap();
    let map = map.values().next().unwrap().offset_map().unwrap();
    assert_eq!(
        map.src_to_dst(500),
        530,
        "offsets translate through the map"
    );

    // Policy Recreate: the old source topic is recreated and gets exactly the new primary's log.
    let (code, out, err) = plugin(
        bed,
        &s.ns,
        &[
            "resolve",
            "dr-failback",
            "--topic",
            &recreate,
            "--policy",
            "Recreate",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    s.wait_topic(
        &reverse_name(&recreate),
        "MIRRORING",
        Duration::from_secs(120),
        |t| all_partitions(t, PartitionState::Mirroring, 1),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while watermarks(&source, &recreate, 0).map(|w| w.1).unwrap_or(0) != 540 {
        assert!(
            Instant::now() < deadline,
            "recreate: not re-mirrored ({:?})",
            watermarks(&source, &recreate, 0)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let report = verify_partition(
        &Side {
            config: dest.clone(),
            topic: recreate.clone(),
        },
        &Side {
            config: source.clone(),
            topic: recreate.clone(),
        },
        0,
        &OffsetMap::identity(),
        Isolation::ReadCommitted,
        Duration::from_secs(60),
    )
    .unwrap();
    assert!(
        report.is_clean() && report.offsets_identical && report.matched == 540,
        "{report:?}"
    );
    let st = s
        .topic(&reverse_name(&recreate))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        st.partitions[0]
            .divergence
            .as_ref()
            .and_then(|d| d.resolution.clone())
            .as_deref(),
        Some("recreated")
    );
    s.cleanup().await;
}

#[tokio::test]
async fn killing_the_operator_during_stopping_still_completes_the_same_failover() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "fo-kill").await;
    let topic = unique_name("fo-kill");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, 2, &[]).await.unwrap();
    let mut spec = Scenario::mirror_spec(bed);
    // A slow fetcher so that the graceful drain takes a while.
    spec["fetcher"] = json!({"throttleBytesPerSecond": 100000});
    s.apply_mirror("dr", spec).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let mut op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.wait_topic("t", "MIRRORING", Duration::from_secs(60), |t| {
        all_partitions(t, PartitionState::Mirroring, 2)
    })
    .await;
    let records: Vec<TestRecord> = (0..3000)
        .map(|i| TestRecord {
            partition: i % 2,
            key: None,
            value: Some(vec![b'x'; 1000]),
            headers: vec![],
        })
        .collect();
    produce_all(&source, &topic, &records, &[]).unwrap();
    let ends: Vec<i64> = (0..2)
        .map(|p| watermarks(&source, &topic, p).unwrap().1)
        .collect();
    s.patch_topic("t", json!({"state": "Stopped"})).await;
    s.wait_topic("t", "STOPPING", Duration::from_secs(30), |t| {
        all_partitions(t, PartitionState::Stopping, 2)
    })
    .await;
    // Kill the operator (twice) while it drains.
    for _ in 0..2 {
        op.kill();
        tokio::time::sleep(Duration::from_secs(2)).await;
        op = OperatorProcess::spawn(bed, &s.ns, &[]);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let t = s.topic("t").await.unwrap();
        assert!(
            !all_partitions(&t, PartitionState::Stopped, 2),
            "the drain should still be running"
        );
    }
    let t = s
        .wait_topic("t", "STOPPED", Duration::from_secs(180), |t| {
            all_partitions(t, PartitionState::Stopped, 2)
        })
        .await;
    for (p, status) in t.status.unwrap().partitions.iter().enumerate() {
        assert_eq!(
            status.last_mirrored_offset,
            Some(ends[p] - 1),
            "partition {p}: drained to the source end seen when the failover began"
        );
        assert_eq!(watermarks(&dest, &topic, p as i32).unwrap().1, ends[p]);
    }
    assert!(s.pods().await.is_empty(), "no fetcher left");
    drop(op);
    s.cleanup().await;
}
