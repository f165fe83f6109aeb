//! Topic config sync: the source's non-default configs, minus the exclude list, with the
//! configs kmirror owns kept so that the destination takes every source record (see
//! [`crate::destination_topic`]), applied to the destination with incremental alter configs.

use kmirror_state::kafka_admin::{ConfigOp, alter_topic_configs};

use super::{Mirrored, PartResult};
use crate::scope::MirrorScope;
use crate::topic_configs::{Change, diff};
use crate::{destination_topic, kafka};

/// Syncs the configs of every mirrored topic that is not failed over.
pub async fn sync(scope: &MirrorScope, topics: &[Mirrored]) -> PartResult {
    let (source, destination) = (&scope.source, &scope.destination);
    let exclude = &scope.mirror.spec.sync.topic_configs.exclude;
    let mut changed = Vec::new();
    for t in topics.iter().filter(|t| !t.stopped) {
        let src = &t.topic.spec.source_topic;
        let dst = t.topic.destination_topic();
        if kafka::describe_topic(source, src).await?.is_none()
            || kafka::describe_topic(destination, dst).await?.is_none()
        {
            continue;
        }
        let have = kafka::describe_topic_configs(destination, dst).await?;
        let want = destination_topic::wanted(scope, src, Some(&have)).await?;
        let ops: Vec<ConfigOp> = diff(&want, &have.dynamic, exclude)
            .into_iter()
            .map(|c| match c {
                Change::Set(k, v) => ConfigOp::Set(k, v),
                Change::Delete(k) => ConfigOp::Delete(k),
            })
            .collect();
        if ops.is_empty() {
            continue;
        }
        let names: Vec<String> = ops
            .iter()
            .map(|o| match o {
                ConfigOp::Set(k, _) | ConfigOp::Delete(k) => k.clone(),
            })
            .collect();
        let (d, topic) = (destination.clone(), dst.to_string());
        tokio::task::spawn_blocking(move || {
            alter_topic_configs(d.admin.inner(), &topic, &ops, kafka::TIMEOUT)
        })
        .await
        .map_err(|e| destination.error(e))?
        .map_err(|e| destination.error(format!("altering configs of {dst}: {e}")))?;
        tracing::info!(topic = dst, configs = ?names, "synced topic configs");
        changed.push(format!("{dst} ({})", names.join(", ")));
    }
    Ok(if changed.is_empty() {
        format!(
            "{} topics in sync",
            topics.iter().filter(|t| !t.stopped).count()
        )
    } else {
        format!("updated {}", changed.join("; "))
    })
}
