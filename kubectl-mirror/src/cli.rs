//! Command-line arguments of `kubectl mirror`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kmirror_crds::v1alpha1::DivergencePolicy;

/// The exit codes as `--help` shows them (also in the crate's README), as a literal for
/// `concat!`.
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0  success (also for --dry-run and --print-patch, and when only warnings were printed)
  1  another error: an object not found, the API server unreachable, a failed request;
     translate: an offset that cannot be translated (the others are printed)
  2  wrong usage: unknown flag or command, missing or conflicting arguments
  3  --wait timed out: the change is made and may still complete (follow it with
     `kubectl mirror status MIRROR --watch`)
  4  refused: by the operator (Ready reason DestinationUnsupported, ClusterIdMismatch,
     InvalidSpec or InvalidMirror), by the API server's rules (invalid) or by RBAC (forbidden)
  5  divergence: verify found missing, different or extra records; failback --wait found
     records written to the old source after the last mirrored offset"
    };
}

/// The JSON/YAML document `status -o json|yaml` prints (also in the crate's README), as a
/// literal for `concat!`.
macro_rules! status_shape {
    () => {
        r#"Output shape of -o json / -o yaml (every key is always present; absent values are null):

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
        "partitionCounts": {"total": 6, ...},   // every partition, listed or not
        "partitionsOmitted": 0,            // partitions not in "partitions" (see --partitions)
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

A mirror's partitionCounts add up its topics' counts. A topic with more partitions than the
operator lists in its status (--status-max-partitions, default 100) lists its worst ones
(FAILED, then those on their way, then MIRRORING by highest lag) and says how many it leaves out
in partitionsOmitted; --partitions all reads the others from the mirror's state topic (through
kmirror-verify, with the ClusterMirror's destination connection). Topics without status have an
empty "partitions" list and phase "Pending". Mirrors are sorted by namespace and name, topics by
source topic, partitions by number."#
    };
}

/// The JSON/YAML document `status -o json|yaml` prints.
pub const STATUS_SHAPE: &str = status_shape!();

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
        Objects managed by Argo CD, Flux or Helm are detected from their labels, annotations \
        and field managers: changing commands warn that the tool may set the change back, and \
        --print-patch prints the change to commit to Git instead of applying it.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Connection and namespace options.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes, named as kubectl names them.
#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Kubeconfig cluster to use (default: the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// Kubeconfig user to use (default: the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// Namespace of the mirror (default: the context's namespace, or "default").
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// User to impersonate for the requests (a user, or system:serviceaccount:NS:NAME).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Group to impersonate (repeatable; needs --as).
    #[arg(
        long = "as-group",
        global = true,
        value_name = "GROUP",
        requires = "as_user"
    )]
    pub as_groups: Vec<String>,
    /// UID to impersonate (needs --as).
    #[arg(
        long = "as-uid",
        global = true,
        value_name = "UID",
        requires = "as_user"
    )]
    pub as_uid: Option<String>,
    /// How long one request to the API server may take before it is abandoned: 30s, 1m, or a
    /// number of seconds; 0 means no limit.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_request_timeout)]
    pub request_timeout: Option<Duration>,
}

/// The commands.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Show mirrors, their topics and every partition's state, lag and last mirrored offset.
    #[command(
        after_help = EXIT_CODES,
        after_long_help = concat!(status_shape!(), "\n\n", exit_codes!())
    )]
    Status(StatusArgs),
    /// Fail topics over: set spec.state Stopped so their destination becomes writable.
    #[command(
        long_about = "Fail topics over: set spec.state Stopped on the selected MirrorTopics \
        of MIRROR, each in its spec.failover.mode (default Graceful: drains to zero lag first). \
        --immediate (the source is gone) or --graceful sets the mode too. With --wait, follows \
        the partitions until every one is STOPPED and prints the last mirrored offset of each.",
        after_help = EXIT_CODES
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
        (--divergence-policy here, or `kubectl mirror resolve` later). With --wait, follows \
        the reverse topics until every partition is MIRRORING.",
        after_help = EXIT_CODES
    )]
    Failback(FailbackArgs),
    /// Set the divergence policy of topics of a reverse (failback) mirror.
    #[command(after_help = EXIT_CODES)]
    Resolve(ResolveArgs),
    /// Pause topics: stop copying, keep the destination read-only (spec.state Paused).
    #[command(after_help = EXIT_CODES)]
    Pause(TopicArgs),
    /// Resume paused or stopped topics (spec.state Mirroring).
    #[command(after_help = EXIT_CODES)]
    Resume(TopicArgs),
    /// Retry partitions that failed for a non-retryable reason (annotation kmirror.io/retry).
    #[command(after_help = EXIT_CODES)]
    Retry(TopicArgs),
    /// Compare source and destination record by record with kmirror-verify.
    #[command(
        long_about = "Compare source and destination record by record with the \
        kmirror-verify program (looked up next to this plugin, then in PATH). Connection \
        settings come from the ClusterMirror; certificates, keys and passwords are read from \
        the referenced Secrets into private temporary files that are removed afterwards. \
        Exit code 5 when any partition has missing, different or extra records.\n\n\
        -o json / -o yaml prints {\"mirror\": \"ns/name\", \"clean\": bool, \"topics\": \
        [{\"name\", \"sourceTopic\", \"destinationTopic\", \"clean\", \"error\", \"reports\": \
        [<kmirror-verify's per-partition reports, unchanged>]}]}.",
        after_help = EXIT_CODES
    )]
    Verify(VerifyArgs),
    /// Translate offsets between source and destination through the mirror's offset map.
    #[command(
        long_about = "Translate offsets between a topic's source and destination partitions \
        through the mirror's offset map, for applications that keep their own offsets (Flink or \
        Spark checkpoints, sink connectors storing offsets in a database). The map is read from \
        the mirror's state topic by kmirror-verify (looked up next to this plugin, then in PATH) \
        with the ClusterMirror's destination connection.\n\n\
        Offsets are positions to resume from (the next record to read), translated as consumer \
        group sync does: a source offset goes to the destination offset of the first copied \
        record at or after it, so the offset of a transaction marker, an aborted record or a \
        record compacted away before it was copied goes to the next copied record; the source \
        offset after the last copy goes to the destination offset after the last copy. A \
        destination offset goes back to the source offset of the record copied there. An offset \
        that cannot be translated (not mirrored yet, below the map's start, deleted on the \
        destination, not a copy, partition not mirrored) is printed with the reason and no \
        number, and the exit code is 1.\n\n\
        Give offsets as --partition P --offset O [--offset O2 ...], or as --offsets P:O[,P:O...] \
        (repeatable), or both. --topic names the MirrorTopic (its source topic or object name) \
        in both directions.\n\n\
        -o json / -o yaml prints {\"mirror\", \"sourceTopic\", \"destinationTopic\", \
        \"direction\", \"translations\": [{\"topic\", \"partition\", \"offset\", \"translated\" \
        (null when not translated), \"how\" (identical | mapped | not-mirrored | before-map | \
        deleted-on-destination | not-a-copy | unknown), \"reason\"}]}; \"topic\" and \
        \"offset\" are of the side translated from.",
        after_help = EXIT_CODES
    )]
    Translate(TranslateArgs),
    /// Print a shell completion script (bash or zsh).
    #[command(long_about = "Print a shell completion script for kubectl-mirror.\n\n\
        bash: `source <(kubectl mirror completion bash)` (or save it in \
        /etc/bash_completion.d/kubectl-mirror); zsh: `kubectl mirror completion zsh > \
        \"${fpath[1]}/_kubectl-mirror\"`. This completes `kubectl-mirror …`. For `kubectl mirror \
        <TAB>`, kubectl 1.26 or newer asks an executable named kubectl_complete-mirror in PATH: \
        link it to this program (`ln -s \"$(command -v kubectl-mirror)\" \
        \"$(dirname \"$(command -v kubectl-mirror)\")/kubectl_complete-mirror\"`).")]
    Completion(CompletionArgs),
}

/// Output formats of the reading commands.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// Human-readable tables.
    #[default]
    Table,
    /// Tables with more columns.
    Wide,
    /// One JSON document.
    Json,
    /// One YAML document.
    Yaml,
}

/// `--dry-run` modes, as kubectl names them.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DryRun {
    /// Send the change with dryRun=All: the API server validates and authorizes it (admission
    /// rules, RBAC) and stores nothing.
    Server,
    /// Only print what would be changed; the API server is asked nothing but reads.
    Client,
}

/// How a changing command applies its change.
#[derive(Args, Debug, Clone, Default)]
pub struct ChangeArgs {
    /// Change nothing: `--dry-run` or `--dry-run=server` has the API server check the change
    /// (admission rules, permissions) without storing it; `--dry-run=client` only prints it.
    #[arg(
        long,
        value_enum,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "server",
        value_name = "MODE"
    )]
    pub dry_run: Option<DryRun>,
    /// Change nothing; print the change as YAML to commit to Git (for objects that Argo CD or
    /// Flux manage) or to use as a kustomize patch.
    #[arg(long, conflicts_with = "dry_run")]
    pub print_patch: bool,
}

/// `--wait` and `--timeout`, the same on every changing command.
#[derive(Args, Debug, Clone, Default)]
pub struct WaitArgs {
    /// Wait until every partition of the changed topics is in the state the change asks for
    /// (failover: STOPPED; pause: PAUSED; resume: MIRRORING; retry, resolve: the state their
    /// spec.state asks for; failback: the reverse topics MIRRORING), printing progress.
    #[arg(long, conflicts_with_all = ["dry_run", "print_patch"])]
    pub wait: bool,
    /// How long --wait waits (e.g. 30s, 5m, 1h). Default: twice the largest
    /// spec.failover.drainTimeout of the topics plus 1m (11m with the default drain timeout of
    /// 5m), so that a graceful failover still draining is not given up first.
    #[arg(long, value_parser = parse_timeout, value_name = "DURATION")]
    pub timeout: Option<Duration>,
}

/// Shells `completion` writes scripts for.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// bash.
    Bash,
    /// zsh.
    Zsh,
}

/// `completion`.
#[derive(Args, Debug, Clone)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
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
    /// After the status, print it again whenever a mirror or topic changes, until interrupted
    /// (Ctrl-C). On a terminal the screen is redrawn; otherwise each new status is appended
    /// after a `# <time>` line (-o json: one document per change; -o yaml: `---` between them).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Which partitions to show: those the status lists (a large topic lists only its worst
    /// ones), or all, reading the others from the mirror's state topic with kmirror-verify.
    #[arg(long, value_enum, default_value_t = PartitionsShown::Listed)]
    pub partitions: PartitionsShown,
}

/// Which partitions `status` shows.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartitionsShown {
    /// Those the MirrorTopic's status lists.
    #[default]
    Listed,
    /// Every partition: the state topic has those the status does not list.
    All,
}

/// `failover`.
#[derive(Args, Debug, Clone)]
pub struct FailoverArgs {
    /// The ClusterMirror.
    pub mirror: String,
    /// Topics to fail over.
    #[command(flatten)]
    pub selection: Selection,
    /// Stop at once instead of draining to zero lag first (the source is gone). Without
    /// --immediate or --graceful each topic keeps its spec.failover.mode (default Graceful).
    #[arg(long, conflicts_with = "graceful")]
    pub immediate: bool,
    /// Drain to zero lag first, whatever spec.failover.mode says.
    #[arg(long)]
    pub graceful: bool,
    /// Dry run or print the patch instead of applying it.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// --wait, --timeout.
    #[command(flatten)]
    pub wait: WaitArgs,
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
    /// Change nothing and print the resources as YAML: `--dry-run` (server) has the API server
    /// check them first, `--dry-run=client` does not; `--print-patch` prints them as manifests
    /// to commit to Git.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// --wait, --timeout.
    #[command(flatten)]
    pub wait: WaitArgs,
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
    /// Dry run or print the patch instead of applying it.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// --wait, --timeout.
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// `pause`, `resume`, `retry`.
#[derive(Args, Debug, Clone)]
pub struct TopicArgs {
    /// The ClusterMirror.
    pub mirror: String,
    /// Topics to act on.
    #[command(flatten)]
    pub selection: Selection,
    /// Dry run or print the patch instead of applying it.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// --wait, --timeout.
    #[command(flatten)]
    pub wait: WaitArgs,
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

/// Which way `translate` goes.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Source offsets to destination offsets.
    #[default]
    SourceToDestination,
    /// Destination offsets to source offsets.
    DestinationToSource,
}

impl Direction {
    /// The flag value (also what kmirror-verify takes).
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::SourceToDestination => "source-to-destination",
            Direction::DestinationToSource => "destination-to-source",
        }
    }
}

/// `translate`.
#[derive(Args, Debug, Clone)]
pub struct TranslateArgs {
    /// The ClusterMirror.
    pub mirror: String,
    /// The topic (MirrorTopic source topic or object name).
    #[arg(long, value_name = "TOPIC")]
    pub topic: String,
    /// Partition of the --offset values.
    #[arg(long, value_name = "P")]
    pub partition: Option<i32>,
    /// Offset to translate in --partition (repeatable).
    #[arg(long = "offset", value_name = "O", requires = "partition")]
    pub offset: Vec<i64>,
    /// Partition and offset pairs to translate, `P:O[,P:O...]` (repeatable).
    #[arg(long = "offsets", value_name = "P:O,...")]
    pub pairs: Vec<String>,
    /// Which way to translate.
    #[arg(long, value_enum, default_value_t = Direction::SourceToDestination)]
    pub direction: Direction,
    /// Output format (wide is table).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

impl TranslateArgs {
    /// The (partition, offset) pairs asked for, in the order given: the --offset values in
    /// --partition, then the --offsets pairs.
    pub fn requests(&self) -> Result<Vec<(i32, i64)>, String> {
        let mut out = Vec::new();
        match (self.partition, self.offset.is_empty()) {
            (Some(p), true) => {
                return Err(format!(
                    "--partition {p} needs at least one --offset (or use --offsets {p}:OFFSET)"
                ));
            }
            (Some(p), false) if p < 0 => return Err(format!("--partition {p}: must be >= 0")),
            (Some(p), false) => {
                for &o in &self.offset {
                    if o < 0 {
                        return Err(format!("--offset {o}: must be >= 0"));
                    }
                    out.push((p, o));
                }
            }
            (None, _) => {}
        }
        for pair in self.pairs.iter().flat_map(|v| v.split(',')) {
            let pair = pair.trim();
            if pair.is_empty() {
                continue;
            }
            let parsed = pair.split_once(':').and_then(|(p, o)| {
                let p = p.trim().parse::<i32>().ok().filter(|p| *p >= 0)?;
                let o = o.trim().parse::<i64>().ok().filter(|o| *o >= 0)?;
                Some((p, o))
            });
            out.push(parsed.ok_or_else(|| {
                format!(
                    "--offsets: {pair:?} is not PARTITION:OFFSET (two numbers >= 0, e.g. 0:120)"
                )
            })?);
        }
        if out.is_empty() {
            return Err(
                "nothing to translate: give --partition P --offset O, or --offsets P:O[,P:O...]"
                    .into(),
            );
        }
        Ok(out)
    }
}

/// Parses a `--timeout` value (`30s`, `5m`, `1h30m`, `250ms`).
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    kmirror_crds::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// Parses `--request-timeout` as kubectl does: a duration (`30s`, `1m`) or a number of
/// seconds; `0` means no limit (`Duration::ZERO`).
pub fn parse_request_timeout(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    parse_timeout(text).map_err(|e| {
        format!("{e} (use a duration such as 30s or 2m, or a number of seconds; 0 for no limit)")
    })
}

/// The exit codes as `--help` shows them.
pub const EXIT_CODES: &str = exit_codes!();

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
        assert!(f.immediate && !f.graceful && f.wait.wait && !f.selection.all);
        assert!(
            parse(&["failover", "dr", "--all", "--immediate", "--graceful"]).is_err(),
            "one mode at a time"
        );
        assert_eq!(f.wait.timeout, Some(Duration::from_secs(90)));
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
        assert_eq!(s.partitions, PartitionsShown::Listed);
        let cli = parse(&["status", "dr", "--partitions", "all"]).unwrap();
        let Command::Status(s) = cli.command else {
            panic!("status expected")
        };
        assert_eq!(s.partitions, PartitionsShown::All);
        assert!(parse(&["status", "--partitions", "some"]).is_err());
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
    fn kubectl_connection_flags() {
        let cli = parse(&[
            "status",
            "--as",
            "alice",
            "--as-group",
            "ops",
            "--as-group",
            "dev",
            "--cluster",
            "c",
            "--user",
            "u",
            "--request-timeout",
            "90",
            "-o",
            "wide",
        ])
        .unwrap();
        let g = &cli.global;
        assert_eq!(g.as_user.as_deref(), Some("alice"));
        assert_eq!(g.as_groups, ["ops", "dev"]);
        assert_eq!(
            (g.cluster.as_deref(), g.user.as_deref()),
            (Some("c"), Some("u"))
        );
        assert_eq!(g.request_timeout, Some(Duration::from_secs(90)));
        let Command::Status(s) = cli.command else {
            panic!("status expected")
        };
        assert_eq!(s.output, Output::Wide);
        // Groups without a user are refused, as kubectl does.
        assert_eq!(
            parse(&["status", "--as-group", "ops"])
                .unwrap_err()
                .exit_code(),
            2
        );
        assert_eq!(parse_request_timeout("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_request_timeout("0"), Ok(Duration::ZERO));
        assert!(
            parse_request_timeout("soon")
                .unwrap_err()
                .contains("number of seconds")
        );
    }

    #[test]
    fn dry_run_and_print_patch() {
        let change = |args: &[&str]| -> ChangeArgs {
            match parse(args).unwrap().command {
                Command::Failover(f) => f.change,
                Command::Pause(t) | Command::Resume(t) | Command::Retry(t) => t.change,
                Command::Resolve(r) => r.change,
                Command::Failback(f) => f.change,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(change(&["failover", "dr", "--all"]).dry_run, None);
        assert_eq!(
            change(&["failover", "dr", "--all", "--dry-run"]).dry_run,
            Some(DryRun::Server)
        );
        assert_eq!(
            change(&["pause", "dr", "--dry-run=client", "--all"]).dry_run,
            Some(DryRun::Client)
        );
        assert!(change(&["retry", "dr", "--all", "--print-patch"]).print_patch);
        assert!(
            change(&[
                "resolve",
                "r",
                "--all",
                "--policy",
                "Recreate",
                "--dry-run=server"
            ])
            .dry_run
            .is_some()
        );
        assert!(change(&["failback", "dr", "--all", "--print-patch"]).print_patch);
        for bad in [
            &["failover", "dr", "--all", "--dry-run", "--print-patch"][..],
            &["failover", "dr", "--all", "--wait", "--print-patch"],
            &["failback", "dr", "--all", "--wait", "--dry-run"],
            &["resume", "dr", "--all", "--dry-run=maybe"],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    /// The pairs parsed, or a part of the error.
    type Expected = std::result::Result<Vec<(i32, i64)>, &'static str>;

    #[test]
    fn translate_requests_parse() {
        let requests = |args: &[&str]| -> Result<Vec<(i32, i64)>, String> {
            let mut all = vec!["translate", "dr", "--topic", "orders"];
            all.extend_from_slice(args);
            match parse(&all).map_err(|e| e.to_string())?.command {
                Command::Translate(t) => t.requests(),
                other => panic!("{other:?}"),
            }
        };
        #[rustfmt::skip]
        let table: [(&[&str], Expected); 9] = [
            (&["--partition", "0", "--offset", "120"], Ok(vec![(0, 120)])),
            (&["--partition", "2", "--offset", "5", "--offset", "9"], Ok(vec![(2, 5), (2, 9)])),
            (&["--offsets", "0:120,1:77"], Ok(vec![(0, 120), (1, 77)])),
            (&["--offsets", "0:1", "--offsets", "3:4,"], Ok(vec![(0, 1), (3, 4)])),
            (&["--partition", "1", "--offset", "8", "--offsets", "0:3"], Ok(vec![(1, 8), (0, 3)])),
            (&[], Err("nothing to translate")),
            (&["--partition", "1"], Err("needs at least one --offset")),
            (&["--offset", "1"], Err("--partition")),
            (&["--offsets", "0:x"], Err("is not PARTITION:OFFSET")),
        ];
        for (args, want) in table {
            let got = requests(args);
            match want {
                Ok(pairs) => assert_eq!(got, Ok(pairs), "{args:?}"),
                Err(part) => {
                    let e = got.expect_err(&format!("{args:?}"));
                    assert!(e.contains(part), "{args:?}: {e}");
                }
            }
        }
        match parse(&[
            "translate",
            "dr",
            "--topic",
            "t",
            "--direction",
            "destination-to-source",
        ])
        .unwrap()
        .command
        {
            Command::Translate(t) => assert_eq!(t.direction, Direction::DestinationToSource),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn help_documents_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains("Exit codes:") && help.contains("2  wrong usage"),
            "{help}"
        );
    }

    #[test]
    fn every_verb_documents_exit_codes_and_changing_ones_wait() {
        let mut cli = Cli::command();
        for name in [
            "status",
            "failover",
            "failback",
            "resolve",
            "pause",
            "resume",
            "retry",
            "verify",
            "translate",
        ] {
            let sub = cli.find_subcommand_mut(name).unwrap();
            for help in [
                sub.render_help().to_string(),
                sub.render_long_help().to_string(),
            ] {
                assert!(
                    help.contains("Exit codes:") && help.contains("5  divergence"),
                    "{name}: {help}"
                );
            }
        }
        let wait = |args: &[&str]| -> WaitArgs {
            match parse(args).unwrap().command {
                Command::Failover(f) => f.wait,
                Command::Failback(f) => f.wait,
                Command::Pause(t) | Command::Resume(t) | Command::Retry(t) => t.wait,
                Command::Resolve(r) => r.wait,
                other => panic!("unexpected {other:?}"),
            }
        };
        for verb in ["failover", "failback", "pause", "resume", "retry"] {
            let w = wait(&[verb, "dr", "--all", "--wait"]);
            assert!(
                w.wait && w.timeout.is_none(),
                "{verb}: no --timeout means derived"
            );
            let w = wait(&[verb, "dr", "--all", "--wait", "--timeout", "2m"]);
            assert_eq!(w.timeout, Some(Duration::from_secs(120)), "{verb}");
            assert_eq!(
                parse(&[verb, "dr", "--all", "--wait", "--dry-run"])
                    .unwrap_err()
                    .exit_code(),
                2,
                "{verb}"
            );
        }
        let w = wait(&["resolve", "r", "--all", "--policy", "Recreate", "--wait"]);
        assert!(w.wait);
        let Command::Status(s) = parse(&["status", "dr", "-w"]).unwrap().command else {
            panic!("status expected")
        };
        assert!(s.watch);
    }

    #[test]
    fn usage_mentions_kubectl_mirror() {
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("kubectl mirror"), "{help}");
    }
}
