//! Micro-benchmark of the copy paths on the test bed: raw batches (kmirror-wire: fetch, rewrite
//! the header, produce) against librdkafka record by record (consume, produce), on a dense lz4
//! source topic. Each copy runs in its own process (exact CPU and peak RSS from `getrusage`);
//! the ratios are measured in the same run.
//!
//! ```sh
//! cargo run --release -p kmirror-e2e --example wire_copy_bench -- --megabytes 300 --runs 2
//! ```
//!
//! Options: `--megabytes N` (uncompressed payload, default 300), `--partitions N` (3), `--runs N`
//! (2, engines alternate), `--source-topic NAME` (reuse a topic filled by an earlier run).

use std::collections::VecDeque;
use std::process::Command;
use std::time::{Duration, Instant};

use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::{DestUser, Rng, TestRecord, create_topic, produce_all, unique_name};
use kmirror_e2e::wire::wire_config;
use kmirror_wire::{
    Client, FetchOptions, FetchPartition, InFlightProduce, Isolation, OffsetSpec, ProduceOptions,
    RawEntry, Rewrite, WireConfig,
};
use rdkafka::ClientConfig;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match arg(&args, "--engine").as_deref() {
        Some(engine) => child(engine, &args),
        None => parent(&args),
    }
}

/// Text-like JSON values of 500-1500 bytes: lz4 compresses them about 2:1.
fn payloads(megabytes: usize, partitions: i32) -> (Vec<TestRecord>, usize) {
    let words = [
        "checkout", "cart", "view", "search", "click", "mobile", "desktop", "sku", "promo",
        "basket", "user", "session", "price", "quantity", "category", "shoes", "books",
    ];
    let mut rng = Rng::new(42);
    let mut out = Vec::new();
    let mut bytes = 0;
    let mut i = 0;
    while bytes < megabytes * 1_000_000 {
        let len = 500 + rng.below(1000) as usize;
        let mut v = format!(
            "{{\"event\":\"{}\",\"user\":\"u{}\",\"ts\":{},\"items\":[",
            words[rng.below(words.len() as u64) as usize],
            rng.below(1_000_000),
            1_700_000_000_000u64 + rng.below(10_000_000)
        );
        while v.len() < len {
            v.push_str(&format!(
                "{{\"{}\":{},\"{}\":\"{}\"}},",
                words[rng.below(words.len() as u64) as usize],
                rng.below(100_000),
                words[rng.below(words.len() as u64) as usize],
                words[rng.below(words.len() as u64) as usize]
            ));
        }
        v.push_str("]}");
        let key = format!("user-{}", rng.below(100_000)).into_bytes();
        bytes += v.len() + key.len();
        out.push(TestRecord {
            partition: i % partitions,
            key: Some(key),
            value: Some(v.into_bytes()),
            headers: vec![("source".into(), b"bench".to_vec())],
        });
        i += 1;
    }
    (out, bytes)
}

struct Measured {
    cpu: f64,
    wall: f64,
    max_rss_mb: f64,
}

fn parent(args: &[String]) {
    let bed = Testbed::get();
    let megabytes: usize = arg(args, "--megabytes").map_or(300, |v| v.parse().unwrap());
    let partitions: i32 = arg(args, "--partitions").map_or(3, |v| v.parse().unwrap());
    let runs: usize = arg(args, "--runs").map_or(2, |v| v.parse().unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (topic, payload_bytes) = match arg(args, "--source-topic") {
        Some(topic) => {
            // Reused topics were filled by this generator with the same seed.
            let (_, bytes) = payloads(megabytes, partitions);
            (topic, bytes)
        }
        None => {
            let topic = unique_name("wire-bench");
            rt.block_on(create_topic(&bed.source_config(), &topic, partitions, &[]))
                .unwrap();
            let (records, bytes) = payloads(megabytes, partitions);
            eprintln!(
                "producing {} records ({:.0} MB payload) to {topic} with lz4 ...",
                records.len(),
                bytes as f64 / 1e6
            );
            produce_all(
                &bed.source_config(),
                &topic,
                &records,
                &[
                    ("compression.type", "lz4"),
                    ("linger.ms", "10"),
                    ("batch.size", "262144"),
                    ("acks", "1"),
                    ("enable.idempotence", "false"),
                ],
            )
            .unwrap();
            (topic, bytes)
        }
    };
    let source = rt
        .block_on(Client::connect(
            WireConfig::from_pairs([("bootstrap.servers", bed.source_bootstrap())]).unwrap(),
        ))
        .unwrap();
    let ends = rt
        .block_on(
            source.list_offsets(
                &topic,
                &(0..partitions)
                    .map(|p| (p, OffsetSpec::Latest))
                    .collect::<Vec<_>>(),
                Isolation::ReadCommitted,
            ),
        )
        .unwrap();
    let records: i64 = ends.iter().map(|o| o.offset).sum();
    eprintln!(
        "source {topic}: {records} records, {:.0} MB payload",
        payload_bytes as f64 / 1e6
    );

    let dest_client = rt
        .block_on(Client::connect(wire_config(
            &bed.dest_config(DestUser::Admin),
        )))
        .unwrap();
    let mut results: Vec<(&str, Measured)> = Vec::new();
    for run in 0..runs {
        let order: [&str; 2] = if run % 2 == 0 {
            ["wire", "rdkafka"]
        } else {
            ["rdkafka", "wire"]
        };
        for engine in order {
            let dest = unique_name(&format!("wire-bench-{engine}-{run}"));
            rt.block_on(create_topic(
                &bed.dest_config(DestUser::Admin),
                &dest,
                partitions,
                &[
                    ("compression.type", "producer"),
                    ("max.message.bytes", "16777216"),
                ],
            ))
            .unwrap();
            let m = spawn_child(bed, engine, &topic, &dest, partitions);
            let copied = rt
                .block_on(
                    dest_client.list_offsets(
                        &dest,
                        &(0..partitions)
                            .map(|p| (p, OffsetSpec::Latest))
                            .collect::<Vec<_>>(),
                        Isolation::ReadUncommitted,
                    ),
                )
                .unwrap();
            assert_eq!(
                copied.iter().map(|o| o.offset).collect::<Vec<_>>(),
                ends.iter().map(|o| o.offset).collect::<Vec<_>>(),
                "{engine} copied every record"
            );
            eprintln!(
                "run {run} {engine:8}: {:6.1} MB/s  {:6.2} CPU-s/GB  peak RSS {:5.1} MB",
                payload_bytes as f64 / 1e6 / m.wall,
                m.cpu / (payload_bytes as f64 / 1e9),
                m.max_rss_mb
            );
            results.push((engine, m));
        }
    }
    let median = |engine: &str, f: &dyn Fn(&Measured) -> f64| {
        let mut v: Vec<f64> = results
            .iter()
            .filter(|(e, _)| *e == engine)
            .map(|(_, m)| f(m))
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let gb = payload_bytes as f64 / 1e9;
    let mbs = |m: &Measured| payload_bytes as f64 / 1e6 / m.wall;
    let cpu = |m: &Measured| m.cpu / gb;
    let rss = |m: &Measured| m.max_rss_mb;
    println!(
        "\n{:.0} MB lz4 payload, {partitions} partitions, {runs} runs (medians)",
        gb * 1000.0
    );
    println!("engine     MB/s   CPU-s/GB  peak RSS MB");
    for engine in ["wire", "rdkafka"] {
        println!(
            "{engine:8} {:6.1}   {:8.2}   {:8.1}",
            median(engine, &mbs),
            median(engine, &cpu),
            median(engine, &rss)
        );
    }
    println!(
        "wire/rdkafka: throughput x{:.2}, CPU per GB x{:.3}, peak RSS x{:.2}",
        median("wire", &mbs) / median("rdkafka", &mbs),
        median("wire", &cpu) / median("rdkafka", &cpu),
        median("wire", &rss) / median("rdkafka", &rss)
    );
}

fn spawn_child(bed: &Testbed, engine: &str, source: &str, dest: &str, partitions: i32) -> Measured {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--engine",
            engine,
            "--source-topic",
            source,
            "--dest-topic",
            dest,
        ])
        .args(["--partitions", &partitions.to_string()])
        .env("BENCH_SOURCE", bed.source_bootstrap())
        .env("BENCH_DEST", bed.dest_bootstrap())
        .env("BENCH_USER", bed.var("KMIRROR_MIRROR_USER"))
        .env("BENCH_PASSWORD", bed.var("KMIRROR_MIRROR_PASSWORD"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{engine} copy failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fields: Vec<f64> = stdout
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    Measured {
        cpu: fields[0],
        wall: fields[1],
        max_rss_mb: fields[2],
    }
}

fn destination_properties() -> Vec<(String, String)> {
    vec![
        (
            "bootstrap.servers".into(),
            std::env::var("BENCH_DEST").unwrap(),
        ),
        ("security.protocol".into(), "SASL_PLAINTEXT".into()),
        ("sasl.mechanism".into(), "PLAIN".into()),
        ("sasl.username".into(), std::env::var("BENCH_USER").unwrap()),
        (
            "sasl.password".into(),
            std::env::var("BENCH_PASSWORD").unwrap(),
        ),
    ]
}

/// Copies the topic, then prints `cpu_seconds wall_seconds max_rss_mb`.
fn child(engine: &str, args: &[String]) {
    let source = arg(args, "--source-topic").unwrap();
    let dest = arg(args, "--dest-topic").unwrap();
    let partitions: i32 = arg(args, "--partitions").unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let wall = match engine {
        "wire" => rt.block_on(copy_wire(&source, &dest, partitions)),
        "rdkafka" => copy_rdkafka(&source, &dest, partitions),
        other => panic!("unknown engine {other}"),
    };
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // ru_maxrss keeps the parent's peak across fork and exec; VmHWM is this program's own.
    let peak_kb: f64 = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    println!(
        "{} {} {}",
        secs(usage.ru_utime) + secs(usage.ru_stime),
        wall.as_secs_f64(),
        peak_kb / 1024.0
    );
}

async fn copy_wire(source_topic: &str, dest_topic: &str, partitions: i32) -> Duration {
    let source = Client::connect(
        WireConfig::from_pairs([(
            "bootstrap.servers",
            std::env::var("BENCH_SOURCE").unwrap().as_str(),
        )])
        .unwrap(),
    )
    .await
    .unwrap();
    let props = destination_properties();
    let dest = Client::connect(
        WireConfig::from_pairs(props.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap(),
    )
    .await
    .unwrap();
    let ps: Vec<i32> = (0..partitions).collect();
    let ends: Vec<i64> = source
        .list_offsets(
            source_topic,
            &ps.iter()
                .map(|&p| (p, OffsetSpec::Latest))
                .collect::<Vec<_>>(),
            Isolation::ReadCommitted,
        )
        .await
        .unwrap()
        .iter()
        .map(|o| o.offset)
        .collect();
    let producer = dest.init_producer_id().await.unwrap();
    let started = Instant::now();
    let mut next = vec![0i64; partitions as usize];
    let mut sequence = vec![0i32; partitions as usize];
    let mut in_flight: Vec<VecDeque<(InFlightProduce, i64)>> =
        (0..partitions).map(|_| VecDeque::new()).collect();
    let options = FetchOptions {
        isolation: Isolation::ReadCommitted,
        max_wait: Duration::from_millis(100),
        ..FetchOptions::default()
    };
    let produce = ProduceOptions::default();
    async fn settle(pending: (InFlightProduce, i64)) {
        let (p, expected) = pending;
        let got = p.wait().await.expect("produce").base_offset;
        assert_eq!(got, expected, "identical offsets");
    }
    while ps.iter().any(|&p| next[p as usize] < ends[p as usize]) {
        let asked: Vec<FetchPartition> = ps
            .iter()
            .filter(|&&p| next[p as usize] < ends[p as usize])
            .map(|&p| FetchPartition::new(p, next[p as usize]))
            .collect();
        for fetched in source.fetch(source_topic, &asked, &options).await.unwrap() {
            assert!(fetched.error.is_ok(), "{}", fetched.error);
            let p = fetched.partition as usize;
            for entry in fetched.batches() {
                let RawEntry::Batch(b) = entry.unwrap() else {
                    panic!("old message format")
                };
                if b.header.next_offset() <= next[p] {
                    continue;
                }
                assert!(b.header.is_dense() && b.header.base_offset == next[p]);
                let out = kmirror_wire::batch::rewrite(
                    &b.bytes,
                    &Rewrite {
                        producer_id: producer.id,
                        producer_epoch: producer.epoch,
                        base_sequence: sequence[p],
                    },
                )
                .unwrap();
                sequence[p] =
                    kmirror_wire::batch::next_sequence(sequence[p], b.header.record_count);
                if in_flight[p].len() == 5 {
                    settle(in_flight[p].pop_front().unwrap()).await;
                }
                let pending = dest
                    .send_produce(dest_topic, p as i32, out, &produce)
                    .await
                    .unwrap();
                in_flight[p].push_back((pending, b.header.base_offset));
                next[p] = b.header.next_offset();
            }
        }
    }
    for queue in in_flight {
        for pending in queue {
            settle(pending).await;
        }
    }
    started.elapsed()
}

fn copy_rdkafka(source_topic: &str, dest_topic: &str, partitions: i32) -> Duration {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Header, Headers, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    // The record engine's settings (fetcher/src/replicator.rs).
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", std::env::var("BENCH_SOURCE").unwrap())
        .set("group.id", "kmirror-wire-bench")
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "8388608")
        .set("fetch.wait.max.ms", "100")
        .set("queued.max.messages.kbytes", "65536")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut pc = ClientConfig::new();
    for (k, v) in destination_properties() {
        pc.set(k, v);
    }
    let producer: BaseProducer = pc
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("batch.num.messages", "10000")
        .set("compression.type", "lz4")
        .set("message.max.bytes", "16777216")
        .set("queue.buffering.max.kbytes", "131072")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut remaining = 0i64;
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(source_topic, p, Duration::from_secs(10))
            .unwrap();
        remaining += high;
        tpl.add_partition_offset(source_topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let started = Instant::now();
    while remaining > 0 {
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = m.unwrap();
        let mut headers = OwnedHeaders::new();
        if let Some(h) = m.headers() {
            for h in h.iter() {
                headers = headers.insert(Header {
                    key: h.key,
                    value: h.value,
                });
            }
        }
        let mut record = BaseRecord::<[u8], [u8]>::to(dest_topic)
            .partition(m.partition())
            .headers(headers);
        if let Some(ts) = m.timestamp().to_millis() {
            record = record.timestamp(ts);
        }
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        if let Some(v) = m.payload() {
            record = record.payload(v);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
        producer.poll(Duration::ZERO);
        remaining -= 1;
    }
    producer.flush(Duration::from_secs(120)).unwrap();
    started.elapsed()
}
