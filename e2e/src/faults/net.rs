//! Network faults of the replicated pair for tests: the `net-*` verbs of `e2e/testbed.sh`
//! (toxiproxy in front of each broker, `e2e/bed/net.sh`) and the client configs that go through
//! the proxy. Only clients on the PROXIED listeners are affected; see docs/testbed-faults.md.

use std::time::Duration;

use rdkafka::ClientConfig;

use super::{Cluster, verb};
use crate::Testbed;
use crate::kafka::DestUser;

/// The proxy of broker `broker` (1-3) of a replicated cluster, as the verbs name it.
fn target(cluster: Cluster, broker: i32) -> anyhow::Result<String> {
    anyhow::ensure!(
        matches!(cluster, Cluster::RSource | Cluster::RDestination) && (1..=3).contains(&broker),
        "network faults apply to brokers 1-3 of the replicated pair, not {} {broker}",
        cluster.as_str()
    );
    Ok(format!("{}-{broker}", cluster.as_str()))
}

fn hold_args(args: &mut Vec<String>, hold: Option<Duration>) {
    if let Some(h) = hold {
        args.extend(["--hold".into(), h.as_secs().max(1).to_string()]);
    }
}

fn run(args: Vec<String>) -> anyhow::Result<String> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    verb(&refs)
}

/// Blackholes a broker's proxy: connections through it stay open but nothing passes either
/// way; with `hold`, healed after that long (the held connections are then closed).
pub fn net_cut(cluster: Cluster, broker: i32, hold: Option<Duration>) -> anyhow::Result<String> {
    let mut args = vec!["net-cut".to_string(), target(cluster, broker)?];
    hold_args(&mut args, hold);
    run(args)
}

/// What `net-reset` did.
#[derive(Debug, Clone)]
pub struct NetReset {
    /// Connections reset over all rounds (open before a round, gone after it).
    pub reset: u64,
    /// What the verb printed.
    pub output: String,
}

/// Resets the connections through a broker's proxy `times` times, `every` apart (an RST as soon
/// as each client sends), and counts them.
pub fn net_reset(
    cluster: Cluster,
    broker: i32,
    times: u32,
    every: Duration,
) -> anyhow::Result<NetReset> {
    let output = run(vec![
        "net-reset".into(),
        target(cluster, broker)?,
        "--times".into(),
        times.to_string(),
        "--every".into(),
        every.as_millis().to_string(),
    ])?;
    let reset = parse_reset_total(&output)
        .ok_or_else(|| anyhow::anyhow!("net-reset printed no total: {output}"))?;
    Ok(NetReset { reset, output })
}

/// The total of a `net-reset` output's last line (`…: N connection(s) reset in R round(s) …`).
fn parse_reset_total(output: &str) -> Option<u64> {
    let line = output.lines().rev().find(|l| l.contains(" round(s) "))?;
    let (before, _) = line.split_once(" connection(s) reset in ")?;
    before.rsplit(' ').next()?.parse().ok()
}

/// Delays every response of a broker by `latency` (± `jitter`); with `hold`, removed after that.
pub fn net_latency(
    cluster: Cluster,
    broker: i32,
    latency: Duration,
    jitter: Duration,
    hold: Option<Duration>,
) -> anyhow::Result<String> {
    let mut args = vec![
        "net-latency".to_string(),
        target(cluster, broker)?,
        latency.as_millis().to_string(),
        "--jitter".into(),
        jitter.as_millis().to_string(),
    ];
    hold_args(&mut args, hold);
    run(args)
}

/// Limits a broker's responses to `kb_per_sec` KB/s; with `hold`, removed after that.
pub fn net_bandwidth(
    cluster: Cluster,
    broker: i32,
    kb_per_sec: u64,
    hold: Option<Duration>,
) -> anyhow::Result<String> {
    let mut args = vec![
        "net-bandwidth".to_string(),
        target(cluster, broker)?,
        kb_per_sec.to_string(),
    ];
    hold_args(&mut args, hold);
    run(args)
}

/// Removes every toxic of one broker's proxy, or (None) of all.
pub fn net_heal(broker: Option<(Cluster, i32)>) -> anyhow::Result<String> {
    let mut args = vec!["net-heal".to_string()];
    if let Some((c, b)) = broker {
        args.push(target(c, b)?);
    }
    run(args)
}

/// The proxies, their toxics and reset counts (`net-status`).
pub fn net_status() -> anyhow::Result<String> {
    verb(&["net-status"])
}

/// The namespace annotation that makes the node agent run a namespace's pods in network
/// namespaces of their own (`e2e/node-agent/src/netns.rs`), so [`pod_net_cut`] can cut one off.
pub const ISOLATED_NETWORK_ANNOTATION: &str = "kmirror.io/test-network";

/// Annotates `namespace` so that pods started in it from now on get an isolated network
/// (pods already running keep the host's).
pub async fn isolate_namespace(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Patch, PatchParams};
    let patch = serde_json::json!({"metadata": {"annotations": {
        ISOLATED_NETWORK_ANNOTATION: "isolated"
    }}});
    kube::Api::<Namespace>::all(client.clone())
        .patch(namespace, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Cuts a pod of an isolated namespace off the network (its link down); its processes keep
/// running, its connections hang.
pub fn pod_net_cut(namespace: &str, pod: &str) -> anyhow::Result<String> {
    verb(&["pod-net-cut", &format!("{namespace}/{pod}")])
}

/// Joins a pod cut off by [`pod_net_cut`] to the network again.
pub fn pod_net_restore(namespace: &str, pod: &str) -> anyhow::Result<String> {
    verb(&["pod-net-restore", &format!("{namespace}/{pod}")])
}

/// The bytes an isolated pod's TCP connections hold in their send queues (the first number of
/// `pod-net-unsent`), and the verb's whole answer. `target` is NS/POD or the pod's IP.
pub fn pod_net_unsent(target: &str) -> anyhow::Result<(u64, String)> {
    let said = verb(&["pod-net-unsent", target])?;
    let bytes = said
        .split("): ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("pod-net-unsent said: {said}"))?;
    Ok((bytes, said))
}

/// SIGSTOP to every process of an isolated pod (NS/POD or its IP).
pub fn pod_freeze(target: &str) -> anyhow::Result<String> {
    verb(&["pod-freeze", target])
}

/// SIGCONT to every process of an isolated pod (NS/POD or its IP).
pub fn pod_thaw(target: &str) -> anyhow::Result<String> {
    verb(&["pod-thaw", target])
}

impl Testbed {
    /// The replicated source's proxied bootstrap (`127.0.0.1:19116,…`): PLAINTEXT through
    /// toxiproxy; metadata routes to every broker's proxied address.
    pub fn r_source_proxied_bootstrap(&self) -> &str {
        self.var("KMIRROR_R_SOURCE_PROXIED_BOOTSTRAP")
    }

    /// The replicated destination's proxied bootstrap (`127.0.0.1:29116,…`): SASL_PLAINTEXT
    /// (PLAIN, SCRAM-SHA-256/512) through toxiproxy.
    pub fn r_dest_proxied_bootstrap(&self) -> &str {
        self.var("KMIRROR_R_DEST_PROXIED_BOOTSTRAP")
    }

    /// The replicated source through the fault proxy (PLAINTEXT).
    pub fn r_source_proxied_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.r_source_proxied_bootstrap());
        c
    }

    /// The replicated destination through the fault proxy, SASL PLAIN as `user`.
    pub fn r_dest_proxied_config(&self, user: DestUser) -> ClientConfig {
        let mut c = self.dest_config(user);
        c.set("bootstrap.servers", self.r_dest_proxied_bootstrap());
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_reset_total_and_checks_targets() {
        let out = "net-reset: r-source-2 round 1/2: 3 of 4 connection(s) reset\n\
                   net-reset: r-source-2 round 2/2: 1 of 2 connection(s) reset\n\
                   net-reset: r-source-2: 4 connection(s) reset in 2 round(s) (9 since up)\n";
        assert_eq!(parse_reset_total(out), Some(4));
        assert_eq!(parse_reset_total("nothing"), None);
        assert_eq!(target(Cluster::RDestination, 3).unwrap(), "r-destination-3");
        assert!(target(Cluster::Source, 1).is_err());
        assert!(target(Cluster::RSource, 4).is_err());
    }
}
