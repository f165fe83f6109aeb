//! `kmirror-sync-groups`: one consumer-group offset sync, outside the operator — the same code
//! the operator runs every sync interval: committed source offsets translated through the
//! mirror's offset map, clamped to the destination log, committed without a leader epoch;
//! groups with active members on the destination are skipped. Exit 0 done, 1 error, 2 usage.

use std::time::Duration;

use clap::Parser;
use kmirror_crds::filter::Selector;
use kmirror_crds::v1alpha1::NameFilter;
use kmirror_operator::clusters::Cluster;
use kmirror_operator::sync::groups::{TopicPlan, sync_blocking};
use kmirror_state::flags::ClusterFlags;
use kmirror_state::{ClusterSettings, store};

/// Sync consumer-group offsets of a mirrored topic once.
#[derive(Parser, Debug)]
#[command(name = "kmirror-sync-groups", version)]
struct Args {
    /// The mirror, `namespace/name`, whose offset map to use.
    #[arg(long)]
    mirror: String,
    /// Source topic.
    #[arg(long)]
    source_topic: String,
    /// Destination topic (default: the source topic's name).
    #[arg(long)]
    destination_topic: Option<String>,
    #[command(flatten)]
    clusters: ClusterFlags,
    /// State topic on the destination.
    #[arg(long, default_value = "__kmirror_state")]
    state_topic: String,
    /// Groups to sync (default: every group on the source).
    #[arg(long = "group")]
    groups: Vec<String>,
}

fn cluster(
    side: &'static str,
    settings: Result<ClusterSettings, String>,
) -> Result<Cluster, String> {
    let config = settings?.client_config().map_err(|e| e.to_string())?;
    let admin = config.create().map_err(|e| format!("{side}: {e}"))?;
    Ok(Cluster::new(config, admin, side, 0))
}

fn run(args: Args) -> Result<String, String> {
    let source = cluster("source", args.clusters.source())?;
    let destination = cluster("destination", args.clusters.destination())?;
    let units = store::load(
        &destination.config,
        &args.state_topic,
        |k| k.mirror == args.mirror && k.topic == args.source_topic,
        Duration::from_secs(60),
    )
    .map_err(|e| e.to_string())?;
    let plan = TopicPlan {
        source: args.source_topic.clone(),
        destination: args
            .destination_topic
            .clone()
            .unwrap_or_else(|| args.source_topic.clone()),
        partitions: units.keys().map(|(_, _, p)| *p).collect(),
        maps: units
            .iter()
            .map(|((_, _, p), r)| r.offset_map().map(|m| (*p, m)))
            .collect::<Result<_, _>>()?,
    };
    if plan.partitions.is_empty() {
        return Err(format!(
            "no state recorded for mirror {} topic {}",
            args.mirror, args.source_topic
        ));
    }
    let include: Vec<NameFilter> = args
        .groups
        .iter()
        .map(|g| NameFilter {
            name: Some(g.clone()),
            ..Default::default()
        })
        .collect();
    let selector = Selector::compile(&include, &[], "--group", true).map_err(|e| e.to_string())?;
    let report = sync_blocking(&source, &destination, &selector, &[plan])?;
    match report.failure() {
        Some(failure) => Err(failure),
        None => Ok(report.summary()),
    }
}

fn main() {
    kmirror_state::logging::init(false);
    match run(Args::parse()) {
        Ok(summary) => println!("{summary}"),
        Err(e) => {
            eprintln!("kmirror-sync-groups: {e}");
            std::process::exit(1);
        }
    }
}
