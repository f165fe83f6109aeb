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

/// A ClusterMirror asking for an image or a service account the installation does not allow
/// gets no fetcher pod and says why; allowed again, its topic mirrors.
#[tokio::test]
async fn a_disallowed_fetcher_image_or_service_account_creates_no_pod() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "sec-policy").await;
    let topic = kmirror_e2e::kafka::unique_name("sec-policy");
    kmirror_e2e::kafka::create_topic(&bed.source_config(), &topic, 1, &[])
        .await
        .unwrap();
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    for (field, fetcher) in [
        (
            "spec.fetcher.image",
            json!({"image": "evil.example/miner:latest"}),
        ),
        (
            "spec.fetcher.serviceAccountName",
            json!({"serviceAccountName": "cluster-admin-sa"}),
        ),
    ] {
        let mut spec = Scenario::mirror_spec(bed);
        spec["fetcher"] = fetcher.clone();
        s.apply_mirror("dr", spec).await;
        s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
            .await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let conditions = s
                .mirror("dr")
                .await
                .status
                .map(|st| st.conditions)
                .unwrap_or_default();
            let refused = conditions.iter().any(|c| {
                c.reason == "InvalidSpec"
                    && c.message.contains(field)
                    && c.message
                        .contains("not allowed by this kmirror installation")
            });
            let topic_says = s
                .topic("t")
                .await
                .and_then(|t| t.status)
                .map(|st| st.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.reason == "InvalidMirror" && c.message.contains(field));
            if refused && topic_says {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{fetcher}: no refusal naming {field}:\n{}",
                reasons(&conditions)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(s.pods().await.is_empty(), "{fetcher}: a fetcher pod exists");
    }
    // Allowed settings: the same topic gets its fetcher pod (the check above could fail).
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.pods().await.is_empty() {
        assert!(Instant::now() < deadline, "no fetcher pod once allowed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(op);
    s.cleanup().await;
}

/// Everything a person or a log shipper can see of kmirror right now, labelled by where it was.
async fn visible(bed: &Testbed, s: &Scenario, op: &OperatorProcess) -> Vec<(String, String)> {
    use k8s_openapi::api::core::v1::{Event, Pod};
    use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
    use kube::api::ListParams;
    let mut out = vec![("operator log".to_string(), op.log_text())];
    let lp = ListParams::default();
    let events = Api::<Event>::namespaced(s.client.clone(), &s.ns)
        .list(&lp)
        .await
        .unwrap();
    out.push((
        "events".into(),
        serde_json::to_string(&events.items).unwrap(),
    ));
    let mirrors = Api::<ClusterMirror>::namespaced(s.client.clone(), &s.ns)
        .list(&lp)
        .await
        .unwrap();
    let topics = Api::<MirrorTopic>::namespaced(s.client.clone(), &s.ns)
        .list(&lp)
        .await
        .unwrap();
    out.push((
        "ClusterMirrors and MirrorTopics".into(),
        serde_json::to_string(&(mirrors.items, topics.items)).unwrap(),
    ));
    let pods = Api::<Pod>::namespaced(s.client.clone(), &s.ns)
        .list(&lp)
        .await
        .unwrap();
    for pod in &pods.items {
        if let Some(ip) = pod.status.as_ref().and_then(|st| st.pod_ip.clone())
            && let Some(body) = kmirror_e2e::operator::http_get(&format!("{ip}:9464"), "/metrics")
        {
            out.push((
                format!("/metrics of pod {}", kube::ResourceExt::name_any(pod)),
                body,
            ));
        }
    }
    out.push((
        "pod specs".into(),
        serde_json::to_string(&pods.items).unwrap(),
    ));
    if let Some(body) = kmirror_e2e::operator::http_get(&op.http, "/metrics") {
        out.push(("operator /metrics".into(), body));
    }
    let pods_dir = std::path::PathBuf::from(bed.var("KMIRROR_PODS_DIR"));
    for dir in std::fs::read_dir(&pods_dir).into_iter().flatten().flatten() {
        if !dir
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{}_", s.ns))
        {
            continue;
        }
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = String::from_utf8_lossy(&std::fs::read(file.path()).unwrap_or_default())
                .into_owned();
            out.push((format!("pod log {}", file.path().display()), text));
        }
    }
    // This scenario's processes: its operator (`--namespace NS`) and its fetcher pods
    // (`--mirror NS/NAME`). Other tests run beside this one, and the fetchers the fetcher suites
    // start themselves take the bed's test password on their command line.
    for proc in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(proc.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if (cmdline.contains("kmirror") || cmdline.contains("kubectl-mirror"))
            && cmdline.contains(s.ns.as_str())
        {
            out.push((
                format!("/proc/{}/cmdline", proc.file_name().to_string_lossy()),
                cmdline,
            ));
        }
    }
    out
}

/// After a full run — mirroring, a wrong password, the Secret rotated back, a failover and a
/// failback with the plugin — no credential value appears anywhere kmirror shows things.
#[tokio::test]
async fn no_credential_value_leaks_into_logs_events_status_metrics_pods_or_plugin_output() {
    use kmirror_crds::v1alpha1::PartitionState;
    use kmirror_e2e::kafka::{create_topic, mixed_records, produce_all, unique_name};
    use kmirror_e2e::operator::all_partitions;
    const WRONG: &str = "WRONG-LEAK-CHECK-7f3a9c";
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let right = bed.var("KMIRROR_MIRROR_PASSWORD").to_string();
    let s = Scenario::new(bed, "sec-leak").await;
    let topic = unique_name("sec-leak");
    let source = bed.source_config();
    create_topic(&source, &topic, 2, &[]).await.unwrap();
    produce_all(&source, &topic, &mixed_records(300, 2, 0, 3), &[]).unwrap();
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let mirroring =
        |t: &kmirror_crds::v1alpha1::MirrorTopic| all_partitions(t, PartitionState::Mirroring, 2);
    s.wait_topic("t", "MIRRORING", Duration::from_secs(90), mirroring)
        .await;
    let mut seen = visible(bed, &s, &op).await;
    let mut outputs = Vec::new();

    // A wrong password: the fetchers are replaced and cannot authenticate.
    s.secret("destination-credentials", "password", WRONG).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reach = s
            .mirror("dr")
            .await
            .status
            .map(|st| st.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "DestinationReachable");
        if reach.is_some_and(|c| c.status == "False") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the wrong password was never noticed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    seen.extend(visible(bed, &s, &op).await);
    // Rotated back: mirroring resumes.
    s.secret("destination-credentials", "password", &right)
        .await;
    produce_all(&source, &topic, &mixed_records(100, 2, 0, 4), &[]).unwrap();
    s.wait_topic("t", "MIRRORING", Duration::from_secs(120), mirroring)
        .await;
    seen.extend(visible(bed, &s, &op).await);
    for args in [
        vec!["status", "dr"],
        vec![
            "failover",
            "dr",
            "--topic",
            &topic,
            "--wait",
            "--timeout",
            "3m",
        ],
        vec!["status", "dr"],
        vec![
            "failback",
            "dr",
            "--topic",
            &topic,
            "--wait",
            "--timeout",
            "3m",
        ],
        vec!["status", "dr-failback"],
    ] {
        let output = kmirror_e2e::soak::mirror::plugin(bed, &s.ns, &args)
            .unwrap_or_else(|e| panic!("kubectl mirror {args:?}: {e:#}"));
        outputs.push((format!("kubectl mirror {}", args.join(" ")), output));
    }
    seen.extend(visible(bed, &s, &op).await);
    seen.extend(outputs);

    // What was looked at is real: the places exist and name the Secret (not its value).
    let named = |what: &str| seen.iter().any(|(w, _)| w.starts_with(what));
    for place in [
        "operator log",
        "events",
        "pod specs",
        "operator /metrics",
        "/metrics of pod",
        "pod log",
        "/proc/",
        "kubectl mirror failover",
    ] {
        assert!(named(place), "nothing was collected from {place}");
    }
    assert!(
        seen.iter()
            .any(|(w, text)| w == "pod specs" && text.contains("destination-credentials")),
        "the pod specs name the Secret"
    );
    let leaks: Vec<String> = seen
        .iter()
        .flat_map(|(place, text)| {
            [right.as_str(), WRONG]
                .into_iter()
                .filter(|secret| text.contains(secret))
                .map(move |secret| format!("{place} shows {secret:?}"))
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "credential values leaked:\n{}",
        leaks.join("\n")
    );
    drop(op);
    s.cleanup().await;
}

/// A mirror never runs more fetcher pods than the installation allows per mirror.
#[tokio::test]
async fn a_mirror_runs_no_more_fetcher_pods_than_the_installation_allows() {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "sec-cap").await;
    let topic = kmirror_e2e::kafka::unique_name("sec-cap");
    kmirror_e2e::kafka::create_topic(&bed.source_config(), &topic, 3, &[])
        .await
        .unwrap();
    let op = OperatorProcess::spawn(bed, &s.ns, &["--max-fetcher-pods-per-mirror", "2"]);
    s.apply_mirror("dr", Scenario::mirror_spec(bed)).await;
    s.apply_topic("t", json!({"mirror": "dr", "sourceTopic": topic}))
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = s.events("t").await;
        if let Some((_, message)) = events.iter().find(|(r, _)| r == "FetcherPodLimit") {
            assert!(message.contains("allows 2 per mirror"), "{message}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no FetcherPodLimit event: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for _ in 0..10 {
        let pods = s.pods().await.len();
        assert!(pods <= 2, "{pods} fetcher pods for a limit of 2");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(s.pods().await.len(), 2, "the pods that fit run");
    drop(op);
    s.cleanup().await;
}

/// `--metrics-addr` moves `/metrics` off the probe address (e.g. to loopback, for a scraping
/// sidecar or node agent only); the probes stay.
#[tokio::test]
async fn metrics_can_be_served_on_an_address_of_their_own() {
    use kmirror_e2e::operator::{free_port, http_get};
    let bed = Testbed::get();
    let s = Scenario::new(bed, "sec-metrics").await;
    let metrics = format!("127.0.0.1:{}", free_port());
    let op = OperatorProcess::spawn(bed, &s.ns, &["--metrics-addr", &metrics]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_get(&op.http, "/healthz").is_none() {
        assert!(Instant::now() < deadline, "/healthz never answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let body = http_get(&metrics, "/metrics").expect("/metrics on its own address");
    assert!(body.contains("kmirror_operator_"), "{body}");
    assert!(
        http_get(&op.http, "/metrics").is_none(),
        "/metrics is still served on the probe address"
    );
    assert!(
        http_get(&metrics, "/healthz").is_none(),
        "only /metrics there"
    );
    drop(op);
    s.cleanup().await;
}
