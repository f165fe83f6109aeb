//! What the operator costs the API server at steady state: eight topics mirroring under steady
//! traffic for 20 s. No reconcile may list the namespace's MirrorTopics (that grew with the square
//! of the topics); a topic's own status writes must not trigger its reconciles (nor the
//! ClusterMirror's status writes every topic's); the mirror and its Secrets come from the watch
//! caches, not a GET each per reconcile; and the progress of mirroring (offsets, lag)
//! reaches the status at most every progress interval (default 10 s) per topic, while a change of
//! state is written at once. Alone in its binary, so that the API server's request counters
//! during the window are this operator's — but for the namespace controller, which lists every
//! kind of object in a namespace being deleted (a few per 20 s here).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::{create_topic, unique_name};
use kmirror_e2e::kube::apiserver_requests;
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;

/// The API server's count of `verb` requests on `resource` (all scopes and codes).
async fn requests(client: &kube::Client, verb: &str, resource: &str) -> f64 {
    apiserver_requests(client)
        .await
        .get(&(verb.to_string(), resource.to_string()))
        .copied()
        .unwrap_or(0.0)
}

/// Produces a record to each topic every 100 ms until `stop`.
fn traffic(
    bed: &Testbed,
    topics: Vec<String>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let producer: BaseProducer = bed.source_config().create().expect("producer");
    std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for topic in &topics {
                let value = format!("record {n}");
                let _ = producer.send(BaseRecord::<(), _>::to(topic).payload(&value));
            }
            n += 1;
            producer.poll(Duration::from_millis(100));
        }
        let _ = producer.flush(Duration::from_secs(10));
    })
}

fn last_mirrored(t: &MirrorTopic) -> i64 {
    t.status
        .as_ref()
        .and_then(|s| s.partitions.first())
        .and_then(|p| p.last_mirrored_offset)
        .unwrap_or(-1)
}

#[tokio::test]
async fn mirroring_topics_under_traffic_cost_the_api_server_little() {
    let bed = Testbed::get();
    kmirror_e2e::fetcher::ensure_state_topic(bed);
    let s = Scenario::new(bed, "economy").await;
    // The shipped progress interval, not the harness's shorter one.
    let op = OperatorProcess::spawn_with_env(
        bed,
        &s.ns,
        &[],
        &[("KMIRROR_STATUS_PROGRESS_INTERVAL_MS", "10000")],
    );
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut topics = Vec::new();
    for name in names {
        let topic = unique_name(&format!("economy-{name}"));
        create_topic(&bed.source_config(), &topic, 1, &[])
            .await
            .unwrap();
        s.apply_topic(name, json!({"mirror": "dr", "sourceTopic": topic}))
            .await;
        topics.push(topic);
    }
    for name in names {
        s.wait_topic(name, "MIRRORING", Duration::from_secs(90), |t| {
            all_partitions(t, PartitionState::Mirroring, 1)
        })
        .await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let producing = traffic(bed, topics, stop.clone());
    // Let the traffic reach every status once before counting.
    for name in names {
        s.wait_topic(name, "progress", Duration::from_secs(60), |t| {
            last_mirrored(t) >= 0
        })
        .await;
    }
    let reconciles = |op: &OperatorProcess| {
        op.metric("kmirror_operator_reconciles_total{controller=\"mirrortopic\"}")
            .unwrap_or(0.0)
    };
    let progress_before: Vec<i64> = s.topics().await.iter().map(last_mirrored).collect();
    let reads = async || {
        (
            requests(&s.client, "GET", "clustermirrors").await,
            requests(&s.client, "GET", "secrets").await,
        )
    };
    let (lists, patches, gets, before) = (
        requests(&s.client, "LIST", "mirrortopics").await,
        requests(&s.client, "APPLY", "mirrortopics").await,
        reads().await,
        reconciles(&op),
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    let lists = requests(&s.client, "LIST", "mirrortopics").await - lists;
    let patches = requests(&s.client, "APPLY", "mirrortopics").await - patches;
    let gets = {
        let after = reads().await;
        (after.0 - gets.0, after.1 - gets.1)
    };
    let ran = reconciles(&op) - before;
    let progress_after: Vec<i64> = s.topics().await.iter().map(last_mirrored).collect();
    let own = op
        .metric("kmirror_operator_topic_lookups_total{source=\"list\"}")
        .unwrap_or(0.0);
    stop.store(true, Ordering::Relaxed);
    producing.join().unwrap();
    s.cleanup().await;
    eprintln!(
        "in 20 s under traffic: {ran} MirrorTopic reconciles, {lists} LIST requests and \
         {patches} status writes (server-side APPLY) on mirrortopics, {} GET requests of \
         clustermirrors and {} of secrets; last mirrored offsets {progress_before:?} -> {progress_after:?}",
        gets.0, gets.1
    );
    assert!(
        lists <= 16.0,
        "{lists} LIST requests on mirrortopics during {ran} reconciles in 20 s ({own} lookups of \
         the operator listed): reconciles must read the controller's cache"
    );
    // The bed's node agent reads each fetcher pod's Secret volume every 30 s, as a kubelet does:
    // up to eight GETs of secrets in the window are not the operator's.
    assert!(
        gets.0 <= 2.0 && gets.1 <= 8.0 + 2.0,
        "{} GET requests of clustermirrors and {} of secrets during {ran} reconciles in 20 s: \
         reconciles must read the mirror and its Secrets from the watch caches",
        gets.0,
        gets.1
    );
    assert!(
        patches <= 24.0,
        "{patches} status writes of eight topics in 20 s: progress alone may be written once per \
         topic every 10 s"
    );
    assert!(
        ran <= 32.0,
        "{ran} reconciles of eight topics in 20 s: more than a look every 5 s each (steady \
         mirroring is looked at every 10 s) — the operator's own status writes must not trigger \
         reconciles"
    );
    assert!(
        progress_before
            .iter()
            .zip(&progress_after)
            .all(|(before, after)| after > before),
        "every topic's status shows the progress of the 20 s: {progress_before:?} -> \
         {progress_after:?}"
    );
}
