//! Commands that change the selected `MirrorTopic`s of a mirror: `failover`, `pause`,
//! `resume`, `retry`, `resolve`; and following their partitions until they reach a state.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use kmirror_crds::v1alpha1::{
    DesiredState, DivergencePolicy, FailoverMode, MirrorTopic, PartitionState,
};
use serde_json::json;
use tokio::time::Instant;

use crate::cli::{ChangeArgs, DryRun, FailoverArgs, ResolveArgs, TopicArgs};
use crate::client::Kube;
use crate::error::{Error, Result};
use crate::gitops;
use crate::render::{self, Progress};
use crate::select::{object_name, select};
use crate::util::{format_duration, rfc3339};

use super::{line, wanted};

/// Annotation whose change makes the operator retry partitions that failed for good.
pub const ANNOTATION_RETRY: &str = "kmirror.io/retry";

/// How often a wait looks at the topics again.
const POLL: Duration = Duration::from_secs(1);

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
    if !args.wait {
        return Ok(());
    }
    let done = follow(
        kube,
        &patched,
        PartitionState::Stopped,
        args.timeout,
        None,
        &format!("the failover of mirror {:?}", args.mirror),
    )
    .await?;
    let refs: Vec<&MirrorTopic> = done.iter().collect();
    let partitions: usize = done
        .iter()
        .map(|t| {
            t.status
                .as_ref()
                .map_or(0, |s| s.counts().total.max(0) as usize)
        })
        .sum();
    line(&format!(
        "failover complete: {partitions} partitions STOPPED; consumers resume on the destination \
         after these last mirrored offsets:"
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
    patch_each(
        kube,
        &topics,
        &patch,
        &format!("state {state}"),
        &["spec", "state"],
        &args.change,
    )
    .await?;
    Ok(())
}

/// `retry`: a new value in the retry annotation.
pub async fn retry(kube: &Kube, args: &TopicArgs) -> Result<()> {
    let topics = selected(kube, &args.mirror, wanted(&args.selection)).await?;
    let token = rfc3339(SystemTime::now());
    let patch = json!({"metadata": {"annotations": {ANNOTATION_RETRY: token}}});
    patch_each(
        kube,
        &topics,
        &patch,
        &format!("{ANNOTATION_RETRY}={token}"),
        &["metadata", "annotations", ANNOTATION_RETRY],
        &args.change,
    )
    .await?;
    Ok(())
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
    patch_each(
        kube,
        &chosen,
        &patch,
        &format!("divergencePolicy {policy:?}"),
        &["spec", "divergencePolicy"],
        &args.change,
    )
    .await?;
    Ok(())
}

/// Follows `topics` until every partition of each is in `target`, printing a line whenever a
/// topic's progress changes and each new failure. Returns the final topics.
///
/// `divergence_of`: the reverse mirror's name when following a failback; a partition with
/// divergence on a topic without `divergencePolicy` then ends the wait with an error that says
/// how to resolve it.
pub async fn follow(
    kube: &Kube,
    topics: &[MirrorTopic],
    target: PartitionState,
    timeout: Duration,
    divergence_of: Option<&str>,
    what: &str,
) -> Result<Vec<MirrorTopic>> {
    let ns = kube.namespace.as_str();
    let generations: BTreeMap<String, Option<i64>> = topics
        .iter()
        .map(|t| (object_name(t).to_string(), t.metadata.generation))
        .collect();
    let deadline = Instant::now() + timeout;
    let mut last_line: BTreeMap<String, String> = BTreeMap::new();
    let mut failures_seen: BTreeSet<String> = BTreeSet::new();
    loop {
        // One list per round, however many topics are followed.
        let mut listed: BTreeMap<String, MirrorTopic> = kube
            .topics(Some(ns))
            .await?
            .into_iter()
            .map(|t| (object_name(&t).to_string(), t))
            .collect();
        let mut current = Vec::new();
        for (name, generation) in &generations {
            let t = listed.remove(name).ok_or_else(|| {
                Error::failed(format!(
                    "MirrorTopic {name:?} was deleted while waiting for {what}"
                ))
            })?;
            current.push((t, *generation));
        }
        let progress: Vec<Progress> = current
            .iter()
            .map(|(t, g)| render::progress(t, target, *g))
            .collect();
        for ((t, _), p) in current.iter().zip(&progress) {
            let text = render::progress_line(p, target);
            if last_line.get(object_name(t)) != Some(&text) {
                line(&text);
                last_line.insert(object_name(t).to_string(), text);
            }
            for f in render::failed_lines(p) {
                if failures_seen.insert(f.clone()) {
                    line(&format!("  {f}"));
                }
            }
        }
        if let Some(reverse) = divergence_of {
            divergence_check(&current, reverse, ns)?;
        }
        if progress.iter().all(Progress::complete) {
            return Ok(current.into_iter().map(|(t, _)| t).collect());
        }
        let refused: Vec<String> = progress.iter().filter_map(Progress::refused).collect();
        if !refused.is_empty() {
            return Err(Error::failed(format!(
                "the operator refuses {what}: {}",
                refused.join("; ")
            )));
        }
        let now = Instant::now();
        if now >= deadline {
            let mut summary: Vec<String> = progress
                .iter()
                .map(|p| render::progress_line(p, target))
                .collect();
            summary.extend(progress.iter().flat_map(render::failed_lines));
            return Err(Error::failed(format!(
                "timed out after {} waiting for {what}: {}",
                format_duration(timeout),
                summary.join("; ")
            )));
        }
        tokio::time::sleep(POLL.min(deadline - now)).await;
    }
}

/// Fails when a topic without a divergence policy has unresolved divergence, after printing
/// where the divergent records are.
fn divergence_check(current: &[(MirrorTopic, Option<i64>)], reverse: &str, ns: &str) -> Result<()> {
    let mut waiting = Vec::new();
    for (t, _) in current {
        if t.spec.divergence_policy.is_some() {
            continue;
        }
        let found = render::unresolved_divergences(t);
        for (partition, d) in &found {
            line(&format!(
                "{}[{partition}]: {} were written to the old source after the last mirrored \
                 offset; copies are in quarantine topic {}",
                t.spec.source_topic,
                render::offset_range(d.from_offset, d.to_offset),
                d.quarantine_topic
            ));
        }
        if !found.is_empty() {
            waiting.push(t.spec.source_topic.clone());
        }
    }
    if waiting.is_empty() {
        return Ok(());
    }
    let topics: Vec<String> = waiting.iter().map(|t| format!("--topic {t}")).collect();
    Err(Error::failed(format!(
        "divergence found on failback of {}: choose what happens to the divergent records with \
         `kubectl mirror resolve {reverse} -n {ns} {} --policy Recreate|KeepAndTranslate`",
        waiting.join(", "),
        topics.join(" ")
    )))
}
