//! What both controllers do around their reconcile: metrics and the finalizer dispatch.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as FinalizerError, Event, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::ControllerLabels;

/// Runs `apply` (or, once the object is being deleted, `cleanup`) under `finalizer_name`,
/// counting and timing the reconcile for `controller`.
pub async fn with_finalizer<K, A, AF, C, CF>(
    ctx: &Arc<Context>,
    controller: &str,
    finalizer_name: &str,
    object: Arc<K>,
    apply: A,
    cleanup: C,
) -> Result<Action>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    A: FnOnce(Arc<K>) -> AF,
    AF: Future<Output = Result<Action>>,
    C: FnOnce(Arc<K>) -> CF,
    CF: Future<Output = Result<Action>>,
{
    let started = std::time::Instant::now();
    let labels = ControllerLabels {
        controller: controller.into(),
    };
    ctx.metrics.reconciles.get_or_create(&labels).inc();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
    let result = finalizer(&api, finalizer_name, object, |event| async {
        match event {
            Event::Apply(o) => apply(o).await,
            Event::Cleanup(o) => cleanup(o).await,
        }
    })
    .await
    .map_err(|e| match e {
        FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e) => e,
        other => Error::Finalizer(other.to_string()),
    });
    ctx.metrics
        .duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    result
}
