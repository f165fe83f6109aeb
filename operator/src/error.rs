//! The operator's error type, with a stable label for metrics and event reasons.

use thiserror::Error;

use crate::connection::MissingSecret;

/// A reconcile failed.
#[derive(Debug, Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A referenced Secret or key is missing.
    #[error(transparent)]
    MissingSecret(#[from] MissingSecret),
    /// A Kafka cluster could not be reached or refused a request.
    #[error("{cluster} cluster: {message}")]
    Kafka {
        /// `source` or `destination`.
        cluster: &'static str,
        /// What failed.
        message: String,
    },
    /// The state topic could not be read or written.
    #[error("state topic: {0}")]
    State(String),
    /// The finalizer machinery failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl Error {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::MissingSecret(_) => "missing_secret",
            Error::Kafka { .. } => "kafka",
            Error::State(_) => "state_topic",
            Error::Finalizer(_) => "finalizer",
        }
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
