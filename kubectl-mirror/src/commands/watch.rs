//! `kubectl mirror status --watch`: the status again whenever a ClusterMirror or MirrorTopic
//! changes (a watch on both kinds, not a timer), until interrupted.

use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use futures::{FutureExt, StreamExt, TryStreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;

use crate::cli::{Output, StatusArgs};
use crate::client::Kube;
use crate::error::{Error, Result};
use crate::util::rfc3339;

use super::emit;
use super::status::{Snapshot, snapshot};

/// How long to let a burst of changes (a spec change, then the status) arrive before printing.
const SETTLE: Duration = Duration::from_millis(200);

/// Prints the status, then again after every change that alters it, until Ctrl-C.
pub async fn run(kube: &Kube, args: &StatusArgs) -> Result<()> {
    tokio::select! {
        result = follow(kube, args) => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

async fn follow(kube: &Kube, args: &StatusArgs) -> Result<()> {
    let scope = (!args.all_namespaces).then_some(kube.namespace.as_str());
    let config = watcher::Config::default().timeout(watch_timeout(kube.read_timeout));
    let mirrors = watcher(kube.mirrors_api(scope), config.clone())
        .default_backoff()
        .map_ok(|_| ());
    let topics = watcher(kube.topics_api(scope), config)
        .default_backoff()
        .map_ok(|_| ());
    let mut changes = futures::stream::select(mirrors.boxed(), topics.boxed());
    let tty = std::io::stdout().is_terminal();
    let mut last: Option<String> = None;
    loop {
        match snapshot(kube, args).await {
            Ok(s) => {
                let text = match s {
                    Snapshot::Shown(text) => text,
                    Snapshot::Nothing(note) => format!("{note}\n"),
                };
                if last.as_ref() != Some(&text) {
                    emit(&frame(&text, args.output, tty, SystemTime::now()));
                    last = Some(text);
                }
            }
            // The first read decides (an unknown mirror is an error); later ones may be passing.
            Err(e) if last.is_none() => return Err(e),
            Err(e) => eprintln!("error: {e} (still watching)"),
        }
        match changes.next().await {
            None => return Err(Error::failed("the watch of the mirrors ended")),
            Some(Err(e)) => eprintln!("warning: watching the mirrors failed: {e}; trying again"),
            Some(Ok(())) => {}
        }
        tokio::time::sleep(SETTLE).await;
        while let Some(Some(_)) = changes.next().now_or_never() {}
    }
}

/// The server-side timeout of each watch request, in seconds: shorter than the client's read
/// timeout (a quiet watch sends nothing until it ends), at most 290 s as kube's default.
pub fn watch_timeout(read_timeout: Option<Duration>) -> u32 {
    match read_timeout {
        None => 290,
        Some(t) => (t.as_secs() * 3 / 4).clamp(1, 290) as u32,
    }
}

/// One status as `--watch` prints it: a table after a `# <time>` line (on a terminal, on a
/// cleared screen); JSON documents one after the other; YAML documents after `---`.
pub fn frame(text: &str, output: Output, tty: bool, now: SystemTime) -> String {
    match output {
        Output::Table | Output::Wide => {
            let stamp = rfc3339(now);
            // Milliseconds are enough: 2026-03-01T12:00:00.123Z.
            let stamp = format!("{}Z", &stamp[..23]);
            let clear = if tty { "\x1b[H\x1b[2J" } else { "" };
            format!("{clear}# {stamp}\n{text}")
        }
        Output::Json => text.to_string(),
        Output::Yaml => format!("---\n{text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn watch_requests_end_before_the_read_timeout() {
        let s = Duration::from_secs;
        for (read, expected) in [
            (None, 290),
            (Some(s(60)), 45), // the plugin's default read timeout
            (Some(s(10)), 7),
            (Some(s(1)), 1),
            (Some(s(3600)), 290),
        ] {
            assert_eq!(watch_timeout(read), expected, "{read:?}");
        }
    }

    #[test]
    fn frames() {
        let t = UNIX_EPOCH + Duration::from_millis(1_709_294_400_123);
        assert_eq!(
            frame("TABLE\n", Output::Table, false, t),
            "# 2024-03-01T12:00:00.123Z\nTABLE\n"
        );
        assert_eq!(
            frame("TABLE\n", Output::Wide, true, t),
            "\x1b[H\x1b[2J# 2024-03-01T12:00:00.123Z\nTABLE\n"
        );
        assert_eq!(frame("{}\n", Output::Json, false, t), "{}\n");
        assert_eq!(frame("a: 1\n", Output::Yaml, true, t), "---\na: 1\n");
    }
}
