//! The end of a failover: once a STOPPING partition's fetcher is gone, its last mirrored offset
//! (LMO) is derived from the destination log — the checkpoint nothing can contradict — and
//! persisted; consumer-group offsets get a final sync, WRITE ACLs are applied once the whole
//! topic is stopped, and the partition goes STOPPED (writable).

use std::collections::BTreeMap;
use std::sync::Arc;

use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic, PartitionState};
use kmirror_state::records::{PartitionRecords, PartitionStateRecord, now_ms};
use kube::ResourceExt;

use crate::clusters::Cluster;
use crate::context::Context;
use crate::error::Result;
use crate::kafka;
use crate::mirror_topic::mirror_key;
use crate::state_cache::StateCache;
use crate::sync;

/// The last mirrored offset of a partition, from its destination log end and offset map:
/// `(source offset, destination offset)`, or `None` when nothing was mirrored.
pub fn last_mirrored(records: &PartitionRecords, destination_end: i64) -> Option<(i64, i64)> {
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

/// Finishes the failover of `partitions` (all STOPPING with no fetcher left).
#[allow(clippy::too_many_arguments)]
pub async fn finish(
    ctx: &Arc<Context>,
    cm: &ClusterMirror,
    mt: &MirrorTopic,
    destination: &Arc<Cluster>,
    source: &Arc<Cluster>,
    cache: &Arc<StateCache>,
    records: &BTreeMap<i32, PartitionRecords>,
    partitions: &[i32],
    source_reachable: bool,
) -> Result<()> {
    let mirror = mirror_key(mt);
    let topic = &mt.spec.source_topic;
    let mut lmos = BTreeMap::new();
    for &p in partitions {
        let (_, end) = kafka::watermarks(destination, mt.destination_topic(), p).await?;
        let r = records.get(&p).cloned().unwrap_or_default();
        lmos.insert(p, last_mirrored(&r, end));
    }
    // The final group-offset sync must see the topic as it is now; it is best effort when the
    // source is gone (an immediate failover), and says so.
    let group_sync = if source_reachable {
        sync::groups::final_sync(cm, mt, source, destination, cache).await
    } else {
        Err(crate::error::Error::Kafka {
            cluster: "source",
            message: "the source is unreachable".into(),
        })
    };
    let group_note = match group_sync {
        Ok(summary) => summary,
        Err(e) => {
            tracing::warn!(topic = %mt.name_any(), error = %e, "final consumer-group offset sync failed");
            Some(format!("final consumer-group offset sync failed: {e}"))
        }
    };
    let all_stopped = records.iter().all(|(p, r)| {
        partitions.contains(p)
            || r.state
                .as_ref()
                .is_some_and(|s| s.state == PartitionState::Stopped)
    });
    if all_stopped && cm.spec.sync.acls.enabled {
        let applied = if source_reachable {
            sync::acls::make_writable(ctx, cm, mt, source, destination).await
        } else {
            Err(crate::error::Error::Kafka {
                cluster: "source",
                message: "the source is unreachable: its ACLs cannot be read".into(),
            })
        };
        if let Err(e) = applied {
            // The source may be gone (immediate failover): its WRITE ACLs cannot be read.
            tracing::warn!(topic = %mt.name_any(), error = %e, "could not apply the source's WRITE ACLs");
            ctx.event(
                mt,
                true,
                "AclSyncFailed",
                "Failover",
                format!("WRITE ACLs not applied: {e}"),
            )
            .await;
        }
    }
    let now = now_ms();
    let writes = partitions
        .iter()
        .map(|p| {
            let previous = records
                .get(p)
                .and_then(|r| r.state.clone())
                .unwrap_or_default();
            let lmo = lmos.get(p).copied().flatten();
            let record = PartitionStateRecord {
                state: PartitionState::Stopped,
                state_epoch: previous.state_epoch + 1,
                retry_attempt: 0,
                error: previous.error.clone().or(group_note.clone()),
                last_mirrored_offset: Some(lmo.map_or(-1, |(src, _)| src)),
                last_mirrored_destination_offset: Some(lmo.map_or(-1, |(_, dst)| dst)),
                destination_topic: Some(mt.destination_topic().to_string()),
                source_cluster_id: records
                    .get(p)
                    .and_then(|r| r.position.as_ref())
                    .map(|pos| pos.source_cluster_id.clone()),
                retry_token: previous.retry_token.clone(),
                drain_target: None,
                divergence: previous.divergence.clone(),
                updated_at_ms: now,
            };
            (*p, record)
        })
        .collect::<Vec<_>>();
    cache.write_states(&mirror, topic, writes.clone()).await?;
    let summary = writes
        .iter()
        .map(|(p, r)| format!("{p}@{}", r.last_mirrored_offset.unwrap_or(-1)))
        .collect::<Vec<_>>()
        .join(", ");
    ctx.event(
        mt,
        false,
        "PartitionStopped",
        "Failover",
        format!("failed over; last mirrored offsets (partition@offset): {summary}"),
    )
    .await;
    Ok(())
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
        map.record_gap(12, 10);
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
}
