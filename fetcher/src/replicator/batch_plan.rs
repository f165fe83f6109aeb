//! What the batch engine does with each entry of a fetched partition, decided without I/O: pass
//! a record batch on as its bytes (only the header is rewritten later), copy its records through
//! the record path (re-encoded into new batches), or skip it (control batches, aborted
//! transactions, empty batches, what lies below the fetch offset). Pure; the tables in the tests
//! are its specification.

use bytes::Bytes;
use kmirror_wire::batch::TimestampType;
use kmirror_wire::records::{BatchProducer, ControlType, Record, decode_batch, encode_batch};
use kmirror_wire::{AbortedTransaction, BatchError, Codec, RawBatch, RawEntry, decode_legacy};

/// Why a batch's records are re-encoded instead of passing as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecordPath {
    /// A message of the old formats (magic 0/1).
    Legacy,
    /// The batch starts below the fetch offset (a restart inside it).
    Partial,
    /// Its inner offsets have holes (compaction removed records).
    Sparse,
    /// Larger than the destination's `max.message.bytes`.
    TooLarge,
    /// A LogAppendTime batch: its records carry the append time as their timestamp, as source
    /// consumers see it, in a CreateTime batch — brokers refuse a produced batch marked
    /// LogAppendTime (`INVALID_TIMESTAMP`, "Producer should not set timestamp type to
    /// LogAppendTime"), whatever the destination topic's own timestamp type.
    AppendTime,
    /// A timestamp outside the destination's bounds: each record is checked, so that a refusal
    /// names the record and the records before it are copied.
    TimestampBounds,
}

impl RecordPath {
    /// The metric label.
    pub(super) fn label(self) -> &'static str {
        match self {
            RecordPath::Legacy => "legacy_format",
            RecordPath::Partial => "partial",
            RecordPath::Sparse => "sparse",
            RecordPath::TooLarge => "too_large",
            RecordPath::AppendTime => "append_time",
            RecordPath::TimestampBounds => "timestamp_bounds",
        }
    }
}

/// One thing to copy, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Piece {
    /// A dense data batch at or above the fetch offset: produced as its bytes.
    Pass(RawBatch),
    /// Records to re-encode (offsets ascending, at or above the fetch offset, possibly with
    /// holes), their source leader epoch (-1: unknown) and the codec to compress them with.
    Records {
        /// The records.
        records: Vec<Record>,
        /// Source leader epoch of the batch they came from.
        epoch: i32,
        /// Codec of the batch they came from.
        codec: Codec,
        /// Why they could not pass as a batch.
        why: RecordPath,
    },
}

impl Piece {
    /// Source offset of the first record.
    #[cfg(test)]
    fn first_offset(&self) -> i64 {
        match self {
            Piece::Pass(b) => b.header.base_offset,
            Piece::Records { records, .. } => records.first().map_or(-1, |r| r.offset),
        }
    }
}

/// What the destination topic accepts, as far as passing batches goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Destination {
    /// Effective `max.message.bytes` (a batch over it goes through the record path).
    pub max_message_bytes: Option<i64>,
    /// `message.timestamp.type=CreateTime`.
    pub create_time: bool,
    /// How old (ms) and how far ahead of the clock (ms) a CreateTime timestamp may be.
    pub before_ms: Option<i64>,
    /// See `before_ms`.
    pub after_ms: Option<i64>,
    /// The clock, ms since the epoch.
    pub now_ms: i64,
}

/// The plan for one fetched partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    /// What to copy, in log order.
    pub pieces: Vec<Piece>,
    /// The next offset to fetch: past every complete entry looked at (copied or skipped).
    pub next_offset: i64,
    /// Source leader epoch of the last v2 batch looked at.
    pub last_epoch: Option<i32>,
    /// Source offsets skipped as control records or aborted transactions.
    pub skipped: u64,
}

/// Plans the entries of `records` (a fetch response's record set for a partition fetched from
/// `fetch_offset`). `aborted` is the response's aborted-transaction list (read_committed; empty
/// otherwise). An entry that fails to parse, decode or pass its CRC check is an error: it is
/// never copied.
pub(super) fn plan(
    fetch_offset: i64,
    records: Bytes,
    aborted: &[AbortedTransaction],
    destination: Destination,
) -> Result<Plan, BatchError> {
    let mut aborted: Vec<AbortedTransaction> = aborted.to_vec();
    aborted.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
    // Producers whose aborted transaction is open at the current position (Kafka's consumer
    // does the same: an aborted transaction starts at its first offset and ends with the
    // producer's ABORT marker).
    let mut aborting: Vec<i64> = Vec::new();
    let mut plan = Plan {
        pieces: Vec::new(),
        next_offset: fetch_offset,
        last_epoch: None,
        skipped: 0,
    };
    for entry in kmirror_wire::RecordBatches::new(records) {
        let entry = entry?;
        let next = entry.next_offset();
        if next <= plan.next_offset {
            continue; // wholly below the fetch offset
        }
        match entry {
            RawEntry::Legacy(message) => {
                let records: Vec<Record> = decode_legacy(&message)?
                    .into_iter()
                    .filter(|r| r.offset >= plan.next_offset)
                    .collect();
                if !records.is_empty() {
                    plan.pieces.push(Piece::Records {
                        records,
                        epoch: -1,
                        codec: Codec::from_attributes(i16::from(message.attributes))
                            .unwrap_or(Codec::None),
                        why: RecordPath::Legacy,
                    });
                }
            }
            RawEntry::Batch(batch) => {
                let h = batch.header;
                plan.last_epoch = Some(h.partition_leader_epoch);
                while aborted
                    .last()
                    .is_some_and(|a| a.first_offset <= h.last_offset())
                {
                    let a = aborted.pop().expect("checked");
                    if !aborting.contains(&a.producer_id) {
                        aborting.push(a.producer_id);
                    }
                }
                if h.is_control() {
                    let (_, control) = decode_batch(&batch.bytes)?;
                    if control
                        .first()
                        .and_then(Record::control_type)
                        .is_some_and(|t| t == ControlType::Abort)
                    {
                        aborting.retain(|&p| p != h.producer_id);
                    }
                    plan.skipped += (next - plan.next_offset.max(h.base_offset)) as u64;
                } else if h.record_count == 0
                    || (h.is_transactional() && aborting.contains(&h.producer_id))
                {
                    plan.skipped += (next - plan.next_offset.max(h.base_offset)) as u64;
                } else if let Some(why) = record_path(&batch, plan.next_offset, destination) {
                    let from = plan.next_offset;
                    let (_, records) = decode_batch(&batch.bytes)?;
                    let records: Vec<Record> =
                        records.into_iter().filter(|r| r.offset >= from).collect();
                    if !records.is_empty() {
                        plan.pieces.push(Piece::Records {
                            records,
                            epoch: h.partition_leader_epoch,
                            codec: h.codec(),
                            why,
                        });
                    }
                } else {
                    kmirror_wire::batch::verify_crc(&batch.bytes)?;
                    plan.pieces.push(Piece::Pass(batch));
                }
            }
        }
        plan.next_offset = next;
    }
    Ok(plan)
}

/// Why `batch` cannot pass as its bytes, if it cannot.
fn record_path(
    batch: &RawBatch,
    fetch_offset: i64,
    destination: Destination,
) -> Option<RecordPath> {
    let h = &batch.header;
    if h.base_offset < fetch_offset {
        Some(RecordPath::Partial)
    } else if !h.is_dense() {
        Some(RecordPath::Sparse)
    } else if destination
        .max_message_bytes
        .is_some_and(|limit| h.size() as i64 > limit)
    {
        Some(RecordPath::TooLarge)
    } else if h.timestamp_type() == TimestampType::LogAppendTime {
        Some(RecordPath::AppendTime)
    } else if destination.create_time && !within_bounds(batch, destination) {
        Some(RecordPath::TimestampBounds)
    } else {
        None
    }
}

/// Whether every record's timestamp is within the destination's bounds. The newest is in the
/// header; the oldest may be any record's (timestamps within a batch need not be in order), so a
/// bound on the age is checked record by record (a batch that cannot be decoded is left to the
/// record path, which reports why).
fn within_bounds(batch: &RawBatch, d: Destination) -> bool {
    let ok = |ts: i64| {
        ts < 0
            || (d.after_ms.is_none_or(|b| ts.saturating_sub(d.now_ms) <= b)
                && d.before_ms.is_none_or(|b| d.now_ms.saturating_sub(ts) <= b))
    };
    let h = &batch.header;
    if !(ok(h.base_timestamp) && ok(h.max_timestamp)) {
        return false;
    }
    if d.before_ms.is_none() {
        return true;
    }
    match decode_batch(&batch.bytes) {
        Ok((_, records)) => records.iter().all(|r| ok(r.timestamp)),
        Err(_) => false,
    }
}

/// The records of the record path encoded into batches (no producer identity yet) that each fit
/// `max_message_bytes` as the broker measures them — batch header, record and header framing
/// and the codec's own overhead included: a run estimated to fit is encoded, and one that comes
/// out too large is split in two and encoded again. A record whose batch alone exceeds the limit
/// is a batch of its own, for the destination to accept or refuse by name. Returns each batch
/// with the number of records in it, in order.
pub(super) fn encode_fitting(
    records: &[Record],
    codec: Codec,
    max_message_bytes: Option<i64>,
) -> Result<Vec<(usize, Bytes)>, BatchError> {
    fn fit(
        run: &[Record],
        codec: Codec,
        limit: Option<usize>,
        out: &mut Vec<(usize, Bytes)>,
    ) -> Result<(), BatchError> {
        let encoded = encode_batch(run, codec, 0, BatchProducer::NONE)?;
        match limit {
            Some(limit) if encoded.len() > limit && run.len() > 1 => {
                let (a, b) = run.split_at(run.len() / 2);
                fit(a, codec, Some(limit), out)?;
                fit(b, codec, Some(limit), out)
            }
            _ => {
                out.push((run.len(), encoded));
                Ok(())
            }
        }
    }
    let limit = max_message_bytes.map(|m| m.max(0) as usize);
    let mut out = Vec::new();
    for run in chunks(records, max_message_bytes) {
        fit(run, codec, limit, &mut out)?;
    }
    Ok(out)
}

/// Splits records for the record path into runs estimated to fit `max_message_bytes` (their
/// sizes with framing; [`encode_fitting`] checks the encoded size).
pub(super) fn chunks(records: &[Record], max_message_bytes: Option<i64>) -> Vec<&[Record]> {
    // Room for the batch header.
    let limit = max_message_bytes.map_or(usize::MAX, |m| (m.max(0) as usize).saturating_sub(512));
    let mut out = Vec::new();
    let mut start = 0;
    let mut size = 0usize;
    for (i, r) in records.iter().enumerate() {
        // Record framing, and each header's.
        let len = record_size(r) + 32 + 12 * r.headers.len();
        if i > start && size + len > limit {
            out.push(&records[start..i]);
            start = i;
            size = 0;
        }
        size += len;
    }
    if start < records.len() {
        out.push(&records[start..]);
    }
    out
}

/// Bytes of key, value and headers.
pub(super) fn record_size(r: &Record) -> usize {
    r.key.as_ref().map_or(0, Bytes::len)
        + r.value.as_ref().map_or(0, Bytes::len)
        + r.headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kmirror_wire::records::{BatchProducer, encode_batch};

    fn record(offset: i64, value: &str) -> Record {
        Record {
            offset,
            timestamp: 1_700_000_000_000 + offset,
            key: Some(Bytes::from(format!("k{offset}"))),
            value: Some(Bytes::from(value.to_string())),
            headers: Vec::new(),
        }
    }

    /// A dense batch of `count` records from `base`, with `attributes` bits or'ed in and the
    /// header fields patched (the CRC recomputed).
    fn batch(base: i64, count: i64, producer: i64, patch: impl Fn(&mut [u8])) -> Vec<u8> {
        let records: Vec<Record> = (base..base + count).map(|o| record(o, "v")).collect();
        let mut b = encode_batch(
            &records,
            Codec::None,
            base,
            BatchProducer {
                producer_id: producer,
                producer_epoch: 0,
                base_sequence: 0,
            },
        )
        .unwrap()
        .to_vec();
        b[12..16].copy_from_slice(&4i32.to_be_bytes()); // leader epoch 4
        patch(&mut b);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// A dense batch from `base` with one record per timestamp, in that order.
    fn timestamps(base: i64, ts: &[i64]) -> Vec<u8> {
        let records: Vec<Record> = ts
            .iter()
            .enumerate()
            .map(|(i, &t)| Record {
                timestamp: t,
                ..record(base + i as i64, "v")
            })
            .collect();
        encode_batch(&records, Codec::None, base, BatchProducer::NONE)
            .unwrap()
            .to_vec()
    }

    fn attributes(bits: i16) -> impl Fn(&mut [u8]) {
        move |b: &mut [u8]| {
            let a = i16::from_be_bytes([b[21], b[22]]) | bits;
            b[21..23].copy_from_slice(&a.to_be_bytes());
        }
    }

    const TRANSACTIONAL: i16 = 0x10;
    const CONTROL: i16 = 0x20;
    const LOG_APPEND_TIME: i16 = 0x08;

    /// A control batch at `offset` from `producer`: ABORT (0) or COMMIT (1).
    fn marker(offset: i64, producer: i64, kind: i16) -> Vec<u8> {
        let mut key = Vec::new();
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&kind.to_be_bytes());
        let r = Record {
            offset,
            timestamp: 1,
            key: Some(Bytes::from(key)),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            headers: Vec::new(),
        };
        let mut b = encode_batch(
            &[r],
            Codec::None,
            offset,
            BatchProducer {
                producer_id: producer,
                producer_epoch: 0,
                base_sequence: -1,
            },
        )
        .unwrap()
        .to_vec();
        attributes(CONTROL | TRANSACTIONAL)(&mut b);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// Removes the record at `drop` (an offset inside the batch) as compaction would: the
    /// batch keeps its base offset and last offset delta.
    fn compacted(base: i64, count: i64, drop: i64) -> Vec<u8> {
        let records: Vec<Record> = (base..base + count)
            .filter(|&o| o != drop)
            .map(|o| record(o, "v"))
            .collect();
        // encode_batch numbers records densely: re-encode with explicit deltas by hand.
        let dense = encode_batch(&records, Codec::None, base, BatchProducer::NONE).unwrap();
        let (_, decoded) = decode_batch(&dense).unwrap();
        assert_eq!(decoded.len() as i64, count - 1);
        // Rebuild: same header, records with their original offset deltas.
        let mut body = BytesMut::new();
        for r in &records {
            let mut rec = Vec::new();
            rec.push(0u8);
            zigzag(&mut rec, r.timestamp - records[0].timestamp);
            zigzag(&mut rec, r.offset - base);
            let k = r.key.as_ref().unwrap();
            zigzag(&mut rec, k.len() as i64);
            rec.extend_from_slice(k);
            let v = r.value.as_ref().unwrap();
            zigzag(&mut rec, v.len() as i64);
            rec.extend_from_slice(v);
            zigzag(&mut rec, 0);
            let mut framed = Vec::new();
            zigzag(&mut framed, rec.len() as i64);
            body.extend_from_slice(&framed);
            body.extend_from_slice(&rec);
        }
        let mut b = dense[..61].to_vec();
        b[12..16].copy_from_slice(&4i32.to_be_bytes()); // leader epoch 4
        b[23..27].copy_from_slice(&((count - 1) as i32).to_be_bytes()); // last offset delta
        b.extend_from_slice(&body);
        let length = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    fn zigzag(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    fn none(_: &mut [u8]) {}

    fn set(parts: &[Vec<u8>]) -> Bytes {
        Bytes::from(parts.concat())
    }

    const CREATE_TIME: Destination = Destination {
        max_message_bytes: Some(1_048_588),
        create_time: true,
        before_ms: None,
        after_ms: Some(3_600_000),
        now_ms: 1_700_000_000_000,
    };

    /// A plan as (first offset, pass or why, record count) per piece, next offset, skipped.
    type Summary<'a> = (Vec<(i64, &'a str, usize)>, i64, u64);

    /// One row: name, fetch offset, fetched records, aborted transactions, destination, plan.
    type Row<'a> = (
        &'a str,
        i64,
        Bytes,
        &'a [AbortedTransaction],
        Destination,
        Summary<'a>,
    );

    fn summary(plan: &Plan) -> Summary<'static> {
        let pieces = plan
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Pass(b) => (p.first_offset(), "pass", b.header.record_count as usize),
                Piece::Records { records, why, .. } => {
                    (p.first_offset(), why.label(), records.len())
                }
            })
            .collect();
        (pieces, plan.next_offset, plan.skipped)
    }

    #[test]
    fn entries_pass_or_take_the_record_path() {
        let aborted_by_7 = [AbortedTransaction {
            producer_id: 7,
            first_offset: 3,
        }];
        #[rustfmt::skip]
        let table: Vec<Row<'_>> = vec![
            ("dense batches pass", 0, set(&[batch(0, 3, 1, none), batch(3, 2, 1, none)]), &[], CREATE_TIME,
             (vec![(0, "pass", 3), (3, "pass", 2)], 5, 0)),
            ("a batch wholly below the fetch offset is dropped", 3, set(&[batch(0, 3, 1, none), batch(3, 2, 1, none)]), &[], CREATE_TIME,
             (vec![(3, "pass", 2)], 5, 0)),
            ("a batch the fetch offset falls into: its later records only", 1, set(&[batch(0, 3, 1, none)]), &[], CREATE_TIME,
             (vec![(1, "partial", 2)], 3, 0)),
            ("a compacted batch: record path", 0, set(&[compacted(0, 4, 2)]), &[], CREATE_TIME,
             (vec![(0, "sparse", 3)], 4, 0)),
            ("a batch over max.message.bytes: record path", 0, set(&[batch(0, 3, 1, none)]), &[],
             Destination { max_message_bytes: Some(50), ..CREATE_TIME },
             (vec![(0, "too_large", 3)], 3, 0)),
            ("LogAppendTime onto CreateTime: record path", 0, set(&[batch(0, 2, 1, attributes(LOG_APPEND_TIME))]), &[], CREATE_TIME,
             (vec![(0, "append_time", 2)], 2, 0)),
            ("LogAppendTime onto LogAppendTime: record path too (no producer may send it)", 0,
             set(&[batch(0, 2, 1, attributes(LOG_APPEND_TIME))]), &[],
             Destination { max_message_bytes: None, create_time: false, ..CREATE_TIME },
             (vec![(0, "append_time", 2)], 2, 0)),
            ("a committed transaction passes, its marker is skipped", 0,
             set(&[batch(0, 2, 7, attributes(TRANSACTIONAL)), marker(2, 7, 1), batch(3, 1, 1, none)]), &[], CREATE_TIME,
             (vec![(0, "pass", 2), (3, "pass", 1)], 4, 1)),
            ("an aborted transaction and its marker are skipped, others' batches pass", 0,
             set(&[batch(0, 3, 1, none), batch(3, 2, 7, attributes(TRANSACTIONAL)), batch(5, 1, 1, none),
                   batch(6, 1, 7, attributes(TRANSACTIONAL)), marker(7, 7, 0), batch(8, 2, 7, attributes(TRANSACTIONAL)), marker(10, 7, 1)]),
             &aborted_by_7, CREATE_TIME,
             (vec![(0, "pass", 3), (5, "pass", 1), (8, "pass", 2)], 11, 5)),
            ("a timestamp beyond the bounds: record path, each record checked", 0, set(&[batch(0, 3, 1, none)]), &[],
             Destination { now_ms: 1_699_000_000_000, ..CREATE_TIME },
             (vec![(0, "timestamp_bounds", 3)], 3, 0)),
            ("too old for the bounds: record path", 0, set(&[batch(0, 3, 1, none)]), &[],
             Destination { before_ms: Some(1_000), now_ms: 1_700_000_100_000, ..CREATE_TIME },
             (vec![(0, "timestamp_bounds", 3)], 3, 0)),
            ("a record in the middle older than the bound, first and newest within: record path", 0,
             set(&[timestamps(0, &[1_700_000_000_000, 1_699_000_000_000, 1_700_000_000_005])]), &[],
             Destination { before_ms: Some(60_000), ..CREATE_TIME },
             (vec![(0, "timestamp_bounds", 3)], 3, 0)),
            ("every record within the bound passes", 0,
             set(&[timestamps(0, &[1_700_000_000_000, 1_699_999_990_000, 1_700_000_000_005])]), &[],
             Destination { before_ms: Some(60_000), ..CREATE_TIME },
             (vec![(0, "pass", 3)], 3, 0)),
            ("bounds do not apply to a LogAppendTime destination", 0, set(&[batch(0, 3, 1, none)]), &[],
             Destination { now_ms: 1_699_000_000_000, create_time: false, ..CREATE_TIME },
             (vec![(0, "pass", 3)], 3, 0)),
            ("an empty batch is skipped", 0, set(&[batch(0, 1, 1, |b: &mut [u8]| b[57..61].copy_from_slice(&0i32.to_be_bytes()))]), &[], CREATE_TIME,
             (vec![], 1, 1)),
            ("nothing fetched: the offset stays", 9, Bytes::new(), &[], CREATE_TIME, (vec![], 9, 0)),
        ];
        for (name, from, records, aborted, destination, expected) in table {
            let plan =
                plan(from, records, aborted, destination).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(summary(&plan), expected, "{name}");
        }
    }

    #[test]
    fn the_records_of_a_partial_or_compacted_batch_keep_their_offsets_and_content() {
        let plan = plan(0, set(&[compacted(10, 4, 11)]), &[], CREATE_TIME).unwrap();
        let Piece::Records { records, epoch, .. } = &plan.pieces[0] else {
            panic!("{plan:?}")
        };
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![10, 12, 13]);
        assert_eq!(records[1], record(12, "v"));
        assert_eq!(*epoch, 4);
    }

    #[test]
    fn a_corrupt_batch_is_never_copied() {
        let mut b = batch(0, 2, 1, none);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(plan(0, set(&[b.clone()]), &[], CREATE_TIME).is_err());
        // Nor through the record path.
        assert!(plan(1, set(&[b]), &[], CREATE_TIME).is_err());
    }

    #[test]
    fn re_encoded_batches_fit_the_limit_as_encoded() {
        use kmirror_wire::records::Header;
        // Small keys and values with many headers: their framing is what makes a batch large.
        let headers = |n: usize| -> Vec<Header> {
            (0..n)
                .map(|i| Header {
                    key: Bytes::from(format!("h{i}")),
                    value: Some(Bytes::from_static(b"x")),
                })
                .collect()
        };
        let many: Vec<Record> = (0..40)
            .map(|o| Record {
                headers: headers(300),
                ..record(o, &"y".repeat(100))
            })
            .collect();
        // Random values: a codec makes them larger, not smaller.
        let mut seed = 7u64;
        let mut noise = |n: usize| -> String {
            (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    char::from(b'!' + ((seed >> 33) % 90) as u8)
                })
                .collect()
        };
        let random: Vec<Record> = (0..64).map(|o| record(o, &noise(4_000))).collect();
        for (name, records, codec, limit) in [
            ("many headers", &many, Codec::None, 16_384i64),
            ("incompressible values, lz4", &random, Codec::Lz4, 65_536),
            ("incompressible values, gzip", &random, Codec::Gzip, 65_536),
        ] {
            let batches = encode_fitting(records, codec, Some(limit)).unwrap();
            assert!(batches.len() > 1, "{name}: split");
            assert_eq!(
                batches.iter().map(|(n, _)| n).sum::<usize>(),
                records.len(),
                "{name}: every record, once"
            );
            for (n, b) in &batches {
                assert!(
                    b.len() as i64 <= limit,
                    "{name}: a batch of {n} is {} bytes",
                    b.len()
                );
                let (_, decoded) = decode_batch(b).unwrap();
                assert_eq!(decoded.len(), *n, "{name}");
            }
        }
        // A record over the limit alone: a batch of its own, for the destination to refuse.
        let big = vec![record(0, &"z".repeat(10_000)), record(1, "small")];
        let batches = encode_fitting(&big, Codec::None, Some(1_000)).unwrap();
        assert_eq!(
            batches.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![1, 1]
        );
    }

    #[test]
    fn record_path_chunks_fit_the_limit() {
        let records: Vec<Record> = (0..10).map(|o| record(o, &"x".repeat(400))).collect();
        let sizes = |limit| {
            chunks(&records, limit)
                .iter()
                .map(|c| c.len())
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(None), vec![10]);
        assert_eq!(sizes(Some(2_000)), vec![3, 3, 3, 1]);
        // A record over the limit alone: its own chunk.
        assert_eq!(sizes(Some(100)), vec![1; 10]);
    }
}
