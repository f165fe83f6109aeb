//! The `MirrorTopic` controller: destination topic, partition lifecycle, fetcher pods, status.
//!
//! One reconcile: validate the spec, resolve the mirror ([`MirrorScope`]), then
//! [`observe`](observe::observe) (all reads) → [`plan`](plan::plan) (pure) →
//! [`execute`](execute::execute) (writes: transitions first, then what acts on them, then the
//! status).

pub mod claim;
pub mod cleanup;
pub mod events;
pub mod execute;
pub mod listed;
pub mod observe;
pub mod plan;
pub mod pod_view;
pub mod pool_view;
pub mod rollout_view;
pub mod status;

#[cfg(test)]
mod plan_tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::context::{Context, Note};
use crate::error::Result;
use crate::reconcile::Cleanup;
use crate::scope::{MirrorScope, Resolved};
use status::{Report, topic_status};

/// Finalizer that stops fetchers and cleans the state topic before a `MirrorTopic` goes away.
pub const FINALIZER: &str = "kmirror.io/mirror-topic";
pub use observe::ANNOTATION_RETRY;

/// How soon to look again while the state topic is still being read.
const LOADING_REQUEUE: Duration = Duration::from_secs(2);

/// How soon a topic refused for a taken source topic looks again.
const TAKEN_REQUEUE: Duration = Duration::from_secs(30);
/// How soon a topic whose mirror reaches another cluster than its own is looked at again.
const PIN_REQUEUE: Duration = Duration::from_secs(15);

/// Reconciles one `MirrorTopic` (entry point for the controller).
pub async fn reconcile(mt: Arc<MirrorTopic>, ctx: Arc<Context>) -> Result<Action> {
    crate::reconcile::with_finalizer(
        &ctx,
        "mirrortopic",
        FINALIZER,
        mt,
        |o| apply(o, ctx.clone()),
        |o| cleanup(o, ctx.clone()),
    )
    .await
}

async fn cleanup(mt: Arc<MirrorTopic>, ctx: Arc<Context>) -> Result<Cleanup> {
    cleanup::cleanup(&mt, &ctx).await
}

/// Writes a status that only says why nothing can be done now.
pub(crate) async fn report_problem(
    ctx: &Context,
    mt: &MirrorTopic,
    reason: &str,
    message: &str,
) -> Result<()> {
    let status = topic_status(
        mt,
        Report::problem(reason, message),
        &Time(Timestamp::now()),
    );
    let status = listed::bounded(status, mt.spec.state, ctx.settings.status_max_partitions);
    ctx.write_status(mt, status).await.map(|_| ())
}

async fn apply(mt: Arc<MirrorTopic>, ctx: Arc<Context>) -> Result<Action> {
    // Validate.
    let problems = kmirror_crds::validate::mirror_topic(&mt.spec);
    if !problems.is_empty() {
        let message = kmirror_crds::validate::describe(&problems);
        ctx.publish(
            mt.as_ref(),
            &Note::warning("InvalidSpec", "Validate", message.clone()),
        )
        .await;
        report_problem(&ctx, &mt, "InvalidSpec", &message).await?;
        return Ok(Action::await_change());
    }
    let ns = mt.namespace().unwrap_or_default();
    // One owner per source topic: a second MirrorTopic of it runs nothing.
    if let claim::Claim::TakenBy(owner) = claim::claim(&mt, &peers(&ctx, &mt).await?) {
        let message = claim::taken_message(&mt, &owner);
        return refuse(&ctx, &mt, "SourceTopicTaken", message, TAKEN_REQUEUE).await;
    }
    // Dereference: the mirror, both clusters, the state topic.
    let scope = match MirrorScope::resolve(&ctx, &ns, &mt.spec.mirror).await? {
        Resolved::Ready(scope) => scope,
        Resolved::Loading => return Ok(Action::requeue(LOADING_REQUEUE)),
        Resolved::Unavailable(u) => {
            if let Some(note) = &u.event {
                ctx.publish(mt.as_ref(), note).await;
            }
            report_problem(&ctx, &mt, u.reason, &u.message).await?;
            return Ok(Action::requeue(u.requeue));
        }
        // Another cluster than the pinned or recorded one: nothing runs for any topic of the
        // mirror.
        Resolved::Mismatch(message) => {
            return refuse(&ctx, &mt, "ClusterIdMismatch", message, PIN_REQUEUE).await;
        }
    };
    // Observe → plan → execute.
    let observation = observe::observe(&ctx, &scope, &mt).await?;
    let operator_template = ctx.settings.operator_template();
    let steady = plan::steady_requeue(
        ctx.settings.status_limits.progress_interval,
        ctx.topic_count(),
    );
    let plan_with = |admitted: &std::collections::BTreeSet<String>| {
        plan::plan(
            &observation,
            &plan::Spec {
                topic: &mt,
                mirror: &scope.mirror,
                fetcher_image: &ctx.settings.fetcher_image,
                secrets_version: &scope.secrets_version,
                steady_requeue: steady,
                operator_template: &operator_template,
                rollout_admitted: admitted,
            },
        )
    };
    let admitted = ctx.rollout.admitted(&scope.key);
    let mut plan = plan_with(&admitted);
    // The mirror's rollout takes in this topic's pods and partitions and may admit pods.
    let step = ctx.rollout.step(
        &scope.key,
        &mt.name_any(),
        plan.rollout.clone(),
        ctx.settings.rollout,
        Timestamp::now().as_millisecond(),
    );
    ctx.publish_rollout(&scope.mirror, &step.notes).await;
    if step.pool_admitted {
        ctx.pool.changed.notify_one();
    }
    if step.admitted != admitted {
        plan = plan_with(&step.admitted);
    }
    let mut requeue = execute::execute(&ctx, &scope, &mt, plan).await?;
    // A pod of this topic is being replaced: look often until it is caught up.
    if ctx.rollout.busy(&scope.key, &mt.name_any()) {
        requeue = requeue.min(crate::rollout::ROLLOUT_REQUEUE);
    }
    Ok(Action::requeue(requeue))
}

/// The namespace's other `MirrorTopic`s of `mt`'s mirror and source topic: the only ones its
/// claim compares with.
pub(crate) async fn peers(ctx: &Context, mt: &MirrorTopic) -> Result<Vec<MirrorTopic>> {
    let ns = mt.namespace().unwrap_or_default();
    ctx.mirror_topics(&ns, |t| {
        t.spec.mirror == mt.spec.mirror && t.spec.source_topic == mt.spec.source_topic
    })
    .await
}

/// A topic whose source topic another `MirrorTopic` owns: its fetchers stop (if it had any), and
/// its status and a Warning Event name the owner. Looked at again every 30 s (the owner may go).
/// Runs nothing for `mt`: its fetchers are stopped, the reason goes into an Event and the
/// status, and the topic is looked at again after `requeue`.
async fn refuse(
    ctx: &Context,
    mt: &MirrorTopic,
    reason: &str,
    message: String,
    requeue: Duration,
) -> Result<Action> {
    ctx.publish(mt, &Note::warning(reason, "Validate", message.clone()))
        .await;
    cleanup::stop_fetchers(ctx, mt).await?;
    report_problem(ctx, mt, reason, &message).await?;
    Ok(Action::requeue(requeue))
}

/// The `ClusterMirror` a `MirrorTopic` belongs to, as an object reference for watches.
pub fn mirror_of(mt: &MirrorTopic) -> Option<ObjectRef<ClusterMirror>> {
    Some(ObjectRef::new(&mt.spec.mirror).within(&mt.namespace()?))
}
