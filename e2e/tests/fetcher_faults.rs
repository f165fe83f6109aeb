//! The fetcher under broker faults on the replicated pair (`e2e/testbed.sh up --brokers 3`): an
//! unclean leader election on the source — while the fetcher runs, and while it is stopped —
//! stops the partition with `SourceDiverged` and the differing offset ranges, never fetching on
//! from a wrong position; leader moves under load on both clusters lose, duplicate and stall
//! nothing. Each test holds the bed's fault lock for as long as its faults last.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kmirror_e2e::Testbed;
use kmirror_e2e::faults::{self, Cluster, PartitionOffsets};
use kmirror_e2e::fetcher::{
    FetcherProcess, ensure_state_topic_on, r_destination_args, r_source_args, recorded_on,
    wait_until,
};
use kmirror_e2e::kafka::{DestUser, TestRecord, produce_all, unique_name, watermarks};
use kmirror_fetcher::Isolation;
use kmirror_fetcher::verify::{Side, verify_partition};
use kmirror_state::records::FetcherError;

const WAIT: Duration = Duration::from_secs(90);

fn fetcher_args(bed: &Testbed, mirror: &str, topic: &str, partitions: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--mirror",
        mirror,
        "--source-topic",
        topic,
        "--partitions",
        partitions,
        "--startup-settle-seconds",
        "0.5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(r_source_args(bed));
    a.extend(r_destination_args(bed));
    a
}

fn values(prefix: &str, n: usize, partitions: i32) -> Vec<TestRecord> {
    (0..n)
        .map(|i| TestRecord {
            partition: i as i32 % partitions,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(format!("{prefix}-{i}").into_bytes()),
            headers: Vec::new(),
        })
        .collect()
}

fn fully_in_sync(o: &PartitionOffsets) -> bool {
    let Some(end) = o.leader_leo() else {
        return false;
    };
    o.isr.len() == 3 && o.hw == Some(end) && o.replicas.iter().all(|&r| o.leo_of(r) == Some(end))
}

/// A topic with `partitions` partitions on both replicated clusters (RF 3); `n` records
/// written to the source.
async fn topic_pair(bed: &Testbed, prefix: &str, partitions: i32, n: usize) -> String {
    let topic = unique_name(prefix);
    faults::create_replicated_topic(&bed.r_source_config(), &topic, partitions, &[])
        .await
        .expect("source topic");
    faults::create_replicated_topic(&bed.r_dest_config(DestUser::Admin), &topic, partitions, &[])
        .await
        .expect("destination topic");
    produce_all(
        &bed.r_source_config(),
        &topic,
        &values("before", n, partitions),
        &[],
    )
    .expect("produce");
    for p in 0..partitions {
        faults::wait_offsets(
            Cluster::RSource,
            &topic,
            p,
            WAIT,
            "a full ISR",
            fully_in_sync,
        )
        .expect("source ready");
    }
    topic
}

fn dest_end(bed: &Testbed, topic: &str, partition: i32) -> i64 {
    watermarks(&bed.r_dest_config(DestUser::Admin), topic, partition)
        .map(|w| w.1)
        .unwrap_or(-1)
}

fn recorded_error(bed: &Testbed, mirror: &str, topic: &str) -> (String, String) {
    let position = recorded_on(&bed.r_dest_config(DestUser::Admin), mirror, topic, 0)
        .position
        .expect("a recorded position");
    let FetcherError { reason, message } = position.error.expect("a recorded error");
    let reason = serde_json::to_value(reason).unwrap();
    (reason.as_str().unwrap().to_string(), message)
}

/// The destination's records (offset, value) of partition 0.
fn dest_values(bed: &Testbed, topic: &str) -> Vec<(i64, String)> {
    faults::read_values(
        &bed.r_dest_config(DestUser::Admin),
        topic,
        0,
        0,
        "read_uncommitted",
    )
    .expect("read the destination")
    .into_iter()
    .map(|(o, v)| {
        (
            o,
            String::from_utf8_lossy(&v.unwrap_or_default()).into_owned(),
        )
    })
    .collect()
}

/// Every record of partitions `0..partitions` once on the destination, at its source offset,
/// nothing after the copy of the last one (verified through the recorded offset map).
fn assert_exact_copy(bed: &Testbed, mirror: &str, topic: &str, partitions: i32) {
    let dest = bed.r_dest_config(DestUser::Admin);
    for p in 0..partitions {
        let map = recorded_on(&dest, mirror, topic, p)
            .offset_map()
            .expect("map");
        let report = verify_partition(
            &Side {
                config: bed.r_source_config(),
                topic: topic.to_string(),
            },
            &Side {
                config: dest.clone(),
                topic: topic.to_string(),
            },
            p,
            &map,
            Isolation::ReadCommitted,
            Duration::from_secs(300),
        )
        .expect("verify");
        assert!(
            report.is_clean() && report.offsets_identical && report.trailing == 0,
            "partition {p}: {report:?}"
        );
    }
}

fn assert_diverged(bed: &Testbed, mirror: &str, topic: &str) {
    let (reason, message) = recorded_error(bed, mirror, topic);
    assert_eq!(reason, "sourceDiverged", "{message}");
    for word in [
        "source offsets 10–14",
        "destination offsets 10–14",
        "unclean leader election",
    ] {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
    // The destination holds what was mirrored before the election, nothing from after it.
    let copied = dest_values(bed, topic);
    assert_eq!(copied.len(), 15, "{copied:?}");
    for (o, v) in &copied {
        if *o < 10 {
            assert_eq!(v, &format!("before-{o}"));
        } else {
            assert!(v.starts_with("unclean-old-"), "offset {o}: {v}");
        }
    }
}

#[tokio::test]
async fn an_unclean_election_while_mirroring_stops_with_source_diverged() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    ensure_state_topic_on(&bed.r_dest_config(DestUser::Admin));
    let topic = topic_pair(bed, "diverge-live", 1, 10).await;
    let mirror = format!("e2e/{topic}");
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0"));
    wait_until("the first records copied", WAIT, || {
        dest_end(bed, &topic, 0) == 10
    });

    let said = faults::unclean_election(Cluster::RSource, &topic, 0, 5, Duration::from_secs(6))
        .expect("unclean election");
    assert!(said.contains("diverged from offset 10"), "{said}");
    let code = fetcher.wait(Duration::from_secs(120));
    assert_eq!(
        code,
        Some(17),
        "SourceDiverged; log:\n{}",
        fetcher.log_text()
    );
    assert_diverged(bed, &mirror, &topic);
}

#[tokio::test]
async fn an_unclean_election_while_stopped_is_found_at_start() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    ensure_state_topic_on(&bed.r_dest_config(DestUser::Admin));
    let topic = topic_pair(bed, "diverge-stopped", 1, 10).await;
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(bed, &mirror, &topic, "0");
    let mut fetcher = FetcherProcess::spawn(&args);
    wait_until("the first records copied", WAIT, || {
        dest_end(bed, &topic, 0) == 10
    });

    // The fetcher copies the records the old leader alone holds, and stops before they are
    // replaced.
    let election = {
        let topic = topic.clone();
        std::thread::spawn(move || {
            faults::unclean_election(Cluster::RSource, &topic, 0, 5, Duration::from_secs(10))
        })
    };
    wait_until("the old leader's records copied", WAIT, || {
        dest_end(bed, &topic, 0) == 15
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    let said = election.join().unwrap().expect("unclean election");
    assert!(said.contains("diverged from offset 10"), "{said}");

    let mut fetcher = FetcherProcess::spawn(&args);
    let code = fetcher.wait(Duration::from_secs(120));
    assert_eq!(
        code,
        Some(17),
        "SourceDiverged; log:\n{}",
        fetcher.log_text()
    );
    assert_diverged(bed, &mirror, &topic);
}

#[tokio::test]
async fn leader_moves_under_load_lose_duplicate_and_stall_nothing() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    let topic = topic_pair(bed, "leader-moves", 3, 300).await;
    let mirror = format!("e2e/{topic}");
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (source, topic, stop) = (bed.r_source_config(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut batch = 0;
            while !stop.load(Ordering::Relaxed) {
                produce_all(
                    &source,
                    &topic,
                    &values(&format!("load{batch}"), 300, 3),
                    &[("message.timeout.ms", "300000")],
                )
                .expect("produce");
                batch += 1;
            }
        })
    };
    let mut fetcher = FetcherProcess::spawn(&fetcher_args(bed, &mirror, &topic, "0,1,2"));
    let copied = || (0..3).map(|p| dest_end(bed, &topic, p).max(0)).sum::<i64>();
    let mut last = 0;
    for (cluster, partition) in [
        (Cluster::RSource, 0),
        (Cluster::RDestination, 1),
        (Cluster::RSource, 2),
        (Cluster::RDestination, 0),
    ] {
        wait_until("mirroring progress", WAIT, || copied() > last + 300);
        faults::move_leader(cluster, &topic, partition, None).expect("move leader");
        last = copied();
        assert_eq!(fetcher.exited(), None, "{}", fetcher.log_text());
    }
    wait_until("mirroring progress after the last move", WAIT, || {
        copied() > last + 300
    });
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("producer");
    let source = bed.r_source_config();
    wait_until("catch-up", WAIT, || {
        (0..3).all(|p| {
            let (_, end) = watermarks(&source, &topic, p).unwrap();
            dest_end(bed, &topic, p) == end
        })
    });
    fetcher.signal("TERM");
    assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    assert_exact_copy(bed, &mirror, &topic, 3);
}

/// Both followers of the destination partition freeze: with min.insync.replicas=2 the leader
/// can confirm nothing, and librdkafka retries in silence until message.timeout.ms (5 minutes).
/// The fetcher must not sit there looking healthy: once records stayed unconfirmed for its stall
/// timeout it stops with a reason that says so, and a restart after the thaw copies on at the
/// same offsets without duplicates.
#[tokio::test]
async fn frozen_destination_followers_stop_the_fetcher_with_a_reason_not_a_silent_stall() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    let topic = topic_pair(bed, "stall", 1, 100).await;
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(bed, &mirror, &topic, "0");
    let env = [("KMIRROR_STALL_TIMEOUT_SECONDS", "10")];
    let mut fetcher = FetcherProcess::spawn_with_env(&args, &env);
    wait_until("the first 100 records copied", WAIT, || {
        dest_end(bed, &topic, 0) == 100
    });
    let before = faults::wait_offsets(
        Cluster::RDestination,
        &topic,
        0,
        WAIT,
        "a full ISR",
        fully_in_sync,
    )
    .expect("destination in sync");
    let followers = before.in_sync_followers();
    assert_eq!(followers.len(), 2, "{before:?}");
    for f in &followers {
        faults::sigstop_broker(&Cluster::RDestination.broker(*f)).expect("freeze follower");
    }
    produce_all(
        &bed.r_source_config(),
        &topic,
        &values("during", 50, 1),
        &[],
    )
    .expect("produce");
    // 10 s without a confirmation, plus the time to notice and stop; far below the 5 minutes
    // librdkafka would wait.
    let frozen = std::time::Instant::now();
    let deadline = frozen + Duration::from_secs(60);
    let exited = loop {
        match fetcher.exited() {
            Some(code) => break Some(code),
            None if std::time::Instant::now() > deadline => break None,
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let log = fetcher.log_text();
    for f in &followers {
        faults::sigcont_broker(&Cluster::RDestination.broker(*f)).expect("thaw follower");
    }
    if exited.is_none() {
        fetcher.kill();
    }
    assert_eq!(
        exited,
        Some(Some(1)),
        "the fetcher did not stop within 60 s of a stalled destination (a silent stall):\n{log}"
    );
    let said = log
        .lines()
        .rfind(|l| l.contains("none confirmed by the destination for"))
        .unwrap_or_else(|| panic!("no stall reason in the log:\n{log}"));
    eprintln!("stopped {:?} after the freeze: {said}", frozen.elapsed());
    faults::wait_offsets(
        Cluster::RDestination,
        &topic,
        0,
        WAIT,
        "a full ISR again",
        fully_in_sync,
    )
    .expect("destination in sync again");
    // A new start resumes from the destination log end: everything once, at the same offsets.
    // (The leader may already hold the 50 sent before the stop: records produced after the
    // restart show that the new fetcher copies.)
    let mut fetcher = FetcherProcess::spawn(&args);
    produce_all(&bed.r_source_config(), &topic, &values("after", 20, 1), &[]).expect("produce");
    wait_until("catch-up after the thaw", WAIT, || {
        dest_end(bed, &topic, 0) == 170
    });
    fetcher.signal("TERM");
    let code = fetcher.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", fetcher.log_text());
    assert_exact_copy(bed, &mirror, &topic, 1);
}

/// A destination follower freezes while in the ISR, so the leader's high watermark stays behind
/// its log end; the fetcher dies with records between them and a new one starts at once. The
/// new one must settle on the log end every in-sync replica holds, not on the stale high
/// watermark: starting there would re-send records the leader already holds, which land above
/// their offsets (a foreign write, the partition lost) or as duplicates.
#[tokio::test]
async fn a_restart_while_the_high_watermark_trails_resumes_at_the_log_end_without_duplicates() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    let topic = topic_pair(bed, "hw-trails", 1, 100).await;
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(bed, &mirror, &topic, "0");
    let mut first = FetcherProcess::spawn(&args);
    wait_until("the first 100 records copied", WAIT, || {
        dest_end(bed, &topic, 0) == 100
    });
    faults::wait_offsets(
        Cluster::RDestination,
        &topic,
        0,
        WAIT,
        "a full ISR",
        fully_in_sync,
    )
    .expect("destination in sync");
    let said = faults::freeze_follower(Cluster::RDestination, &topic, 0).expect("freeze");
    eprintln!("{}", said.lines().last().unwrap_or_default());
    produce_all(&bed.r_source_config(), &topic, &values("trail", 30, 1), &[]).expect("produce");
    // The leader holds the 30 copies; the frozen follower keeps the high watermark at 100 until
    // the controller fences it (broker.session.timeout.ms, 9 s on the bed).
    let trailing = faults::wait_offsets(
        Cluster::RDestination,
        &topic,
        0,
        Duration::from_secs(5),
        "the copies on the leader, above the high watermark",
        |o| o.leader_leo() == Some(130),
    )
    .expect("leader log end");
    first.kill();
    let mut second = FetcherProcess::spawn(&args);
    eprintln!(
        "restarted with high watermark {:?} and leader log end 130",
        trailing.hw
    );
    std::thread::sleep(Duration::from_secs(3));
    faults::thaw().expect("thaw");
    produce_all(&bed.r_source_config(), &topic, &values("after", 20, 1), &[]).expect("produce");
    wait_until("catch-up after the thaw", WAIT, || {
        second.exited().is_some() || dest_end(bed, &topic, 0) >= 150
    });
    assert_eq!(second.exited(), None, "{}", second.log_text());
    second.signal("TERM");
    assert_eq!(second.wait(Duration::from_secs(30)), Some(0));
    assert_eq!(dest_end(bed, &topic, 0), 150);
    assert_exact_copy(bed, &mirror, &topic, 1);
}

/// The source partition's leader hangs (SIGSTOP: its connections stay open, it answers nothing);
/// the controller fences it and another replica leads and takes new records, while the
/// fetcher's reads and watermark queries still wait on the hung broker. The fetcher must never
/// report the partition caught up while the source holds records it has not read (the status
/// would call a mirror that copies nothing healthy), and must not wait in silence: within the
/// stall timeout (20 s here) plus a margin it has read on, or it stops with a reason and a new
/// start copies the rest — everything once, at its own offset.
#[tokio::test]
async fn a_hung_source_leader_never_looks_caught_up_and_is_not_a_silent_stall() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic_on(&dest);
    let topic = topic_pair(bed, "src-hung", 1, 100).await;
    let mirror = format!("e2e/{topic}");
    let args = fetcher_args(bed, &mirror, &topic, "0");
    let env = [("KMIRROR_STALL_TIMEOUT_SECONDS", "20")];
    let mut fetcher = FetcherProcess::spawn_with_env(&args, &env);
    wait_until("the first 100 records copied", WAIT, || {
        dest_end(bed, &topic, 0) == 100
    });
    let before = faults::wait_offsets(
        Cluster::RSource,
        &topic,
        0,
        WAIT,
        "a full ISR",
        fully_in_sync,
    )
    .expect("source in sync");
    let hung = Cluster::RSource.broker(before.leader);
    faults::sigstop_broker(&hung).expect("freeze the source leader");
    let frozen = std::time::Instant::now();
    // The test's own producer gives up on the hung broker after 10 s and finds the new leader.
    let produced = produce_all(
        &bed.r_source_config(),
        &topic,
        &values("after", 200, 1),
        &[("socket.timeout.ms", "10000")],
    );
    let produced_at = std::time::Instant::now();
    eprintln!(
        "200 records on the new leader {:?} after the freeze",
        frozen.elapsed()
    );
    // What the fetcher reports from then on, until it has read everything or stopped.
    let mut false_claims = Vec::new();
    let mut outcome = None;
    while produced.is_ok() && produced_at.elapsed() < Duration::from_secs(50) {
        if let Some(code) = fetcher.exited() {
            outcome = Some(format!("exited {code:?}"));
            break;
        }
        if dest_end(bed, &topic, 0) == 300 {
            outcome = Some("read on".into());
            break;
        }
        if produced_at.elapsed() > Duration::from_secs(3)
            && let Some(p) = recorded_on(&dest, &mirror, &topic, 0).position
        {
            let read = p.source_position.unwrap_or(p.next_source_offset);
            if p.error.is_none() && p.source_high_watermark.is_some_and(|hw| hw <= read) {
                false_claims.push(format!(
                    "{:.0}s after the records: lag 0 at offset {read} (high watermark {:?})",
                    produced_at.elapsed().as_secs_f64(),
                    p.source_high_watermark
                ));
            }
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let log = fetcher.log_text();
    faults::sigcont_broker(&hung).expect("thaw the source leader");
    produced.expect("produce while the leader hangs");
    if outcome.is_none() {
        fetcher.kill();
    }
    assert!(
        false_claims.is_empty(),
        "the fetcher reported caught up while the source held 300 records:\n{}\n{log}",
        false_claims.join("\n")
    );
    let outcome = outcome.unwrap_or_else(|| {
        panic!("50 s after the new records the fetcher had neither read them nor stopped (a silent stall):\n{log}")
    });
    eprintln!("outcome: {outcome}");
    if outcome.starts_with("exited") {
        assert_eq!(outcome, "exited Some(1)", "{log}");
        let said = log
            .lines()
            .rfind(|l| l.contains("nothing read from"))
            .unwrap_or_else(|| panic!("no stall reason in the log:\n{log}"));
        eprintln!("stopped: {said}");
        let mut again = FetcherProcess::spawn(&args);
        wait_until("the rest copied by a new start", WAIT, || {
            dest_end(bed, &topic, 0) == 300
        });
        again.signal("TERM");
        assert_eq!(again.wait(Duration::from_secs(30)), Some(0));
    } else {
        fetcher.signal("TERM");
        assert_eq!(fetcher.wait(Duration::from_secs(30)), Some(0));
    }
    faults::wait_offsets(
        Cluster::RSource,
        &topic,
        0,
        WAIT,
        "a full ISR again",
        fully_in_sync,
    )
    .expect("source in sync again");
    assert_exact_copy(bed, &mirror, &topic, 1);
}
