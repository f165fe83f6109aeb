//! Owned copies of records, their comparison, placeholders, reading single records, and what
//! rdkafka's message API does not expose: a record's source leader epoch, header bytes whose
//! keys are not UTF-8 (rdkafka's header accessors panic on them), and positions with an epoch.

use std::ffi::CStr;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message, Timestamp};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use rdkafka_sys as sys;

/// Header that marks placeholder records written for prefix alignment (deleted right after).
pub const PLACEHOLDER_HEADER: &str = "kmirror.placeholder";

/// Key of placeholder records: a compacted destination refuses records without a key.
pub const PLACEHOLDER_KEY: &[u8] = b"kmirror.placeholder";

/// Which clock a record's timestamp comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampKind {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when it appended the record (the topic's `message.timestamp.type`).
    LogAppendTime,
}

/// The leader epoch of the source partition when the record was appended, if the broker sent
/// it (message format v2).
pub fn leader_epoch(m: &BorrowedMessage<'_>) -> Option<i32> {
    // SAFETY: `m.ptr()` is a live rd_kafka_message_t for as long as `m`; the call only reads it.
    let epoch = unsafe { sys::rd_kafka_message_leader_epoch(m.ptr()) };
    (epoch >= 0).then_some(epoch)
}

/// The headers of a record as bytes, keys included whatever their encoding, in order.
pub fn raw_headers(m: &BorrowedMessage<'_>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    for_each_header(m, |key, value| {
        out.push((key.to_vec(), value.map(<[u8]>::to_vec)));
    });
    out
}

/// Bytes of the record's header keys and values (no allocation).
pub fn header_bytes(m: &BorrowedMessage<'_>) -> usize {
    let mut bytes = 0;
    for_each_header(m, |key, value| {
        bytes += key.len() + value.map_or(0, <[u8]>::len);
    });
    bytes
}

fn for_each_header(m: &BorrowedMessage<'_>, mut f: impl FnMut(&[u8], Option<&[u8]>)) {
    let mut headers: *mut sys::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: the message is live; librdkafka parses its headers once and keeps them with the
    // message, so `headers` and everything read through it live as long as `m`.
    unsafe {
        if sys::rd_kafka_message_headers(m.ptr(), &mut headers)
            != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            || headers.is_null()
        {
            return;
        }
        let mut idx = 0;
        loop {
            let mut name: *const std::ffi::c_char = std::ptr::null();
            let mut value: *const std::ffi::c_void = std::ptr::null();
            let mut size = 0usize;
            if sys::rd_kafka_header_get_all(headers, idx, &mut name, &mut value, &mut size)
                != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                break;
            }
            let key = CStr::from_ptr(name).to_bytes();
            let value =
                (!value.is_null()).then(|| std::slice::from_raw_parts(value.cast::<u8>(), size));
            f(key, value);
            idx += 1;
        }
    }
}

/// Sets the leader epoch of `topic`/`partition` in `tpl` (added by the caller), so that a
/// consumer assigned with it validates the position against the leader first (KIP-320).
pub fn set_leader_epoch(tpl: &mut TopicPartitionList, topic: &str, partition: i32, epoch: i32) {
    let Ok(topic) = std::ffi::CString::new(topic) else {
        return;
    };
    // SAFETY: the list is live and owned by `tpl`; the element found belongs to it.
    unsafe {
        let element = sys::rd_kafka_topic_partition_list_find(tpl.ptr(), topic.as_ptr(), partition);
        if !element.is_null() {
            sys::rd_kafka_topic_partition_set_leader_epoch(element, epoch);
        }
    }
}

/// A record's content, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordData {
    /// Offset in its partition.
    pub offset: i64,
    /// Key (`None`: null key).
    pub key: Option<Vec<u8>>,
    /// Value (`None`: null value, a tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers in order (a key that is not UTF-8 is kept lossily here; [`raw_headers`] has
    /// the bytes).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Timestamp in ms, if the record carries one.
    pub timestamp: Option<i64>,
    /// Where the timestamp comes from, if it has one.
    pub timestamp_kind: Option<TimestampKind>,
}

impl RecordData {
    /// Copies a consumed message.
    pub fn from_message(m: &BorrowedMessage<'_>) -> RecordData {
        RecordData {
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: raw_headers(m)
                .into_iter()
                .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
                .collect(),
            timestamp: timestamp_ms(m.timestamp()),
            timestamp_kind: match m.timestamp() {
                Timestamp::NotAvailable => None,
                Timestamp::CreateTime(_) => Some(TimestampKind::CreateTime),
                Timestamp::LogAppendTime(_) => Some(TimestampKind::LogAppendTime),
            },
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
            timestamp_kind: Some(TimestampKind::CreateTime),
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
