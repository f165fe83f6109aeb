//! An operator upgrade on the bed: the operator is stopped and started again with another
//! fetcher image (every fetcher pod's spec hash changes) while a per-partition mirror and a
//! pooled one copy under traffic. The fetcher pods are replaced one at a time per mirror (the
//! default `--fetcher-max-unavailable 1`; two at a time with 2), each replacement Ready and its
//! partitions copying again before the next pod is deleted; every pod ends on the new image; the mirror's Events
//! tell each replacement and the end; every record is on the destination once, at its offset
//! (the verifier).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{ensure_state_topic, verify};
use kmirror_e2e::kafka::{create_topic, unique_name, watermarks};
use kmirror_e2e::kube::is_ready;
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions, eventually};
use kmirror_fetcher::config::Isolation;
use kmirror_state::leases::LeaseUnit;
use kmirror_state::pool::assign;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;

/// Partitions of the per-partition mirror's topic: one pod each.
const PARTITIONS: i32 = 4;
/// Partitions of each of the pooled mirror's two topics.
const POOLED_PARTITIONS: i32 = 2;
const OLD_IMAGE: &str = "kmirror:test";
const NEW_IMAGE: &str = "kmirror:upgraded";

/// A partition's state and last mirrored offset in the status, and when it was read.
type Sample = (Instant, i32, PartitionState, Option<i64>);

/// One fetcher pod as the watch last saw it.
#[derive(Debug, Clone)]
struct Seen {
    uid: String,
    image: String,
    ready: bool,
    terminating: bool,
}

/// What the watch recorded of one mirror's pods.
#[derive(Debug, Default)]
struct Timeline {
    /// Pods by name, as last seen.
    pods: BTreeMap<String, Seen>,
    /// Most pods of the mirror unavailable at one moment (missing, not Ready or being deleted),
    /// and who they were.
    worst: (usize, Vec<String>),
    /// When an old-image pod was first seen being deleted, by name.
    deleted: BTreeMap<String, Instant>,
    /// When a new-image pod was first seen Ready, by name.
    ready: BTreeMap<String, Instant>,
    /// The watch's first listing is in: pods not seen yet are missing.
    listed: bool,
}

impl Timeline {
    fn see(&mut self, pod: &Pod, gone: bool, names: &BTreeSet<String>) {
        let name = pod.name_any();
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].image.clone())
            .unwrap_or_default();
        let seen = Seen {
            uid: pod.uid().unwrap_or_default(),
            ready: is_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            image,
        };
        if seen.image == OLD_IMAGE && (seen.terminating || gone) {
            self.deleted
                .entry(name.clone())
                .or_insert_with(Instant::now);
        }
        if seen.image == NEW_IMAGE && seen.ready && !seen.terminating && !gone {
            self.ready.entry(name.clone()).or_insert_with(Instant::now);
        }
        if gone {
            // Only the pod of that UID is gone (a replacement may already be seen).
            if self.pods.get(&name).is_some_and(|p| p.uid == seen.uid) {
                self.pods.remove(&name);
            }
        } else {
            self.pods.insert(name, seen);
        }
        self.count(names);
    }

    /// Counts the pods down now.
    fn count(&mut self, names: &BTreeSet<String>) {
        if !self.listed {
            return;
        }
        let down: Vec<String> = names
            .iter()
            .filter(|n| self.pods.get(*n).is_none_or(|p| !p.ready || p.terminating))
            .cloned()
            .collect();
        if down.len() > self.worst.0 {
            self.worst = (down.len(), down);
        }
    }
}

/// Watches the fetcher pods of `mirror` (names `names`) into `timeline` until the task is
/// aborted.
fn watch(
    client: Client,
    ns: &str,
    mirror: &str,
    names: BTreeSet<String>,
    timeline: Arc<Mutex<Timeline>>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<Pod> = Api::namespaced(client, ns);
    let config = watcher::Config::default().labels(&format!("kmirror.io/mirror={mirror}"));
    tokio::spawn(async move {
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let mut t = timeline.lock().unwrap();
            match event {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                    t.see(&p, false, &names)
                }
                Ok(watcher::Event::Delete(p)) => t.see(&p, true, &names),
                Ok(watcher::Event::InitDone) => {
                    t.listed = true;
                    t.count(&names);
                }
                _ => {}
            }
        }
    })
}

/// Produces to every partition of `topics` every 50 ms until `stop`; returns how many.
fn traffic(
    bed: &Testbed,
    topics: Vec<(String, i32)>,
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
            for (topic, partitions) in &topics {
                for p in 0..*partitions {
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

/// Two topic names whose slices land on different pods of a pool of two.
fn spread_pair() -> [String; 2] {
    loop {
        let names = [unique_name("upg-pool-a"), unique_name("upg-pool-b")];
        let units: Vec<LeaseUnit> = names
            .iter()
            .flat_map(|t| (0..POOLED_PARTITIONS).map(move |p| LeaseUnit::new(t, p)))
            .collect();
        if assign(&units, 2).len() == 2 {
            return names;
        }
    }
}

/// Waits until every named pod runs `image`, Ready and not being deleted.
async fn wait_image(s: &Scenario, names: &BTreeSet<String>, image: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let pods = s.pods().await;
        let on: BTreeSet<String> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.containers[0].image.as_deref())
                    == Some(image)
            })
            .map(|p| p.name_any())
            .collect();
        if names.is_subset(&on) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {timeout:?} only {on:?} of {names:?} run {image}, Ready"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until every partition of MirrorTopic `name` (source `topic`) mirrored its source end;
/// then checks each record by record.
async fn assert_exact(bed: &Testbed, s: &Scenario, name: &str, topic: &str, partitions: i32) {
    let ends: Vec<i64> = (0..partitions)
        .map(|p| watermarks(&bed.source_config(), topic, p).unwrap().1)
        .collect();
    s.wait_topic(name, "caught up", Duration::from_secs(90), |t| {
        t.status.as_ref().is_some_and(|st| {
            st.partitions.len() == partitions as usize
                && st
                    .partitions
                    .iter()
                    .all(|p| p.last_mirrored_offset == Some(ends[p.partition as usize] - 1))
        })
    })
    .await;
    let mirror_key = format!("{}/{}", s.ns, s.topic(name).await.unwrap().spec.mirror);
    for p in 0..partitions {
        let report = verify(
            bed,
            &bed.source_config(),
            &mirror_key,
            topic,
            topic,
            p,
            Isolation::ReadCommitted,
        );
        assert!(report.is_clean(), "{topic}[{p}]: {report:?}");
        assert!(report.offsets_identical, "{topic}[{p}]: {report:?}");
        assert_eq!(report.trailing, 0, "{topic}[{p}]: duplicates: {report:?}");
    }
}

/// Deletion times of the pods of a timeline, in order, each with its name.
fn deletions(line: &Timeline) -> Vec<(Instant, String)> {
    let mut order: Vec<(Instant, String)> =
        line.deleted.iter().map(|(n, t)| (*t, n.clone())).collect();
    order.sort();
    order
}

/// Checks a mirror's rollout: never more than `n` pods down at once, every old pod replaced, and
/// at each deletion fewer than `n` earlier replacements not yet Ready. Returns the most down.
fn assert_rolled(mirror: &str, line: &Timeline, names: &BTreeSet<String>, n: usize) -> usize {
    assert!(
        line.worst.0 <= n,
        "{mirror}: at one moment {} fetcher pods were down at once (missing, not Ready or being \
         deleted): {:?}; at most {n} may be",
        line.worst.0,
        line.worst.1
    );
    let replaced: BTreeSet<&String> = line.deleted.keys().collect();
    assert_eq!(
        replaced,
        names.iter().collect(),
        "{mirror}: every old pod was replaced"
    );
    let order = deletions(line);
    for (i, (at, name)) in order.iter().enumerate() {
        let unready: Vec<&String> = order[..i]
            .iter()
            .filter(|(_, prev)| line.ready.get(prev).is_none_or(|r| r > at))
            .map(|(_, prev)| prev)
            .collect();
        assert!(
            unready.len() < n,
            "{mirror}: {name} was deleted while the replacements of {unready:?} were not Ready"
        );
    }
    line.worst.0
}

/// Per-partition pods: at each deletion, fewer than `n` earlier replaced partitions are not
/// copying again yet — MIRRORING, the last mirrored offset beyond where it was when their pod
/// was deleted.
fn assert_caught_up(line: &Timeline, progress: &[Sample], n: usize) {
    let order: Vec<(Instant, i32)> = deletions(line)
        .into_iter()
        .map(|(t, name)| (t, name.rsplit('-').next().unwrap().parse().unwrap()))
        .collect();
    for (i, (next, q)) in order.iter().enumerate() {
        let behind: Vec<(i32, i64)> = order[..i]
            .iter()
            .filter_map(|(gone, p)| {
                let before = progress
                    .iter()
                    .filter(|(t, pp, _, _)| t <= gone && pp == p)
                    .filter_map(|(_, _, _, lmo)| *lmo)
                    .max()
                    .unwrap_or(-1);
                let copied = progress.iter().any(|(t, pp, state, lmo)| {
                    t > gone
                        && t <= next
                        && pp == p
                        && *state == PartitionState::Mirroring
                        && lmo.is_some_and(|l| l > before)
                });
                (!copied).then_some((*p, before))
            })
            .collect();
        assert!(
            behind.len() < n,
            "partition {q}'s pod was deleted while partitions {behind:?} (partition, last \
             mirrored offset when its pod was deleted) did not copy again after their own \
             replacement"
        );
    }
}

/// A per-partition mirror (`pp`, one pod per partition) and, `with_pool`, a pooled one (`pool`,
/// two pool pods) copy under traffic; the operator is started again with another fetcher image
/// and `--fetcher-max-unavailable n`; the pods are watched until all run the new image.
async fn upgrade(n: usize, with_pool: bool) {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "upgrade").await;
    let topic = unique_name("upg-pp");
    create_topic(&bed.source_config(), &topic, PARTITIONS, &[])
        .await
        .unwrap();
    let pooled: Vec<String> = if with_pool {
        spread_pair().to_vec()
    } else {
        Vec::new()
    };
    for t in &pooled {
        create_topic(&bed.source_config(), t, POOLED_PARTITIONS, &[])
            .await
            .unwrap();
    }
    let mut op = OperatorProcess::spawn(bed, &s.ns, &[]);
    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = json!({"partitionsPerPod": 1});
    s.apply_mirror("pp", spec).await;
    s.apply_topic("t", json!({"mirror": "pp", "sourceTopic": topic}))
        .await;
    if with_pool {
        let mut pool = Scenario::mirror_spec(bed);
        pool["fetcher"] = json!({"pool": {"pods": 2}});
        s.apply_mirror("pool", pool).await;
        for (name, t) in ["a", "b"].iter().zip(&pooled) {
            s.apply_topic(name, json!({"mirror": "pool", "sourceTopic": t}))
                .await;
        }
    }
    let mut mirrors: Vec<(&str, BTreeSet<String>)> = vec![(
        "pp",
        (0..PARTITIONS).map(|i| format!("t-fetcher-{i}")).collect(),
    )];
    let mut topics = vec![("t", topic.clone(), PARTITIONS)];
    if with_pool {
        mirrors.push(("pool", (0..2).map(|i| format!("pool-pool-{i}")).collect()));
        for (name, t) in ["a", "b"].into_iter().zip(&pooled) {
            topics.push((name, t.clone(), POOLED_PARTITIONS));
        }
    }
    for (name, _, partitions) in &topics {
        s.wait_topic(name, "MIRRORING", Duration::from_secs(120), |t| {
            all_partitions(t, PartitionState::Mirroring, *partitions as usize)
        })
        .await;
    }
    let all: BTreeSet<String> = mirrors.iter().flat_map(|(_, p)| p.clone()).collect();
    wait_image(&s, &all, OLD_IMAGE, Duration::from_secs(60)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let sources = topics.iter().map(|(_, t, p)| (t.clone(), *p)).collect();
    let producing = traffic(bed, sources, stop.clone());
    let lines: Vec<Arc<Mutex<Timeline>>> = mirrors.iter().map(|_| Default::default()).collect();
    let watches: Vec<_> = mirrors
        .iter()
        .zip(&lines)
        .map(|((mirror, names), line)| {
            watch(s.client.clone(), &s.ns, mirror, names.clone(), line.clone())
        })
        .collect();
    // Each partition's last mirrored offset over time, from the status (for the catch-up).
    let progress: Arc<Mutex<Vec<Sample>>> = Default::default();
    let poll = {
        let (client, ns, progress) = (s.client.clone(), s.ns.clone(), progress.clone());
        tokio::spawn(async move {
            let api: Api<kmirror_crds::v1alpha1::MirrorTopic> = Api::namespaced(client, &ns);
            loop {
                if let Ok(t) = api.get("t").await {
                    let now = Instant::now();
                    let mut out = progress.lock().unwrap();
                    for p in t.status.map(|s| s.partitions).unwrap_or_default() {
                        out.push((now, p.partition, p.state, p.last_mirrored_offset));
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The upgrade: the same operator, started again with another fetcher image.
    let started = Instant::now();
    op.terminate(Duration::from_secs(30));
    let limit = n.to_string();
    let mut args = vec!["--fetcher-image", NEW_IMAGE];
    if n != 1 {
        args.extend(["--fetcher-max-unavailable", &limit]);
    }
    let op = OperatorProcess::spawn(bed, &s.ns, &args);
    wait_image(&s, &all, NEW_IMAGE, Duration::from_secs(240)).await;
    let took = started.elapsed();
    for w in &watches {
        w.abort();
    }
    poll.abort();

    for ((mirror, names), line) in mirrors.iter().zip(&lines) {
        let worst = assert_rolled(mirror, &line.lock().unwrap(), names, n);
        eprintln!(
            "{mirror}: {} pods replaced, at most {worst} down at once (limit {n}), the whole \
             upgrade in {took:?}",
            names.len()
        );
        if n > 1 {
            assert_eq!(worst, n, "{mirror}: {n} replacements ran at once");
        }
    }
    assert_caught_up(&lines[0].lock().unwrap(), &progress.lock().unwrap(), n);
    // The mirror tells each step and the end (Events on the ClusterMirror).
    for (mirror, names) in &mirrors {
        eventually(
            &format!("{mirror}: FetcherReplaced per pod, then FetcherRolloutComplete"),
            Duration::from_secs(30),
            async || {
                let events = s.events(mirror).await;
                let replaced = events
                    .iter()
                    .filter(|(r, _)| r == "FetcherReplaced")
                    .count();
                replaced == names.len() && events.iter().any(|(r, _)| r == "FetcherRolloutComplete")
            },
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    assert!(producing.join().unwrap() > 0);
    for (name, t, partitions) in &topics {
        assert_exact(bed, &s, name, t, *partitions).await;
    }
    s.cleanup().await;
    drop(op);
}

#[tokio::test]
async fn an_operator_upgrade_replaces_fetcher_pods_one_at_a_time_each_caught_up() {
    upgrade(1, true).await;
}

#[tokio::test]
async fn with_max_unavailable_two_two_pods_roll_at_once() {
    upgrade(2, false).await;
}
