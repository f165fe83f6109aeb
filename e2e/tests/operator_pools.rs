//! Fetcher pools on the bed: a `ClusterMirror` with `spec.fetcher.pool.pods` runs every topic's
//! partitions on `<mirror>-pool-<i>` pods, assigned by rendezvous hashing. The pool spreads the
//! partitions over its pods; a new topic moves no partition already running; growing the pool
//! under traffic moves only the partitions whose pod changes, with nothing lost and nothing
//! copied twice (the verifier, record by record at identical offsets); a partition that must stop
//! inside a pool pod (a foreign write) fails alone while the pod's other partitions copy on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{ensure_state_topic, verify};
use kmirror_e2e::kafka::{DestUser, create_topic, unique_name, watermarks};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, eventually};
use kmirror_fetcher::config::Isolation;
use kmirror_state::leases::LeaseUnit;
use kmirror_state::pool::assign;
use kube::ResourceExt;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;

const PARTITIONS: i32 = 4;

/// Unit → pool index, from the pool pods' annotations (pods being deleted left out).
fn placement(pods: &[Pod]) -> BTreeMap<LeaseUnit, u32> {
    let mut out = BTreeMap::new();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let Some(index) = pod
            .labels()
            .get("kmirror.io/fetcher-index")
            .and_then(|i| i.parse().ok())
        else {
            continue;
        };
        let units = pod
            .annotations()
            .get("kmirror.io/units")
            .cloned()
            .unwrap_or_default();
        for part in units.split(';').filter(|p| !p.is_empty()) {
            let (topic, ps) = part.split_once('=').expect("topic=partitions");
            for p in ps.split(',') {
                out.insert(LeaseUnit::new(topic, p.parse().unwrap()), index);
            }
        }
    }
    out
}

/// What rendezvous hashing says: unit → pool index.
fn expected(units: &[LeaseUnit], pods: u32) -> BTreeMap<LeaseUnit, u32> {
    assign(units, pods)
        .into_iter()
        .flat_map(|(i, us)| us.into_iter().map(move |u| (u, i)))
        .collect()
}

fn units_of(topics: &[String]) -> Vec<LeaseUnit> {
    topics
        .iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| LeaseUnit::new(t, p)))
        .collect()
}

/// Pool pods that run (ready) — each exactly once per index.
async fn pool_pods(s: &Scenario) -> Vec<Pod> {
    s.pods()
        .await
        .into_iter()
        .filter(|p| p.labels().contains_key("kmirror.io/pool"))
        .collect()
}

/// Waits until the pool runs exactly `want` (every pod ready, none being deleted).
async fn wait_placement(s: &Scenario, want: &BTreeMap<LeaseUnit, u32>, what: &str) -> Vec<Pod> {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let pods = pool_pods(s).await;
        let settled = pods.iter().all(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .is_some_and(|c| c.ready)
        });
        let last = placement(&pods);
        if settled && &last == want {
            return pods;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the pool never ran what rendezvous hashing says; it runs {last:?}, wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_mirroring(s: &Scenario, names: &[&str]) {
    for name in names {
        s.wait_topic(name, "MIRRORING", Duration::from_secs(120), |t| {
            all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
        })
        .await;
    }
}

/// Produces `n` keyed records to every partition of every topic.
fn produce(bed: &Testbed, topics: &[String], n: usize) {
    let producer: BaseProducer = bed
        .source_config()
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for topic in topics {
        for p in 0..PARTITIONS {
            for i in 0..n {
                let value = format!("{topic}-{p}-{i}");
                producer
                    .send(
                        BaseRecord::<str, str>::to(topic)
                            .partition(p)
                            .key(&value)
                            .payload(&value),
                    )
                    .expect("send");
                producer.poll(Duration::ZERO);
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// Produces to every partition of `topics` every 50 ms until `stop`.
fn traffic(
    bed: &Testbed,
    topics: Vec<String>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let producer: BaseProducer = bed
        .source_config()
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    std::thread::spawn(move || {
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for topic in &topics {
                for p in 0..PARTITIONS {
                    let value = format!("live {sent}");
                    let _ = producer.send(
                        BaseRecord::<str, str>::to(topic)
                            .partition(p)
                            .payload(&value),
                    );
                    sent += 1;
                }
            }
            producer.poll(Duration::from_millis(50));
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
        sent
    })
}

/// Waits until every partition of `topic` (MirrorTopic `name`) has mirrored its source end.
async fn wait_caught_up(bed: &Testbed, s: &Scenario, name: &str, topic: &str) {
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| watermarks(&bed.source_config(), topic, p).unwrap().1)
        .collect();
    let caught_up = |t: &MirrorTopic| {
        t.status.as_ref().is_some_and(|st| {
            st.partitions.len() == PARTITIONS as usize
                && st
                    .partitions
                    .iter()
                    .all(|p| p.last_mirrored_offset == Some(ends[p.partition as usize] - 1))
        })
    };
    s.wait_topic(
        name,
        "caught up with the source",
        Duration::from_secs(90),
        caught_up,
    )
    .await;
}

fn assert_exact(bed: &Testbed, mirror: &str, topic: &str) -> u64 {
    let mut matched = 0;
    for p in 0..PARTITIONS {
        let report = verify(
            bed,
            &bed.source_config(),
            mirror,
            topic,
            topic,
            p,
            Isolation::ReadCommitted,
        );
        assert!(report.is_clean(), "{topic}[{p}]: {report:?}");
        assert!(report.offsets_identical, "{topic}[{p}]: {report:?}");
        assert_eq!(report.trailing, 0, "{topic}[{p}]: duplicates: {report:?}");
        matched += report.matched;
    }
    matched
}

async fn source_topics(bed: &Testbed, prefix: &str, n: usize) -> Vec<String> {
    create_topics(
        bed,
        (0..n)
            .map(|i| unique_name(&format!("{prefix}-{i}")))
            .collect(),
    )
    .await
}

async fn create_topics(bed: &Testbed, topics: Vec<String>) -> Vec<String> {
    for topic in &topics {
        create_topic(&bed.source_config(), topic, PARTITIONS, &[])
            .await
            .unwrap();
    }
    topics
}

/// Five fresh topic names whose slices make the pool test's steps meaningful (a topic is one
/// slice, and hashing decides its pod): the first four use both pods of two, and growing to
/// three pods moves some of the five to the new pod but not all.
fn spread_names(prefix: &str) -> Vec<String> {
    loop {
        let names: Vec<String> = (0..5)
            .map(|i| unique_name(&format!("{prefix}-{i}")))
            .collect();
        let units = units_of(&names);
        let two: BTreeSet<u32> = expected(&units[..4 * PARTITIONS as usize], 2)
            .into_values()
            .collect();
        let three = expected(&units, 3);
        let on_new = three.values().filter(|i| **i == 2).count();
        if two.len() == 2 && on_new > 0 && on_new < units.len() {
            return names;
        }
    }
}

fn pooled_mirror(bed: &Testbed, pods: i32) -> serde_json::Value {
    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = json!({"pool": {"pods": pods}});
    spec
}

#[tokio::test]
async fn a_pool_spreads_partitions_a_new_topic_moves_none_and_growing_moves_only_what_it_must() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "pool").await;
    let mirror = format!("{}/dr", s.ns);
    let topics = create_topics(bed, spread_names("pool")).await;
    produce(bed, &topics, 100);
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", pooled_mirror(bed, 2)).await;
    let names = ["a", "b", "c", "d", "e"];
    for (name, topic) in names.iter().zip(&topics).take(4) {
        s.apply_topic(name, json!({"mirror": "dr", "sourceTopic": topic}))
            .await;
    }

    // Spread: 16 partitions of 4 topics on 2 pods, as rendezvous hashing says; both pods used.
    wait_mirroring(&s, &names[..4]).await;
    let four = units_of(&topics[..4]);
    let want = expected(&four, 2);
    let pods = wait_placement(&s, &want, "two pods").await;
    let used: BTreeSet<u32> = want.values().copied().collect();
    assert_eq!(used.len(), 2, "both pods run partitions: {want:?}");
    assert_eq!(pods.len(), 2, "one pod per index");
    assert!(
        pods.iter().all(|p| p
            .owner_references()
            .iter()
            .any(|o| o.kind == "ClusterMirror")),
        "pool pods belong to the ClusterMirror"
    );
    for name in &names[..4] {
        let t = s.topic(name).await.unwrap();
        let shown: BTreeSet<String> = t
            .status
            .unwrap()
            .partitions
            .iter()
            .filter_map(|p| p.fetcher_pod.clone())
            .collect();
        assert!(
            shown.iter().all(|p| p.starts_with("dr-pool-")),
            "{name}: the status names the pool pod: {shown:?}"
        );
    }

    // A new topic: no partition already running changes pods.
    s.apply_topic("e", json!({"mirror": "dr", "sourceTopic": topics[4]}))
        .await;
    wait_mirroring(&s, &names).await;
    let five = units_of(&topics);
    let want5 = expected(&five, 2);
    wait_placement(&s, &want5, "a fifth topic").await;
    for u in &four {
        assert_eq!(want5[u], want[u], "{u} stayed on its pod");
    }

    // Growing the pool under traffic: only the partitions rendezvous hashing gives the new pod
    // move; nothing is lost and nothing copied twice.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = traffic(bed, topics.clone(), stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.apply_mirror("dr", pooled_mirror(bed, 3)).await;
    let want3 = expected(&five, 3);
    wait_placement(&s, &want3, "three pods").await;
    let moved: Vec<&LeaseUnit> = five.iter().filter(|u| want3[*u] != want5[*u]).collect();
    assert!(!moved.is_empty(), "the new pod got partitions");
    assert!(
        moved.iter().all(|u| want3[*u] == 2),
        "only partitions for the new pod moved: {moved:?}"
    );
    wait_mirroring(&s, &names).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let live = producing.join().unwrap();
    assert!(live > 0);
    let mut matched = 0;
    for (name, topic) in names.iter().zip(&topics) {
        wait_caught_up(bed, &s, name, topic).await;
        matched += assert_exact(bed, &mirror, topic);
    }
    assert_eq!(
        matched,
        5 * PARTITIONS as u64 * 100 + live,
        "every record produced is on the destination once"
    );
    eprintln!(
        "pool: {} of {} partitions moved to the new pod; {matched} records exact",
        moved.len(),
        five.len()
    );
    s.cleanup().await;
    drop(op);
}

#[tokio::test]
async fn a_partition_that_stops_inside_a_pool_pod_fails_alone() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "poolstop").await;
    let topics = source_topics(bed, "poolstop", 2).await;
    produce(bed, &topics, 20);
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", pooled_mirror(bed, 1)).await;
    s.apply_topic("a", json!({"mirror": "dr", "sourceTopic": topics[0]}))
        .await;
    s.apply_topic("b", json!({"mirror": "dr", "sourceTopic": topics[1]}))
        .await;
    wait_mirroring(&s, &["a", "b"]).await;
    let before = wait_placement(&s, &expected(&units_of(&topics), 1), "one pod").await;
    wait_caught_up(bed, &s, "a", &topics[0]).await;
    assert_eq!(before.len(), 1);
    let uid = before[0].uid();

    // Another client writes into a[0] on the destination: the next copied record would not
    // land at its source offset. Then the source gets one more record.
    let foreign: BaseProducer = bed.dest_config(DestUser::Admin).create().expect("producer");
    foreign
        .send(
            BaseRecord::<str, str>::to(&topics[0])
                .partition(0)
                .payload("foreign"),
        )
        .expect("send");
    foreign.flush(Duration::from_secs(10)).expect("flush");
    produce(bed, &topics, 5);

    let failed = s
        .wait_topic("a", "a[0] FAILED", Duration::from_secs(90), |t| {
            t.status.as_ref().is_some_and(|st| {
                st.partitions
                    .iter()
                    .any(|p| p.partition == 0 && p.state == PartitionState::Failed)
            })
        })
        .await;
    let p0 = failed
        .status
        .unwrap()
        .partitions
        .into_iter()
        .find(|p| p.partition == 0)
        .unwrap();
    let reason = p0.last_error.clone().unwrap_or_default();
    assert!(
        reason.contains("another client"),
        "the reason names it: {reason}"
    );
    // Every other partition mirrors on: the new records reach them.
    wait_caught_up(bed, &s, "b", &topics[1]).await;
    let others = s
        .wait_topic("a", "a[1..] caught up", Duration::from_secs(60), |t| {
            t.status.as_ref().is_some_and(|st| {
                st.partitions.iter().filter(|p| p.partition != 0).all(|p| {
                    p.state == PartitionState::Mirroring && p.last_mirrored_offset == Some(24)
                })
            })
        })
        .await;
    assert_eq!(others.status.unwrap().partitions.len(), PARTITIONS as usize);
    let a = s.topic("a").await.unwrap().status.unwrap();
    assert!(
        a.partitions
            .iter()
            .filter(|p| p.partition != 0)
            .all(|p| p.last_error.is_none()),
        "the other partitions were not failed for a[0]'s finding: {a:?}"
    );
    eventually(
        "a pool pod runs the rest",
        Duration::from_secs(5),
        async || !pool_pods(&s).await.is_empty(),
    )
    .await;
    eprintln!("pool pod before the stop: {uid:?}");
    s.cleanup().await;
    drop(op);
}
