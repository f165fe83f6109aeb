//! Command-line arguments of `kubectl mirror`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kmirror_crds::v1alpha1::DivergencePolicy;

/// The JSON/YAML document `status -o json|yaml` prints (also in the crate's README).
pub const STATUS_SHAPE: &str = r#"Output shape of -o json / -o yaml (every key is always present; absent values are null):

  {
    "mirrors": [{
      "namespace": "shop", "name": "dr",
      "source": "kafka-a:9092",            // spec.source.bootstrapServers
      "destination": "kafka-b:9092",       // spec.destination.bootstrapServers
      "reverseOf": null,                   // "namespace/name" for a failback mirror
      "ready": {"status": "True", "reason": "...", "message": "..."},   // or null
      "partitionCounts": {"total": 6, "unknown": 0, "preparing": 0, "mirroring": 6,
                          "paused": 0, "stopping": 0, "stopped": 0, "failed": 0},
      "topics": [{
        "name": "dr-orders",               // the MirrorTopic
        "sourceTopic": "orders", "destinationTopic": "orders",
        "desiredState": "Mirroring",       // spec.state: Mirroring | Paused | Stopped
        "failoverMode": "Graceful",        // spec.failover.mode
        "divergencePolicy": null,          // Recreate | KeepAndTranslate | null
        "phase": "Mirroring",              // status.phase, "Pending" without status
        "maxLag": 0, "offsetsIdentical": true,
        "partitions": [{
          "partition": 0, "state": "MIRRORING", "stateEpoch": 3,
          "lag": 0, "lagSeconds": 0.0,
          "lastMirroredOffset": 1499,
          "sourceLogEndOffset": 1500, "destinationLogEndOffset": 1500,
          "offsetsIdentical": true, "fetcherPod": "dr-orders-fetcher-0",
          "retryAttempt": null, "lastError": null, "lastTransitionTime": "...",
          "divergence": null               // or {"fromOffset", "toOffset", "quarantineTopic",
                                           //     "quarantinedRecords", "resolution"}
        }]
      }]
    }]
  }

partitionCounts are counted from the listed partitions; topics without status have an empty
"partitions" list and phase "Pending". Mirrors are sorted by namespace and name, topics by
source topic, partitions by number."#;

/// Inspect and drive kmirror mirrors: status, failover, failback, verification.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "kubectl-mirror",
    bin_name = "kubectl mirror",
    version,
    about = "Inspect and drive kmirror Kafka mirrors (ClusterMirror, MirrorTopic)",
    long_about = "Inspect and drive kmirror Kafka mirrors (ClusterMirror, MirrorTopic).\n\n\
        Failover of a topic is the change of its MirrorTopic's spec.state to Stopped; failback \
        is a ClusterMirror in the other direction. This plugin makes both one command and \
        follows their progress.\n\n\
        Exit codes: 0 success, 1 failure, 2 wrong usage."
)]
pub struct Cli {
    /// Connection and namespace options.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace of the mirror (default: the context's namespace, or "default").
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// The commands.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Show mirrors, their topics and every partition's state, lag and last mirrored offset.
    #[command(after_long_help = STATUS_SHAPE)]
    Status(StatusArgs),
    /// Fail topics over: set spec.state Stopped so their destination becomes writable.
    #[command(
        long_about = "Fail topics over: set spec.state Stopped (and spec.failover.mode) on \
        the selected MirrorTopics of MIRROR. Graceful mode drains to zero lag first; use \
        --immediate when the source is gone. With --wait, follows the partitions until every \
        one is STOPPED and prints the last mirrored offset of each."
    )]
    Failover(FailoverArgs),
    /// Create the reverse mirror that copies failed-over topics back.
    #[command(
        long_about = "Create the reverse ClusterMirror (source and destination swapped, \
        spec.reverseOf set) and one MirrorTopic per selected topic, copying from the old \
        destination topic back to the old source topic. Only the records written after the \
        last mirrored offset cross back. The selected topics must be STOPPED (failed over) \
        unless --force is given. Records found on the old source after the last mirrored \
        offset are divergence: they are quarantined and reported, and wait for a policy \
        (--divergence-policy here, or `kubectl mirror resolve` later)."
    )]
    Failback(FailbackArgs),
    /// Set the divergence policy of topics of a reverse (failback) mirror.
    Resolve(ResolveArgs),
    /// Pause topics: stop copying, keep the destination read-only (spec.state Paused).
    Pause(TopicArgs),
    /// Resume paused or stopped topics (spec.state Mirroring).
    Resume(TopicArgs),
    /// Retry partitions that failed for a non-retryable reason (annotation kmirror.io/retry).
    Retry(TopicArgs),
    /// Compare source and destination record by record with kmirror-verify.
    #[command(
        long_about = "Compare source and destination record by record with the \
        kmirror-verify program (looked up next to this plugin, then in PATH). Connection \
        settings come from the ClusterMirror; certificates, keys and passwords are read from \
        the referenced Secrets into private temporary files that are removed afterwards. \
        Exit code 1 when any partition has missing, different or extra records.\n\n\
        -o json / -o yaml prints {\"mirror\": \"ns/name\", \"clean\": bool, \"topics\": \
        [{\"name\", \"sourceTopic\", \"destinationTopic\", \"clean\", \"error\", \"reports\": \
        [<kmirror-verify's per-partition reports, unchanged>]}]}."
    )]
    Verify(VerifyArgs),
}

/// Output formats.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// Human-readable tables.
    #[default]
    Table,
    /// One JSON document.
    Json,
    /// One YAML document.
    Yaml,
}

/// Divergence policies as flag values.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
#[value(rename_all = "verbatim")]
pub enum PolicyArg {
    /// Delete and recreate the topic, then mirror everything again.
    Recreate,
    /// Keep the divergent records and mirror after them (offsets translated).
    KeepAndTranslate,
}

impl From<PolicyArg> for DivergencePolicy {
    fn from(p: PolicyArg) -> DivergencePolicy {
        match p {
            PolicyArg::Recreate => DivergencePolicy::Recreate,
            PolicyArg::KeepAndTranslate => DivergencePolicy::KeepAndTranslate,
        }
    }
}

/// Which topics of a mirror a command acts on.
#[derive(Args, Debug, Clone, Default)]
#[group(id = "selection", required = true, multiple = false)]
pub struct Selection {
    /// A topic to act on: its source topic name or its MirrorTopic name (repeatable).
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// Act on every topic of the mirror.
    #[arg(long)]
    pub all: bool,
}

/// `status`.
#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// Only this ClusterMirror (default: all in the namespace).
    pub mirror: Option<String>,
    /// Mirrors of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `failover`.
#[derive(Args, Debug, Clone)]
pub struct FailoverArgs {
    /// The ClusterMirror.
    pub mirror: String,
    /// Topics to fail over.
    #[command(flatten)]
    pub selection: Selection,
    /// Stop at once instead of draining to zero lag first (the source is gone).
    #[arg(long)]
    pub immediate: bool,
    /// Follow the failover until every selected partition is STOPPED.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (e.g. 30s, 5m, 1h).
    #[arg(long, value_parser = parse_timeout, default_value = "5m")]
    pub timeout: Duration,
}

/// `failback`.
#[derive(Args, Debug, Clone)]
pub struct FailbackArgs {
    /// The ClusterMirror that was failed over.
    pub mirror: String,
    /// Name of the reverse ClusterMirror (default: MIRROR-failback).
    #[arg(long)]
    pub name: Option<String>,
    /// Topics to copy back.
    #[command(flatten)]
    pub selection: Selection,
    /// What to do with records the old source holds after the last mirrored offset.
    #[arg(long, value_enum, ignore_case = true)]
    pub divergence_policy: Option<PolicyArg>,
    /// Create the reverse topics even if the selected topics are not all STOPPED.
    #[arg(long)]
    pub force: bool,
    /// Print the resources that would be created (YAML) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Follow the reverse topics until every partition is MIRRORING.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (e.g. 30s, 5m, 1h).
    #[arg(long, value_parser = parse_timeout, default_value = "5m")]
    pub timeout: Duration,
}

/// `resolve`.
#[derive(Args, Debug, Clone)]
pub struct ResolveArgs {
    /// The reverse (failback) ClusterMirror.
    pub mirror: String,
    /// Topics whose divergence to resolve.
    #[command(flatten)]
    pub selection: Selection,
    /// Recreate: recreate the topic and mirror everything again (divergent records stay in
    /// the quarantine topic). KeepAndTranslate: keep them and mirror after them.
    #[arg(long, value_enum, ignore_case = true)]
    pub policy: PolicyArg,
}

/// `pause`, `resume`, `retry`.
#[derive(Args, Debug, Clone)]
pub struct TopicArgs {
    /// The ClusterMirror.
    pub mirror: String,
    /// Topics to act on.
    #[command(flatten)]
    pub selection: Selection,
}

/// `verify`.
#[derive(Args, Debug, Clone)]
pub struct VerifyArgs {
    /// The ClusterMirror.
    pub mirror: String,
    /// Only this topic (repeatable; default: every topic of the mirror).
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// Only this partition (repeatable; default: the partitions in the topic's status).
    #[arg(long = "partition", value_name = "P")]
    pub partitions: Vec<i32>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Parses a `--timeout` value (`30s`, `5m`, `1h30m`, `250ms`).
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    kmirror_crds::duration::parse_duration(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-mirror").chain(args.iter().copied()))
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn failover_needs_a_selection() {
        let e = parse(&["failover", "dr"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let text = e.to_string();
        assert!(text.contains("--topic") && text.contains("--all"), "{text}");
        assert!(parse(&["failover", "dr", "--topic", "a", "--all"]).is_err());
        let cli = parse(&[
            "failover",
            "dr",
            "--topic",
            "a",
            "--topic",
            "b",
            "--immediate",
            "--wait",
            "--timeout",
            "90s",
            "-n",
            "shop",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("shop"));
        let Command::Failover(f) = cli.command else {
            panic!("failover expected")
        };
        assert_eq!(f.selection.topics, ["a", "b"]);
        assert!(f.immediate && f.wait && !f.selection.all);
        assert_eq!(f.timeout, Duration::from_secs(90));
        assert_eq!(
            parse(&["failover", "dr", "--all", "--timeout", "soon"])
                .unwrap_err()
                .exit_code(),
            2
        );
    }

    #[test]
    fn status_options_and_globals_anywhere() {
        let cli = parse(&["-n", "x", "status", "-A", "-o", "json", "--context", "c"]).unwrap();
        let Command::Status(s) = cli.command else {
            panic!("status expected")
        };
        assert!(s.all_namespaces && s.mirror.is_none());
        assert_eq!(s.output, Output::Json);
        assert_eq!(cli.global.context.as_deref(), Some("c"));
        assert!(parse(&["status", "-o", "xml"]).is_err());
    }

    #[test]
    fn policies_parse_in_api_spelling() {
        let cli = parse(&[
            "failback",
            "dr",
            "--all",
            "--divergence-policy",
            "KeepAndTranslate",
        ])
        .unwrap();
        let Command::Failback(f) = cli.command else {
            panic!("failback expected")
        };
        assert_eq!(f.divergence_policy, Some(PolicyArg::KeepAndTranslate));
        let cli = parse(&[
            "resolve",
            "dr-failback",
            "--topic",
            "t",
            "--policy",
            "recreate",
        ])
        .unwrap();
        let Command::Resolve(r) = cli.command else {
            panic!("resolve expected")
        };
        assert_eq!(DivergencePolicy::from(r.policy), DivergencePolicy::Recreate);
        assert!(parse(&["resolve", "dr-failback", "--topic", "t"]).is_err());
    }

    #[test]
    fn usage_mentions_kubectl_mirror() {
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("kubectl mirror"), "{help}");
    }
}
