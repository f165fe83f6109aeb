//! The operator's errors: each reconcile [`Error`] names the step that failed and carries its
//! [`Cause`]; the cause gives the stable label of metrics and event reasons.

use std::time::Duration;

use thiserror::Error;

use crate::connection::{MissingSecret, UnlabelledSecret};

/// A Kafka cluster could not be reached or refused a request.
#[derive(Debug, Clone, Error)]
#[error("{cluster} cluster: {message}")]
pub struct KafkaError {
    /// `source` or `destination`.
    pub cluster: &'static str,
    /// What failed.
    pub message: String,
}

/// The state topic could not be read or written.
#[derive(Debug, Clone, Error)]
#[error("state topic: {0}")]
pub struct StateError(pub String);

/// The destination refused the replication factor asked for a topic
/// (`INVALID_REPLICATION_FACTOR`): more replicas than it has brokers. The topic is not created
/// and none of its partitions start.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}", too_many_replicas_message(self))]
pub struct TooManyReplicas {
    /// The destination topic.
    pub topic: String,
    /// The factor asked for and the field that sets it (`None`: the broker's own default).
    pub asked: Option<(i32, &'static str)>,
    /// The destination's brokers, when they could be counted.
    pub brokers: Option<usize>,
    /// The broker's answer.
    pub answer: String,
}

fn too_many_replicas_message(r: &TooManyReplicas) -> String {
    let asked = match r.asked {
        Some((factor, field)) => format!("replication factor {factor} ({field})"),
        None => "the destination broker's default.replication.factor".to_string(),
    };
    let (has, fix) = match r.brokers {
        Some(n) => (
            format!("the destination has {n} brokers"),
            format!("set spec.topicCreation.replicationFactor to {n} or less, or add brokers"),
        ),
        None => (
            "the destination has fewer brokers".to_string(),
            "lower spec.topicCreation.replicationFactor, or add brokers".to_string(),
        ),
    };
    format!(
        "destination topic {} not created: {asked} but {has} ({}); {fix}",
        r.topic, r.answer
    )
}

/// What went wrong underneath a step.
#[derive(Debug, Error)]
pub enum Cause {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A referenced Secret or key is missing.
    #[error(transparent)]
    MissingSecret(#[from] MissingSecret),
    /// A referenced Secret does not opt in to be read by kmirror.
    #[error(transparent)]
    UnlabelledSecret(#[from] UnlabelledSecret),
    /// A Kafka cluster could not be reached or refused a request.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// The state topic could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// A setting of the resource cannot be used (e.g. a filter that does not compile).
    #[error("{0}")]
    Invalid(String),
    /// The destination cannot hold the replicas asked for a topic.
    #[error(transparent)]
    TooManyReplicas(#[from] TooManyReplicas),
}

impl Cause {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Cause::Kube(_) => "kube",
            Cause::MissingSecret(_) => "missing_secret",
            Cause::UnlabelledSecret(_) => "unlabelled_secret",
            Cause::Kafka(_) => "kafka",
            Cause::State(_) => "state_topic",
            Cause::Invalid(_) => "invalid",
            Cause::TooManyReplicas(_) => "replication_factor",
        }
    }
}

/// A reconcile failed; the variant names the step.
#[derive(Debug, Error)]
pub enum Error {
    /// Reading the `ClusterMirror` a topic belongs to.
    #[error("reading ClusterMirror {name}: {source}")]
    ReadMirror {
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Connecting to a cluster (Secrets, client settings).
    #[error("connecting to the {side} cluster: {source}")]
    Connect {
        /// `source` or `destination`.
        side: &'static str,
        /// Why.
        #[source]
        source: Cause,
    },
    /// Opening the state topic on the destination.
    #[error("opening the state topic: {0}")]
    OpenState(#[source] StateError),
    /// Waiting for the mirror's state to be read, or claiming its state records (one operator
    /// writes them: a superseded one stops).
    #[error("claiming the mirror's state records: {0}")]
    ClaimState(#[source] StateError),
    /// Opening the lease topic on the destination.
    #[error("opening the lease topic: {0}")]
    OpenLeases(#[source] kmirror_state::lease_io::LeaseTopicError),
    /// Listing the fetcher pods of a topic.
    #[error("listing fetcher pods: {0}")]
    ListPods(#[source] kube::Error),
    /// Describing the destination topic.
    #[error("describing the destination topic: {0}")]
    DescribeDestination(#[source] KafkaError),
    /// Reading what a failback needs (the forward mirror's state, the old source's log).
    #[error("observing the failback: {0}")]
    ObserveFailback(#[source] Cause),
    /// Creating or growing the destination topic.
    #[error("ensuring the destination topic: {0}")]
    EnsureDestinationTopic(#[source] Cause),
    /// A failback step (quarantine, seeding, recreating the topic).
    #[error("preparing the failback: {0}")]
    Failback(#[source] Cause),
    /// Persisting lifecycle transitions to the state topic.
    #[error("persisting transitions: {0}")]
    PersistTransitions(#[source] StateError),
    /// Finishing a failover (last mirrored offset, final group sync, STOPPED).
    #[error("finishing the failover: {0}")]
    FinishFailover(#[source] Cause),
    /// Deleting a fetcher pod.
    #[error("deleting fetcher pod {pod}: {source}")]
    DeletePod {
        /// The pod.
        pod: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Creating a fetcher pod.
    #[error("creating fetcher pod {pod}: {source}")]
    CreatePod {
        /// The pod.
        pod: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Writing an object's status.
    #[error("writing the status of {object}: {source}")]
    WriteStatus {
        /// `Kind/namespace/name`.
        object: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Writing an object's status took too long.
    #[error("writing the status of {object}: no answer within {timeout:?}")]
    StatusTimeout {
        /// `Kind/namespace/name`.
        object: String,
        /// The limit.
        timeout: Duration,
    },
    /// A pod of a fetcher's name exists that the MirrorTopic does not control.
    #[error(
        "pod {pod} exists and is not controlled by MirrorTopic {topic}: kmirror neither uses nor \
         deletes it; delete or rename it"
    )]
    ForeignPod {
        /// The pod.
        pod: String,
        /// The MirrorTopic.
        topic: String,
    },
    /// Listing the `MirrorTopic`s of a mirror.
    #[error("listing MirrorTopics: {0}")]
    ListMirrorTopics(#[source] kube::Error),
    /// Removing a deleted topic's records from the state topic.
    #[error("removing state records: {0}")]
    RemoveStateRecords(#[source] StateError),
    /// The finalizer machinery (adding or removing the finalizer) failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl Error {
    /// What went wrong underneath, when it is one of the common causes.
    fn label_of_cause(&self) -> Option<&'static str> {
        Some(match self {
            Error::ReadMirror { .. }
            | Error::ListPods(_)
            | Error::DeletePod { .. }
            | Error::CreatePod { .. }
            | Error::ForeignPod { .. }
            | Error::WriteStatus { .. }
            | Error::StatusTimeout { .. }
            | Error::ListMirrorTopics(_) => "kube",
            Error::Connect { source, .. } => source.label(),
            Error::ObserveFailback(c)
            | Error::EnsureDestinationTopic(c)
            | Error::Failback(c)
            | Error::FinishFailover(c) => c.label(),
            Error::DescribeDestination(_) | Error::OpenLeases(_) => "kafka",
            Error::OpenState(_)
            | Error::ClaimState(_)
            | Error::PersistTransitions(_)
            | Error::RemoveStateRecords(_) => "state_topic",
            Error::Finalizer(_) => return None,
        })
    }

    /// A short label for metrics: the kind of cause (`kube`, `kafka`, `state_topic`, …).
    pub fn label(&self) -> &'static str {
        self.label_of_cause().unwrap_or("finalizer")
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_say_what_failed_and_keep_the_cause() {
        let e = Error::FinishFailover(Cause::Kafka(KafkaError {
            cluster: "destination",
            message: "offsets of t[0]: timed out".into(),
        }));
        assert_eq!(
            e.to_string(),
            "finishing the failover: destination cluster: offsets of t[0]: timed out"
        );
        assert_eq!(e.label(), "kafka");
        assert!(std::error::Error::source(&e).is_some());
        let e = Error::PersistTransitions(StateError("flush timed out".into()));
        assert_eq!(e.label(), "state_topic");
        assert_eq!(Error::Finalizer("conflict".into()).label(), "finalizer");
    }
}
