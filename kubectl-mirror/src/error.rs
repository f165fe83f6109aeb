//! The plugin's errors and the exit codes they map to.

use std::fmt;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the command ran and failed (not found, timeout, mismatches, API errors).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: the command line is wrong.
pub const EXIT_USAGE: i32 = 2;

/// Everything that can go wrong, worded for the person at the terminal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line is wrong (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// No such `ClusterMirror` in the namespace.
    #[error("ClusterMirror {name:?} not found in namespace {namespace:?}")]
    MirrorNotFound {
        /// Namespace searched.
        namespace: String,
        /// Name asked for.
        name: String,
    },
    /// No such `ClusterMirror` in any namespace (`-A`).
    #[error("ClusterMirror {name:?} not found in any namespace")]
    MirrorNotFoundAnywhere {
        /// Name asked for.
        name: String,
    },
    /// A `--topic` that matches no `MirrorTopic` of the mirror.
    #[error("{0}")]
    TopicNotFound(TopicNotFound),
    /// The API server does not answer.
    #[error("cannot reach the Kubernetes API server at {url}: {reason}")]
    Unreachable {
        /// Server URL from the kubeconfig.
        url: String,
        /// What the connection attempt reported.
        reason: String,
    },
    /// The API server does not serve `kmirror.io/v1alpha1`.
    #[error(
        "the Kubernetes API server at {url} does not serve kmirror.io/v1alpha1 \
         (ClusterMirror, MirrorTopic): are the kmirror CRDs installed?"
    )]
    CrdsMissing {
        /// Server URL.
        url: String,
    },
    /// The kubeconfig cannot be read or has no usable context.
    #[error("cannot load the Kubernetes configuration: {0}")]
    Kubeconfig(String),
    /// The API server refused a request (invalid, conflict...).
    #[error("{0}")]
    Api(String),
    /// The API server refused a request for lack of permission (RBAC).
    #[error("{0}")]
    Forbidden(String),
    /// Anything else that makes the command fail.
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }

    /// A failure with a message.
    pub fn failed(message: impl Into<String>) -> Error {
        Error::Failed(message.into())
    }
}

/// Details of an unknown `--topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicNotFound {
    /// The `--topic` value.
    pub topic: String,
    /// The mirror.
    pub mirror: String,
    /// Its namespace.
    pub namespace: String,
    /// The mirror's topics, as `sourceTopic` (with the `MirrorTopic` name when it differs).
    pub available: Vec<String>,
}

impl fmt::Display for TopicNotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topic {:?} not found in ClusterMirror {:?} in namespace {:?}",
            self.topic, self.mirror, self.namespace
        )?;
        if self.available.is_empty() {
            write!(f, "; the mirror has no MirrorTopics")
        } else {
            write!(f, "; its topics are: {}", self.available.join(", "))
        }
    }
}

/// Result with the plugin's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_codes() {
        let e = Error::MirrorNotFound {
            namespace: "ns".into(),
            name: "x".into(),
        };
        assert_eq!(
            e.to_string(),
            r#"ClusterMirror "x" not found in namespace "ns""#
        );
        assert_eq!(e.exit_code(), EXIT_FAILURE);
        assert_eq!(Error::Usage("u".into()).exit_code(), EXIT_USAGE);
        let t = Error::TopicNotFound(TopicNotFound {
            topic: "nope".into(),
            mirror: "dr".into(),
            namespace: "ns".into(),
            available: vec!["orders".into(), "payments (MirrorTopic dr-pay)".into()],
        });
        assert_eq!(
            t.to_string(),
            r#"topic "nope" not found in ClusterMirror "dr" in namespace "ns"; its topics are: orders, payments (MirrorTopic dr-pay)"#
        );
    }
}
