//! The one-line termination message a fetcher leaves when it stops for a reason: Kubernetes
//! shows it as the container's termination message (`terminationMessagePolicy: File`), and the
//! operator puts it into the partition's `lastError` when no position record says more. Written
//! to `$KMIRROR_TERMINATION_MESSAGE_PATH`, or to `/dev/termination-log` when the container has
//! one (outside a container nothing is written).

use std::path::PathBuf;

/// Longest message written (Kubernetes keeps 4096 bytes per container).
pub const MAX_LEN: usize = 1024;

/// The environment variable naming the file.
pub const PATH_ENV: &str = "KMIRROR_TERMINATION_MESSAGE_PATH";

const KUBERNETES_PATH: &str = "/dev/termination-log";

/// `text` on one line (line breaks become spaces), at most [`MAX_LEN`] bytes.
pub fn one_line(text: &str) -> String {
    let mut line: String = text
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if line.len() > MAX_LEN {
        let mut end = MAX_LEN - 3;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str("...");
    }
    line
}

/// Where the message goes, if anywhere.
pub fn path() -> Option<PathBuf> {
    match std::env::var_os(PATH_ENV) {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            let k = PathBuf::from(KUBERNETES_PATH);
            k.exists().then_some(k)
        }
    }
}

/// Writes `text` as the termination message (one line); a failure is only logged.
pub fn write(text: &str) {
    let Some(path) = path() else {
        return;
    };
    if let Err(e) = std::fs::write(&path, one_line(text)) {
        tracing::warn!(path = %path.display(), "cannot write the termination message: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_bounded_line() {
        assert_eq!(one_line("a\nb\r\n  c  "), "a b c");
        let long = "é".repeat(MAX_LEN);
        let line = one_line(&long);
        assert!(
            line.len() <= MAX_LEN && line.ends_with("..."),
            "{}",
            line.len()
        );
    }
}
