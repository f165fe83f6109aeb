//! The commands: each reads what it needs from the cluster, acts, and prints.

mod all_partitions;
mod failback;
mod status;
mod topics;
mod translate;
mod verify;
mod wait;
mod watch;

use std::io::Write;

use crate::cli::{Cli, Command, Selection};
use crate::client::Kube;
use crate::error::Result;

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    if let Command::Completion(args) = &cli.command {
        emit(&crate::completion::script(args.shell));
        return Ok(());
    }
    // A wrong list of offsets is a usage error, found before asking any cluster.
    if let Command::Translate(a) = &cli.command {
        a.requests().map_err(crate::error::Error::Usage)?;
    }
    let kube = Kube::connect(&cli.global).await?;
    match &cli.command {
        Command::Status(a) => status::run(&kube, a).await,
        Command::Failover(a) => topics::failover(&kube, a).await,
        Command::Failback(a) => failback::run(&kube, a).await,
        Command::Resolve(a) => topics::resolve(&kube, a).await,
        Command::Pause(a) => topics::set_state(&kube, a, topics::Target::Pause).await,
        Command::Resume(a) => topics::set_state(&kube, a, topics::Target::Resume).await,
        Command::Retry(a) => topics::retry(&kube, a).await,
        Command::Verify(a) => verify::run(&kube, a).await,
        Command::Translate(a) => translate::run(&kube, a).await,
        Command::Completion(_) => unreachable!("handled before connecting"),
    }
}

/// Writes to standard output; a closed pipe (`| head`) is not an error.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Writes one line to standard output.
pub fn line(text: &str) {
    emit(&format!("{text}\n"));
}

/// The `--topic` values of a selection, empty for `--all`.
fn wanted(selection: &Selection) -> &[String] {
    if selection.all {
        &[]
    } else {
        &selection.topics
    }
}

/// Runs `kmirror-verify` (any of its modes) to the end, or until Ctrl-C, which kills it.
async fn run_verifier(program: &std::path::Path, args: &[String]) -> Result<std::process::Output> {
    use std::process::Stdio;
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            crate::error::Error::failed(format!("cannot run {}: {e}", program.display()))
        })?;
    tokio::select! {
        out = child.wait_with_output() => out.map_err(|e| {
            crate::error::Error::failed(format!("running {}: {e}", program.display()))
        }),
        _ = tokio::signal::ctrl_c() => Err(crate::error::Error::failed("interrupted")),
    }
}
