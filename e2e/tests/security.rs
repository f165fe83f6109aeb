//! What a user who may create a ClusterMirror can make the operator do: it reads only Secrets
//! labelled for it (an unlabelled one gets no connection attempt at all — checked with a
//! listener on loopback that counts connections), and it refuses what admission refuses for
//! objects admitted before.

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::operator::{OperatorProcess, Scenario};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// A loopback listener that counts the connections made to it (and drops them).
fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stream.is_ok() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (address, count)
}

fn reasons(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> String {
    conditions
        .iter()
        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn an_unlabelled_secret_is_never_read_nor_sent_anywhere() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "sec-label").await;
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-database"},
        "stringData": {"password": "NOT-FOR-KMIRROR-2718"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let (address, connections) = counting_listener();
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["source"] = json!({
        "bootstrapServers": address,
        "allowInsecure": true,
        "sasl": {"mechanism": "PLAIN", "username": "u",
                 "password": {"name": "app-database", "key": "password"}}
    });
    s.apply_mirror("dr", spec).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": "anything"}))
        .await;

    // The mirror says why, naming the label; the topic too.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cm = s.mirror("dr").await;
        let conditions = cm.status.map(|st| st.conditions).unwrap_or_default();
        let topic = s.topic("t").await.and_then(|t| t.status);
        let topic_conditions = topic.map(|st| st.conditions).unwrap_or_default();
        let mirror_says = conditions.iter().any(|c| {
            c.type_ == "SourceReachable"
                && c.status == "False"
                && c.reason == "SecretNotLabelled"
                && c.message.contains("kmirror.io/credentials=true")
                && c.message.contains("app-database")
        });
        let topic_says = topic_conditions
            .iter()
            .any(|c| c.reason == "SecretNotLabelled");
        if mirror_says && topic_says {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no SecretNotLabelled condition:\nmirror:\n{}\ntopic:\n{}",
            reasons(&conditions),
            reasons(&topic_conditions)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let events = s.events("dr").await;
    assert!(
        events.iter().any(|(r, _)| r == "SecretNotLabelled"),
        "a Warning Event names the refusal: {events:?}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "the source address got a connection although its Secret is not labelled"
    );
    assert!(
        s.pods().await.is_empty(),
        "no fetcher pod mounts the Secret"
    );

    // Labelled, the same Secret is used: the listener sees the operator connect (so the count
    // above could have caught a connection).
    secrets
        .patch(
            "app-database",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"kmirror.io/credentials": "true"}}})),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while connections.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the labelled Secret was not used within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = op.log_text();
    assert!(
        !log.contains("NOT-FOR-KMIRROR-2718"),
        "the secret value is in the operator log"
    );
    drop(op);
    s.cleanup().await;
}
