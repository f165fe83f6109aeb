//! The verifier's reader for logs that hold messages in the formats before v2 (magic 0 and 1,
//! `message.format.version` below 0.11): librdkafka misreads them in the Fetch responses of
//! Kafka 2.8 and later (v12 on) and fetches the same offset forever. Such a log is read with
//! kmirror's wire client on a thread of its own and decoded here — on its own, not through the
//! fetcher's copy paths, so that the verifier stays a second opinion.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use kmirror_state::kafka_record::{RecordData, TimestampKind};
use kmirror_wire::batch::TimestampType;
use kmirror_wire::records::{ControlType, Record, decode_batch};
use kmirror_wire::{
    AbortedTransaction, Client, FetchOptions, FetchPartition, FetchedPartition, KafkaCode,
    RawEntry, WireConfig, decode_legacy,
};
use rdkafka::ClientConfig;

use crate::config::Isolation;

/// Bit 3 of a magic 1 message's attributes: the broker stamped the time.
const LEGACY_LOG_APPEND_TIME: i8 = 0x08;

/// What the first response holding an entry at the start offset showed.
enum Probe {
    OldFormat,
    Current,
    Failed(String),
}

/// Decoded records, or why reading stopped.
enum Chunk {
    Records(Vec<RecordData>),
    Failed(String),
}

/// Records of one partition in log order, read on a thread of their own.
pub(super) struct OldFormatReader {
    chunks: Receiver<Chunk>,
    buffer: VecDeque<RecordData>,
    finished: bool,
}

/// Where to read: a partition from `from` up to `end`, until `deadline`.
struct Range {
    topic: String,
    partition: i32,
    from: i64,
    end: i64,
    isolation: Isolation,
    deadline: Instant,
}

impl OldFormatReader {
    /// A reader of `partition` of `topic` from `from` up to `end` when the entry at `from` is in
    /// a format before v2; `Ok(None)` when it is a v2 batch or the range is empty (librdkafka
    /// reads those).
    pub(super) fn open(
        config: &ClientConfig,
        topic: &str,
        partition: i32,
        (from, end): (i64, i64),
        isolation: Isolation,
        deadline: Instant,
    ) -> Result<Option<OldFormatReader>, String> {
        if from >= end {
            return Ok(None);
        }
        // Settings only librdkafka takes (a SASL mechanism the wire client lacks): librdkafka
        // reads, as before.
        let wire = match WireConfig::from_properties(&kmirror_state::connection::properties(config))
        {
            Ok(wire) => wire,
            Err(e) => {
                tracing::warn!(error = %e, "{topic}[{partition}]: read with librdkafka only (messages in the formats before v2 cannot be read)");
                return Ok(None);
            }
        };
        let range = Range {
            topic: topic.to_string(),
            partition,
            from,
            end,
            isolation,
            deadline,
        };
        let (probe_tx, probe_rx) = sync_channel(1);
        let (chunk_tx, chunk_rx) = sync_channel(4);
        std::thread::Builder::new()
            .name("verify-old-formats".into())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(read(wire, range, probe_tx, chunk_tx)),
                    Err(e) => drop(probe_tx.send(Probe::Failed(format!("a runtime: {e}")))),
                }
            })
            .map_err(|e| format!("a reader thread: {e}"))?;
        match probe_rx.recv() {
            Ok(Probe::OldFormat) => Ok(Some(OldFormatReader {
                chunks: chunk_rx,
                buffer: VecDeque::new(),
                finished: false,
            })),
            Ok(Probe::Current) => Ok(None),
            Ok(Probe::Failed(e)) => Err(e),
            Err(_) => Err("the reader thread ended without an answer".into()),
        }
    }

    /// The next record, `Ok(None)` past the end.
    pub(super) fn next(&mut self) -> Result<Option<RecordData>, String> {
        loop {
            if let Some(r) = self.buffer.pop_front() {
                return Ok(Some(r));
            }
            if self.finished {
                return Ok(None);
            }
            match self.chunks.recv() {
                Ok(Chunk::Records(records)) => self.buffer.extend(records),
                Ok(Chunk::Failed(e)) => return Err(e),
                Err(_) => self.finished = true,
            }
        }
    }
}

/// Fetches the range and sends it on decoded; the first response with an entry settles the
/// probe (a v2 batch first: nothing more is read).
async fn read(config: WireConfig, range: Range, probe: SyncSender<Probe>, out: SyncSender<Chunk>) {
    let mut probe = Some(probe);
    let fail = |probe: Option<SyncSender<Probe>>, why: String| match probe {
        Some(p) => drop(p.send(Probe::Failed(why))),
        None => drop(out.send(Chunk::Failed(why))),
    };
    let client = match Client::connect(config).await {
        Ok(c) => c,
        Err(e) => {
            // librdkafka may still reach it (and says so if it cannot).
            tracing::warn!(error = %e, "{}[{}]: read with librdkafka only (messages in the formats before v2 cannot be read)", range.topic, range.partition);
            return drop(probe.map(|p| p.send(Probe::Current)));
        }
    };
    let options = FetchOptions {
        isolation: match range.isolation {
            Isolation::ReadCommitted => kmirror_wire::Isolation::ReadCommitted,
            Isolation::ReadUncommitted => kmirror_wire::Isolation::ReadUncommitted,
        },
        ..FetchOptions::default()
    };
    let (topic, partition) = (range.topic.as_str(), range.partition);
    let mut reader = Transactions::default();
    let mut offset = range.from;
    let mut last_error = None;
    while offset < range.end {
        if Instant::now() > range.deadline {
            let why = format!(
                "reading {topic}[{partition}] timed out at offset {offset} (end {}){}",
                range.end,
                last_error.map_or(String::new(), |e| format!(": {e}"))
            );
            return fail(probe, why);
        }
        let fetched = client
            .fetch(topic, &[FetchPartition::new(partition, offset)], &options)
            .await;
        let p = match fetched.map(|mut parts| parts.pop()) {
            Ok(Some(p)) if p.error == KafkaCode::NONE => p,
            Ok(Some(p)) => {
                last_error = Some(format!("{:?}", p.error));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Ok(None) => {
                last_error = Some("no answer for the partition".to_string());
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => {
                last_error = Some(e.to_string());
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let decoded = match reader.decode(&p, offset) {
            Ok(d) => d,
            Err(e) => return fail(probe, format!("{topic}[{partition}] at {offset}: {e}")),
        };
        if let Some(old_first) = decoded.first_is_old
            && let Some(p) = probe.take()
        {
            if !old_first {
                return drop(p.send(Probe::Current));
            }
            if p.send(Probe::OldFormat).is_err() {
                return;
            }
        }
        if decoded.next == offset {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        offset = decoded.next;
        let records: Vec<RecordData> = decoded
            .records
            .into_iter()
            .filter(|r| r.offset < range.end)
            .collect();
        if out.send(Chunk::Records(records)).is_err() {
            return; // the verifier stopped reading
        }
    }
    if let Some(p) = probe {
        drop(p.send(Probe::Current)); // an empty range
    }
}

/// One response decoded.
struct Decoded {
    records: Vec<RecordData>,
    /// The offset after the last complete entry.
    next: i64,
    /// Whether the first entry at or past the fetch offset is in a format before v2 (`None`:
    /// no complete entry).
    first_is_old: Option<bool>,
}

/// Transactional producers whose aborted transaction is open where reading is (read_committed:
/// their batches are not read until their ABORT marker).
#[derive(Default)]
struct Transactions {
    aborting: Vec<i64>,
}

impl Transactions {
    fn decode(&mut self, p: &FetchedPartition, from: i64) -> Result<Decoded, String> {
        let mut aborted: Vec<AbortedTransaction> = p.aborted.clone();
        aborted.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
        let mut out = Decoded {
            records: Vec::new(),
            next: from,
            first_is_old: None,
        };
        for entry in p.batches() {
            let entry = entry.map_err(|e| e.to_string())?;
            if entry.next_offset() <= out.next {
                continue;
            }
            let next = entry.next_offset();
            match entry {
                RawEntry::Legacy(m) => {
                    out.first_is_old.get_or_insert(true);
                    let kind = match m.magic {
                        0 => None,
                        _ if m.attributes & LEGACY_LOG_APPEND_TIME != 0 => {
                            Some(TimestampKind::LogAppendTime)
                        }
                        _ => Some(TimestampKind::CreateTime),
                    };
                    let records = decode_legacy(&m).map_err(|e| e.to_string())?;
                    out.records.extend(
                        records
                            .into_iter()
                            .filter(|r| r.offset >= from)
                            .map(|r| record_data(r, kind)),
                    );
                }
                RawEntry::Batch(b) => {
                    out.first_is_old.get_or_insert(false);
                    let h = b.header;
                    while aborted
                        .last()
                        .is_some_and(|a| a.first_offset <= h.last_offset())
                    {
                        let a = aborted.pop().expect("checked");
                        if !self.aborting.contains(&a.producer_id) {
                            self.aborting.push(a.producer_id);
                        }
                    }
                    let (_, records) = decode_batch(&b.bytes).map_err(|e| e.to_string())?;
                    if h.is_control() {
                        if records.first().and_then(Record::control_type)
                            == Some(ControlType::Abort)
                        {
                            self.aborting.retain(|&id| id != h.producer_id);
                        }
                    } else if !(h.is_transactional() && self.aborting.contains(&h.producer_id)) {
                        let kind = Some(match h.timestamp_type() {
                            TimestampType::CreateTime => TimestampKind::CreateTime,
                            TimestampType::LogAppendTime => TimestampKind::LogAppendTime,
                        });
                        out.records.extend(
                            records
                                .into_iter()
                                .filter(|r| r.offset >= from)
                                .map(|r| record_data(r, kind)),
                        );
                    }
                }
            }
            out.next = next;
        }
        Ok(out)
    }
}

/// A decoded record as the verifier compares it (a magic 0 message has no timestamp).
fn record_data(r: Record, kind: Option<TimestampKind>) -> RecordData {
    RecordData {
        offset: r.offset,
        key: r.key.map(|k| k.to_vec()),
        value: r.value.map(|v| v.to_vec()),
        headers: r
            .headers
            .into_iter()
            .map(|h| {
                (
                    String::from_utf8_lossy(&h.key).into_owned(),
                    h.value.map(|v| v.to_vec()),
                )
            })
            .collect(),
        timestamp: kind.map(|_| r.timestamp),
        timestamp_kind: kind,
    }
}
