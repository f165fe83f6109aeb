//! The end of a failover, in an order a crash cannot spoil. Once a STOPPING partition's
//! fetcher is gone (and its write lease over):
//! 1. its last mirrored offset (LMO) is derived from the destination log — the checkpoint
//!    nothing can contradict — and **persisted on the STOPPING record**, before anything can
//!    write there; a retry reuses it and never reads a log that applications may extend;
//! 2. the final consumer-group offset sync runs over the partitions whose record does not say
//!    it ran, and the records then say so (`finalSyncDone`): a retry never runs it again over
//!    groups that may already consume on the new primary;
//! 3. once the whole topic is stopped, WRITE ACLs are applied (idempotent);
//! 4. the partitions go STOPPED (writable).
//!
//! What to finish is planned ([`lmo_record`], [`stopped_record`], [`Finish`]); [`finish`]
//! carries it out. Failpoints (`failover-lmo-recorded`, `failover-groups-synced`,
//! `failover-writable`, feature `failpoints`) let tests crash the operator between the steps.

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_state::records::{PartitionRecords, PartitionStateRecord, StopReason};
use kube::ResourceExt;

use crate::context::{Context, Note};
use crate::error::{Cause, KafkaError};
use crate::failpoint::failpoint;
use crate::scope::MirrorScope;
use crate::sync;

/// The end of a failover for some STOPPING partitions, as planned.
#[derive(Debug, Clone)]
pub struct Finish {
    /// Each partition's STOPPING record carrying its last mirrored offset (as recorded, or
    /// derived in this reconcile), or why the offset is unknown (its destination log end could
    /// not be read).
    pub stopping: Vec<(i32, Result<PartitionStateRecord, KafkaError>)>,
    /// Some last mirrored offset is derived in this reconcile: persist it before any other step.
    pub record_lmo: bool,
    /// Partitions whose final group-offset sync has not run.
    pub final_sync: Vec<i32>,
    /// Every partition of the topic is STOPPED once these are and ACLs are synced: apply the
    /// source's WRITE ACLs.
    pub make_writable: bool,
    /// The source answered in this reconcile (the final group sync and the WRITE ACLs read it).
    pub source_reachable: bool,
    /// Now, in milliseconds since the epoch (the STOPPED records' time).
    pub now_ms: i64,
}

impl Finish {
    /// The partitions being finished.
    pub fn partitions(&self) -> Vec<i32> {
        self.stopping.iter().map(|(p, _)| *p).collect()
    }

    /// The STOPPED records the finish writes last (those whose LMO is known).
    pub fn stopped(&self) -> Vec<(i32, PartitionStateRecord)> {
        self.stopping
            .iter()
            .filter_map(|(p, r)| {
                let mut r = r.as_ref().ok()?.clone();
                if self.final_sync.contains(p) {
                    r.final_sync_done = true;
                }
                Some((*p, stopped_record(&r, self.now_ms)))
            })
            .collect()
    }
}

/// The last mirrored offset of a partition, from its destination log end and offset map:
/// `(source offset, destination offset)`, or `None` when nothing was mirrored. The log end
/// counts copies a fetcher wrote but did not record before it died; after a foreign write it
/// also counts the foreign records, so there the end the fetcher recorded when it stopped
/// bounds it.
pub fn last_mirrored(records: &PartitionRecords, destination_end: i64) -> Option<(i64, i64)> {
    let destination_end = match records.position.as_ref() {
        Some(p)
            if p.error
                .as_ref()
                .is_some_and(|e| e.reason == StopReason::ForeignWrite) =>
        {
            destination_end.min(p.destination_offset)
        }
        _ => destination_end,
    };
    let aligned = records
        .position
        .as_ref()
        .and_then(|p| p.prefix_alignment)
        .map_or(0, |a| a.target);
    if destination_end <= aligned.max(0) {
        return None;
    }
    let map = records.offset_map().ok()?;
    let dst = destination_end - 1;
    Some((map.dst_to_src(dst), dst))
}

/// Whether a STOPPING record already carries its last mirrored offset.
pub fn lmo_recorded(record: &PartitionStateRecord) -> bool {
    record.state == PartitionState::Stopping && record.last_mirrored_offset.is_some()
}

/// The STOPPING record of a partition whose fetcher is gone, carrying its last mirrored offset
/// derived from the destination log end `destination_end` (-1 when nothing was mirrored).
pub fn lmo_record(
    records: &PartitionRecords,
    destination_end: i64,
    destination_topic: &str,
    now_ms: i64,
) -> PartitionStateRecord {
    let previous = records.state.clone().unwrap_or_default();
    let lmo = last_mirrored(records, destination_end);
    PartitionStateRecord {
        state: PartitionState::Stopping,
        last_mirrored_offset: Some(lmo.map_or(-1, |(src, _)| src)),
        last_mirrored_destination_offset: Some(lmo.map_or(-1, |(_, dst)| dst)),
        final_sync_done: false,
        destination_topic: Some(destination_topic.to_string()),
        source_cluster_id: records
            .position
            .as_ref()
            .map(|pos| pos.source_cluster_id.clone())
            .or(previous.source_cluster_id.clone()),
        updated_at_ms: now_ms,
        ..previous
    }
}

/// The STOPPED record that ends the failover of a partition whose STOPPING record carries its
/// last mirrored offset.
pub fn stopped_record(stopping: &PartitionStateRecord, now_ms: i64) -> PartitionStateRecord {
    PartitionStateRecord {
        state: PartitionState::Stopped,
        state_epoch: stopping.state_epoch + 1,
        retry_attempt: 0,
        drain_target: None,
        updated_at_ms: now_ms,
        ..stopping.clone()
    }
}

/// Finishes the failover of the planned partitions in the order of the module text; every
/// step whose effect is recorded is skipped by a retry. Returns the STOPPED records written.
pub async fn finish(
    ctx: &Context,
    scope: &MirrorScope,
    mt: &MirrorTopic,
    plan: &Finish,
) -> Result<Vec<(i32, PartitionStateRecord)>, Cause> {
    let mut stopping = Vec::new();
    for (p, record) in &plan.stopping {
        stopping.push((*p, record.clone()?));
    }
    let topic = &mt.spec.source_topic;
    // 1. The LMO is durable before anything else happens.
    if plan.record_lmo {
        scope
            .cache
            .write_states(&scope.key, topic, stopping.clone())
            .await?;
        failpoint("failover-lmo-recorded");
    }
    // 2. The final group-offset sync of the partitions it has not run for, then the record of
    //    it. It is best effort when the source is gone (an immediate failover), and says so.
    if !plan.final_sync.is_empty() {
        let group_sync = if plan.source_reachable {
            sync::groups::final_sync(scope, &ctx.metrics, mt, &plan.final_sync).await
        } else {
            Err(Cause::Kafka(KafkaError {
                cluster: "source",
                message: "the source is unreachable".into(),
            }))
        };
        let note = group_sync.err().map(|e| {
            tracing::warn!(topic = %mt.name_any(), error = %e, "final consumer-group offset sync failed");
            format!("final consumer-group offset sync failed: {e}")
        });
        let synced: Vec<(i32, PartitionStateRecord)> = stopping
            .iter()
            .filter(|(p, _)| plan.final_sync.contains(p))
            .map(|(p, r)| {
                let mut r = r.clone();
                r.final_sync_done = true;
                r.error = r.error.take().or(note.clone());
                (*p, r)
            })
            .collect();
        scope
            .cache
            .write_states(&scope.key, topic, synced.clone())
            .await?;
        for (p, r) in synced {
            if let Some(slot) = stopping.iter_mut().find(|(q, _)| *q == p) {
                slot.1 = r;
            }
        }
        failpoint("failover-groups-synced");
    }
    // 3. WRITE ACLs. With the source gone (an immediate failover) its ACLs are not asked for:
    //    the set last synced from it applies.
    if plan.make_writable {
        let applied = sync::acls::make_writable(ctx, scope, mt, !plan.source_reachable).await;
        if let Err(e) = applied {
            tracing::warn!(topic = %mt.name_any(), error = %e, "could not apply the source's WRITE ACLs");
            ctx.publish(
                mt,
                &Note::warning(
                    "AclSyncFailed",
                    "Failover",
                    format!("WRITE ACLs not applied: {e}"),
                ),
            )
            .await;
        }
        failpoint("failover-writable");
    }
    // 4. STOPPED.
    let writes: Vec<(i32, PartitionStateRecord)> = stopping
        .iter()
        .map(|(p, r)| (*p, stopped_record(r, plan.now_ms)))
        .collect();
    scope
        .cache
        .write_states(&scope.key, topic, writes.clone())
        .await?;
    let summary = writes
        .iter()
        .map(|(p, r)| format!("{p}@{}", r.last_mirrored_offset.unwrap_or(-1)))
        .collect::<Vec<_>>()
        .join(", ");
    ctx.publish(
        mt,
        &Note::normal(
            "PartitionStopped",
            "Failover",
            format!("failed over; last mirrored offsets (partition@offset): {summary}"),
        ),
    )
    .await;
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::offset_map::OffsetMap;
    use kmirror_state::records::{PositionRecord, PrefixAlignment, map_to_chunks};

    #[test]
    fn lmo_follows_the_destination_log_through_the_map() {
        let mut r = PartitionRecords::default();
        assert_eq!(last_mirrored(&r, 0), None);
        assert_eq!(last_mirrored(&r, 10), Some((9, 9)));
        let mut map = OffsetMap::identity();
        map.record_gap(12, 10).expect("an ordered segment");
        r.chunks = map_to_chunks(&map)
            .into_iter()
            .enumerate()
            .map(|(i, c)| (i as u32, c))
            .collect();
        r.position = Some(PositionRecord {
            map_chunks: 1,
            ..Default::default()
        });
        assert_eq!(last_mirrored(&r, 15), Some((16, 14)));
        r.position = Some(PositionRecord {
            map_chunks: 1,
            prefix_alignment: Some(PrefixAlignment {
                target: 20,
                done: true,
            }),
            ..Default::default()
        });
        assert_eq!(last_mirrored(&r, 20), None, "only placeholders");
    }

    #[test]
    fn after_a_foreign_write_the_lmo_ends_where_the_fetcher_stopped() {
        use kmirror_state::records::FetcherError;
        let stopped_at = |reason| PartitionRecords {
            position: Some(PositionRecord {
                destination_offset: 50,
                error: Some(FetcherError {
                    reason,
                    message: "…".into(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        // 50 copies, then one foreign record at 50.
        let foreign = stopped_at(StopReason::ForeignWrite);
        assert_eq!(last_mirrored(&foreign, 51), Some((49, 49)));
        // Other stops: copies the fetcher wrote without recording them still count.
        let crashed = stopped_at(StopReason::Error);
        assert_eq!(last_mirrored(&crashed, 53), Some((52, 52)));
    }
}
