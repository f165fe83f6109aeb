//! The verifier: compares a source partition with its destination partition record by record
//! through the offset map and reports what is missing, different or extra — content (key,
//! value, headers, timestamp) and the timestamp type, which a destination topic with
//! `message.timestamp.type=LogAppendTime` replaces.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::Serialize;

use crate::config::Isolation;
use kmirror_state::kafka_record::{RecordData, TimestampKind};
use kmirror_state::offset_map::OffsetMap;
use kmirror_state::quiet::QuietEof;

mod old_formats;
use old_formats::OldFormatReader;

/// Mismatches listed in a report at most (counts are always complete).
pub const MAX_LISTED: usize = 20;

/// One side of the comparison.
#[derive(Clone)]
pub struct Side {
    /// Client configuration.
    pub config: ClientConfig,
    /// Topic.
    pub topic: String,
}

/// Result of verifying one partition.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Partition.
    pub partition: i32,
    /// Source records examined (from the source log start to its end at the start of the run).
    pub source_records: u64,
    /// Source records found on the destination with the same content.
    pub matched: u64,
    /// Source records absent from the destination.
    pub missing: u64,
    /// Source records whose destination copy differs (content or timestamp type).
    pub different: u64,
    /// Of those, copies whose timestamp the destination replaced (LogAppendTime).
    pub timestamp_type_differs: u64,
    /// Destination records no source record maps to (duplicates, foreign writes).
    pub extra: u64,
    /// Destination records after the copy of the last source record seen: newer records while
    /// the source is still written, duplicates when it is quiescent.
    pub trailing: u64,
    /// Every matched record sits at its own source offset.
    pub offsets_identical: bool,
    /// The first mismatches, as `(source offset, destination offset, what)`.
    pub examples: Vec<(i64, i64, String)>,
}

impl Report {
    /// No missing, different or extra records.
    pub fn is_clean(&self) -> bool {
        self.missing == 0 && self.different == 0 && self.extra == 0
    }

    /// Clean, and no copies after the last source record either (duplicates, when the source is
    /// not being written).
    pub fn is_exact(&self) -> bool {
        self.is_clean() && self.trailing == 0
    }

    fn note(&mut self, src: i64, dst: i64, what: &str) {
        if self.examples.len() < MAX_LISTED {
            self.examples.push((src, dst, what.to_string()));
        }
    }
}

/// Why a partition could not be verified.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Reading with librdkafka failed.
    #[error(transparent)]
    Read(#[from] KafkaError),
    /// Reading a log in the message formats before v2 failed.
    #[error("reading messages in the formats before v2: {0}")]
    ReadOldFormats(String),
}

/// Reads one partition sequentially up to an end offset: with librdkafka, or with kmirror's
/// wire client where the log starts with messages in the formats before v2.
struct Reader {
    consumer: BaseConsumer<QuietEof>,
    old_formats: Option<OldFormatReader>,
    /// Where reading starts.
    start: i64,
    end: i64,
    next: Option<RecordData>,
    done: bool,
    deadline: Instant,
}

impl Reader {
    /// A reader from the partition's log start, or from `from` when that is later.
    fn open(
        side: &Side,
        partition: i32,
        isolation: Isolation,
        from: Option<i64>,
        timeout: Duration,
    ) -> Result<Reader, VerifyError> {
        let consumer: BaseConsumer<QuietEof> = side
            .config
            .clone()
            .set("group.id", "kmirror-verify")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", isolation.as_kafka_str())
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            .create_with_context(QuietEof)?;
        let (low, high) = consumer.fetch_watermarks(&side.topic, partition, timeout)?;
        let low = low.max(from.unwrap_or(low)).min(high);
        let deadline = Instant::now() + timeout;
        let old_formats = OldFormatReader::open(
            &side.config,
            &side.topic,
            partition,
            (low, high),
            isolation,
            deadline,
        )
        .map_err(VerifyError::ReadOldFormats)?;
        if old_formats.is_none() {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&side.topic, partition, Offset::Offset(low))?;
            consumer.assign(&tpl)?;
        }
        Ok(Reader {
            consumer,
            old_formats,
            start: low,
            end: high,
            next: None,
            done: high <= low,
            deadline,
        })
    }

    /// The next record below `end`, without consuming it.
    fn peek(&mut self) -> Result<Option<&RecordData>, VerifyError> {
        if let Some(old) = &mut self.old_formats {
            if self.next.is_none() && !self.done {
                self.next = old.next().map_err(VerifyError::ReadOldFormats)?;
                self.done = self.next.is_none();
            }
            return Ok(self.next.as_ref());
        }
        while self.next.is_none() && !self.done {
            if Instant::now() > self.deadline {
                return Err(VerifyError::Read(KafkaError::MessageConsumption(
                    rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                )));
            }
            match self.consumer.poll(Duration::from_millis(500)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    let position = self
                        .consumer
                        .position()?
                        .elements()
                        .first()
                        .map(|e| e.offset());
                    if let Some(Offset::Offset(o)) = position
                        && o >= self.end
                    {
                        self.done = true;
                    }
                }
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(m)) => {
                    use rdkafka::Message;
                    if m.offset() >= self.end {
                        self.done = true;
                    } else {
                        self.next = Some(RecordData::from_message(&m));
                        if m.offset() + 1 >= self.end {
                            self.done = true;
                        }
                    }
                }
            }
        }
        Ok(self.next.as_ref())
    }

    fn take(&mut self) -> Option<RecordData> {
        self.next.take()
    }
}

/// How a destination copy differs from its source record, if it does.
pub fn compare(source: &RecordData, copy: &RecordData) -> Option<&'static str> {
    let replaced = copy.timestamp_kind == Some(TimestampKind::LogAppendTime)
        && source.timestamp_kind != Some(TimestampKind::LogAppendTime);
    if replaced {
        return Some(
            "timestamp type differs: the destination topic stamps LogAppendTime \
             (message.timestamp.type), replacing the source's timestamp",
        );
    }
    if !copy.same_content(source) {
        return Some("content differs");
    }
    None
}

/// Compares `partition` of `source` with the destination through `map`, from the source log
/// start to the source log end observed when the run starts (the destination from the copy of
/// the source's first record on).
pub fn verify_partition(
    source: &Side,
    destination: &Side,
    partition: i32,
    map: &OffsetMap,
    isolation: Isolation,
    timeout: Duration,
) -> Result<Report, VerifyError> {
    let mut src = Reader::open(source, partition, isolation, None, timeout)?;
    // Destination records before the copy of the source's first record are copies of records
    // the source no longer holds (retention): nothing to compare them with.
    let dst_from = map.src_to_dst(src.start);
    let mut dst = Reader::open(
        destination,
        partition,
        Isolation::ReadUncommitted,
        Some(dst_from),
        timeout,
    )?;
    let mut report = Report {
        partition,
        offsets_identical: true,
        ..Default::default()
    };
    let mut last_expected_dst = -1;
    while let Some(s) = src.peek()?.cloned() {
        src.take();
        report.source_records += 1;
        let expected = map.src_to_dst(s.offset);
        last_expected_dst = expected;
        // Destination records before the expected offset are extra (placeholders excepted).
        loop {
            match dst.peek()? {
                Some(d) if d.offset < expected => {
                    if !d.is_placeholder() {
                        report.extra += 1;
                        let d_offset = d.offset;
                        report.note(-1, d_offset, "extra record on the destination");
                    }
                    dst.take();
                }
                _ => break,
            }
        }
        match dst.peek()? {
            Some(d) if d.offset == expected => {
                match compare(&s, d) {
                    None => {
                        report.matched += 1;
                        if d.offset != s.offset {
                            report.offsets_identical = false;
                        }
                    }
                    Some(what) => {
                        report.different += 1;
                        if what.starts_with("timestamp type") {
                            report.timestamp_type_differs += 1;
                        }
                        report.note(s.offset, expected, what);
                    }
                }
                dst.take();
            }
            _ => {
                report.missing += 1;
                report.note(s.offset, expected, "missing on the destination");
            }
        }
    }
    // What remains on the destination lies after the copy of the last source record.
    while let Some(d) = dst.peek()? {
        if d.offset > last_expected_dst && !d.is_placeholder() {
            report.trailing += 1;
        }
        dst.take();
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ts: i64, kind: TimestampKind) -> RecordData {
        RecordData {
            offset: 5,
            key: Some(b"k".to_vec()),
            value: Some(b"v".to_vec()),
            headers: Vec::new(),
            timestamp: Some(ts),
            timestamp_kind: Some(kind),
        }
    }

    #[test]
    fn copies_against_their_source() {
        use TimestampKind::{CreateTime as C, LogAppendTime as L};
        #[rustfmt::skip]
        let table = [
            // source, copy → difference
            (record(1, C), record(1, C), None),
            (record(1, L), record(1, C), None), // a mirror keeps the source's append time as create time
            (record(1, C), record(1, L), Some("timestamp type")),
            (record(1, C), record(9, L), Some("timestamp type")),
            (record(1, C), record(2, C), Some("content")),
            (record(1, L), record(2, L), Some("content")),
        ];
        for (source, copy, expect) in table {
            let got = compare(&source, &copy);
            assert_eq!(
                got.map(|g| g
                    .split(' ')
                    .take(if expect == Some("content") { 1 } else { 2 })
                    .collect::<Vec<_>>()
                    .join(" ")),
                expect.map(String::from),
                "{source:?} / {copy:?}"
            );
        }
    }

    #[test]
    fn trailing_copies_are_not_exact() {
        let mut r = Report {
            matched: 3,
            source_records: 3,
            ..Default::default()
        };
        assert!(r.is_clean() && r.is_exact());
        r.trailing = 2;
        assert!(r.is_clean() && !r.is_exact());
    }
}
