//! The soak's failover → failback cycle on the orders topic, with `kubectl mirror` as an
//! operator would run it: the applications stop, the topic fails over, the consumer group's
//! offsets and the records around them are replayed on the destination independently and
//! compared with the source, the applications write to the destination, the topic fails back
//! (the reverse mirror copies those writes to the old source, verified), the reverse mirror
//! fails over, and the forward mirror resumes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::inject::Ctx;
use super::mirror::{self, MIRROR};
use super::topics::Role;
use super::verify::{self, PartitionCheck};
use super::workload::{GROUP, Target};
use crate::kafka::DestUser;

/// The reverse mirror `kubectl mirror failback` creates.
pub const REVERSE: &str = "dr-failback";

/// How the group looked on both sides after the failover.
#[derive(Debug, Clone, Default)]
pub struct GroupReplay {
    /// Partitions with a committed offset on the source.
    pub partitions: usize,
    /// Of those, how many have the same committed offset on the destination.
    pub offsets_equal: usize,
    /// Records read around the committed offsets (10 before, up to 10 after) on the
    /// destination, compared with the source's at the same positions.
    pub compared: usize,
    /// Of those, how many are identical (offset, key, value).
    pub records_equal: usize,
    /// The first differences.
    pub differences: Vec<String>,
}

/// What the cycle did.
#[derive(Debug, Clone, Default)]
pub struct CycleOutcome {
    /// Each step and how long it took.
    pub steps: Vec<String>,
    /// The step that failed, and why.
    pub failure: Option<String>,
    /// The group replay after the failover.
    pub replay: Option<GroupReplay>,
    /// The reverse mirror's verification (old destination → old source).
    pub reverse: Vec<PartitionCheck>,
}

impl CycleOutcome {
    /// One line.
    pub fn summary(&self) -> String {
        let replay = self.replay.as_ref().map_or("no replay".to_string(), |r| {
            format!(
                "group offsets equal {}/{}, records after them equal {}/{}",
                r.offsets_equal, r.partitions, r.records_equal, r.compared
            )
        });
        format!("{} steps; {replay}", self.steps.len())
    }
}

fn committed(config: &ClientConfig, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    let Ok(consumer) = config
        .clone()
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .create::<BaseConsumer>()
    else {
        return out;
    };
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    if let Ok(c) = consumer.committed_offsets(tpl, Duration::from_secs(20)) {
        for e in c.elements() {
            if let rdkafka::Offset::Offset(o) = e.offset() {
                out.insert(e.partition(), o);
            }
        }
    }
    out
}

/// A record as the replay compares it: offset, key, value.
type Replayed = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Up to `n` records from `from`.
fn read_some(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    from: i64,
    n: usize,
) -> Vec<Replayed> {
    use rdkafka::Message;
    let Ok(consumer) = config
        .clone()
        .set("group.id", "kmirror-soak-replay")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create::<BaseConsumer>()
    else {
        return Vec::new();
    };
    let mut tpl = rdkafka::TopicPartitionList::new();
    if tpl
        .add_partition_offset(topic, partition, rdkafka::Offset::Offset(from))
        .is_err()
        || consumer.assign(&tpl).is_err()
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.len() < n && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(300)) {
            out.push((
                m.offset(),
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
            ));
        }
    }
    out
}

/// Compares the group on both sides and the records after its offsets.
fn replay(
    source: &ClientConfig,
    destination: &ClientConfig,
    topic: &str,
    partitions: i32,
    on_source: &BTreeMap<i32, i64>,
) -> GroupReplay {
    let on_destination = committed(destination, topic, partitions);
    let mut r = GroupReplay {
        partitions: on_source.len(),
        ..Default::default()
    };
    for (&p, &src) in on_source {
        let dst = on_destination.get(&p).copied();
        if dst == Some(src) {
            r.offsets_equal += 1;
        } else if r.differences.len() < 5 {
            r.differences.push(format!(
                "{topic}-{p}: committed {src} on the source, {dst:?} on the destination"
            ));
        }
        let Some(dst) = dst else { continue };
        // Around the committed offset: 10 records before it, up to 10 after.
        let theirs = read_some(source, topic, p, (src - 10).max(0), 20);
        let ours = read_some(destination, topic, p, (dst - 10).max(0), 20);
        for (i, d) in ours.iter().enumerate() {
            r.compared += 1;
            if theirs.get(i) == Some(d) {
                r.records_equal += 1;
            } else if r.differences.len() < 5 {
                r.differences.push(format!(
                    "{topic}-{p}: replayed record {i} at destination offset {} differs from the source's",
                    d.0
                ));
            }
        }
    }
    r
}

/// Runs the cycle; a failed step ends it, and the forward mirror is resumed anyway.
pub async fn run(ctx: &mut Ctx<'_>) -> CycleOutcome {
    let mut out = CycleOutcome::default();
    let Some(orders) = ctx.topics.iter().find(|t| t.role == Role::Orders).cloned() else {
        out.failure = Some("no orders topic".into());
        return out;
    };
    let topic = orders.name.clone();
    let (bed, ns) = (ctx.bed, ctx.s.ns.clone());
    macro_rules! step {
        ($what:expr, $body:expr) => {{
            let started = Instant::now();
            let result: anyhow::Result<String> = $body;
            let took = started.elapsed().as_secs_f64();
            match result {
                Ok(said) => {
                    let said = said.lines().last().unwrap_or("").trim().to_string();
                    out.steps.push(format!("{} ({took:.0}s) {said}", $what));
                    true
                }
                Err(e) => {
                    out.steps
                        .push(format!("{} FAILED after {took:.0}s: {e:#}", $what));
                    out.failure = Some(format!("{}: {e:#}", $what));
                    false
                }
            }
        }};
    }

    // The applications stop: the group commits its last offsets, the producer pauses.
    ctx.workload.stop_group();
    ctx.workload.set_orders_target(Target::Paused);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let source = bed.r_source_config();
    let destination = bed.r_dest_config(DestUser::Admin);
    let on_source = committed(&source, &topic, orders.partitions);
    let ok = step!(
        format!("failover {MIRROR} --topic {topic}"),
        mirror::plugin(
            bed,
            &ns,
            &[
                "failover",
                MIRROR,
                "--topic",
                &topic,
                "--wait",
                "--timeout",
                "5m"
            ]
        )
    );
    if ok {
        // The final group sync ran during the failover; allow the status a moment.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (s, d, t) = (source.clone(), destination.clone(), topic.clone());
        let parts = orders.partitions;
        let theirs = on_source.clone();
        let r = tokio::task::spawn_blocking(move || replay(&s, &d, &t, parts, &theirs))
            .await
            .unwrap_or_default();
        out.steps.push(format!(
            "group {GROUP} replayed on the destination: offsets equal {}/{}, records equal {}/{}",
            r.offsets_equal, r.partitions, r.records_equal, r.compared
        ));
        out.replay = Some(r);
        // The applications move to the destination and write there.
        ctx.workload.set_orders_target(Target::Destination);
        ctx.monitor.watch_for(ctx.s, Duration::from_secs(10)).await;
    }
    let ok = ok
        && step!(
            format!("failback {MIRROR} --topic {topic}"),
            mirror::plugin(
                bed,
                &ns,
                &[
                    "failback",
                    MIRROR,
                    "--topic",
                    &topic,
                    "--wait",
                    "--timeout",
                    "5m"
                ]
            )
        );
    if ok {
        ctx.monitor.watch_for(ctx.s, Duration::from_secs(5)).await;
        ctx.workload.set_orders_target(Target::Paused);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let caught = mirror::wait_recovered(
            ctx.s,
            ctx.monitor,
            REVERSE,
            0,
            Duration::from_secs(180),
            |v| v.topic != topic,
        )
        .await;
        out.steps.push(match &caught {
            Ok(t) => format!("{REVERSE} caught up in {:.0}s", t.as_secs_f64()),
            Err(e) => format!("{REVERSE}: {e}"),
        });
        let (b, n, t) = (bed.clone(), ns.clone(), topic.clone());
        out.reverse =
            tokio::task::spawn_blocking(move || verify::verify_topic(&b, &n, REVERSE, &t, true))
                .await
                .unwrap_or_default();
    }
    let ok = ok
        && step!(
            format!("failover {REVERSE} --topic {topic}"),
            mirror::plugin(
                bed,
                &ns,
                &[
                    "failover",
                    REVERSE,
                    "--topic",
                    &topic,
                    "--wait",
                    "--timeout",
                    "5m"
                ]
            )
        );
    // Back to the start: the applications on the source, the forward mirror resumed.
    ctx.workload.set_orders_target(Target::Source);
    let resumed = step!(
        format!("resume {MIRROR} --topic {topic}"),
        mirror::plugin(bed, &ns, &["resume", MIRROR, "--topic", &topic])
    );
    ctx.workload.start_group();
    if ok && resumed {
        let back = mirror::wait_recovered(
            ctx.s,
            ctx.monitor,
            MIRROR,
            200,
            Duration::from_secs(180),
            |v| v.topic != topic,
        )
        .await;
        if let Err(e) = back {
            out.steps
                .push(format!("{MIRROR} {topic} after resume: {e}"));
            out.failure.get_or_insert(format!(
                "{topic} did not mirror again after the resume: {e}"
            ));
        } else {
            out.steps.push(format!("{MIRROR} {topic} MIRRORING again"));
        }
    }
    out
}
