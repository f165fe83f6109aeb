//! The record engine reads the source with librdkafka, which misreads messages in the formats
//! before v2 (magic 0 and 1) in Fetch responses of v12 and later (Kafka 2.8 on) and fetches the
//! same offset forever. Before it copies, the record engine looks at the entry at each
//! partition's start with the wire client: such a message there stops the fetcher with the fix
//! (the batch engine reads those formats itself) instead of a stall every two minutes.

use kmirror_wire::{FetchOptions, FetchPartition, KafkaCode, RawEntry};

use super::source_ends::SourceWire;
use super::stop::Stop;

/// The first Fetch version librdkafka misreads old formats in (flexible versions).
const FLEXIBLE_FETCH: i16 = 12;

/// The Fetch request key.
const FETCH: i16 = 1;

/// A stop when the message at one of `starts` (partition, source offset) is in a format before
/// v2 and the source answers flexible Fetch versions. Any failure to look is no stop: the copy
/// then reports what it meets.
pub(super) fn unreadable_start(
    wire: &SourceWire,
    topic: &str,
    starts: &[(i32, i64)],
) -> Option<Stop> {
    wire.runtime.block_on(async {
        let versions = wire.client.broker_api_versions().await.ok()?;
        if versions
            .get(&FETCH)
            .is_none_or(|(_, max)| *max < FLEXIBLE_FETCH)
        {
            return None;
        }
        for &(partition, offset) in starts {
            let fetched = wire
                .client
                .fetch(
                    topic,
                    &[FetchPartition::new(partition, offset)],
                    &FetchOptions::default(),
                )
                .await
                .ok()?;
            let p = fetched.into_iter().next()?;
            if p.error != KafkaCode::NONE {
                continue;
            }
            let first = p
                .batches()
                .filter_map(Result::ok)
                .find(|e| e.next_offset() > offset);
            if let Some(RawEntry::Legacy(m)) = first {
                return Some(Stop::OldFormatUnreadable {
                    topic: topic.to_string(),
                    partition,
                    offset,
                    magic: m.magic,
                });
            }
        }
        None
    })
}
