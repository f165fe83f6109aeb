//! The soak's traffic: one producer thread per topic at a seeded, steady rate (idempotent, or
//! transactional with aborts), the orders producer that moves to the destination and back
//! during the failover cycle, and a consumer group that commits on the source every second.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::topics::{Role, TopicSpec, Writer, value};
use crate::Testbed;
use crate::kafka::{DestUser, Rng};

/// Where the orders producer writes (the applications move during the failover cycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Target {
    /// The source cluster.
    Source = 0,
    /// Nowhere (moving).
    Paused = 1,
    /// The destination cluster (after failover).
    Destination = 2,
}

/// Counters of one producer.
#[derive(Debug, Default)]
pub struct Counters {
    /// Records handed to the client.
    pub sent: AtomicU64,
    /// Records acknowledged.
    pub delivered: AtomicU64,
    /// Records the client gave up on (source-side failures, not kmirror's).
    pub failed: AtomicU64,
    /// Records in aborted transactions.
    pub aborted: AtomicU64,
    /// The last delivery error.
    pub last_error: Mutex<Option<String>>,
}

/// The running traffic.
pub struct Workload {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Counters by topic name.
    pub counters: Vec<(String, Arc<Counters>)>,
    /// Where the orders producer writes.
    pub orders_target: Arc<AtomicU8>,
    group: Option<GroupConsumer>,
    group_config: ClientConfig,
    orders_topic: String,
    /// Records the consumer group consumed (all its runs).
    pub consumed: Arc<AtomicU64>,
}

/// The consumer group name.
pub const GROUP: &str = "soak-app";

fn producer_config(base: &ClientConfig, compression: &str) -> ClientConfig {
    let mut c = base.clone();
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "20")
        .set("compression.type", compression)
        .set("message.timeout.ms", "300000")
        .set("message.max.bytes", "2000000")
        .set("batch.size", "1100000");
    c
}

struct Delivery(Arc<Counters>);

impl rdkafka::ClientContext for Delivery {}

impl rdkafka::producer::ProducerContext for Delivery {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.0.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
                *self.0.last_error.lock().unwrap() = Some(e.to_string());
            }
        }
    }
}

/// Paces a loop at `rate` per second: how many to send now.
struct Pace {
    rate: f64,
    start: Instant,
    done: u64,
}

impl Pace {
    fn due(&mut self) -> u64 {
        let should = (self.start.elapsed().as_secs_f64() * self.rate) as u64;
        let n = should.saturating_sub(self.done);
        self.done += n;
        n
    }
}

impl Workload {
    /// Starts a producer per topic and the consumer group on the orders topic.
    pub fn start(bed: &Testbed, topics: &[TopicSpec], seed: u64) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let orders_target = Arc::new(AtomicU8::new(Target::Source as u8));
        let mut threads = Vec::new();
        let mut counters = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            let c = Arc::new(Counters::default());
            counters.push((t.name.clone(), c.clone()));
            let (spec, stop) = (t.clone(), stop.clone());
            let source = bed.r_source_config();
            let destination = bed.r_dest_config(DestUser::Admin);
            let target = orders_target.clone();
            let seed = seed.wrapping_add(i as u64 * 7919);
            threads.push(std::thread::spawn(move || match spec.writer {
                Writer::Transactional { abort_pct } => {
                    transactional(&source, &spec, abort_pct, seed, &stop, &c)
                }
                Writer::Idempotent { .. } => {
                    idempotent(&source, &destination, &spec, seed, &stop, &c, &target)
                }
            }));
        }
        let orders_topic = topics
            .iter()
            .find(|t| t.role == Role::Orders)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        let consumed = Arc::new(AtomicU64::new(0));
        let group_config = bed.r_source_config();
        let group = Some(GroupConsumer::start(
            &group_config,
            &orders_topic,
            consumed.clone(),
        ));
        Workload {
            stop,
            threads,
            counters,
            orders_target,
            group,
            group_config,
            orders_topic,
            consumed,
        }
    }

    /// Stops the consumer group (its last commit done); returns whether it was running.
    pub fn stop_group(&mut self) -> bool {
        match self.group.take() {
            Some(g) => {
                g.stop();
                true
            }
            None => false,
        }
    }

    /// Starts the consumer group again (on the source).
    pub fn start_group(&mut self) {
        if self.group.is_none() {
            self.group = Some(GroupConsumer::start(
                &self.group_config,
                &self.orders_topic,
                self.consumed.clone(),
            ));
        }
    }

    /// Moves the orders producer.
    pub fn set_orders_target(&self, target: Target) {
        self.orders_target.store(target as u8, Ordering::SeqCst);
    }

    /// Stops every producer (each flushes what it has) and the consumer group.
    pub fn stop(mut self) -> Vec<(String, Arc<Counters>)> {
        self.stop_group();
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.counters
    }
}

fn idempotent(
    source: &ClientConfig,
    destination: &ClientConfig,
    spec: &TopicSpec,
    seed: u64,
    stop: &AtomicBool,
    counters: &Arc<Counters>,
    target: &AtomicU8,
) {
    let Writer::Idempotent {
        compression,
        keyspace,
        tombstone_pct,
        headers,
        value_len,
    } = spec.writer
    else {
        return;
    };
    let mut rng = Rng::new(seed);
    let make = |base: &ClientConfig| -> Option<BaseProducer<Delivery>> {
        producer_config(base, compression)
            .create_with_context(Delivery(counters.clone()))
            .ok()
    };
    let Some(on_source) = make(source) else {
        *counters.last_error.lock().unwrap() = Some("cannot create the producer".into());
        return;
    };
    let mut on_destination: Option<BaseProducer<Delivery>> = None;
    let mut pace = Pace {
        rate: spec.rate,
        start: Instant::now(),
        done: 0,
    };
    let mut seq = spec.prefill as u64;
    while !stop.load(Ordering::Relaxed) {
        let to = target.load(Ordering::SeqCst);
        if spec.role == Role::Orders && to == Target::Paused as u8 {
            pace.due();
            on_source.poll(Duration::from_millis(100));
            continue;
        }
        let producer = if spec.role == Role::Orders && to == Target::Destination as u8 {
            on_destination.get_or_insert_with(|| make(destination).expect("destination producer"))
        } else {
            &on_source
        };
        for _ in 0..pace.due() {
            let partition = (seq % spec.partitions as u64) as i32;
            let key = match keyspace {
                Some(n) => format!("key-{}", rng.below(n)),
                None => format!("key-{seq}"),
            };
            let len = value_len.0 + rng.below((value_len.1 - value_len.0) as u64 + 1) as usize;
            let tombstone = rng.below(100) < tombstone_pct;
            let payload = (!tombstone).then(|| value(&spec.name, partition, seq, len));
            let hdrs = headers.then(|| {
                OwnedHeaders::new()
                    .insert(Header {
                        key: "seq",
                        value: Some(seq.to_string().as_bytes()),
                    })
                    .insert(Header {
                        key: "origin",
                        value: Some(b"soak".as_slice()),
                    })
            });
            let mut record = BaseRecord::<[u8], [u8]>::to(&spec.name)
                .partition(partition)
                .key(key.as_bytes());
            if let Some(p) = &payload {
                record = record.payload(p.as_slice());
            }
            if let Some(h) = hdrs {
                record = record.headers(h);
            }
            let mut record = record;
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        record = back;
                        producer.poll(Duration::from_millis(50));
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
            }
            counters.sent.fetch_add(1, Ordering::Relaxed);
            seq += 1;
        }
        producer.poll(Duration::from_millis(50));
    }
    let _ = on_source.flush(Duration::from_secs(120));
    if let Some(p) = on_destination {
        let _ = p.flush(Duration::from_secs(120));
    }
}

fn transactional(
    source: &ClientConfig,
    spec: &TopicSpec,
    abort_pct: u64,
    seed: u64,
    stop: &AtomicBool,
    counters: &Arc<Counters>,
) {
    let mut rng = Rng::new(seed);
    let id = format!("{}-producer", spec.name);
    let create = || -> Option<BaseProducer<Delivery>> {
        let p: BaseProducer<Delivery> = producer_config(source, "none")
            .set("transactional.id", &id)
            .set("transaction.timeout.ms", "60000")
            .create_with_context(Delivery(counters.clone()))
            .ok()?;
        p.init_transactions(Duration::from_secs(60)).ok()?;
        Some(p)
    };
    let mut producer = create();
    let mut pace = Pace {
        rate: spec.rate,
        start: Instant::now(),
        done: 0,
    };
    let mut seq = 0u64;
    let mut pending = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(p) = producer.as_ref() else {
            std::thread::sleep(Duration::from_secs(2));
            producer = create();
            continue;
        };
        pending += pace.due();
        if pending == 0 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let batch = pending.min(1 + rng.below(20));
        let abort = rng.below(100) < abort_pct;
        let outcome = (|| -> Result<(), rdkafka::error::KafkaError> {
            p.begin_transaction()?;
            for _ in 0..batch {
                let partition = (seq % spec.partitions as u64) as i32;
                let payload = value(&spec.name, partition, seq, 40 + rng.below(300) as usize);
                let key = format!("key-{seq}");
                p.send(
                    BaseRecord::<[u8], [u8]>::to(&spec.name)
                        .partition(partition)
                        .key(key.as_bytes())
                        .payload(payload.as_slice()),
                )
                .map_err(|(e, _)| e)?;
                seq += 1;
            }
            if abort {
                p.abort_transaction(Duration::from_secs(60))
            } else {
                p.commit_transaction(Duration::from_secs(60))
            }
        })();
        counters.sent.fetch_add(batch, Ordering::Relaxed);
        pending -= batch;
        match outcome {
            Ok(()) if abort => {
                counters.aborted.fetch_add(batch, Ordering::Relaxed);
            }
            Ok(()) => {}
            Err(e) => {
                *counters.last_error.lock().unwrap() = Some(e.to_string());
                let recoverable = matches!(&e, rdkafka::error::KafkaError::Transaction(t) if t.txn_requires_abort() && !t.is_fatal());
                if recoverable && p.abort_transaction(Duration::from_secs(60)).is_ok() {
                    counters.aborted.fetch_add(batch, Ordering::Relaxed);
                } else {
                    counters.failed.fetch_add(batch, Ordering::Relaxed);
                    producer = None;
                }
            }
        }
        if let Some(p) = producer.as_ref() {
            p.poll(Duration::ZERO);
        }
    }
}

/// The consumer group on the orders topic: reads and commits every second.
struct GroupConsumer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl GroupConsumer {
    fn start(config: &ClientConfig, topic: &str, consumed: Arc<AtomicU64>) -> GroupConsumer {
        let stop = Arc::new(AtomicBool::new(false));
        let (config, topic, flag) = (config.clone(), topic.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let consumer: BaseConsumer = match config
                .clone()
                .set("group.id", GROUP)
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .create()
            {
                Ok(c) => c,
                Err(_) => return,
            };
            if consumer.subscribe(&[&topic]).is_err() {
                return;
            }
            let mut last_commit = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                if let Some(Ok(_)) = consumer.poll(Duration::from_millis(200)) {
                    consumed.fetch_add(1, Ordering::Relaxed);
                }
                if last_commit.elapsed() > Duration::from_secs(1) {
                    let _ = consumer.commit_consumer_state(CommitMode::Sync);
                    last_commit = Instant::now();
                }
            }
            let _ = consumer.commit_consumer_state(CommitMode::Sync);
            consumer.unsubscribe();
        });
        GroupConsumer { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_spreads_records_over_time() {
        let mut p = Pace {
            rate: 100.0,
            start: Instant::now() - Duration::from_secs(2),
            done: 0,
        };
        assert_eq!(p.due(), 200);
        assert_eq!(p.due(), 0);
    }
}
