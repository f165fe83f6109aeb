//! `kmirror-bench-groups`: how long one consumer-group offset sync takes for many groups, for
//! two builds of `kmirror-sync-groups` in the same run (`make bench-groups`). On the bed's Kafka
//! half: a mirrored topic (a fetcher copies it, so the state topic has its records), `--groups N`
//! groups (default 200) committed on the source, then `--rounds R` (default 3) interleaved
//! rounds per binary, each starting from a destination without those groups (so every run
//! commits every group). Prints wall time and CPU (user+sys, from /usr/bin/time) per run, the
//! medians and the ratios NEW/BASE.
//!
//! Usage: kmirror-bench-groups BASE_SYNC_GROUPS NEW_SYNC_GROUPS [--groups N] [--rounds R]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kmirror_e2e::Testbed;
use kmirror_e2e::fetcher::{
    FetcherProcess, destination_args, ensure_state_topic, source_args, wait_until,
};
use kmirror_e2e::kafka::{
    DestUser, create_topic, mixed_records, produce_all, unique_name, watermarks,
};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 4;
const RECORDS_PER_PARTITION: i64 = 100;

struct Options {
    binaries: Vec<PathBuf>,
    groups: usize,
    rounds: usize,
}

fn parse() -> Result<Options, String> {
    let mut binaries = Vec::new();
    let (mut groups, mut rounds) = (200, 3);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |what: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{what} needs a number"))
        };
        match a.as_str() {
            "--groups" => groups = number("--groups")?,
            "--rounds" => rounds = number("--rounds")?,
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            path => binaries.push(PathBuf::from(path)),
        }
    }
    if binaries.len() != 2 {
        return Err("usage: kmirror-bench-groups BASE NEW [--groups N] [--rounds R]".into());
    }
    Ok(Options {
        binaries,
        groups,
        rounds,
    })
}

/// One timed run: wall seconds, CPU seconds (user+sys), and the binary's summary line.
fn run_once(binary: &PathBuf, args: &[String]) -> Result<(f64, f64, String), String> {
    let started = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "kmirror-bench-cpu %U %S"])
        .arg(binary)
        .args(args)
        .output()
        .map_err(|e| format!("running {}: {e}", binary.display()))?;
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("{} failed: {stderr}", binary.display()));
    }
    let cpu = stderr
        .lines()
        .find_map(|l| l.strip_prefix("kmirror-bench-cpu "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse::<f64>().ok())
                .sum()
        })
        .ok_or("no CPU figures from /usr/bin/time")?;
    Ok((
        wall,
        cpu,
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn bench(opts: Options) -> Result<(), String> {
    let bed = Testbed::get();
    ensure_state_topic(bed);
    let source = bed.source_config();
    let dest = bed.dest_config(DestUser::Admin);
    let topic = unique_name("bench-groups");
    create_topic(&source, &topic, PARTITIONS, &[])
        .await
        .map_err(|e| e.to_string())?;
    create_topic(&dest, &topic, PARTITIONS, &[])
        .await
        .map_err(|e| e.to_string())?;
    let records = mixed_records(
        (RECORDS_PER_PARTITION * i64::from(PARTITIONS)) as usize,
        PARTITIONS,
        0,
        7,
    );
    produce_all(&source, &topic, &records, &[]).map_err(|e| e.to_string())?;
    let mirror = format!("bench/{topic}");
    let partitions = (0..PARTITIONS)
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut fetcher_args: Vec<String> = [
        "--mirror",
        &mirror,
        "--source-topic",
        &topic,
        "--partitions",
        &partitions,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    fetcher_args.extend(source_args(bed));
    fetcher_args.extend(destination_args(bed));
    let mut fetcher = FetcherProcess::spawn(&fetcher_args);
    wait_until("the copy", Duration::from_secs(120), || {
        (0..PARTITIONS).all(|p| {
            watermarks(&dest, &topic, p).map(|w| w.1).unwrap_or(-1) == RECORDS_PER_PARTITION
        })
    });
    fetcher.signal("TERM");
    fetcher.wait(Duration::from_secs(30));

    let prefix = unique_name("bench-group");
    let groups: Vec<String> = (0..opts.groups).map(|i| format!("{prefix}-{i}")).collect();
    eprintln!("committing {} groups on the source", groups.len());
    for (i, group) in groups.iter().enumerate() {
        let consumer: BaseConsumer = source
            .clone()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| e.to_string())?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            let offset = (i as i64 + i64::from(p)) % RECORDS_PER_PARTITION;
            tpl.add_partition_offset(&topic, p, Offset::Offset(offset))
                .map_err(|e| e.to_string())?;
        }
        consumer
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| e.to_string())?;
    }
    let dest_admin: AdminClient<DefaultClientContext> = dest.create().map_err(|e| e.to_string())?;
    let group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let mut sync_args: Vec<String> = ["--mirror", &mirror, "--source-topic", &topic]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for group in &groups {
        sync_args.extend(["--group".to_string(), group.clone()]);
    }
    sync_args.extend(source_args(bed));
    sync_args.extend(destination_args(bed));

    let names = ["base", "new"];
    let mut results: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=opts.rounds {
        for (side, binary) in opts.binaries.iter().enumerate() {
            // Every run starts from a destination without the groups.
            let _ = dest_admin
                .delete_groups(&group_refs, &AdminOptions::new())
                .await;
            let (wall, cpu, summary) = run_once(binary, &sync_args)?;
            println!(
                "round {round} {:4}  wall {wall:7.2} s  CPU {cpu:6.2} s  ({summary})",
                names[side]
            );
            if !summary.starts_with(&format!("{} groups synced", groups.len())) {
                return Err(format!(
                    "{} did not sync every group: {summary}",
                    names[side]
                ));
            }
            results[side].push((wall, cpu));
        }
    }
    let med =
        |side: usize, f: fn(&(f64, f64)) -> f64| median(results[side].iter().map(f).collect());
    let (bw, bc, nw, nc) = (
        med(0, |r| r.0),
        med(0, |r| r.1),
        med(1, |r| r.0),
        med(1, |r| r.1),
    );
    println!(
        "\n{} groups x {PARTITIONS} partitions, {} rounds, medians:",
        groups.len(),
        opts.rounds
    );
    println!("base  wall {bw:7.2} s  CPU {bc:6.2} s");
    println!("new   wall {nw:7.2} s  CPU {nc:6.2} s");
    println!("new/base: wall x{:.3}, CPU x{:.3}", nw / bw, nc / bc);
    Ok(())
}

#[tokio::main]
async fn main() {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kmirror-bench-groups: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = bench(opts).await {
        eprintln!("kmirror-bench-groups: {e}");
        std::process::exit(1);
    }
}
