//! The operator survives being killed at random moments, and two replicas with leader election
//! hand over without both writing.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{ensure_state_topic, recorded, verify};
use kmirror_e2e::kafka::{
    DestUser, Rng, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{
    OperatorProcess, Scenario, all_partitions, fetcher_processes, pods_per_partition,
};
use kmirror_fetcher::Isolation;
use kube::Api;
use serde_json::json;

/// Samples pods and fetcher processes and fails if a partition is ever served by two pods or
/// by two running fetcher processes (a pod listing alone cannot see a process that outlives
/// its pod object).
async fn check_single_fetcher(s: &Scenario, seen_max: &mut usize) {
    let pods = s.pods().await;
    for (p, names) in pods_per_partition(&pods) {
        assert!(names.len() <= 1, "partition {p} served by {names:?}");
        *seen_max = (*seen_max).max(names.len());
    }
    for (p, pids) in fetcher_processes(&format!("{}/dr", s.ns)) {
        assert!(
            pids.len() <= 1,
            "partition {p} served by fetcher processes {pids:?}"
        );
        *seen_max = (*seen_max).max(pids.len());
    }
}

#[tokio::test]
async fn killing_the_operator_at_random_moments_keeps_one_fetcher_per_partition_and_every_transition()
 {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-kill").await;
    let topic = unique_name("kill");
    create_topic(&bed.source_config(), &topic, 4, &[])
        .await
        .unwrap();
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(4000, 4, 0, 31),
        &[],
    )
    .unwrap();
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let mut rng = Rng::new(99);
    let mut max_seen = 0;
    let mut kills = 0;
    // Flows: start mirroring, pause, resume, each interrupted by operator kills.
    for (target, state) in [
        (PartitionState::Mirroring, "Mirroring"),
        (PartitionState::Paused, "Paused"),
        (PartitionState::Mirroring, "Mirroring"),
        (PartitionState::Paused, "Paused"),
        (PartitionState::Mirroring, "Mirroring"),
    ] {
        s.patch_topic("t", json!({"state": state})).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut op = OperatorProcess::spawn(bed, &s.ns, &[]);
            // Let it work for a random moment, checking pods meanwhile, then kill it.
            let until = Instant::now() + Duration::from_millis(300 + rng.below(1500));
            while Instant::now() < until {
                check_single_fetcher(&s, &mut max_seen).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            op.kill();
            kills += 1;
            check_single_fetcher(&s, &mut max_seen).await;
            let t = s.topic("t").await.unwrap();
            if all_partitions(&t, target, 4) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "flow to {state} did not complete: {:?}",
                t.status
            );
        }
    }
    assert!(kills >= 5, "killed the operator {kills} times");
    // A final operator finishes; the data is exact and every partition's state epoch shows each
    // transition persisted in order.
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.wait_topic("t", "MIRRORING", Duration::from_secs(60), |t| {
        all_partitions(t, PartitionState::Mirroring, 4)
    })
    .await;
    // The check must have seen the fetchers it checks: on a loaded machine the kill windows can
    // all fall where no fetcher runs, so it looks again while the final operator mirrors.
    let deadline = Instant::now() + Duration::from_secs(60);
    while max_seen == 0 && Instant::now() < deadline {
        check_single_fetcher(&s, &mut max_seen).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let dest = bed.dest_config(DestUser::Admin);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(0..4).all(|p| {
        watermarks(&bed.source_config(), &topic, p).unwrap().1
            == watermarks(&dest, &topic, p).unwrap().1
    }) {
        assert!(Instant::now() < deadline, "no catch-up");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
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
        assert!(report.is_clean() && report.offsets_identical, "{report:?}");
        let state = recorded(bed, &format!("{}/dr", s.ns), &topic, p)
            .state
            .unwrap();
        // UNKNOWN->PREPARING->MIRRORING, then 2x (->PAUSING ->PAUSED ->PREPARING ->MIRRORING):
        // 10 epochs.
        assert_eq!(
            (state.state, state.state_epoch),
            (PartitionState::Mirroring, 10),
            "partition {p}: every transition persisted once"
        );
    }
    assert_eq!(max_seen, 1, "the check saw the fetchers it checks");
    eprintln!("{kills} operator kills; at most {max_seen} pod or process per partition");
    s.cleanup().await;
}

#[tokio::test]
async fn leader_election_lets_only_the_leader_write_and_hands_over() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-lease").await;
    let topic = unique_name("lease");
    create_topic(&bed.source_config(), &topic, 1, &[])
        .await
        .unwrap();
    let lease_args = [
        "--leader-election",
        "--lease-namespace",
        &s.ns,
        "--lease-duration-seconds",
        "6",
    ];
    let mut a = OperatorProcess::spawn(bed, &s.ns, &lease_args);
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let holder = || async {
        leases
            .get_opt("kmirror-operator")
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while holder().await.is_none() {
        assert!(Instant::now() < deadline, "no leader: {}", a.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let first = holder().await.unwrap();
    let mut b = OperatorProcess::spawn(bed, &s.ns, &lease_args);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("one", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic("one", "MIRRORING", Duration::from_secs(60), |t| {
        all_partitions(t, PartitionState::Mirroring, 1)
    })
    .await;
    let reconciles = |op: &OperatorProcess| {
        op.metric("kmirror_operator_reconciles_total{controller=\"mirrortopic\"}")
            .unwrap_or(0.0)
    };
    assert!(reconciles(&a) > 0.0, "the leader works");
    assert_eq!(reconciles(&b), 0.0, "the standby does not reconcile");
    assert_eq!(b.metric("kmirror_operator_leader"), Some(0.0));
    assert_eq!(a.metric("kmirror_operator_leader"), Some(1.0));
    // Every write to the MirrorTopic came from one field manager, the leader's process.
    // Kill the leader: the standby takes the lease and carries on.
    a.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    while holder().await.as_deref() == Some(first.as_str()) {
        assert!(
            Instant::now() < deadline,
            "the lease was not handed over: {}",
            b.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.metric("kmirror_operator_leader") != Some(1.0) {
        assert!(Instant::now() < deadline, "the standby did not lead");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.patch_topic("one", json!({"state": "Paused"})).await;
    s.wait_topic(
        "one",
        "PAUSED by the new leader",
        Duration::from_secs(60),
        |t| all_partitions(t, PartitionState::Paused, 1),
    )
    .await;
    assert!(reconciles(&b) > 0.0);
    assert!(b.alive());
    // A graceful stop (SIGTERM, as in a rolling update) releases the lease: right after the
    // leader exits, the lease is free or already taken by the standby, long before it expires.
    let c = OperatorProcess::spawn(bed, &s.ns, &lease_args);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.metric("kmirror_operator_leader") != Some(0.0) {
        assert!(Instant::now() < deadline, "the new standby did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let second = holder().await.expect("b holds the lease");
    assert_eq!(second, format!("kmirror-operator-{}", b.pid()));
    assert_eq!(
        b.terminate(Duration::from_secs(20)),
        Some(0),
        "graceful exit: {}",
        b.log_text()
    );
    let after = holder().await;
    assert_ne!(
        after.as_deref(),
        Some(second.as_str()),
        "the lease still names the stopped leader"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.metric("kmirror_operator_leader") != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "the standby did not take the released lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.patch_topic("one", json!({"state": "Mirroring"})).await;
    s.wait_topic(
        "one",
        "MIRRORING again under the third leader",
        Duration::from_secs(60),
        |t| all_partitions(t, PartitionState::Mirroring, 1),
    )
    .await;
    s.cleanup().await;
}

/// Two kmirror installations (each its own operator, watching its own namespace) mirror to one
/// destination with the default state topic, and so share its lease topic. Each leader answers
/// only its own fetchers' lease requests: no fetcher of either loses its write lease to the
/// other's answers, over more than two lease durations, and both copy everything.
#[tokio::test]
async fn two_installations_on_one_destination_keep_their_own_write_leases() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = json!({"partitionsPerPod": 1});
    let mut installs = Vec::new();
    for prefix in ["op-two-a", "op-two-b"] {
        let s = Scenario::new(bed, prefix).await;
        let operator = OperatorProcess::spawn(bed, &s.ns, &[]);
        let topic = unique_name("shared-dest");
        create_topic(&bed.source_config(), &topic, 4, &[])
            .await
            .unwrap();
        produce_all(
            &bed.source_config(),
            &topic,
            &mixed_records(400, 4, 0, 7),
            &[],
        )
        .unwrap();
        s.apply_mirror("dr", spec.clone()).await;
        s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
            .await;
        installs.push((s, operator, topic));
    }
    let uids = |pods: Vec<k8s_openapi::api::core::v1::Pod>| -> Vec<String> {
        let mut u: Vec<String> = pods.into_iter().filter_map(|p| p.metadata.uid).collect();
        u.sort();
        u
    };
    let mut first = Vec::new();
    for (s, _, _) in &installs {
        s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
            all_partitions(t, PartitionState::Mirroring, 4)
        })
        .await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let pods = uids(s.pods().await);
            if pods.len() == 4 {
                first.push(pods);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} fetcher pods, not 4",
                pods.len()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Leases last 30 s and are renewed every 10 s: 75 s are seven renewals per fetcher, each
    // answered by both leaders' grantors reading the same lease topic.
    let window = Instant::now();
    let mut round = 0u64;
    while window.elapsed() < Duration::from_secs(75) {
        for (i, (s, _, topic)) in installs.iter().enumerate() {
            let batch = mixed_records(40, 4, 0, 100 + round);
            produce_all(&bed.source_config(), topic, &batch, &[]).unwrap();
            let t = s.topic("t").await.expect("MirrorTopic");
            assert!(
                all_partitions(&t, PartitionState::Mirroring, 4),
                "installation {i} left MIRRORING: {}",
                serde_json::to_string_pretty(&t.status).unwrap()
            );
            assert_eq!(
                uids(s.pods().await),
                first[i],
                "installation {i}'s fetcher pods were replaced (a lost write lease ends a fetcher)"
            );
        }
        round += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let dest = bed.dest_config(DestUser::Admin);
    for (_, _, topic) in &installs {
        for p in 0..4 {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let source_end = watermarks(&bed.source_config(), topic, p).unwrap().1;
                let copied = watermarks(&dest, topic, p).unwrap().1;
                if copied == source_end {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{topic}[{p}]: {copied} of {source_end} records copied"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    for (s, _, _) in &installs {
        s.cleanup().await;
    }
}

/// The lifecycle states of `mirror`'s partitions of `topic` as a reader of the state topic
/// sees them (fencing applied).
fn recorded_states(
    dest: &rdkafka::ClientConfig,
    mirror: &str,
    topic: &str,
) -> std::collections::BTreeMap<i32, Option<PartitionState>> {
    kmirror_state::store::load(
        dest,
        kmirror_crds::v1alpha1::DEFAULT_STATE_TOPIC,
        |k| k.mirror == mirror && k.topic == topic,
        Duration::from_secs(15),
    )
    .unwrap()
    .into_iter()
    .map(|((_, _, p), r)| (p, r.state.map(|s| s.state)))
    .collect()
}

/// Two operators overlap, both believing they lead (no leader election): the first stalls just
/// before its first lifecycle write (a frozen or partitioned leader), a second one mirrors the
/// topic and fails it over; then the first wakes up with what it had planned. No partition may
/// go back from STOPPED, and the applications' WRITE on the new primary must not be taken away.
#[tokio::test]
async fn an_overlapping_stale_operator_cannot_move_partitions_back_or_take_acls_away() {
    use kmirror_e2e::kafka::app_acls;
    use kmirror_e2e::kafka::app_may;
    use kmirror_state::kafka_admin::{Operation, create_acls};
    const PARTITIONS: i32 = 2;
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "overlap").await;
    let topic = unique_name("overlap");
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    create_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        source.create().unwrap();
    create_acls(
        admin.inner(),
        &app_acls(&topic, "overlap-group"),
        Duration::from_secs(15),
    )
    .unwrap();
    produce_all(&source, &topic, &mixed_records(400, PARTITIONS, 0, 5), &[]).unwrap();
    let gate = std::env::temp_dir().join(unique_name("overlap-gate"));
    let failpoints = format!("state-write=wait:{}", gate.display());
    let mut stale =
        OperatorProcess::spawn_with_env(bed, &s.ns, &[], &[("KMIRROR_FAILPOINTS", &failpoints)]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic(
        "t",
        json!({"mirror": "dr", "sourceTopic": topic, "failover": {"mode": "Immediate"}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stale.log_text().contains("failpoint reached: waiting") {
        assert!(
            Instant::now() < deadline,
            "the first operator never reached its first lifecycle write: {}",
            stale.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A second operator for the same mirror: both believe they lead.
    let current = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;
    s.patch_topic("t", json!({"state": "Stopped"})).await;
    s.wait_topic("t", "STOPPED", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Stopped, PARTITIONS as usize)
    })
    .await;
    let mirror = format!("{}/dr", s.ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !app_may(&dest, &topic, Operation::Write) {
        assert!(Instant::now() < deadline, "no WRITE after the failover");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The stale operator wakes up with the reconcile it had planned before.
    std::fs::write(&gate, b"").unwrap();
    let start = Instant::now();
    let mut violations = Vec::new();
    while start.elapsed() < Duration::from_secs(30) && violations.len() < 5 {
        let at = start.elapsed().as_secs_f32();
        for (p, state) in recorded_states(&dest, &mirror, &topic) {
            if state != Some(PartitionState::Stopped) {
                violations.push(format!(
                    "{at:.1}s: partition {p} went back from STOPPED to {state:?} in the state topic"
                ));
            }
        }
        if let Some(t) = s.topic("t").await
            && !all_partitions(&t, PartitionState::Stopped, PARTITIONS as usize)
        {
            violations.push(format!(
                "{at:.1}s: the status no longer shows every partition STOPPED"
            ));
        }
        if !app_may(&dest, &topic, Operation::Write) {
            violations.push(format!("{at:.1}s: the applications' WRITE was revoked"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(violations.is_empty(), "{violations:#?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while stale.alive() {
        assert!(
            Instant::now() < deadline,
            "the superseded operator still runs: {}",
            stale.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = stale.log_text();
    assert!(
        log.contains("took over mirror"),
        "the superseded operator says why it stopped: {log}"
    );
    let _ = std::fs::remove_file(&gate);
    drop(current);
    s.cleanup().await;
}
