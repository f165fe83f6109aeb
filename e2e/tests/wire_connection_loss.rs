//! The wire client (kmirror-wire) recovers from a lost connection: outstanding requests fail at
//! once as retriable, the next request reconnects, and idempotent batches sent again unchanged
//! land exactly once. Its own test binary: connections are killed per process (`ss -K`), which
//! must not hit other tests' clients.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::{DestUser, create_topic, unique_name};
use kmirror_e2e::wire::wire_config;
use kmirror_wire::{
    Client, Codec, FetchOptions, FetchPartition, Isolation, OffsetSpec, ProduceOptions, WireError,
};

/// Local ports of this process's TCP connections to `port` (from `ss -tnp`).
fn own_connections(port: u16) -> Vec<String> {
    let out = std::process::Command::new("ss")
        .args([
            "-tnpH",
            "state",
            "established",
            &format!("( dport = :{port} )"),
        ])
        .output()
        .expect("ss");
    let me = format!("pid={},", std::process::id());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&me))
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

/// Kills this process's connections to `port` (`ss -K`: the kernel aborts the sockets).
fn kill_connections(port: u16) -> usize {
    let local = own_connections(port);
    for address in &local {
        let status = std::process::Command::new("ss")
            .args([
                "-K",
                "-tn",
                "src",
                address,
                "dport",
                "=",
                &format!(":{port}"),
            ])
            .output()
            .expect("ss -K");
        assert!(status.status.success(), "ss -K failed");
    }
    local.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_recovers_from_a_lost_connection() {
    let bed = Testbed::get();
    let topic = unique_name("wire-lost");
    create_topic(
        &bed.dest_config(DestUser::Admin),
        &topic,
        1,
        &[("compression.type", "producer")],
    )
    .await
    .expect("destination topic");
    let dest = Client::connect(wire_config(
        &bed.dest_config_with(DestUser::Mirror, "SCRAM-SHA-512"),
    ))
    .await
    .expect("connect");
    let producer = dest.init_producer_id().await.unwrap();
    let port: u16 = bed
        .dest_bootstrap()
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let batches: Vec<Bytes> = (0..5)
        .map(|i| {
            let recs: Vec<_> = (0..100)
                .map(|j| kmirror_wire::records::Record {
                    offset: 0,
                    timestamp: 1_700_000_000_000 + j,
                    key: None,
                    value: Some(Bytes::from(format!("value {i}/{j}").repeat(20))),
                    headers: vec![],
                })
                .collect();
            kmirror_wire::records::encode_batch(
                &recs,
                Codec::Zstd,
                0,
                kmirror_wire::records::BatchProducer {
                    producer_id: producer.id,
                    producer_epoch: producer.epoch,
                    base_sequence: i * 100,
                },
            )
            .unwrap()
        })
        .collect();
    // A long poll on the empty partition is outstanding when the connection dies.
    let poll = {
        let dest = dest.clone();
        let topic = topic.clone();
        tokio::spawn(async move {
            dest.fetch(
                &topic,
                &[FetchPartition::new(0, 0)],
                &FetchOptions {
                    max_wait: Duration::from_secs(20),
                    min_bytes: 1_000_000_000,
                    ..FetchOptions::default()
                },
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut in_flight = Vec::new();
    for b in &batches {
        in_flight.push(
            dest.send_produce(&topic, 0, b.clone(), &ProduceOptions::default())
                .await
                .unwrap(),
        );
    }
    let killed = kill_connections(port);
    assert!(
        killed >= 1,
        "the client's connection to the destination was found"
    );
    let started = std::time::Instant::now();
    let err = poll.await.unwrap().unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed at once"
    );
    assert!(
        matches!(err, WireError::Disconnected { .. }) && err.is_retriable(),
        "{err}"
    );
    eprintln!("outstanding fetch: {err}");
    let mut answered = BTreeMap::new();
    for (i, p) in in_flight.into_iter().enumerate() {
        match p.wait().await {
            Ok(p) => {
                answered.insert(i, p.base_offset);
            }
            Err(e) => assert!(e.is_retriable(), "{e}"),
        }
    }
    eprintln!("answered before the loss: {answered:?}");
    // Resend everything unanswered, unchanged and in order; the broker knows what it has.
    for (i, b) in batches.iter().enumerate() {
        if answered.contains_key(&i) {
            continue;
        }
        let p = dest
            .produce(&topic, 0, b.clone(), &ProduceOptions::default())
            .await
            .expect("resend after reconnecting");
        answered.insert(i, p.base_offset);
    }
    assert_eq!(
        answered.values().copied().collect::<Vec<_>>(),
        vec![0, 100, 200, 300, 400]
    );
    let end = dest
        .list_offsets(
            &topic,
            &[(0, OffsetSpec::Latest)],
            Isolation::ReadUncommitted,
        )
        .await
        .unwrap();
    assert_eq!(end[0].offset, 500, "each batch exactly once");
    assert!(!own_connections(port).is_empty(), "reconnected");
}
