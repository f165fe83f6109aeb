//! `kubectl mirror status`.

use crate::cli::{Output, PartitionsShown, StatusArgs};
use crate::client::Kube;
use crate::error::{Error, Result};
use crate::render;

use super::emit;

/// Shows one mirror, the namespace's mirrors, or (`-A`) every mirror.
pub async fn run(kube: &Kube, args: &StatusArgs) -> Result<()> {
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
    match args.output {
        Output::Table | Output::Wide if doc.mirrors.is_empty() && doc.orphan_topics.is_empty() => {
            if args.all_namespaces {
                eprintln!("No ClusterMirrors found.");
            } else {
                eprintln!("No ClusterMirrors found in namespace {ns}.");
            }
        }
        Output::Table => emit(&render::status_table(&doc, false)),
        Output::Wide => emit(&render::status_table(&doc, true)),
        other => emit(&render::document(&doc, other)),
    }
    Ok(())
}
