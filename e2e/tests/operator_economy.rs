//! What the operator costs the API server at steady state: mirroring topics are reconciled every
//! few seconds, and no reconcile may list the namespace's MirrorTopics for it (that grew with the
//! square of the topics). Alone in its binary, so that the API server's request counters during
//! the window are this operator's — but for the namespace controller, which lists every kind of
//! object in a namespace being deleted (a few per 20 s here), hence a bound relative to the
//! reconciles: the operator that listed did at least one list per reconcile.

use std::time::Duration;

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::{create_topic, unique_name};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use serde_json::json;

/// The API server's count of `verb` requests on `resource` (all scopes and codes).
async fn requests(client: &kube::Client, verb: &str, resource: &str) -> f64 {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .expect("the API server's metrics");
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            l.contains(&format!("verb=\"{verb}\""))
                && l.contains(&format!("resource=\"{resource}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn mirroring_topics_are_reconciled_without_listing_mirror_topics() {
    let bed = Testbed::get();
    kmirror_e2e::fetcher::ensure_state_topic(bed);
    let s = Scenario::new(bed, "economy").await;
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for name in names {
        let topic = unique_name(&format!("economy-{name}"));
        create_topic(&bed.source_config(), &topic, 1, &[])
            .await
            .unwrap();
        s.apply_topic(name, json!({"mirror": "dr", "sourceTopic": topic}))
            .await;
    }
    for name in names {
        s.wait_topic(name, "MIRRORING", Duration::from_secs(90), |t| {
            all_partitions(t, PartitionState::Mirroring, 1)
        })
        .await;
    }
    let reconciles = |op: &OperatorProcess| {
        op.metric("kmirror_operator_reconciles_total{controller=\"mirrortopic\"}")
            .unwrap_or(0.0)
    };
    let (lists, before) = (
        requests(&s.client, "LIST", "mirrortopics").await,
        reconciles(&op),
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    let lists = requests(&s.client, "LIST", "mirrortopics").await - lists;
    let ran = reconciles(&op) - before;
    let own = op
        .metric("kmirror_operator_topic_lookups_total{source=\"list\"}")
        .unwrap_or(0.0);
    s.cleanup().await;
    eprintln!("in 20 s: {ran} MirrorTopic reconciles, {lists} LIST requests on mirrortopics");
    assert!(
        ran >= 16.0,
        "eight mirroring topics are looked at every few seconds: {ran} reconciles in 20 s"
    );
    assert!(
        lists * 4.0 <= ran,
        "{lists} LIST requests on mirrortopics during {ran} reconciles in 20 s ({own} lookups of \
         the operator listed): reconciles must read the controller's cache"
    );
}
