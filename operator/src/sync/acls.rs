//! ACL sync: the source's ACLs on mirrored topics and included groups, without WRITE while a
//! topic mirrors; only the fetcher principal may write. Bindings kmirror created are recorded in
//! the state topic, so that only those are ever deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kmirror_crds::filter::Selector;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kmirror_state::kafka_admin::{
    AclBinding, AdminError, Operation, PatternType, Permission, ResourceType, create_acls,
    delete_acls, describe_acls,
};
use kube::ResourceExt;
use rdkafka::error::RDKafkaErrorCode;

use super::acl_plan::{PlannedTopic, changes, failed_over, freeze, plan, relevant};
use super::{Mirrored, PartResult};
use crate::clusters::Cluster;
use crate::context::Context;
use crate::error::{Cause, KafkaError};
use crate::kafka::TIMEOUT;
use crate::scope::MirrorScope;

fn any_filter() -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Any,
        name: String::new(),
        pattern: PatternType::Any,
        principal: String::new(),
        host: String::new(),
        operation: Operation::Any,
        permission: Permission::Any,
    }
}

/// All bindings of a cluster; `None` when it has no authorizer.
async fn all_acls(cluster: &Arc<Cluster>) -> Result<Option<Vec<AclBinding>>, KafkaError> {
    let c = cluster.clone();
    let result =
        tokio::task::spawn_blocking(move || describe_acls(c.admin.inner(), &any_filter(), TIMEOUT))
            .await
            .map_err(|e| cluster.error(e))?;
    match result {
        Ok(b) => Ok(Some(b)),
        Err(AdminError::Kafka {
            code: RDKafkaErrorCode::SecurityDisabled,
            ..
        }) => Ok(None),
        Err(e) => Err(cluster.error(format!("describing ACLs: {e}"))),
    }
}

/// The principal fetchers write as: the configured one, or `User:<destination SASL username>`.
pub fn fetcher_principal(cm: &ClusterMirror) -> Option<String> {
    cm.spec.sync.acls.fetcher_principal.clone().or_else(|| {
        cm.spec
            .destination
            .sasl
            .as_ref()
            .and_then(|s| s.username.clone())
            .map(|u| format!("User:{u}"))
    })
}

/// Syncs the ACLs of the mirror. `writable` names a source topic to treat as failed over even if
/// its partitions are not STOPPED yet (the last step of a failover). The source bindings that
/// concern the mirror are kept in the state topic at every sync; when the source is known down
/// (`source_down`: it is not even asked) or does not answer, the kept set is used instead, so that
/// a failover with the source gone still gives the applications their WRITE ACLs.
pub async fn sync(
    scope: &MirrorScope,
    topics: &[Mirrored],
    writable: Option<&str>,
    source_down: bool,
) -> PartResult {
    // One ACL sync of a mirror at a time: a periodic sync must not interleave with a
    // failover's grant (each reads the destination's bindings and kmirror's record of them,
    // then writes both).
    let lock = {
        static LOCKS: std::sync::LazyLock<
            std::sync::Mutex<
                std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>,
            >,
        > = std::sync::LazyLock::new(Default::default);
        LOCKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(scope.key.clone())
            .or_default()
            .clone()
    };
    let _one = lock.lock().await;
    let (cm, source, destination) = (&scope.mirror, &scope.source, &scope.destination);
    let Some(existing) = all_acls(destination).await? else {
        return Ok(
            "the destination has no authorizer: foreign writes are detected, not prevented".into(),
        );
    };
    let kept = scope.cache.source_acls(&scope.key);
    let read = if source_down {
        None
    } else {
        match all_acls(source).await {
            Ok(all) => Some(all.unwrap_or_default()),
            Err(e) if kept.is_some() => {
                tracing::warn!(error = %e, "source ACLs unreadable; using the set last synced");
                None
            }
            Err(e) => return Err(e.into()),
        }
    };
    let planned: BTreeMap<String, PlannedTopic> = topics
        .iter()
        .map(|t| {
            let src = t.topic.spec.source_topic.clone();
            let writable = t.stopped || writable == Some(src.as_str());
            (
                src,
                PlannedTopic {
                    destination: t.topic.destination_topic().to_string(),
                    writable,
                },
            )
        })
        .collect();
    let groups = &cm.spec.sync.consumer_groups;
    let selector = Selector::compile(
        &groups.include,
        &groups.exclude,
        "spec.sync.consumerGroups",
        true,
    )
    .map_err(|e| Cause::Invalid(e.to_string()))?;
    let (source_acls, from_kept) =
        match read {
            Some(all) => {
                let now = relevant(&all, &planned, &selector);
                if kept.as_ref() != Some(&now) {
                    scope.cache.write_source_acls(&scope.key, &now).await?;
                }
                (now, false)
            }
            None => (
                kept.ok_or_else(|| {
                    Cause::Kafka(source.error(
                        "the source is unreachable and no ACL set was synced from it before",
                    ))
                })?,
                true,
            ),
        };
    let existing: BTreeSet<AclBinding> = existing.into_iter().collect();
    let created_before: BTreeSet<AclBinding> = scope.cache.acls(&scope.key).into_iter().collect();
    // Failed-over topics keep what they got when they failed over; the one failing over now
    // gets the source's bindings.
    let mut frozen = failed_over(&scope.cache.states(&scope.key));
    if let Some(t) = writable.and_then(|w| topics.iter().find(|t| t.topic.spec.source_topic == w)) {
        frozen.remove(t.topic.destination_topic());
    }
    let wanted = freeze(
        plan(
            &source_acls,
            &planned,
            &selector,
            fetcher_principal(cm).as_deref(),
        ),
        &created_before,
        &frozen,
    );
    let (create, delete) = changes(&wanted, &existing, &created_before);
    let d = destination.clone();
    let (c2, d2) = (create.clone(), delete.clone());
    tokio::task::spawn_blocking(move || {
        create_acls(d.admin.inner(), &c2, TIMEOUT)?;
        delete_acls(d.admin.inner(), &d2, TIMEOUT)
    })
    .await
    .map_err(|e| destination.error(e))?
    .map_err(|e| destination.error(format!("changing ACLs: {e}")))?;
    let ours: Vec<AclBinding> = created_before
        .intersection(&wanted)
        .cloned()
        .chain(create.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if ours != created_before.iter().cloned().collect::<Vec<_>>() {
        scope.cache.write_acls(&scope.key, &ours).await?;
    }
    for b in &create {
        tracing::info!(acl = %b, "created ACL on the destination");
    }
    for b in &delete {
        tracing::info!(acl = %b, "deleted ACL from the destination");
    }
    Ok(format!(
        "{} created, {} deleted, {} managed{}",
        create.len(),
        delete.len(),
        ours.len(),
        if from_kept {
            " (from the source ACLs last synced: the source is unreachable)"
        } else {
            ""
        }
    ))
}

/// Applies the source's WRITE ACLs for a topic being failed over (with the source known down:
/// the set last synced from it, without asking it).
pub async fn make_writable(
    ctx: &Context,
    scope: &MirrorScope,
    mt: &MirrorTopic,
    source_down: bool,
) -> Result<(), Cause> {
    let topics = super::mirrored_topics(ctx, &scope.mirror, &scope.cache).await?;
    let summary = sync(scope, &topics, Some(&mt.spec.source_topic), source_down).await?;
    tracing::info!(topic = %mt.name_any(), "{summary}");
    Ok(())
}
