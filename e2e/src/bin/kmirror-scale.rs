//! `kmirror-scale` (`make scale`): what a large mirror costs — a benchmark, not a test. On the
//! whole bed: `SCALE_TOPICS` source topics (default 50) of `SCALE_PARTITIONS` partitions (10),
//! `SCALE_GROUPS` consumer groups (100) committed on them, one ClusterMirror with
//! `partitionsPerPod = SCALE_PARTITIONS` (a fetcher pod per topic) and a MirrorTopic per topic,
//! run by a local operator with the shipped status limits. Prints the time from apply to every
//! partition MIRRORING, then, over `SCALE_WINDOW_SECONDS` (60) of `SCALE_RECORDS_PER_SECOND`
//! (200) records of traffic: API requests per second by verb and resource (the API server's own
//! counters, the whole bed), status writes per second, the operator's CPU and RSS, the fetcher
//! pods and their RSS, state-topic records per second and the consumer-group sync round time.
//! `KMIRROR_E2E_BIN_DIR` (set by `make scale` to the release build) names the operator and
//! fetcher binaries.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kmirror_crds::v1alpha1::PartitionState;
use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::ensure_state_topic;
use kmirror_e2e::kafka::{DestUser, create_topic, delete_topic, unique_name};
use kmirror_e2e::kube::apiserver_requests;
use kmirror_e2e::namespace::BIN_PATH_ANNOTATION;
use kmirror_e2e::operator::{OperatorProcess, Scenario, all_partitions};
use kube::Api;
use kube::api::{Patch, PatchParams};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::json;

struct Options {
    topics: usize,
    partitions: i32,
    groups: usize,
    window: Duration,
    rate: u64,
    pool_pods: i32,
}

fn number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn options() -> Options {
    Options {
        topics: number("SCALE_TOPICS", 50),
        partitions: number("SCALE_PARTITIONS", 10),
        groups: number("SCALE_GROUPS", 100),
        window: Duration::from_secs(number("SCALE_WINDOW_SECONDS", 60)),
        rate: number("SCALE_RECORDS_PER_SECOND", 200),
        pool_pods: number("SCALE_POOL_PODS", 0),
    }
}

/// CPU seconds (user + system) and resident MB of process `pid`.
fn process_usage(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((ticks / 100.0, rss_kb / 1024.0))
}

/// The fetcher processes of mirror `mirror` (`namespace/name`): their PIDs.
fn fetcher_pids(mirror: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                args.first()
                    .is_some_and(|a| a.ends_with(b"kmirror-fetcher"))
                    && args
                        .windows(2)
                        .any(|w| w[0] == b"--mirror" && w[1] == mirror.as_bytes())
            })
        })
        .collect()
}

/// Sum of the high watermarks of every partition of `topic`.
fn topic_end(config: &ClientConfig, topic: &str) -> i64 {
    let consumer: BaseConsumer = config.create().expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    metadata.topics()[0]
        .partitions()
        .iter()
        .filter_map(|p| {
            consumer
                .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                .ok()
                .map(|(_, high)| high)
        })
        .sum()
}

/// Commits offset 0 of every partition of one topic for each of `groups` groups.
fn commit_groups(config: &ClientConfig, topics: &[String], partitions: i32, groups: usize) {
    for g in 0..groups {
        let topic = &topics[g % topics.len()];
        let consumer: BaseConsumer = config
            .clone()
            .set("group.id", format!("scale-group-{g}"))
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Offset(0))
                .unwrap();
        }
        consumer.commit(&tpl, CommitMode::Sync).expect("commit");
    }
}

/// Light traffic over every partition until `stop`: `rate` records a second.
fn traffic(
    config: &ClientConfig,
    topics: Vec<String>,
    partitions: i32,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let producer: BaseProducer = config.create().expect("producer");
    std::thread::spawn(move || {
        let (mut sent, per_tick) = (0u64, (rate / 10).max(1));
        let slots = topics.len() as u64 * partitions as u64;
        while !stop.load(Ordering::Relaxed) {
            let tick = Instant::now();
            for _ in 0..per_tick {
                let slot = sent % slots;
                let topic = &topics[(slot / partitions as u64) as usize];
                let value = format!("record {sent}");
                let record = BaseRecord::<(), _>::to(topic)
                    .partition((slot % partitions as u64) as i32)
                    .payload(&value);
                if producer.send(record).is_ok() {
                    sent += 1;
                }
            }
            producer.poll(Duration::ZERO);
            std::thread::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed()));
        }
        let _ = producer.flush(Duration::from_secs(10));
        sent
    })
}

fn per_second(
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
    seconds: f64,
) -> Vec<(String, f64)> {
    let mut rates: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| {
            (
                format!("{} {}", k.0, k.1),
                (v - before.get(k).copied().unwrap_or(0.0)) / seconds,
            )
        })
        .filter(|(_, r)| *r >= 0.05)
        .collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1));
    rates
}

fn writes(rates: &[(String, f64)]) -> f64 {
    rates
        .iter()
        .filter(|(k, _)| {
            [
                "POST ",
                "PUT ",
                "PATCH ",
                "APPLY ",
                "DELETE ",
                "DELETECOLLECTION ",
            ]
            .iter()
            .any(|v| k.starts_with(v))
        })
        .map(|(_, r)| r)
        .sum()
}

fn print_rates(what: &str, rates: &[(String, f64)]) {
    println!("{what}: {:.2}/s writes in all", writes(rates));
    for (k, r) in rates.iter().take(15) {
        println!("    {r:8.2}/s  {k}");
    }
}

#[tokio::main]
async fn main() {
    let o = options();
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let s = Scenario::new(bed, "scale").await;
    if let Some(dir) = std::env::var_os("KMIRROR_E2E_BIN_DIR").map(PathBuf::from) {
        // The fetcher pods run the same build as the operator.
        let patch =
            json!({"metadata": {"annotations": {BIN_PATH_ANNOTATION: dir.display().to_string()}}});
        Api::<Namespace>::all(s.client.clone())
            .patch(&s.ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("namespace annotation");
    }
    let total = o.topics * o.partitions as usize;
    let layout = if o.pool_pods > 0 {
        format!("a pool of {} fetcher pods", o.pool_pods)
    } else {
        format!("{} per fetcher pod", o.partitions)
    };
    println!(
        "kmirror scale: {} topics x {} partitions = {total} partitions, {layout}, {} consumer \
         groups, {} records/s",
        o.topics, o.partitions, o.groups, o.rate
    );
    let source = bed.source_config();
    let prefix = unique_name("scale");
    let topics: Vec<String> = (0..o.topics).map(|i| format!("{prefix}-{i}")).collect();
    for topic in &topics {
        create_topic(&source, topic, o.partitions, &[])
            .await
            .expect("source topic");
    }
    commit_groups(&source, &topics, o.partitions, o.groups);
    // The shipped status limits (the test harness refreshes progress every 2 s).
    let op = OperatorProcess::spawn_with_env(
        bed,
        &s.ns,
        &[],
        &[("KMIRROR_STATUS_PROGRESS_INTERVAL_MS", "10000")],
    );
    let mut spec = Scenario::mirror_spec(bed);
    spec["fetcher"] = if o.pool_pods > 0 {
        json!({"pool": {"pods": o.pool_pods}})
    } else {
        json!({"partitionsPerPod": o.partitions})
    };
    spec["sync"] = json!({"interval": "30s"});
    s.apply_mirror("scale", spec).await;

    // Start: apply every topic, wait for every partition to mirror.
    let api_start = apiserver_requests(&s.client).await;
    let started = Instant::now();
    for (i, topic) in topics.iter().enumerate() {
        s.apply_topic(
            &format!("t{i}"),
            json!({"mirror": "scale", "sourceTopic": topic}),
        )
        .await;
    }
    loop {
        let mirroring = s
            .topics()
            .await
            .iter()
            .filter(|t| all_partitions(t, PartitionState::Mirroring, o.partitions as usize))
            .count();
        if mirroring == o.topics {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "{mirroring} of {} topics MIRRORING after 15 minutes",
            o.topics
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let to_mirroring = started.elapsed();
    let start_rates = per_second(
        &api_start,
        &apiserver_requests(&s.client).await,
        to_mirroring.as_secs_f64(),
    );
    println!(
        "apply -> all {total} partitions MIRRORING: {:.1} s",
        to_mirroring.as_secs_f64()
    );
    print_rates(
        "API requests during start (incl. this harness's LIST of mirrortopics every 2 s)",
        &start_rates,
    );
    // MIRRORING is the lifecycle; copying needs the fetcher processes: wait for every pod to be
    // ready (a pool: every pool pod, each listing its partitions).
    let wanted_pods = if o.pool_pods > 0 {
        o.pool_pods as usize
    } else {
        o.topics
    };
    loop {
        let pods = s.pods().await;
        let ready = pods
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .and_then(|c| c.first())
                        .is_some_and(|c| c.ready)
            })
            .count();
        if ready >= wanted_pods && pods.len() == wanted_pods {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "{ready} of {wanted_pods} fetcher pods ready after 15 minutes"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "apply -> every fetcher pod ready ({wanted_pods}): {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Steady state under light traffic.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = traffic(&source, topics.clone(), o.partitions, o.rate, stop.clone());
    tokio::time::sleep(Duration::from_secs(15)).await;
    let dest = bed.dest_config(DestUser::Admin);
    let state_topic = kmirror_crds::v1alpha1::DEFAULT_STATE_TOPIC;
    let groups_series = |kind: &str| {
        format!(
            "kmirror_operator_sync_duration_seconds_{kind}{{namespace=\"{}\",name=\"scale\",part=\"consumerGroups\",result=\"ok\"}}",
            s.ns
        )
    };
    let status_series = "kmirror_operator_status_writes_total{kind=\"MirrorTopic\"}";
    let reconciles = |controller: &str| {
        op.metric(&format!(
            "kmirror_operator_reconciles_total{{controller=\"{controller}\"}}"
        ))
        .unwrap_or(0.0)
    };
    let snapshot = async || {
        (
            apiserver_requests(&s.client).await,
            op.metric(status_series).unwrap_or(0.0),
            process_usage(op.pid()).unwrap_or_default(),
            topic_end(&dest, state_topic),
            op.metric(&groups_series("sum")).unwrap_or(0.0),
            op.metric(&groups_series("count")).unwrap_or(0.0),
            reconciles("mirrortopic"),
            reconciles("clustermirror"),
        )
    };
    let t0 = Instant::now();
    let before = snapshot().await;
    tokio::time::sleep(o.window).await;
    let after = snapshot().await;
    let seconds = t0.elapsed().as_secs_f64();
    let mirror = format!("{}/scale", s.ns);
    let fetchers = fetcher_pids(&mirror);
    let fetcher_rss: f64 = fetchers
        .iter()
        .filter_map(|pid| process_usage(*pid))
        .map(|(_, rss)| rss)
        .sum();
    let pods = s.pods().await.len();
    stop.store(true, Ordering::Relaxed);
    let sent = producing.join().unwrap_or(0);

    println!("steady state, {seconds:.0} s of traffic ({sent} records sent in all):");
    print_rates("API requests", &per_second(&before.0, &after.0, seconds));
    println!(
        "MirrorTopic status writes: {:.2}/s",
        (after.1 - before.1) / seconds
    );
    println!(
        "operator: {:.1} % of one core, RSS {:.0} MB; reconciles {:.2}/s of MirrorTopics, \
         {:.2}/s of the ClusterMirror",
        100.0 * (after.2.0 - before.2.0) / seconds,
        after.2.1,
        (after.6 - before.6) / seconds,
        (after.7 - before.7) / seconds
    );
    println!(
        "fetchers: {pods} pods, {} processes, {fetcher_rss:.0} MB RSS in all",
        fetchers.len()
    );
    println!(
        "state topic: {:.1} records/s",
        (after.3 - before.3) as f64 / seconds
    );
    let rounds = after.5 - before.5;
    if rounds > 0.0 {
        println!(
            "consumer-group sync: {rounds} rounds, {:.2} s each on average",
            (after.4 - before.4) / rounds
        );
    } else {
        println!("consumer-group sync: no round completed in the window");
    }
    s.cleanup().await;
    drop(op);
    for topic in &topics {
        let _ = delete_topic(&source, topic).await;
        let _ = delete_topic(&dest, topic).await;
    }
}
