//! Admin operations rdkafka's Rust API lacks, reached through librdkafka's C admin API in one
//! small, safe wrapper: topic descriptions with topic IDs, and (see the submodules) ACLs,
//! incremental config changes and consumer-group offsets.
//!
//! Calls block the calling thread until the broker answers or the timeout passes; from async
//! code run them in `spawn_blocking`.

mod acls;
mod configs;
mod create;
mod ffi;
mod groups;
mod topics;

use rdkafka::error::RDKafkaErrorCode;
use thiserror::Error;

pub use acls::{
    AclBinding, Operation, PatternType, Permission, ResourceType, create_acls, delete_acls,
    describe_acls,
};
pub use configs::{ConfigOp, alter_topic_configs};
pub use create::create_topic;
pub use groups::{GroupOffset, alter_group_offsets, list_group_offsets};
pub use topics::{TopicDescription, describe_topics};

/// An admin call failed.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum AdminError {
    /// The broker (or librdkafka) returned an error.
    #[error("{code:?}: {message}")]
    Kafka {
        /// The Kafka error code.
        code: RDKafkaErrorCode,
        /// Its message.
        message: String,
    },
    /// No answer within the timeout.
    #[error("timed out waiting for the cluster")]
    Timeout,
    /// An argument cannot be passed to librdkafka.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// librdkafka does not support the operation.
    #[error("operation not supported: {0}")]
    Unsupported(String),
}

impl AdminError {
    /// The Kafka error code, if the broker answered with one.
    pub fn code(&self) -> Option<RDKafkaErrorCode> {
        match self {
            AdminError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }
}
