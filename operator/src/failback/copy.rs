//! The blocking Kafka work of a failback: reading the divergent records of the old source's
//! partition and copying them, byte for byte with headers and timestamps, to the quarantine
//! topic (run on the blocking pool).

use std::time::Duration;

use kmirror_state::kafka_record::RecordData;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Reads the committed records of `[from, to)` of a partition.
pub fn read_range(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    from: i64,
    to: i64,
) -> std::result::Result<Vec<RecordData>, String> {
    if from >= to {
        return Ok(Vec::new());
    }
    let consumer: BaseConsumer<kmirror_state::quiet::QuietEof> = config
        .clone()
        .set("group.id", "kmirror-failback")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create_with_context(kmirror_state::quiet::QuietEof)
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(300)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(out),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(m)) => {
                if m.offset() >= to {
                    return Ok(out);
                }
                out.push(RecordData::from_message(&m));
                if m.offset() + 1 >= to {
                    return Ok(out);
                }
            }
        }
    }
    Err(format!(
        "reading {} of {topic}[{partition}] timed out",
        crate::status::offsets(from, to, None)
    ))
}

/// Copies records to the quarantine partition, keeping key, value, headers and timestamp.
pub fn quarantine(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    records: &[RecordData],
) -> std::result::Result<(), String> {
    if records.is_empty() {
        return Ok(());
    }
    let producer: BaseProducer = config
        .clone()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.max.bytes", "16777216")
        .create()
        .map_err(|e| e.to_string())?;
    for r in records {
        let headers = r.headers.iter().fold(OwnedHeaders::new(), |h, (k, v)| {
            h.insert(Header {
                key: k,
                value: v.as_deref(),
            })
        });
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(partition)
            .headers(headers);
        if let Some(k) = &r.key {
            record = record.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            record = record.payload(v.as_slice());
        }
        if let Some(ts) = r.timestamp {
            record = record.timestamp(ts);
        }
        producer.send(record).map_err(|(e, _)| e.to_string())?;
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| e.to_string())
}
