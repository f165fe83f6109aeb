//! Why a fetcher stops: every step that can fail and every finding that forbids going on, each
//! with its source, and [`Stop::reason`], the one place that maps them to a [`StopReason`]
//! (its exit code, and whether the operator retries).

use std::fmt;
use std::time::Duration;

use kmirror_state::connection::ConnectionError;
use kmirror_state::kafka_admin::AdminError;
use kmirror_state::records::{FetcherError, StopReason};
use kmirror_state::store::StateError;
use rdkafka::error::KafkaError;
use thiserror::Error;

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
    /// Records were still unconfirmed when the wait for them ended.
    #[error("{count} records still unconfirmed by the destination after {timeout:?}")]
    Unconfirmed {
        /// Records in flight.
        count: i32,
        /// How long was waited.
        timeout: Duration,
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
    /// The consumer or the producer reported a partition this process does not own.
    #[error("{what} partition {partition}, which this fetcher does not own")]
    UnownedPartition {
        /// "record from" or "delivery for".
        what: &'static str,
        /// The partition.
        partition: i32,
    },
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
    /// Retention deleted source records before they were mirrored.
    #[error(
        "source {topic}[{partition}] now starts at offset {log_start}, but offsets {next}..{log_start} \
         were never mirrored ({} records deleted by retention before they were copied)",
        log_start - next
    )]
    SourceTruncated {
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
            Stop::Delivery { .. } => StopReason::Error,
            Stop::Unconfirmed { .. } => StopReason::Error,
            Stop::DeleteRecords { .. } => StopReason::Error,
            Stop::UnownedPartition { .. } => StopReason::Error,
            // Findings that retrying cannot change.
            Stop::SourceClusterChanged { .. } => StopReason::SourceClusterChanged,
            Stop::SourceTopicRecreated { .. } => StopReason::SourceTopicRecreated,
            Stop::SourceTopicDeleted { .. } => StopReason::SourceTopicDeleted,
            Stop::SourceTruncated { .. } => StopReason::SourceTruncated,
            Stop::DestinationNotEmpty { .. } => StopReason::DestinationNotEmpty,
            Stop::DestinationBeyondSource { .. } => StopReason::ForeignWrite,
            Stop::LastRecordNotACopy { .. } => StopReason::ForeignWrite,
            Stop::OffsetMismatch { .. } => StopReason::ForeignWrite,
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
            (Stop::DeleteRecords { topic: t(), partition: 0, offset: 300, source: kafka() },
             R::Error, &["placeholders of orders[0] below offset 300"]),
            (Stop::UnownedPartition { what: "delivery for", partition: 9 },
             R::Error, &["delivery for partition 9"]),
            (Stop::SourceClusterChanged { recorded: "abc".into(), now: "xyz".into() },
             R::SourceClusterChanged, &["is xyz but this mirror recorded abc"]),
            (Stop::SourceTopicRecreated { topic: t(), was: "id1".into(), now: "id2".into() },
             R::SourceTopicRecreated, &["was deleted and recreated", "id1 is now id2"]),
            (Stop::SourceTopicDeleted { topic: t() },
             R::SourceTopicDeleted, &["source topic orders does not exist"]),
            (Stop::SourceTruncated { topic: t(), partition: 0, next: 100, log_start: 250 },
             R::SourceTruncated, &["now starts at offset 250", "100..250", "150 records deleted"]),
            (Stop::DestinationNotEmpty { topic: t(), partition: 0, records: 7 },
             R::DestinationNotEmpty, &["already holds 7 records"]),
            (Stop::DestinationBeyondSource { topic: t(), partition: 0, last_copied: 99, source_end: 50 },
             R::ForeignWrite, &["up to source offset 99", "log ends at 50"]),
            (Stop::LastRecordNotACopy { topic: t(), partition: 0, destination_offset: 9, source_offset: 9 },
             R::ForeignWrite, &["offset 9 is not the copy of source offset 9", "another client wrote"]),
            (Stop::OffsetMismatch { topic: t(), partition: 0, expected: 10, actual: 11 },
             R::ForeignWrite, &["expected at offset 10 landed at 11", "another client wrote"]),
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
