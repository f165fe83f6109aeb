//! The mirror under test in the soak: kmirror installed with its Helm chart (two operator
//! replicas, leader election), a ClusterMirror from the replicated source to the replicated
//! destination over the soak's topics, the partitions' status as the operator reports it, and
//! the `kubectl mirror` plugin.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::Testbed;
use crate::operator::Scenario;
use crate::testbed::repo_root;

/// The ClusterMirror's name.
pub const MIRROR: &str = "dr";

/// Runs a program of the bed with its KUBECONFIG; stdout, or an error with both outputs.
fn run(bed: &Testbed, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .env("KUBECONFIG", bed.var("KUBECONFIG"))
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(
        out.status.success(),
        "{} {} failed: {}",
        program.rsplit('/').next().unwrap_or(program),
        args.join(" "),
        text.trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `helm install` of the chart into `ns`: two operator replicas with leader election, the
/// workspace's binaries (the node agent ignores images), each pod on its own IP.
pub fn helm_install(bed: &Testbed, ns: &str) -> anyhow::Result<()> {
    let chart = repo_root().join("charts/kmirror");
    run(
        bed,
        bed.var("KMIRROR_HELM"),
        &[
            "install",
            "kmirror",
            chart.to_str().unwrap_or_default(),
            "--namespace",
            ns,
            "--wait",
            "--timeout",
            "240s",
            "--set",
            "replicaCount=2",
            "--set",
            "leaderElection.enabled=true",
            "--set",
            "image.repository=kmirror",
            "--set",
            "image.tag=soak",
            "--set",
            "fetcherImage=kmirror:soak",
            "--set-string",
            "http.host=$(POD_IP)",
            "--set",
            "logging.format=text",
            "--set",
            "statusIntervalMs=1000",
        ],
    )?;
    Ok(())
}

/// `helm uninstall` (waits for the operator pods to go).
pub fn helm_uninstall(bed: &Testbed, ns: &str) -> anyhow::Result<()> {
    run(
        bed,
        bed.var("KMIRROR_HELM"),
        &[
            "uninstall",
            "kmirror",
            "--namespace",
            ns,
            "--wait",
            "--timeout",
            "120s",
        ],
    )?;
    Ok(())
}

/// The ClusterMirror: every topic starting with `prefix`, the soak's consumer group synced,
/// three partitions per fetcher pod. Both sides through the bed's fault proxy (the PROXIED
/// listeners), so that the network faults reach the mirror's clients.
pub async fn apply(bed: &Testbed, s: &Scenario, prefix: &str) {
    s.secret(
        "destination-credentials",
        "password",
        bed.var("KMIRROR_MIRROR_PASSWORD"),
    )
    .await;
    s.apply_mirror(
        MIRROR,
        json!({
            "source": {"bootstrapServers": bed.r_source_proxied_bootstrap()},
            "destination": {
                "bootstrapServers": bed.r_dest_proxied_bootstrap(),
                "allowInsecure": true,
                "sasl": {"mechanism": "PLAIN", "username": "mirror",
                         "password": {"name": "destination-credentials", "key": "password"}}
            },
            "topics": {"include": [{"prefix": prefix}]},
            "sync": {"interval": "5s",
                     "consumerGroups": {"enabled": true, "include": [{"name": super::workload::GROUP}]}},
            "fetcher": {"partitionsPerPod": 3}
        }),
    )
    .await;
}

/// `kubectl mirror ARGS -n NS`.
pub fn plugin(bed: &Testbed, ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let binary = crate::fetcher::binary("kubectl-mirror");
    let mut all = args.to_vec();
    all.extend(["-n", ns]);
    run(bed, binary.to_str().unwrap_or_default(), &all)
}

/// One partition as the MirrorTopic status shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionView {
    /// The ClusterMirror.
    pub mirror: String,
    /// The MirrorTopic's name.
    pub mirror_topic: String,
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// State.
    pub state: PartitionState,
    /// Lag, records.
    pub lag: Option<i64>,
    /// Lag, seconds.
    pub lag_seconds: Option<f64>,
    /// Last mirrored source offset.
    pub last_mirrored: Option<i64>,
    /// Offsets identical so far.
    pub offsets_identical: Option<bool>,
    /// Why it failed, if it did.
    pub last_error: Option<String>,
    /// Failed retries so far; -1 when the failure is not retryable (it waits for a person).
    pub retry_attempt: Option<i32>,
}

impl PartitionView {
    /// `topic-partition`.
    pub fn label(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// FAILED with a reason and not retried by the operator: it waits for a person.
    pub fn failed_for_good(&self) -> bool {
        self.state == PartitionState::Failed
            && self.last_error.is_some()
            && self.retry_attempt.is_some_and(|a| a < 0)
    }
}

/// Every partition of every MirrorTopic in the namespace.
pub async fn snapshot(s: &Scenario) -> anyhow::Result<Vec<PartitionView>> {
    let topics = Api::<MirrorTopic>::namespaced(s.client.clone(), &s.ns)
        .list(&ListParams::default())
        .await?
        .items;
    let mut out = Vec::new();
    for t in topics {
        let name = t.metadata.name.clone().unwrap_or_default();
        for p in t.status.map(|st| st.partitions).unwrap_or_default() {
            out.push(PartitionView {
                mirror: t.spec.mirror.clone(),
                mirror_topic: name.clone(),
                topic: t.spec.source_topic.clone(),
                partition: p.partition,
                state: p.state,
                lag: p.lag,
                lag_seconds: p.lag_seconds,
                last_mirrored: p.last_mirrored_offset,
                offsets_identical: p.offsets_identical,
                last_error: p.last_error,
                retry_attempt: p.retry_attempt,
            });
        }
    }
    out.sort_by(|a, b| (&a.mirror, &a.topic, a.partition).cmp(&(&b.mirror, &b.topic, b.partition)));
    Ok(out)
}

/// The highest lags seen.
#[derive(Debug, Default, Clone)]
pub struct Monitor {
    /// Highest lag in records, and where.
    pub max_lag: Option<(i64, String)>,
    /// Highest lag in seconds, and where.
    pub max_lag_seconds: Option<(f64, String)>,
    /// The last snapshot.
    pub last: Vec<PartitionView>,
}

impl Monitor {
    /// Takes a snapshot into account.
    pub fn observe(&mut self, views: &[PartitionView]) {
        for v in views.iter().filter(|v| v.mirror == MIRROR) {
            if let Some(lag) = v.lag
                && self.max_lag.as_ref().is_none_or(|(m, _)| lag > *m)
            {
                self.max_lag = Some((lag, v.label()));
            }
            if let Some(secs) = v.lag_seconds
                && self.max_lag_seconds.as_ref().is_none_or(|(m, _)| secs > *m)
            {
                self.max_lag_seconds = Some((secs, v.label()));
            }
        }
        self.last = views.to_vec();
    }

    /// Polls the status for `d`, observing it.
    pub async fn watch_for(&mut self, s: &Scenario, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if let Ok(v) = snapshot(s).await {
                self.observe(&v);
            }
            let left = end.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(Duration::from_secs(2))).await;
        }
    }
}

/// Whether a partition of the forward mirror counts as caught up: MIRRORING with lag at most
/// `lag_ok`.
pub fn caught_up(v: &PartitionView, lag_ok: i64) -> bool {
    v.state == PartitionState::Mirroring && v.lag.is_some_and(|l| l <= lag_ok)
}

/// Waits until every partition of `mirror` not `excluded` is caught up on two polls in a row;
/// the time it took, or what was still behind after `timeout`.
pub async fn wait_recovered(
    s: &Scenario,
    monitor: &mut Monitor,
    mirror: &str,
    lag_ok: i64,
    timeout: Duration,
    excluded: impl Fn(&PartitionView) -> bool,
) -> Result<Duration, String> {
    let start = Instant::now();
    let mut good_polls = 0;
    let mut behind = String::new();
    while start.elapsed() < timeout {
        if let Ok(views) = snapshot(s).await {
            monitor.observe(&views);
            let lagging: Vec<&PartitionView> = views
                .iter()
                .filter(|v| v.mirror == mirror && !excluded(v))
                .filter(|v| !caught_up(v, lag_ok))
                .collect();
            let any = views.iter().any(|v| v.mirror == mirror);
            if lagging.is_empty() && any {
                good_polls += 1;
                if good_polls >= 2 {
                    return Ok(start.elapsed());
                }
            } else {
                good_polls = 0;
                behind = describe(&lagging);
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Err(format!("not caught up after {timeout:?}: {behind}"))
}

/// `topic-p STATE lag N (error)` for each view, briefly.
pub fn describe(views: &[&PartitionView]) -> String {
    let mut by_state: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in views {
        let mut item = v.label();
        if let Some(l) = v.lag {
            item.push_str(&format!(" lag {l}"));
        }
        if let Some(e) = &v.last_error {
            item.push_str(&format!(" ({e})"));
        }
        by_state
            .entry(format!("{:?}", v.state).to_uppercase())
            .or_default()
            .push(item);
    }
    by_state
        .into_iter()
        .map(|(state, items)| format!("{state}: {}", items.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(topic: &str, p: i32, state: PartitionState, lag: Option<i64>) -> PartitionView {
        PartitionView {
            mirror: MIRROR.into(),
            mirror_topic: topic.into(),
            topic: topic.into(),
            partition: p,
            state,
            lag,
            lag_seconds: lag.map(|l| l as f64 / 10.0),
            last_mirrored: None,
            offsets_identical: Some(true),
            last_error: None,
            retry_attempt: None,
        }
    }

    #[test]
    fn monitor_keeps_the_highest_lag_and_where() {
        let mut m = Monitor::default();
        m.observe(&[
            view("a", 0, PartitionState::Mirroring, Some(5)),
            view("b", 1, PartitionState::Mirroring, Some(50)),
        ]);
        m.observe(&[view("a", 0, PartitionState::Mirroring, Some(20))]);
        assert_eq!(m.max_lag, Some((50, "b-1".to_string())));
        assert_eq!(m.max_lag_seconds.map(|(s, _)| s), Some(5.0));
    }

    #[test]
    fn only_a_failure_the_operator_does_not_retry_is_for_good() {
        let failed = |retry: Option<i32>, error: Option<&str>| PartitionView {
            retry_attempt: retry,
            last_error: error.map(String::from),
            ..view("t", 0, PartitionState::Failed, None)
        };
        assert!(failed(Some(-1), Some("source diverged at 10")).failed_for_good());
        assert!(!failed(Some(2), Some("no write lease within 120s")).failed_for_good());
        assert!(!failed(Some(-1), None).failed_for_good(), "no reason");
        assert!(!failed(None, Some("x")).failed_for_good());
        let mirroring = PartitionView {
            retry_attempt: Some(-1),
            ..view("t", 0, PartitionState::Mirroring, Some(0))
        };
        assert!(!mirroring.failed_for_good());
    }

    #[test]
    fn caught_up_needs_mirroring_and_a_small_lag() {
        assert!(caught_up(
            &view("a", 0, PartitionState::Mirroring, Some(3)),
            10
        ));
        assert!(!caught_up(
            &view("a", 0, PartitionState::Mirroring, Some(30)),
            10
        ));
        assert!(!caught_up(
            &view("a", 0, PartitionState::Mirroring, None),
            10
        ));
        assert!(!caught_up(
            &view("a", 0, PartitionState::Failed, Some(0)),
            10
        ));
        let failed = PartitionView {
            last_error: Some("source diverged at 10".into()),
            ..view("d", 0, PartitionState::Failed, None)
        };
        assert_eq!(
            describe(&[&failed, &view("a", 1, PartitionState::Preparing, Some(7))]),
            "FAILED: d-0 (source diverged at 10); PREPARING: a-1 lag 7"
        );
    }
}
