//! `kubectl mirror verify`: run `kmirror-verify` for the topics of a mirror.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kmirror_crds::v1alpha1::MirrorTopic;

use crate::cli::{Output, VerifyArgs};
use crate::client::Kube;
use crate::error::{Error, Result};
use crate::render::{self, ReportSummary, TopicVerification, VerifyDocument};
use crate::reverse;
use crate::select::{object_name, select};
use crate::verifier::{self, PrivateDir, SecretFile, Side, TopicRun};

use super::emit;

/// Verifies the selected topics; fails when any partition has mismatches ([`Error::Diverged`])
/// or cannot be verified.
pub async fn run(kube: &Kube, args: &VerifyArgs) -> Result<()> {
    let ns = kube.namespace.as_str();
    let mirror = kube.mirror(ns, &args.mirror).await?;
    let topics = kube.topics_of(ns, &args.mirror).await?;
    let chosen: Vec<MirrorTopic> = select(&topics, &args.mirror, ns, &args.topics)?
        .into_iter()
        .cloned()
        .collect();
    let program = verifier::find(
        std::env::current_exe().ok().as_deref(),
        std::env::var_os("PATH").as_deref(),
    )
    .map_err(Error::Failed)?;

    let dir = PrivateDir::new()
        .map_err(|e| Error::failed(format!("cannot create a private temporary directory: {e}")))?;
    let source = verifier::side_args(Side::Source, &mirror.spec.source, dir.path());
    let destination = verifier::side_args(Side::Destination, &mirror.spec.destination, dir.path());
    write_secrets(kube, ns, source.files.iter().chain(&destination.files)).await?;

    let mut doc = VerifyDocument {
        mirror: reverse::key(&mirror),
        clean: true,
        topics: Vec::new(),
    };
    for t in &chosen {
        let partitions = if args.partitions.is_empty() {
            // A status that lists only some partitions: every partition recorded (empty).
            t.status
                .as_ref()
                .filter(|s| s.partitions_omitted == 0)
                .map(|s| s.partitions.iter().map(|p| p.partition).collect())
                .unwrap_or_default()
        } else {
            args.partitions.clone()
        };
        let topic_run = TopicRun {
            mirror: doc.mirror.clone(),
            state_topic: mirror.spec.state_topic.clone(),
            isolation: mirror.spec.fetcher.isolation_level,
            source_topic: t.spec.source_topic.clone(),
            destination_topic: t.destination_topic().to_string(),
            partitions,
        };
        if matches!(args.output, Output::Table | Output::Wide) {
            eprintln!(
                "verifying {} → {} ...",
                topic_run.source_topic, topic_run.destination_topic
            );
        }
        let result = verify_topic(&program, &topic_run, &source, &destination, t).await?;
        doc.clean &= result.clean;
        doc.topics.push(result);
    }
    drop(dir);

    match args.output {
        Output::Table => emit(&render::verify_table(&doc, false)),
        Output::Wide => emit(&render::verify_table(&doc, true)),
        other => emit(&render::document(&doc, other)),
    }
    if doc.clean {
        return Ok(());
    }
    let mismatched: usize = doc
        .topics
        .iter()
        .flat_map(|t| &t.reports)
        .filter(|r| {
            !serde_json::from_value::<ReportSummary>((*r).clone())
                .unwrap_or_default()
                .is_clean()
        })
        .count();
    let errors = doc.topics.iter().filter(|t| t.error.is_some()).count();
    let message = format!(
        "verification of {} failed: {mismatched} partition(s) with mismatches, {errors} topic(s) \
         not verified",
        doc.mirror
    );
    // Records that differ are divergence (exit code 5); a verifier that could not run is not.
    Err(if mismatched > 0 {
        Error::Diverged(message)
    } else {
        Error::Failed(message)
    })
}

/// Runs the verifier once; Ctrl-C stops it (and the temporary files are removed).
async fn verify_topic(
    program: &std::path::Path,
    run: &TopicRun,
    source: &verifier::SideArgs,
    destination: &verifier::SideArgs,
    topic: &MirrorTopic,
) -> Result<TopicVerification> {
    let args = verifier::arguments(run, source, destination);
    let output = super::run_verifier(program, &args).await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let reports: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .filter(serde_json::Value::is_object)
        .collect();
    let code = output.status.code();
    let error = match code {
        Some(0) | Some(1) => None,
        _ => Some(verifier::failure_message(
            code,
            &String::from_utf8_lossy(&output.stderr),
        )),
    };
    let clean = error.is_none()
        && code == Some(0)
        && reports.iter().all(|r| {
            serde_json::from_value::<ReportSummary>(r.clone())
                .unwrap_or_default()
                .is_clean()
        });
    Ok(TopicVerification {
        name: object_name(topic).to_string(),
        source_topic: run.source_topic.clone(),
        destination_topic: run.destination_topic.clone(),
        clean,
        error,
        reports,
    })
}

/// Reads each referenced Secret of namespace `ns` once and writes the referenced values to their
/// files.
pub(super) async fn write_secrets<'a>(
    kube: &Kube,
    ns: &str,
    files: impl Iterator<Item = &'a SecretFile>,
) -> Result<()> {
    let mut secrets: BTreeMap<String, Option<Secret>> = BTreeMap::new();
    for f in files {
        if !secrets.contains_key(&f.secret.name) {
            let s = kube.secret(ns, &f.secret.name).await?;
            secrets.insert(f.secret.name.clone(), s);
        }
        let value = secrets[&f.secret.name]
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(&f.secret.key))
            .ok_or_else(|| {
                Error::failed(format!(
                    "{} refers to key {:?} of Secret {:?} in namespace {ns:?}, which does not exist",
                    f.field, f.secret.key, f.secret.name
                ))
            })?;
        verifier::write_private(&f.path, &value.0)
            .map_err(|e| Error::failed(format!("cannot write {}: {e}", f.path.display())))?;
    }
    Ok(())
}
