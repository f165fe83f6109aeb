//! The end of a failover: once a STOPPING partition's fetcher is gone, its last mirrored offset
//! (LMO) is derived from the destination log — the checkpoint nothing can contradict — and
//! persisted; consumer-group offsets get a final sync, WRITE ACLs are applied once the whole
//! topic is stopped, and the partition goes STOPPED (writable). What to finish is planned
//! ([`stopped_record`], [`Finish`]); [`finish`] carries it out.

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_state::records::{PartitionRecords, PartitionStateRecord, StopReason};
use kube::ResourceExt;

use crate::context::{Context, Note};
use crate::error::{Cause, KafkaError};
use crate::scope::MirrorScope;
use crate::sync;

/// The end of a failover for some STOPPING partitions, as planned.
#[derive(Debug, Clone)]
pub struct Finish {
    /// The STOPPED record of each partition, or why its last mirrored offset is unknown (its
    /// destination log end could not be read).
    pub stopped: Vec<(i32, Result<PartitionStateRecord, KafkaError>)>,
    /// Every partition of the topic is STOPPED once these are and ACLs are synced: apply the
    /// source's WRITE ACLs.
    pub make_writable: bool,
    /// The source answered in this reconcile (the final group sync and the WRITE ACLs read it).
    pub source_reachable: bool,
}

impl Finish {
    /// The partitions being finished.
    pub fn partitions(&self) -> Vec<i32> {
        self.stopped.iter().map(|(p, _)| *p).collect()
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

/// The STOPPED record of a STOPPING partition whose destination log ends at `destination_end`.
pub fn stopped_record(
    records: &PartitionRecords,
    destination_end: i64,
    destination_topic: &str,
    now_ms: i64,
) -> PartitionStateRecord {
    let previous = records.state.clone().unwrap_or_default();
    let lmo = last_mirrored(records, destination_end);
    PartitionStateRecord {
        state: PartitionState::Stopped,
        state_epoch: previous.state_epoch + 1,
        retry_attempt: 0,
        error: previous.error.clone(),
        reason: previous.reason,
        last_mirrored_offset: Some(lmo.map_or(-1, |(src, _)| src)),
        last_mirrored_destination_offset: Some(lmo.map_or(-1, |(_, dst)| dst)),
        destination_topic: Some(destination_topic.to_string()),
        source_cluster_id: records
            .position
            .as_ref()
            .map(|pos| pos.source_cluster_id.clone()),
        retry_token: previous.retry_token.clone(),
        drain_target: None,
        divergence: previous.divergence.clone(),
        updated_at_ms: now_ms,
    }
}

/// Finishes the failover of the planned partitions: final group-offset sync, WRITE ACLs, then
/// the STOPPED records. Returns the records written.
pub async fn finish(
    ctx: &Context,
    scope: &MirrorScope,
    mt: &MirrorTopic,
    plan: &Finish,
) -> Result<Vec<(i32, PartitionStateRecord)>, Cause> {
    let mut writes = Vec::new();
    for (p, stopped) in &plan.stopped {
        writes.push((*p, stopped.clone()?));
    }
    // The final group-offset sync must see the topic as it is now; it is best effort when the
    // source is gone (an immediate failover), and says so.
    let group_sync = if plan.source_reachable {
        sync::groups::final_sync(scope, &ctx.metrics, mt).await
    } else {
        Err(Cause::Kafka(KafkaError {
            cluster: "source",
            message: "the source is unreachable".into(),
        }))
    };
    let group_note = match group_sync {
        Ok(()) => None,
        Err(e) => {
            tracing::warn!(topic = %mt.name_any(), error = %e, "final consumer-group offset sync failed");
            Some(format!("final consumer-group offset sync failed: {e}"))
        }
    };
    if plan.make_writable {
        // With the source gone (an immediate failover) its ACLs are not asked for: the set last
        // synced from it applies.
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
    }
    for (_, record) in &mut writes {
        record.error = record.error.take().or(group_note.clone());
    }
    scope
        .cache
        .write_states(&scope.key, &mt.spec.source_topic, writes.clone())
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
