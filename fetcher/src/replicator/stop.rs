//! Why a fetcher stops: every step that can fail and every finding that forbids going on, each
//! with its source, and [`Stop::reason`], the one place that maps them to a [`StopReason`]
//! (its exit code, and whether the operator retries).

use std::fmt;
use std::time::Duration;

use kmirror_state::connection::ConnectionError;
use kmirror_state::kafka_admin::AdminError;
use kmirror_state::offset_map::MapOrderError;
use kmirror_state::records::{FetcherError, StopReason};
use kmirror_state::store::StateError;
use rdkafka::error::KafkaError;
use thiserror::Error;

use super::limits::Refusal;

/// One of the two clusters of a mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The cluster records are copied from.
    Source,
    /// The cluster records are copied to (it also holds the state topic).
    Destination,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Source => "source",
            Side::Destination => "destination",
        })
    }
}

/// Why the fetcher cannot go on. Variants are named after the step that failed (with its
/// source error) or after what a check found; [`Stop::reason`] says which [`StopReason`] each
/// one is. The message (`Display`) is the one-line text recorded with the position.
#[derive(Debug, Error)]
pub enum Stop {
    /// Reading a cluster's connection settings (a property file from a Secret) failed.
    #[error("{side} connection settings: {source}")]
    ReadSettings {
        /// The cluster.
        side: Side,
        /// The file error.
        #[source]
        source: ConnectionError,
    },
    /// Creating a Kafka client failed (an invalid property, an unsupported mechanism).
    #[error("creating the {client}: {source}")]
    CreateClient {
        /// Which client, e.g. "source consumer".
        client: &'static str,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// The source did not report its cluster ID.
    #[error("the source cluster did not report a cluster ID (unreachable?)")]
    FetchSourceClusterId,
    /// Describing the source topic failed.
    #[error("describing source topic {topic}: {source}")]
    DescribeSourceTopic {
        /// The source topic.
        topic: String,
        /// The admin error.
        #[source]
        source: AdminError,
    },
    /// The source topic has no partition this fetcher was told to mirror.
    #[error(
        "source topic {topic} has {partitions} partitions; partition {partition} does not exist"
    )]
    SourcePartitionMissing {
        /// The source topic.
        topic: String,
        /// Its partition count.
        partitions: usize,
        /// The missing partition.
        partition: i32,
    },
    /// Reading the recorded positions from the state topic failed.
    #[error("reading the recorded positions: {0}")]
    LoadState(#[source] StateError),
    /// Writing positions or offset-map chunks to the state topic failed.
    #[error("persisting the position: {0}")]
    WriteState(#[source] StateError),
    /// The recorded offset map of a partition cannot be reassembled.
    #[error("the recorded offset map of partition {partition} is unusable: {message}")]
    ReadOffsetMap {
        /// The partition.
        partition: i32,
        /// What is wrong with it.
        message: String,
    },
    /// The destination topic (or the partition) does not exist.
    #[error("destination topic {topic} (partition {partition}) does not exist")]
    DestinationTopicMissing {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// Reading a partition's watermarks failed.
    #[error("{side} watermarks of {topic}[{partition}]: {source}")]
    FetchWatermarks {
        /// The cluster.
        side: Side,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Opening the lease topic or starting the thread that holds the lease failed.
    #[error("{step}: {source}")]
    Lease {
        /// What was being done.
        step: &'static str,
        /// The error.
        #[source]
        source: kmirror_state::lease_io::LeaseTopicError,
    },
    /// The operator granted no write lease in time.
    #[error(
        "no write lease from the operator within {waited}s (is the operator running and leading, \
         and does this pod still exist?); not writing"
    )]
    LeaseNotGranted {
        /// Seconds waited.
        waited: u64,
    },
    /// The write lease ran out without renewal: this process stopped writing.
    #[error("no lease renewal from the operator for {seconds}s; stopped writing to {}", units.join(", "))]
    LeaseExpired {
        /// The units it held.
        units: Vec<String>,
        /// Seconds since the last renewal.
        seconds: u64,
    },
    /// The destination log end did not settle: something else keeps writing.
    #[error("the log end of {topic}[{partition}] keeps moving: another client writes to it")]
    DestinationLogEndMoving {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// Reading one record (for the last-record check) failed.
    #[error("reading {side} {topic}[{partition}] at offset {offset}: {source}")]
    ReadRecord {
        /// The cluster.
        side: Side,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset.
        offset: i64,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Assigning or re-positioning the source consumer failed.
    #[error("positioning the source consumer on {topic}: {source}")]
    AssignSource {
        /// The source topic.
        topic: String,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// A record could not be handed to the producer.
    #[error("producing to {topic}[{partition}]: {source}")]
    Produce {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// The destination did not accept a record (its delivery report is an error).
    #[error("writing to {topic}[{partition}] failed: {source}")]
    Delivery {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The delivery error.
        #[source]
        source: KafkaError,
    },
    /// The batch engine could not connect its wire client (or get a producer id).
    #[error("connecting the batch engine to the {side} cluster: {source}")]
    ConnectWire {
        /// The cluster.
        side: Side,
        /// The client error.
        #[source]
        source: kmirror_wire::WireError,
    },
    /// The batch engine's write of a batch failed for good (not a refusal of its records).
    #[error("writing a batch to {topic}[{partition}] failed: {source}")]
    WireDelivery {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The client error.
        #[source]
        source: kmirror_wire::WireError,
    },
    /// A fetched source batch failed its checks (CRC, framing, decompression): it is never
    /// copied; a restart fetches it again.
    #[error("a source batch of {topic}[{partition}] at offset {offset} is unreadable: {source}")]
    SourceBatch {
        /// The source topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The fetch offset.
        offset: i64,
        /// What is wrong with it.
        #[source]
        source: kmirror_wire::BatchError,
    },
    /// Records were still unconfirmed when the wait for them ended.
    #[error("{count} records still unconfirmed by the destination after {timeout:?}")]
    Unconfirmed {
        /// Records in flight.
        count: i32,
        /// How long was waited.
        timeout: Duration,
    },
    /// SIGTERM arrived before start-up ended: a clean stop, nothing copied by this run.
    #[error("SIGTERM during start-up; stopped before copying")]
    StartInterrupted,
    /// Records stayed in flight with no delivery report for the stall timeout.
    #[error(
        "{in_flight} records in flight to {topic}, none confirmed by the destination for \
         {seconds}s (brokers frozen, below min.insync.replicas, or unreachable); stopped, a \
         restart resumes from the destination log end"
    )]
    Stalled {
        /// The destination topic.
        topic: String,
        /// Records the producer still held.
        in_flight: i32,
        /// How long none was confirmed.
        seconds: u64,
    },
    /// A source partition held records the consumer did not read, or its leader answered no
    /// watermark query, for the stall timeout, while nothing was read from it.
    #[error(
        "nothing read from {topic}[{partition}] after offset {next} for {seconds}s, {}; stopped, \
         a restart reads on with new clients",
        source_stall_why(*.high)
    )]
    SourceStalled {
        /// The source topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The next source offset to read.
        next: i64,
        /// The source high watermark (None: no query was answered).
        high: Option<i64>,
        /// How long nothing was read.
        seconds: u64,
    },
    /// The record engine's source reader (librdkafka) cannot read the message where a
    /// partition starts: a format before v2 in a Fetch response of v12 or later (Kafka 2.8 on).
    #[error(
        "{topic}[{partition}] offset {offset} is a message in format v{magic} (before v2), which the \
         record engine cannot read from this source (librdkafka misreads old formats in the \
         Fetch responses of Kafka 2.8 and later); use the batch engine (spec.fetcher.engine: \
         Batch, the default), which reads them itself"
    )]
    OldFormatUnreadable {
        /// The source topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The source offset of the message.
        offset: i64,
        /// Its format (0 or 1).
        magic: i8,
    },
    /// Deleting the prefix-alignment placeholders failed.
    #[error("deleting the placeholders of {topic}[{partition}] below offset {offset}: {source}")]
    DeleteRecords {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The new log start.
        offset: i64,
        /// The admin error.
        #[source]
        source: KafkaError,
    },
    /// The destination refused to delete the placeholders of one partition.
    #[error(
        "deleting the placeholders of {topic}[{partition}] below offset {offset}: the destination \
         answered {code:?}"
    )]
    DeletePlaceholders {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The new log start.
        offset: i64,
        /// The partition's error.
        code: rdkafka::error::RDKafkaErrorCode,
    },
    /// A new offset-map segment would break the map's order (a fetcher defect, or a map that
    /// does not belong to this destination).
    #[error("partition {partition}: {source}")]
    OffsetMapOrder {
        /// The partition.
        partition: i32,
        /// The refused segment.
        #[source]
        source: MapOrderError,
    },
    /// The source's high watermark is below the next offset while its log still holds what was
    /// mirrored (a new leader not caught up yet).
    #[error(
        "the source high watermark of {topic}[{partition}] is {high}, below the next offset \
         {next} although the source still holds the records mirrored: waiting for it"
    )]
    SourceBehind {
        /// The source topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The next source offset to copy.
        next: i64,
        /// The source high watermark.
        high: i64,
    },
    /// The consumer or the producer reported a partition this process does not own.
    #[error("{what} partition {partition}, which this fetcher does not own")]
    UnownedPartition {
        /// "record from" or "delivery for".
        what: &'static str,
        /// The partition.
        partition: i32,
    },
    /// A cluster reports an ID other than the one its connection pins.
    #[error(
        "the {side} cluster reports cluster ID {found} but spec.{side}.clusterId pins {pinned}: \
         the mirror points at another cluster; nothing is read or written until the pin or the \
         address is fixed"
    )]
    ClusterIdMismatch {
        /// `source` or `destination`.
        side: &'static str,
        /// The pinned ID.
        pinned: String,
        /// The ID the cluster reports.
        found: String,
    },
    /// The destination did not report its cluster ID while one is pinned.
    #[error("the destination cluster did not report a cluster ID (unreachable?)")]
    FetchDestinationClusterId,
    /// The source reports a cluster ID other than the recorded one.
    #[error(
        "the source cluster ID is {now} but this mirror recorded {recorded}: the source was replaced"
    )]
    SourceClusterChanged {
        /// The recorded cluster ID.
        recorded: String,
        /// The cluster ID the source reports now.
        now: String,
    },
    /// The source topic's ID changed: it was deleted and recreated.
    #[error(
        "source topic {topic} was deleted and recreated (topic ID {was} is now {now}); \
         refusing to mix two topics in one destination"
    )]
    SourceTopicRecreated {
        /// The source topic.
        topic: String,
        /// The recorded topic ID.
        was: String,
        /// The topic ID now.
        now: String,
    },
    /// The source topic does not exist.
    #[error("source topic {topic} does not exist")]
    SourceTopicDeleted {
        /// The source topic.
        topic: String,
    },
    /// The source deleted records (retention, DeleteRecords) before they were mirrored.
    #[error(
        "source offsets {next}–{} of {topic}[{partition}] were deleted on the source (retention \
         or DeleteRecords) before they were mirrored ({} records): the destination will never \
         have them; raise retention.ms/retention.bytes of {topic} so that the mirror does not \
         fall this far behind",
        log_start - 1,
        log_start - next
    )]
    DataLoss {
        /// The source topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The next source offset to copy.
        next: i64,
        /// The source log start.
        log_start: i64,
    },
    /// A partition without recorded state whose destination already holds records.
    #[error(
        "destination {topic}[{partition}] already holds {records} records and this mirror has no \
         state for it: refusing to append to data kmirror did not write"
    )]
    DestinationNotEmpty {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Its log-end offset.
        records: i64,
    },
    /// The destination holds copies of more source offsets than the source has.
    #[error(
        "destination {topic}[{partition}] holds copies up to source offset {last_copied} but the source \
         log ends at {source_end}: another client wrote to the destination partition, or the source lost records"
    )]
    DestinationBeyondSource {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The last source offset the destination holds a copy of.
        last_copied: i64,
        /// The source log end.
        source_end: i64,
    },
    /// The last destination record is not the copy of its source record.
    #[error(
        "destination {topic}[{partition}] offset {destination_offset} is not the copy of source offset \
         {source_offset}: another client wrote to the destination partition"
    )]
    LastRecordNotACopy {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The destination offset compared.
        destination_offset: i64,
        /// The source offset it should be the copy of.
        source_offset: i64,
    },
    /// The destination log ends below what this mirror had confirmed writing: the destination
    /// lost records (an unclean leader election there, or the topic recreated). Resuming from its
    /// log end is safe: the lost records are copied again.
    #[error(
        "destination {topic}[{partition}] ends at offset {log_end} but offsets {log_end}–{} were \
         confirmed written ({} records lost on the destination: an unclean leader election there, \
         or the topic recreated); they are copied again from source offset {resume_source}",
        confirmed - 1,
        confirmed - log_end
    )]
    DestinationTruncated {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The destination log end now.
        log_end: i64,
        /// The destination log end this mirror had confirmed.
        confirmed: i64,
        /// Where copying resumes.
        resume_source: i64,
    },
    /// The destination confirmed a record without saying at which offset (librdkafka reports
    /// -1001, e.g. for a retried batch the broker already had). Where it landed is unproven: the
    /// next start checks the destination's last record against its source record.
    #[error(
        "destination {topic}[{partition}] confirmed the record expected at offset {expected} \
         without its offset; restarting from the destination log end to check it"
    )]
    DeliveredWithoutOffset {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset the record had to get.
        expected: i64,
    },
    /// A delivered record landed below the offset it had to get: the destination lost records.
    #[error(
        "destination {topic}[{partition}]: a record expected at offset {expected} landed at \
         {actual}, below it: the destination lost records it had confirmed (an unclean leader \
         election there, or the topic recreated)"
    )]
    LandedBelow {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset the record had to get.
        expected: i64,
        /// The offset the broker assigned.
        actual: i64,
    },
    /// The source no longer holds records that were mirrored: they were replaced (an unclean
    /// leader election) or lost.
    #[error(
        "source offsets {source_from}–{} of {topic}[{partition}] were replaced on the source after \
         an unclean leader election ({evidence}); destination offsets {destination_from}–{} hold \
         the old records: keep the destination (fail over) or recreate the destination topic and \
         retry",
        source_to - 1,
        destination_to - 1
    )]
    SourceDiverged {
        /// The source topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// First source offset that differs.
        source_from: i64,
        /// One past the last source offset mirrored.
        source_to: i64,
        /// First destination offset holding an old record.
        destination_from: i64,
        /// One past the last destination offset holding one.
        destination_to: i64,
        /// What showed it, e.g. "leader epoch 3 ends at offset 10 on the source now".
        evidence: String,
    },
    /// The destination would refuse a record (checked before producing it: every record before
    /// it is delivered, nothing after it is produced).
    #[error(
        "destination {topic}[{partition}] refuses the record at source offset {source_offset}: {why}"
    )]
    RecordRefused {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The source offset of the record.
        source_offset: i64,
        /// Why, with the limit and the fix.
        why: Refusal,
    },
    /// The destination refused a record (its delivery failed with a refusal; the gapless
    /// producer delivers nothing after it).
    #[error(
        "destination {topic}[{partition}] refused the record at source offset {source_offset}: {why}"
    )]
    DeliveryRefused {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The source offset of the record.
        source_offset: i64,
        /// Why, with the limit and the fix.
        why: Refusal,
    },
    /// A delivered record landed at another offset than the one it had to get.
    #[error(
        "destination {topic}[{partition}]: a record expected at offset {expected} landed at {actual}: \
         another client wrote to the destination partition"
    )]
    OffsetMismatch {
        /// The destination topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset the record had to get.
        expected: i64,
        /// The offset the broker assigned.
        actual: i64,
    },
}

/// Why a source partition counts as stalled, for [`Stop::SourceStalled`].
fn source_stall_why(high: Option<i64>) -> String {
    match high {
        Some(high) => {
            format!("although the source holds records up to {high} (the source consumer is stuck)")
        }
        None => "and its source leader answers no watermark query (brokers down, hung or \
                 unreachable)"
            .to_string(),
    }
}

impl Stop {
    /// The stop reason: the one place that decides what each failure means for the partition
    /// (exit code; retried by the operator or not). Every variant is listed: a new one must
    /// choose.
    pub fn reason(&self) -> StopReason {
        match self {
            // Steps that can succeed on a later attempt (connections, timeouts, brokers
            // restarting, configuration being fixed).
            Stop::ReadSettings { .. } => StopReason::Error,
            Stop::CreateClient { .. } => StopReason::Error,
            Stop::FetchSourceClusterId => StopReason::Error,
            Stop::FetchDestinationClusterId => StopReason::Error,
            Stop::DescribeSourceTopic { .. } => StopReason::Error,
            Stop::SourcePartitionMissing { .. } => StopReason::Error,
            Stop::LoadState(_) => StopReason::Error,
            Stop::WriteState(_) => StopReason::Error,
            Stop::ReadOffsetMap { .. } => StopReason::Error,
            Stop::DestinationTopicMissing { .. } => StopReason::Error,
            Stop::FetchWatermarks { .. } => StopReason::Error,
            Stop::DestinationLogEndMoving { .. } => StopReason::Error,
            Stop::ReadRecord { .. } => StopReason::Error,
            Stop::AssignSource { .. } => StopReason::Error,
            Stop::Produce { .. } => StopReason::Error,
            Stop::ConnectWire { .. } => StopReason::Error,
            Stop::WireDelivery { .. } => StopReason::Error,
            Stop::SourceBatch { .. } => StopReason::Error,
            Stop::Delivery { .. } => StopReason::Error,
            Stop::Unconfirmed { .. } => StopReason::Error,
            Stop::DeliveredWithoutOffset { .. } => StopReason::Error,
            Stop::Stalled { .. } => StopReason::Error,
            Stop::StartInterrupted => StopReason::Error,
            Stop::SourceStalled { .. } => StopReason::Error,
            Stop::OldFormatUnreadable { .. } => StopReason::Error,
            Stop::DeleteRecords { .. } => StopReason::Error,
            Stop::DeletePlaceholders { .. } => StopReason::Error,
            Stop::OffsetMapOrder { .. } => StopReason::Error,
            Stop::SourceBehind { .. } => StopReason::Error,
            Stop::UnownedPartition { .. } => StopReason::Error,
            Stop::Lease { .. } => StopReason::Error,
            Stop::LeaseNotGranted { .. } => StopReason::Error,
            // Another process may write now: stop at once, retried by a new pod.
            Stop::LeaseExpired { .. } => StopReason::LeaseExpired,
            // Findings that retrying cannot change.
            Stop::SourceClusterChanged { .. } => StopReason::SourceClusterChanged,
            Stop::ClusterIdMismatch { .. } => StopReason::ClusterIdMismatch,
            Stop::SourceTopicRecreated { .. } => StopReason::SourceTopicRecreated,
            Stop::SourceTopicDeleted { .. } => StopReason::SourceTopicDeleted,
            Stop::DataLoss { .. } => StopReason::DataLoss,
            Stop::DestinationNotEmpty { .. } => StopReason::DestinationNotEmpty,
            Stop::DestinationTruncated { .. } => StopReason::DestinationTruncated,
            Stop::LandedBelow { .. } => StopReason::DestinationTruncated,
            Stop::SourceDiverged { .. } => StopReason::SourceDiverged,
            Stop::RecordRefused { .. } => StopReason::RecordRefused,
            Stop::DeliveryRefused { .. } => StopReason::RecordRefused,
            Stop::DestinationBeyondSource { .. } => StopReason::ForeignWrite,
            Stop::LastRecordNotACopy { .. } => StopReason::ForeignWrite,
            Stop::OffsetMismatch { .. } => StopReason::ForeignWrite,
        }
    }

    /// The partition a finding is about alone: another writer on it, a record its destination
    /// refuses, source records lost or replaced, a destination that is not this mirror's. Such
    /// a stop fails that partition only; the others of the process stop cleanly with it and
    /// start again. `None` for a stop of the whole process (clusters, the topic, the lease,
    /// errors every partition shares).
    pub fn partition(&self) -> Option<i32> {
        match self {
            Stop::DataLoss { partition, .. }
            | Stop::DestinationNotEmpty { partition, .. }
            | Stop::DestinationBeyondSource { partition, .. }
            | Stop::LastRecordNotACopy { partition, .. }
            | Stop::DestinationTruncated { partition, .. }
            | Stop::LandedBelow { partition, .. }
            | Stop::SourceDiverged { partition, .. }
            | Stop::RecordRefused { partition, .. }
            | Stop::DeliveryRefused { partition, .. }
            | Stop::OffsetMismatch { partition, .. } => Some(*partition),
            _ => None,
        }
    }

    /// Whether the producer must drop what it still holds instead of delivering it: after a
    /// failed delivery (the gapless producer delivers nothing after it), and after a finding
    /// that the destination partition is not this mirror's alone or not what it wrote (another
    /// writer, lost records, a different source). Otherwise what is in flight are copies at
    /// their own offsets and is delivered, so that the reported ranges are exact: before a
    /// record the destination would refuse, at a source that diverged or lost records.
    pub fn purges(&self) -> bool {
        match self {
            Stop::Delivery { .. }
            | Stop::WireDelivery { .. }
            | Stop::Unconfirmed { .. }
            | Stop::DeliveredWithoutOffset { .. }
            | Stop::Stalled { .. }
            | Stop::DeliveryRefused { .. }
            | Stop::LandedBelow { .. }
            | Stop::LeaseExpired { .. } => true,
            _ => matches!(
                self.reason(),
                StopReason::ForeignWrite
                    | StopReason::SourceTopicRecreated
                    | StopReason::SourceClusterChanged
                    | StopReason::DestinationNotEmpty
            ),
        }
    }

    /// The error recorded with the position.
    pub fn to_record(&self) -> FetcherError {
        FetcherError {
            reason: self.reason(),
            message: self.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode;

    fn map_order() -> MapOrderError {
        let mut map = kmirror_state::offset_map::OffsetMap::identity();
        map.record_gap(10, 5).unwrap();
        map.record_gap(7, 6).unwrap_err()
    }

    fn kafka() -> KafkaError {
        KafkaError::MessageProduction(RDKafkaErrorCode::RequestTimedOut)
    }

    fn t() -> String {
        "orders".to_string()
    }

    fn io_error() -> ConnectionError {
        ConnectionError {
            property: "sasl.password".into(),
            path: "/secrets/password".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
    }

    /// (stop, its reason, words its message must contain)
    #[rustfmt::skip]
    fn table() -> Vec<(Stop, StopReason, &'static [&'static str])> {
        use StopReason as R;
        let client_error = || KafkaError::ClientCreation("bad property".into());
        vec![
            (Stop::ReadSettings { side: Side::Destination, source: io_error() },
             R::Error, &["destination connection settings", "sasl.password"]),
            (Stop::CreateClient { client: "source consumer", source: client_error() },
             R::Error, &["creating the source consumer", "bad property"]),
            (Stop::ClusterIdMismatch { side: "destination", pinned: "AAAAAAAAAAAAAAAAAAAAAA".into(), found: "q1w2e3r4t5y6u7i8o9p0aa".into() },
             R::ClusterIdMismatch, &["destination cluster reports cluster ID q1w2e3r4t5y6u7i8o9p0aa",
                                     "spec.destination.clusterId pins AAAAAAAAAAAAAAAAAAAAAA"]),
            (Stop::FetchDestinationClusterId, R::Error, &["destination cluster did not report"]),
            (Stop::ConnectWire { side: Side::Source, source: kmirror_wire::WireError::InitProducerId { reason: "COORDINATOR_NOT_AVAILABLE".into() } },
             R::Error, &["batch engine to the source cluster", "COORDINATOR_NOT_AVAILABLE"]),
            (Stop::WireDelivery { topic: t(), partition: 2, source: kmirror_wire::WireError::Produce { topic: t(), partition: 2, error: kmirror_wire::KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER, message: None } },
             R::Error, &["writing a batch to orders[2]", "OUT_OF_ORDER_SEQUENCE_NUMBER"]),
            (Stop::SourceBatch { topic: t(), partition: 1, offset: 40, source: kmirror_wire::BatchError::Crc { base_offset: 40, stored: 1, computed: 2 } },
             R::Error, &["source batch of orders[1] at offset 40"]),
            (Stop::FetchSourceClusterId,
             R::Error, &["did not report a cluster ID"]),
            (Stop::DescribeSourceTopic { topic: t(), source: AdminError::Timeout },
             R::Error, &["describing source topic orders", "timed out"]),
            (Stop::SourcePartitionMissing { topic: t(), partitions: 3, partition: 5 },
             R::Error, &["has 3 partitions", "partition 5 does not exist"]),
            (Stop::LoadState(StateError::Timeout("__kmirror_state".into())),
             R::Error, &["reading the recorded positions", "timed out"]),
            (Stop::WriteState(StateError::Missing("__kmirror_state".into())),
             R::Error, &["persisting the position", "__kmirror_state"]),
            (Stop::ReadOffsetMap { partition: 2, message: "offset map chunk 1 of 2 is missing".into() },
             R::Error, &["partition 2", "chunk 1 of 2 is missing"]),
            (Stop::DestinationTopicMissing { topic: t(), partition: 0 },
             R::Error, &["destination topic orders (partition 0) does not exist"]),
            (Stop::FetchWatermarks { side: Side::Source, topic: t(), partition: 1, source: kafka() },
             R::Error, &["source watermarks of orders[1]"]),
            (Stop::DestinationLogEndMoving { topic: t(), partition: 0 },
             R::Error, &["keeps moving", "another client writes"]),
            (Stop::ReadRecord { side: Side::Destination, topic: t(), partition: 0, offset: 41, source: kafka() },
             R::Error, &["reading destination orders[0] at offset 41"]),
            (Stop::AssignSource { topic: t(), source: kafka() },
             R::Error, &["positioning the source consumer on orders"]),
            (Stop::Produce { topic: t(), partition: 0, source: kafka() },
             R::Error, &["producing to orders[0]"]),
            (Stop::Delivery { topic: t(), partition: 0, source: kafka() },
             R::Error, &["writing to orders[0] failed"]),
            (Stop::Unconfirmed { count: 12, timeout: Duration::from_secs(17) },
             R::Error, &["12 records still unconfirmed", "17s"]),
            (Stop::DeliveredWithoutOffset { topic: t(), partition: 0, expected: 14679 },
             R::Error, &["orders[0] confirmed the record expected at offset 14679 without its offset"]),
            (Stop::StartInterrupted, R::Error, &["SIGTERM during start-up"]),
            (Stop::Stalled { topic: t(), in_flight: 7, seconds: 120 },
             R::Error, &["7 records in flight to orders", "none confirmed by the destination for 120s"]),
            (Stop::SourceStalled { topic: t(), partition: 2, next: 1130, high: Some(1800), seconds: 120 },
             R::Error, &["nothing read from orders[2] after offset 1130 for 120s",
                         "the source holds records up to 1800", "a restart reads on"]),
            (Stop::SourceStalled { topic: t(), partition: 2, next: 1130, high: None, seconds: 120 },
             R::Error, &["nothing read from orders[2]", "answers no watermark query"]),
            (Stop::OldFormatUnreadable { topic: t(), partition: 1, offset: 0, magic: 1 },
             R::Error, &["orders[1] offset 0 is a message in format v1", "spec.fetcher.engine: Batch"]),
            (Stop::DeleteRecords { topic: t(), partition: 0, offset: 300, source: kafka() },
             R::Error, &["placeholders of orders[0] below offset 300"]),
            (Stop::UnownedPartition { what: "delivery for", partition: 9 },
             R::Error, &["delivery for partition 9"]),
            (Stop::Lease { step: "opening the lease topic", source: kmirror_state::lease_io::LeaseTopicError::Thread("no".into()) },
             R::Error, &["opening the lease topic"]),
            (Stop::LeaseNotGranted { waited: 120 },
             R::Error, &["no write lease", "120s", "not writing"]),
            (Stop::LeaseExpired { units: vec!["orders[0]".into(), "orders[1]".into()], seconds: 9 },
             R::LeaseExpired, &["no lease renewal from the operator for 9s", "stopped writing to orders[0], orders[1]"]),
            (Stop::SourceClusterChanged { recorded: "abc".into(), now: "xyz".into() },
             R::SourceClusterChanged, &["is xyz but this mirror recorded abc"]),
            (Stop::SourceTopicRecreated { topic: t(), was: "id1".into(), now: "id2".into() },
             R::SourceTopicRecreated, &["was deleted and recreated", "id1 is now id2"]),
            (Stop::SourceTopicDeleted { topic: t() },
             R::SourceTopicDeleted, &["source topic orders does not exist"]),
            (Stop::DataLoss { topic: t(), partition: 0, next: 100, log_start: 250 },
             R::DataLoss, &["source offsets 100–249 of orders[0]", "150 records", "retention.ms"]),
            (Stop::DestinationNotEmpty { topic: t(), partition: 0, records: 7 },
             R::DestinationNotEmpty, &["already holds 7 records"]),
            (Stop::DestinationBeyondSource { topic: t(), partition: 0, last_copied: 99, source_end: 50 },
             R::ForeignWrite, &["up to source offset 99", "log ends at 50"]),
            (Stop::LastRecordNotACopy { topic: t(), partition: 0, destination_offset: 9, source_offset: 9 },
             R::ForeignWrite, &["offset 9 is not the copy of source offset 9", "another client wrote"]),
            (Stop::OffsetMismatch { topic: t(), partition: 0, expected: 10, actual: 11 },
             R::ForeignWrite, &["expected at offset 10 landed at 11", "another client wrote"]),
            (Stop::DeletePlaceholders { topic: t(), partition: 0, offset: 300, code: RDKafkaErrorCode::RequestTimedOut },
             R::Error, &["placeholders of orders[0] below offset 300", "RequestTimedOut"]),
            (Stop::OffsetMapOrder { partition: 3, source: map_order() },
             R::Error, &["partition 3", "out of order", "source offset 7"]),
            (Stop::SourceBehind { topic: t(), partition: 0, next: 15, high: 10 },
             R::Error, &["high watermark of orders[0] is 10", "next offset 15"]),
            (Stop::DestinationTruncated { topic: t(), partition: 0, log_end: 0, confirmed: 100, resume_source: 0 },
             R::DestinationTruncated, &["ends at offset 0", "offsets 0–99", "100 records lost", "copied again from source offset 0"]),
            (Stop::LandedBelow { topic: t(), partition: 0, expected: 10, actual: 7 },
             R::DestinationTruncated, &["expected at offset 10 landed at 7", "lost records"]),
            (Stop::SourceDiverged { topic: t(), partition: 0, source_from: 10, source_to: 15, destination_from: 10, destination_to: 15, evidence: "leader epoch 0 ends at offset 10 on the source now".into() },
             R::SourceDiverged, &["source offsets 10–14 of orders[0]", "unclean leader election", "destination offsets 10–14 hold the old records", "epoch 0 ends at offset 10"]),
            (Stop::RecordRefused { topic: t(), partition: 0, source_offset: 20, why: Refusal::TooLarge { size: 2_100_000, limit: 1_048_588 } },
             R::RecordRefused, &["orders[0] refuses the record at source offset 20", "2100000 bytes", "max.message.bytes 1048588", "raise the destination topic's max.message.bytes"]),
            (Stop::DeliveryRefused { topic: t(), partition: 0, source_offset: 20, why: Refusal::Broker { code: RDKafkaErrorCode::MessageSizeTooLarge, hint: "the topic's max.message.bytes 200000".into() } },
             R::RecordRefused, &["orders[0] refused the record at source offset 20", "MessageSizeTooLarge", "max.message.bytes 200000"]),
        ]
    }

    #[test]
    fn every_stop_maps_to_its_reason_and_says_what_failed() {
        for (stop, reason, words) in table() {
            assert_eq!(stop.reason(), reason, "{stop:?}");
            let message = stop.to_string();
            for w in words {
                assert!(message.contains(w), "{message:?} lacks {w:?}");
            }
            assert!(!message.contains('\n'), "one line: {message:?}");
            let record = stop.to_record();
            assert_eq!(record.reason, reason);
            assert_eq!(record.message, message);
        }
    }

    #[test]
    fn every_stop_reason_has_a_cause() {
        let reasons: Vec<StopReason> = table().iter().map(|(s, _, _)| s.reason()).collect();
        for r in StopReason::ALL {
            assert!(reasons.contains(&r), "no stop maps to {r:?}");
        }
    }

    use StopReason as R;

    #[test]
    fn what_is_purged_rather_than_flushed() {
        for (stop, reason, _) in table() {
            let expect = matches!(
                reason,
                R::ForeignWrite
                    | R::SourceTopicRecreated
                    | R::SourceClusterChanged
                    | R::DestinationNotEmpty
            ) || matches!(
                stop,
                Stop::Delivery { .. }
                    | Stop::WireDelivery { .. }
                    | Stop::Unconfirmed { .. }
                    | Stop::DeliveredWithoutOffset { .. }
                    | Stop::Stalled { .. }
                    | Stop::DeliveryRefused { .. }
                    | Stop::LandedBelow { .. }
                    | Stop::LeaseExpired { .. }
            );
            assert_eq!(stop.purges(), expect, "{stop:?}");
        }
    }

    #[test]
    fn a_finding_about_one_partition_names_it_and_nothing_else_does() {
        for (stop, reason, _) in table() {
            assert_eq!(
                stop.partition().is_some(),
                reason.about_one_partition(),
                "{stop:?}: the operator reads a stop of this reason as about one partition \
                 exactly when it names one"
            );
        }
    }

    #[test]
    fn the_source_error_is_kept() {
        use std::error::Error as _;
        let stop = Stop::Delivery {
            topic: t(),
            partition: 0,
            source: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        };
        let source = stop.source().expect("a source");
        assert!(source.to_string().contains("too large"), "{source}");
    }
}
