//! Deleting a `MirrorTopic`: stop its fetchers (wait until their pods are gone), keep the
//! destination data, tombstone its state — except the failover record of STOPPED partitions,
//! which a failback needs.

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic, PartitionState};
use kmirror_state::records::{PartitionRecords, RecordKind, StateKey};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::claim::{Claim, claim};
use super::execute::delete_own_pod;
use crate::context::{Context, Note};
use crate::error::{Error, Result};
use crate::pods::{LABEL_MIRROR_TOPIC, controlled_by, label_value};
use crate::pool::LABEL_POOL;
use crate::pool::pod::units_of;
use crate::reconcile::Cleanup;

/// The state records of a deleted topic to tombstone: all but those of STOPPED partitions.
/// Pure.
pub fn forgotten(
    mirror: &str,
    topic: &str,
    records: &std::collections::BTreeMap<i32, PartitionRecords>,
) -> Vec<StateKey> {
    let mut keys = Vec::new();
    for (&p, r) in records {
        let stopped = r
            .state
            .as_ref()
            .is_some_and(|s| s.state == PartitionState::Stopped);
        if stopped {
            continue;
        }
        if r.state.is_some() {
            keys.push(StateKey::new(RecordKind::State, mirror, topic, p));
        }
        if r.position.is_some() {
            keys.push(StateKey::new(RecordKind::Position, mirror, topic, p));
        }
        keys.extend(
            r.chunks
                .keys()
                .map(|c| StateKey::map_chunk(mirror, topic, p, *c)),
        );
    }
    keys
}

/// Deletes the fetcher pods of a `MirrorTopic`; how many were still there (0: none left).
pub async fn stop_fetchers(ctx: &Context, mt: &MirrorTopic) -> Result<usize> {
    let ns = mt.namespace().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = pods_api
        .list(&ListParams::default().labels(&format!(
            "{LABEL_MIRROR_TOPIC}={}",
            label_value(&mt.name_any())
        )))
        .await
        .map_err(Error::ListPods)?;
    let owner_uid = mt.uid().unwrap_or_default();
    let own: Vec<&Pod> = pods
        .items
        .iter()
        .filter(|p| controlled_by(p, &owner_uid))
        .collect();
    for pod in own
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let _ = delete_own_pod(&pods_api, &pod.name_any(), &owner_uid, &mt.name_any()).await;
    }
    // Pool pods: the pool replaces those that run the topic with pods that do not (those of a
    // topic refused for a taken source topic run the owner's partitions).
    let topic = &mt.spec.source_topic;
    ctx.pool.withdraw(&mt.mirror_key(), &mt.name_any(), topic);
    if let Claim::TakenBy(_) = claim(mt, &super::peers(ctx, mt).await?) {
        return Ok(own.len());
    }
    let pool_pods = pods_api
        .list(
            &ListParams::default()
                .labels(&format!("{LABEL_POOL}={}", label_value(&mt.spec.mirror))),
        )
        .await
        .map_err(Error::ListPods)?;
    let pooled = pool_pods
        .items
        .iter()
        .filter(|p| units_of(p).contains_key(topic))
        .count();
    Ok(own.len() + pooled)
}

/// Cleans up after a deleted `MirrorTopic`.
pub async fn cleanup(mt: &MirrorTopic, ctx: &Context) -> Result<Cleanup> {
    let ns = mt.namespace().unwrap_or_default();
    let name = mt.name_any();
    let running = stop_fetchers(ctx, mt).await?;
    if running > 0 {
        return Ok(Cleanup::Waiting(format!(
            "{running} fetcher pod(s) of {name} to stop"
        )));
    }
    // A topic refused because another one owns its source topic has no records of its own:
    // those under its keys are the owner's.
    if let Claim::TakenBy(owner) = claim(mt, &super::peers(ctx, mt).await?) {
        tracing::info!(%name, %owner, "the source topic's records belong to its owner; kept");
        return Ok(Cleanup::Done);
    }
    ctx.pool.forget(&mt.mirror_key(), &name);
    ctx.config_notes
        .forget(&mt.mirror_key(), &mt.spec.source_topic);
    // A deleted topic has no FAILED partitions to alert on.
    ctx.metrics
        .set_failed_partitions(&mt.mirror_key(), &mt.spec.source_topic, &[]);
    let mirrors: Api<ClusterMirror> = Api::namespaced(ctx.client.clone(), &ns);
    let mirror = mirrors
        .get_opt(&mt.spec.mirror)
        .await
        .map_err(|source| Error::ReadMirror {
            name: mt.spec.mirror.clone(),
            source,
        })?;
    let Some(cm) = mirror else {
        tracing::warn!(%name, "the ClusterMirror is gone; leaving its state topic records as they are");
        return Ok(Cleanup::Done);
    };
    match ctx
        .clusters
        .get(&ctx.client, &ns, &cm.spec.destination, "destination")
        .await
    {
        Ok((destination, _))
            if let Some(message) = crate::scope::identity_mismatch(&cm, &destination).await =>
        {
            tracing::warn!(%name, "{message}; state records stay");
        }
        Ok((destination, _)) => {
            let cache = ctx
                .states
                .get(
                    destination.key,
                    &destination.config,
                    &cm.spec.state_topic,
                    &ctx.metrics,
                )
                .await
                .map_err(Error::OpenState)?;
            let mirror = mt.mirror_key();
            cache.own(&mirror).await.map_err(Error::ClaimState)?;
            let topic = &mt.spec.source_topic;
            let keys = forgotten(&mirror, topic, &cache.topic(&mirror, topic));
            cache
                .delete(keys)
                .await
                .map_err(Error::RemoveStateRecords)?;
        }
        Err(e) => tracing::warn!(%name, error = %e, "destination unavailable; state records stay"),
    }
    ctx.publish(
        mt,
        &Note::normal(
            "Deleted",
            "Cleanup",
            format!("fetchers of {name} stopped; destination data kept"),
        ),
    )
    .await;
    Ok(Cleanup::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::records::{PartitionStateRecord, PositionRecord};

    #[test]
    fn the_failover_record_of_stopped_partitions_stays() {
        let with = |state: PartitionState| PartitionRecords {
            state: Some(PartitionStateRecord {
                state,
                ..Default::default()
            }),
            position: Some(PositionRecord::default()),
            ..Default::default()
        };
        let records = std::collections::BTreeMap::from([
            (0, with(PartitionState::Stopped)),
            (1, with(PartitionState::Mirroring)),
        ]);
        let keys = forgotten("ns/dr", "t", &records);
        assert_eq!(
            keys,
            vec![
                StateKey::new(RecordKind::State, "ns/dr", "t", 1),
                StateKey::new(RecordKind::Position, "ns/dr", "t", 1),
            ]
        );
    }
}
