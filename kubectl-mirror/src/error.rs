//! The plugin's errors and the exit codes they map to.

use std::fmt;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the command ran and failed for another reason (not found, unreachable, ...).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: the command line is wrong (clap's own code).
pub const EXIT_USAGE: i32 = 2;
/// Exit code: `--wait` timed out; the change is made and may still complete.
pub const EXIT_TIMEOUT: i32 = 3;
/// Exit code: refused by the operator, the API server's admission rules, or RBAC.
pub const EXIT_REFUSED: i32 = 4;
/// Exit code: divergence: `verify` found records that differ or are missing, or a failback
/// found records written to the old source after the last mirrored offset.
pub const EXIT_DIVERGENCE: i32 = 5;

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
    /// The API server failed a request (conflict, server error, credentials refused...).
    #[error("{0}")]
    Api(String),
    /// The API server refused a request for lack of permission (RBAC).
    #[error("{0}")]
    Forbidden(String),
    /// The API server's validation or admission rules refused the change (invalid).
    #[error("{0}")]
    Rejected(String),
    /// The operator refuses the change: a `Ready` reason that waiting does not clear.
    #[error("{0}")]
    Refused(String),
    /// `--wait` ran out of time; the change is made and may still complete.
    #[error("{0}")]
    TimedOut(String),
    /// Records differ between the clusters (verify), or a failback found records written to
    /// the old source after the last mirrored offset.
    #[error("{0}")]
    Diverged(String),
    /// Anything else that makes the command fail.
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// The process exit code for this error: the one place that decides it (every variant
    /// named, so that a new one needs a decision).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => EXIT_USAGE,
            Error::TimedOut(_) => EXIT_TIMEOUT,
            Error::Refused(_) | Error::Rejected(_) | Error::Forbidden(_) => EXIT_REFUSED,
            Error::Diverged(_) => EXIT_DIVERGENCE,
            Error::MirrorNotFound { .. }
            | Error::MirrorNotFoundAnywhere { .. }
            | Error::TopicNotFound(_)
            | Error::Unreachable { .. }
            | Error::CrdsMissing { .. }
            | Error::Kubeconfig(_)
            | Error::Api(_)
            | Error::Failed(_) => EXIT_FAILURE,
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
    fn exit_codes_by_variant() {
        let s = || "x".to_string();
        let table = [
            (Error::Usage(s()), 2),
            (Error::TimedOut(s()), 3),
            (Error::Refused(s()), 4),
            (Error::Rejected(s()), 4),
            (Error::Forbidden(s()), 4),
            (Error::Diverged(s()), 5),
            (
                Error::MirrorNotFound {
                    namespace: s(),
                    name: s(),
                },
                1,
            ),
            (Error::MirrorNotFoundAnywhere { name: s() }, 1),
            (
                Error::TopicNotFound(TopicNotFound {
                    topic: s(),
                    mirror: s(),
                    namespace: s(),
                    available: vec![],
                }),
                1,
            ),
            (
                Error::Unreachable {
                    url: s(),
                    reason: s(),
                },
                1,
            ),
            (Error::CrdsMissing { url: s() }, 1),
            (Error::Kubeconfig(s()), 1),
            (Error::Api(s()), 1),
            (Error::Failed(s()), 1),
        ];
        for (error, code) in table {
            assert_eq!(error.exit_code(), code, "{error:?}");
        }
        assert_eq!(
            (
                EXIT_OK,
                EXIT_FAILURE,
                EXIT_USAGE,
                EXIT_TIMEOUT,
                EXIT_REFUSED,
                EXIT_DIVERGENCE
            ),
            (0, 1, 2, 3, 4, 5)
        );
    }

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
