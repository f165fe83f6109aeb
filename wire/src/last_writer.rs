//! Who appended a partition's last batch, and how a writer that takes the partition over goes on
//! as that producer: same producer id and epoch, the sequence after the last batch. The broker
//! then appends a batch of that producer only when its sequence follows the last one it
//! appended: whatever the writer before still had under way — held in a kernel's send queue
//! while its network was gone, sent again after a reconnect — is refused (an older or repeated
//! sequence), never appended after the records its successor wrote.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::batch::{self, BatchHeader};
use crate::client::Client;
use crate::error::{KafkaCode, WireError};
use crate::fetch::{FetchOptions, FetchPartition, Isolation};
use crate::produce::ProducerIdentity;

/// The producer of a partition's last batch and the sequence its next batch must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastWriter {
    /// The producer id and epoch of the last batch.
    pub producer: ProducerIdentity,
    /// The sequence after the last batch's last record.
    pub next_sequence: i32,
}

impl LastWriter {
    /// The writer to go on as, from the header of the batch holding offset `end - 1` (the last
    /// one below the log end `end`): only a non-transactional batch of an idempotent producer
    /// that ends right below `end`. A transactional producer's id, a control batch or a batch
    /// without producer state leaves nothing to continue.
    pub fn of(header: &BatchHeader, end: i64) -> Option<LastWriter> {
        if header.last_offset() != end - 1
            || header.is_control()
            || header.is_transactional()
            || header.producer_id < 0
            || header.producer_epoch < 0
            || header.base_sequence < 0
        {
            return None;
        }
        Some(LastWriter {
            producer: ProducerIdentity {
                id: header.producer_id,
                epoch: header.producer_epoch,
            },
            next_sequence: batch::next_sequence(header.base_sequence, header.last_offset_delta + 1),
        })
    }
}

/// Bytes read per partition: enough for a batch header (a batch cut off after it still names
/// its producer).
const HEADER_READ: i32 = 4096;

impl Client {
    /// The writer of each partition's last batch below its log end `ends[partition]`, where one
    /// can be continued ([`LastWriter::of`]); partitions with an empty log (or none left below
    /// their end, or that the principal may not read) are not in the answer. A partition whose
    /// leader gave no answer or an error fails the call (retriable: [`WireError::is_retriable`]).
    pub async fn last_writers(
        &self,
        topic: &str,
        ends: &BTreeMap<i32, i64>,
    ) -> Result<BTreeMap<i32, LastWriter>, WireError> {
        let partitions: Vec<FetchPartition> = ends
            .iter()
            .filter(|&(_, &end)| end > 0)
            .map(|(&partition, &end)| FetchPartition {
                partition,
                offset: end - 1,
                max_bytes: HEADER_READ,
                last_fetched_epoch: None,
            })
            .collect();
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let options = FetchOptions {
            isolation: Isolation::ReadUncommitted,
            max_wait: Duration::ZERO,
            min_bytes: 0,
            max_bytes: HEADER_READ.saturating_mul(partitions.len() as i32),
        };
        let mut writers = BTreeMap::new();
        for fetched in self.fetch(topic, &partitions, &options).await? {
            let end = ends[&fetched.partition];
            match fetched.error {
                KafkaCode::NONE => {}
                // Nothing left below the end (deleted records): nothing to continue.
                KafkaCode::OFFSET_OUT_OF_RANGE => continue,
                // A principal without READ on the destination topic: the writer goes on as its
                // own producer, without the broker's check against a late writer before it.
                KafkaCode::TOPIC_AUTHORIZATION_FAILED => {
                    tracing::warn!(
                        topic,
                        partition = fetched.partition,
                        "the destination refuses to let this principal READ the topic: writing \
                         as a new producer, so a request of a writer before this one that arrives \
                         late is not refused by the broker (grant READ on the destination topics \
                         to the mirror's principal)"
                    );
                    continue;
                }
                error => {
                    return Err(WireError::Fetch {
                        broker: format!("leader of {topic}-{}", fetched.partition),
                        reason: fetched.failure.unwrap_or_else(|| {
                            format!("reading the last batch below offset {end}: {error}")
                        }),
                    });
                }
            }
            // The first batch in the answer holds `end - 1`; an old-format (magic 0/1) entry
            // has no producer.
            if let Ok(header) = BatchHeader::parse(&fetched.records)
                && let Some(writer) = LastWriter::of(&header, end)
            {
                writers.insert(fetched.partition, writer);
            }
        }
        Ok(writers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(
        base_offset: i64,
        last_offset_delta: i32,
        producer: (i64, i16, i32),
        attributes: i16,
    ) -> BatchHeader {
        BatchHeader {
            base_offset,
            length: 100,
            partition_leader_epoch: 3,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta,
            base_timestamp: 1,
            max_timestamp: 2,
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence: producer.2,
            record_count: last_offset_delta + 1,
        }
    }

    #[test]
    fn which_last_batches_are_continued_and_at_which_sequence() {
        let writer = |id, epoch, next_sequence| {
            Some(LastWriter {
                producer: ProducerIdentity { id, epoch },
                next_sequence,
            })
        };
        #[rustfmt::skip]
        let cases: &[(&str, BatchHeader, i64, Option<LastWriter>)] = &[
            ("the last batch of an idempotent producer: its sequence goes on after the batch",
             header(90, 9, (7, 0, 40), 0), 100, writer(7, 0, 50)),
            ("a later epoch is kept as it is",
             header(90, 9, (7, 4, 0), 0), 100, writer(7, 4, 10)),
            ("the sequence wraps at i32::MAX as the broker counts it",
             header(90, 9, (7, 0, i32::MAX - 4), 0), 100, writer(7, 0, 5)),
            ("compaction removed records: the batch still spans its offsets",
             BatchHeader { record_count: 2, ..header(90, 9, (7, 0, 40), 0) }, 100, writer(7, 0, 50)),
            ("a batch ending below the end (records above it not readable yet)",
             header(80, 9, (7, 0, 40), 0), 100, None),
            ("no producer (a plain producer without idempotence)",
             header(90, 9, (-1, -1, -1), 0), 100, None),
            ("a transactional producer's batch",
             header(90, 9, (7, 0, 40), 0x10), 100, None),
            ("a control batch (a transaction marker)",
             header(99, 0, (7, 0, -1), 0x30), 100, None),
        ];
        for (why, h, end, expected) in cases {
            assert_eq!(LastWriter::of(h, *end), *expected, "{why}");
        }
    }
}
