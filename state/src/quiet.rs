//! A client context for readers that use `enable.partition.eof`: reaching the end of a
//! partition is expected there, not an error worth logging.

use rdkafka::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;

/// Logs client errors except end-of-partition notices.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::PartitionEOF(_)) {
            tracing::warn!(error = %error, "librdkafka: {reason}");
        }
    }
}

impl ConsumerContext for QuietEof {}
