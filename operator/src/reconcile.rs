//! What both controllers do around their reconcile: metrics and the finalizer dispatch. A
//! cleanup that waits for something (pods to stop, topics to go) is a requeue, not an error.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as FinalizerError, Event, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::{Context, Note};
use crate::error::{Error, Result};
use crate::error_backoff::{self, ErrorBackoff};
use crate::metrics::ControllerLabels;

/// How long a waiting cleanup waits before it looks again.
pub const CLEANUP_POLL: Duration = Duration::from_secs(2);

/// What a cleanup achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// Done: the finalizer may go.
    Done,
    /// Waiting for something to go away first: what.
    Waiting(String),
}

/// The finalizer machinery needs an error to keep the finalizer; a waiting cleanup is one only
/// inside this module.
#[derive(Debug, thiserror::Error)]
enum Step {
    #[error(transparent)]
    Failed(Error),
    #[error("waiting for {0}")]
    Waiting(String),
}

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
    CF: Future<Output = Result<Cleanup>>,
{
    let started = std::time::Instant::now();
    let labels = ControllerLabels {
        controller: controller.into(),
    };
    ctx.metrics.reconciles.get_or_create(&labels).inc();
    let name = object.name_any();
    let key = ErrorBackoff::key(controller, &object.namespace().unwrap_or_default(), &name);
    let subject = object.clone();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
    let result = finalizer(&api, finalizer_name, object, |event| async {
        match event {
            Event::Apply(o) => apply(o).await.map_err(Step::Failed),
            Event::Cleanup(o) => match cleanup(o).await {
                Ok(Cleanup::Done) => Ok(Action::await_change()),
                Ok(Cleanup::Waiting(what)) => Err(Step::Waiting(what)),
                Err(e) => Err(Step::Failed(e)),
            },
        }
    })
    .await;
    let result = match result {
        Ok(action) => Ok(action),
        Err(FinalizerError::ApplyFailed(Step::Failed(e)))
        | Err(FinalizerError::CleanupFailed(Step::Failed(e))) => Err(e),
        Err(FinalizerError::ApplyFailed(Step::Waiting(what)))
        | Err(FinalizerError::CleanupFailed(Step::Waiting(what))) => {
            tracing::debug!(%name, "cleanup waiting for {what}");
            Ok(Action::requeue(CLEANUP_POLL))
        }
        Err(other) => Err(Error::Finalizer(other.to_string())),
    };
    match &result {
        Ok(_) => ctx.error_backoff.succeeded(&key),
        // The finalizer machinery's own hiccups (a conflict adding it) retry at once.
        Err(Error::Finalizer(_)) => {}
        Err(e) => {
            let failures = ctx.error_backoff.failed(&key);
            let delay = error_backoff::delay(failures);
            ctx.publish(
                subject.as_ref(),
                &Note::warning(
                    "ReconcileFailed",
                    "Reconcile",
                    format!(
                        "{e} (failure {failures} in a row; trying again in {}s)",
                        delay.as_secs()
                    ),
                ),
            )
            .await;
        }
    }
    ctx.metrics
        .duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    result
}
