//! Failback: a `ClusterMirror` with `spec.reverseOf` copies a failed-over topic back. For each
//! partition, PREPARING reads the forward mirror's last mirrored offset (LMO) from the state topic
//! on this mirror's *source* cluster (the old destination) and compares it with the log of this
//! mirror's destination (the old source):
//!
//! - it ends right after the LMO: the fetcher is seeded to continue after it, so only the delta
//!   written on the new primary crosses back, at identical offsets;
//! - it holds records after the LMO (written there after an immediate failover): those are
//!   **divergent**; they are copied to a quarantine topic first, reported, and the partition waits
//!   for `spec.divergencePolicy`: `KeepAndTranslate` (mirror after them, offsets translated
//!   through the map) or `Recreate` (delete and recreate the topic, then copy everything).
//!
//! [`observe`] reads what the decision needs, [`plan`] decides (pure), [`execute`] carries out the
//! planned steps; [`copy`] holds the blocking record copy. Every step is safe to repeat and a
//! crash between any two of them is resumed by the next plan (failpoints `failback-*` after
//! each, for the crash tests).

pub mod copy;
pub mod plan;

use std::collections::BTreeMap;
use std::time::Duration;

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_state::kafka_record::RecordData;
use kmirror_state::offset_map::{OffsetMap, Segment};
use kmirror_state::records::{PartitionRecords, RecordKind, StateKey};

use crate::context::Context;
use crate::error::{Cause, KafkaError};
use crate::failpoint::failpoint;
use crate::kafka;
use crate::scope::{MirrorScope, STATE_LOAD_WAIT};
use plan::Step;

/// Suffix of quarantine topics.
pub const QUARANTINE_SUFFIX: &str = ".kmirror-quarantine";

/// What was observed of one PREPARING partition of a reverse mirror.
#[derive(Debug, Clone, PartialEq)]
pub enum Facts {
    /// Already prepared: this mirror has a position for it, or its divergence is resolved.
    Prepared,
    /// The forward mirror has no record of the partition.
    NoForwardRecord,
    /// The forward mirror's partition is not STOPPED.
    ForwardNotStopped(PartitionState),
    /// The old source's log compared with the forward mirror's last mirrored offset.
    Compared(Comparison),
}

/// The old source's log (this mirror's destination) against the forward mirror's last mirrored
/// offset (LMO).
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The LMO, as a source offset of the forward mirror.
    pub lmo_src: i64,
    /// The LMO as a destination offset of the forward mirror.
    pub lmo_dst: i64,
    /// Log end of the partition on this mirror's destination.
    pub end: i64,
    /// The forward mirror's offset map.
    pub forward_map: OffsetMap,
    /// Records after the LMO on this mirror's destination: written there after the failover.
    pub divergent: Vec<RecordData>,
    /// Partitions of the destination topic (for a quarantine topic), read when records diverge
    /// and no quarantine is recorded yet.
    pub destination_partitions: Option<usize>,
    /// Log end of the quarantine partition (`None`: no quarantine topic), read while records
    /// diverge and are not all quarantined.
    pub quarantine_end: Option<i64>,
}

/// What was observed for a reverse mirror's failback.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    /// Per PREPARING partition waiting for the failback gate.
    pub facts: BTreeMap<i32, Facts>,
    /// The source cluster's ID, read when a partition may be seeded (`None`: no answer).
    pub source_cluster_id: Option<String>,
}

/// The reverse map seeding a failback fetcher: identity when the forward map was the identity
/// and the destination ends right after the LMO; otherwise one segment that continues after the
/// destination's log end.
pub fn reverse_map(
    forward: &OffsetMap,
    lmo_src: i64,
    lmo_dst: i64,
    destination_end: i64,
) -> OffsetMap {
    if forward.is_identity() && destination_end == lmo_src + 1 && lmo_src == lmo_dst {
        OffsetMap::identity()
    } else {
        OffsetMap::from_segments(vec![Segment {
            src: lmo_dst + 1,
            dst: destination_end,
        }])
        .expect("one segment")
    }
}

/// Reads what the failback of `partitions` (PREPARING, of a reverse mirror) needs: the forward
/// mirror's records on the source, the destination's log after the last mirrored offset, the
/// quarantine's progress.
pub async fn observe(
    ctx: &Context,
    scope: &MirrorScope,
    mt: &MirrorTopic,
    partitions: &[(i32, PartitionRecords)],
) -> Result<Observed, Cause> {
    let mut out = Observed::default();
    let Some(forward) = scope.forward_mirror() else {
        return Ok(out);
    };
    let (source, destination) = (&scope.source, &scope.destination);
    // The topic the forward mirror copied from is where this mirror writes.
    let forward_topic = mt.destination_topic().to_string();
    let mut forward_records = None;
    for (p, own) in partitions {
        let p = *p;
        let existing = own.state.as_ref().and_then(|s| s.divergence.clone());
        if existing.as_ref().is_some_and(|d| d.resolution.is_some()) || own.position.is_some() {
            out.facts.insert(p, Facts::Prepared);
            continue;
        }
        if forward_records.is_none() {
            let cache = ctx
                .states
                .get(
                    source.key,
                    &source.config,
                    &scope.mirror.spec.state_topic,
                    &ctx.metrics,
                )
                .await?;
            if !cache.wait_loaded(STATE_LOAD_WAIT).await {
                return Err(Cause::State(crate::error::StateError(format!(
                    "{} on the old source is still being read",
                    cache.topic_name()
                ))));
            }
            forward_records = Some(cache.topic(forward, &forward_topic));
        }
        let Some(fwd) = forward_records.as_ref().and_then(|r| r.get(&p)) else {
            out.facts.insert(p, Facts::NoForwardRecord);
            continue;
        };
        let Some(state) = fwd
            .state
            .as_ref()
            .filter(|s| s.state == PartitionState::Stopped)
        else {
            let s = fwd
                .state
                .as_ref()
                .map_or(PartitionState::Unknown, |s| s.state);
            out.facts.insert(p, Facts::ForwardNotStopped(s));
            continue;
        };
        let lmo_src = state.last_mirrored_offset.unwrap_or(-1);
        let lmo_dst = state.last_mirrored_destination_offset.unwrap_or(lmo_src);
        let (_, end) = kafka::watermarks(destination, &forward_topic, p).await?;
        let mut c = Comparison {
            lmo_src,
            lmo_dst,
            end,
            forward_map: fwd.offset_map().unwrap_or_default(),
            divergent: Vec::new(),
            destination_partitions: None,
            quarantine_end: None,
        };
        if end > lmo_src {
            let (config, t) = (destination.config.clone(), forward_topic.clone());
            c.divergent = tokio::task::spawn_blocking(move || {
                copy::read_range(&config, &t, p, lmo_src + 1, end)
            })
            .await
            .map_err(|e| destination.error(e))?
            .map_err(|message| KafkaError {
                cluster: "destination",
                message,
            })?;
        }
        if !c.divergent.is_empty() {
            let quarantine = existing.as_ref().map_or_else(
                || format!("{forward_topic}{QUARANTINE_SUFFIX}"),
                |d| d.quarantine_topic.clone(),
            );
            let unrecorded = existing.as_ref().is_none_or(|d| d.quarantine_base < 0);
            if unrecorded {
                c.destination_partitions = kafka::describe_topic(destination, &forward_topic)
                    .await?
                    .map(|t| t.partitions);
            }
            if unrecorded || existing.as_ref().is_some_and(|d| d.quarantined < d.records) {
                c.quarantine_end = match kafka::describe_topic(destination, &quarantine).await? {
                    Some(_) => Some(kafka::watermarks(destination, &quarantine, p).await?.1),
                    None => None,
                };
            }
        }
        out.facts.insert(p, Facts::Compared(c));
    }
    if out.facts.values().any(|f| matches!(f, Facts::Compared(_))) {
        out.source_cluster_id = source.cluster_id(Duration::from_secs(10)).await.ok();
    }
    Ok(out)
}

/// Carries out planned failback steps, in order.
pub async fn execute(scope: &MirrorScope, mt: &MirrorTopic, steps: &[Step]) -> Result<(), Cause> {
    let destination = &scope.destination;
    let topic = &mt.spec.source_topic;
    for step in steps {
        match step {
            Step::CreateQuarantine { topic, partitions } => {
                kafka::create_topic(destination, topic, *partitions, &Default::default()).await?;
                failpoint("failback-quarantine-created");
            }
            Step::Quarantine {
                topic: quarantine,
                partition,
                records,
            } => {
                let (config, q, p, rest) = (
                    destination.config.clone(),
                    quarantine.clone(),
                    *partition,
                    records.clone(),
                );
                tokio::task::spawn_blocking(move || copy::quarantine(&config, &q, p, &rest))
                    .await
                    .map_err(|e| destination.error(e))?
                    .map_err(|message| KafkaError {
                        cluster: "destination",
                        message,
                    })?;
                tracing::info!(topic = %mt.destination_topic(), partition, records = records.len(), %quarantine, "quarantined divergent records");
                failpoint("failback-quarantined");
            }
            Step::Seed {
                partition,
                position,
                chunks,
            } => {
                let mut batch = Vec::new();
                for (i, chunk) in chunks.iter().enumerate() {
                    batch.push((
                        StateKey::map_chunk(&scope.key, topic, *partition, i as u32),
                        Some(serde_json::to_vec(chunk).expect("chunks serialize")),
                    ));
                }
                batch.push((
                    StateKey::new(RecordKind::Position, &scope.key, topic, *partition),
                    Some(serde_json::to_vec(position.as_ref()).expect("positions serialize")),
                ));
                scope.cache.write_records(batch).await?;
                failpoint("failback-seeded");
            }
            Step::RecordDivergence(updates) => {
                scope
                    .cache
                    .write_states(&scope.key, topic, updates.clone())
                    .await?;
                failpoint("failback-divergence-recorded");
            }
            Step::Recreate {
                partitions,
                forget,
                resolved,
            } => {
                recreate_destination(scope, mt, *partitions).await?;
                failpoint("failback-recreated");
                scope.cache.delete(forget.clone()).await?;
                failpoint("failback-forgotten");
                scope
                    .cache
                    .write_states(&scope.key, topic, resolved.clone())
                    .await?;
            }
        }
    }
    Ok(())
}

/// Deletes and recreates the destination topic (divergence policy `Recreate`): waits until the
/// deletion is visible, then creates it empty with the source's partitions and configs.
async fn recreate_destination(
    scope: &MirrorScope,
    mt: &MirrorTopic,
    partitions: usize,
) -> Result<(), Cause> {
    let destination = &scope.destination;
    let topic = mt.destination_topic();
    kafka::delete_topic(destination, topic).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while kafka::describe_topic(destination, topic).await?.is_some() {
        if std::time::Instant::now() > deadline {
            return Err(destination
                .error(format!("topic {topic} still exists 60s after its deletion"))
                .into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A deletion can take a moment to settle on every broker: retry the creation briefly.
    let mut attempt = 0;
    loop {
        match crate::destination_topic::create(scope, mt, partitions as i32).await {
            Ok(kafka::Creation::Created) => break,
            // The deleted topic is still there for the controller: creating it now would keep
            // the diverged records.
            Ok(kafka::Creation::Existed) if attempt < 20 => {
                attempt += 1;
                tracing::debug!("recreating {topic}: the deletion has not settled yet");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(kafka::Creation::Existed) => {
                return Err(destination
                    .error(format!(
                        "topic {topic} still exists 10s after its deletion was visible"
                    ))
                    .into());
            }
            Err(e) if attempt < 20 => {
                attempt += 1;
                tracing::debug!(error = %e, "recreating {topic}: retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
    tracing::info!(
        topic,
        partitions,
        "recreated the destination topic (divergence policy Recreate)"
    );
    Ok(())
}
