//! Destination topics on the replicated pair: the replication factor they are created with comes
//! from the `ClusterMirror`'s `topicCreation`, a `MirrorTopic`'s own overriding it, and a factor
//! above the destination's broker count is refused in the topic's status with nothing created,
//! and a destination topic that exists already keeps its replicas (shown in the status);
//! the destination's `bootstrapServers` moves to another address of the same cluster under
//! traffic and the copy goes on at identical offsets, while an address of another cluster is
//! refused with `ClusterIdMismatch` and nothing is written there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic, PartitionState};
use kmirror_e2e::Testbed;
use kmirror_e2e::faults::{self, create_replicated_topic, read_values};
use kmirror_e2e::kafka::{DestUser, mixed_records, produce_all, unique_name, watermarks};
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, condition, eventually};
use kmirror_state::store::ensure_state_topic;
use kube::api::{Api, Patch, PatchParams};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::{Value, json};

/// The replicated pair's connections for a mirror, with `extra` merged into the spec.
fn replicated_spec(bed: &Testbed, extra: Value) -> Value {
    let mut spec = json!({
        "source": {"bootstrapServers": bed.var("KMIRROR_R_SOURCE_BOOTSTRAP")},
        "destination": {
            "bootstrapServers": bed.var("KMIRROR_R_DEST_BOOTSTRAP"),
            "allowInsecure": true,
            "sasl": {"mechanism": "PLAIN", "username": "mirror",
                     "password": {"name": "destination-credentials", "key": "password"}}
        },
        "sync": {"interval": "5s"}
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

/// Server-side applies `object` (a `kind` named `name`): another checkout's tests may have
/// installed an older schema of the CRDs on the shared apiserver meanwhile, so a refusal installs
/// this one's again and retries, and `present` must hold on what was stored.
async fn apply<K>(s: &Scenario, name: &str, object: Value, present: impl Fn(&Value) -> bool)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
{
    let api = Api::<K>::namespaced(s.client.clone(), &s.ns);
    let params = PatchParams::apply("kmirror-e2e").force();
    for attempt in 1.. {
        match api.patch(name, &params, &Patch::Apply(&object)).await {
            Ok(stored) if present(&serde_json::to_value(&stored).unwrap()) => return,
            outcome => {
                assert!(attempt < 10, "apply {name}: {outcome:?}");
                kmirror_e2e::crds::install(&s.client).await.expect("CRDs");
            }
        }
    }
}

/// Merge-patches the ClusterMirror `dr`'s spec, installing this checkout's CRDs again when an
/// older schema refuses it.
async fn patch_mirror(s: &Scenario, spec: Value) {
    let api = Api::<ClusterMirror>::namespaced(s.client.clone(), &s.ns);
    for attempt in 1.. {
        match api
            .patch(
                "dr",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
        {
            Ok(_) => return,
            Err(e) => {
                assert!(attempt < 10, "patch ClusterMirror dr: {e}");
                kmirror_e2e::crds::install(&s.client).await.expect("CRDs");
            }
        }
    }
}

/// The replica count of each partition of `topic` (empty: no such topic).
fn replication_factors(config: &ClientConfig, topic: &str) -> Vec<usize> {
    let consumer: BaseConsumer = config.create().expect("metadata client");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(15))
        .expect("metadata");
    md.topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.replicas().len()))
        .collect()
}

/// Whether `topic` exists on the cluster of `config`.
fn exists(config: &ClientConfig, topic: &str) -> bool {
    !replication_factors(config, topic).is_empty()
}

fn topic_object(name: &str, mirror: &str, source: &str, extra: Value) -> Value {
    let mut spec = json!({"mirror": mirror, "sourceTopic": source});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn destination_topics_get_the_replication_factor_of_the_mirror_or_their_own() {
    let bed = faults::replicated();
    let source = bed.r_source_config();
    let dest = bed.r_dest_config(DestUser::Admin);
    ensure_state_topic(&dest, kmirror_crds::v1alpha1::DEFAULT_STATE_TOPIC).expect("state topic");
    let s = Scenario::new(bed, "dest-rf").await;
    let [by_mirror, by_topic, too_many, existing] =
        ["rf-mirror", "rf-topic", "rf-many", "rf-existing"].map(unique_name);
    for t in [&by_mirror, &by_topic, &too_many, &existing] {
        create_replicated_topic(&source, t, 2, &[]).await.unwrap();
    }
    // A destination topic that exists already (empty) keeps its 3 replicas.
    create_replicated_topic(&dest, &existing, 2, &[])
        .await
        .unwrap();
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let spec = replicated_spec(bed, json!({"topicCreation": {"replicationFactor": 2}}));
    apply::<ClusterMirror>(
        &s,
        "dr",
        json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
               "metadata": {"name": "dr"}, "spec": spec}),
        |m| m.pointer("/spec/topicCreation/replicationFactor") == Some(&json!(2)),
    )
    .await;
    for (t, factor) in [
        (&by_mirror, None),
        (&by_topic, Some(3)),
        (&too_many, Some(4)),
        (&existing, None),
    ] {
        let extra = factor.map_or(
            json!({}),
            |f| json!({"topicCreation": {"replicationFactor": f}}),
        );
        apply::<MirrorTopic>(&s, t, topic_object(t, "dr", t, extra), |m| {
            m.pointer("/spec/topicCreation/replicationFactor") == factor.map(|f| json!(f)).as_ref()
        })
        .await;
    }

    // Too many replicas: a reason naming the factor and the broker count, nothing created, no
    // fetcher started.
    let refused = s
        .wait_topic(
            &too_many,
            "the factor refused",
            Duration::from_secs(90),
            |t| {
                t.status.as_ref().is_some_and(|st| {
                    condition(&st.conditions, "Ready")
                        .is_some_and(|(_, reason, _)| reason == "ReplicationFactorTooLarge")
                })
            },
        )
        .await;
    let (_, _, message) = condition(&refused.status.unwrap().conditions, "Ready").unwrap();
    eprintln!("refused: {message}");
    assert!(
        message.contains("replication factor 4")
            && message.contains("3 brokers")
            && message.contains("spec.topicCreation.replicationFactor"),
        "{message}"
    );
    for (t, want) in [(&by_mirror, 2), (&by_topic, 3), (&existing, 3)] {
        let m = s
            .wait_topic(t, "MIRRORING", Duration::from_secs(120), |m| {
                all_partitions(m, PartitionState::Mirroring, 2)
            })
            .await;
        assert_eq!(
            replication_factors(&dest, t),
            vec![want, want],
            "replicas of {t}"
        );
        assert_eq!(
            m.status.unwrap().destination_replication_factor,
            Some(want as i32),
            "the status of {t} shows its replicas"
        );
    }
    assert!(
        !exists(&dest, &too_many),
        "a topic with too many replicas is not created"
    );
    let pods = s.pods().await;
    assert!(
        !pods.iter().any(|p| p
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.values().any(|v| v == &too_many))),
        "no fetcher runs for the refused topic"
    );
    // The reason stays without a storm of retries: a few Events at most.
    let warnings = s
        .events(&too_many)
        .await
        .into_iter()
        .filter(|(reason, _)| reason == "ReplicationFactorTooLarge")
        .count();
    assert!(
        (1..=3).contains(&warnings),
        "{warnings} ReplicationFactorTooLarge events"
    );
    s.cleanup().await;
    drop(op);
}

const PARTITIONS: i32 = 2;

/// Produces bursts to `topic` until `stop`; returns how many records it sent.
fn steady_producer(
    source: ClientConfig,
    topic: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let (mut seed, mut sent) = (4100, 0u64);
        while !stop.load(Ordering::Relaxed) {
            let records = mixed_records(100, PARTITIONS, 0, seed);
            produce_all(&source, &topic, &records, &[("acks", "all")]).expect("produce");
            sent += records.len() as u64;
            seed += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
        sent
    })
}

/// The bootstrap servers in the args of the mirror's fetcher pods.
async fn pod_addresses(s: &Scenario) -> Vec<(String, String)> {
    s.pods()
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let args = p.spec.as_ref().unwrap().containers[0]
                .args
                .clone()
                .unwrap_or_default();
            let dest = args
                .iter()
                .position(|a| a == "--destination-bootstrap")
                .and_then(|i| args.get(i + 1).cloned())
                .unwrap_or_default();
            (p.metadata.uid.clone().unwrap_or_default(), dest)
        })
        .collect()
}

#[tokio::test]
async fn the_destination_moves_to_another_address_of_the_same_cluster_only() {
    moves(json!({"partitionsPerPod": 1})).await;
}

#[tokio::test]
async fn a_pool_moves_with_its_destination_and_stops_at_another_cluster() {
    moves(json!({"pool": {"pods": 1}})).await;
}

/// A mirror (fetchers as `fetcher` says) under traffic: its destination address moves to
/// another address of the same cluster, then to another cluster, then back.
async fn moves(fetcher: Value) {
    let bed = faults::replicated();
    let source = bed.r_source_config();
    let dest = bed.r_dest_config(DestUser::Admin);
    let other = bed.dest_config(DestUser::Admin);
    let s = Scenario::new(bed, "dest-move").await;
    // A state topic of its own: that nothing is written to the other cluster is then that it
    // has no such topic.
    let state_topic = unique_name("__kmirror_state_move");
    ensure_state_topic(&dest, &state_topic).expect("state topic");
    let topic = unique_name("move");
    create_replicated_topic(&source, &topic, PARTITIONS, &[])
        .await
        .unwrap();
    let op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let spec = replicated_spec(bed, json!({"stateTopic": state_topic, "fetcher": fetcher}));
    apply::<ClusterMirror>(
        &s,
        "dr",
        json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "ClusterMirror",
               "metadata": {"name": "dr"}, "spec": spec}),
        |_| true,
    )
    .await;
    apply::<MirrorTopic>(&s, "t", topic_object("t", "dr", &topic, json!({})), |_| {
        true
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer(source.clone(), topic.clone(), stop.clone());
    s.wait_topic("t", "MIRRORING", Duration::from_secs(120), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
    })
    .await;
    let recorded = s
        .wait_mirror(
            "dr",
            "the destination's cluster ID",
            Duration::from_secs(60),
            |m| {
                m.status
                    .as_ref()
                    .is_some_and(|st| st.destination_cluster_id.is_some())
            },
        )
        .await
        .status
        .unwrap()
        .destination_cluster_id
        .unwrap();
    eventually("fetcher pods run", Duration::from_secs(60), async || {
        !pod_addresses(&s).await.is_empty()
    })
    .await;
    let before = pod_addresses(&s).await;

    // The same cluster at another address (two of its brokers, the other way round): the pods
    // are replaced by pods with the new address, and the copy goes on.
    let moved = "127.0.0.1:29132,127.0.0.1:29122";
    assert_ne!(moved, bed.var("KMIRROR_R_DEST_BOOTSTRAP"));
    patch_mirror(&s, json!({"destination": {"bootstrapServers": moved}})).await;
    eventually(
        "every fetcher pod replaced by one with the new address",
        Duration::from_secs(90),
        async || {
            let now = pod_addresses(&s).await;
            !now.is_empty()
                && now
                    .iter()
                    .all(|(uid, addr)| addr == moved && before.iter().all(|(u, _)| u != uid))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let sent = producer.join().unwrap();
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| watermarks(&source, &topic, p).unwrap().1)
        .collect();
    s.wait_topic(
        "t",
        "mirroring with zero lag",
        Duration::from_secs(120),
        |t| {
            all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
                && t.status.as_ref().is_some_and(|st| {
                    st.partitions
                        .iter()
                        .all(|p| p.destination_log_end_offset == Some(ends[p.partition as usize]))
                })
        },
    )
    .await;
    for p in 0..PARTITIONS {
        let from_source = read_values(&source, &topic, p, 0, "read_committed").unwrap();
        let on_destination = read_values(&dest, &topic, p, 0, "read_uncommitted").unwrap();
        assert_eq!(
            from_source.len(),
            ends[p as usize] as usize,
            "source partition {p}"
        );
        assert!(
            from_source == on_destination,
            "partition {p}: the destination differs from the source ({} vs {} records)",
            on_destination.len(),
            from_source.len()
        );
    }
    eprintln!("{sent} records copied at identical offsets across the move");
    s.wait_mirror(
        "dr",
        "Ready at the new address",
        Duration::from_secs(60),
        |m| {
            m.status.as_ref().is_some_and(|st| {
                condition(&st.conditions, "Ready").is_some_and(|(status, _, _)| status == "True")
                    && st.destination_cluster_id.as_deref() == Some(recorded.as_str())
            })
        },
    )
    .await;

    // Another cluster: refused, naming both IDs; its fetchers stop and nothing is written there.
    let other_id = {
        let consumer: BaseConsumer = other.create().unwrap();
        consumer
            .client()
            .fetch_cluster_id(Duration::from_secs(15))
            .expect("the other cluster's ID")
    };
    assert_ne!(other_id, recorded);
    patch_mirror(
        &s,
        json!({"destination": {"bootstrapServers": bed.dest_bootstrap()}}),
    )
    .await;
    let m = s
        .wait_mirror("dr", "ClusterIdMismatch", Duration::from_secs(60), |m| {
            m.status.as_ref().is_some_and(|st| {
                condition(&st.conditions, "DestinationReachable")
                    .is_some_and(|(_, reason, _)| reason == "ClusterIdMismatch")
            })
        })
        .await;
    let st = m.status.unwrap();
    let (_, _, message) = condition(&st.conditions, "DestinationReachable").unwrap();
    eprintln!("refused: {message}");
    assert!(
        message.contains(&recorded) && message.contains(&other_id),
        "{message}"
    );
    assert_eq!(
        st.destination_cluster_id.as_deref(),
        Some(recorded.as_str())
    );
    let t = s
        .wait_topic("t", "ClusterIdMismatch", Duration::from_secs(60), |t| {
            t.status.as_ref().is_some_and(|st| {
                condition(&st.conditions, "Ready")
                    .is_some_and(|(_, reason, _)| reason == "ClusterIdMismatch")
            })
        })
        .await;
    let (_, _, message) = condition(&t.status.unwrap().conditions, "Ready").unwrap();
    assert!(
        message.contains(&recorded) && message.contains(&other_id),
        "{message}"
    );
    eventually(
        "the fetchers stopped",
        Duration::from_secs(60),
        async || pod_addresses(&s).await.is_empty(),
    )
    .await;
    assert!(
        !exists(&other, &state_topic),
        "no state topic on the other cluster"
    );
    assert!(!exists(&other, &topic), "no destination topic there");

    // Put right, the copy resumes where it stopped.
    patch_mirror(&s, json!({"destination": {"bootstrapServers": moved}})).await;
    let more = mixed_records(100, PARTITIONS, 0, 9100);
    produce_all(&source, &topic, &more, &[("acks", "all")]).expect("produce");
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| watermarks(&source, &topic, p).unwrap().1)
        .collect();
    s.wait_topic("t", "mirroring again", Duration::from_secs(120), |t| {
        all_partitions(t, PartitionState::Mirroring, PARTITIONS as usize)
            && t.status.as_ref().is_some_and(|st| {
                st.partitions
                    .iter()
                    .all(|p| p.destination_log_end_offset == Some(ends[p.partition as usize]))
            })
    })
    .await;
    for p in 0..PARTITIONS {
        assert!(
            read_values(&source, &topic, p, 0, "read_committed").unwrap()
                == read_values(&dest, &topic, p, 0, "read_uncommitted").unwrap(),
            "partition {p} after the address was put right"
        );
    }
    s.cleanup().await;
    drop(op);
}
