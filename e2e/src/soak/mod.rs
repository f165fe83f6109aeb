//! The chaos soak (`make soak`): kmirror installed with Helm (two operator replicas) mirrors the
//! soak's topics from the replicated source to the replicated destination while producers and a
//! consumer group run, a seeded schedule of faults breaks brokers, partitions, fetcher pods and
//! the operator (and fails a topic over and back), and at the end every partition is verified
//! record by record. The run prints a table and passes only without loss, duplicates,
//! mismatches or partitions stuck without a reason.
//!
//! Parts: [`plan`] (the seeded schedule), [`topics`] and [`workload`] (traffic), [`mirror`] (the
//! chart, the ClusterMirror, status), [`inject`] (one fault), [`cycle`] (failover → failback),
//! [`verify`] (`kmirror-verify`), [`compaction`] (what compaction explains), [`verdict`] (the
//! table).

pub mod compaction;
pub mod cycle;
pub mod inject;
pub mod mirror;
pub mod plan;
pub mod topics;
pub mod verdict;
pub mod verify;
pub mod workload;

use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;

use crate::faults;
use crate::kafka::DestUser;
use crate::operator::Scenario;
use mirror::{MIRROR, Monitor, PartitionView};
use topics::Role;
use verdict::{FaultRecord, Findings};
use workload::Workload;

/// How long after a fault is healed the mirror may take to catch up before it counts as not
/// recovered.
const RECOVERY_LIMIT: Duration = Duration::from_secs(240);
/// A partition counts as caught up at this lag (records) or less.
const LAG_OK: i64 = 100;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Minutes of faults.
    pub minutes: f64,
    /// Seed of the schedule and the traffic.
    pub seed: u64,
    /// Leave the namespace, the release and the topics in place at the end.
    pub keep: bool,
}

fn say(start: Instant, what: impl AsRef<str>) {
    println!(
        "[soak {:>6.1}s] {}",
        start.elapsed().as_secs_f64(),
        what.as_ref()
    );
}

/// Waits until the mirror reports `expected` partitions, all MIRRORING.
async fn wait_all_mirroring(
    s: &Scenario,
    monitor: &mut Monitor,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let views = mirror::snapshot(s).await.unwrap_or_default();
        monitor.observe(&views);
        let mine: Vec<&PartitionView> = views.iter().filter(|v| v.mirror == MIRROR).collect();
        if mine.len() == expected && mine.iter().all(|v| v.state == PartitionState::Mirroring) {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < timeout,
            "{} of {expected} partitions MIRRORING after {timeout:?}: {}",
            mine.iter()
                .filter(|v| v.state == PartitionState::Mirroring)
                .count(),
            mirror::describe(
                &mine
                    .into_iter()
                    .filter(|v| v.state != PartitionState::Mirroring)
                    .collect::<Vec<_>>()
            )
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Runs the soak; the table and whether it passed.
pub async fn run(opts: &Options) -> anyhow::Result<(String, bool)> {
    let start = Instant::now();
    say(
        start,
        format!(
            "seed {} ({} min of faults); run it again with: make soak SOAK_MINUTES={} SOAK_SEED={}",
            opts.seed, opts.minutes, opts.minutes, opts.seed
        ),
    );
    let bed = faults::replicated();
    // Fault tests elsewhere share the replicated pair: hold it for the whole run.
    let _bed_lock = tokio::task::spawn_blocking(faults::exclusive).await?;
    tokio::task::spawn_blocking(|| crate::fetcher::binary("kmirror-fetcher")).await?;
    let client = bed.kube_client().await?;
    crate::crds::install(&client).await?;
    let ns = crate::kube::pod_namespace(&client, "soak").await?;
    // Every pod in a network namespace of its own, so one fetcher can be cut off
    // (`fetcher-net-cut`).
    faults::isolate_namespace(&client, &ns).await?;
    let s = Scenario {
        client: client.clone(),
        ns: ns.clone(),
    };
    let prefix = format!(
        "{}-",
        crate::kafka::unique_name(&format!("soak{}", opts.seed))
    );
    let topics = topics::topics(&prefix);
    let diverged = topics
        .iter()
        .find(|t| t.role == Role::Diverge)
        .map(|t| t.name.clone())
        .unwrap_or_default();
    let expected: usize = topics.iter().map(|t| t.partitions as usize).sum();
    say(
        start,
        format!(
            "namespace {ns}; {} topics ({expected} partitions) named {prefix}*",
            topics.len()
        ),
    );
    topics::create_topics(bed, &topics, opts.seed).await?;
    let (b, n) = (bed.clone(), ns.clone());
    tokio::task::spawn_blocking(move || mirror::helm_install(&b, &n)).await??;
    say(start, "kmirror installed with Helm (2 operator replicas)");
    mirror::apply(bed, &s, &prefix).await;
    let mut monitor = Monitor::default();
    wait_all_mirroring(&s, &mut monitor, expected, Duration::from_secs(360)).await?;
    say(start, format!("all {expected} partitions MIRRORING"));

    let mut workload = Workload::start(bed, &topics, opts.seed);
    monitor.watch_for(&s, Duration::from_secs(10)).await;
    let schedule = plan::plan(opts.seed, opts.minutes);
    say(
        start,
        format!(
            "traffic running; {} faults planned: {}",
            schedule.len(),
            schedule
                .iter()
                .map(|p| format!("{}@{}s", p.kind.name(), p.at.as_secs()))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    );
    let is_diverged = |v: &PartitionView| {
        v.topic == diverged && v.state == PartitionState::Failed && v.last_error.is_some()
    };
    let phase = Instant::now();
    let mut records = Vec::new();
    let mut cycle = None;
    for fault in &schedule {
        if let Some(wait) = fault.at.checked_sub(phase.elapsed()) {
            monitor.watch_for(&s, wait).await;
        }
        say(start, format!("{} …", fault.kind.name()));
        // Partitions already FAILED with a reason stay out of this fault's recovery.
        let failed_before: Vec<String> = monitor
            .last
            .iter()
            .filter(|v| v.mirror == MIRROR && v.state == PartitionState::Failed)
            .filter(|v| v.last_error.is_some())
            .map(PartitionView::label)
            .collect();
        let injected_at = phase.elapsed();
        let injected = {
            let mut ctx = inject::Ctx {
                bed,
                s: &s,
                topics: &topics,
                workload: &mut workload,
                monitor: &mut monitor,
                phase_start: phase,
            };
            inject::inject(&mut ctx, fault).await
        };
        let recovery =
            mirror::wait_recovered(&s, &mut monitor, MIRROR, LAG_OK, RECOVERY_LIMIT, |v| {
                is_diverged(v)
                    || (v.state == PartitionState::Failed && failed_before.contains(&v.label()))
            })
            .await;
        say(
            start,
            format!(
                "{}: {}{} — {}",
                fault.kind.name(),
                injected.what,
                injected
                    .error
                    .as_ref()
                    .map(|e| format!(" INJECTION FAILED: {e}"))
                    .unwrap_or_default(),
                match &recovery {
                    Ok(d) => format!("caught up {:.0}s after", d.as_secs_f64()),
                    Err(e) => format!("NOT RECOVERED: {e}"),
                }
            ),
        );
        for note in &injected.notes {
            say(start, format!("  {note}"));
        }
        if injected.cycle.is_some() {
            cycle = injected.cycle.clone();
        }
        records.push(FaultRecord {
            kind: injected.kind,
            what: injected.what,
            error: injected.error,
            recovery,
            window: injected.healed_at.saturating_sub(injected_at),
        });
    }

    say(
        start,
        "faults done; stopping the traffic and draining the mirror",
    );
    let consumed = workload.consumed.load(std::sync::atomic::Ordering::Relaxed);
    let counters = tokio::task::spawn_blocking(move || workload.stop()).await?;
    let mut produced = (0, 0, 0);
    let mut producer_failures = Vec::new();
    for (topic, c) in &counters {
        use std::sync::atomic::Ordering::Relaxed;
        produced.0 += c.delivered.load(Relaxed);
        produced.1 += c.failed.load(Relaxed);
        produced.2 += c.aborted.load(Relaxed);
        if c.failed.load(Relaxed) > 0 {
            let last = c.last_error.lock().map(|e| e.clone()).unwrap_or_default();
            producer_failures.push((topic.clone(), c.failed.load(Relaxed), last));
        }
    }
    // Partitions FAILED for good (not retried) are reported as such; the others must drain,
    // including those the operator is still retrying after a fault.
    let drained =
        mirror::wait_recovered(&s, &mut monitor, MIRROR, 0, Duration::from_secs(300), |v| {
            v.failed_for_good()
        })
        .await;
    say(
        start,
        match &drained {
            Ok(d) => format!("drained in {:.0}s", d.as_secs_f64()),
            Err(e) => format!("NOT DRAINED: {e}"),
        },
    );
    let final_states: Vec<PartitionView> = mirror::snapshot(&s)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.mirror == MIRROR)
        .collect();
    // The compaction check reads both sides before the verifier does: with the traffic stopped
    // both only compact further, so the destination records removable at this read are at
    // least those the verifier will find extra later (and likewise on the source for missing
    // ones). Read after the verifier, the destination may have compacted meanwhile and a clean
    // partition look like duplicates.
    let mut compaction = std::collections::BTreeMap::new();
    for t in topics.iter().filter(|t| {
        t.configs
            .iter()
            .any(|(k, v)| *k == "cleanup.policy" && v.contains("compact"))
    }) {
        for p in 0..t.partitions {
            let (source, destination, topic) = (
                bed.r_source_config(),
                bed.r_dest_config(DestUser::Admin),
                t.name.clone(),
            );
            let c = tokio::task::spawn_blocking(move || {
                compaction::check(&source, &destination, &topic, p)
            })
            .await?;
            compaction.insert(format!("{}-{p}", t.name), c);
        }
    }
    let mut checks = Vec::new();
    for t in &topics {
        let (b, n, topic) = (bed.clone(), ns.clone(), t.name.clone());
        let c = tokio::task::spawn_blocking(move || {
            verify::verify_topic(&b, &n, MIRROR, &topic, false)
        })
        .await?;
        checks.extend(c);
    }
    say(start, format!("verified {} partitions", checks.len()));
    let findings = Findings {
        seed: opts.seed,
        minutes: opts.minutes,
        elapsed: start.elapsed(),
        faults: records,
        checks,
        final_states,
        monitor,
        cycle,
        produced,
        consumed,
        diverged_topic: diverged,
        compaction,
        producer_failures,
    };
    let (table, why) = verdict::render(&findings);
    println!("\n{table}");
    let report = crate::fetcher::target_dir().join(format!("soak-seed{}.txt", opts.seed));
    if std::fs::write(&report, &table).is_ok() {
        say(start, format!("table saved to {}", report.display()));
    }
    if opts.keep {
        say(
            start,
            format!(
                "kept: namespace {ns} (pod logs in {}/{ns}_*), topics {prefix}*",
                bed.var("KMIRROR_PODS_DIR")
            ),
        );
    } else {
        let _ = tokio::task::spawn_blocking(|| faults::zombie_kill("all")).await;
        s.cleanup().await;
        for t in &topics {
            let _ = crate::kafka::delete_topic(&bed.r_source_config(), &t.name).await;
            let _ = crate::kafka::delete_topic(&bed.r_dest_config(DestUser::Admin), &t.name).await;
        }
        say(
            start,
            "cleaned up (namespace, topics); pod logs stay in the bed's pods dir",
        );
    }
    Ok((table, why.is_empty()))
}
