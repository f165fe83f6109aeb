//! `kubectl mirror translate`: offsets between a topic's source and destination through the
//! mirror's offset map, read from the state topic by `kmirror-verify --translate` with the
//! ClusterMirror's destination connection (the way `status --partitions all` reads it).

use crate::cli::{Direction, Output, TranslateArgs};
use crate::client::Kube;
use crate::error::{Error, Result};
use crate::render::{self, TranslateDocument, TranslationView};
use crate::reverse;
use crate::select::select;
use crate::verifier::{self, PrivateDir, Side, SideArgs, TopicRun};

use super::emit;

/// Translates the offsets asked for and prints them; fails (exit code 1) after printing when
/// any offset cannot be translated.
pub async fn run(kube: &Kube, args: &TranslateArgs) -> Result<()> {
    let requests = args.requests().map_err(Error::Usage)?;
    let ns = kube.namespace.as_str();
    let mirror = kube.mirror(ns, &args.mirror).await?;
    let topics = kube.topics_of(ns, &args.mirror).await?;
    let topic = select(&topics, &args.mirror, ns, std::slice::from_ref(&args.topic))?
        .into_iter()
        .next()
        .cloned()
        .ok_or_else(|| Error::failed(format!("no topic {:?}", args.topic)))?;
    let program = verifier::find(
        std::env::current_exe().ok().as_deref(),
        std::env::var_os("PATH").as_deref(),
    )
    .map_err(Error::Failed)?;
    let dir = PrivateDir::new()
        .map_err(|e| Error::failed(format!("cannot create a private temporary directory: {e}")))?;
    // Only the destination is read; the source's bootstrap servers fill a required flag.
    let source = SideArgs {
        args: vec![
            "--source-bootstrap".into(),
            mirror.spec.source.bootstrap_servers.clone(),
        ],
        files: Vec::new(),
    };
    let destination = verifier::side_args(Side::Destination, &mirror.spec.destination, dir.path());
    super::verify::write_secrets(kube, ns, destination.files.iter()).await?;
    let run = TopicRun {
        mirror: reverse::key(&mirror),
        state_topic: mirror.spec.state_topic.clone(),
        isolation: mirror.spec.fetcher.isolation_level,
        source_topic: topic.spec.source_topic.clone(),
        destination_topic: topic.destination_topic().to_string(),
        partitions: Vec::new(),
    };
    let mut verifier_args = verifier::arguments(&run, &source, &destination);
    let pairs: Vec<String> = requests.iter().map(|(p, o)| format!("{p}:{o}")).collect();
    verifier_args.extend([
        "--translate".to_string(),
        pairs.join(","),
        "--direction".into(),
        args.direction.as_str().into(),
    ]);
    let mut translations = read(&program, &verifier_args).await?;
    drop(dir);
    let from_topic = match args.direction {
        Direction::SourceToDestination => &run.source_topic,
        Direction::DestinationToSource => &run.destination_topic,
    };
    for t in &mut translations {
        t.topic = from_topic.clone();
    }
    if translations.len() != requests.len() {
        return Err(Error::failed(format!(
            "{} printed {} translations for {} offsets",
            program.display(),
            translations.len(),
            requests.len()
        )));
    }
    let doc = TranslateDocument {
        mirror: run.mirror.clone(),
        source_topic: run.source_topic.clone(),
        destination_topic: run.destination_topic.clone(),
        direction: args.direction.as_str().into(),
        translations,
    };
    match args.output {
        Output::Table | Output::Wide => emit(&render::translate_table(&doc)),
        other => emit(&render::document(&doc, other)),
    }
    let refused = doc
        .translations
        .iter()
        .filter(|t| !t.is_translated())
        .count();
    if refused > 0 {
        return Err(Error::failed(format!(
            "{refused} of {} offsets cannot be translated (see HOW and REASON)",
            doc.translations.len()
        )));
    }
    Ok(())
}

/// Runs the verifier in translate mode; the translations it prints, in order.
async fn read(program: &std::path::Path, args: &[String]) -> Result<Vec<TranslationView>> {
    let output = super::run_verifier(program, args).await?;
    if !output.status.success() {
        return Err(Error::failed(format!(
            "cannot read the offset map from the state topic: {}",
            verifier::failure_message(
                output.status.code(),
                &String::from_utf8_lossy(&output.stderr)
            )
        )));
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<TranslationView>(l.trim()).map_err(|e| {
                Error::failed(format!(
                    "{} printed a line that is not a translation ({e}): {l}",
                    program.display()
                ))
            })
        })
        .collect()
}
