//! The operator against the real apiserver, node agent and Kafka: resources become destination
//! topics, fetcher pods and a live partition lifecycle; bad input becomes clear conditions.

use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{ensure_state_topic, verify};
use kmirror_e2e::kafka::{
    DestUser, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use kmirror_e2e::operator::{
    OperatorProcess, Scenario, all_partitions, condition, eventually, pods_per_partition,
};
use kmirror_fetcher::Isolation;
use kube::{Api, ResourceExt};
use serde_json::json;

fn verify_all(bed: &Testbed, ns: &str, mirror: &str, topic: &str, partitions: i32) -> u64 {
    let source = bed.source_config();
    let mut total = 0;
    for p in 0..partitions {
        let report = verify(
            bed,
            &source,
            &format!("{ns}/{mirror}"),
            topic,
            topic,
            p,
            Isolation::ReadCommitted,
        );
        assert!(
            report.is_clean() && report.offsets_identical && report.trailing == 0,
            "partition {p}: {report:?}"
        );
        total += report.matched;
    }
    total
}

async fn wait_caught_up(bed: &Testbed, topic: &str, partitions: i32) {
    let dest = bed.dest_config(DestUser::Admin);
    let source = bed.source_config();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !(0..partitions).all(|p| {
        watermarks(&source, topic, p).unwrap().1
            == watermarks(&dest, topic, p).map(|w| w.1).unwrap_or(-1)
    }) {
        assert!(
            Instant::now() < deadline,
            "the destination did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What `mirrored_topic` sets up.
struct Mirrored {
    topic: String,
    _operator: OperatorProcess,
}

/// A 2-partition source topic holding `records` records (seed `seed`), an operator, ClusterMirror
/// `dr` with `spec` and MirrorTopic `name` for the topic: all partitions MIRRORING (within
/// `timeout`) and the destination caught up.
async fn mirrored_topic(
    bed: &Testbed,
    s: &Scenario,
    name: &str,
    records: usize,
    seed: u64,
    spec: serde_json::Value,
    timeout: Duration,
) -> Mirrored {
    let topic = unique_name(name);
    create_topic(&bed.source_config(), &topic, 2, &[])
        .await
        .unwrap();
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(records, 2, 0, seed),
        &[],
    )
    .unwrap();
    let operator = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", spec).await;
    s.apply_topic(name, json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    s.wait_topic(name, "MIRRORING", timeout, |t| {
        all_partitions(t, PartitionState::Mirroring, 2)
    })
    .await;
    wait_caught_up(bed, &topic, 2).await;
    Mirrored {
        topic,
        _operator: operator,
    }
}

#[tokio::test]
async fn six_partitions_mirror_at_identical_offsets_with_pods_and_status() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-six").await;
    let topic = unique_name("six");
    create_topic(
        &bed.source_config(),
        &topic,
        6,
        &[("retention.ms", "86400000"), ("cleanup.policy", "delete")],
    )
    .await
    .unwrap();
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(3000, 6, 0, 11),
        &[],
    )
    .unwrap();
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    let started = Instant::now();
    s.apply_topic("orders", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let t = s
        .wait_topic(
            "orders",
            "all 6 partitions MIRRORING",
            Duration::from_secs(60),
            |t| all_partitions(t, PartitionState::Mirroring, 6),
        )
        .await;
    eprintln!("6 partitions MIRRORING after {:?}", started.elapsed());
    assert_eq!(
        t.status.as_ref().unwrap().phase.as_deref(),
        Some("Mirroring")
    );
    // The source reports topic IDs: the status shows it.
    let id = t.status.as_ref().unwrap().source_topic_id.clone();
    assert!(
        id.as_deref()
            .is_some_and(|id| !id.is_empty() && id.trim_start_matches('A').len() > 2),
        "status.sourceTopicId {id:?}"
    );
    // The destination topic got the source's partitions and configs (its partitions answer
    // once the destination broker has led them: under load a moment after the topic exists).
    let dest = bed.dest_config(DestUser::Admin);
    eventually(
        "destination partition 5 answers",
        Duration::from_secs(30),
        async || watermarks(&dest, &topic, 5).is_ok(),
    )
    .await;
    let configs = kmirror_e2e::kafka::topic_configs(&dest, &topic)
        .await
        .unwrap();
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("86400000")
    );
    // Six fetcher pods run on the node agent. MIRRORING is recorded when the operator starts
    // the partition's fetcher, just before it creates the pod: the node agent may bind the
    // pods a moment later (under load, seconds).
    let pods = s.pods().await;
    assert_eq!(pods.len(), 6, "one pod per partition");
    let per_partition = pods_per_partition(&pods);
    assert!((0..6).all(|p| per_partition.get(&p).map(Vec::len) == Some(1)));
    let node = bed.var("KMIRROR_NODE_NAME");
    eventually(
        "every fetcher pod bound to the node agent",
        Duration::from_secs(30),
        async || {
            s.pods().await.iter().all(|pod| {
                pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()) == Some(node)
            })
        },
    )
    .await;
    // Records produced now appear at identical offsets, and the lag returns to 0.
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(3000, 6, 0, 12),
        &[],
    )
    .unwrap();
    wait_caught_up(bed, &topic, 6).await;
    s.wait_topic("orders", "lag 0 in status", Duration::from_secs(30), |t| {
        t.status.as_ref().is_some_and(|st| {
            st.max_lag == Some(0)
                && st
                    .partitions
                    .iter()
                    .all(|p| p.lag == Some(0) && p.offsets_identical == Some(true))
        })
    })
    .await;
    assert_eq!(verify_all(bed, &s.ns, "dr", &topic, 6), 6000);
    let cm = s
        .wait_mirror("dr", "Ready", Duration::from_secs(30), |m| {
            m.status
                .as_ref()
                .is_some_and(|st| condition(&st.conditions, "Ready").is_some_and(|c| c.0 == "True"))
        })
        .await;
    assert_eq!(cm.status.as_ref().unwrap().partitions.mirroring, 6);
    s.cleanup().await;
}

#[tokio::test]
async fn oauthbearer_destination_mirrors_with_tokens_from_the_identity_provider() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-oauth").await;
    let client_secret = bed.var("KMIRROR_OIDC_MIRROR_CLIENT_SECRET");
    s.secret("destination-oauth", "clientSecret", client_secret)
        .await;
    let mut spec = Scenario::mirror_spec(bed);
    spec["destination"] = json!({
        "bootstrapServers": bed.var("KMIRROR_DEST_OAUTH_BOOTSTRAP"),
        "allowInsecure": true,
        "sasl": {"mechanism": "OAUTHBEARER", "oauth": {
            "tokenEndpointUrl": bed.var("KMIRROR_OIDC_TOKEN_URL"),
            "clientId": bed.var("KMIRROR_OIDC_MIRROR_CLIENT_ID"),
            "clientSecret": {"name": "destination-oauth", "key": "clientSecret"}
        }}
    });
    // Every Kafka client of the operator and the fetchers authenticates with tokens.
    let m = mirrored_topic(bed, &s, "orders", 800, 21, spec, Duration::from_secs(90)).await;
    assert_eq!(verify_all(bed, &s.ns, "dr", &m.topic, 2), 800);
    // The client secret reaches the fetchers as a mounted file, never as an argument or env.
    for pod in s.pods().await {
        let spec = serde_json::to_string(&pod.spec).unwrap();
        assert!(
            !spec.contains(client_secret),
            "the client secret appears in pod {:?}",
            pod.metadata.name
        );
    }
    s.cleanup().await;
}

#[tokio::test]
async fn include_filter_creates_topics_for_matches_only_including_new_ones() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-filter").await;
    let prefix = unique_name("flt");
    let source = bed.source_config();
    for name in ["a", "b"] {
        create_topic(&source, &format!("{prefix}.{name}"), 1, &[])
            .await
            .unwrap();
    }
    create_topic(&source, &format!("other-{prefix}"), 1, &[])
        .await
        .unwrap();
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["topics"] =
        json!({"include": [{"prefix": format!("{prefix}.")}], "exclude": [{"regex": ".*\\.b"}]});
    s.apply_mirror("filtered", spec).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let names = |topics: &[kmirror_crds::v1alpha1::MirrorTopic]| {
        let mut v: Vec<String> = topics.iter().map(|t| t.spec.source_topic.clone()).collect();
        v.sort();
        v
    };
    while names(&s.topics().await) != vec![format!("{prefix}.a")] {
        assert!(
            Instant::now() < deadline,
            "MirrorTopics: {:?}",
            names(&s.topics().await)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A topic created afterwards is picked up by the next sync.
    create_topic(&source, &format!("{prefix}.c"), 1, &[])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while names(&s.topics().await) != vec![format!("{prefix}.a"), format!("{prefix}.c")] {
        assert!(
            Instant::now() < deadline,
            "MirrorTopics: {:?}",
            names(&s.topics().await)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let topics = s.topics().await;
    assert!(topics.iter().all(|t| {
        t.metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o[0].kind == "ClusterMirror")
    }));
    s.cleanup().await;
}

#[tokio::test]
async fn pause_stops_pods_and_resume_loses_nothing() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-pause").await;
    let m = mirrored_topic(
        bed,
        &s,
        "t",
        2000,
        21,
        Scenario::mirror_spec(bed),
        Duration::from_secs(60),
    )
    .await;
    let topic = m.topic.clone();

    s.patch_topic("t", json!({"state": "Paused"})).await;
    // PAUSED means the fetcher is gone: while its process still runs (flushing, persisting its
    // position) the partition shows PAUSING.
    let mirror = format!("{}/dr", s.ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = s.topic("t").await.unwrap();
        let running = kmirror_e2e::operator::fetcher_processes(&mirror);
        for p in t.status.iter().flat_map(|st| &st.partitions) {
            assert!(
                p.state != PartitionState::Paused || !running.contains_key(&p.partition),
                "partition {} shows PAUSED while fetcher process {:?} still runs",
                p.partition,
                running.get(&p.partition)
            );
        }
        if all_partitions(&t, PartitionState::Paused, 2) {
            break;
        }
        assert!(Instant::now() < deadline, "not PAUSED: {:?}", t.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !s.pods().await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "fetcher pods still exist while paused"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // While paused nothing is copied.
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(2000, 2, 0, 22),
        &[],
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let dest = bed.dest_config(DestUser::Admin);
    assert_eq!(
        watermarks(&dest, &topic, 0).unwrap().1,
        1000,
        "paused: nothing new on the destination"
    );
    let t = s.topic("t").await.unwrap();
    assert_eq!(
        condition(&t.status.unwrap().conditions, "Ready").map(|c| c.0),
        Some("True".into()),
        "Paused is the settled state"
    );

    s.patch_topic("t", json!({"state": "Mirroring"})).await;
    s.wait_topic("t", "MIRRORING again", Duration::from_secs(60), |t| {
        all_partitions(t, PartitionState::Mirroring, 2)
    })
    .await;
    wait_caught_up(bed, &topic, 2).await;
    assert_eq!(verify_all(bed, &s.ns, "dr", &topic, 2), 4000);
    s.cleanup().await;
}

#[tokio::test]
async fn invalid_input_becomes_conditions_and_events_without_a_crash() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-invalid").await;
    let mut op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let ready = |m: &kmirror_crds::v1alpha1::ClusterMirror, t: &str| {
        m.status
            .as_ref()
            .and_then(|st| condition(&st.conditions, t))
    };

    // A regex CEL cannot check.
    let mut spec = Scenario::mirror_spec(bed);
    spec["topics"] = json!({"include": [{"regex": "orders.("}]});
    s.apply_mirror("bad-regex", spec).await;
    let m = s
        .wait_mirror("bad-regex", "InvalidSpec", Duration::from_secs(30), |m| {
            ready(m, "Ready").is_some_and(|c| c.1 == "InvalidSpec")
        })
        .await;
    assert!(
        ready(&m, "Ready")
            .unwrap()
            .2
            .contains("invalid regex \"orders.(\" in spec.topics.include[0]"),
        "{:?}",
        ready(&m, "Ready")
    );

    // A Secret that does not exist.
    let mut spec = Scenario::mirror_spec(bed);
    spec["destination"]["sasl"]["password"]["name"] = json!("nope");
    s.apply_mirror("no-secret", spec).await;
    let m = s
        .wait_mirror(
            "no-secret",
            "SecretNotFound",
            Duration::from_secs(30),
            |m| ready(m, "DestinationReachable").is_some_and(|c| c.1 == "SecretNotFound"),
        )
        .await;
    let message = ready(&m, "DestinationReachable").unwrap().2;
    assert!(
        message.contains("Secret \"nope\"")
            && !message.contains(bed.var("KMIRROR_MIRROR_PASSWORD")),
        "{message}"
    );

    // An unreachable cluster.
    let mut spec = Scenario::mirror_spec(bed);
    spec["source"]["bootstrapServers"] = json!("127.0.0.1:1");
    s.apply_mirror("unreachable", spec).await;
    s.wait_mirror("unreachable", "Unreachable", Duration::from_secs(60), |m| {
        ready(m, "SourceReachable").is_some_and(|c| c.1 == "Unreachable")
    })
    .await;

    // A wrong pinned cluster ID.
    let mut spec = Scenario::mirror_spec(bed);
    spec["destination"]["clusterId"] = json!("AAAAAAAAAAAAAAAAAAAAAA");
    s.apply_mirror("wrong-id", spec).await;
    let m = s
        .wait_mirror(
            "wrong-id",
            "ClusterIdMismatch",
            Duration::from_secs(30),
            |m| ready(m, "DestinationReachable").is_some_and(|c| c.1 == "ClusterIdMismatch"),
        )
        .await;
    assert_eq!(ready(&m, "Ready").map(|c| c.0), Some("False".into()));

    // A MirrorTopic of a mirror that does not exist.
    s.apply_topic("orphan", json!({"mirror": "missing", "sourceTopic": "t"}))
        .await;
    s.wait_topic("orphan", "MirrorNotFound", Duration::from_secs(30), |t| {
        t.status
            .as_ref()
            .and_then(|st| condition(&st.conditions, "Ready"))
            .is_some_and(|c| c.1 == "MirrorNotFound")
    })
    .await;

    for (name, reason) in [
        ("bad-regex", "InvalidSpec"),
        ("no-secret", "SecretNotFound"),
        ("unreachable", "Unreachable"),
        ("wrong-id", "ClusterIdMismatch"),
    ] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !s.events(name).await.iter().any(|(r, _)| r == reason) {
            assert!(
                Instant::now() < deadline,
                "no {reason} event for {name}: {:?}",
                s.events(name).await
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    assert!(op.alive(), "the operator keeps running:\n{}", op.log_text());
    s.cleanup().await;
}

#[tokio::test]
async fn two_hundred_partitions_reach_mirroring_with_bounded_status_writes() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-200").await;
    let topic = unique_name("wide");
    create_topic(&bed.source_config(), &topic, 200, &[])
        .await
        .unwrap();
    // Every partition listed (the default lists the worst 100), so that the status can show
    // every record copied; the bounded list has its own test (operator_status_metrics).
    let op = OperatorProcess::spawn_with_env(
        bed,
        &s.ns,
        &[],
        &[("KMIRROR_STATUS_MAX_PARTITIONS", "200")],
    );
    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = json!({"partitionsPerPod": 20});
    s.apply_mirror("wide", spec).await;
    let started = Instant::now();
    s.apply_topic("wide", json!({"mirror": "wide", "sourceTopic": topic}))
        .await;
    // Count status writes by watching resourceVersion changes of the object.
    let mut versions = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let t = s.topic("wide").await.unwrap();
        versions.insert(t.metadata.resource_version.clone().unwrap_or_default());
        if all_partitions(&t, PartitionState::Mirroring, 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "200 partitions did not reach MIRRORING: {:?}",
            t.status.map(|s| s.partitions_summary)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    let writes_series = "kmirror_operator_status_writes_total{kind=\"MirrorTopic\"}";
    let writes = op.counter(writes_series);
    eprintln!(
        "200 partitions MIRRORING after {took:?}: {writes} MirrorTopic status writes ({:.2}/s), {} object versions seen",
        writes / took.as_secs_f64(),
        versions.len()
    );
    // One write per object and second: over `took`, at most one per started second plus the
    // first (a rate bound, not a speed target: a slow machine only lowers it).
    let bound = |elapsed: Duration| elapsed.as_secs_f64().ceil() + 1.0;
    assert!(
        writes <= bound(took),
        "{writes} status writes in {took:?}: more than one per second"
    );
    // 200 partitions / 20 per pod; a pod may be between exit and replacement for a moment.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = s.pods().await.len();
        if pods == 10 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{pods} fetcher pods, not 10 (200 partitions / 20 per pod)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Under traffic, lag and offsets change all the time; the status follows them (it ends up
    // showing every record copied) and still moves at most about once per second.
    let before = op.counter(writes_series);
    let window = Instant::now();
    let mut produced = 0;
    while window.elapsed() < Duration::from_secs(10) {
        let batch = mixed_records(2000, 200, 0, window.elapsed().as_millis() as u64);
        produce_all(&bed.source_config(), &topic, &batch, &[]).unwrap();
        produced += batch.len() as i64;
    }
    let shown = |t: &MirrorTopic| -> i64 {
        t.status.as_ref().map_or(0, |st| {
            st.partitions
                .iter()
                .map(|p| p.destination_log_end_offset.unwrap_or(0))
                .sum()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let t = s.topic("wide").await.unwrap();
        if shown(&t) >= produced {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the status shows {} of {produced} records copied after 180 s",
            shown(&t)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let writes = op.counter(writes_series) - before;
    let elapsed = window.elapsed();
    eprintln!(
        "traffic and catch-up: {produced} records, {writes} status writes in {elapsed:?} ({:.2}/s)",
        writes / elapsed.as_secs_f64()
    );
    assert!(writes >= 2.0, "the status follows the traffic");
    assert!(
        writes <= bound(elapsed),
        "{writes} status writes in {elapsed:?} under traffic: more than one per second"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn secret_rotation_replaces_fetchers_and_deletion_cleans_up() {
    use kmirror_e2e::fetcher::recorded;
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-delete").await;
    let m = mirrored_topic(
        bed,
        &s,
        "t",
        1000,
        91,
        Scenario::mirror_spec(bed),
        Duration::from_secs(60),
    )
    .await;
    let topic = m.topic.clone();
    let uids = |pods: Vec<k8s_openapi::api::core::v1::Pod>| -> Vec<String> {
        pods.into_iter().filter_map(|p| p.metadata.uid).collect()
    };
    let before = uids(s.pods().await);

    // A wrong password: the destination becomes unreachable, with the reason in the condition.
    s.secret("destination-credentials", "password", "wrong")
        .await;
    s.wait_mirror(
        "dr",
        "destination unreachable",
        Duration::from_secs(60),
        |m| {
            m.status
                .as_ref()
                .and_then(|st| condition(&st.conditions, "DestinationReachable"))
                .is_some_and(|c| c.0 == "False")
        },
    )
    .await;
    // The right password again: reachable, and the fetcher pods were replaced to pick it up.
    s.secret(
        "destination-credentials",
        "password",
        bed.var("KMIRROR_MIRROR_PASSWORD"),
    )
    .await;
    s.wait_mirror(
        "dr",
        "destination reachable",
        Duration::from_secs(60),
        |m| {
            m.status
                .as_ref()
                .and_then(|st| condition(&st.conditions, "DestinationReachable"))
                .is_some_and(|c| c.0 == "True")
        },
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = uids(s.pods().await);
        if now.len() == 2 && now.iter().all(|u| !before.contains(u)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fetcher pods were not replaced after the Secret changed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    s.wait_topic("t", "MIRRORING", Duration::from_secs(60), |t| {
        all_partitions(t, PartitionState::Mirroring, 2)
    })
    .await;

    // Deleting the MirrorTopic stops its fetchers, keeps the data, tombstones its state.
    let api: kube::Api<kmirror_crds::v1alpha1::MirrorTopic> =
        kube::Api::namespaced(s.client.clone(), &s.ns);
    api.delete("t", &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.topic("t").await.is_some() || !s.pods().await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the MirrorTopic or its pods remain"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let dest = bed.dest_config(DestUser::Admin);
    assert_eq!(
        watermarks(&dest, &topic, 0).unwrap().1,
        500,
        "destination data kept"
    );
    let state = recorded(bed, &format!("{}/dr", s.ns), &topic, 0);
    assert!(
        state.state.is_none() && state.position.is_none(),
        "state tombstoned: {state:?}"
    );

    // The state is forgotten, the data is not: a new MirrorTopic of that source topic onto the
    // same (non-empty) destination topic is refused, with the record count and no write.
    s.apply_topic("u", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let refused = s
        .wait_topic(
            "u",
            "FAILED DestinationNotEmpty",
            Duration::from_secs(90),
            |t| all_partitions(t, PartitionState::Failed, 2),
        )
        .await;
    let errors: Vec<String> = refused
        .status
        .as_ref()
        .map(|st| {
            st.partitions
                .iter()
                .map(|p| p.last_error.clone().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        errors
            .iter()
            .all(|e| e.contains("already holds 500 records") && e.contains("no state")),
        "the refusal names the records and the reason: {errors:?}"
    );
    assert_eq!(
        watermarks(&dest, &topic, 0).unwrap().1,
        500,
        "nothing appended to the kept data"
    );

    // Deleting the ClusterMirror removes its MirrorTopics.
    let mirrors: kube::Api<kmirror_crds::v1alpha1::ClusterMirror> =
        kube::Api::namespaced(s.client.clone(), &s.ns);
    mirrors.delete("dr", &Default::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !s.topics().await.is_empty() || mirrors.get_opt("dr").await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the ClusterMirror or its MirrorTopics remain"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(s.pods().await.is_empty());
    s.cleanup().await;
}

/// Two MirrorTopics of one mirror name the same source topic (the second with another
/// destination topic). They would share the state records and both run fetchers; the second is
/// refused (Stalled, SourceTopicTaken, an Event), runs no fetcher and creates no topic, and
/// deleting it leaves the owner's records and mirroring alone.
#[tokio::test]
async fn a_second_topic_of_one_source_topic_is_refused_and_its_deletion_keeps_the_owners_state() {
    use kmirror_e2e::fetcher::recorded;
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-owner").await;
    let m = mirrored_topic(
        bed,
        &s,
        "first",
        400,
        93,
        Scenario::mirror_spec(bed),
        Duration::from_secs(90),
    )
    .await;
    let copy = unique_name("second-copy");
    s.apply_topic(
        "second",
        json!({"mirror": "dr", "sourceTopic": m.topic, "destinationTopic": copy}),
    )
    .await;
    let refused = s
        .wait_topic("second", "refused", Duration::from_secs(60), |t| {
            t.status
                .as_ref()
                .and_then(|st| condition(&st.conditions, "Stalled"))
                .is_some_and(|c| c.0 == "True" && c.1 == "SourceTopicTaken")
        })
        .await;
    let (_, _, message) =
        condition(&refused.status.unwrap().conditions, "Ready").expect("a Ready condition");
    assert!(
        message.contains("already mirrored by MirrorTopic first"),
        "{message}"
    );
    let events = s.events("second").await;
    assert!(
        events
            .iter()
            .any(|(reason, _)| reason == "SourceTopicTaken"),
        "{events:?}"
    );
    // Some seconds later: still no fetcher and no destination topic for the second.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let label = "kmirror.io/mirror-topic";
    let theirs: Vec<String> = s
        .pods()
        .await
        .into_iter()
        .filter(|p| p.labels().get(label).is_some_and(|v| v == "second"))
        .map(|p| p.name_any())
        .collect();
    assert!(
        theirs.is_empty(),
        "fetchers of the refused topic: {theirs:?}"
    );
    assert!(
        watermarks(&bed.dest_config(DestUser::Admin), &copy, 0).is_err(),
        "the refused topic created {copy}"
    );
    // Deleting the refused topic keeps the owner's records; the owner mirrors on.
    Api::<MirrorTopic>::namespaced(s.client.clone(), &s.ns)
        .delete("second", &Default::default())
        .await
        .expect("delete the second topic");
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.topic("second").await.is_some() {
        assert!(Instant::now() < deadline, "the second topic is not gone");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mirror = format!("{}/dr", s.ns);
    for p in 0..2 {
        let r = recorded(bed, &mirror, &m.topic, p);
        assert!(
            r.state.is_some() && r.position.is_some(),
            "partition {p}: the owner's records are gone: {r:?}"
        );
    }
    produce_all(
        &bed.source_config(),
        &m.topic,
        &mixed_records(100, 2, 0, 94),
        &[],
    )
    .unwrap();
    wait_caught_up(bed, &m.topic, 2).await;
    let t = s.topic("first").await.expect("the owner");
    assert!(
        all_partitions(&t, PartitionState::Mirroring, 2),
        "{:?}",
        t.status
    );
    s.cleanup().await;
}

/// A topic created Paused waits in PAUSED without passing through MIRRORING (no fetcher ever
/// runs, nothing is copied); resuming it mirrors everything.
#[tokio::test]
async fn a_topic_created_paused_never_mirrors_until_resumed() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "op-born-paused").await;
    let topic = unique_name("born-paused");
    create_topic(&bed.source_config(), &topic, 2, &[])
        .await
        .unwrap();
    produce_all(
        &bed.source_config(),
        &topic,
        &mixed_records(200, 2, 0, 95),
        &[],
    )
    .unwrap();
    let _op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic(
        "t",
        json!({"mirror": "dr", "sourceTopic": topic, "state": "Paused"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let t = s.topic("t").await.expect("the topic");
        for p in t.status.iter().flat_map(|st| st.partitions.iter()) {
            seen.insert(p.state.as_str());
        }
        assert!(
            !seen.contains("MIRRORING"),
            "a topic created Paused went through MIRRORING: {seen:?}"
        );
        assert!(
            s.pods().await.is_empty(),
            "a fetcher pod for a Paused topic"
        );
        if all_partitions(&t, PartitionState::Paused, 2) {
            // Status writes are at most one a second, so a passing MIRRORING can escape the
            // loop above; the state epoch counts every transition: PREPARING (1), PAUSED (2).
            for p in &t.status.as_ref().unwrap().partitions {
                assert_eq!(
                    p.state_epoch, 2,
                    "partition {}: PAUSED after {} transitions, not UNKNOWN → PREPARING → PAUSED",
                    p.partition, p.state_epoch
                );
            }
            break;
        }
        assert!(Instant::now() < deadline, "not PAUSED: {:?}", t.status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dest = bed.dest_config(DestUser::Admin);
    for p in 0..2 {
        assert_eq!(
            watermarks(&dest, &topic, p).map(|w| w.1).unwrap_or(0),
            0,
            "partition {p} copied while Paused"
        );
    }
    s.patch_topic("t", json!({"state": "Mirroring"})).await;
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, 2)
    })
    .await;
    wait_caught_up(bed, &topic, 2).await;
    s.cleanup().await;
}

/// A pinned cluster ID that does not match (here `spec.source.clusterId` set to another
/// cluster's, as after a DNS switch to the wrong cluster) is a hard stop for every MirrorTopic of
/// the mirror, not only a ClusterMirror condition: the fetchers are removed, nothing more is
/// copied, the topic says why. Pinning the right ID again resumes without loss.
#[tokio::test]
async fn a_pinned_cluster_id_that_does_not_match_stops_every_topic_and_its_fetchers() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "pinned").await;
    let spec = Scenario::mirror_spec(bed);
    let m = mirrored_topic(
        bed,
        &s,
        "pinned",
        100,
        23,
        spec.clone(),
        Duration::from_secs(90),
    )
    .await;
    let dest = bed.dest_config(DestUser::Admin);
    let real_id = s
        .mirror("dr")
        .await
        .status
        .and_then(|st| st.source_cluster_id)
        .expect("the ClusterMirror reports the source cluster ID");
    let mut wrong = spec.clone();
    wrong["source"]["clusterId"] = json!("AAAAAAAAAAAAAAAAAAAAAA");
    s.apply_mirror("dr", wrong).await;
    let t = s
        .wait_topic(
            "pinned",
            "ClusterIdMismatch",
            Duration::from_secs(60),
            |t| {
                t.status
                    .as_ref()
                    .and_then(|st| condition(&st.conditions, "Ready"))
                    .is_some_and(|c| c.1 == "ClusterIdMismatch")
            },
        )
        .await;
    let message = condition(&t.status.unwrap().conditions, "Ready").unwrap().2;
    assert!(
        message.contains("AAAAAAAAAAAAAAAAAAAAAA") && message.contains(&real_id),
        "the reason names both IDs: {message}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pods_per_partition(&s.pods().await).is_empty() {
        assert!(
            Instant::now() < deadline,
            "fetcher pods still run with a mismatched cluster ID"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Nothing more is copied.
    let end = watermarks(&dest, &m.topic, 0).unwrap().1;
    produce_all(
        &bed.source_config(),
        &m.topic,
        &mixed_records(20, 2, 100, 24),
        &[],
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        watermarks(&dest, &m.topic, 0).unwrap().1,
        end,
        "copied past a mismatched pin"
    );
    assert!(
        s.events("pinned")
            .await
            .iter()
            .any(|(r, _)| r == "ClusterIdMismatch"),
        "{:?}",
        s.events("pinned").await
    );
    // The right ID: mirroring resumes, everything once at its own offset.
    let mut right = spec;
    right["source"]["clusterId"] = json!(real_id);
    s.apply_mirror("dr", right).await;
    s.wait_topic("pinned", "MIRRORING", Duration::from_secs(90), |t| {
        all_partitions(t, PartitionState::Mirroring, 2)
    })
    .await;
    wait_caught_up(bed, &m.topic, 2).await;
    assert_eq!(verify_all(bed, &s.ns, "dr", &m.topic, 2), 120);
    s.cleanup().await;
}

/// A graceful failover of a partition that cannot be drained (FAILED for a foreign write on the
/// destination): the partition stays FAILED and the status says to fail over immediately — no
/// fetcher restarted every few seconds against the same refusal. The other partition drains and
/// stops; the immediate failover then stops the failed one at its last mirrored offset.
#[tokio::test]
async fn a_graceful_failover_of_a_partition_that_cannot_drain_stays_failed_without_restarts() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "nodrain").await;
    let spec = Scenario::mirror_spec(bed);
    let m = mirrored_topic(bed, &s, "nodrain", 100, 31, spec, Duration::from_secs(90)).await;
    let source = bed.source_config();
    // A foreign record on destination partition 0, then more source records: the fetcher of
    // partition 0 stops for ForeignWrite.
    produce_all(
        &bed.dest_config(DestUser::Admin),
        &m.topic,
        &mixed_records(1, 1, 0, 32),
        &[],
    )
    .unwrap();
    produce_all(&source, &m.topic, &mixed_records(20, 2, 0, 33), &[]).unwrap();
    s.wait_topic(
        "nodrain",
        "partition 0 FAILED",
        Duration::from_secs(60),
        |t| {
            t.status.as_ref().is_some_and(|st| {
                st.partitions
                    .iter()
                    .any(|p| p.partition == 0 && p.state == PartitionState::Failed)
            })
        },
    )
    .await;
    let topic_spec = |state: &str, mode: &str| json!({"mirror": "dr", "sourceTopic": m.topic, "state": state, "failover": {"mode": mode}});
    s.apply_topic("nodrain", topic_spec("Stopped", "Graceful"))
        .await;
    // For 20 s: partition 0 stays FAILED and gets no fetcher; partition 1 drains and stops.
    let mut uids = std::collections::BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        for pod in s.pods().await {
            let parts = pod
                .annotations()
                .get("kmirror.io/partitions")
                .cloned()
                .unwrap_or_default();
            if parts.split(',').any(|p| p == "0") {
                uids.insert(pod.uid().unwrap_or_default());
            }
        }
        let t = s.topic("nodrain").await.unwrap();
        let p0 = t.status.as_ref().unwrap().partitions[0].clone();
        assert_eq!(p0.state, PartitionState::Failed, "{p0:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        uids.is_empty(),
        "{} fetcher pods were started for a partition that cannot drain",
        uids.len()
    );
    let t = s
        .wait_topic(
            "nodrain",
            "partition 1 STOPPED",
            Duration::from_secs(60),
            |t| {
                t.status.as_ref().is_some_and(|st| {
                    st.partitions
                        .iter()
                        .any(|p| p.partition == 1 && p.state == PartitionState::Stopped)
                })
            },
        )
        .await;
    let status = t.status.unwrap();
    let ready = condition(&status.conditions, "Ready").unwrap();
    assert!(
        ready.2.contains("spec.failover.mode: Immediate") && ready.2.contains("ForeignWrite"),
        "the status says how to go on: {ready:?}"
    );
    // Immediately, then: STOPPED at the last mirrored offset.
    s.apply_topic("nodrain", topic_spec("Stopped", "Immediate"))
        .await;
    let t = s
        .wait_topic("nodrain", "STOPPED", Duration::from_secs(60), |t| {
            all_partitions(t, PartitionState::Stopped, 2)
        })
        .await;
    let p0 = &t.status.unwrap().partitions[0];
    // 50 copies (0..=49), then the foreign record at 50: the LMO is the last copy, not the
    // foreign record.
    assert_eq!(p0.last_mirrored_offset, Some(49), "{p0:?}");
    s.cleanup().await;
}

/// Two partitions on one fetcher pod (`partitionsPerPod: 2`); a foreign record on destination
/// partition 0 stops that partition for ForeignWrite. Partition 1 only shared its process: it is
/// never FAILED, its fetcher comes back and it mirrors every source record at its own offset.
#[tokio::test]
async fn a_partition_that_stops_for_a_reason_does_not_fail_the_others_of_its_pod() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "bystander").await;
    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = json!({"partitionsPerPod": 2});
    let m = mirrored_topic(bed, &s, "bystander", 100, 41, spec, Duration::from_secs(90)).await;
    let source = bed.source_config();
    produce_all(
        &bed.dest_config(DestUser::Admin),
        &m.topic,
        &mixed_records(1, 1, 0, 42),
        &[],
    )
    .unwrap();
    produce_all(&source, &m.topic, &mixed_records(40, 2, 0, 43), &[]).unwrap();
    let partition = |t: &MirrorTopic, p: i32| {
        t.status
            .as_ref()
            .and_then(|st| st.partitions.iter().find(|x| x.partition == p).cloned())
    };
    let source_end = watermarks(&source, &m.topic, 1).unwrap().1;
    let dest = bed.dest_config(DestUser::Admin);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut p0_failed = false;
    loop {
        let t = s.topic("bystander").await.unwrap();
        let (p0, p1) = (partition(&t, 0).unwrap(), partition(&t, 1).unwrap());
        let foreign = |e: &Option<String>| e.as_deref().unwrap_or("").contains("another client");
        assert!(
            p1.state != PartitionState::Failed && !foreign(&p1.last_error),
            "partition 1 was failed for partition 0's finding: {p1:?}"
        );
        p0_failed |= p0.state == PartitionState::Failed && foreign(&p0.last_error);
        let p1_end = watermarks(&dest, &m.topic, 1).map(|w| w.1).unwrap_or(-1);
        if p0_failed && p1.state == PartitionState::Mirroring && p1_end == source_end {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partition 0 FAILED for the foreign write ({p0_failed}) and partition 1 caught up \
             ({p1_end} of {source_end}) within 90 s: {p0:?} {p1:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let report = verify(
        bed,
        &source,
        &format!("{}/dr", s.ns),
        &m.topic,
        &m.topic,
        1,
        Isolation::ReadCommitted,
    );
    assert!(
        report.is_clean() && report.offsets_identical && report.trailing == 0,
        "partition 1: {report:?}"
    );
    let t = s.topic("bystander").await.unwrap();
    assert_eq!(
        partition(&t, 0).unwrap().retry_attempt,
        Some(-1),
        "the finding is not retried"
    );
    s.cleanup().await;
}
