//! Record batches as bytes: splitting a fetched `records` blob into batches, parsing the magic v2
//! batch header, rewriting it for the destination (producer id/epoch/sequence, base offset,
//! transactional and delete-horizon bits) and recomputing its CRC-32C.
//!
//! Layout of a magic v2 batch (big endian):
//!
//! ```text
//!  0 base offset i64        8 batch length i32       12 partition leader epoch i32
//! 16 magic i8              17 crc u32 (CRC-32C of bytes 21..end)
//! 21 attributes i16        23 last offset delta i32  27 base timestamp i64
//! 35 max timestamp i64     43 producer id i64        51 producer epoch i16
//! 53 base sequence i32     57 record count i32       61 records
//! ```
//!
//! The entries of a fetched blob ([`RecordBatches`]) live in `entries.rs` and are re-exported here.

use bytes::Bytes;

pub use crate::entries::{LegacyMessage, RawBatch, RawEntry, RecordBatches};
use thiserror::Error;

/// Bytes before the records of a magic v2 batch.
pub const HEADER_LEN: usize = 61;
/// Offset of the magic byte (the same in every message format).
pub(crate) const MAGIC_AT: usize = 16;
/// Bytes before the batch length field ends (base offset + length).
pub(crate) const LOG_OVERHEAD: usize = 12;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;

const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;
const DELETE_HORIZON_BIT: i16 = 1 << 6;

/// A record batch that cannot be parsed or rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// Fewer bytes than the header or the declared length needs.
    #[error("record batch truncated: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// Not a magic v2 batch (message format v0/v1, or garbage).
    #[error("record batch at offset {base_offset} has magic {magic}; only magic 2 is handled here")]
    Magic {
        /// The batch's base offset.
        base_offset: i64,
        /// The magic byte.
        magic: i8,
    },
    /// The stored CRC does not match the bytes.
    #[error(
        "record batch at offset {base_offset} is corrupt: CRC {stored:#010x}, computed {computed:#010x}"
    )]
    Crc {
        /// The batch's base offset.
        base_offset: i64,
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// A header field is out of range (negative length or count, ...).
    #[error("record batch at offset {base_offset} is malformed: {reason}")]
    Malformed {
        /// The batch's base offset.
        base_offset: i64,
        /// What is wrong.
        reason: String,
    },
    /// Control batches (transaction markers) are written by the broker, never produced.
    #[error("record batch at offset {base_offset} is a control batch and cannot be produced")]
    Control {
        /// The batch's base offset.
        base_offset: i64,
    },
    /// Records could not be decompressed, decoded or encoded.
    #[error("records of the batch at offset {base_offset}: {reason}")]
    Records {
        /// The batch's base offset.
        base_offset: i64,
        /// What failed.
        reason: String,
    },
}

/// The compression codec of a batch (attributes bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// Snappy (Kafka's xerial framing).
    Snappy,
    /// LZ4 frame.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Codec {
    /// The codec of attribute bits 0-2.
    pub fn from_attributes(attributes: i16) -> Option<Codec> {
        Some(match attributes & 0x7 {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return None,
        })
    }

    /// The attribute bits of this codec.
    pub fn bits(self) -> i16 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }
}

/// What the record timestamps mean (attributes bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker on append (all records carry the batch's max timestamp).
    LogAppendTime,
}

/// The header of a magic v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the length field (the batch is `12 + length` bytes).
    pub length: i32,
    /// Leader epoch of the partition when the batch was appended.
    pub partition_leader_epoch: i32,
    /// Format version (2).
    pub magic: i8,
    /// CRC-32C of bytes 21.. as stored.
    pub crc: u32,
    /// Raw attributes.
    pub attributes: i16,
    /// Offset of the last record minus the base offset (kept by compaction).
    pub last_offset_delta: i32,
    /// Timestamp of the first record (the delete horizon when that bit is set).
    pub base_timestamp: i64,
    /// Largest timestamp (the append time for LogAppendTime).
    pub max_timestamp: i64,
    /// Producer id (-1 without one).
    pub producer_id: i64,
    /// Producer epoch (-1 without one).
    pub producer_epoch: i16,
    /// Sequence of the first record (-1 without one).
    pub base_sequence: i32,
    /// Records in the batch.
    pub record_count: i32,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl BatchHeader {
    /// Parses the header at the start of `bytes` (a magic v2 batch). Checks lengths and ranges,
    /// not the CRC (see [`verify_crc`]).
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        if bytes.len() < MAGIC_AT + 1 {
            return Err(BatchError::Truncated {
                needed: HEADER_LEN,
                available: bytes.len(),
            });
        }
        let base_offset = be_i64(bytes, 0);
        let magic = bytes[MAGIC_AT] as i8;
        if magic != 2 {
            return Err(BatchError::Magic { base_offset, magic });
        }
        if bytes.len() < HEADER_LEN {
            return Err(BatchError::Truncated {
                needed: HEADER_LEN,
                available: bytes.len(),
            });
        }
        let header = BatchHeader {
            base_offset,
            length: be_i32(bytes, 8),
            partition_leader_epoch: be_i32(bytes, 12),
            magic,
            crc: u32::from_be_bytes(bytes[CRC_AT..CRC_AT + 4].try_into().expect("4 bytes")),
            attributes: be_i16(bytes, ATTRIBUTES_AT),
            last_offset_delta: be_i32(bytes, 23),
            base_timestamp: be_i64(bytes, 27),
            max_timestamp: be_i64(bytes, 35),
            producer_id: be_i64(bytes, 43),
            producer_epoch: be_i16(bytes, 51),
            base_sequence: be_i32(bytes, 53),
            record_count: be_i32(bytes, 57),
        };
        let malformed = |reason: &str| BatchError::Malformed {
            base_offset,
            reason: reason.to_string(),
        };
        if (header.length as i64) < (HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Err(malformed("batch length shorter than its header"));
        }
        if header.record_count < 0 || header.last_offset_delta < 0 {
            return Err(malformed("negative record count or last offset delta"));
        }
        if Codec::from_attributes(header.attributes).is_none() {
            return Err(malformed("unknown compression codec"));
        }
        Ok(header)
    }

    /// Total bytes of the batch.
    pub fn size(&self) -> usize {
        LOG_OVERHEAD + self.length as usize
    }

    /// The compression codec.
    pub fn codec(&self) -> Codec {
        Codec::from_attributes(self.attributes).expect("checked by parse")
    }

    /// The timestamp type.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Written inside a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    /// A control batch (transaction commit/abort marker).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// The base timestamp holds the delete horizon (set by compaction).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_BIT != 0
    }

    /// Offset of the last record (also after compaction removed records).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }

    /// The offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    /// Every offset from base to last holds a record (no compaction gaps, not empty): the
    /// batch can be produced as it is and lands on as many offsets as it spans.
    pub fn is_dense(&self) -> bool {
        self.record_count > 0 && self.record_count as i64 == self.last_offset_delta as i64 + 1
    }
}

/// Checks the stored CRC-32C of a magic v2 batch against its bytes.
pub fn verify_crc(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if batch.len() < header.size() {
        return Err(BatchError::Truncated {
            needed: header.size(),
            available: batch.len(),
        });
    }
    let computed = crc32c::crc32c(&batch[ATTRIBUTES_AT..header.size()]);
    if computed != header.crc {
        return Err(BatchError::Crc {
            base_offset: header.base_offset,
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// How a batch is rewritten for the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrite {
    /// The destination producer's id.
    pub producer_id: i64,
    /// The destination producer's epoch.
    pub producer_epoch: i16,
    /// Sequence number of the batch's first record.
    pub base_sequence: i32,
}

/// The sequence number after a batch of `record_count` records starting at `base_sequence`
/// (sequences wrap from `i32::MAX` to 0, as the broker counts them).
pub fn next_sequence(base_sequence: i32, record_count: i32) -> i32 {
    let next = base_sequence as i64 + record_count as i64;
    (next % (i32::MAX as i64 + 1)) as i32
}

/// Rewrites the batch at the start of `batch` in place for the destination: base offset 0 (the
/// broker assigns offsets and, since Kafka 4, refuses any other base offset from a client),
/// partition leader epoch -1 (the broker sets it), producer id/epoch, base sequence, and clears
/// the transactional and delete-horizon bits; the codec, timestamp type, timestamps, records and
/// counts stay. The source CRC is verified first (a corrupt batch is never re-signed), then the
/// CRC is recomputed. Returns the new header.
pub fn rewrite_in_place(batch: &mut [u8], rewrite: &Rewrite) -> Result<BatchHeader, BatchError> {
    let header = verify_crc(batch)?;
    if header.is_control() {
        return Err(BatchError::Control {
            base_offset: header.base_offset,
        });
    }
    let size = header.size();
    let batch = &mut batch[..size];
    batch[0..8].copy_from_slice(&0i64.to_be_bytes());
    batch[12..16].copy_from_slice(&(-1i32).to_be_bytes());
    let attributes = header.attributes & !(TRANSACTIONAL_BIT | DELETE_HORIZON_BIT);
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[43..51].copy_from_slice(&rewrite.producer_id.to_be_bytes());
    batch[51..53].copy_from_slice(&rewrite.producer_epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&rewrite.base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    BatchHeader::parse(batch)
}

/// A rewritten copy of `batch` (see [`rewrite_in_place`]), ready to produce.
pub fn rewrite(batch: &[u8], rewrite: &Rewrite) -> Result<Bytes, BatchError> {
    let header = BatchHeader::parse(batch)?;
    let size = header.size().min(batch.len());
    let mut copy = batch[..size].to_vec();
    rewrite_in_place(&mut copy, rewrite)?;
    Ok(Bytes::from(copy))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A hand-built batch: one record, key "k", value "hello", no compression, producer id
    /// 1000 epoch 0 sequence 0, base offset 7, partition leader epoch 3.
    fn built_batch() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&7i64.to_be_bytes()); // base offset
        b.extend_from_slice(&0i32.to_be_bytes()); // length, fixed below
        b.extend_from_slice(&3i32.to_be_bytes()); // partition leader epoch
        b.push(2); // magic
        b.extend_from_slice(&0u32.to_be_bytes()); // crc, fixed below
        b.extend_from_slice(&0i16.to_be_bytes()); // attributes
        b.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
        b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // base timestamp
        b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // max timestamp
        b.extend_from_slice(&1000i64.to_be_bytes()); // producer id
        b.extend_from_slice(&0i16.to_be_bytes()); // producer epoch
        b.extend_from_slice(&0i32.to_be_bytes()); // base sequence
        b.extend_from_slice(&1i32.to_be_bytes()); // record count
        // record: length 16 (zigzag 32), attributes 0, ts delta 0, offset delta 0,
        // key len 1 "k", value len 5 "hello", 0 headers
        b.extend_from_slice(&[
            0x20, 0, 0, 0, 0x02, b'k', 0x0a, b'h', b'e', b'l', b'l', b'o', 0,
        ]);
        let length = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Batches as Kafka 4.1's Java producer (kafka-console-producer) wrote them and the broker
    /// stored them: key "k", value "hello" uncompressed at offset 0; key "k", value "world" in
    /// LZ4 at offset 1. The CRCs are Java's.
    pub(crate) const JAVA_PLAIN: &str = "00000000000000000000003e000000000255c94d110000000000000000\
        01a22f3e3c27000001a22f3e3c27000000000000094e0000000000000000000118000000026b0a68656c6c6f00";
    pub(crate) const JAVA_LZ4: &str = "00000000000000010000004d000000000265983a78000300000000000001\
        a22f3ef06f000001a22f3ef06f000000000000094f0000000000000000000104224d186040820d000080180000\
        00026b0a776f726c640000000000";
    /// The same batches rewritten for producer 77, epoch 5, sequence 9; CRCs computed with a
    /// bitwise CRC-32C written separately (Python), not with the crc32c crate.
    const REWRITTEN_PLAIN: &str = "00000000000000000000003effffffff029904ac100000000000000000\
        01a22f3e3c27000001a22f3e3c27000000000000004d0005000000090000000118000000026b0a68656c6c6f00";
    const REWRITTEN_LZ4: &str = "00000000000000000000004dffffffff028721015d000300000000000001\
        a22f3ef06f000001a22f3ef06f000000000000004d0005000000090000000104224d186040820d000080180000\
        00026b0a776f726c640000000000";

    #[test]
    fn java_batches_parse_and_rewrite_to_known_bytes() {
        let plain = hex(JAVA_PLAIN);
        let h = verify_crc(&plain).expect("Java's CRC");
        assert_eq!(
            (h.base_offset, h.length, h.partition_leader_epoch),
            (0, 62, 0)
        );
        assert_eq!(
            (h.crc, h.codec(), h.record_count, h.last_offset_delta),
            (0x55c9_4d11, Codec::None, 1, 0)
        );
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (2382, 0, 0)
        );
        assert_eq!(h.base_timestamp, h.max_timestamp);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        let lz4 = hex(JAVA_LZ4);
        let h = verify_crc(&lz4).expect("Java's CRC");
        assert_eq!(
            (h.base_offset, h.codec(), h.record_count, h.producer_id),
            (1, Codec::Lz4, 1, 2383)
        );

        let rw = Rewrite {
            producer_id: 77,
            producer_epoch: 5,
            base_sequence: 9,
        };
        assert_eq!(
            rewrite(&plain, &rw).unwrap().as_ref(),
            hex(REWRITTEN_PLAIN).as_slice()
        );
        assert_eq!(
            rewrite(&lz4, &rw).unwrap().as_ref(),
            hex(REWRITTEN_LZ4).as_slice()
        );
    }

    #[test]
    fn crc32c_known_vector() {
        // RFC 3720 (iSCSI) B.4: 32 bytes of zeros.
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn header_fields_parse() {
        let b = built_batch();
        let h = verify_crc(&b).unwrap();
        assert_eq!(h.base_offset, 7);
        assert_eq!(h.size(), b.len());
        assert_eq!(h.partition_leader_epoch, 3);
        assert_eq!(h.magic, 2);
        assert_eq!(h.codec(), Codec::None);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        assert!(!h.is_transactional() && !h.is_control() && !h.has_delete_horizon());
        assert_eq!((h.last_offset(), h.next_offset()), (7, 8));
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (1000, 0, 0)
        );
        assert_eq!(h.record_count, 1);
        assert!(h.is_dense());
    }

    #[test]
    fn rewrite_changes_only_the_header_and_re_signs() {
        let mut b = built_batch();
        // Mark it transactional with a delete horizon and LZ4-less codec bits kept.
        let attrs = TRANSACTIONAL_BIT | DELETE_HORIZON_BIT | TIMESTAMP_TYPE_BIT;
        b[21..23].copy_from_slice(&attrs.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let out = rewrite(
            &b,
            &Rewrite {
                producer_id: 77,
                producer_epoch: 5,
                base_sequence: 9,
            },
        )
        .unwrap();
        let h = verify_crc(&out).unwrap();
        assert_eq!(h.base_offset, 0);
        assert_eq!(h.partition_leader_epoch, -1);
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (77, 5, 9)
        );
        assert!(!h.is_transactional() && !h.has_delete_horizon());
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime, "kept");
        assert_eq!(out[HEADER_LEN..], b[HEADER_LEN..], "records untouched");
        assert_eq!(out[27..43], b[27..43], "timestamps untouched");
        assert_ne!(h.crc, crc);
    }

    #[test]
    fn corrupt_and_control_batches_are_refused() {
        let mut b = built_batch();
        let last = b.len() - 2;
        b[last] ^= 0xff;
        let rw = Rewrite {
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: 0,
        };
        assert!(matches!(
            rewrite(&b, &rw),
            Err(BatchError::Crc { base_offset: 7, .. })
        ));
        let mut c = built_batch();
        c[21..23].copy_from_slice(&CONTROL_BIT.to_be_bytes());
        let crc = crc32c::crc32c(&c[21..]);
        c[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            rewrite(&c, &rw),
            Err(BatchError::Control { base_offset: 7 })
        );
    }

    #[test]
    fn sequences_wrap() {
        assert_eq!(next_sequence(0, 5), 5);
        assert_eq!(next_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(next_sequence(i32::MAX, 1), 0);
    }

    #[test]
    fn density() {
        let b = built_batch();
        let mut h = BatchHeader::parse(&b).unwrap();
        h.last_offset_delta = 4;
        h.record_count = 3;
        assert!(!h.is_dense(), "compacted: 3 records over 5 offsets");
        h.record_count = 0;
        h.last_offset_delta = 0;
        assert!(!h.is_dense(), "empty");
    }
}
