//! `kmirror-operator`: runs the ClusterMirror and MirrorTopic controllers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;
use kmirror_crds::v1alpha1::ClusterMirror;
use kmirror_operator::context::{Context, Settings};
use kmirror_operator::http::Endpoints;
use kmirror_operator::leader::Election;
use kmirror_operator::metrics::Metrics;
use kmirror_operator::status_writer::StatusLimits;
use kube::Api;
use kube::api::ListParams;

/// Kafka cluster mirroring as a Kubernetes operator.
#[derive(Parser, Debug)]
#[command(name = "kmirror-operator", version)]
struct Args {
    /// Only watch this namespace (default: all namespaces).
    #[arg(long, env = "KMIRROR_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Image of fetcher pods when a ClusterMirror does not set one.
    #[arg(
        long,
        env = "KMIRROR_FETCHER_IMAGE",
        default_value = "ghcr.io/kmirror/kmirror:0.1.0"
    )]
    fetcher_image: String,
    /// Image prefixes a ClusterMirror's `spec.fetcher.image` may use, comma-separated (default:
    /// the fetcher image only).
    #[arg(long, env = "KMIRROR_ALLOWED_FETCHER_IMAGES", default_value = "")]
    allowed_fetcher_images: String,
    /// Service accounts fetcher pods may run as, comma-separated (default: `default` only).
    #[arg(
        long,
        env = "KMIRROR_ALLOWED_FETCHER_SERVICE_ACCOUNTS",
        default_value = ""
    )]
    allowed_fetcher_service_accounts: String,
    /// Priority classes a ClusterMirror's `spec.fetcher.template.priorityClassName` may name,
    /// comma-separated (default: none).
    #[arg(
        long,
        env = "KMIRROR_ALLOWED_FETCHER_PRIORITY_CLASSES",
        default_value = ""
    )]
    allowed_fetcher_priority_classes: String,
    /// Taint keys `spec.fetcher.template.tolerations` may tolerate, comma-separated (default:
    /// any but `node-role.kubernetes.io/*`; `*`: any toleration, a keyless one too).
    #[arg(
        long,
        env = "KMIRROR_ALLOWED_FETCHER_TOLERATION_KEYS",
        default_value = ""
    )]
    allowed_fetcher_toleration_keys: String,
    /// Most fetcher pods one ClusterMirror may run (beyond it no pod is created, and a Warning
    /// Event says so).
    #[arg(
        long,
        env = "KMIRROR_MAX_FETCHER_PODS_PER_MIRROR",
        default_value_t = 1000
    )]
    max_fetcher_pods_per_mirror: usize,
    /// Most fetcher pods of one ClusterMirror replaced at a time when they are outdated only
    /// because another operator (version, default image) made them — after an upgrade; each
    /// replacement's partitions catch up before the next starts. Pods that must go for
    /// correctness are replaced at once.
    #[arg(
        long,
        env = "KMIRROR_FETCHER_MAX_UNAVAILABLE",
        default_value_t = 1,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    fetcher_max_unavailable: u64,
    /// Seconds a replaced fetcher pod may take to catch up before the rollout reports it
    /// (Warning Event and condition FetcherRolloutStalled) and goes on with the next.
    #[arg(
        long,
        env = "KMIRROR_FETCHER_ROLLOUT_TIMEOUT_SECONDS",
        default_value_t = 600,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    fetcher_rollout_timeout_seconds: u64,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "KMIRROR_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Serve /metrics only on this address (e.g. 127.0.0.1:9090), not on --http-addr.
    #[arg(long, env = "KMIRROR_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Least milliseconds between two status writes of one object.
    #[arg(long, env = "KMIRROR_STATUS_INTERVAL_MS", default_value_t = 1000)]
    status_interval_ms: u64,
    /// Least milliseconds between two status writes of one object that change only the
    /// progress of mirroring partitions (log ends, last mirrored offset, lag).
    #[arg(
        long,
        env = "KMIRROR_STATUS_PROGRESS_INTERVAL_MS",
        default_value_t = 10_000
    )]
    status_progress_interval_ms: u64,
    /// Status writes per second over all objects (burst: twice as many); a change of state
    /// waits for its turn.
    #[arg(long, env = "KMIRROR_STATUS_WRITES_PER_SECOND", default_value_t = 20.0)]
    status_writes_per_second: f64,
    /// Status writes per second over all objects that change only progress (burst: twice as
    /// many); beyond it progress is postponed, so that lag refreshes less often in a large
    /// mirror rather than costing the API server more.
    #[arg(
        long,
        env = "KMIRROR_STATUS_PROGRESS_WRITES_PER_SECOND",
        default_value_t = 2.0
    )]
    status_progress_writes_per_second: f64,
    /// Most partitions one MirrorTopic's status lists: a topic with more lists the worst ones
    /// (FAILED, then those on their way, then MIRRORING by highest lag) and counts them all, so
    /// that its object stays far below etcd's size limit.
    #[arg(
        long,
        env = "KMIRROR_STATUS_MAX_PARTITIONS",
        default_value_t = kmirror_operator::mirror_topic::listed::DEFAULT_MAX_PARTITIONS as u64,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    status_max_partitions: u64,
    /// Run controllers only while holding a Lease (for more than one replica).
    #[arg(long, env = "KMIRROR_LEADER_ELECTION")]
    leader_election: bool,
    /// Namespace of the Lease (default: the pod's namespace or `default`).
    #[arg(long, env = "KMIRROR_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, env = "KMIRROR_LEASE_NAME", default_value = "kmirror-operator")]
    lease_name: String,
    /// Seconds a lease lasts without renewal (at least 3: the leader renews every third and
    /// gives up after two thirds).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..))]
    lease_duration_seconds: u64,
    /// Log format: `text` or `json`.
    #[arg(long, env = "KMIRROR_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    kmirror_state::logging::init(args.log_format == "json");
    let client = kube::Client::try_default().await?;
    let probe: Api<ClusterMirror> = match &args.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    if let Err(e) = probe.list(&ListParams::default().limit(1)).await {
        anyhow::bail!(
            "cannot list ClusterMirrors ({e}); are the CRDs installed (kubectl apply -f charts/kmirror/crds/) \
             and may this service account read them?"
        );
    }
    let ctx = Arc::new(Context::new(
        client.clone(),
        Settings {
            fetcher_image: args.fetcher_image.clone(),
            fetcher_policy: kmirror_operator::policy::FetcherPolicy::new(
                &args.allowed_fetcher_images,
                &args.allowed_fetcher_service_accounts,
                &args.fetcher_image,
            )
            .with_template_bounds(
                &args.allowed_fetcher_priority_classes,
                &args.allowed_fetcher_toleration_keys,
            ),
            max_fetcher_pods_per_mirror: args.max_fetcher_pods_per_mirror,
            rollout: kmirror_operator::rollout::Limits {
                max_unavailable: args.fetcher_max_unavailable as usize,
                timeout: Duration::from_secs(args.fetcher_rollout_timeout_seconds),
            },
            status_limits: StatusLimits {
                interval: Duration::from_millis(args.status_interval_ms),
                progress_interval: Duration::from_millis(args.status_progress_interval_ms),
                writes_per_second: args.status_writes_per_second,
                progress_writes_per_second: args.status_progress_writes_per_second,
            },
            status_max_partitions: usize::try_from(args.status_max_partitions)
                .unwrap_or(usize::MAX),
        },
        Metrics::default(),
    ));
    let endpoints = Arc::new(Endpoints {
        ctx: ctx.clone(),
        ready: Default::default(),
    });
    let (addr, metrics_addr) = (args.http_addr, args.metrics_addr);
    let e = endpoints.clone();
    tokio::spawn(async move {
        if let Err(err) = kmirror_operator::http::serve(addr, metrics_addr, e).await {
            tracing::error!(%addr, "HTTP endpoints unavailable: {err}");
        }
    });
    endpoints.ready.store(true, Ordering::Relaxed);
    if args.leader_election {
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("kmirror-operator-{}", std::process::id()));
        let election = Election {
            namespace: args
                .lease_namespace
                .clone()
                .or_else(|| std::env::var("POD_NAMESPACE").ok())
                .unwrap_or_else(|| "default".into()),
            name: args.lease_name.clone(),
            identity,
            lease_duration: Duration::from_secs(args.lease_duration_seconds),
            renew_every: Duration::from_secs((args.lease_duration_seconds / 3).max(1)),
        };
        let acquired = tokio::select! {
            acquired = election.acquire(&client) => acquired,
            _ = shutdown_signal() => return Ok(()),
        };
        ctx.metrics.leader.set(1);
        let keep = {
            let (election, client) = (election.clone(), client.clone());
            async move { election.keep(&client, acquired).await }
        };
        tokio::select! {
            _ = kmirror_operator::run(ctx.clone(), args.namespace.clone(), shutdown_signal()) => {}
            _ = keep => {
                // Another replica may lead now: stop at once so that only one writes.
                tracing::error!("leadership lost; exiting");
                std::process::exit(1);
            }
        }
        // The controllers have stopped: hand over without waiting for the lease to expire.
        election.release(&client).await;
    } else {
        ctx.metrics.leader.set(1);
        kmirror_operator::run(ctx, args.namespace.clone(), shutdown_signal()).await;
    }
    Ok(())
}
