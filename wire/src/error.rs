//! Errors of the wire client, each named after the step that failed; none carries a secret.

use std::fmt;
use std::time::Duration;

use kafka_protocol::ResponseError;
use thiserror::Error;

use crate::batch::BatchError;

/// A Kafka error code as a broker returned it (0 is success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KafkaCode(pub i16);

impl KafkaCode {
    /// No error.
    pub const NONE: KafkaCode = KafkaCode(0);
    /// The requested offset is outside the log.
    pub const OFFSET_OUT_OF_RANGE: KafkaCode = KafkaCode(1);
    /// The broker does not know the topic or partition (yet).
    pub const UNKNOWN_TOPIC_OR_PARTITION: KafkaCode = KafkaCode(3);
    /// No leader right now (election in progress).
    pub const LEADER_NOT_AVAILABLE: KafkaCode = KafkaCode(5);
    /// The broker is not the leader (any more).
    pub const NOT_LEADER_OR_FOLLOWER: KafkaCode = KafkaCode(6);
    /// The request timed out on the broker (also what a partition gets whose request got no
    /// answer within the client's timeout).
    pub const REQUEST_TIMED_OUT: KafkaCode = KafkaCode(7);
    /// The connection broke before an answer arrived (what a partition gets whose request was
    /// lost with its connection).
    pub const NETWORK_EXCEPTION: KafkaCode = KafkaCode(13);
    /// The batch is larger than the topic's `max.message.bytes`.
    pub const MESSAGE_TOO_LARGE: KafkaCode = KafkaCode(10);
    /// The batch failed the broker's CRC or format checks.
    pub const CORRUPT_MESSAGE: KafkaCode = KafkaCode(2);
    /// The broker is not the controller.
    pub const NOT_CONTROLLER: KafkaCode = KafkaCode(41);
    /// Fewer in-sync replicas than `min.insync.replicas`.
    pub const NOT_ENOUGH_REPLICAS: KafkaCode = KafkaCode(19);
    /// Written to the leader, but fewer in-sync replicas than required acknowledged it.
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: KafkaCode = KafkaCode(20);
    /// The principal may not do this with the topic (e.g. READ for a fetch).
    pub const TOPIC_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(29);
    /// The broker expected another sequence number.
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: KafkaCode = KafkaCode(45);
    /// The batch was written before (idempotent retry); older brokers answer this.
    pub const DUPLICATE_SEQUENCE_NUMBER: KafkaCode = KafkaCode(46);
    /// The producer epoch is older than the broker's.
    pub const INVALID_PRODUCER_EPOCH: KafkaCode = KafkaCode(47);
    /// The leader epoch in the request is older than the broker's.
    pub const FENCED_LEADER_EPOCH: KafkaCode = KafkaCode(74);
    /// The leader epoch in the request is newer than the broker's.
    pub const UNKNOWN_LEADER_EPOCH: KafkaCode = KafkaCode(75);
    /// The broker no longer knows the producer id.
    pub const UNKNOWN_PRODUCER_ID: KafkaCode = KafkaCode(59);
    /// The topic was deleted (or recreated) since the topic id was read.
    pub const UNKNOWN_TOPIC_ID: KafkaCode = KafkaCode(100);
    /// The record failed broker-side validation (e.g. inconsistent batch offsets).
    pub const INVALID_RECORD: KafkaCode = KafkaCode(87);
    /// The broker is shutting down or not ready.
    pub const KAFKA_STORAGE_ERROR: KafkaCode = KafkaCode(56);
    /// The topic id in the request does not match the broker's.
    pub const INCONSISTENT_TOPIC_ID: KafkaCode = KafkaCode(103);

    /// True for success.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// The broker's view of leadership moved: refresh metadata and retry at the new leader.
    pub fn is_leader_change(self) -> bool {
        matches!(
            self,
            KafkaCode::NOT_LEADER_OR_FOLLOWER
                | KafkaCode::LEADER_NOT_AVAILABLE
                | KafkaCode::FENCED_LEADER_EPOCH
                | KafkaCode::UNKNOWN_LEADER_EPOCH
                | KafkaCode::NOT_CONTROLLER
                | KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
                | KafkaCode::UNKNOWN_TOPIC_ID
                | KafkaCode::INCONSISTENT_TOPIC_ID
                | KafkaCode::KAFKA_STORAGE_ERROR
        )
    }

    /// Kafka marks the error as retriable.
    pub fn is_retriable(self) -> bool {
        ResponseError::try_from_code(self.0).is_some_and(|e| e.is_retriable())
    }

    /// Kafka's name for the code, e.g. `OFFSET_OUT_OF_RANGE`.
    pub fn name(self) -> String {
        match ResponseError::try_from_code(self.0) {
            None => "NONE".to_string(),
            Some(ResponseError::Unknown(code)) => format!("UNKNOWN_ERROR_CODE_{code}"),
            Some(e) => screaming_snake(&format!("{e:?}")),
        }
    }
}

fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// A failure of the wire client. Messages name the broker, the API and the Kafka error; they
/// never contain passwords, secrets, tokens or keys.
#[derive(Debug, Error)]
pub enum WireError {
    /// A connection property is missing, malformed or not supported.
    #[error("connection setting {key}: {reason}")]
    Config {
        /// The property key.
        key: String,
        /// What is wrong with it (never its value when it is a secret).
        reason: String,
    },
    /// The TCP connection could not be opened.
    #[error("cannot connect to {broker}: {reason}")]
    Connect {
        /// `host:port`.
        broker: String,
        /// The I/O error.
        reason: String,
    },
    /// TLS setup or handshake failed.
    #[error("TLS with {broker} failed: {reason}")]
    Tls {
        /// `host:port`, or the file being loaded.
        broker: String,
        /// The reason.
        reason: String,
    },
    /// The ApiVersions exchange failed, or the broker lacks an API version this client needs.
    #[error("ApiVersions with {broker} failed: {reason}")]
    ApiVersions {
        /// `host:port`.
        broker: String,
        /// The reason.
        reason: String,
    },
    /// The SASL handshake (mechanism negotiation) failed.
    #[error("SASL handshake with {broker} failed: {reason}")]
    SaslHandshake {
        /// `host:port`.
        broker: String,
        /// The reason.
        reason: String,
    },
    /// The broker refused the credentials, or the exchange broke off.
    #[error("SASL authentication ({mechanism}) with {broker} failed: {reason}")]
    SaslAuthenticate {
        /// `host:port`.
        broker: String,
        /// `PLAIN`, `SCRAM-SHA-512`, ...
        mechanism: String,
        /// The broker's message or the protocol problem.
        reason: String,
    },
    /// The OAuth token endpoint did not hand out a token.
    #[error("OAuth token request to {endpoint} failed: {reason}")]
    OAuthToken {
        /// The token endpoint URL.
        endpoint: String,
        /// The reason (HTTP status and the endpoint's error code).
        reason: String,
    },
    /// No broker could answer a Metadata request, or the answer lacks what was asked.
    #[error("metadata: {reason}")]
    Metadata {
        /// The reason.
        reason: String,
    },
    /// A Fetch request failed as a whole.
    #[error("fetch from {broker}: {reason}")]
    Fetch {
        /// `host:port` (or broker id).
        broker: String,
        /// The reason.
        reason: String,
    },
    /// A Produce request failed, or the broker refused the batch.
    #[error("produce to {topic}-{partition}: {error}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Produce {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The broker's error code.
        error: KafkaCode,
        /// The broker's message, if any.
        message: Option<String>,
    },
    /// A ListOffsets request failed.
    #[error("list offsets of {topic}: {reason}")]
    ListOffsets {
        /// Topic.
        topic: String,
        /// The reason.
        reason: String,
    },
    /// An OffsetForLeaderEpoch request failed.
    #[error("offsets for leader epochs of {topic}: {reason}")]
    OffsetForLeaderEpoch {
        /// Topic.
        topic: String,
        /// The reason.
        reason: String,
    },
    /// InitProducerId failed.
    #[error("InitProducerId: {reason}")]
    InitProducerId {
        /// The reason.
        reason: String,
    },
    /// The connection broke while a request was outstanding; the request may or may not have
    /// taken effect (resend idempotent batches unchanged).
    #[error("connection to {broker} lost during {api}: {reason}")]
    Disconnected {
        /// `host:port`.
        broker: String,
        /// The API of the request.
        api: &'static str,
        /// What ended the connection.
        reason: String,
    },
    /// No answer within the request timeout; the connection was closed.
    #[error("{api} to {broker} timed out after {} ms", after.as_millis())]
    Timeout {
        /// `host:port`.
        broker: String,
        /// The API of the request.
        api: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// A response could not be decoded, or a request not encoded.
    #[error("{api} with {broker}: malformed message: {reason}")]
    Protocol {
        /// `host:port`.
        broker: String,
        /// The API.
        api: &'static str,
        /// The decoder's message.
        reason: String,
    },
    /// A record batch could not be parsed, rewritten or built.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The client was fenced ([`crate::Client::fence`]): it writes nothing any more.
    #[error("{api} to {broker} not sent: the client was fenced (its write lease ran out)")]
    Fenced {
        /// `host:port` (or `(client)` before a broker was chosen).
        broker: String,
        /// The API of the request.
        api: &'static str,
    },
    /// A produce pinned to a connection found the partition's route on another one (a new
    /// connection, or another leader): nothing was sent.
    #[error(
        "produce to {topic}-{partition} not sent: its route moved from connection {pinned} to {now}"
    )]
    RouteChanged {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The connection the caller's earlier requests went on.
        pinned: u64,
        /// The connection the partition's requests would go on now.
        now: u64,
    },
}

impl WireError {
    /// The request may succeed when sent again (on a new connection, after a metadata refresh).
    /// Idempotent produce batches must be resent unchanged.
    pub fn is_retriable(&self) -> bool {
        match self {
            WireError::Connect { .. }
            | WireError::Disconnected { .. }
            | WireError::Timeout { .. }
            | WireError::Metadata { .. }
            | WireError::Fetch { .. }
            | WireError::ListOffsets { .. }
            | WireError::RouteChanged { .. } => true,
            // Kafka calls CORRUPT_MESSAGE retriable; for a rewritten batch it means the batch
            // itself is wrong, and sending it again cannot help.
            WireError::Produce { error, .. } => {
                *error != KafkaCode::CORRUPT_MESSAGE
                    && (error.is_retriable() || error.is_leader_change())
            }
            _ => false,
        }
    }

    pub(crate) fn config(key: &str, reason: impl Into<String>) -> WireError {
        WireError::Config {
            key: key.to_string(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_kafka_names() {
        assert_eq!(KafkaCode(1).name(), "OFFSET_OUT_OF_RANGE");
        assert_eq!(KafkaCode(6).name(), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(KafkaCode(0).name(), "NONE");
        assert_eq!(KafkaCode(-2).name(), "UNKNOWN_ERROR_CODE_-2");
        assert_eq!(
            KafkaCode::FENCED_LEADER_EPOCH.to_string(),
            "FENCED_LEADER_EPOCH (74)"
        );
        assert!(KafkaCode::NOT_LEADER_OR_FOLLOWER.is_leader_change());
        assert!(!KafkaCode::OFFSET_OUT_OF_RANGE.is_leader_change());
        assert!(KafkaCode::NOT_ENOUGH_REPLICAS.is_retriable());
        assert!(!KafkaCode::MESSAGE_TOO_LARGE.is_retriable());
    }

    #[test]
    fn produce_error_reads_well() {
        let e = WireError::Produce {
            topic: "t".into(),
            partition: 3,
            error: KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER,
            message: None,
        };
        assert_eq!(
            e.to_string(),
            "produce to t-3: OUT_OF_ORDER_SEQUENCE_NUMBER (45)"
        );
        assert!(!e.is_retriable());
        let corrupt = WireError::Produce {
            topic: "t".into(),
            partition: 0,
            error: KafkaCode::CORRUPT_MESSAGE,
            message: None,
        };
        assert!(!corrupt.is_retriable());
        let moved = WireError::Produce {
            topic: "t".into(),
            partition: 0,
            error: KafkaCode::NOT_LEADER_OR_FOLLOWER,
            message: None,
        };
        assert!(moved.is_retriable());
    }
}
