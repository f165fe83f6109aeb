//! Splitting a fetched `records` blob into its entries: magic v2 batches (header parsed) and
//! messages of the old formats, zero-copy slices of the response; a cut-off entry at the end
//! stops the iteration.

use bytes::Bytes;

use crate::batch::{BatchError, BatchHeader, LOG_OVERHEAD, MAGIC_AT, be_i32, be_i64};

/// One entry of a fetched `records` blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawEntry {
    /// A magic v2 record batch (its bytes, header parsed; CRC not yet checked).
    Batch(RawBatch),
    /// A message of the old formats (magic 0 or 1), possibly a compressed wrapper.
    Legacy(LegacyMessage),
}

/// A magic v2 batch as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBatch {
    /// The parsed header.
    pub header: BatchHeader,
    /// The whole batch (a zero-copy slice of the fetch response).
    pub bytes: Bytes,
}

/// A magic 0/1 message as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyMessage {
    /// 0 or 1.
    pub magic: i8,
    /// The message's offset; for a compressed wrapper, the offset of its last inner message.
    pub offset: i64,
    /// Attributes (bits 0-2: codec).
    pub attributes: i8,
    /// The whole message including the offset and size fields.
    pub bytes: Bytes,
}

/// Splits a `records` blob into entries. A partial entry at the end (the broker cuts responses
/// at the size limit) ends the iteration; [`RecordBatches::partial_tail`] tells its size.
#[derive(Debug, Clone)]
pub struct RecordBatches {
    rest: Bytes,
    failed: bool,
}

impl RecordBatches {
    /// Iterates over `records`.
    pub fn new(records: Bytes) -> RecordBatches {
        RecordBatches {
            rest: records,
            failed: false,
        }
    }

    /// Bytes left after the complete entries (a cut-off entry).
    pub fn partial_tail(&self) -> usize {
        self.rest.len()
    }
}

impl Iterator for RecordBatches {
    type Item = Result<RawEntry, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.len() < LOG_OVERHEAD {
            return None;
        }
        let declared = be_i32(&self.rest, 8);
        let offset = be_i64(&self.rest, 0);
        if declared < 0 {
            self.failed = true;
            return Some(Err(BatchError::Malformed {
                base_offset: offset,
                reason: "negative batch length".into(),
            }));
        }
        let size = LOG_OVERHEAD + declared as usize;
        if self.rest.len() < size || self.rest.len() <= MAGIC_AT {
            return None;
        }
        let bytes = self.rest.split_to(size);
        let magic = bytes[MAGIC_AT] as i8;
        let entry = match magic {
            2 => {
                BatchHeader::parse(&bytes).map(|header| RawEntry::Batch(RawBatch { header, bytes }))
            }
            0 | 1 if bytes.len() > MAGIC_AT + 1 => Ok(RawEntry::Legacy(LegacyMessage {
                magic,
                offset,
                attributes: bytes[MAGIC_AT + 1] as i8,
                bytes,
            })),
            _ => Err(BatchError::Magic {
                base_offset: offset,
                magic,
            }),
        };
        if entry.is_err() {
            self.failed = true;
        }
        Some(entry)
    }
}

impl RawEntry {
    /// The offset after this entry (for an old-format wrapper: after its last inner message).
    pub fn next_offset(&self) -> i64 {
        match self {
            RawEntry::Batch(b) => b.header.next_offset(),
            RawEntry::Legacy(m) => m.offset + 1,
        }
    }

    /// The entry's bytes.
    pub fn bytes(&self) -> &Bytes {
        match self {
            RawEntry::Batch(b) => &b.bytes,
            RawEntry::Legacy(m) => &m.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::tests::{JAVA_LZ4, JAVA_PLAIN, hex};

    #[test]
    fn blobs_split_into_batches_and_stop_at_a_cut() {
        let one = hex(JAVA_PLAIN);
        let mut blob = one.clone();
        blob.extend_from_slice(&one);
        blob.extend_from_slice(&one[..30]);
        let mut it = RecordBatches::new(Bytes::from(blob));
        let entries: Vec<_> = it.by_ref().collect::<Result<_, _>>().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(it.partial_tail(), 30);
        match &entries[1] {
            RawEntry::Batch(b) => assert_eq!(b.bytes.as_ref(), one.as_slice()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn legacy_messages_are_recognised() {
        // magic 1 message: offset 5, size, crc, magic 1, attributes 0, timestamp, key -1, value "x"
        let mut m = Vec::new();
        m.extend_from_slice(&5i64.to_be_bytes());
        let body: Vec<u8> = [
            &0u32.to_be_bytes()[..],
            &[1, 0],
            &0i64.to_be_bytes(),
            &(-1i32).to_be_bytes(),
            &1i32.to_be_bytes(),
            b"x",
        ]
        .concat();
        m.extend_from_slice(&(body.len() as i32).to_be_bytes());
        m.extend_from_slice(&body);
        let entries: Vec<_> = RecordBatches::new(Bytes::from(m)).collect();
        assert!(matches!(
            &entries[..],
            [Ok(RawEntry::Legacy(LegacyMessage {
                magic: 1,
                offset: 5,
                ..
            }))]
        ));
        assert!(matches!(
            BatchHeader::parse(entries[0].as_ref().unwrap().bytes()),
            Err(BatchError::Magic { magic: 1, .. })
        ));
    }

    #[test]
    fn java_batches_in_one_blob() {
        let mut blob = hex(JAVA_PLAIN);
        blob.extend(hex(JAVA_LZ4));
        let next: Vec<i64> = RecordBatches::new(Bytes::from(blob))
            .map(|e| e.unwrap().next_offset())
            .collect();
        assert_eq!(next, vec![1, 2]);
    }
}
