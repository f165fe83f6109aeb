//! `kubectl mirror status --partitions all`: the partitions a large topic's status does not list
//! (the operator lists only the worst ones, `--status-max-partitions`), read from the mirror's
//! state topic — the operator's own record of every partition — by `kmirror-verify --state-only`
//! with the ClusterMirror's destination connection, the way `verify` reaches the clusters.

use kmirror_crds::v1alpha1::{ClusterMirror, PartitionStatus};

use crate::client::Kube;
use crate::error::{Error, Result};
use crate::render::{PartitionView, StatusDocument, TopicView};
use crate::verifier::{self, PrivateDir, Side, SideArgs, TopicRun};

/// Adds the partitions each topic of `doc` leaves out of its status, from the state topic of its
/// mirror. Topics that list every partition are not read.
pub async fn complete(
    kube: &Kube,
    mirrors: &[ClusterMirror],
    doc: &mut StatusDocument,
) -> Result<()> {
    if !doc
        .mirrors
        .iter()
        .flat_map(|m| &m.topics)
        .any(|t| t.partitions_omitted > 0)
    {
        return Ok(());
    }
    let program = verifier::find(
        std::env::current_exe().ok().as_deref(),
        std::env::var_os("PATH").as_deref(),
    )
    .map_err(Error::Failed)?;
    for view in &mut doc.mirrors {
        if !view.topics.iter().any(|t| t.partitions_omitted > 0) {
            continue;
        }
        let Some(mirror) = mirrors.iter().find(|m| {
            m.metadata.namespace.as_deref() == Some(view.namespace.as_str())
                && m.metadata.name.as_deref() == Some(view.name.as_str())
        }) else {
            continue;
        };
        let dir = PrivateDir::new().map_err(|e| {
            Error::failed(format!("cannot create a private temporary directory: {e}"))
        })?;
        // Only the destination is read; the source's bootstrap servers fill a required flag.
        let source = SideArgs {
            args: vec![
                "--source-bootstrap".into(),
                mirror.spec.source.bootstrap_servers.clone(),
            ],
            files: Vec::new(),
        };
        let destination =
            verifier::side_args(Side::Destination, &mirror.spec.destination, dir.path());
        super::verify::write_secrets(kube, &view.namespace, destination.files.iter()).await?;
        let key = format!("{}/{}", view.namespace, view.name);
        for topic in view.topics.iter_mut().filter(|t| t.partitions_omitted > 0) {
            let run = TopicRun {
                mirror: key.clone(),
                state_topic: mirror.spec.state_topic.clone(),
                isolation: mirror.spec.fetcher.isolation_level,
                source_topic: topic.source_topic.clone(),
                destination_topic: topic.destination_topic.clone(),
                partitions: Vec::new(),
            };
            let mut args = verifier::arguments(&run, &source, &destination);
            args.push("--state-only".into());
            let recorded = read(&program, &args)
                .await
                .map_err(|e| Error::failed(format!("{}: {e}", topic.name)))?;
            add_recorded(topic, &recorded);
        }
    }
    Ok(())
}

/// Runs the verifier in state mode; the partitions' status it prints.
async fn read(
    program: &std::path::Path,
    args: &[String],
) -> std::result::Result<Vec<PartitionStatus>, String> {
    let output = super::run_verifier(program, args)
        .await
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!(
            "cannot read the partitions from the state topic: {}",
            verifier::failure_message(
                output.status.code(),
                &String::from_utf8_lossy(&output.stderr)
            )
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<PartitionStatus>(l.trim()).ok())
        .collect())
}

/// Adds to `topic` the `recorded` partitions its status does not list (a listed one keeps the
/// status's entry: the operator's, with its fetcher pod), by number; `partitionsOmitted` is what
/// is still missing (partitions without any record yet).
pub fn add_recorded(topic: &mut TopicView, recorded: &[PartitionStatus]) {
    for p in recorded {
        if !topic.partitions.iter().any(|l| l.partition == p.partition) {
            topic.partitions.push(PartitionView::from(p));
        }
    }
    topic.partitions.sort_by_key(|p| p.partition);
    topic.partitions_omitted =
        (topic.partition_counts.total - topic.partitions.len() as i32).max(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{omitted_note, topic_view};
    use crate::testing::{partition, topic, with_status};
    use kmirror_crds::v1alpha1::{PartitionCounts, PartitionState::*};

    #[test]
    fn recorded_partitions_fill_in_those_not_listed() {
        let mut t = with_status(
            topic("dr-wide", "dr", "wide"),
            vec![
                PartitionStatus {
                    fetcher_pod: Some("dr-wide-fetcher-1".into()),
                    lag: Some(9),
                    ..partition(3, Mirroring)
                },
                partition(7, Failed),
            ],
        );
        let st = t.status.as_mut().unwrap();
        st.partitions_omitted = 3;
        st.partition_counts = Some(PartitionCounts {
            total: 5,
            mirroring: 4,
            failed: 1,
            ..Default::default()
        });
        let mut view = topic_view(&t);
        assert_eq!(
            omitted_note(&view).as_deref(),
            Some(
                "dr-wide: 3 more partitions not shown (3 MIRRORING, lag at most 9); \
                 --partitions all shows them"
            )
        );
        // The state topic has 0, 3 (older than the status's entry) and 7; 1 has no record yet.
        let recorded = vec![
            partition(0, Mirroring),
            partition(3, Preparing),
            partition(7, Failed),
        ];
        add_recorded(&mut view, &recorded);
        let shown: Vec<(i32, String)> = view
            .partitions
            .iter()
            .map(|p| (p.partition, p.state.to_string()))
            .collect();
        assert_eq!(
            shown,
            [
                (0, "MIRRORING".to_string()),
                (3, "MIRRORING".to_string()),
                (7, "FAILED".to_string())
            ]
        );
        assert_eq!(
            view.partitions[1].fetcher_pod.as_deref(),
            Some("dr-wide-fetcher-1"),
            "the listed entry is kept"
        );
        assert_eq!(
            view.partitions_omitted, 2,
            "two partitions without a record"
        );
        add_recorded(
            &mut view,
            &[partition(1, Mirroring), partition(2, Mirroring)],
        );
        assert_eq!(view.partitions_omitted, 0);
        assert_eq!(omitted_note(&view), None);
    }
}
