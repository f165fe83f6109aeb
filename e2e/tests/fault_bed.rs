//! The fault verbs of the test bed do to the replicated Kafka pair what they say (effects on the
//! brokers, not on kmirror): a leader move changes the leader id; a frozen follower holds the
//! high watermark below the leader's log end until it is thawed; killed, frozen and restarted
//! brokers stall or fail acks=all writes and recover; an unclean election replaces records that
//! readers already saw.
//!
//! The tests share three brokers, so they run one at a time, and each leaves the pair healed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kmirror_e2e::Testbed;
use kmirror_e2e::faults::{self, Cluster, PartitionOffsets};
use kmirror_e2e::kafka::{TestRecord, produce_all, unique_name};
use rdkafka::ClientConfig;

const ON: Cluster = Cluster::RSource;
const WAIT: Duration = Duration::from_secs(90);

/// One fault test at a time, across processes sharing the bed; healed when the guard goes.
fn exclusive() -> faults::FaultLock {
    faults::exclusive()
}

fn values(prefix: &str, n: usize) -> Vec<TestRecord> {
    (0..n)
        .map(|i| TestRecord {
            partition: 0,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(format!("{prefix}-{i}").into_bytes()),
            headers: Vec::new(),
        })
        .collect()
}

/// A fresh one-partition topic, replication factor 3, with `n` records written (acks=all).
async fn topic_with_records(bed: &Testbed, prefix: &str, n: usize) -> String {
    let topic = unique_name(prefix);
    faults::create_replicated_topic(&bed.r_source_config(), &topic, 1, &[])
        .await
        .expect("create topic");
    produce_all(&bed.r_source_config(), &topic, &values("before", n), &[]).expect("produce");
    faults::wait_offsets(ON, &topic, 0, WAIT, "a full ISR", |o| {
        o.isr.len() == 3 && o.hw == Some(n as i64)
    })
    .expect("topic ready");
    topic
}

fn fully_in_sync(o: &PartitionOffsets) -> bool {
    let Some(end) = o.leader_leo() else {
        return false;
    };
    o.isr.len() == 3 && o.hw == Some(end) && o.replicas.iter().all(|&r| o.leo_of(r) == Some(end))
}

fn acks_one() -> [(&'static str, &'static str); 2] {
    [("acks", "1"), ("enable.idempotence", "false")]
}

#[tokio::test]
async fn move_leader_changes_the_leader_id() {
    let _x = exclusive();
    let bed = faults::replicated();
    let topic = topic_with_records(bed, "fault-move", 10).await;
    let before = faults::offsets(ON, &topic, 0).unwrap();

    let said = faults::move_leader(ON, &topic, 0, None).unwrap();
    let after = faults::offsets(ON, &topic, 0).unwrap();
    assert_ne!(after.leader, before.leader, "{said}");
    assert!(
        after.leader_epoch > before.leader_epoch,
        "{before:?} {after:?}"
    );
    assert_eq!(
        after.replicas[0], after.leader,
        "the new leader is preferred"
    );
    assert!(
        said.contains(&format!("leader {} -> {}", before.leader, after.leader)),
        "{said}"
    );

    // To a named broker: the one that led first.
    faults::move_leader(ON, &topic, 0, Some(before.leader)).unwrap();
    let back = faults::offsets(ON, &topic, 0).unwrap();
    assert_eq!(back.leader, before.leader);
    assert_eq!(back.hw, Some(10), "no record lost by moving leaders");
}

#[tokio::test]
async fn frozen_follower_holds_the_high_watermark_below_the_log_end_until_thawed() {
    let _x = exclusive();
    let bed = faults::replicated();
    let topic = topic_with_records(bed, "fault-freeze", 10).await;

    let said = faults::freeze_follower(ON, &topic, 0).unwrap();
    assert!(said.contains("frozen with SIGSTOP"), "{said}");
    produce_all(
        &bed.r_source_config(),
        &topic,
        &values("during", 20),
        &acks_one(),
    )
    .unwrap();
    let frozen = faults::offsets(ON, &topic, 0).unwrap();
    let leo = frozen.leader_leo().expect("the leader's log end");
    let hw = frozen.hw.expect("the high watermark");
    assert_eq!(leo, 30, "the leader appended everything: {frozen:?}");
    assert!(
        hw < leo,
        "high watermark {hw} must lag the log end {leo}: {frozen:?}"
    );

    faults::thaw().unwrap();
    let thawed = faults::wait_offsets(
        ON,
        &topic,
        0,
        WAIT,
        "the follower catching up",
        fully_in_sync,
    )
    .unwrap();
    assert_eq!(thawed.hw, Some(30));
}

#[tokio::test]
async fn killed_leader_loses_its_leadership_and_catches_up_after_a_start() {
    let _x = exclusive();
    let bed = faults::replicated();
    let topic = topic_with_records(bed, "fault-kill", 10).await;
    let before = faults::offsets(ON, &topic, 0).unwrap();
    let victim = before.leader;

    let said = faults::kill_broker(&ON.broker(victim)).unwrap();
    assert!(said.contains("SIGKILL"), "{said}");
    let fenced = faults::wait_offsets(ON, &topic, 0, WAIT, "a new leader", |o| {
        o.leader >= 0 && o.leader != victim && !o.isr.contains(&victim)
    })
    .unwrap();
    assert_eq!(fenced.isr.len(), 2);
    // Two in-sync replicas still meet min.insync.replicas=2: acks=all works.
    produce_all(
        &bed.r_source_config(),
        &topic,
        &values("after-kill", 10),
        &[],
    )
    .unwrap();

    faults::start_broker(&ON.broker(victim)).unwrap();
    let healed =
        faults::wait_offsets(ON, &topic, 0, WAIT, "the killed broker back", fully_in_sync).unwrap();
    assert_eq!(healed.leo_of(victim), Some(20));
}

#[tokio::test]
async fn frozen_followers_fail_acks_all_writes_until_they_continue() {
    let _x = exclusive();
    let bed = faults::replicated();
    let topic = topic_with_records(bed, "fault-stop", 10).await;
    let before = faults::offsets(ON, &topic, 0).unwrap();
    let followers = before.in_sync_followers();
    assert_eq!(followers.len(), 2, "{before:?}");
    for f in &followers {
        faults::sigstop_broker(&ON.broker(*f)).unwrap();
    }
    let short = [("message.timeout.ms", "5000")];
    let refused = produce_all(
        &bed.r_source_config(),
        &topic,
        &values("stopped", 1),
        &short,
    );
    assert!(
        refused.is_err(),
        "acks=all must not succeed with both followers frozen"
    );
    for f in &followers {
        let said = faults::sigcont_broker(&ON.broker(*f)).unwrap();
        assert!(said.contains("SIGCONT"), "{said}");
    }
    faults::wait_offsets(ON, &topic, 0, WAIT, "a full ISR again", fully_in_sync).unwrap();
    produce_all(&bed.r_source_config(), &topic, &values("resumed", 5), &[]).unwrap();
    let after = faults::offsets(ON, &topic, 0).unwrap();
    // The refused record may still have reached the leader's log before the timeout.
    assert!(after.hw >= Some(15), "{after:?}");
}

#[tokio::test]
async fn restarted_leader_hands_over_and_rejoins() {
    let _x = exclusive();
    let bed = faults::replicated();
    let topic = topic_with_records(bed, "fault-restart", 10).await;
    let before = faults::offsets(ON, &topic, 0).unwrap();

    let said = faults::restart_broker(&ON.broker(before.leader)).unwrap();
    assert!(
        said.contains("stop: ") && said.contains("start: "),
        "{said}"
    );
    let after = faults::wait_offsets(ON, &topic, 0, WAIT, "a full ISR", fully_in_sync).unwrap();
    assert!(
        after.leader_epoch > before.leader_epoch,
        "the controlled shutdown moved the leadership: {before:?} {after:?}"
    );
    produce_all(&bed.r_source_config(), &topic, &values("after", 5), &[]).unwrap();
}

/// Reads a partition continuously from offset 0, keeping every (offset, value) seen.
fn spawn_reader(
    config: ClientConfig,
    topic: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(i64, Vec<u8>)>> {
    std::thread::spawn(move || {
        use rdkafka::Message;
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = config
            .clone()
            .set("group.id", "kmirror-e2e-unclean-reader")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).expect("assign");
        let mut seen = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                seen.push((m.offset(), m.payload().unwrap_or_default().to_vec()));
            }
        }
        seen
    })
}

#[tokio::test]
async fn unclean_election_replaces_records_readers_already_saw() {
    let _x = exclusive();
    let bed = faults::replicated();
    let topic = topic_with_records(bed, "fault-unclean", 10).await;
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(bed.r_source_config(), topic.clone(), stop.clone());

    let said = faults::unclean_election(ON, &topic, 0, 5, Duration::from_secs(4)).unwrap();
    assert!(said.contains("diverged from offset 10"), "{said}");
    faults::wait_offsets(ON, &topic, 0, WAIT, "a full ISR", fully_in_sync).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let seen = reader.join().expect("reader");

    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    // The first record the reader got at each offset (after the truncation a reader may be
    // sent back and read the replacements too).
    let mut before: Vec<(i64, String)> = Vec::new();
    for (o, v) in &seen {
        if (10..15).contains(o) && !before.iter().any(|(b, _)| b == o) {
            before.push((*o, text(v)));
        }
    }
    assert_eq!(
        before.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        (10..15).collect::<Vec<_>>(),
        "the reader saw the first records at 10..14: {seen:?}"
    );
    assert!(
        before.iter().all(|(_, v)| v.starts_with("unclean-old-")),
        "{before:?}"
    );

    let now =
        faults::read_values(&bed.r_source_config(), &topic, 0, 0, "read_uncommitted").unwrap();
    assert_eq!(now.len(), 15, "offsets 0..14 after the election");
    for (offset, value) in &now {
        let value = text(value.as_deref().unwrap_or_default());
        if *offset < 10 {
            assert_eq!(
                value,
                format!("before-{offset}"),
                "untouched below the divergence"
            );
        } else {
            assert!(
                value.starts_with("unclean-new-"),
                "offset {offset}: {value}"
            );
            let seen_there = &before[(*offset - 10) as usize].1;
            assert_ne!(&value, seen_there, "offset {offset} was replaced");
        }
    }
}
