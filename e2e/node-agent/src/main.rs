//! `kmirror-node-agent`: the test bed's stand-in for a kubelet.
//!
//! It registers a Node, binds pending pods to it (there is no scheduler) and runs each container
//! as a local process: the command from the pod spec (images are ignored; the command is found
//! in `--bin-path` directories or `PATH`), the environment, volumes bind-mounted at their
//! `mountPath` in a private mount namespace, a loopback pod IP per pod, probes, restarts with
//! back-off, status reporting, and graceful deletion. See `docs/testbed-node-agent.md`.
//!
//! Subcommands: `run` (the agent), `cleanup` (stop what a dead agent left running), `zombies`
//! (list or kill pods left running after a forced deletion, see `zombie.rs`), and two
//! internal ones the agent starts itself: `shim` (supervises one container process) and `enter`
//! (runs a command inside a container, for exec probes and hooks).

mod atomic_writer;
mod backoff;
mod binding;
mod config;
mod container;
mod controller;
mod downward;
mod enter;
mod env;
mod events;
mod ipam;
mod launch;
mod logs;
mod netns;
mod node;
mod ns_bin_path;
mod payload;
mod pod_worker;
mod probes;
mod process;
mod quantity;
mod resolve;
mod sandbox;
mod shim;
mod sources;
mod state;
mod status;
mod supervisor;
mod termination;
mod token;
mod volumes;
mod zombie;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::config::AgentConfig;
use crate::downward::NodeResources;
use crate::ipam::Ipam;
use crate::launch::UserSpec;
use crate::pod_worker::Shared;
use crate::state::StateDir;

#[derive(Parser)]
#[command(
    name = "kmirror-node-agent",
    version,
    about = "Test-bed node agent: runs pods bound to a local node as processes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Register the node and run the pods bound to it (until SIGTERM/SIGINT, which stops every
    /// pod process; after SIGKILL a restarted agent re-adopts the running pods).
    Run(RunArgs),
    /// Stop the pod processes recorded in a state directory and remove it (after the agent is
    /// gone).
    Cleanup {
        /// The agent's state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// Seconds between SIGTERM and SIGKILL.
        #[arg(long, default_value_t = 10)]
        grace: u64,
    },
    /// List the zombie pods of a state directory (pods removed by force whose processes were
    /// left running, see `kmirror.io/test-zombie-on-force-delete`), or kill them.
    Zombies {
        /// The agent's state directory.
        #[arg(long)]
        state_dir: PathBuf,
        /// SIGKILL the processes of this zombie (`NAMESPACE/POD`, or `all`) and remove its
        /// state.
        #[arg(long)]
        kill: Option<String>,
    },
    /// Internal: supervise one container process described by a launch spec.
    #[command(hide = true)]
    Shim {
        /// The launch spec (JSON).
        spec: PathBuf,
    },
    /// Internal: run a command inside the namespaces of a container process.
    #[command(hide = true)]
    Enter {
        /// A process of the container.
        #[arg(long)]
        pid: i32,
        /// Working directory.
        #[arg(long, default_value = "/")]
        cwd: PathBuf,
        /// User id.
        #[arg(long)]
        uid: Option<u32>,
        /// Group id.
        #[arg(long)]
        gid: Option<u32>,
        /// Supplementary groups.
        #[arg(long = "group")]
        groups: Vec<u32>,
        /// The command.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Kubeconfig of the API server (admin credentials).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Name of the Node to register.
    #[arg(long, default_value = "kmirror-node")]
    node_name: String,
    /// Per-pod state (volumes, private /tmp, process records).
    #[arg(long)]
    state_dir: PathBuf,
    /// Container logs: <logs-dir>/<namespace>_<pod>/<container>.log.
    #[arg(long)]
    logs_dir: PathBuf,
    /// Directories searched for container commands before PATH (repeatable).
    #[arg(long = "bin-path")]
    bin_path: Vec<PathBuf>,
    /// The node's IP, every pod's hostIP.
    #[arg(long, default_value = "127.0.0.1")]
    host_ip: Ipv4Addr,
    /// First pod IP.
    #[arg(long, default_value = "127.0.0.10")]
    pod_ip_first: Ipv4Addr,
    /// Number of pod IPs.
    #[arg(long, default_value_t = 240)]
    pod_ip_count: u32,
    /// Do not bind pending pods (only run pods that name this node).
    #[arg(long)]
    no_bind: bool,
    /// Pod capacity of the node.
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// First restart back-off step, milliseconds.
    #[arg(long, default_value_t = 1000)]
    backoff_base_ms: u64,
    /// Longest restart back-off, seconds.
    #[arg(long, default_value_t = 60)]
    backoff_cap_secs: u64,
    /// Longest grace period for pods when the agent stops, seconds.
    #[arg(long, default_value_t = 15)]
    shutdown_grace_secs: u64,
    /// Node heartbeat period, seconds.
    #[arg(long, default_value_t = 10)]
    heartbeat_secs: u64,
    /// Refresh period of Secret/ConfigMap/token volumes, seconds.
    #[arg(long, default_value_t = 30)]
    volume_refresh_secs: u64,
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .init();
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        // The shim must stay single-threaded (it forks): no runtime, no tracing.
        Command::Shim { spec } => std::process::exit(shim::main(&spec)),
        Command::Enter {
            pid,
            cwd,
            uid,
            gid,
            groups,
            command,
        } => {
            let user = (uid.is_some() || gid.is_some()).then(|| UserSpec {
                uid: uid.unwrap_or(0),
                gid: gid.unwrap_or(0),
                groups,
            });
            std::process::exit(enter::main(pid, user, &cwd, &command))
        }
        Command::Cleanup { state_dir, grace } => {
            init_tracing();
            cleanup(state_dir, Duration::from_secs(grace))
        }
        Command::Zombies { state_dir, kill } => {
            init_tracing();
            zombies(state_dir, kill.as_deref())
        }
        Command::Run(args) => {
            init_tracing();
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(run(args))
        }
    }
}

fn cleanup(state_dir: PathBuf, grace: Duration) -> anyhow::Result<()> {
    let state = StateDir::new(state_dir.clone())?;
    let (records, _) = state.load_all();
    for record in &records {
        supervisor::stop_recorded(record, grace);
    }
    netns::remove_all();
    std::fs::remove_dir_all(&state_dir)
        .with_context(|| format!("removing {}", state_dir.display()))?;
    tracing::info!(
        "cleaned up {} pod(s) in {}",
        records.len(),
        state_dir.display()
    );
    Ok(())
}

fn zombies(state_dir: PathBuf, kill: Option<&str>) -> anyhow::Result<()> {
    let state = StateDir::new(state_dir)?;
    let found = zombie::recorded(&state);
    let Some(target) = kill else {
        for record in &found {
            let pids: Vec<String> = zombie::live_shims(record)
                .iter()
                .map(|s| s.pid.to_string())
                .collect();
            let since = record
                .zombie_since
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            println!(
                "{} uid={} ip={} since={since} process-groups={}",
                zombie::label(record),
                record.uid,
                record.ip.map(|ip| ip.to_string()).unwrap_or_default(),
                pids.join(",")
            );
        }
        return Ok(());
    };
    let chosen: Vec<_> = found
        .iter()
        .filter(|r| target == "all" || zombie::label(r) == target)
        .collect();
    anyhow::ensure!(
        target == "all" || !chosen.is_empty(),
        "no zombie pod {target} (list them with: kmirror-node-agent zombies --state-dir DIR)"
    );
    for record in chosen {
        let pids: Vec<i32> = zombie::live_shims(record).iter().map(|s| s.pid).collect();
        let gone = zombie::kill(&state, record, Duration::from_secs(10));
        anyhow::ensure!(
            gone,
            "zombie {} did not end after SIGKILL",
            zombie::label(record)
        );
        println!(
            "killed zombie {} (process groups {pids:?})",
            zombie::label(record)
        );
    }
    Ok(())
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let kube_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let api_host = kube_config
        .cluster_url
        .host()
        .context("the kubeconfig's server has no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let api_port = kube_config.cluster_url.port_u16().unwrap_or(443);
    let client = kube::Client::try_from(kube_config)?;

    let (cpu, memory) = config::machine_resources();
    let state = StateDir::new(args.state_dir.clone())
        .with_context(|| format!("state dir {}", args.state_dir.display()))?;
    std::fs::create_dir_all(&args.logs_dir)?;
    let config = AgentConfig {
        node_name: args.node_name.clone(),
        host_ip: args.host_ip,
        state,
        logs_dir: args.logs_dir,
        bin_dirs: args.bin_path,
        path_var: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        api_host,
        api_port,
        backoff: Backoff {
            base: Duration::from_millis(args.backoff_base_ms),
            cap: Duration::from_secs(args.backoff_cap_secs),
            reset_after: Duration::from_secs(args.backoff_cap_secs),
        },
        bind_pods: !args.no_bind,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
        allocatable: NodeResources {
            cpu,
            memory,
            ephemeral_storage: 100.0 * 1024.0 * 1024.0 * 1024.0,
        },
        max_pods: args.max_pods,
        heartbeat: Duration::from_secs(args.heartbeat_secs.max(1)),
        volume_refresh: Duration::from_secs(args.volume_refresh_secs.max(1)),
    };
    tracing::info!(
        node = %config.node_name, api = %format!("{}:{}", config.api_host, config.api_port),
        bin_path = ?config.bin_dirs, "starting node agent"
    );

    let registration = node::NodeRegistration::register(client.clone(), &config).await?;
    let shared = Arc::new(Shared {
        client: client.clone(),
        events: events::Events::new(client.clone(), "kmirror-node-agent", &config.node_name),
        ipam: Mutex::new(Ipam::new(args.pod_ip_first, args.pod_ip_count)),
        config: config.clone(),
        bin_paths: ns_bin_path::NamespaceBinPaths::default(),
        zombies: zombie::Zombies::default(),
    });
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut controller =
        controller::Controller::new(shared.clone(), node::labels(&config), shutdown_rx);
    controller.restore().await?;
    let controller_task = tokio::spawn(controller.run());

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = registration.heartbeat() => {}
        _ = term.recv() => tracing::info!("SIGTERM: stopping every pod"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping every pod"),
    }
    shutdown_tx.send_replace(true);
    if let Err(e) = controller_task.await {
        tracing::error!("pod controller failed: {e}");
    }
    if let Err(e) = registration.post_status(false).await {
        tracing::warn!("cannot mark the node not ready: {e}");
    }
    tracing::info!("node agent stopped");
    Ok(())
}
