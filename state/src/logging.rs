//! `tracing` set-up shared by the kmirror binaries: `RUST_LOG` filters, `--log-format json`
//! for machine-readable logs.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `json` selects one JSON object per line.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,rdkafka=warn,kube=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let result = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    // A second initialisation (tests) keeps the first subscriber.
    let _ = result;
}
