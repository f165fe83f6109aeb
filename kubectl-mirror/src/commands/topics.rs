//! Commands that change the selected `MirrorTopic`s of a mirror: `failover`, `pause`,
//! `resume`, `retry`, `resolve`.

use std::time::SystemTime;

use kmirror_crds::v1alpha1::{DesiredState, DivergencePolicy, FailoverMode, MirrorTopic};
use serde_json::json;

use crate::cli::{ChangeArgs, DryRun, FailoverArgs, ResolveArgs, TopicArgs, WaitArgs};
use crate::client::Kube;
use crate::error::Result;
use crate::gitops;
use crate::render;
use crate::select::{object_name, select};
use crate::util::rfc3339;

use super::wait::{self, Job};
use super::{line, wanted};

/// Annotation whose change makes the operator retry partitions that failed for good.
pub const ANNOTATION_RETRY: &str = "kmirror.io/retry";

/// What `pause` and `resume` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `spec.state: Paused`.
    Pause,
    /// `spec.state: Mirroring`.
    Resume,
}

/// Reads the mirror (so that an unknown one is reported as such) and picks its topics.
async fn selected(kube: &Kube, mirror: &str, wanted: &[String]) -> Result<Vec<MirrorTopic>> {
    let ns = kube.namespace.as_str();
    kube.mirror(ns, mirror).await?;
    let topics = kube.topics_of(ns, mirror).await?;
    Ok(select(&topics, mirror, ns, wanted)?
        .into_iter()
        .cloned()
        .collect())
}

/// Applies one merge patch to each topic and reports it; returns the patched topics.
///
/// Topics a GitOps tool or Helm manages get a warning naming the tool (`field` is what the
/// patch changes, for the warning). `--print-patch` prints the change as YAML to commit and
/// changes nothing; `--dry-run` changes nothing (server: the API server checks the patch).
/// Returns an empty list when nothing was applied.
async fn patch_each(
    kube: &Kube,
    topics: &[MirrorTopic],
    patch: &serde_json::Value,
    what: &str,
    field: &[&str],
    change: &ChangeArgs,
) -> Result<Vec<MirrorTopic>> {
    let ns = kube.namespace.as_str();
    if change.print_patch {
        for (i, t) in topics.iter().enumerate() {
            if let Some(w) = gitops::warning(&describe_object(t), &t.metadata, field) {
                eprintln!("warning: {w}");
            }
            if i > 0 {
                super::emit("---\n");
            }
            super::emit(&gitops::patch_document(
                "kmirror.io/v1alpha1",
                "MirrorTopic",
                &t.metadata,
                patch,
            ));
        }
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for t in topics {
        if let Some(w) = gitops::warning(&describe_object(t), &t.metadata, field) {
            eprintln!("warning: {w}");
        }
        let name = object_name(t);
        let suffix = match change.dry_run {
            None => "",
            Some(DryRun::Server) => " (server dry run)",
            Some(DryRun::Client) => " (dry run)",
        };
        if change.dry_run != Some(DryRun::Client) {
            let patched = kube
                .patch_topic(ns, name, patch, change.dry_run.is_some())
                .await?;
            out.push(patched);
        }
        line(&format!(
            "mirrortopic.kmirror.io/{name} patched{suffix} ({}: {what})",
            t.spec.source_topic
        ));
    }
    if change.dry_run.is_some() {
        out.clear();
    }
    Ok(out)
}

/// `MirrorTopic namespace/name`, for messages.
fn describe_object(t: &MirrorTopic) -> String {
    format!(
        "MirrorTopic {}/{}",
        t.metadata.namespace.as_deref().unwrap_or_default(),
        object_name(t)
    )
}

/// `failover`: `spec.state: Stopped` with the failover mode, then optionally follow.
pub async fn failover(kube: &Kube, args: &FailoverArgs) -> Result<()> {
    let topics = selected(kube, &args.mirror, wanted(&args.selection)).await?;
    // A mode configured in the spec stays unless a flag asks for one.
    let mode = match (args.immediate, args.graceful) {
        (true, _) => Some(FailoverMode::Immediate),
        (_, true) => Some(FailoverMode::Graceful),
        _ => None,
    };
    let (patch, what) = match mode {
        Some(mode) => (
            json!({"spec": {"state": "Stopped", "failover": {"mode": mode}}}),
            format!("state Stopped, failover mode {mode:?}"),
        ),
        None => (
            json!({"spec": {"state": "Stopped"}}),
            "state Stopped, failover mode as configured".to_string(),
        ),
    };
    let patched = patch_each(
        kube,
        &topics,
        &patch,
        &what,
        &["spec", "state"],
        &args.change,
    )
    .await?;
    if !args.wait.wait || patched.is_empty() {
        return Ok(());
    }
    let job = Job {
        what: format!("the failover of mirror {:?}", args.mirror),
        mirror: &args.mirror,
        divergence_of: None,
    };
    let done = wait::follow(kube, &patched, args.wait.timeout, &job).await?;
    let refs: Vec<&MirrorTopic> = done.iter().collect();
    line(&format!(
        "failover complete: {}; consumers resume on the destination after these last \
         mirrored offsets:",
        wait::summary(&done)
    ));
    super::emit(&render::last_mirrored_table(&refs));
    for t in &done {
        let omitted = t.status.as_ref().map_or(0, |s| s.partitions_omitted);
        if omitted > 0 {
            line(&format!(
                "{}: {omitted} more partitions not shown; kubectl mirror status {} \
                 --partitions all shows their last mirrored offsets",
                t.spec.source_topic, args.mirror
            ));
        }
    }
    Ok(())
}

/// `pause` / `resume`.
pub async fn set_state(kube: &Kube, args: &TopicArgs, target: Target) -> Result<()> {
    let topics = selected(kube, &args.mirror, wanted(&args.selection)).await?;
    let state = match target {
        Target::Pause => "Paused",
        Target::Resume => "Mirroring",
    };
    if target == Target::Resume {
        for t in topics
            .iter()
            .filter(|t| t.spec.state == DesiredState::Stopped)
        {
            eprintln!(
                "note: {} was failed over (Stopped); it now mirrors from the source again",
                t.spec.source_topic
            );
        }
    }
    // A resume of a failed-over topic is deliberate: the API server lets Stopped go back to
    // Mirroring only with a new resume token.
    let patch = match target {
        Target::Resume => {
            json!({"spec": {"state": state, "failover": {"resumeToken": rfc3339(SystemTime::now())}}})
        }
        Target::Pause => json!({"spec": {"state": state}}),
    };
    let patched = patch_each(
        kube,
        &topics,
        &patch,
        &format!("state {state}"),
        &["spec", "state"],
        &args.change,
    )
    .await?;
    let verb = match target {
        Target::Pause => "pause",
        Target::Resume => "resume",
    };
    wait_for(kube, &patched, &args.mirror, verb, &args.wait).await
}

/// `--wait` of `pause`, `resume`, `retry` and `resolve`: follows the changed topics until each
/// partition is in the state its topic's `spec.state` asks for.
async fn wait_for(
    kube: &Kube,
    patched: &[MirrorTopic],
    mirror: &str,
    verb: &str,
    args: &WaitArgs,
) -> Result<()> {
    if !args.wait || patched.is_empty() {
        return Ok(());
    }
    let job = Job {
        what: format!("the {verb} of mirror {mirror:?}"),
        mirror,
        divergence_of: None,
    };
    let done = wait::follow(kube, patched, args.timeout, &job).await?;
    line(&format!("{verb} complete: {}", wait::summary(&done)));
    Ok(())
}

/// `retry`: a new value in the retry annotation.
pub async fn retry(kube: &Kube, args: &TopicArgs) -> Result<()> {
    let topics = selected(kube, &args.mirror, wanted(&args.selection)).await?;
    let token = rfc3339(SystemTime::now());
    let patch = json!({"metadata": {"annotations": {ANNOTATION_RETRY: token}}});
    let patched = patch_each(
        kube,
        &topics,
        &patch,
        &format!("{ANNOTATION_RETRY}={token}"),
        &["metadata", "annotations", ANNOTATION_RETRY],
        &args.change,
    )
    .await?;
    wait_for(kube, &patched, &args.mirror, "retry", &args.wait).await
}

/// `resolve`: `spec.divergencePolicy` on topics of a reverse mirror.
pub async fn resolve(kube: &Kube, args: &ResolveArgs) -> Result<()> {
    let ns = kube.namespace.as_str();
    let m = kube.mirror(ns, &args.mirror).await?;
    if m.spec.reverse_of.is_none() {
        eprintln!(
            "note: ClusterMirror {:?} has no spec.reverseOf; a divergence policy only matters \
             on a failback mirror",
            args.mirror
        );
    }
    let topics = kube.topics_of(ns, &args.mirror).await?;
    let chosen: Vec<MirrorTopic> = select(&topics, &args.mirror, ns, wanted(&args.selection))?
        .into_iter()
        .cloned()
        .collect();
    let policy = DivergencePolicy::from(args.policy);
    let patch = json!({"spec": {"divergencePolicy": policy}});
    let patched = patch_each(
        kube,
        &chosen,
        &patch,
        &format!("divergencePolicy {policy:?}"),
        &["spec", "divergencePolicy"],
        &args.change,
    )
    .await?;
    wait_for(kube, &patched, &args.mirror, "resolve", &args.wait).await
}
