//! The pod and operator fault verbs of the test bed do what they say: `zombie` removes a pod
//! object by force while its process keeps running (a lost node) until `zombie-kill`, and
//! `kill-operator-leader` SIGKILLs the process holding the operator's Lease, so another takes
//! over, and `freeze-operator-leader` stops it until another leads (two operators overlap once
//! it thaws).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kmirror_e2e::Testbed;
use kmirror_e2e::faults;
use kmirror_e2e::kube::{container_status, in_namespace, is_ready, pod_log, wait_for, wait_gone};
use kmirror_e2e::operator::{OperatorProcess, Scenario};
use kube::Api;
use kube::api::PostParams;

const TIMEOUT: Duration = Duration::from_secs(30);

fn ticking_pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "ignored", "command": ["/bin/sh", "-c",
                "trap 'exit 0' TERM; while true; do echo tick; sleep 0.2; done"]}]
        }
    }))
    .unwrap()
}

fn pid_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// The process groups and IP the `zombies` verb lists for `ns/pod`.
fn zombie_entry(ns: &str, pod: &str) -> Option<(Vec<i32>, String)> {
    let listing = faults::zombies().expect("zombies");
    let line = listing
        .lines()
        .find(|l| l.starts_with(&format!("{ns}/{pod} ")))?
        .to_string();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or("")
            .to_string()
    };
    let pids = field("process-groups=")
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();
    Some((pids, field("ip=")))
}

#[tokio::test]
async fn zombie_pod_keeps_running_without_its_object_until_killed() {
    in_namespace("fault-zombie", |client, ns| async move {
        let bed = Testbed::get();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &ticking_pod("victim"))
            .await?;
        wait_for(&pods, "victim", TIMEOUT, "Ready", is_ready).await?;

        let said = faults::zombie(&ns, "victim")?;
        assert!(said.contains("deleted by force"), "{said}");
        assert!(
            pods.get_opt("victim").await?.is_none(),
            "the object is gone"
        );
        let (groups, ip) = zombie_entry(&ns, "victim").expect("listed as a zombie");
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert!(pid_alive(groups[0]), "the process still runs");
        let ticks = pod_log(bed, &ns, "victim", "main").matches("tick").count();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let later = pod_log(bed, &ns, "victim", "main").matches("tick").count();
        assert!(
            later > ticks,
            "the zombie keeps working: {ticks} -> {later} ticks"
        );

        // A replacement under the same name runs next to it, on another IP.
        pods.create(&PostParams::default(), &ticking_pod("victim"))
            .await?;
        let twin = wait_for(&pods, "victim", TIMEOUT, "the replacement Ready", is_ready).await?;
        let twin_ip = twin.status.and_then(|s| s.pod_ip).unwrap_or_default();
        assert_ne!(twin_ip, ip, "the zombie keeps its IP");
        assert!(pid_alive(groups[0]), "both run");

        let said = faults::zombie_kill(&format!("{ns}/victim"))?;
        assert!(said.contains("killed zombie"), "{said}");
        let deadline = Instant::now() + TIMEOUT;
        while pid_alive(groups[0]) {
            anyhow::ensure!(Instant::now() < deadline, "the zombie still runs");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(zombie_entry(&ns, "victim").is_none(), "no longer listed");
        let twin = pods.get("victim").await?;
        assert!(is_ready(&twin), "the replacement is untouched");
        pods.delete("victim", &Default::default()).await?;
        wait_gone(&pods, "victim", TIMEOUT).await?;
        Ok(())
    })
    .await;
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Two local operators with leader election (6 s leases); returns them as (leader, standby)
/// once one holds the Lease.
async fn leader_and_standby(s: &Scenario) -> (OperatorProcess, OperatorProcess) {
    let bed = Testbed::get();
    let args = [
        "--leader-election",
        "--lease-namespace",
        s.ns.as_str(),
        "--lease-duration-seconds",
        "6",
    ];
    let a = OperatorProcess::spawn(bed, &s.ns, &args);
    let b = OperatorProcess::spawn(bed, &s.ns, &args);
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        if let Some(h) = holder(&leases, "kmirror-operator").await {
            break h;
        }
        assert!(Instant::now() < deadline, "nobody took the lease");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if first == format!("kmirror-operator-{}", a.pid()) {
        (a, b)
    } else {
        assert_eq!(first, format!("kmirror-operator-{}", b.pid()));
        (b, a)
    }
}

#[tokio::test]
async fn killing_the_operator_leader_hands_the_lease_to_the_standby() {
    let bed = Testbed::get();
    let s = Scenario::new(bed, "fault-oplead").await;
    let (mut leader, mut standby) = leader_and_standby(&s).await;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let said = faults::kill_operator_leader(&s.ns, None, Some(Duration::from_secs(60))).unwrap();
    assert!(
        said.contains(&format!("local process pid {}", leader.pid())),
        "{said}"
    );
    let now = holder(&leases, "kmirror-operator").await;
    assert_eq!(
        now,
        Some(format!("kmirror-operator-{}", standby.pid())),
        "{said}"
    );
    assert!(!leader.alive(), "the old leader was killed");
    assert!(standby.alive());
    s.cleanup().await;
}

/// `freeze-operator-leader` stops the leader until the standby holds the Lease, then lets it
/// run again; the thawed one finds its renew deadline passed and exits, the standby leads on.
#[tokio::test]
async fn freezing_the_operator_leader_lets_the_standby_lead_and_the_thawed_one_steps_down() {
    let bed = Testbed::get();
    let s = Scenario::new(bed, "fault-opfreeze").await;
    let (mut leader, mut standby) = leader_and_standby(&s).await;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let said = faults::freeze_operator_leader(&s.ns, None, Some(Duration::from_secs(60))).unwrap();
    assert!(
        said.contains(&format!("SIGCONT to local process pid {}", leader.pid()))
            && said.contains(&format!("now held by kmirror-operator-{}", standby.pid())),
        "{said}"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while leader.alive() {
        assert!(
            Instant::now() < deadline,
            "the thawed leader still runs 15 s after SIGCONT: {}",
            leader.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(standby.alive());
    assert_eq!(
        holder(&leases, "kmirror-operator").await,
        Some(format!("kmirror-operator-{}", standby.pid()))
    );
    s.cleanup().await;
}

#[tokio::test]
async fn killing_a_pod_leader_kills_its_container_process() {
    in_namespace("fault-podlead", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &ticking_pod("operator-0"))
            .await?;
        wait_for(&pods, "operator-0", TIMEOUT, "Ready", is_ready).await?;
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kmirror-operator"},
            "spec": {"holderIdentity": "operator-0", "leaseDurationSeconds": 15}
        }))?;
        Api::<Lease>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &lease)
            .await?;

        let said = faults::kill_operator_leader(&ns, None, None)?;
        assert!(said.contains(&format!("pod {ns}/operator-0")), "{said}");
        let pod = wait_for(&pods, "operator-0", TIMEOUT, "a restart", |p| {
            container_status(p, "main").is_some_and(|c| c.restart_count >= 1)
        })
        .await?;
        let last = container_status(&pod, "main")
            .and_then(|c| c.last_state.clone()?.terminated)
            .expect("the killed instance's termination");
        assert_eq!(last.exit_code, 137, "killed by SIGKILL: {last:?}");
        Ok(())
    })
    .await;
}
