//! A client context for readers that use `enable.partition.eof`: reaching the end of a
//! partition is expected there, not an error worth logging.

use rdkafka::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Logs client errors except end-of-partition notices.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuietEof;

/// Whether `error` only says a partition's end was reached: as a consumed event
/// (`PartitionEOF`) or, through the client's error callback, as a global error code.
fn end_of_partition(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
    )
}

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if !end_of_partition(&error) {
            tracing::warn!(error = %error, "librdkafka: {reason}");
        }
    }
}

impl ConsumerContext for QuietEof {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_end_of_a_partition_is_kept_quiet() {
        assert!(end_of_partition(&KafkaError::PartitionEOF(3)));
        assert!(
            end_of_partition(&KafkaError::Global(RDKafkaErrorCode::PartitionEOF)),
            "the error callback reports it as a global error"
        );
        assert!(!end_of_partition(&KafkaError::Global(
            RDKafkaErrorCode::BrokerTransportFailure
        )));
    }
}
