//! `kmirror-fetcher`: mirrors partitions of a source topic (or of several, `--topic`) to the
//! destination.
//!
//! Exit codes: 0 clean stop (SIGTERM), 1 retryable error, 2 bad arguments, 10 foreign write on
//! the destination, 11 source topic recreated, 12 source cluster changed, 13 source topic
//! deleted, 14 data loss (the source deleted records before they were mirrored), 15 destination
//! not empty without state, 16 destination truncated (it lost confirmed records; retried), 17
//! source diverged, 18 record refused by the destination, 19 write lease expired, 20 a cluster ID
//! other than the pinned one. A stop for a reason also leaves a
//! one-line termination message (see `termination`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use kmirror_fetcher::{
    Engine, FetcherConfig, Handles, Isolation, LeaseSettings, PinnedClusterIds, TruncationPolicy,
};
use kmirror_state::ClusterSettings;
use kmirror_state::flags::ClusterFlags;

/// Mirror partitions of a source Kafka topic to a destination topic at identical offsets.
#[derive(Parser, Debug)]
#[command(name = "kmirror-fetcher", version)]
struct Args {
    /// The mirror, `namespace/name` (keys the state records).
    #[arg(long, env = "KMIRROR_MIRROR")]
    mirror: String,
    /// Source topic.
    #[arg(long, env = "KMIRROR_SOURCE_TOPIC", required_unless_present = "topics")]
    source_topic: Option<String>,
    /// Destination topic (default: the source topic's name).
    #[arg(long, env = "KMIRROR_DESTINATION_TOPIC")]
    destination_topic: Option<String>,
    /// Partitions to mirror, comma separated.
    #[arg(
        long,
        env = "KMIRROR_PARTITIONS",
        value_delimiter = ',',
        required_unless_present = "topics"
    )]
    partitions: Vec<i32>,
    /// Several topics in one process, each `SOURCE[:DESTINATION]=P,P,...` (repeated; instead of
    /// `--source-topic`/`--destination-topic`/`--partitions`). Each topic copies in its own
    /// thread with its own clients; a stop of one leaves the others copying.
    #[arg(
        long = "topic",
        value_parser = parse_topic,
        conflicts_with_all = ["source_topic", "destination_topic", "partitions"]
    )]
    topics: Vec<TopicArg>,
    #[command(flatten)]
    clusters: ClusterFlags,
    /// Extra librdkafka properties for the source consumer only.
    #[arg(long = "consumer-property")]
    consumer_properties: Vec<String>,
    /// Extra librdkafka properties for the destination producer only.
    #[arg(long = "producer-property")]
    producer_properties: Vec<String>,
    /// State topic on the destination.
    #[arg(long, env = "KMIRROR_STATE_TOPIC", default_value = "__kmirror_state")]
    state_topic: String,
    /// Byte-rate limit over all partitions of this process.
    #[arg(long, env = "KMIRROR_THROTTLE_BYTES_PER_SECOND")]
    throttle_bytes_per_second: Option<u64>,
    /// Memory the process sizes its Kafka clients' buffers for (prefetch, fetch responses,
    /// producer queue), in bytes or e.g. `64Mi`; the process stays near it.
    #[arg(long, env = "KMIRROR_MEMORY_BUDGET",
          default_value_t = kmirror_fetcher::memory::DEFAULT_MEMORY_BUDGET,
          value_parser = kmirror_crds::bytes::parse_byte_size)]
    memory_budget: u64,
    /// `read_committed` or `read_uncommitted` (needs `--allow-uncommitted`).
    #[arg(
        long,
        env = "KMIRROR_ISOLATION_LEVEL",
        default_value = "read_committed"
    )]
    isolation_level: String,
    /// Accept that `read_uncommitted` copies the records of aborted and open transactions as
    /// ordinary records, which every consumer of the destination then reads.
    #[arg(long, env = "KMIRROR_ALLOW_UNCOMMITTED")]
    allow_uncommitted: bool,
    /// The copy engine: `record` (librdkafka, record by record) or `batch` (record batches as
    /// bytes, only their headers rewritten).
    #[arg(long, env = "KMIRROR_ENGINE", default_value = "record")]
    engine: String,
    /// Most placeholder records for prefix alignment.
    #[arg(
        long,
        env = "KMIRROR_PREFIX_ALIGNMENT_LIMIT",
        default_value_t = 1_000_000
    )]
    prefix_alignment_limit: i64,
    /// `fail` or `skip` when the source deleted records before they were mirrored.
    #[arg(long, env = "KMIRROR_ON_SOURCE_TRUNCATION", default_value = "fail")]
    on_source_truncation: String,
    /// The source cluster ID the connection pins: another one stops the fetcher (exit 20).
    #[arg(long, env = "KMIRROR_SOURCE_CLUSTER_ID")]
    source_cluster_id: Option<String>,
    /// The destination cluster ID the connection pins: another one stops the fetcher (exit 20).
    #[arg(long, env = "KMIRROR_DESTINATION_CLUSTER_ID")]
    destination_cluster_id: Option<String>,
    /// Seconds between position records.
    #[arg(long, default_value_t = 2.0)]
    position_interval_seconds: f64,
    /// Seconds between source identity checks.
    #[arg(long, default_value_t = 30.0)]
    metadata_refresh_seconds: f64,
    /// Seconds records may stay in flight with no confirmation from the destination before the
    /// fetcher stops as stalled (a warning at a quarter of it).
    #[arg(long, env = "KMIRROR_STALL_TIMEOUT_SECONDS", default_value_t = 120.0)]
    stall_timeout_seconds: f64,
    /// Bound on the clean shutdown after SIGTERM, seconds.
    #[arg(long, env = "KMIRROR_SHUTDOWN_TIMEOUT_SECONDS", default_value_t = 20.0)]
    shutdown_timeout_seconds: f64,
    /// How long the destination log end must stay unchanged before resuming, seconds.
    #[arg(long, default_value_t = 1.0)]
    startup_settle_seconds: f64,
    /// Address of /metrics, /healthz, /readyz (`none` disables). Default: `$POD_IP` (or
    /// 0.0.0.0) with `--http-port`.
    #[arg(long, env = "KMIRROR_HTTP_ADDR")]
    http_addr: Option<String>,
    /// Port of the HTTP endpoints when `--http-addr` is not given.
    #[arg(long, env = "KMIRROR_HTTP_PORT", default_value_t = 9464)]
    http_port: u16,
    /// Name written into position records (defaults to $POD_NAME or the host name).
    #[arg(long, env = "POD_NAME")]
    writer: Option<String>,
    /// The pod's UID: with it, the fetcher writes only under a write lease granted by the
    /// operator (set by the operator; standalone runs leave it out).
    #[arg(long, env = "POD_UID")]
    lease_holder_uid: Option<String>,
    /// How long a write lease lasts, seconds.
    #[arg(long, env = "KMIRROR_LEASE_DURATION_SECONDS", default_value_t = 30.0)]
    lease_duration_seconds: f64,
    /// Log format: `text` or `json`.
    #[arg(long, env = "KMIRROR_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

/// One topic of `--topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TopicArg {
    source: String,
    destination: Option<String>,
    partitions: Vec<i32>,
}

/// Parses `SOURCE[:DESTINATION]=P,P,...` (Kafka topic names hold neither `:` nor `=`).
fn parse_topic(s: &str) -> Result<TopicArg, String> {
    let usage = || format!("{s:?}: expected SOURCE[:DESTINATION]=P,P,...");
    let (names, partitions) = s.split_once('=').ok_or_else(usage)?;
    let (source, destination) = match names.split_once(':') {
        Some((src, dst)) => (src, Some(dst.to_string())),
        None => (names, None),
    };
    let partitions = partitions
        .split(',')
        .map(|p| p.trim().parse::<i32>().map_err(|_| usage()))
        .collect::<Result<Vec<i32>, String>>()?;
    if source.is_empty() || destination.as_deref() == Some("") || partitions.is_empty() {
        return Err(usage());
    }
    Ok(TopicArg {
        source: source.to_string(),
        destination,
        partitions,
    })
}

/// The configuration of every topic the process copies.
fn configs(args: &Args) -> anyhow::Result<Vec<FetcherConfig>> {
    let base = config(args)?;
    if args.topics.is_empty() {
        return Ok(vec![base]);
    }
    let mut seen = std::collections::BTreeSet::new();
    args.topics
        .iter()
        .map(|t| {
            if !seen.insert(&t.source) {
                bail!("--topic {} given twice", t.source);
            }
            let mut c = base.clone();
            c.source_topic = t.source.clone();
            c.destination_topic = t.destination.clone().unwrap_or_else(|| t.source.clone());
            c.partitions = t.partitions.clone();
            Ok(c)
        })
        .collect()
}

fn config(args: &Args) -> anyhow::Result<FetcherConfig> {
    let mut source = args.clusters.source().map_err(anyhow::Error::msg)?;
    source.properties.extend(
        ClusterSettings::parse_pairs(&args.consumer_properties).map_err(anyhow::Error::msg)?,
    );
    let mut destination = args.clusters.destination().map_err(anyhow::Error::msg)?;
    destination.properties.extend(
        ClusterSettings::parse_pairs(&args.producer_properties).map_err(anyhow::Error::msg)?,
    );
    let source_topic = args.source_topic.clone().unwrap_or_default();
    let mut c = FetcherConfig::new(
        &args.mirror,
        &source_topic,
        args.destination_topic
            .clone()
            .unwrap_or_else(|| source_topic.clone()),
        args.partitions.clone(),
        source,
        destination,
    );
    c.state_topic = args.state_topic.clone();
    c.throttle_bytes_per_second = args.throttle_bytes_per_second;
    c.memory_budget = args.memory_budget;
    c.isolation = match args.isolation_level.as_str() {
        "read_committed" => Isolation::ReadCommitted,
        "read_uncommitted" if args.allow_uncommitted => Isolation::ReadUncommitted,
        "read_uncommitted" => bail!(
            "--isolation-level read_uncommitted copies the records of aborted and open \
             transactions as ordinary records, which every consumer of the destination then \
             reads as committed; pass --allow-uncommitted to accept that"
        ),
        other => {
            bail!("--isolation-level must be read_committed or read_uncommitted, not {other:?}")
        }
    };
    c.engine = match Engine::parse(&args.engine) {
        Some(engine) => engine,
        None => bail!("--engine must be record or batch, not {:?}", args.engine),
    };
    c.pinned_cluster_ids = PinnedClusterIds {
        source: args.source_cluster_id.clone().filter(|s| !s.is_empty()),
        destination: args
            .destination_cluster_id
            .clone()
            .filter(|s| !s.is_empty()),
    };
    c.prefix_alignment_limit = args.prefix_alignment_limit;
    c.on_source_truncation = match args.on_source_truncation.as_str() {
        "fail" => TruncationPolicy::Fail,
        "skip" => TruncationPolicy::Skip,
        other => bail!("--on-source-truncation must be fail or skip, not {other:?}"),
    };
    c.position_interval = Duration::from_secs_f64(args.position_interval_seconds);
    c.metadata_refresh = Duration::from_secs_f64(args.metadata_refresh_seconds);
    c.stall_timeout = Duration::from_secs_f64(args.stall_timeout_seconds);
    c.shutdown_timeout = Duration::from_secs_f64(args.shutdown_timeout_seconds);
    c.startup_settle = Duration::from_secs_f64(args.startup_settle_seconds);
    c.writer = args
        .writer
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok());
    if let Some(uid) = args.lease_holder_uid.as_ref().filter(|u| !u.is_empty()) {
        if c.writer.is_none() {
            bail!("--lease-holder-uid needs the holder's name (--writer or $POD_NAME)");
        }
        c.lease = Some(LeaseSettings::new(
            uid.clone(),
            Duration::from_secs_f64(args.lease_duration_seconds.max(3.0)),
        ));
    }
    Ok(c)
}

fn main() {
    kmirror_fetcher::memory::limit_malloc_arenas();
    let args = Args::parse();
    kmirror_state::logging::init(args.log_format == "json");
    let configs = match configs(&args) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("invalid arguments: {e:#}");
            kmirror_fetcher::termination::write(&format!("invalid arguments: {e:#}"));
            std::process::exit(2);
        }
    };
    let handles = Handles::default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let http_addr = args.http_addr.clone().unwrap_or_else(|| {
        let ip = std::env::var("POD_IP").unwrap_or_else(|_| "0.0.0.0".to_string());
        format!("{ip}:{}", args.http_port)
    });
    if http_addr != "none" {
        let addr: SocketAddr = match http_addr
            .parse()
            .with_context(|| format!("--http-addr {http_addr:?}"))
        {
            Ok(a) => a,
            Err(e) => {
                tracing::error!("{e:#}");
                kmirror_fetcher::termination::write(&format!("invalid arguments: {e:#}"));
                std::process::exit(2);
            }
        };
        let h = handles.clone();
        runtime.spawn(async move {
            if let Err(e) = kmirror_fetcher::http::serve(addr, h).await {
                tracing::error!(%addr, "HTTP endpoints unavailable: {e}");
            }
        });
    }
    let shutdown = handles.shutdown.clone();
    runtime.spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("stopping: flushing and persisting the position");
        shutdown.store(true, Ordering::Relaxed);
    });
    let outcome = match configs.as_slice() {
        [one] => kmirror_fetcher::run(one, &handles),
        _ => kmirror_fetcher::run_topics(configs, &handles),
    };
    if let Some(summary) = outcome.summary() {
        kmirror_fetcher::termination::write(&summary);
    }
    let code = outcome.exit_code();
    tracing::info!(code, "exiting");
    runtime.shutdown_timeout(Duration::from_millis(200));
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> anyhow::Result<FetcherConfig> {
        let mut argv = vec![
            "kmirror-fetcher",
            "--mirror",
            "ns/m",
            "--source-topic",
            "orders",
            "--partitions",
            "0",
            "--source-bootstrap",
            "src:9092",
            "--destination-bootstrap",
            "dst:9092",
        ];
        argv.extend_from_slice(extra);
        config(&Args::try_parse_from(argv)?)
    }

    fn parse_topics(extra: &[&str]) -> anyhow::Result<Vec<FetcherConfig>> {
        let mut argv = vec![
            "kmirror-fetcher",
            "--mirror",
            "ns/m",
            "--source-bootstrap",
            "src:9092",
            "--destination-bootstrap",
            "dst:9092",
        ];
        argv.extend_from_slice(extra);
        configs(&Args::try_parse_from(argv)?)
    }

    #[test]
    fn several_topics_in_one_process() {
        let got = parse_topics(&["--topic", "orders=0,1", "--topic", "pay:dr.pay=2"]).unwrap();
        let topics: Vec<(&str, &str, &[i32])> = got
            .iter()
            .map(|c| {
                (
                    c.source_topic.as_str(),
                    c.destination_topic.as_str(),
                    c.partitions.as_slice(),
                )
            })
            .collect();
        assert_eq!(
            topics,
            vec![
                ("orders", "orders", &[0, 1][..]),
                ("pay", "dr.pay", &[2][..])
            ]
        );
        let one = parse_topics(&["--source-topic", "a", "--partitions", "3"]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(
            (one[0].source_topic.as_str(), one[0].partitions.clone()),
            ("a", vec![3])
        );
        for bad in [
            &["--topic", "orders"][..],
            &["--topic", "orders="],
            &["--topic", "orders=x"],
            &["--topic", ":d=1"],
            &["--topic", "a=1", "--topic", "a=2"],
            &["--topic", "a=1", "--source-topic", "b", "--partitions", "1"],
            &[],
        ] {
            assert!(parse_topics(bad).is_err(), "{bad:?} accepted");
        }
        // A pool pod: several topics under write leases, every topic its own holder thread
        // of the one pod.
        let leased = parse_topics(&[
            "--topic",
            "a=1",
            "--topic",
            "b=1",
            "--writer",
            "p",
            "--lease-holder-uid",
            "u",
        ])
        .unwrap();
        assert_eq!(leased.len(), 2);
        assert!(
            leased
                .iter()
                .all(|c| c.writer_uid().as_deref() == Some("u") && c.writer.as_deref() == Some("p"))
        );
    }

    #[test]
    fn read_uncommitted_needs_its_acknowledgement() {
        assert_eq!(parse(&[]).unwrap().isolation, Isolation::ReadCommitted);
        let refused = parse(&["--isolation-level", "read_uncommitted"]).unwrap_err();
        let message = format!("{refused:#}");
        assert!(message.contains("--allow-uncommitted"), "{message}");
        assert!(message.contains("aborted"), "{message}");
        let accepted = parse(&[
            "--isolation-level",
            "read_uncommitted",
            "--allow-uncommitted",
        ])
        .unwrap();
        assert_eq!(accepted.isolation, Isolation::ReadUncommitted);
        assert!(parse(&["--isolation-level", "dirty"]).is_err());
    }
}
