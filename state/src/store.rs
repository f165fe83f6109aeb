//! Reading and writing the state topic. Blocking calls: use them from a blocking thread.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use thiserror::Error;

use crate::fence::{Admission, Fences, headers_for, token_of};
use crate::records::{PartitionRecords, StateKey};

/// State topic I/O failed.
#[derive(Debug, Error)]
pub enum StateError {
    /// Kafka client error.
    #[error("state topic {topic}: {source}")]
    Kafka {
        /// The state topic.
        topic: String,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// The state topic does not exist.
    #[error("state topic {0} does not exist on the destination cluster")]
    Missing(String),
    /// A record was not accepted.
    #[error("state topic {topic}: a record was not written: {message}")]
    Delivery {
        /// The state topic.
        topic: String,
        /// The delivery error.
        message: String,
    },
    /// Reading did not reach the end in time.
    #[error("state topic {0}: timed out reading to the end")]
    Timeout(String),
}

/// Identifies one replication unit: (mirror, source topic, partition).
pub type UnitId = (String, String, i32);

/// Creates the compacted state topic when it does not exist (one partition; replication from
/// the destination's defaults).
pub fn ensure_state_topic(config: &ClientConfig, topic: &str) -> Result<(), StateError> {
    let kafka = |source| StateError::Kafka {
        topic: topic.to_string(),
        source,
    };
    let admin: AdminClient<DefaultClientContext> = config.create().map_err(kafka)?;
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1))
        .set("cleanup.policy", "compact")
        .set("min.compaction.lag.ms", "60000")
        .set("segment.bytes", "16777216");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = futures_block_on(admin.create_topics([&new], &options)).map_err(kafka)?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(kafka(KafkaError::AdminOp(code))),
        }
    }
    Ok(())
}

fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Whether a watermark query failed only because the partition's leadership is moving (a
/// replica fenced, an election under way): asked again, the new leader answers.
fn leadership_moving(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::MetadataFetch(
            RDKafkaErrorCode::NotLeaderForPartition | RDKafkaErrorCode::LeaderNotAvailable
        )
    )
}

/// The watermarks of `topic`/`partition`, asked again while its leadership moves, until
/// `deadline`.
fn watermarks_until(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    deadline: Instant,
) -> Result<(i64, i64), KafkaError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match consumer.fetch_watermarks(topic, partition, left.max(Duration::from_secs(1))) {
            Err(e) if leadership_moving(&e) && Instant::now() + RETRY_PAUSE < deadline => {
                tracing::debug!(%topic, partition, "state topic leadership moving: {e}; asking again");
                std::thread::sleep(RETRY_PAUSE);
            }
            answer => return answer,
        }
    }
}

/// Pause before asking a partition that is changing leaders again.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Reads the whole state topic up to its end and returns the records for which `wanted(key)`
/// holds, folded per replication unit (latest record wins, tombstones remove).
pub fn load(
    config: &ClientConfig,
    topic: &str,
    wanted: impl Fn(&StateKey) -> bool,
    timeout: Duration,
) -> Result<BTreeMap<UnitId, PartitionRecords>, StateError> {
    let kafka = |source| StateError::Kafka {
        topic: topic.to_string(),
        source,
    };
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", "kmirror-state-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kafka)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(kafka)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if partitions.is_empty() {
        return Err(StateError::Missing(topic.to_string()));
    }
    let mut ends = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    let deadline = Instant::now() + timeout;
    for &p in &partitions {
        let (low, high) = watermarks_until(&consumer, topic, p, deadline).map_err(kafka)?;
        if high > low {
            ends.insert(p, high);
            tpl.add_partition_offset(topic, p, Offset::Offset(low))
                .map_err(kafka)?;
        }
    }
    let mut units: BTreeMap<UnitId, PartitionRecords> = BTreeMap::new();
    let mut fences = Fences::default();
    if ends.is_empty() {
        return Ok(units);
    }
    consumer.assign(&tpl).map_err(kafka)?;
    while !ends.is_empty() {
        if Instant::now() > deadline {
            return Err(StateError::Timeout(topic.to_string()));
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.map_err(kafka)?;
        if let Some(key) = message.key().and_then(StateKey::parse)
            && admitted(&mut fences, &key, &message)
            && wanted(&key)
        {
            let unit = (key.mirror.clone(), key.topic.clone(), key.partition);
            let records = units.entry(unit).or_default();
            if let Err(e) = records.apply(&key, message.payload()) {
                tracing::warn!(offset = message.offset(), error = %e, "skipping an unreadable state record");
            }
        }
        if let Some(&end) = ends.get(&message.partition())
            && message.offset() + 1 >= end
        {
            ends.remove(&message.partition());
        }
    }
    units.retain(|_, r| {
        r.state.is_some() || r.position.is_some() || !r.chunks.is_empty() || r.acls.is_some()
    });
    Ok(units)
}

/// Whether a record read from the state topic applies: claims are recorded, records of a
/// superseded operator are ignored ([`crate::fence`]).
pub fn admitted<M: Message>(fences: &mut Fences, key: &StateKey, message: &M) -> bool {
    match fences.admit(
        key,
        message.offset(),
        token_of(message.headers()),
        message.payload(),
    ) {
        Admission::Apply => true,
        Admission::Claim => false,
        Admission::Stale { token, current } => {
            tracing::warn!(
                offset = message.offset(),
                mirror = %key.mirror,
                token,
                current,
                "ignoring a state record of a superseded operator"
            );
            false
        }
    }
}

/// Counts failed deliveries (and keeps the last one's reason) so that a flush can report them.
#[derive(Default)]
struct WriterContext {
    failures: AtomicU64,
    last_failure: std::sync::Mutex<Option<String>>,
}

impl rdkafka::ClientContext for WriterContext {}

impl rdkafka::producer::ProducerContext for WriterContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Writes state records with acks from all in-sync replicas. Several writers of one process
/// may share one producer ([`StateWriter::share`]); each one's flush fails when any record of
/// the producer failed since that writer's last flush (whose record it was cannot be told, so
/// every sharer hears of it).
pub struct StateWriter {
    producer: Arc<BaseProducer<WriterContext>>,
    topic: String,
    /// Failed deliveries of the producer counted by this writer's last flush.
    seen: AtomicU64,
}

impl StateWriter {
    /// A writer for `topic` on the cluster `config` points at.
    pub fn new(config: &ClientConfig, topic: &str) -> Result<StateWriter, StateError> {
        let producer = config
            .clone()
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "0")
            .set("message.timeout.ms", "30000")
            .create_with_context(WriterContext::default())
            .map_err(|source| StateError::Kafka {
                topic: topic.to_string(),
                source,
            })?;
        Ok(StateWriter {
            producer: Arc::new(producer),
            topic: topic.to_string(),
            seen: AtomicU64::new(0),
        })
    }

    /// Another writer on the same producer, with its own account of failures: those from now on.
    pub fn share(&self) -> StateWriter {
        StateWriter {
            producer: self.producer.clone(),
            topic: self.topic.clone(),
            seen: AtomicU64::new(self.failures()),
        }
    }

    fn failures(&self) -> u64 {
        self.producer.context().failures.load(Ordering::SeqCst)
    }

    /// Enqueues a record (`None`: tombstone). Call [`StateWriter::flush`] to make it durable.
    pub fn send<T: Serialize>(&self, key: &StateKey, value: Option<&T>) -> Result<(), StateError> {
        let value = value.map(|v| serde_json::to_vec(v).expect("state values serialize"));
        self.send_raw(key, value.as_deref())
    }

    /// Enqueues a record whose value is already serialized.
    pub fn send_raw(&self, key: &StateKey, value: Option<&[u8]>) -> Result<(), StateError> {
        self.send_fenced(key, value, None)
    }

    /// Enqueues a record carrying the writer's fencing token (`crate::fence`), if any.
    pub fn send_fenced(
        &self,
        key: &StateKey,
        value: Option<&[u8]>,
        token: Option<i64>,
    ) -> Result<(), StateError> {
        let key = key.to_bytes();
        let mut record = BaseRecord::<Vec<u8>, [u8]>::to(&self.topic).key(&key);
        if let Some(v) = value {
            record = record.payload(v);
        }
        if let Some(token) = token {
            record = record.headers(headers_for(token));
        }
        let mut record = record;
        loop {
            match self.producer.send(record) {
                Ok(()) => {
                    // Serve delivery reports as we go, so they never pile up between flushes.
                    self.producer.poll(Duration::ZERO);
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    self.producer.poll(Duration::from_millis(50));
                    record = r;
                }
                Err((source, _)) => {
                    return Err(StateError::Kafka {
                        topic: self.topic.clone(),
                        source,
                    });
                }
            }
        }
    }

    /// Waits until every enqueued record is acknowledged; fails when a record of the producer
    /// failed since this writer's last flush.
    pub fn flush(&self, timeout: Duration) -> Result<(), StateError> {
        self.producer
            .flush(timeout)
            .map_err(|source| StateError::Kafka {
                topic: self.topic.clone(),
                source,
            })?;
        let failures = self.failures();
        if self.seen.swap(failures, Ordering::SeqCst) == failures {
            return Ok(());
        }
        let message = self
            .producer
            .context()
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        Err(StateError::Delivery {
            topic: self.topic.clone(),
            message,
        })
    }

    /// Sends one record and waits for it.
    pub fn write<T: Serialize>(
        &self,
        key: &StateKey,
        value: Option<&T>,
        timeout: Duration,
    ) -> Result<(), StateError> {
        self.send(key, value)?;
        self.flush(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_query_is_asked_again_only_while_leadership_moves() {
        for code in [
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::LeaderNotAvailable,
        ] {
            assert!(
                leadership_moving(&KafkaError::MetadataFetch(code)),
                "{code:?}"
            );
        }
        for e in [
            KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition),
            KafkaError::MetadataFetch(RDKafkaErrorCode::TopicAuthorizationFailed),
        ] {
            assert!(!leadership_moving(&e), "{e:?}");
        }
    }
}
