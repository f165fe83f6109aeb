//! Records of the compacted state topic (`__kmirror_state` by default) on the destination.
//!
//! Every record is keyed by a small JSON object naming the mirror (`namespace/name`), the source
//! topic and the partition, plus the record kind:
//!
//! | kind       | written by | value |
//! |------------|------------|-------|
//! | `state`    | operator   | [`PartitionStateRecord`]: lifecycle state, state epoch, error |
//! | `position` | fetcher    | [`PositionRecord`]: last mirrored offset, destination offset, identity |
//! | `map`      | fetcher    | [`MapChunk`]: up to [`MAP_CHUNK_SEGMENTS`] offset-map segments |
//!
//! A deleted `MirrorTopic` leaves tombstones (null values) so compaction drops its records.

use std::collections::BTreeMap;

use kmirror_crds::v1alpha1::PartitionState;
use serde::{Deserialize, Serialize};

use crate::offset_map::{OffsetMap, Segment};

/// Segments per map record; the last chunk is rewritten as it grows, full chunks never change.
pub const MAP_CHUNK_SEGMENTS: usize = 1000;

/// A running fetcher writes each partition's position at least this often, changed or not, so
/// that its age tells whether the lag it shows is current.
pub const POSITION_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(30);

/// A running partition's position older than this shows no lag (unknown): its fetcher has not
/// reported for three heartbeats.
pub const POSITION_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(90);

/// Kinds of state records.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    /// Lifecycle state, written by the operator.
    State,
    /// Mirror position, written by the fetcher.
    Position,
    /// Offset-map chunk, written by the fetcher.
    Map,
    /// The destination ACLs kmirror created for a mirror (topic "" and partition -1).
    Acls,
    /// The source ACLs the mirror's ACL sync last read (those that concern its topics and
    /// groups; topic "" and partition -1): a failover with the source gone applies them.
    SourceAcls,
    /// An operator's claim of a mirror (topic "" and partition -1): its offset is the fencing
    /// token of the operator's later records ([`crate::fence`]).
    Claim,
}

/// The key of a state record. Serialized as JSON with a fixed field order, so equal keys are
/// equal bytes (compaction relies on that).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    /// Format version.
    pub v: u8,
    /// Record kind.
    pub kind: RecordKind,
    /// The mirror, `namespace/name`.
    pub mirror: String,
    /// The source topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Chunk number, for `map` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u32>,
}

impl StateKey {
    /// A key of the given kind.
    pub fn new(kind: RecordKind, mirror: &str, topic: &str, partition: i32) -> StateKey {
        StateKey {
            v: 1,
            kind,
            mirror: mirror.to_string(),
            topic: topic.to_string(),
            partition,
            chunk: None,
        }
    }

    /// The key of a mirror's ACL record.
    pub fn acls(mirror: &str) -> StateKey {
        StateKey::new(RecordKind::Acls, mirror, "", -1)
    }

    /// The key of a mirror's record of the source ACLs last synced.
    pub fn source_acls(mirror: &str) -> StateKey {
        StateKey::new(RecordKind::SourceAcls, mirror, "", -1)
    }

    /// The key of a mirror's operator claim.
    pub fn claim(mirror: &str) -> StateKey {
        StateKey::new(RecordKind::Claim, mirror, "", -1)
    }

    /// The key of map chunk `chunk`.
    pub fn map_chunk(mirror: &str, topic: &str, partition: i32, chunk: u32) -> StateKey {
        StateKey {
            chunk: Some(chunk),
            ..StateKey::new(RecordKind::Map, mirror, topic, partition)
        }
    }

    /// Bytes of the key.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a state key serializes")
    }

    /// Parses a key; `None` for records that are not kmirror state keys of a known version.
    pub fn parse(bytes: &[u8]) -> Option<StateKey> {
        serde_json::from_slice::<StateKey>(bytes)
            .ok()
            .filter(|k| k.v == 1)
    }
}

/// Why a fetcher stopped; also its process exit code. The names (camelCase in records) and the
/// codes never change: the operator reads both, from position records and pod exit codes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// Another client wrote to the destination partition.
    ForeignWrite,
    /// The source topic was deleted and recreated (its topic ID changed).
    SourceTopicRecreated,
    /// The source cluster ID is not the one recorded.
    SourceClusterChanged,
    /// The source topic no longer exists.
    SourceTopicDeleted,
    /// Records were deleted on the source (retention, DeleteRecords) before they were mirrored.
    /// Records written before the name changed say `sourceTruncated`.
    #[serde(alias = "sourceTruncated")]
    DataLoss,
    /// The destination partition holds records kmirror did not write and has no state.
    DestinationNotEmpty,
    /// The destination partition lost records it had confirmed (an unclean leader election on
    /// the destination, or the topic recreated); they are copied again from the source.
    DestinationTruncated,
    /// The source no longer holds records that were mirrored: an unclean leader election (or a
    /// restore) replaced them.
    SourceDiverged,
    /// The destination refuses a record (its size, its timestamp).
    RecordRefused,
    /// The fetcher's write lease ran out without renewal from the operator (the pod is being
    /// replaced, the operator is unreachable): it stopped writing; retried.
    LeaseExpired,
    /// A cluster reports an ID other than the one its connection pins (`clusterId`): the
    /// mirror points at another cluster; nothing is read or written.
    ClusterIdMismatch,
    /// Any other error (connection, delivery, configuration); retried.
    Error,
}

impl StopReason {
    /// Every reason, in exit-code order of the named ones, then [`StopReason::Error`].
    pub const ALL: [StopReason; 12] = [
        StopReason::ForeignWrite,
        StopReason::SourceTopicRecreated,
        StopReason::SourceClusterChanged,
        StopReason::SourceTopicDeleted,
        StopReason::DataLoss,
        StopReason::DestinationNotEmpty,
        StopReason::DestinationTruncated,
        StopReason::SourceDiverged,
        StopReason::RecordRefused,
        StopReason::LeaseExpired,
        StopReason::ClusterIdMismatch,
        StopReason::Error,
    ];

    /// Process exit code of the fetcher for this reason.
    pub fn exit_code(self) -> i32 {
        match self {
            StopReason::ForeignWrite => 10,
            StopReason::SourceTopicRecreated => 11,
            StopReason::SourceClusterChanged => 12,
            StopReason::SourceTopicDeleted => 13,
            StopReason::DataLoss => 14,
            StopReason::DestinationNotEmpty => 15,
            StopReason::DestinationTruncated => 16,
            StopReason::SourceDiverged => 17,
            StopReason::RecordRefused => 18,
            StopReason::LeaseExpired => 19,
            StopReason::ClusterIdMismatch => 20,
            StopReason::Error => 1,
        }
    }

    /// The reason for an exit code, if it is one of these.
    pub fn from_exit_code(code: i32) -> Option<StopReason> {
        StopReason::ALL.into_iter().find(|r| r.exit_code() == code)
    }

    /// Whether the operator retries on its own. A deleted source topic is not an error but a
    /// stop; a destination that lost records is retried because the next start copies them
    /// again (resuming from the destination log end is safe).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            StopReason::Error | StopReason::DestinationTruncated | StopReason::LeaseExpired
        )
    }

    /// Whether a stop for this reason can be about one partition of a fetcher process alone
    /// (the others only stopped with it): findings about one destination or source partition.
    /// The rest — clusters, the topic, the lease, errors — stop every partition of the process.
    pub fn about_one_partition(self) -> bool {
        matches!(
            self,
            StopReason::ForeignWrite
                | StopReason::DataLoss
                | StopReason::DestinationNotEmpty
                | StopReason::DestinationTruncated
                | StopReason::SourceDiverged
                | StopReason::RecordRefused
        )
    }

    /// The name used in status, metrics and alerts (PascalCase, e.g. `SourceDiverged`).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::ForeignWrite => "ForeignWrite",
            StopReason::SourceTopicRecreated => "SourceTopicRecreated",
            StopReason::SourceClusterChanged => "SourceClusterChanged",
            StopReason::SourceTopicDeleted => "SourceTopicDeleted",
            StopReason::DataLoss => "DataLoss",
            StopReason::DestinationNotEmpty => "DestinationNotEmpty",
            StopReason::DestinationTruncated => "DestinationTruncated",
            StopReason::SourceDiverged => "SourceDiverged",
            StopReason::RecordRefused => "RecordRefused",
            StopReason::LeaseExpired => "LeaseExpired",
            StopReason::ClusterIdMismatch => "ClusterIdMismatch",
            StopReason::Error => "Error",
        }
    }
}

/// Status a fetcher reports for a partition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum FetcherStatus {
    /// Copying records.
    #[default]
    Running,
    /// Shut down cleanly (SIGTERM); the position is final until it starts again.
    Stopped,
    /// Stopped for good; see `error`.
    Failed,
}

/// An error a fetcher reports with its position.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FetcherError {
    /// Machine-readable reason.
    pub reason: StopReason,
    /// Human-readable explanation.
    pub message: String,
}

/// Prefix alignment in progress or done: placeholders up to `target`, then DeleteRecords.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PrefixAlignment {
    /// The source log-start offset the destination is aligned to.
    pub target: i64,
    /// Placeholders written and deleted.
    pub done: bool,
}

/// Where a partition's mirroring stands, written by its fetcher.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PositionRecord {
    /// Source cluster ID recorded on first start.
    pub source_cluster_id: String,
    /// Source topic ID recorded on first start (absent for sources that report none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_topic_id: Option<String>,
    /// Destination topic.
    pub destination_topic: String,
    /// Last source offset whose record is on the destination (-1: none).
    pub last_mirrored_offset: i64,
    /// Next source offset to copy.
    pub next_source_offset: i64,
    /// Destination log-end offset written by this fetcher.
    pub destination_offset: i64,
    /// Number of map chunks (`map` records `mapFirstChunk..n`).
    pub map_chunks: u32,
    /// First map chunk still recorded: chunks below it covered only source offsets below the
    /// source log start and were removed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub map_first_chunk: u32,
    /// Every destination offset equals its source offset.
    pub offsets_identical: bool,
    /// Prefix alignment state, when the source log started above 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_alignment: Option<PrefixAlignment>,
    /// Fetcher status.
    #[serde(default)]
    pub status: FetcherStatus,
    /// Why the fetcher failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<FetcherError>,
    /// Source high watermark the fetcher last saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_high_watermark: Option<i64>,
    /// Source last stable offset the fetcher last saw, when it reads committed records only:
    /// the end it can copy up to, and what lag is measured against (absent: the high
    /// watermark is that end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_last_stable_offset: Option<i64>,
    /// A source transaction that has held the last stable offset below the high watermark for
    /// a while: the partition waits for it, which is not a fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_transaction: Option<OpenTransaction>,
    /// Next source offset including offsets the consumer skipped (transaction markers, aborted
    /// records) once everything before them is on the destination; lag is measured from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_position: Option<i64>,
    /// Age in seconds of the newest mirrored record while behind (0 when caught up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
    /// Records mirrored by this fetcher incarnation.
    #[serde(default)]
    pub records_mirrored: u64,
    /// Pod (or host) that wrote this record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    /// UID of the pod that wrote this record (fetchers run by the operator): tells a pool pod's
    /// stop of one partition from a record of an earlier pod of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_uid: Option<String>,
    /// The source leader epoch of the record at `last_mirrored_offset` (absent: unknown). A
    /// start compares it with where the source says that epoch ends now: a source that no longer
    /// holds the record has diverged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirrored_leader_epoch: Option<i32>,
    /// The latest records the source deleted before they were mirrored, when the policy is to
    /// skip them (the operator reports it as an Event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_loss: Option<DataLossRecord>,
    /// Milliseconds since the epoch.
    pub updated_at_ms: i64,
}

/// An open source transaction that holds a partition's last stable offset: records from
/// `fromOffset` on are not readable (read_committed) until it commits or aborts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OpenTransaction {
    /// The last stable offset it holds: the first offset of the open transaction.
    pub from_offset: i64,
    /// Since when the last stable offset has stood there (the fetcher's first sight of it),
    /// milliseconds since the epoch.
    pub since_ms: i64,
}

impl PositionRecord {
    /// The end a reader of this fetcher's isolation can copy up to: the last stable offset
    /// when known, else the high watermark.
    pub fn readable_end(&self) -> Option<i64> {
        self.source_last_stable_offset
            .or(self.source_high_watermark)
    }
}

/// Source records deleted before they were mirrored and skipped by policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DataLossRecord {
    /// First lost source offset.
    pub from_offset: i64,
    /// The source log start when the loss was found: `fromOffset..toOffset` are lost.
    pub to_offset: i64,
    /// Lost records (offsets; a compacted or transactional source may have had fewer).
    pub records: i64,
    /// One line for a person (and the operator's Event).
    pub message: String,
    /// When it was found, milliseconds since the epoch.
    pub at_ms: i64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A chunk of the offset map.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MapChunk {
    /// Segments `[src, dst]` of this chunk.
    pub segments: Vec<Segment>,
}

/// Divergent records found when failing back, and what became of them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// First divergent offset on the destination-to-be.
    pub from_offset: i64,
    /// One past the last divergent offset.
    pub to_offset: i64,
    /// Topic (on the destination-to-be) holding copies of the divergent records.
    pub quarantine_topic: String,
    /// Log end of the quarantine partition before copying began (copies resume after a crash).
    pub quarantine_base: i64,
    /// Divergent records (visible to read_committed consumers) in the range.
    pub records: i64,
    /// Records copied to the quarantine topic so far.
    pub quarantined: i64,
    /// `kept` or `recreated` once a policy has been applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

/// Lifecycle state of a partition, written by the operator on every transition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStateRecord {
    /// The state.
    pub state: PartitionState,
    /// Monotonic; every transition increments it.
    pub state_epoch: i64,
    /// Failed retries so far; -1 when not retryable.
    #[serde(default)]
    pub retry_attempt: i32,
    /// Reason of the last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why the fetcher stopped, when a stop made the partition FAILED (or STOPPING).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<StopReason>,
    /// Last mirrored offset persisted on STOPPED (the LMO), as a source offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirrored_offset: Option<i64>,
    /// Destination offset of the record at the LMO (equal to it when offsets are identical).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirrored_destination_offset: Option<i64>,
    /// Failover: the final consumer-group offset sync of this partition ran (or was tried with
    /// the source gone). Recorded before the topic can become writable, so that a retry never
    /// runs it again over groups that consume on the new primary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub final_sync_done: bool,
    /// Graceful failover: the source log end when STOPPING began; drained once mirrored up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_target: Option<i64>,
    /// Failback: records on the destination-to-be after the last mirrored offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<Divergence>,
    /// The retry request (annotation value) this record already acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_token: Option<String>,
    /// Destination topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_topic: Option<String>,
    /// Source cluster ID at the time of the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_cluster_id: Option<String>,
    /// Milliseconds since the epoch.
    pub updated_at_ms: i64,
}

/// A chunk of the offset map as written: a borrowed run of segments (same JSON as
/// [`MapChunk`]), so that writing a chunk copies nothing.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapChunkRef<'a> {
    /// Segments of this chunk.
    pub segments: &'a [Segment],
}

/// Splits a map into chunk records.
pub fn map_to_chunks(map: &OffsetMap) -> Vec<MapChunk> {
    map.segments()
        .chunks(MAP_CHUNK_SEGMENTS)
        .map(|c| MapChunk {
            segments: c.to_vec(),
        })
        .collect()
}

/// How many chunk records a map needs.
pub fn map_chunk_count(map: &OffsetMap) -> usize {
    map.segments().len().div_ceil(MAP_CHUNK_SEGMENTS)
}

/// Chunk `i` of a map (counted from its first segment), borrowed.
pub fn map_chunk(map: &OffsetMap, i: usize) -> Option<MapChunkRef<'_>> {
    map.segments()
        .chunks(MAP_CHUNK_SEGMENTS)
        .nth(i)
        .map(|segments| MapChunkRef { segments })
}

/// Reassembles a map from chunk records `0..count`.
pub fn map_from_chunks(chunks: &BTreeMap<u32, MapChunk>, count: u32) -> Result<OffsetMap, String> {
    map_from_chunk_range(chunks, 0, count)
}

/// Reassembles a map from chunk records `first..count` (chunks below `first` were removed).
pub fn map_from_chunk_range(
    chunks: &BTreeMap<u32, MapChunk>,
    first: u32,
    count: u32,
) -> Result<OffsetMap, String> {
    if count <= first {
        return Ok(OffsetMap::identity());
    }
    let mut segments = Vec::new();
    for i in first..count {
        let chunk = chunks
            .get(&i)
            .ok_or_else(|| format!("offset map chunk {i} of {count} is missing"))?;
        segments.extend_from_slice(&chunk.segments);
    }
    OffsetMap::from_segments(segments)
}

/// Everything the state topic holds for one partition (or, for ACL records, one mirror).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartitionRecords {
    /// ACL bindings kmirror created on the destination (mirror-level record).
    pub acls: Option<Vec<crate::kafka_admin::AclBinding>>,
    /// The source's ACL bindings the last ACL sync read (mirror-level record).
    pub source_acls: Option<Vec<crate::kafka_admin::AclBinding>>,
    /// Operator-written lifecycle state.
    pub state: Option<PartitionStateRecord>,
    /// Fetcher-written position.
    pub position: Option<PositionRecord>,
    /// Map chunks by number.
    pub chunks: BTreeMap<u32, MapChunk>,
}

impl PartitionRecords {
    /// The partition's offset map (identity when nothing is recorded).
    pub fn offset_map(&self) -> Result<OffsetMap, String> {
        let count = self.position.as_ref().map_or(0, |p| p.map_chunks);
        let first = self.position.as_ref().map_or(0, |p| p.map_first_chunk);
        let count = count.max(self.chunks.keys().next_back().map_or(0, |k| k + 1));
        map_from_chunk_range(&self.chunks, first, count)
    }

    /// Applies one record (a `None` value is a tombstone).
    pub fn apply(&mut self, key: &StateKey, value: Option<&[u8]>) -> Result<(), serde_json::Error> {
        match (key.kind, value) {
            (RecordKind::State, None) => self.state = None,
            (RecordKind::State, Some(v)) => self.state = Some(serde_json::from_slice(v)?),
            (RecordKind::Position, None) => self.position = None,
            (RecordKind::Position, Some(v)) => self.position = Some(serde_json::from_slice(v)?),
            (RecordKind::Map, None) => {
                self.chunks.remove(&key.chunk.unwrap_or(0));
            }
            (RecordKind::Map, Some(v)) => {
                self.chunks
                    .insert(key.chunk.unwrap_or(0), serde_json::from_slice(v)?);
            }
            (RecordKind::Acls, None) => self.acls = None,
            (RecordKind::Acls, Some(v)) => self.acls = Some(serde_json::from_slice(v)?),
            (RecordKind::SourceAcls, None) => self.source_acls = None,
            (RecordKind::SourceAcls, Some(v)) => {
                self.source_acls = Some(serde_json::from_slice(v)?)
            }
            // Claims are the readers' business (`crate::fence`), not a partition's.
            (RecordKind::Claim, _) => {}
        }
        Ok(())
    }

    /// The value held for `key`, serialized as its record (`None`: nothing, a tombstone).
    pub fn value_of(&self, key: &StateKey) -> Option<Vec<u8>> {
        fn json<T: Serialize>(value: &T) -> Vec<u8> {
            serde_json::to_vec(value).expect("state values serialize")
        }
        match key.kind {
            RecordKind::State => self.state.as_ref().map(json),
            RecordKind::Position => self.position.as_ref().map(json),
            RecordKind::Map => self.chunks.get(&key.chunk.unwrap_or(0)).map(json),
            RecordKind::Acls => self.acls.as_ref().map(json),
            RecordKind::SourceAcls => self.source_acls.as_ref().map(json),
            RecordKind::Claim => None,
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_bytes() {
        let k = StateKey::new(RecordKind::Position, "ns/m", "orders", 3);
        assert_eq!(
            String::from_utf8(k.to_bytes()).unwrap(),
            r#"{"v":1,"kind":"position","mirror":"ns/m","topic":"orders","partition":3}"#
        );
        assert_eq!(StateKey::parse(&k.to_bytes()), Some(k));
        assert_eq!(StateKey::parse(b"not json"), None);
        let m = StateKey::map_chunk("ns/m", "orders", 3, 2);
        assert!(
            String::from_utf8(m.to_bytes())
                .unwrap()
                .ends_with(r#""partition":3,"chunk":2}"#)
        );
    }

    #[test]
    fn maps_round_trip_through_chunks() {
        let mut map = OffsetMap::identity();
        let mut dst = 0;
        for i in 0..2500i64 {
            dst += 2;
            map.record_gap(i * 3 + 3, dst).unwrap();
        }
        let chunks = map_to_chunks(&map);
        assert_eq!(chunks.len(), 3);
        let by_number: BTreeMap<u32, MapChunk> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, c)| (i as u32, c))
            .collect();
        assert_eq!(map_from_chunks(&by_number, 3).unwrap(), map);
        assert!(
            map_from_chunks(&by_number, 4)
                .unwrap_err()
                .contains("chunk 3 of 4 is missing")
        );
    }

    #[test]
    fn records_apply_and_tombstone() {
        let mut records = PartitionRecords::default();
        let key = StateKey::new(RecordKind::Position, "ns/m", "t", 0);
        let position = PositionRecord {
            destination_topic: "t".into(),
            last_mirrored_offset: 41,
            next_source_offset: 42,
            destination_offset: 42,
            offsets_identical: true,
            ..Default::default()
        };
        records
            .apply(&key, Some(&serde_json::to_vec(&position).unwrap()))
            .unwrap();
        assert_eq!(records.position.as_ref().unwrap().last_mirrored_offset, 41);
        records.apply(&key, None).unwrap();
        assert!(records.position.is_none());
    }

    #[test]
    fn stop_reasons_keep_their_names_and_exit_codes() {
        // The operator reads both (position records, pod exit codes): they never change.
        #[rustfmt::skip]
        let table = [
            // reason, name in records, exit code, retried by the operator, name in status
            (StopReason::ForeignWrite, "foreignWrite", 10, false, "ForeignWrite"),
            (StopReason::SourceTopicRecreated, "sourceTopicRecreated", 11, false, "SourceTopicRecreated"),
            (StopReason::SourceClusterChanged, "sourceClusterChanged", 12, false, "SourceClusterChanged"),
            (StopReason::SourceTopicDeleted, "sourceTopicDeleted", 13, false, "SourceTopicDeleted"),
            (StopReason::DataLoss, "dataLoss", 14, false, "DataLoss"),
            (StopReason::DestinationNotEmpty, "destinationNotEmpty", 15, false, "DestinationNotEmpty"),
            (StopReason::DestinationTruncated, "destinationTruncated", 16, true, "DestinationTruncated"),
            (StopReason::SourceDiverged, "sourceDiverged", 17, false, "SourceDiverged"),
            (StopReason::RecordRefused, "recordRefused", 18, false, "RecordRefused"),
            (StopReason::LeaseExpired, "leaseExpired", 19, true, "LeaseExpired"),
            (StopReason::ClusterIdMismatch, "clusterIdMismatch", 20, false, "ClusterIdMismatch"),
            (StopReason::Error, "error", 1, true, "Error"),
        ];
        assert_eq!(table.len(), StopReason::ALL.len());
        for (reason, name, code, retryable, status) in table {
            assert_eq!(serde_json::to_string(&reason).unwrap(), format!("{name:?}"));
            assert_eq!(
                serde_json::from_str::<StopReason>(&format!("{name:?}")).unwrap(),
                reason
            );
            assert_eq!(reason.exit_code(), code, "{reason:?}");
            assert_eq!(reason.retryable(), retryable, "{reason:?}");
            assert_eq!(reason.as_str(), status);
            assert_eq!(StopReason::from_exit_code(code), Some(reason));
        }
        assert_eq!(StopReason::from_exit_code(2), None);
        assert_eq!(StopReason::from_exit_code(0), None);
    }

    #[test]
    fn records_written_before_data_loss_had_its_name_still_read() {
        let old = r#"{"reason":"sourceTruncated","message":"offsets 1..2 were never mirrored"}"#;
        let e: FetcherError = serde_json::from_str(old).unwrap();
        assert_eq!(e.reason, StopReason::DataLoss);
        assert_eq!(e.reason.exit_code(), 14, "the code stayed");
        assert!(serde_json::to_string(&e).unwrap().contains(r#""dataLoss""#));
    }

    #[test]
    fn positions_without_the_new_fields_still_read() {
        let old = r#"{"sourceClusterId":"c","destinationTopic":"t","lastMirroredOffset":4,
            "nextSourceOffset":5,"destinationOffset":5,"mapChunks":0,"offsetsIdentical":true,
            "updatedAtMs":1}"#;
        let p: PositionRecord = serde_json::from_str(old).unwrap();
        assert_eq!(p.last_mirrored_leader_epoch, None);
        assert_eq!(p.map_first_chunk, 0);
        assert!(p.data_loss.is_none());
        let written = serde_json::to_string(&p).unwrap();
        assert!(!written.contains("mapFirstChunk"), "{written}");
    }

    #[test]
    fn chunks_are_written_without_copying_and_read_from_the_first_kept() {
        let mut map = OffsetMap::identity();
        for i in 1..=2500i64 {
            map.record_gap(i * 3, i * 2).unwrap();
        }
        assert_eq!(map_chunk_count(&map), 3);
        let owned = map_to_chunks(&map);
        for (i, c) in owned.iter().enumerate() {
            let borrowed = map_chunk(&map, i).unwrap();
            assert_eq!(
                serde_json::to_string(&borrowed).unwrap(),
                serde_json::to_string(c).unwrap()
            );
        }
        assert!(map_chunk(&map, 3).is_none());
        // Chunk 0 removed: the map is read from chunk 1 on.
        let mut records = PartitionRecords {
            position: Some(PositionRecord {
                map_chunks: 3,
                map_first_chunk: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        for (i, c) in owned.iter().enumerate().skip(1) {
            records.chunks.insert(i as u32, c.clone());
        }
        let read = records.offset_map().unwrap();
        assert_eq!(read.segments(), &map.segments()[MAP_CHUNK_SEGMENTS..]);
    }
}
