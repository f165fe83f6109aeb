//! Topic config sync: the source's non-default configs, minus the exclude list, with the
//! configs kmirror owns kept so that the destination takes every source record, fitted to what
//! the destination takes (see [`crate::destination_topic`]), applied to the destination with
//! incremental alter configs. A config the destination refuses (named in its answer) is left
//! out, remembered and noted for the topic's status; the rest is applied.

use std::collections::BTreeMap;

use kmirror_state::kafka_admin::{AdminError, ConfigOp, alter_topic_configs};

use super::{Mirrored, PartResult};
use crate::config_fit;
use crate::error::Cause;
use crate::scope::MirrorScope;
use crate::topic_configs::{Change, diff};
use crate::{destination_topic, kafka};

/// The name an operation changes.
fn op_name(op: &ConfigOp) -> &str {
    match op {
        ConfigOp::Set(k, _) | ConfigOp::Delete(k) => k,
    }
}

/// Syncs the configs of every mirrored topic that is not failed over.
pub async fn sync(scope: &MirrorScope, topics: &[Mirrored]) -> PartResult {
    let (source, destination) = (&scope.source, &scope.destination);
    let exclude = scope.mirror.spec.sync.topic_configs.effective_exclude();
    let mut changed = Vec::new();
    let mut not_copied: BTreeMap<String, usize> = BTreeMap::new();
    for t in topics.iter().filter(|t| !t.stopped) {
        let src = &t.topic.spec.source_topic;
        let dst = t.topic.destination_topic();
        if kafka::describe_topic(source, src).await?.is_none()
            || kafka::describe_topic(destination, dst).await?.is_none()
        {
            continue;
        }
        let have = kafka::describe_topic_configs(destination, dst).await?;
        let mut want = destination_topic::wanted(scope, src, Some(&have)).await?;
        let mut ops: Vec<ConfigOp> = diff(&want.configs, &have.dynamic, &exclude)
            .into_iter()
            .map(|c| match c {
                Change::Set(k, v) => ConfigOp::Set(k, v),
                Change::Delete(k) => ConfigOp::Delete(k),
            })
            .collect();
        while !ops.is_empty() {
            match alter(scope, dst, &ops).await? {
                Ok(()) => break,
                Err(refusal) => {
                    let note = refused(scope, src, dst, &mut ops, &refusal)?;
                    config_fit::merge(&mut want.not_copied, vec![note]);
                }
            }
        }
        for n in &want.not_copied {
            *not_copied.entry(n.name.clone()).or_default() += 1;
        }
        scope.config_notes.record(&scope.key, src, want.not_copied);
        if ops.is_empty() {
            continue;
        }
        let names: Vec<&str> = ops.iter().map(op_name).collect();
        tracing::info!(topic = dst, configs = ?names, "synced topic configs");
        changed.push(format!("{dst} ({})", names.join(", ")));
    }
    let summary = if changed.is_empty() {
        format!(
            "{} topics in sync",
            topics.iter().filter(|t| !t.stopped).count()
        )
    } else {
        format!("updated {}", changed.join("; "))
    };
    Ok(summary + &not_copied_summary(&not_copied))
}

/// `; not copied: message.format.version (2 topics)`, or nothing.
fn not_copied_summary(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return String::new();
    }
    let each: Vec<String> = counts
        .iter()
        .map(|(name, n)| match n {
            1 => format!("{name} (1 topic)"),
            n => format!("{name} ({n} topics)"),
        })
        .collect();
    format!(
        "; not copied (see the MirrorTopics' status.configsNotCopied): {}",
        each.join(", ")
    )
}

#[cfg(test)]
#[test]
fn the_summary_counts_the_configs_not_copied() {
    let mut counts = BTreeMap::new();
    assert_eq!(not_copied_summary(&counts), "");
    counts.insert("message.format.version".to_string(), 2);
    counts.insert("segment.bytes".to_string(), 1);
    assert_eq!(
        not_copied_summary(&counts),
        "; not copied (see the MirrorTopics' status.configsNotCopied): message.format.version \
         (2 topics), segment.bytes (1 topic)"
    );
}

/// Applies `ops` to `topic`; `Ok(Err(refusal))`: the broker refused a config.
async fn alter(
    scope: &MirrorScope,
    topic: &str,
    ops: &[ConfigOp],
) -> Result<Result<(), AdminError>, Cause> {
    let destination = &scope.destination;
    let (d, t, o) = (destination.clone(), topic.to_string(), ops.to_vec());
    let answer = tokio::task::spawn_blocking(move || {
        alter_topic_configs(d.admin.inner(), &t, &o, kafka::TIMEOUT)
    })
    .await
    .map_err(|e| destination.error(e))?;
    match answer {
        Ok(()) => Ok(Ok(())),
        Err(e @ AdminError::Kafka { code, .. }) if destination_topic::config_refusal(code) => {
            Ok(Err(e))
        }
        Err(e) => Err(destination
            .error(format!("altering configs of {topic}: {e}"))
            .into()),
    }
}

/// Takes the config a refusal names out of `ops`, remembering it; a refusal that names none
/// fails the sync with the configs changed and the broker's message.
fn refused(
    scope: &MirrorScope,
    source_topic: &str,
    topic: &str,
    ops: &mut Vec<ConfigOp>,
    refusal: &AdminError,
) -> Result<kmirror_crds::v1alpha1::ConfigNotCopied, Cause> {
    let message = match refusal {
        AdminError::Kafka { message, .. } => message.as_str(),
        _ => "",
    };
    let names: Vec<String> = ops.iter().map(|o| op_name(o).to_string()).collect();
    let Some(name) = config_fit::refused_key(message, names.iter()) else {
        return Err(scope
            .destination
            .error(format!(
                "altering configs of {topic} ({}): {refusal}; leave out the one it refuses \
                 with spec.sync.topicConfigs.exclude",
                names.join(", ")
            ))
            .into());
    };
    let overrides = &scope.mirror.spec.sync.topic_configs.overrides;
    let note = config_fit::refused(&name, message, overrides);
    let at = ops.iter().position(|o| op_name(o) == name).unwrap_or(0);
    if let ConfigOp::Set(_, value) = ops.remove(at) {
        scope
            .config_notes
            .refuse(&scope.key, source_topic, &name, &value, note.clone());
    }
    tracing::warn!(topic, config = %name, "the destination refused a config: {message}");
    Ok(note)
}
