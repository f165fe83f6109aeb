//! Injecting one planned fault of the soak: the choices it needs (cluster, broker, partition,
//! pod, how long) come from the fault's own seed; each fault is healed by its injector (the
//! broker started again, the follower thawed, the zombie killed, the topic resumed) before the
//! soak measures how long the mirror takes to catch up.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use super::cycle;
use super::mirror::{self, Monitor};
use super::plan::{FaultKind, PlannedFault};
use super::topics::{Role, TopicSpec};
use super::workload::Workload;
use crate::Testbed;
use crate::faults::{self, Cluster};
use crate::kafka::Rng;
use crate::operator::Scenario;

/// What injecting a fault did.
#[derive(Debug, Clone)]
pub struct Injected {
    /// The kind.
    pub kind: FaultKind,
    /// What was done, as the verbs said it (short).
    pub what: String,
    /// Why the injection itself failed, if it did.
    pub error: Option<String>,
    /// When the fault was over (healed), from the start of the soak's fault phase.
    pub healed_at: Duration,
    /// Notes for the report (the failover cycle's steps, the group replay).
    pub notes: Vec<String>,
    /// Numbers for the report (the failover cycle's group replay and reverse verification).
    pub cycle: Option<cycle::CycleOutcome>,
}

/// What the injectors work on.
pub struct Ctx<'a> {
    /// The bed.
    pub bed: &'a Testbed,
    /// The namespace of the mirror.
    pub s: &'a Scenario,
    /// The soak's topics.
    pub topics: &'a [TopicSpec],
    /// The traffic.
    pub workload: &'a mut Workload,
    /// Lag observations.
    pub monitor: &'a mut Monitor,
    /// Start of the fault phase.
    pub phase_start: Instant,
}

fn pick<'t, T>(rng: &mut Rng, items: &'t [T]) -> &'t T {
    &items[rng.below(items.len() as u64) as usize]
}

fn seconds(rng: &mut Rng, from: u64, to: u64) -> Duration {
    Duration::from_secs(from + rng.below(to - from + 1))
}

/// Runs a blocking verb on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f).await?
}

/// The first line of a verb's output.
fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

/// Injects `fault` and heals it.
pub async fn inject(ctx: &mut Ctx<'_>, fault: &PlannedFault) -> Injected {
    let mut rng = Rng::new(fault.seed);
    let mut notes = Vec::new();
    let mut cycle_outcome = None;
    let result: anyhow::Result<String> = match fault.kind {
        FaultKind::BrokerKill => broker_fault(ctx, &mut rng, "kill", 5, 20).await,
        FaultKind::BrokerSigstop => broker_fault(ctx, &mut rng, "sigstop", 3, 12).await,
        FaultKind::BrokerRestart => {
            let (cluster, id) = pick_broker(&mut rng);
            let name = cluster.broker(id);
            blocking(move || faults::restart_broker(&name))
                .await
                .map(|s| s.replace('\n', "; "))
        }
        FaultKind::MoveLeader => {
            let cluster = *pick(&mut rng, &[Cluster::RSource, Cluster::RDestination]);
            let (topic, partition) = pick_partition(ctx.topics, &mut rng);
            blocking(move || faults::move_leader(cluster, &topic, partition, None))
                .await
                .map(|s| first_line(&s))
        }
        FaultKind::FreezeFollower => {
            let cluster = *pick(&mut rng, &[Cluster::RSource, Cluster::RDestination]);
            let (topic, partition) = pick_partition(ctx.topics, &mut rng);
            match blocking(move || faults::freeze_follower(cluster, &topic, partition)).await {
                Ok(said) => {
                    let dwell = seconds(&mut rng, 4, 8);
                    ctx.monitor.watch_for(ctx.s, dwell).await;
                    blocking(faults::thaw)
                        .await
                        .map(|t| format!("{} … {}", first_line(&said), first_line(&t)))
                }
                Err(e) => Err(e),
            }
        }
        FaultKind::UncleanElection => {
            let topic = ctx
                .topics
                .iter()
                .find(|t| t.role == Role::Diverge)
                .map(|t| t.name.clone())
                .unwrap_or_default();
            blocking(move || {
                faults::unclean_election(Cluster::RSource, &topic, 0, 5, Duration::from_secs(3))
            })
            .await
            .map(|s| first_line(&s))
        }
        FaultKind::Zombie => zombie(ctx, &mut rng).await,
        FaultKind::PodNetCut => fetcher_net_cut(ctx, &mut rng).await,
        FaultKind::KillOperatorLeader => {
            let ns = ctx.s.ns.clone();
            blocking(move || faults::kill_operator_leader(&ns, None, None))
                .await
                .map(|s| first_line(&s))
        }
        FaultKind::OperatorOverlap => {
            let ns = ctx.s.ns.clone();
            blocking(move || faults::freeze_operator_leader(&ns, None, None))
                .await
                .map(|s| s.lines().last().unwrap_or_default().to_string())
        }
        FaultKind::PauseResume => pause_resume(ctx, &mut rng).await,
        FaultKind::NetReset => {
            let (cluster, id) = pick_broker(&mut rng);
            let times = 3 + rng.below(4) as u32;
            blocking(move || faults::net_reset(cluster, id, times, Duration::from_secs(2)))
                .await
                .map(|r| r.output.lines().last().unwrap_or_default().to_string())
        }
        FaultKind::NetCut => {
            let (cluster, id) = pick_broker(&mut rng);
            let dwell = seconds(&mut rng, 5, 20);
            net_fault(ctx, cluster, id, dwell, move || {
                faults::net_cut(cluster, id, None)
            })
            .await
        }
        FaultKind::NetLatency => {
            let (cluster, id) = pick_broker(&mut rng);
            let ms = 200 + rng.below(601);
            let dwell = seconds(&mut rng, 10, 20);
            net_fault(ctx, cluster, id, dwell, move || {
                faults::net_latency(
                    cluster,
                    id,
                    Duration::from_millis(ms),
                    Duration::from_millis(ms / 4),
                    None,
                )
            })
            .await
        }
        FaultKind::FailoverFailback => {
            let outcome = cycle::run(ctx).await;
            notes = outcome.steps.clone();
            let what = outcome.summary();
            let failed = outcome.failure.clone();
            cycle_outcome = Some(outcome);
            match failed {
                None => Ok(what),
                Some(e) => Err(anyhow::anyhow!(e)),
            }
        }
    };
    // Whatever happened, the pair is whole again before the recovery is measured.
    if let Err(e) = blocking(faults::heal).await {
        notes.push(format!("heal failed: {e:#}"));
    }
    let (what, error) = match result {
        Ok(w) => (w, None),
        Err(e) => (String::new(), Some(format!("{e:#}"))),
    };
    Injected {
        kind: fault.kind,
        what,
        error,
        healed_at: ctx.phase_start.elapsed(),
        notes,
        cycle: cycle_outcome,
    }
}

fn pick_broker(rng: &mut Rng) -> (Cluster, i32) {
    let cluster = *pick(rng, &[Cluster::RSource, Cluster::RDestination]);
    (cluster, 1 + rng.below(3) as i32)
}

/// A partition of a topic that is mirrored forward throughout (not the diverged one, not the
/// one failed over).
fn pick_partition(topics: &[TopicSpec], rng: &mut Rng) -> (String, i32) {
    let plain: Vec<&TopicSpec> = topics.iter().filter(|t| t.role == Role::Plain).collect();
    let t = pick(rng, &plain);
    (t.name.clone(), rng.below(t.partitions as u64) as i32)
}

/// kill or sigstop a broker, wait, then start or continue it.
async fn broker_fault(
    ctx: &mut Ctx<'_>,
    rng: &mut Rng,
    verb: &'static str,
    min: u64,
    max: u64,
) -> anyhow::Result<String> {
    let (cluster, id) = pick_broker(rng);
    let name = cluster.broker(id);
    let n = name.clone();
    let said = blocking(move || faults::verb(&[verb, &n])).await?;
    let dwell = seconds(rng, min, max);
    ctx.monitor.watch_for(ctx.s, dwell).await;
    let undo = if verb == "kill" { "start" } else { "sigcont" };
    let back = blocking(move || faults::verb(&[undo, &name])).await?;
    Ok(format!(
        "{} … {}s later: {}",
        first_line(&said),
        dwell.as_secs(),
        first_line(&back)
    ))
}

/// Injects a network fault on one broker's proxy, keeps it for `dwell`, heals that proxy.
async fn net_fault(
    ctx: &mut Ctx<'_>,
    cluster: Cluster,
    id: i32,
    dwell: Duration,
    inject: impl FnOnce() -> anyhow::Result<String> + Send + 'static,
) -> anyhow::Result<String> {
    let said = blocking(inject).await?;
    ctx.monitor.watch_for(ctx.s, dwell).await;
    let healed = blocking(move || faults::net_heal(Some((cluster, id)))).await?;
    Ok(format!(
        "{} … {}s later: {}",
        first_line(&said),
        dwell.as_secs(),
        first_line(&healed)
    ))
}

/// The fetcher pods that are ready, by name.
async fn ready_fetchers(ctx: &Ctx<'_>) -> anyhow::Result<Vec<String>> {
    let pods = Api::<Pod>::namespaced(ctx.s.client.clone(), &ctx.s.ns)
        .list(&ListParams::default().labels("app.kubernetes.io/name=kmirror-fetcher"))
        .await?
        .items;
    let mut names: Vec<String> = pods
        .into_iter()
        .filter(crate::kube::is_ready)
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// Cuts a fetcher pod off the network (its process keeps running) for longer than its lease
/// (30 s), then joins it again: the zombie that cannot reach anything, and comes back.
async fn fetcher_net_cut(ctx: &mut Ctx<'_>, rng: &mut Rng) -> anyhow::Result<String> {
    let names = ready_fetchers(ctx).await?;
    anyhow::ensure!(!names.is_empty(), "no running fetcher pod to cut off");
    let pod = pick(rng, &names).clone();
    let (ns, p) = (ctx.s.ns.clone(), pod.clone());
    let said = blocking(move || faults::pod_net_cut(&ns, &p)).await?;
    let dwell = seconds(rng, 35, 50);
    ctx.monitor.watch_for(ctx.s, dwell).await;
    let (ns, p) = (ctx.s.ns.clone(), pod.clone());
    let back = blocking(move || faults::pod_net_restore(&ns, &p)).await?;
    Ok(format!(
        "{} … {}s later: {}",
        first_line(&said),
        dwell.as_secs(),
        first_line(&back)
    ))
}

/// Makes a fetcher pod a zombie, lets it live, kills it.
async fn zombie(ctx: &mut Ctx<'_>, rng: &mut Rng) -> anyhow::Result<String> {
    let names = ready_fetchers(ctx).await?;
    anyhow::ensure!(!names.is_empty(), "no running fetcher pod to make a zombie");
    let pod = pick(rng, &names).clone();
    let (ns, p) = (ctx.s.ns.clone(), pod.clone());
    let said = blocking(move || faults::zombie(&ns, &p)).await?;
    let dwell = seconds(rng, 20, 40);
    ctx.monitor.watch_for(ctx.s, dwell).await;
    let target = format!("{}/{pod}", ctx.s.ns);
    let killed = blocking(move || faults::zombie_kill(&target)).await?;
    Ok(format!(
        "{} … {}s later: {}",
        first_line(&said),
        dwell.as_secs(),
        first_line(&killed)
    ))
}

/// Pauses a topic, waits until its partitions are PAUSED, keeps it paused, resumes it.
async fn pause_resume(ctx: &mut Ctx<'_>, rng: &mut Rng) -> anyhow::Result<String> {
    let (topic, _) = pick_partition(ctx.topics, rng);
    let views = mirror::snapshot(ctx.s).await?;
    let mt = views
        .iter()
        .find(|v| v.mirror == mirror::MIRROR && v.topic == topic)
        .map(|v| v.mirror_topic.clone())
        .ok_or_else(|| anyhow::anyhow!("no MirrorTopic for {topic}"))?;
    ctx.s.patch_topic(&mt, json!({"state": "Paused"})).await;
    let start = Instant::now();
    let paused = loop {
        let views = mirror::snapshot(ctx.s).await?;
        ctx.monitor.observe(&views);
        let mine: Vec<_> = views
            .iter()
            .filter(|v| v.mirror_topic == mt && v.mirror == mirror::MIRROR)
            .collect();
        if !mine.is_empty()
            && mine
                .iter()
                .all(|v| v.state == kmirror_crds::v1alpha1::PartitionState::Paused)
        {
            break Some(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(90) {
            break None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let dwell = seconds(rng, 5, 15);
    ctx.monitor.watch_for(ctx.s, dwell).await;
    ctx.s.patch_topic(&mt, json!({"state": "Mirroring"})).await;
    match paused {
        Some(t) => Ok(format!(
            "paused {mt} (PAUSED after {:.1}s), resumed {}s later",
            t.as_secs_f64(),
            dwell.as_secs()
        )),
        None => Err(anyhow::anyhow!(
            "{mt} was not PAUSED within 90s of spec.state Paused (resumed anyway)"
        )),
    }
}
