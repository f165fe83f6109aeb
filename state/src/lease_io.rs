//! Reading and writing the lease topic (`<stateTopic>.leases`): creating it, writing a holder's
//! record to the holder's partition, and reading lease records from a point on. Blocking calls:
//! use them from a blocking thread.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use thiserror::Error;

use crate::leases::{LEASE_PARTITIONS, LeaseRecord, partition_of};

/// A lease-topic step failed.
#[derive(Debug, Error)]
pub enum LeaseTopicError {
    /// Creating the topic or a client, reading or writing failed.
    #[error("lease topic {topic}: {source}")]
    Kafka {
        /// The lease topic.
        topic: String,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// The thread holding the lease could not start.
    #[error("starting the lease thread: {0}")]
    Thread(String),
}

/// Creates the lease topic when it does not exist: [`LEASE_PARTITIONS`] partitions, records
/// deleted after an hour (replication from the destination's defaults).
pub fn ensure_lease_topic(config: &ClientConfig, topic: &str) -> Result<(), LeaseTopicError> {
    let kafka = |source| LeaseTopicError::Kafka {
        topic: topic.to_string(),
        source,
    };
    let admin: AdminClient<DefaultClientContext> = config.create().map_err(kafka)?;
    let new = NewTopic::new(topic, LEASE_PARTITIONS, TopicReplication::Fixed(-1))
        .set("cleanup.policy", "delete")
        .set("retention.ms", "3600000")
        .set("segment.bytes", "16777216");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results =
        futures::executor::block_on(admin.create_topics([&new], &options)).map_err(kafka)?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(kafka(KafkaError::AdminOp(code))),
        }
    }
    Ok(())
}

/// Writes lease records, each to its holder's partition, keyed by the holder.
pub struct LeaseWriter {
    producer: BaseProducer,
    topic: String,
}

impl LeaseWriter {
    /// A writer for `topic` on the cluster `config` points at. Records not delivered within
    /// `timeout` are dropped (a request that old is useless).
    pub fn new(
        config: &ClientConfig,
        topic: &str,
        timeout: Duration,
    ) -> Result<LeaseWriter, LeaseTopicError> {
        let producer = config
            .clone()
            .set("acks", "all")
            .set("linger.ms", "0")
            .set(
                "message.timeout.ms",
                timeout.as_millis().max(1000).to_string(),
            )
            .create()
            .map_err(|source| LeaseTopicError::Kafka {
                topic: topic.to_string(),
                source,
            })?;
        Ok(LeaseWriter {
            producer,
            topic: topic.to_string(),
        })
    }

    /// Enqueues a record (sent in the background; [`LeaseWriter::flush`] waits for it).
    pub fn send(&self, record: &LeaseRecord) -> Result<(), LeaseTopicError> {
        let value = record.to_json();
        let holder = record.holder();
        let base = BaseRecord::to(&self.topic)
            .partition(partition_of(holder))
            .key(holder.as_bytes())
            .payload(&value[..]);
        let result = self.producer.send(base).map_err(|(source, _)| source);
        self.producer.poll(Duration::ZERO);
        result.map_err(|source| LeaseTopicError::Kafka {
            topic: self.topic.clone(),
            source,
        })
    }

    /// Serves delivery reports.
    pub fn poll(&self) {
        self.producer.poll(Duration::ZERO);
    }

    /// Waits until what was sent is acknowledged (or `timeout` passes).
    pub fn flush(&self, timeout: Duration) -> Result<(), LeaseTopicError> {
        self.producer
            .flush(timeout)
            .map_err(|source| LeaseTopicError::Kafka {
                topic: self.topic.clone(),
                source,
            })
    }
}

/// Where a [`LeaseReader`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// What is written from now on.
    End,
    /// The first record written at or after this time (ms since the epoch), then on.
    Time(i64),
}

/// Reads lease records from some partitions of the lease topic.
pub struct LeaseReader {
    consumer: BaseConsumer,
    topic: String,
    /// Per partition: where reading started and the log end when it did.
    range: Vec<(i32, i64, i64)>,
}

impl LeaseReader {
    /// A reader of `partitions` of `topic` starting at `from`.
    pub fn new(
        config: &ClientConfig,
        topic: &str,
        partitions: &[i32],
        from: ReadFrom,
    ) -> Result<LeaseReader, LeaseTopicError> {
        let kafka = |source| LeaseTopicError::Kafka {
            topic: topic.to_string(),
            source,
        };
        let consumer: BaseConsumer = config
            .clone()
            .set("group.id", "kmirror-leases")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "latest")
            .set("fetch.wait.max.ms", "100")
            .create()
            .map_err(kafka)?;
        let mut tpl = TopicPartitionList::new();
        let mut range = Vec::new();
        for &p in partitions {
            tpl.add_partition_offset(topic, p, Offset::End)
                .map_err(kafka)?;
        }
        if let ReadFrom::Time(ms) = from {
            for &p in partitions {
                let (_, end) = consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(15))
                    .map_err(kafka)?;
                range.push((p, end, end));
            }
            let mut by_time = TopicPartitionList::new();
            for &p in partitions {
                by_time
                    .add_partition_offset(topic, p, Offset::Offset(ms))
                    .map_err(kafka)?;
            }
            let found = consumer
                .offsets_for_times(by_time, Duration::from_secs(15))
                .map_err(kafka)?;
            for e in found.elements() {
                // No record at or after the time: from the end.
                if let Offset::Offset(o) = e.offset() {
                    tpl.set_partition_offset(topic, e.partition(), Offset::Offset(o))
                        .map_err(kafka)?;
                    if let Some(r) = range.iter_mut().find(|r| r.0 == e.partition()) {
                        r.1 = o;
                    }
                }
            }
        }
        consumer.assign(&tpl).map_err(kafka)?;
        Ok(LeaseReader {
            consumer,
            topic: topic.to_string(),
            range,
        })
    }

    /// Whether everything written before the reader started (from its start on) has been read.
    pub fn caught_up(&self) -> bool {
        let Ok(positions) = self.consumer.position() else {
            return false;
        };
        self.range.iter().all(|&(p, start, end)| {
            start >= end
                || positions
                    .find_partition(&self.topic, p)
                    .is_some_and(|e| matches!(e.offset(), Offset::Offset(o) if o >= end))
        })
    }

    /// The next lease record, waiting at most `wait`; `Ok(None)` when none came (or what came
    /// was no lease record).
    pub fn poll(&self, wait: Duration) -> Result<Option<LeaseRecord>, LeaseTopicError> {
        match self.consumer.poll(wait) {
            None => Ok(None),
            Some(Err(source)) => Err(LeaseTopicError::Kafka {
                topic: self.topic.clone(),
                source,
            }),
            Some(Ok(m)) => Ok(m.payload().and_then(LeaseRecord::from_json)),
        }
    }
}
