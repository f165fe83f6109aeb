//! Fault injection for tests: the replicated pair of the bed (`e2e/testbed.sh up --brokers 3`),
//! the fault verbs of `e2e/testbed.sh` (kill, freeze and restart brokers, move a leader, freeze a
//! follower, unclean election, zombie pods, killing the operator leader), and what they show:
//! a partition's leader, ISR, high watermark and every replica's log end offset. Network faults
//! (toxiproxy in front of each broker): [`net`], re-exported here.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use serde::Deserialize;

use crate::Testbed;
use crate::kafka::DestUser;
use crate::testbed::script;

pub mod net;
pub use net::*;

/// A cluster of the bed, as the fault verbs name it (`--on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cluster {
    /// The replicated source (3 brokers).
    RSource,
    /// The replicated destination (3 brokers).
    RDestination,
    /// The one-broker source.
    Source,
    /// The one-broker destination.
    Destination,
}

impl Cluster {
    /// The name the verbs take.
    pub fn as_str(self) -> &'static str {
        match self {
            Cluster::RSource => "r-source",
            Cluster::RDestination => "r-destination",
            Cluster::Source => "source",
            Cluster::Destination => "destination",
        }
    }

    /// The component name of broker `id` (`kafka-r-source-2`; the one-broker clusters have one).
    pub fn broker(self, id: i32) -> String {
        match self {
            Cluster::RSource | Cluster::RDestination => format!("kafka-{}-{id}", self.as_str()),
            Cluster::Source | Cluster::Destination => format!("kafka-{}", self.as_str()),
        }
    }
}

/// A partition as the brokers report it (`e2e/testbed.sh offsets … --json`).
#[derive(Debug, Clone, Deserialize)]
pub struct PartitionOffsets {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Leader broker id (-1: none).
    pub leader: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replica broker ids, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// The leader's high watermark: what consumers can read.
    pub hw: Option<i64>,
    /// The leader's last stable offset.
    pub lso: Option<i64>,
    /// The log start offset.
    pub log_start: Option<i64>,
    /// Each replica's log end offset, by broker id (None: the broker did not answer).
    pub leo: BTreeMap<String, Option<i64>>,
    /// Queries that failed, and why.
    pub errors: BTreeMap<String, String>,
}

impl PartitionOffsets {
    /// The log end offset of replica `id`.
    pub fn leo_of(&self, id: i32) -> Option<i64> {
        self.leo.get(&id.to_string()).copied().flatten()
    }

    /// The leader's log end offset.
    pub fn leader_leo(&self) -> Option<i64> {
        self.leo_of(self.leader)
    }

    /// The in-sync followers (ISR members other than the leader).
    pub fn in_sync_followers(&self) -> Vec<i32> {
        self.isr
            .iter()
            .copied()
            .filter(|&r| r != self.leader)
            .collect()
    }
}

static REPLICATED: OnceLock<Testbed> = OnceLock::new();

/// The bed with its replicated pair running (`up --brokers 3`; reuses what runs).
pub fn replicated() -> &'static Testbed {
    REPLICATED.get_or_init(|| Testbed::start(&["--brokers", "3"]))
}

/// Exclusive use of the bed's brokers for injecting faults, across test processes and git
/// worktrees that share one bed: a test that kills, freezes or moves anything holds this guard
/// for as long as its faults last. In `make test` it never waits: nextest runs these tests one at
/// a time (their test group `bed-faults` in .config/nextest.toml). The replicated pair is healed
/// when the guard goes.
pub struct FaultLock(#[allow(dead_code)] std::fs::File);

impl Drop for FaultLock {
    fn drop(&mut self) {
        if let Err(e) = heal() {
            eprintln!("healing the replicated pair failed: {e:#}");
        }
    }
}

/// Takes the bed's fault lock, waiting for whoever holds it.
pub fn exclusive() -> FaultLock {
    let bed = replicated();
    let path = std::path::Path::new(bed.var("KMIRROR_TESTBED_DIR")).join("faults.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    FaultLock(file)
}

/// Runs a verb of `e2e/testbed.sh` and returns what it printed on stdout.
pub fn verb(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(script())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "e2e/testbed.sh {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Leader, ISR, high watermark and log end offsets of a partition.
pub fn offsets(cluster: Cluster, topic: &str, partition: i32) -> anyhow::Result<PartitionOffsets> {
    let text = verb(&[
        "offsets",
        topic,
        &partition.to_string(),
        "--on",
        cluster.as_str(),
        "--json",
    ])?;
    Ok(serde_json::from_str(text.trim())?)
}

/// Polls [`offsets`] until `done` holds; returns the last answer. Fails after `timeout`.
pub fn wait_offsets(
    cluster: Cluster,
    topic: &str,
    partition: i32,
    timeout: Duration,
    what: &str,
    done: impl Fn(&PartitionOffsets) -> bool,
) -> anyhow::Result<PartitionOffsets> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = offsets(cluster, topic, partition);
        if let Ok(o) = &last
            && done(o)
        {
            return last;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what} of {topic}-{partition}; last: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// SIGKILLs a broker (`kafka-r-source-2`).
pub fn kill_broker(name: &str) -> anyhow::Result<String> {
    verb(&["kill", name])
}

/// Freezes a broker's process (SIGSTOP).
pub fn sigstop_broker(name: &str) -> anyhow::Result<String> {
    verb(&["sigstop", name])
}

/// Resumes a frozen broker (SIGCONT).
pub fn sigcont_broker(name: &str) -> anyhow::Result<String> {
    verb(&["sigcont", name])
}

/// Starts a stopped or killed broker, waiting until it runs.
pub fn start_broker(name: &str) -> anyhow::Result<String> {
    verb(&["start", name])
}

/// Stops (controlled shutdown) and starts a broker.
pub fn restart_broker(name: &str) -> anyhow::Result<String> {
    verb(&["restart", name])
}

/// Moves a partition's leadership (to broker `to`, or to an in-sync follower).
pub fn move_leader(
    cluster: Cluster,
    topic: &str,
    partition: i32,
    to: Option<i32>,
) -> anyhow::Result<String> {
    let p = partition.to_string();
    let to = to.map(|t| t.to_string());
    let mut args = vec!["move-leader", topic, &p];
    if let Some(t) = &to {
        args.push(t);
    }
    args.extend(["--on", cluster.as_str()]);
    verb(&args)
}

/// Freezes an in-sync follower of a partition (SIGSTOP of its broker).
pub fn freeze_follower(cluster: Cluster, topic: &str, partition: i32) -> anyhow::Result<String> {
    verb(&[
        "freeze-follower",
        topic,
        &partition.to_string(),
        "--on",
        cluster.as_str(),
    ])
}

/// Resumes every frozen broker.
pub fn thaw() -> anyhow::Result<String> {
    verb(&["thaw"])
}

/// Makes a partition's log diverge by an unclean leader election: `records` records written
/// to the leader alone (readable for `hold`) are replaced by as many others at the same offsets.
pub fn unclean_election(
    cluster: Cluster,
    topic: &str,
    partition: i32,
    records: usize,
    hold: Duration,
) -> anyhow::Result<String> {
    verb(&[
        "unclean-election",
        topic,
        &partition.to_string(),
        "--records",
        &records.to_string(),
        "--hold",
        &hold.as_secs().to_string(),
        "--on",
        cluster.as_str(),
    ])
}

/// Removes a pod object by force while its processes keep running (a lost node).
pub fn zombie(namespace: &str, pod: &str) -> anyhow::Result<String> {
    verb(&["zombie", &format!("{namespace}/{pod}")])
}

/// Kills a zombie pod's processes (`NAMESPACE/POD` or `all`).
pub fn zombie_kill(target: &str) -> anyhow::Result<String> {
    verb(&["zombie-kill", target])
}

/// The zombie pods: one line each, `NAMESPACE/POD uid=… ip=… since=… process-groups=…`.
pub fn zombies() -> anyhow::Result<String> {
    verb(&["zombies"])
}

/// SIGKILLs the process holding the operator's Lease in `namespace`; with `wait`, waits for
/// another holder.
pub fn kill_operator_leader(
    namespace: &str,
    lease: Option<&str>,
    wait: Option<Duration>,
) -> anyhow::Result<String> {
    operator_leader_verb("kill-operator-leader", namespace, lease, wait)
}

/// SIGSTOPs the process holding the operator's Lease until another replica holds it (at most
/// `wait`, default 60 s) and 5 s more, then SIGCONTs it: it thaws believing it still leads, and
/// two operators overlap until it notices (`freeze-operator-leader`).
pub fn freeze_operator_leader(
    namespace: &str,
    lease: Option<&str>,
    wait: Option<Duration>,
) -> anyhow::Result<String> {
    operator_leader_verb("freeze-operator-leader", namespace, lease, wait)
}

/// Runs an operator-leader verb with its `--lease` and `--wait` options.
fn operator_leader_verb(
    name: &str,
    namespace: &str,
    lease: Option<&str>,
    wait: Option<Duration>,
) -> anyhow::Result<String> {
    let wait = wait.map(|w| w.as_secs().max(1).to_string());
    let mut args = vec![name, namespace];
    if let Some(l) = lease {
        args.extend(["--lease", l]);
    }
    if let Some(w) = &wait {
        args.extend(["--wait", w]);
    }
    verb(&args)
}

/// Thaws every frozen broker and starts every stopped broker of the replicated pair, then waits
/// until each runs: the bed as a fault test should leave it.
pub fn heal() -> anyhow::Result<String> {
    verb(&["heal"])
}

/// Creates a topic with replication factor 3 (on the replicated pair), waiting for the result.
pub async fn create_replicated_topic(
    config: &ClientConfig,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(3));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics([&topic], &opts).await? {
        result.map_err(|(t, e)| anyhow::anyhow!("creating topic {t}: {e}"))?;
    }
    Ok(())
}

/// (offset, value) of every record of a partition from `from` up to its end at the time of the
/// call, read with `isolation` (`read_uncommitted` / `read_committed`).
pub fn read_values(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    from: i64,
    isolation: &str,
) -> anyhow::Result<Vec<(i64, Option<Vec<u8>>)>> {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", "kmirror-e2e-faults-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()?;
    let (_, high) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(30))?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(from))?;
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out: Vec<(i64, Option<Vec<u8>>)> = Vec::new();
    while out.last().map(|(o, _)| *o + 1).unwrap_or(from) < high {
        anyhow::ensure!(
            Instant::now() < deadline,
            "reading {topic}-{partition} up to {high} did not finish; got {} records",
            out.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(500)) {
            let m = m?;
            out.push((m.offset(), m.payload().map(<[u8]>::to_vec)));
        }
    }
    Ok(out)
}

impl Testbed {
    /// The replicated source over PLAINTEXT.
    pub fn r_source_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.var("KMIRROR_R_SOURCE_BOOTSTRAP"));
        c
    }

    /// The replicated destination over SASL PLAIN as `user`.
    pub fn r_dest_config(&self, user: DestUser) -> ClientConfig {
        let mut c = self.dest_config(user);
        c.set("bootstrap.servers", self.var("KMIRROR_R_DEST_BOOTSTRAP"));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_offsets_verb_output() {
        let text = r#"{"errors": {"leo-3": "timed out"}, "hw": 15, "isr": [3, 1, 2], "leader": 2,
            "leader_epoch": 3, "leo": {"1": 22, "2": 22, "3": null}, "log_start": 0, "lso": 15,
            "partition": 0, "replicas": [2, 3, 1], "topic": "t"}"#;
        let o: PartitionOffsets = serde_json::from_str(text).unwrap();
        assert_eq!(o.leader_leo(), Some(22));
        assert_eq!(o.leo_of(3), None);
        assert_eq!(o.hw, Some(15));
        assert_eq!(o.in_sync_followers(), vec![3, 1]);
        assert_eq!(Cluster::RSource.broker(2), "kafka-r-source-2");
        assert_eq!(Cluster::Destination.broker(1), "kafka-destination");
    }
}
