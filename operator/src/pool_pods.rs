//! The fetcher pools at work: a loop of the operator leader that, woken by a topic's changed
//! demand and every few seconds, brings each pooled mirror's pool pods to their plan
//! ([`crate::pool`]) — and deletes the pool pods of mirrors without a pool or gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::ClusterMirror;
use kmirror_state::leases::LeaseUnit;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};

use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};
use crate::mirror_topic::pod_view::PodView;
use crate::pods::{ANNOTATION_PARTITIONS, LABEL_MIRROR, LABEL_MIRROR_TOPIC, label_value};
use crate::pool::plan::{self, Existing};
use crate::pool::{ANNOTATION_UNITS, LABEL_POOL, demand, pod};
use crate::scope::{identity_mismatch, key_of};

/// How often the pool looks at its pods without being woken.
const TICK: Duration = Duration::from_secs(5);

/// Runs the pools of the mirrors in `namespace` (all: `None`) until `stop` turns true.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = ctx.pool.changed.notified() => {
                // A burst of reports (a mirror applied) is taken in once it settles.
                tokio::time::sleep(demand::QUIET + Duration::from_millis(100)).await;
            }
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if let Err(e) = look(&ctx, namespace.as_deref()).await {
            tracing::warn!(error = %e, "fetcher pools");
        }
    }
}

/// One look at every pool: the mirrors with a pool, and those whose pool pods remain.
async fn look(ctx: &Context, namespace: Option<&str>) -> Result<()> {
    let api: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let pool_pods = api
        .list(&ListParams::default().labels(LABEL_POOL))
        .await
        .map_err(Error::ListPods)?
        .items;
    let mut mirrors: BTreeMap<(String, String), Option<ClusterMirror>> = BTreeMap::new();
    for cm in ctx.mirrors_in(namespace) {
        if cm.spec.fetcher.pool.is_some() {
            let key = (cm.namespace().unwrap_or_default(), cm.name_any());
            mirrors.insert(key, Some(cm));
        }
    }
    for pod in &pool_pods {
        if let Some(m) = pod.labels().get(LABEL_MIRROR) {
            let key = (pod.namespace().unwrap_or_default(), m.clone());
            if let std::collections::btree_map::Entry::Vacant(e) = mirrors.entry(key) {
                let (ns, name) = e.key();
                // Only a mirror known to be gone lets its pods go: a failed read decides nothing.
                match ctx.mirror(ns, name).await {
                    Ok(cm) => {
                        e.insert(cm);
                    }
                    Err(error) => tracing::warn!(mirror = %name, %error, "reading a pool's mirror"),
                }
            }
        }
    }
    for ((ns, name), cm) in mirrors {
        // Only pods the mirror controls: labels alone can be made to collide, the UID cannot.
        let owner = cm.as_ref().and_then(|cm| cm.uid());
        let mine: Vec<&Pod> = pool_pods
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns.as_str()) && pod::in_pool(p, &name))
            .filter(|p| owner.is_none() || pod::controller_uid(p) == owner)
            .collect();
        let result = match &cm {
            // A destination address that reaches another cluster runs no fetcher, as with
            // per-topic pods.
            Some(cm) if let Some(message) = wrong_destination(ctx, cm).await => {
                tracing::warn!(mirror = %format!("{ns}/{name}"), "{message}: pool pods stop");
                delete_all(ctx, &ns, &mine).await
            }
            Some(cm) => manage(ctx, cm, &mine).await,
            // The mirror is gone: its pods go with it (owner references, when a garbage
            // collector runs; here too).
            None => delete_all(ctx, &ns, &mine).await,
        };
        if let Err(e) = result {
            tracing::warn!(mirror = %format!("{ns}/{name}"), error = %e, "fetcher pool");
        }
    }
    Ok(())
}

/// Why the mirror's destination address must not be used ([`identity_mismatch`]); `None` also
/// when it cannot be connected to (the topics say why).
async fn wrong_destination(ctx: &Context, cm: &ClusterMirror) -> Option<String> {
    let ns = cm.namespace().unwrap_or_default();
    let (destination, _) = ctx
        .clusters
        .get(&ctx.client, &ns, &cm.spec.destination, "destination")
        .await
        .ok()?;
    identity_mismatch(cm, &destination).await
}

async fn delete_all(ctx: &Context, ns: &str, pods: &[&Pod]) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        delete(&api, &pod.name_any(), &pod.uid().unwrap_or_default()).await?;
    }
    Ok(())
}

/// What the pool sees of one of its pods.
fn existing(pod: &Pod) -> Option<Existing> {
    let view = PodView::of(pod);
    Some(Existing {
        index: pod::index_of(pod)?,
        name: view.name,
        uid: view.uid,
        hash: view.hash,
        units: pod::units_of(pod),
        terminating: view.terminating,
        exited: view.exited.is_some(),
        operator: view.operator,
    })
}

/// The units per-topic fetcher pods of `cm` still run (pods from before the pool).
async fn held_elsewhere(ctx: &Context, cm: &ClusterMirror) -> Result<BTreeSet<LeaseUnit>> {
    let ns = cm.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!("{LABEL_MIRROR}={},!{LABEL_POOL}", cm.name_any());
    let pods = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(Error::ListPods)?
        .items;
    if pods.is_empty() {
        return Ok(BTreeSet::new());
    }
    let topics = ctx
        .mirror_topics(&ns, |t| t.spec.mirror == cm.name_any())
        .await?;
    let source_of: BTreeMap<String, String> = topics
        .iter()
        .map(|t| (label_value(&t.name_any()), t.spec.source_topic.clone()))
        .collect();
    let mut held = BTreeSet::new();
    for pod in &pods {
        let Some(topic) = pod
            .labels()
            .get(LABEL_MIRROR_TOPIC)
            .and_then(|t| source_of.get(t))
        else {
            continue;
        };
        let partitions = pod
            .annotations()
            .get(ANNOTATION_PARTITIONS)
            .cloned()
            .unwrap_or_default();
        held.extend(
            partitions
                .split(',')
                .filter_map(|p| p.parse().ok())
                .map(|p| LeaseUnit::new(topic, p)),
        );
    }
    Ok(held)
}

/// Brings the pool of `cm` to its plan.
async fn manage(ctx: &Context, cm: &ClusterMirror, pods: &[&Pod]) -> Result<()> {
    let key = key_of(cm);
    let ns = cm.namespace().unwrap_or_default();
    let demand = ctx.pool.of(&key);
    let now = k8s_openapi::jiff::Timestamp::now();
    let topics: BTreeMap<String, Duration> = ctx
        .mirror_topics(&ns, |t| t.spec.mirror == cm.name_any())
        .await?
        .iter()
        .map(|t| {
            let age = t
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |c| now.as_millisecond() - c.0.as_millisecond());
            (t.name_any(), Duration::from_millis(age.max(0) as u64))
        })
        .collect();
    let pool_size = cm.spec.fetcher.pool.as_ref().map(|p| p.pods.max(1) as u32);
    if pool_size.is_some() && !demand.settled(Instant::now(), &topics) {
        return Ok(());
    }
    let existing: Vec<Existing> = pods.iter().filter_map(|p| existing(p)).collect();
    let held = held_elsewhere(ctx, cm).await?;
    let operator_template = ctx.settings.operator_template();
    let plan_with = |admitted: &BTreeSet<String>| {
        plan::plan(&plan::Input {
            mirror: cm,
            pods: pool_size,
            demand: &demand,
            existing: &existing,
            held_elsewhere: &held,
            default_image: &ctx.settings.fetcher_image,
            operator_template: &operator_template,
            rollout_admitted: admitted,
        })
    };
    let admitted = ctx.rollout.admitted(&key);
    let mut plan = plan_with(&admitted);
    // The mirror's rollout takes in the pool's pods and may admit some of them.
    let report = crate::rollout::Report {
        candidates: plan.rollout.clone(),
        pods: pods
            .iter()
            .map(|p| {
                let v = PodView::of(p);
                let facts = crate::rollout::plan::PodFacts {
                    uid: v.uid,
                    ready: v.ready && v.exited.is_none(),
                    terminating: v.terminating,
                };
                (v.name, facts)
            })
            .collect(),
        units: Default::default(),
    };
    let step = ctx.rollout.step(
        &key,
        crate::rollout::POOL,
        report,
        ctx.settings.rollout,
        k8s_openapi::jiff::Timestamp::now().as_millisecond(),
    );
    ctx.publish_rollout(cm, &step.notes).await;
    if step.admitted != admitted {
        plan = plan_with(&step.admitted);
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for (name, uid) in &plan.delete {
        tracing::info!(mirror = %key, pod = %name, "replacing pool pod");
        delete(&api, name, uid).await?;
    }
    for pod in &plan.create {
        let name = pod.name_any();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        match api.create(&params, pod).await {
            Ok(_) => {
                let units = pod.annotations().get(ANNOTATION_UNITS).map_or(0, |u| {
                    pod::decode_units(u).values().map(BTreeSet::len).sum()
                });
                tracing::info!(mirror = %key, pod = %name, units, "created pool pod");
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(source) => return Err(Error::CreatePod { pod: name, source }),
        }
    }
    for note in &plan.waiting {
        tracing::info!(mirror = %key, "{note}");
    }
    ctx.pool.acted(&key, demand.changed_at);
    Ok(())
}

/// Deletes pod `name` — only the very pod `uid` (a UID precondition).
async fn delete(api: &Api<Pod>, name: &str, uid: &str) -> Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(source) => Err(Error::DeletePod {
            pod: name.to_string(),
            source,
        }),
    }
}
