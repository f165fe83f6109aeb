//! `kubectl mirror status`.

use crate::cli::{Output, PartitionsShown, StatusArgs};
use crate::client::Kube;
use crate::error::{Error, Result};
use crate::render;

use super::emit;

/// Shows one mirror, the namespace's mirrors, or (`-A`) every mirror; with `--watch`, again
/// after every change.
pub async fn run(kube: &Kube, args: &StatusArgs) -> Result<()> {
    if args.watch {
        return super::watch::run(kube, args).await;
    }
    match snapshot(kube, args).await? {
        Snapshot::Shown(text) => emit(&text),
        Snapshot::Nothing(note) => eprintln!("{note}"),
    }
    Ok(())
}

/// What `status` prints at one moment.
pub enum Snapshot {
    /// The rendered status (standard output).
    Shown(String),
    /// There is nothing to show: the note that says so (standard error).
    Nothing(String),
}

/// Reads the mirrors and topics and renders them as `args` asks.
pub async fn snapshot(kube: &Kube, args: &StatusArgs) -> Result<Snapshot> {
    let ns = kube.namespace.as_str();
    // Topics whose mirror is missing are shown when no mirror is named (then `mirrors` holds
    // every mirror of the namespaces the topics come from).
    let with_orphans = args.mirror.is_none();
    let (mirrors, topics) = match (&args.mirror, args.all_namespaces) {
        (Some(name), false) => {
            let m = kube.mirror(ns, name).await?;
            (vec![m], kube.topics_of(ns, name).await?)
        }
        (None, false) => (kube.mirrors(Some(ns)).await?, kube.topics(Some(ns)).await?),
        (name, true) => {
            let mut mirrors = kube.mirrors(None).await?;
            if let Some(name) = name {
                mirrors.retain(|m| m.metadata.name.as_deref() == Some(name.as_str()));
                if mirrors.is_empty() {
                    return Err(Error::MirrorNotFoundAnywhere { name: name.clone() });
                }
            }
            (mirrors, kube.topics(None).await?)
        }
    };
    let mut doc = render::status_document(&mirrors, &topics);
    if with_orphans {
        doc.orphan_topics = render::orphan_topics(&mirrors, &topics);
    }
    if args.partitions == PartitionsShown::All {
        super::all_partitions::complete(kube, &mirrors, &mut doc).await?;
    }
    Ok(match args.output {
        Output::Table | Output::Wide if doc.mirrors.is_empty() && doc.orphan_topics.is_empty() => {
            Snapshot::Nothing(if args.all_namespaces {
                "No ClusterMirrors found.".to_string()
            } else {
                format!("No ClusterMirrors found in namespace {ns}.")
            })
        }
        Output::Table => Snapshot::Shown(render::status_table(&doc, false)),
        Output::Wide => Snapshot::Shown(render::status_table(&doc, true)),
        other => Snapshot::Shown(render::document(&doc, other)),
    })
}
