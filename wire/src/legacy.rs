//! Messages of the old formats (magic 0 and 1, Kafka before 0.11 or topics pinned to an old
//! `message.format.version`): decoding for the record path, compressed wrappers included.
//!
//! ```text
//! offset i64, size i32, crc u32 (CRC-32 of magic..end), magic i8, attributes i8,
//! [timestamp i64 (magic 1)], key (i32 length, -1 null), value (i32 length, -1 null)
//! ```
//!
//! A compressed wrapper's value holds inner messages; with magic 1 their offsets are relative
//! (the wrapper carries the absolute offset of the last one), with magic 0 absolute.

use bytes::{Buf, Bytes};

use crate::batch::{BatchError, Codec, LegacyMessage};
use crate::records::{Record, decompress};

const TIMESTAMP_TYPE_BIT: i8 = 1 << 3;

fn malformed(offset: i64, reason: impl Into<String>) -> BatchError {
    BatchError::Malformed {
        base_offset: offset,
        reason: reason.into(),
    }
}

/// One parsed message (outer or inner).
struct Message {
    offset: i64,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
}

fn nullable(buf: &mut Bytes, offset: i64) -> Result<Option<Bytes>, BatchError> {
    if buf.remaining() < 4 {
        return Err(malformed(offset, "message ends inside a length"));
    }
    match buf.get_i32() {
        -1 => Ok(None),
        n if n < 0 || n as usize > buf.remaining() => {
            Err(malformed(offset, "message field longer than the message"))
        }
        n => Ok(Some(buf.split_to(n as usize))),
    }
}

/// Parses one message from the start of `buf` (offset and size included), checking its CRC.
fn parse(buf: &mut Bytes) -> Result<Message, BatchError> {
    if buf.remaining() < 12 {
        return Err(malformed(-1, "message shorter than its offset and size"));
    }
    let offset = buf.get_i64();
    let size = buf.get_i32();
    if size < 14 || size as usize > buf.remaining() {
        return Err(malformed(
            offset,
            format!("message size {size} out of range"),
        ));
    }
    let mut m = buf.split_to(size as usize);
    let stored = m.get_u32();
    let computed = kafka_protocol::records::IEEE.checksum(&m);
    if stored != computed {
        return Err(BatchError::Crc {
            base_offset: offset,
            stored,
            computed,
        });
    }
    let magic = m.get_i8();
    let attributes = m.get_i8();
    let timestamp = match magic {
        0 => -1,
        1 if m.remaining() >= 8 => m.get_i64(),
        1 => return Err(malformed(offset, "magic 1 message without a timestamp")),
        other => {
            return Err(BatchError::Magic {
                base_offset: offset,
                magic: other,
            });
        }
    };
    let key = nullable(&mut m, offset)?;
    let value = nullable(&mut m, offset)?;
    Ok(Message {
        offset,
        magic,
        attributes,
        timestamp,
        key,
        value,
    })
}

fn record(m: Message, offset: i64, timestamp: i64) -> Record {
    Record {
        offset,
        timestamp,
        key: m.key,
        value: m.value,
        headers: Vec::new(),
    }
}

/// Decodes a magic 0/1 message into its records (one, or the inner ones of a compressed
/// wrapper), with absolute offsets and the timestamps a consumer would see.
pub fn decode_legacy(message: &LegacyMessage) -> Result<Vec<Record>, BatchError> {
    let mut buf = message.bytes.clone();
    let outer = parse(&mut buf)?;
    let codec = Codec::from_attributes((outer.attributes & 0x7) as i16)
        .ok_or_else(|| malformed(outer.offset, "unknown compression codec"))?;
    if codec == Codec::None {
        let (offset, timestamp) = (outer.offset, outer.timestamp);
        return Ok(vec![record(outer, offset, timestamp)]);
    }
    let wrapper_offset = outer.offset;
    let log_append = outer.magic == 1 && outer.attributes & TIMESTAMP_TYPE_BIT != 0;
    let wrapper_timestamp = outer.timestamp;
    let mut compressed = outer
        .value
        .ok_or_else(|| malformed(wrapper_offset, "compressed wrapper without a value"))?;
    if codec == Codec::Lz4 && outer.magic == 0 {
        compressed = crate::legacy_lz4::fix_v0_header(compressed);
    }
    let mut inner = decompress(codec, compressed).map_err(|e| BatchError::Records {
        base_offset: wrapper_offset,
        reason: format!("{codec:?} decompression: {e:#}"),
    })?;
    let mut messages = Vec::new();
    while inner.has_remaining() {
        messages.push(parse(&mut inner)?);
    }
    let last_relative = messages.last().map_or(0, |m| m.offset);
    Ok(messages
        .into_iter()
        .map(|m| {
            let offset = if m.magic == 0 {
                m.offset
            } else {
                wrapper_offset - last_relative + m.offset
            };
            let timestamp = if log_append {
                wrapper_timestamp
            } else {
                m.timestamp
            };
            record(m, offset, timestamp)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{RawEntry, RecordBatches};
    use bytes::BufMut;

    /// Builds a message; the CRC is computed with a bitwise CRC-32 written here.
    fn message(
        offset: i64,
        magic: i8,
        attributes: i8,
        ts: i64,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Vec<u8> {
        let mut body = Vec::new();
        body.put_i8(magic);
        body.put_i8(attributes);
        if magic == 1 {
            body.put_i64(ts);
        }
        match key {
            None => body.put_i32(-1),
            Some(k) => {
                body.put_i32(k.len() as i32);
                body.put_slice(k);
            }
        }
        body.put_i32(value.len() as i32);
        body.put_slice(value);
        let mut crc: u32 = 0xffff_ffff;
        for b in &body {
            crc ^= *b as u32;
            for _ in 0..8 {
                crc = (crc >> 1) ^ if crc & 1 == 1 { 0xedb8_8320 } else { 0 };
            }
        }
        let mut out = Vec::new();
        out.put_i64(offset);
        out.put_i32(body.len() as i32 + 4);
        out.put_u32(!crc);
        out.extend_from_slice(&body);
        out
    }

    fn entries(bytes: Vec<u8>) -> Vec<LegacyMessage> {
        RecordBatches::new(Bytes::from(bytes))
            .map(|e| match e.unwrap() {
                RawEntry::Legacy(m) => m,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn plain_messages_of_both_magics() {
        let mut blob = message(7, 0, 0, 0, None, b"zero");
        blob.extend(message(8, 1, 0, 1234, Some(b"k"), b"one"));
        let got: Vec<Record> = entries(blob)
            .iter()
            .flat_map(|m| decode_legacy(m).unwrap())
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].offset, got[0].timestamp, got[0].key.clone()),
            (7, -1, None)
        );
        assert_eq!(got[0].value.as_deref(), Some(&b"zero"[..]));
        assert_eq!((got[1].offset, got[1].timestamp), (8, 1234));
        assert_eq!(got[1].key.as_deref(), Some(&b"k"[..]));
    }

    #[test]
    fn compressed_wrappers_have_absolute_offsets_and_their_timestamps() {
        let mut inner = message(0, 1, 0, 100, None, b"a");
        inner.extend(message(1, 1, 0, 101, None, b"b"));
        inner.extend(message(2, 1, 0, 102, None, b"c"));
        let mut compressed = bytes::BytesMut::new();
        crate::records::compress(Codec::Gzip, &inner, &mut compressed).unwrap();
        // Wrapper at the last inner offset 22: inner offsets 20, 21, 22.
        let wrapper = message(22, 1, Codec::Gzip.bits() as i8, 500, None, &compressed);
        let got = decode_legacy(&entries(wrapper.clone())[0]).unwrap();
        assert_eq!(
            got.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![20, 21, 22]
        );
        assert_eq!(
            got.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
            vec![100, 101, 102]
        );
        // The same wrapper with LogAppendTime: every record reads the wrapper's time.
        let appended = message(
            22,
            1,
            Codec::Gzip.bits() as i8 | TIMESTAMP_TYPE_BIT,
            500,
            None,
            &compressed,
        );
        let got = decode_legacy(&entries(appended)[0]).unwrap();
        assert!(got.iter().all(|r| r.timestamp == 500));
        // A flipped bit fails the CRC.
        let mut bad = wrapper;
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            decode_legacy(&entries(bad)[0]),
            Err(BatchError::Crc {
                base_offset: 22,
                ..
            })
        ));
    }
}
