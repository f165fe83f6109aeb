//! Wiring of the two controllers: what each watches, how errors requeue, graceful shutdown.
//!
//! A `MirrorTopic` is reconciled when it changes other than in its status (the operator's own
//! status writes would otherwise trigger a reconcile each), when one of its pods changes, when its
//! `ClusterMirror` changes other than in its status (that status follows every topic's, and
//! would otherwise trigger every topic of the mirror on every write), and when its reconcile
//! asks to look again, and when a pool pod that runs it changes. A `ClusterMirror` follows every
//! change of its topics, statuses included. The fetcher pools run beside them ([`crate::pool_pods`]).

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};

use crate::context::Context;
use crate::error::Error;
use crate::error_backoff::ErrorBackoff;
use crate::{cluster_mirror, metrics, mirror_topic};

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn error_policy<K: ResourceExt>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &Error, Arc<Context>) -> Action {
    move |object, error, ctx| {
        let transient = matches!(error, Error::Finalizer(_));
        if !transient {
            tracing::warn!(controller, error = %error, "reconcile failed");
        }
        ctx.metrics
            .errors
            .get_or_create(&metrics::ErrorLabels {
                controller: controller.into(),
                error: error.label().into(),
            })
            .inc();
        // Per object, doubling from 2 s to 5 minutes while its reconcile keeps failing (the
        // failures are counted where the reconcile ends, with an Event each).
        let key = ErrorBackoff::key(
            controller,
            &object.namespace().unwrap_or_default(),
            &object.name_any(),
        );
        Action::requeue(if transient {
            Duration::from_secs(2)
        } else {
            ctx.error_backoff.delay_of(&key)
        })
    }
}

/// Whether a Secret is referenced by a mirror's connections.
fn references(cm: &ClusterMirror, secret: &Secret) -> bool {
    cm.namespace() == secret.namespace()
        && [&cm.spec.source, &cm.spec.destination].iter().any(|c| {
            c.secret_refs()
                .iter()
                .any(|(_, r)| Some(r.name.as_str()) == secret.metadata.name.as_deref())
        })
}

/// What of an object, when it changes, calls for a reconcile: anything but its status — the
/// generation (spec; also bumped when deletion starts), labels, annotations (the retry token),
/// finalizers and the deletion mark. A watch predicate: equal values are filtered out.
pub fn beyond_status<K: Resource>(object: &K) -> Option<u64> {
    let meta = object.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        meta.generation,
        &meta.labels,
        &meta.annotations,
        &meta.finalizers,
        meta.deletion_timestamp.is_some(),
    )
        .hash(&mut h);
    Some(h.finish())
}

/// Reconciles one controller runs at once: with hundreds of topics, a burst (a restart, a
/// ClusterMirror change) otherwise opens as many API requests and Kafka admin calls together.
const RECONCILE_CONCURRENCY: u16 = 32;

/// Runs both controllers until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let client = ctx.client.clone();
    let ns = namespace.as_deref();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // Only Secrets that opt in: their changes trigger the mirrors that use them, and
    // reconciles read their values from this cache rather than from the API server.
    let (secret_store, secret_writer) = reflector::store();
    let secret_changes = watcher(
        api::<Secret>(&client, ns),
        watcher::Config::default()
            .labels(&format!("{}=true", crate::connection::CREDENTIALS_LABEL)),
    )
    .default_backoff()
    .reflect(secret_writer)
    .touched_objects();
    ctx.clusters.share_secret_store(secret_store);
    let mirrors = Controller::new(
        api::<ClusterMirror>(&client, ns),
        watcher::Config::default(),
    )
    .with_config(controller::Config::default().concurrency(RECONCILE_CONCURRENCY));
    let mirror_store = mirrors.store();
    let mirrors = mirrors
        .watches(
            api::<MirrorTopic>(&client, ns),
            watcher::Config::default(),
            |mt| mirror_topic::mirror_of(&mt),
        )
        .watches_stream(secret_changes, move |secret: Secret| {
            mirror_store
                .state()
                .into_iter()
                .filter(|cm| references(cm, &secret))
                .map(|cm| ObjectRef::from(cm.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            cluster_mirror::reconcile,
            error_policy::<ClusterMirror>("clustermirror"),
            ctx.clone(),
        )
        .for_each(|_| async {});

    // The cache holds every change; reconciles are triggered by those beyond the status.
    let (topic_store, topic_writer) = reflector::store();
    let topic_changes = watcher(api::<MirrorTopic>(&client, ns), watcher::Config::default())
        .default_backoff()
        .reflect(topic_writer)
        .applied_objects()
        .predicate_filter(beyond_status, Default::default());
    ctx.share_topic_store(topic_store.clone());
    // The mirrors as this watch sees them serve reconciles too: a topic reconciled for a
    // change of its mirror reads that very change.
    let (mirror_store, mirror_writer) = reflector::store();
    let mirror_changes = watcher(
        api::<ClusterMirror>(&client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(mirror_writer)
    .applied_objects()
    .predicate_filter(beyond_status, Default::default());
    ctx.share_mirror_store(mirror_store);
    let pool_topics = topic_store.clone();
    let ended = ended_topics(&ctx, topic_store.clone());
    let topics = Controller::for_stream(topic_changes, topic_store.clone())
        .with_config(controller::Config::default().concurrency(RECONCILE_CONCURRENCY))
        .owns(
            api::<Pod>(&client, ns),
            watcher::Config::default().labels("app.kubernetes.io/name=kmirror-fetcher"),
        )
        // A pool pod that comes, goes or ends concerns every topic it runs.
        .watches(
            api::<Pod>(&client, ns),
            watcher::Config::default().labels(crate::pool::LABEL_POOL),
            move |pod: Pod| {
                let units = crate::pool::pod::units_of(&pod);
                let mirror = pod.labels().get(crate::pods::LABEL_MIRROR).cloned();
                pool_topics
                    .state()
                    .into_iter()
                    .filter(|t| {
                        t.namespace() == pod.namespace()
                            && Some(&t.spec.mirror) == mirror.as_ref()
                            && units.contains_key(&t.spec.source_topic)
                    })
                    .map(|t| ObjectRef::from(t.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .reconcile_on(ended)
        .reconcile_on(rollout_wakes(&ctx))
        .watches_stream(mirror_changes, move |cm| {
            topic_store
                .state()
                .into_iter()
                .filter(|t| t.spec.mirror == cm.name_any() && t.namespace() == cm.namespace())
                .map(|t| ObjectRef::from(t.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            mirror_topic::reconcile,
            error_policy::<MirrorTopic>("mirrortopic"),
            ctx.clone(),
        )
        .for_each(|_| async {});

    let pools = crate::pool_pods::run(ctx.clone(), namespace.clone(), stop_rx);

    futures::join!(mirrors, topics, pools);
}

/// The `MirrorTopic`s with a pod the mirror's rollout admitted during another topic's reconcile.
fn rollout_wakes(
    ctx: &Context,
) -> impl futures::Stream<Item = ObjectRef<MirrorTopic>> + Send + 'static {
    let rx = ctx.rollout.take_wakes();
    futures::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        let (ns, name) = rx.recv().await?;
        Some((ObjectRef::new(&name).within(&ns), Some(rx)))
    })
}

/// The `MirrorTopic`s whose fetcher recorded a final position, as the state caches read them:
/// a stop inside a running pool process changes no pod, and its topic is reconciled at once
/// rather than at its next steady look.
fn ended_topics(
    ctx: &Context,
    topics: reflector::Store<MirrorTopic>,
) -> impl futures::Stream<Item = ObjectRef<MirrorTopic>> + Send + 'static {
    let rx = ctx.states.take_ended();
    futures::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        let ended = rx.recv().await?;
        Some((ended, Some(rx)))
    })
    .flat_map(move |(mirror, topic)| {
        let refs: Vec<ObjectRef<MirrorTopic>> = topics
            .state()
            .into_iter()
            .filter(|t| t.spec.source_topic == topic && t.mirror_key() == mirror)
            .map(|t| ObjectRef::from(t.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
}
