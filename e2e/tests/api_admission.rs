//! The kmirror.io/v1alpha1 API against the real apiserver: examples apply, docs and printer
//! columns show, invalid objects and forbidden updates are refused with clear messages.

use std::process::Command;

use kmirror_e2e::{Testbed, crds, namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("kmirror.io", "v1alpha1", kind))
}

fn api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &resource(kind))
}

fn mirror(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
           "metadata": {"name": name}, "spec": spec})
}

fn topic(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
           "metadata": {"name": name}, "spec": spec})
}

fn valid_mirror_spec() -> Value {
    json!({
        "source": {"bootstrapServers": "127.0.0.1:19092"},
        "destination": {"bootstrapServers": "127.0.0.1:29092",
            "allowInsecure": true,
            "sasl": {"mechanism": "PLAIN", "username": "mirror",
                     "password": {"name": "creds", "key": "password"}}}
    })
}

/// `valid_mirror_spec()` with a JSON-pointer-addressed field replaced.
fn mirror_with(pointer: &str, value: Value) -> Value {
    let mut spec = valid_mirror_spec();
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let target = if parent.is_empty() {
        &mut spec
    } else {
        spec.pointer_mut(parent)
            .unwrap_or_else(|| panic!("no {parent}"))
    };
    target[key] = value;
    spec
}

async fn create(api: &Api<DynamicObject>, object: Value) -> Result<DynamicObject, kube::Error> {
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await
}

fn rejection(result: Result<DynamicObject, kube::Error>, case: &str) -> String {
    match result {
        Ok(_) => panic!("{case}: the apiserver accepted an invalid object"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                status.code, 422,
                "{case}: expected 422 Invalid, got {status:?}"
            );
            status.message
        }
        Err(e) => panic!("{case}: unexpected error {e}"),
    }
}

#[tokio::test]
async fn invalid_objects_are_rejected_with_clear_messages() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.unwrap();
    crds::install(&client).await.unwrap();
    let ns = namespace::create(&client, "api-invalid").await.unwrap();
    let mirrors = api(&client, &ns, "ClusterMirror");
    let topics = api(&client, &ns, "MirrorTopic");

    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "source equals destination",
            mirror_with(
                "/destination",
                json!({"bootstrapServers": "127.0.0.1:19092"}),
            ),
            "source and destination must be different clusters",
        ),
        (
            "bootstrap servers without a port",
            mirror_with("/source/bootstrapServers", json!("broker-without-port")),
            "spec.source.bootstrapServers",
        ),
        (
            "client certificate without key",
            mirror_with(
                "/source/tls",
                json!({"clientCert": {"name": "s", "key": "tls.crt"}}),
            ),
            "tls.clientCert and tls.clientKey must be given together",
        ),
        (
            "SCRAM without password",
            mirror_with(
                "/source/sasl",
                json!({"mechanism": "SCRAM-SHA-512", "username": "u"}),
            ),
            "PLAIN and SCRAM need a password Secret",
        ),
        (
            "both username and usernameSecret",
            mirror_with(
                "/source/sasl",
                json!({"mechanism": "PLAIN", "username": "u",
                       "usernameSecret": {"name": "s", "key": "user"},
                       "password": {"name": "s", "key": "pw"}}),
            ),
            "exactly one of username or usernameSecret",
        ),
        (
            "OAUTHBEARER without oauth",
            mirror_with("/source/sasl", json!({"mechanism": "OAUTHBEARER"})),
            "OAUTHBEARER needs the oauth block",
        ),
        (
            "unknown SASL mechanism",
            mirror_with(
                "/source/sasl",
                json!({"mechanism": "GSSAPI", "username": "u",
                "password": {"name": "s", "key": "pw"}}),
            ),
            "Unsupported value: \"GSSAPI\"",
        ),
        (
            "inline password in properties",
            mirror_with("/source/properties", json!({"sasl.password": "hunter2"})),
            "properties takes only tuning keys",
        ),
        (
            "a secret in consumerProperties",
            mirror_with(
                "/fetcher",
                json!({"consumerProperties": {"ssl.key.password": "hunter2"}}),
            ),
            "consumerProperties takes only tuning keys",
        ),
        (
            "kmirror's own label in the pod template",
            mirror_with(
                "/fetcher",
                json!({"template": {"labels": {"kmirror.io/mirror": "other"}}}),
            ),
            "template.labels may not set kmirror's own labels",
        ),
        (
            "kmirror's own annotation in the pod template",
            mirror_with(
                "/fetcher",
                json!({"template": {"annotations": {"kmirror.io/spec-hash": "0"}}}),
            ),
            "template.annotations may not set kmirror.io/* annotations",
        ),
        (
            "a security setting in producerProperties",
            mirror_with(
                "/fetcher",
                json!({"producerProperties": {"enable.ssl.certificate.verification": "false"}}),
            ),
            "producerProperties takes only tuning keys",
        ),
        (
            "the bootstrap list under an alias",
            mirror_with(
                "/source/properties",
                json!({"metadata.broker.list": "elsewhere:9092"}),
            ),
            "properties takes only tuning keys",
        ),
        (
            "SASL without TLS",
            mirror_with("/destination/allowInsecure", json!(false)),
            "SASL without TLS sends the credentials readable on the network",
        ),
        (
            "no host name check",
            mirror_with(
                "/source/tls",
                json!({"ca": {"name": "s", "key": "ca.crt"}, "verifyHostname": false}),
            ),
            "tls.verifyHostname: false accepts a certificate issued for another host",
        ),
        (
            "an http token endpoint",
            mirror_with(
                "/source",
                json!({"bootstrapServers": "a:9093", "tls": {},
                       "sasl": {"mechanism": "OAUTHBEARER", "oauth": {
                           "tokenEndpointUrl": "http://idp.example/token", "clientId": "c",
                           "clientSecret": {"name": "s", "key": "secret"}}}}),
            ),
            "an http:// token endpoint sends the OAuth client secret readable",
        ),
        (
            "filter with name and prefix",
            mirror_with(
                "/topics",
                json!({"include": [{"name": "a", "prefix": "b"}]}),
            ),
            "a filter sets exactly one of name, prefix or regex",
        ),
        (
            "empty filter",
            mirror_with("/topics", json!({"exclude": [{}]})),
            "a filter sets exactly one of name, prefix or regex",
        ),
        (
            "sync interval without unit",
            mirror_with("/sync", json!({"interval": "30"})),
            "spec.sync.interval",
        ),
        (
            "zero partitions per pod",
            mirror_with("/fetcher", json!({"partitionsPerPod": 0})),
            "spec.fetcher.partitionsPerPod",
        ),
        (
            "throttle below 1 KiB/s",
            mirror_with("/fetcher", json!({"throttleBytesPerSecond": 10})),
            "spec.fetcher.throttleBytesPerSecond",
        ),
        (
            "malformed cluster id",
            mirror_with("/destination/clusterId", json!("not-a-cluster-id")),
            "spec.destination.clusterId",
        ),
        (
            "secret reference without key",
            mirror_with("/destination/sasl/password", json!({"name": "creds"})),
            "spec.destination.sasl.password.key: Required value",
        ),
    ];
    assert!(cases.len() >= 10);
    for (case, spec, expected) in cases {
        let message = rejection(create(&mirrors, mirror("bad", spec)).await, case);
        assert!(
            message.contains(expected),
            "{case}: message {message:?} lacks {expected:?}"
        );
    }

    let topic_cases: Vec<(&str, Value, &str)> = vec![
        (
            "unknown state",
            json!({"mirror": "m", "sourceTopic": "t", "state": "Running"}),
            "Unsupported value: \"Running\"",
        ),
        (
            "illegal topic name",
            json!({"mirror": "m", "sourceTopic": "bad topic!"}),
            "spec.sourceTopic",
        ),
        (
            "unknown failover mode",
            json!({"mirror": "m", "sourceTopic": "t", "failover": {"mode": "Later"}}),
            "Unsupported value: \"Later\"",
        ),
        (
            "missing mirror",
            json!({"sourceTopic": "t"}),
            "spec.mirror: Required value",
        ),
    ];
    for (case, spec, expected) in topic_cases {
        let message = rejection(create(&topics, topic("bad", spec)).await, case);
        assert!(
            message.contains(expected),
            "{case}: message {message:?} lacks {expected:?}"
        );
    }
    namespace::delete(&client, &ns).await;
}

#[tokio::test]
async fn forbidden_updates_are_refused_and_allowed_ones_pass() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.unwrap();
    crds::install(&client).await.unwrap();
    let ns = namespace::create(&client, "api-update").await.unwrap();
    let topics = api(&client, &ns, "MirrorTopic");
    create(
        &topics,
        topic(
            "orders",
            json!({"mirror": "m", "sourceTopic": "orders", "destinationTopic": "orders-copy"}),
        ),
    )
    .await
    .expect("a valid MirrorTopic is accepted");

    let patch = |spec: Value| {
        let topics = topics.clone();
        async move {
            topics
                .patch(
                    "orders",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": spec})),
                )
                .await
        }
    };
    let refused: Vec<(&str, Value, &str)> = vec![
        (
            "change the source topic",
            json!({"sourceTopic": "payments"}),
            "spec.sourceTopic is immutable",
        ),
        (
            "change the mirror",
            json!({"mirror": "other"}),
            "spec.mirror is immutable",
        ),
        (
            "change the destination topic",
            json!({"destinationTopic": "x"}),
            "spec.destinationTopic is immutable",
        ),
        (
            "invalid state",
            json!({"state": "Failover"}),
            "Unsupported value: \"Failover\"",
        ),
        (
            "more replicas than Kafka allows",
            json!({"topicCreation": {"replicationFactor": 40000}}),
            "spec.topicCreation.replicationFactor",
        ),
    ];
    for (case, spec, expected) in refused {
        let message = rejection(patch(spec).await, case);
        assert!(
            message.contains(expected),
            "{case}: message {message:?} lacks {expected:?}"
        );
    }

    // Valid lifecycle changes pass; Stopped -> Paused does not.
    patch(json!({"state": "Paused"}))
        .await
        .expect("Mirroring -> Paused");
    patch(json!({"state": "Stopped"}))
        .await
        .expect("Paused -> Stopped");
    let message = rejection(patch(json!({"state": "Paused"})).await, "Stopped -> Paused");
    assert!(
        message.contains("a Stopped topic cannot be Paused"),
        "{message}"
    );
    // Back to Mirroring only deliberately: a GitOps tool re-applying the old manifest (state
    // Mirroring) must not re-mirror over what applications wrote since the failover.
    let message = rejection(
        patch(json!({"state": "Mirroring"})).await,
        "Stopped -> Mirroring without a resume token",
    );
    assert!(
        message.contains("does not go back to Mirroring by itself")
            && message.contains("kubectl mirror resume"),
        "{message}"
    );
    patch(json!({"state": "Mirroring", "failover": {"resumeToken": "r1"}}))
        .await
        .expect("Stopped -> Mirroring with a new resume token");
    patch(json!({"state": "Stopped"}))
        .await
        .expect("Mirroring -> Stopped again");
    let message = rejection(
        patch(json!({"state": "Mirroring", "failover": {"resumeToken": "r1"}})).await,
        "Stopped -> Mirroring with the token of the last resume",
    );
    assert!(message.contains("resumeToken"), "{message}");
    patch(json!({"state": "Mirroring", "failover": {"resumeToken": "r2"}}))
        .await
        .expect("a second deliberate resume");

    // A ClusterMirror keeps its state topic and what it reverses: the state records, fetchers
    // and topics all hang on them. The destination's address (the operator checks that it still
    // reaches the same cluster), credentials and tuning may change.
    let mirrors = api(&client, &ns, "ClusterMirror");
    create(&mirrors, mirror("m", valid_mirror_spec()))
        .await
        .expect("a valid ClusterMirror is accepted");
    let patch_mirror = |spec: Value| {
        let mirrors = mirrors.clone();
        async move {
            mirrors
                .patch(
                    "m",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": spec})),
                )
                .await
        }
    };
    let refused: Vec<(&str, Value, &str)> = vec![
        (
            "another state topic",
            json!({"stateTopic": "__other_state"}),
            "spec.stateTopic is immutable",
        ),
        (
            "reversing a mirror later",
            json!({"reverseOf": "ns/dr"}),
            "spec.reverseOf is immutable",
        ),
    ];
    for (case, spec, expected) in refused {
        let message = rejection(patch_mirror(spec).await, case);
        assert!(
            message.contains(expected),
            "{case}: message {message:?} lacks {expected:?}"
        );
    }
    patch_mirror(json!({"destination": {"bootstrapServers": "127.0.0.1:29192,127.0.0.1:29193"}}))
        .await
        .expect("the destination's listeners moved");
    patch_mirror(json!({"destination": {"sasl": {"password": {"name": "creds-2", "key": "pw"}}}}))
        .await
        .expect("rotating the destination credentials");
    patch_mirror(json!({"topicCreation": {"replicationFactor": 3}}))
        .await
        .expect("the replication factor of topics created from now on");
    let message = rejection(
        patch_mirror(json!({"topicCreation": {"replicationFactor": 0}})).await,
        "a replication factor of 0",
    );
    assert!(
        message.contains("spec.topicCreation.replicationFactor"),
        "{message}"
    );
    patch_mirror(json!({"fetcher": {"partitionsPerPod": 4}}))
        .await
        .expect("tuning the fetchers");
    patch_mirror(json!({"fetcher": {
        "consumerProperties": {"fetch.wait.max.ms": "100", "fetch.message.max.bytes": "1048576"},
        "producerProperties": {"queue.buffering.max.ms": "20", "batch.size": "65536"}
    }}))
    .await
    .expect("tuning keys, also under their aliases");
    patch_mirror(json!({"fetcher": {"template": {
        "labels": {"team": "payments"},
        "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "logLevel": "info,kmirror_wire=debug"
    }}}))
    .await
    .expect("a pod template of the tenant's own labels and annotations");
    namespace::delete(&client, &ns).await;
}

/// Runs kubectl, retrying for a while: right after a CRD is established, kubectl's discovery and
/// the apiserver's OpenAPI document can lag behind for a few seconds.
fn kubectl(bed: &Testbed, args: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = Command::new(bed.var("KMIRROR_KUBECTL"))
            .env("KUBECONFIG", bed.var("KUBECONFIG"))
            .args(args)
            .output()
            .expect("run kubectl");
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

#[tokio::test]
async fn examples_apply_and_read_well_in_kubectl() {
    let bed = Testbed::get();
    let client = bed.kube_client().await.unwrap();
    crds::install(&client).await.unwrap();
    let ns = namespace::create(&client, "api-examples").await.unwrap();
    let examples = kmirror_e2e::testbed::repo_root().join("examples");
    let mut files: Vec<_> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "examples/ holds {files:?}");
    for file in &files {
        let out = kubectl(
            bed,
            &[
                "apply",
                "--server-side",
                "-n",
                &ns,
                "-f",
                file.to_str().unwrap(),
            ],
        );
        assert!(
            out.contains("serverside-applied"),
            "{}: {out}",
            file.display()
        );
    }

    let explain = kubectl(bed, &["explain", "clustermirror.spec.sync.interval"]);
    assert!(explain.contains("How often to sync"), "{explain}");
    let explain = kubectl(bed, &["explain", "mirrortopic.spec.state"]);
    assert!(explain.contains("Desired state"), "{explain}");

    let get = kubectl(bed, &["get", "clustermirrors", "-n", &ns]);
    let header = get.lines().next().unwrap_or_default();
    for column in ["NAME", "READY", "TOPICS", "MIRRORING", "MAX-LAG", "AGE"] {
        assert!(header.contains(column), "missing {column} in {header:?}");
    }
    assert!(get.contains("minimal") && get.contains("filtered"), "{get}");
    let wide = kubectl(bed, &["get", "cmr", "-n", &ns, "-o", "wide"]);
    assert!(
        wide.contains("127.0.0.1:19094"),
        "wide output shows the source: {wide}"
    );
    let get = kubectl(bed, &["get", "mt", "-n", &ns]);
    for column in [
        "MIRROR",
        "SOURCE-TOPIC",
        "STATE",
        "PHASE",
        "READY",
        "MIRRORING",
        "MAX-LAG",
    ] {
        assert!(get.contains(column), "missing {column} in {get:?}");
    }
    assert!(
        get.contains("Stopped"),
        "the failover example is Stopped: {get}"
    );
    let all = kubectl(bed, &["get", "kmirror", "-n", &ns]);
    assert!(
        all.contains("clustermirror.kmirror.io/minimal") && all.contains("mirrortopic.kmirror.io/"),
        "the kmirror category lists both kinds: {all}"
    );
    namespace::delete(&client, &ns).await;
}
