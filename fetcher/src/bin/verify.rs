//! `kmirror-verify`: compares source and destination partitions record by record through the
//! offset map recorded in the state topic. Exit 0 when clean, 1 on mismatches (missing,
//! different or extra records, or copies after the last source record: duplicates, unless
//! `--allow-trailing` says the source is still being written), 2 on errors.
//!
//! With `--state-only` it compares nothing: it prints each partition's status as recorded in the
//! state topic (the `MirrorTopic` status entry the operator would write, one JSON object a
//! line), reading only the destination cluster. `kubectl mirror status --partitions all` uses it
//! for the partitions a large topic's status does not list.
//!
//! With `--translate P:O[,P:O…]` it compares nothing either: it translates each offset through
//! the partition's offset map in the state topic (`--direction`, source to destination by
//! default; see `kmirror_state::translate` for the rules) and prints one JSON object per offset,
//! reading only the destination cluster (its state topic and the destination partitions' log
//! start). Offsets that cannot be translated are printed with the reason; exit 0 all the same.

use std::time::Duration;

use clap::Parser;
use kmirror_fetcher::Isolation;
use kmirror_fetcher::verify::{Side, verify_partition};
use kmirror_state::flags::ClusterFlags;
use kmirror_state::partition_view::partition_status;
use kmirror_state::records::PartitionRecords;
use kmirror_state::store;
use kmirror_state::translate::{self, Direction, Extent, Request};
use rdkafka::consumer::{BaseConsumer, Consumer};

/// Verify a mirrored topic.
#[derive(Parser, Debug)]
#[command(name = "kmirror-verify", version)]
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
    /// Partitions (default: all recorded).
    #[arg(long, value_delimiter = ',')]
    partitions: Vec<i32>,
    #[command(flatten)]
    clusters: ClusterFlags,
    /// State topic.
    #[arg(long, default_value = "__kmirror_state")]
    state_topic: String,
    /// Read the source with read_uncommitted.
    #[arg(long)]
    read_uncommitted: bool,
    /// Seconds allowed per partition.
    #[arg(long, default_value_t = 300)]
    timeout_seconds: u64,
    /// Do not count destination records after the copy of the last source record as a
    /// mismatch (the source is still being written while verifying).
    #[arg(long)]
    allow_trailing: bool,
    /// Verify nothing: print each recorded partition's status from the state topic (reads the
    /// destination cluster only).
    #[arg(long)]
    state_only: bool,
    /// Verify nothing: translate these offsets, `PARTITION:OFFSET[,PARTITION:OFFSET…]`, through
    /// the offset map in the state topic and print one JSON object per offset (reads the
    /// destination cluster only).
    #[arg(long, value_name = "P:O,...")]
    translate: Option<String>,
    /// With --translate: source-to-destination (offsets of the source topic) or
    /// destination-to-source.
    #[arg(long, default_value = "source-to-destination")]
    direction: Direction,
}

/// Translates `requests` through the offsets maps in the state topic, printing one JSON object
/// per request.
/// The state topic's records of the topic `args` names (its mirror's, every partition).
fn topic_units(
    args: &Args,
    destination: &rdkafka::ClientConfig,
    timeout: Duration,
) -> Result<std::collections::BTreeMap<store::UnitId, PartitionRecords>, String> {
    store::load(
        destination,
        &args.state_topic,
        |k| k.mirror == args.mirror && k.topic == args.source_topic,
        timeout,
    )
    .map_err(|e| e.to_string())
}

fn print_translations(args: &Args, requests: &[Request]) -> Result<bool, String> {
    let destination = args.clusters.destination()?;
    let destination = destination.client_config().map_err(|e| e.to_string())?;
    let timeout = Duration::from_secs(args.timeout_seconds);
    let units = topic_units(args, &destination, timeout)?;
    let consumer: BaseConsumer = destination
        .clone()
        .set("group.id", "kmirror-translate")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| format!("cannot create a consumer of the destination: {e}"))?;
    let destination_topic = args
        .destination_topic
        .clone()
        .unwrap_or_else(|| args.source_topic.clone());
    let mut log_starts = std::collections::BTreeMap::new();
    for &r in requests {
        let key = (args.mirror.clone(), args.source_topic.clone(), r.partition);
        let found = units.get(&key).and_then(|records| {
            records
                .position
                .as_ref()
                .map(|position| (records, position))
        });
        let entry = match found {
            None => translate::unknown(r),
            Some((records, position)) => {
                let map = records.offset_map()?;
                let destination_start = match log_starts.get(&r.partition) {
                    Some(start) => *start,
                    None => {
                        let (start, _) = consumer
                            .fetch_watermarks(&destination_topic, r.partition, timeout)
                            .map_err(|e| {
                                format!(
                                    "offsets of {destination_topic}[{}] on the destination: {e}",
                                    r.partition
                                )
                            })?;
                        log_starts.insert(r.partition, start);
                        start
                    }
                };
                let extent = Extent {
                    source_end: position
                        .next_source_offset
                        .max(position.source_position.unwrap_or(0)),
                    copies_end: position.destination_offset,
                    destination_start,
                    identical: position.offsets_identical,
                };
                translate::translate(&map, &extent, args.direction, r)
            }
        };
        println!(
            "{}",
            serde_json::to_string(&entry).expect("a translation serializes")
        );
    }
    Ok(true)
}

/// Prints the status of each partition of `args.partitions` (default: all recorded) from the
/// state topic, one JSON object a line.
fn print_state(args: &Args) -> Result<bool, String> {
    let destination = args.clusters.destination()?;
    let destination = destination.client_config().map_err(|e| e.to_string())?;
    let units = topic_units(
        args,
        &destination,
        Duration::from_secs(args.timeout_seconds),
    )?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    for ((_, _, p), records) in &units {
        if records.state.is_none() || !(args.partitions.is_empty() || args.partitions.contains(p)) {
            continue;
        }
        let status = partition_status(*p, records, None, now_ms);
        println!(
            "{}",
            serde_json::to_string(&status).expect("status serializes")
        );
    }
    Ok(true)
}

fn run(args: Args) -> Result<bool, String> {
    if let Some(requests) = &args.translate {
        let requests =
            translate::parse_requests(requests).map_err(|e| format!("--translate: {e}"))?;
        return print_translations(&args, &requests);
    }
    if args.state_only {
        return print_state(&args);
    }
    let source = args.clusters.source()?;
    let destination = args.clusters.destination()?;
    let source = source.client_config().map_err(|e| e.to_string())?;
    let destination = destination.client_config().map_err(|e| e.to_string())?;
    let timeout = Duration::from_secs(args.timeout_seconds);
    let units = topic_units(&args, &destination, timeout)?;
    let mut partitions = args.partitions.clone();
    if partitions.is_empty() {
        partitions = units.keys().map(|(_, _, p)| *p).collect();
    }
    if partitions.is_empty() {
        return Err(format!(
            "no state recorded for mirror {} topic {}",
            args.mirror, args.source_topic
        ));
    }
    let source = Side {
        config: source,
        topic: args.source_topic.clone(),
    };
    let destination = Side {
        config: destination,
        topic: args
            .destination_topic
            .clone()
            .unwrap_or_else(|| args.source_topic.clone()),
    };
    let isolation = if args.read_uncommitted {
        Isolation::ReadUncommitted
    } else {
        Isolation::ReadCommitted
    };
    let mut clean = true;
    for p in partitions {
        let map = units
            .get(&(args.mirror.clone(), args.source_topic.clone(), p))
            .map(|r| r.offset_map())
            .transpose()?
            .unwrap_or_default();
        let report = verify_partition(&source, &destination, p, &map, isolation, timeout)
            .map_err(|e| e.to_string())?;
        clean &= if args.allow_trailing {
            report.is_clean()
        } else {
            report.is_exact()
        };
        println!(
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        );
    }
    Ok(clean)
}

fn main() {
    kmirror_state::logging::init(false);
    match run(Args::parse()) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("kmirror-verify: {e}");
            std::process::exit(2);
        }
    }
}
