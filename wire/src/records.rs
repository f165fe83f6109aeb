//! The records inside a magic v2 batch: decoding (after decompression with kafka-protocol's
//! gzip/snappy/lz4/zstd codecs) and encoding new batches, for the record path and for tests.
//!
//! Records are decoded here rather than with kafka-protocol's `Record`, whose headers are a map:
//! Kafka allows repeated header keys, and a mirror must keep every header in order.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as codecs, Compressor, Decompressor};

use crate::batch::{BatchError, BatchHeader, Codec, HEADER_LEN, TimestampType, verify_crc};

/// One record of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset (base offset + offset delta).
    pub offset: i64,
    /// Timestamp: create time, or the batch's append time for LogAppendTime batches.
    pub timestamp: i64,
    /// Key (`None`: null).
    pub key: Option<Bytes>,
    /// Value (`None`: null, a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order; keys may repeat.
    pub headers: Vec<Header>,
}

/// A record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Key (UTF-8 by convention, kept as bytes).
    pub key: Bytes,
    /// Value (`None`: null).
    pub value: Option<Bytes>,
}

/// What a control record marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    /// The producer's transaction was aborted.
    Abort,
    /// The producer's transaction was committed.
    Commit,
    /// Another control type (e.g. KRaft or leader-change markers).
    Other(i16),
}

impl Record {
    /// The control type of a record in a control batch (its key: version i16, type i16).
    pub fn control_type(&self) -> Option<ControlType> {
        let key = self.key.as_ref()?;
        if key.len() < 4 {
            return None;
        }
        Some(match i16::from_be_bytes([key[2], key[3]]) {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            other => ControlType::Other(other),
        })
    }
}

fn records_error(base_offset: i64, reason: impl Into<String>) -> BatchError {
    BatchError::Records {
        base_offset,
        reason: reason.into(),
    }
}

pub(crate) fn decompress(codec: Codec, mut data: Bytes) -> anyhow::Result<Bytes> {
    fn take(buf: &mut Bytes) -> anyhow::Result<Bytes> {
        Ok(buf.copy_to_bytes(buf.remaining()))
    }
    match codec {
        Codec::None => Ok(data),
        Codec::Gzip => codecs::Gzip::decompress(&mut data, take),
        Codec::Snappy => codecs::Snappy::decompress(&mut data, take),
        Codec::Lz4 => codecs::Lz4::decompress(&mut data, take),
        Codec::Zstd => codecs::Zstd::decompress(&mut data, take),
    }
}

pub(crate) fn compress(codec: Codec, plain: &[u8], out: &mut BytesMut) -> anyhow::Result<()> {
    fn put(plain: &[u8]) -> impl FnOnce(&mut BytesMut) -> anyhow::Result<()> + '_ {
        move |buf| {
            buf.put_slice(plain);
            Ok(())
        }
    }
    match codec {
        Codec::None => {
            out.put_slice(plain);
            Ok(())
        }
        Codec::Gzip => codecs::Gzip::compress(out, put(plain)),
        Codec::Snappy => codecs::Snappy::compress(out, put(plain)),
        Codec::Lz4 => codecs::Lz4::compress(out, put(plain)),
        Codec::Zstd => codecs::Zstd::compress(out, put(plain)),
    }
}

/// Reads a zigzag varint (at most 5 bytes).
fn varint(buf: &mut Bytes) -> Option<i32> {
    varlong_limited(buf, 5).map(|v| v as i32)
}

/// Reads a zigzag varlong (at most 10 bytes).
fn varlong(buf: &mut Bytes) -> Option<i64> {
    varlong_limited(buf, 10)
}

fn varlong_limited(buf: &mut Bytes, max_bytes: usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for i in 0..max_bytes {
        if !buf.has_remaining() {
            return None;
        }
        let b = buf.get_u8();
        raw |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    None
}

fn put_varlong(buf: &mut BytesMut, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        buf.put_u8((raw as u8) | 0x80);
        raw >>= 7;
    }
    buf.put_u8(raw as u8);
}

fn nullable_bytes(buf: &mut Bytes) -> Option<Option<Bytes>> {
    let len = varint(buf)?;
    match len {
        -1 => Some(None),
        n if n < 0 || n as usize > buf.remaining() => None,
        n => Some(Some(buf.split_to(n as usize))),
    }
}

fn put_nullable(buf: &mut BytesMut, value: Option<&[u8]>) {
    match value {
        None => put_varlong(buf, -1),
        Some(v) => {
            put_varlong(buf, v.len() as i64);
            buf.put_slice(v);
        }
    }
}

/// Decodes every record of the magic v2 batch in `batch` (CRC checked, records decompressed).
pub fn decode_batch(batch: &Bytes) -> Result<(BatchHeader, Vec<Record>), BatchError> {
    let header = verify_crc(batch)?;
    let base = header.base_offset;
    let data = batch.slice(HEADER_LEN..header.size());
    let mut plain = decompress(header.codec(), data)
        .map_err(|e| records_error(base, format!("{:?} decompression: {e:#}", header.codec())))?;
    let log_append = header.timestamp_type() == TimestampType::LogAppendTime;
    let mut records = Vec::with_capacity(header.record_count as usize);
    for i in 0..header.record_count {
        let bad = || records_error(base, format!("record {i} is malformed"));
        let length = varint(&mut plain).ok_or_else(bad)?;
        if length < 0 || length as usize > plain.remaining() {
            return Err(bad());
        }
        let mut r = plain.split_to(length as usize);
        if !r.has_remaining() {
            return Err(bad());
        }
        let _attributes = r.get_u8();
        let timestamp_delta = varlong(&mut r).ok_or_else(bad)?;
        let offset_delta = varint(&mut r).ok_or_else(bad)?;
        let key = nullable_bytes(&mut r).ok_or_else(bad)?;
        let value = nullable_bytes(&mut r).ok_or_else(bad)?;
        let count = varint(&mut r).ok_or_else(bad)?;
        if count < 0 {
            return Err(bad());
        }
        let mut headers = Vec::with_capacity(count.min(1024) as usize);
        for _ in 0..count {
            let key = nullable_bytes(&mut r).ok_or_else(bad)?.ok_or_else(bad)?;
            let value = nullable_bytes(&mut r).ok_or_else(bad)?;
            headers.push(Header { key, value });
        }
        records.push(Record {
            offset: base + offset_delta as i64,
            timestamp: if log_append {
                header.max_timestamp
            } else {
                header.base_timestamp + timestamp_delta
            },
            key,
            value,
            headers,
        });
    }
    Ok((header, records))
}

/// Producer identity written into a new batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchProducer {
    /// Producer id (-1: none).
    pub producer_id: i64,
    /// Producer epoch (-1: none).
    pub producer_epoch: i16,
    /// Sequence of the first record (-1: none).
    pub base_sequence: i32,
}

impl BatchProducer {
    /// No producer identity (a non-idempotent batch).
    pub const NONE: BatchProducer = BatchProducer {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
}

/// Encodes `records` as one magic v2 batch with CreateTime timestamps, compressed with `codec`.
/// Record offsets become `base_offset + index` (dense); each record's own `offset` is ignored.
pub fn encode_batch(
    records: &[Record],
    codec: Codec,
    base_offset: i64,
    producer: BatchProducer,
) -> Result<Bytes, BatchError> {
    if records.is_empty() {
        return Err(records_error(
            base_offset,
            "a batch needs at least one record",
        ));
    }
    let base_timestamp = records[0].timestamp;
    let max_timestamp = records
        .iter()
        .map(|r| r.timestamp)
        .max()
        .unwrap_or(base_timestamp);
    let mut plain = BytesMut::new();
    let mut body = BytesMut::new();
    for (i, record) in records.iter().enumerate() {
        body.clear();
        body.put_u8(0);
        put_varlong(&mut body, record.timestamp - base_timestamp);
        put_varlong(&mut body, i as i64);
        put_nullable(&mut body, record.key.as_deref());
        put_nullable(&mut body, record.value.as_deref());
        put_varlong(&mut body, record.headers.len() as i64);
        for h in &record.headers {
            put_nullable(&mut body, Some(&h.key));
            put_nullable(&mut body, h.value.as_deref());
        }
        put_varlong(&mut plain, body.len() as i64);
        plain.put_slice(&body);
    }
    let mut out = BytesMut::with_capacity(HEADER_LEN + plain.len());
    out.put_i64(base_offset);
    out.put_i32(0); // length, below
    out.put_i32(-1); // partition leader epoch
    out.put_i8(2);
    out.put_u32(0); // crc, below
    out.put_i16(codec.bits());
    out.put_i32(records.len() as i32 - 1);
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(producer.producer_id);
    out.put_i16(producer.producer_epoch);
    out.put_i32(producer.base_sequence);
    out.put_i32(records.len() as i32);
    compress(codec, &plain, &mut out)
        .map_err(|e| records_error(base_offset, format!("{codec:?} compression: {e:#}")))?;
    let length = i32::try_from(out.len() - 12)
        .map_err(|_| records_error(base_offset, "batch larger than 2 GiB"))?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                offset: 0,
                timestamp: 1_700_000_000_000 + (i as i64 % 7) * 13 - 20,
                key: (i % 3 != 0).then(|| Bytes::from(format!("key-{i}"))),
                value: (i % 5 != 4).then(|| Bytes::from(format!("value-{i}-").repeat(i % 50))),
                headers: vec![
                    Header {
                        key: Bytes::from_static(b"h"),
                        value: Some(Bytes::from(format!("{i}"))),
                    },
                    Header {
                        key: Bytes::from_static(b"h"),
                        value: None,
                    },
                ],
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips_with_repeated_headers() {
        let records = sample(200);
        for codec in [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ] {
            let producer = BatchProducer {
                producer_id: 9,
                producer_epoch: 1,
                base_sequence: 100,
            };
            let batch = encode_batch(&records, codec, 1000, producer).unwrap();
            let (header, decoded) = decode_batch(&batch).unwrap();
            assert_eq!(header.codec(), codec);
            assert_eq!(header.record_count, 200);
            assert_eq!(header.last_offset_delta, 199);
            assert_eq!((header.producer_id, header.base_sequence), (9, 100));
            assert_eq!(
                header.max_timestamp,
                records.iter().map(|r| r.timestamp).max().unwrap()
            );
            for (i, (got, want)) in decoded.iter().zip(&records).enumerate() {
                assert_eq!(got.offset, 1000 + i as i64);
                assert_eq!(got.timestamp, want.timestamp);
                assert_eq!((&got.key, &got.value), (&want.key, &want.value));
                assert_eq!(got.headers, want.headers, "repeated keys kept in order");
            }
        }
    }

    #[test]
    fn java_lz4_batch_decodes() {
        let bytes: Vec<u8> = (0..crate::batch::tests::JAVA_LZ4.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&crate::batch::tests::JAVA_LZ4[i..i + 2], 16).unwrap())
            .collect();
        let (header, records) = decode_batch(&Bytes::from(bytes)).unwrap();
        assert_eq!(header.codec(), Codec::Lz4);
        assert_eq!(records.len(), 1);
        let r = &records[0];
        assert_eq!((r.offset, r.timestamp), (1, header.base_timestamp));
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"world"[..]));
        assert!(r.headers.is_empty());
    }

    #[test]
    fn varints_match_kafka() {
        // Kafka's ByteUtils zigzag examples.
        for (value, bytes) in [
            (0i64, vec![0x00]),
            (-1, vec![0x01]),
            (1, vec![0x02]),
            (63, vec![0x7e]),
            (-64, vec![0x7f]),
            (64, vec![0x80, 0x01]),
            (300, vec![0xd8, 0x04]),
        ] {
            let mut out = BytesMut::new();
            put_varlong(&mut out, value);
            assert_eq!(out.to_vec(), bytes, "{value}");
            assert_eq!(varlong(&mut Bytes::from(bytes)), Some(value));
        }
        assert_eq!(
            varint(&mut Bytes::from_static(&[
                0x80, 0x80, 0x80, 0x80, 0x80, 0x01
            ])),
            None
        );
    }

    #[test]
    fn truncated_records_are_errors() {
        let batch = encode_batch(&sample(3), Codec::None, 0, BatchProducer::NONE).unwrap();
        let mut cut = batch.to_vec();
        cut.truncate(cut.len() - 5);
        let length = (cut.len() - 12) as i32;
        cut[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&cut[21..]);
        cut[17..21].copy_from_slice(&crc.to_be_bytes());
        let err = decode_batch(&Bytes::from(cut)).unwrap_err();
        assert!(matches!(err, BatchError::Records { .. }), "{err}");
    }

    #[test]
    fn control_types() {
        let abort = Record {
            offset: 0,
            timestamp: 0,
            key: Some(Bytes::from_static(&[0, 0, 0, 0])),
            value: None,
            headers: vec![],
        };
        assert_eq!(abort.control_type(), Some(ControlType::Abort));
        let commit = Record {
            key: Some(Bytes::from_static(&[0, 0, 0, 1])),
            ..abort.clone()
        };
        assert_eq!(commit.control_type(), Some(ControlType::Commit));
    }
}
