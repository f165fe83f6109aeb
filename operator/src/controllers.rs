//! Wiring of the two controllers: what each watches, how errors requeue, graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

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

/// Whether a Secret (its metadata) is referenced by a mirror's connections.
fn references(cm: &ClusterMirror, secret: &PartialObjectMeta<Secret>) -> bool {
    cm.namespace() == secret.namespace()
        && [&cm.spec.source, &cm.spec.destination].iter().any(|c| {
            c.secret_refs()
                .iter()
                .any(|(_, r)| Some(r.name.as_str()) == secret.metadata.name.as_deref())
        })
}

/// Reconciles one controller runs at once: with hundreds of topics, a burst (a restart, a
/// ClusterMirror change) otherwise opens as many API requests and Kafka admin calls together.
const RECONCILE_CONCURRENCY: u16 = 16;

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
        .watches(
            // Only Secrets that opt in, and only their metadata (an `Api` of
            // `PartialObjectMeta` asks for metadata only): a change notification is all this
            // watch is for; values are read when a reconcile connects.
            api::<PartialObjectMeta<Secret>>(&client, ns),
            watcher::Config::default()
                .labels(&format!("{}=true", crate::connection::CREDENTIALS_LABEL)),
            move |secret: PartialObjectMeta<Secret>| {
                mirror_store
                    .state()
                    .into_iter()
                    .filter(|cm| references(cm, &secret))
                    .map(|cm| ObjectRef::from(cm.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            cluster_mirror::reconcile,
            error_policy::<ClusterMirror>("clustermirror"),
            ctx.clone(),
        )
        .for_each(|_| async {});

    let topics = Controller::new(api::<MirrorTopic>(&client, ns), watcher::Config::default())
        .with_config(controller::Config::default().concurrency(RECONCILE_CONCURRENCY));
    let topic_store = topics.store();
    ctx.share_topic_store(topic_store.clone());
    let topics = topics
        .owns(
            api::<Pod>(&client, ns),
            watcher::Config::default().labels("app.kubernetes.io/name=kmirror-fetcher"),
        )
        .watches(
            api::<ClusterMirror>(&client, ns),
            watcher::Config::default(),
            move |cm| {
                topic_store
                    .state()
                    .into_iter()
                    .filter(|t| t.spec.mirror == cm.name_any() && t.namespace() == cm.namespace())
                    .map(|t| ObjectRef::from(t.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stopped(stop_rx))
        .run(
            mirror_topic::reconcile,
            error_policy::<MirrorTopic>("mirrortopic"),
            ctx.clone(),
        )
        .for_each(|_| async {});

    futures::join!(mirrors, topics);
}
