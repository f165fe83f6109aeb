//! The network verbs of the test bed do what they say to real brokers through toxiproxy: a cut
//! broker's proxied connections hang (not refused) and a proxied producer stalls while direct
//! clients do not, until healed; resets tear open connections down mid-request and are counted; latency
//! shows in every round trip; a bandwidth limit slows a proxied consumer.
//!
//! The tests share the replicated pair's proxies, so they run one at a time (nextest group
//! `bed-faults`, and the fault lock), and each leaves the network healed.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kmirror_e2e::Testbed;
use kmirror_e2e::faults::{self, Cluster};
use kmirror_e2e::kafka::{TestRecord, produce_all, unique_name};

const ON: Cluster = Cluster::RSource;

/// The proxied address of broker `n` of the replicated source (`127.0.0.1:191N6`).
fn proxied(bed: &Testbed, n: usize) -> String {
    bed.r_source_proxied_bootstrap()
        .split(',')
        .nth(n - 1)
        .expect("three proxied brokers")
        .to_string()
}

/// One ApiVersions (v0) round trip on `s`; its duration. Errors as the socket reports them.
fn api_versions(s: &mut TcpStream) -> std::io::Result<Duration> {
    // size 10, api key 18, version 0, correlation id 1, empty client id
    const REQ: [u8; 14] = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0];
    let t0 = Instant::now();
    s.write_all(&REQ)?;
    let mut size = [0u8; 4];
    s.read_exact(&mut size)?;
    let mut body = vec![0u8; u32::from_be_bytes(size) as usize];
    s.read_exact(&mut body)?;
    assert_eq!(&body[..4], &[0, 0, 0, 1], "the correlation id comes back");
    Ok(t0.elapsed())
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn records(n: usize, size: usize) -> Vec<TestRecord> {
    (0..n)
        .map(|i| TestRecord {
            partition: 0,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(vec![b'a' + (i % 26) as u8; size]),
            headers: Vec::new(),
        })
        .collect()
}

/// A fresh one-partition RF 3 topic on the replicated source; its leader.
async fn topic(bed: &Testbed, prefix: &str) -> (String, i32) {
    let topic = unique_name(prefix);
    faults::create_replicated_topic(&bed.r_source_config(), &topic, 1, &[])
        .await
        .expect("create topic");
    let o = faults::wait_offsets(ON, &topic, 0, Duration::from_secs(60), "a leader", |o| {
        o.leader > 0 && o.isr.len() == 3
    })
    .expect("topic ready");
    (topic, o.leader)
}

#[tokio::test]
async fn net_cut_hangs_proxied_connections_and_stalls_a_producer_until_healed() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let (topic, leader) = topic(bed, "net-cut").await;
    let addr = proxied(bed, leader as usize);
    let mut before = connect(&addr);
    api_versions(&mut before).expect("the proxy passes requests before the cut");

    let said = faults::net_cut(ON, leader, None).unwrap();
    assert!(said.contains("blackholed"), "{said}");
    // An open connection hangs: no answer, no close.
    before
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let e = api_versions(&mut before).expect_err("no answer through a cut proxy");
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "a hang, not {e:?}"
    );
    // A new one is accepted (not refused) and hangs too.
    let mut during = connect(&addr);
    during
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let e = api_versions(&mut during).expect_err("no answer on a new connection");
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e:?}"
    );
    // A producer through the proxy cannot deliver to the cut leader; a direct one can.
    let timeout = [("message.timeout.ms", "5000")];
    let stalled = produce_all(
        &bed.r_source_proxied_config(),
        &topic,
        &records(3, 10),
        &timeout,
    );
    assert!(
        stalled.is_err(),
        "a proxied producer delivered to a cut leader"
    );
    produce_all(&bed.r_source_config(), &topic, &records(3, 10), &[])
        .expect("the direct listener is not affected");

    let healed = faults::net_heal(Some((ON, leader))).unwrap();
    assert!(healed.contains("2 toxic(s) removed"), "{healed}");
    api_versions(&mut connect(&addr)).expect("a new connection passes after the heal");
    produce_all(
        &bed.r_source_proxied_config(),
        &topic,
        &records(3, 10),
        &[("message.timeout.ms", "60000")],
    )
    .expect("a proxied producer delivers again after the heal");
}

#[test]
fn net_reset_tears_down_open_connections_mid_request_and_counts_them() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let addr = proxied(bed, 2);
    let mut conns: Vec<TcpStream> = (0..3).map(|_| connect(&addr)).collect();
    for c in &mut conns {
        api_versions(c).expect("round trip before the reset");
    }
    // Each connection keeps talking until it fails; how each ended is recorded.
    let stop = Arc::new(AtomicBool::new(false));
    let resets = Arc::new(AtomicU32::new(0));
    let talkers: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            let (stop, resets) = (stop.clone(), resets.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match api_versions(&mut c) {
                        Ok(_) => std::thread::sleep(Duration::from_millis(50)),
                        Err(e) => {
                            // Torn down mid-request: an RST, or a close before the answer.
                            if matches!(
                                e.kind(),
                                ErrorKind::ConnectionReset
                                    | ErrorKind::BrokenPipe
                                    | ErrorKind::UnexpectedEof
                                    | ErrorKind::ConnectionAborted
                            ) {
                                resets.fetch_add(1, Ordering::Relaxed);
                            }
                            return format!("{e:?}");
                        }
                    }
                }
                "still open".to_string()
            })
        })
        .collect();

    let done = faults::net_reset(ON, 2, 2, Duration::from_millis(800)).unwrap();
    stop.store(true, Ordering::Relaxed);
    let ends: Vec<String> = talkers.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        resets.load(Ordering::Relaxed),
        3,
        "every open connection was reset: {ends:?}\n{}",
        done.output
    );
    assert!(done.reset >= 3, "counted {}: {}", done.reset, done.output);
    assert!(
        faults::net_status().unwrap().contains("r-source-2: "),
        "net-status lists the proxy"
    );
    api_versions(&mut connect(&addr)).expect("new connections pass after the resets");
}

#[test]
fn net_latency_delays_every_round_trip_until_removed() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let addr = proxied(bed, 3);
    let mut c = connect(&addr);
    let base = api_versions(&mut c).unwrap();

    let said =
        faults::net_latency(ON, 3, Duration::from_millis(400), Duration::ZERO, None).unwrap();
    assert!(said.contains("400 ms"), "{said}");
    // The toxic joins the open connection too.
    for _ in 0..3 {
        let rtt = api_versions(&mut c).unwrap();
        assert!(
            rtt >= Duration::from_millis(390),
            "round trip {rtt:?} under 400 ms latency"
        );
    }
    faults::net_heal(Some((ON, 3))).unwrap();
    let rtt = api_versions(&mut connect(&addr)).unwrap();
    assert!(
        rtt < Duration::from_millis(300),
        "round trip {rtt:?} after the heal (before the fault: {base:?})"
    );
}

#[tokio::test]
async fn net_bandwidth_slows_a_proxied_consumer() {
    let _x = faults::exclusive();
    let bed = faults::replicated();
    let (topic, leader) = topic(bed, "net-bw").await;
    // 40 records of 10 KB: 400 KB.
    produce_all(&bed.r_source_config(), &topic, &records(40, 10_000), &[]).unwrap();
    faults::net_bandwidth(ON, leader, 50, None).unwrap();
    let t0 = Instant::now();
    let read = faults::read_values(
        &bed.r_source_proxied_config(),
        &topic,
        0,
        0,
        "read_uncommitted",
    )
    .unwrap();
    let slow = t0.elapsed();
    faults::net_heal(Some((ON, leader))).unwrap();
    assert_eq!(read.len(), 40);
    // 400 KB at 50 KB/s: 8 s; well above what the direct path takes.
    assert!(
        slow >= Duration::from_secs(4),
        "read 400 KB at 50 KB/s in {slow:?}"
    );
    let t1 = Instant::now();
    faults::read_values(
        &bed.r_source_proxied_config(),
        &topic,
        0,
        0,
        "read_uncommitted",
    )
    .unwrap();
    assert!(
        t1.elapsed() < slow / 2,
        "after the heal: {:?}, limited: {slow:?}",
        t1.elapsed()
    );
}

/// A pod that tries to reach the source's broker 1 (direct listener) twice a second and logs
/// each attempt's outcome with a counter.
fn reaching_pod(bed: &Testbed) -> k8s_openapi::api::core::v1::Pod {
    let broker = bed
        .r_source_config()
        .get("bootstrap.servers")
        .unwrap()
        .to_string();
    let (host, port) = broker.split(',').next().unwrap().split_once(':').unwrap();
    let script = format!(
        "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); \
         if timeout 1 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>/dev/null; \
         then echo \"reach ok $i\"; else echo \"reach fail $i\"; fi; sleep 0.3; done"
    );
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "reacher"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "ignored",
                            "command": ["/bin/bash", "-c", script]}]
        }
    }))
    .unwrap()
}

/// The last `reach` outcome in a log, with its counter.
fn last_reach(log: &str) -> Option<(bool, u64)> {
    let line = log.lines().rev().find(|l| l.starts_with("reach "))?;
    let mut words = line.split_whitespace().skip(1);
    let ok = words.next()? == "ok";
    Some((ok, words.next()?.parse().ok()?))
}

#[tokio::test]
async fn pod_net_cut_isolates_a_running_pod_until_restored() {
    use k8s_openapi::api::core::v1::Pod;
    use kmirror_e2e::kube::{container_status, in_namespace, is_ready, pod_log, wait_for};
    use kube::Api;
    use kube::api::PostParams;
    let _x = faults::exclusive();
    let bed = faults::replicated();
    in_namespace("fault-podnet", |client, ns| async move {
        faults::isolate_namespace(&client, &ns).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &reaching_pod(bed))
            .await?;
        let pod = wait_for(&pods, "reacher", Duration::from_secs(30), "Ready", is_ready).await?;
        let ip = pod.status.and_then(|s| s.pod_ip).unwrap_or_default();
        assert!(
            ip.starts_with("10."),
            "an isolated pod's IP is its namespace's: {ip}"
        );
        let log = || pod_log(bed, &ns, "reacher", "main");
        let wait_reach = |want: bool, after: u64| {
            let deadline = Instant::now() + Duration::from_secs(20);
            async move {
                loop {
                    if let Some((ok, n)) = last_reach(&log())
                        && ok == want
                        && n > after
                    {
                        return Ok::<u64, anyhow::Error>(n);
                    }
                    anyhow::ensure!(
                        Instant::now() < deadline,
                        "no 'reach {}' after attempt {after}; log tail: {:?}",
                        if want { "ok" } else { "fail" },
                        log().lines().rev().take(5).collect::<Vec<_>>()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let reached = wait_reach(true, 0).await?;

        let said = faults::pod_net_cut(&ns, "reacher")?;
        assert!(said.contains("cut off"), "{said}");
        let failed = wait_reach(false, reached).await?;
        // Still the same process, still counting: it lives on without a network.
        let later = wait_reach(false, failed + 1).await?;
        let pod = pods.get("reacher").await?;
        let status = container_status(&pod, "main").expect("status");
        assert_eq!(status.restart_count, 0, "the process was not restarted");
        assert!(later > failed);

        let said = faults::pod_net_restore(&ns, "reacher")?;
        assert!(said.contains("joined again"), "{said}");
        wait_reach(true, later).await?;
        Ok(())
    })
    .await;
}
