//! Owned copies of records, their comparison, placeholders, and reading single records.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message, Timestamp};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Header that marks placeholder records written for prefix alignment (deleted right after).
pub const PLACEHOLDER_HEADER: &str = "kmirror.placeholder";

/// A record's content, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordData {
    /// Offset in its partition.
    pub offset: i64,
    /// Key (`None`: null key).
    pub key: Option<Vec<u8>>,
    /// Value (`None`: null value, a tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Timestamp in ms, if the record carries one.
    pub timestamp: Option<i64>,
}

impl RecordData {
    /// Copies a consumed message.
    pub fn from_message(m: &BorrowedMessage<'_>) -> RecordData {
        RecordData {
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default(),
            timestamp: timestamp_ms(m.timestamp()),
        }
    }

    /// Same key, value, headers and timestamp (offsets may differ).
    pub fn same_content(&self, other: &RecordData) -> bool {
        self.key == other.key
            && self.value == other.value
            && self.headers == other.headers
            && self.timestamp == other.timestamp
    }

    /// A placeholder written for prefix alignment.
    pub fn is_placeholder(&self) -> bool {
        self.headers.iter().any(|(k, _)| k == PLACEHOLDER_HEADER)
    }

    /// Bytes of key, value and headers.
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
    }
}

/// The milliseconds of a timestamp (create or log-append time).
pub fn timestamp_ms(t: Timestamp) -> Option<i64> {
    match t {
        Timestamp::NotAvailable => None,
        Timestamp::CreateTime(ms) | Timestamp::LogAppendTime(ms) => Some(ms),
    }
}

/// Reads the first record at or after `offset` in one partition (`Ok(None)`: none before the
/// end or the timeout).
pub fn read_record_at(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> Result<Option<RecordData>, KafkaError> {
    let consumer: BaseConsumer<crate::quiet::QuietEof> = config
        .clone()
        .set("group.id", "kmirror-record-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "latest")
        .create_with_context(crate::quiet::QuietEof)?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(None),
            Some(Err(e)) => return Err(e),
            Some(Ok(m)) if m.offset() >= offset => return Ok(Some(RecordData::from_message(&m))),
            Some(Ok(_)) => continue,
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, value: &str) -> RecordData {
        RecordData {
            offset,
            key: Some(b"k".to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![("h".into(), None)],
            timestamp: Some(1),
        }
    }

    #[test]
    fn content_comparison_ignores_offsets() {
        assert!(record(1, "a").same_content(&record(7, "a")));
        assert!(!record(1, "a").same_content(&record(1, "b")));
        let mut r = record(1, "a");
        r.timestamp = Some(2);
        assert!(!record(1, "a").same_content(&r));
        assert_eq!(record(0, "abc").size(), 1 + 3 + 1);
    }

    #[test]
    fn placeholders_are_recognised() {
        let mut r = record(0, "");
        assert!(!r.is_placeholder());
        r.headers.push((PLACEHOLDER_HEADER.into(), None));
        assert!(r.is_placeholder());
    }
}
