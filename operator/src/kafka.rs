//! Async helpers for the admin calls reconciles make (blocking librdkafka calls run on the
//! blocking pool).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kmirror_state::kafka_admin::{self, AdminError, TopicDescription, describe_topics};
use rdkafka::admin::{AdminOptions, ConfigSource, NewPartitions, ResourceSpecifier};
use rdkafka::error::RDKafkaErrorCode;

use crate::clusters::Cluster;
use crate::error::KafkaError;

/// Result of an admin call.
pub type Result<T> = std::result::Result<T, KafkaError>;

/// Timeout of admin calls.
pub const TIMEOUT: Duration = Duration::from_secs(15);

fn options() -> AdminOptions {
    AdminOptions::new()
        .operation_timeout(Some(TIMEOUT))
        .request_timeout(Some(TIMEOUT))
}

/// Describes a topic (`None`: it does not exist).
pub async fn describe_topic(
    cluster: &Arc<Cluster>,
    topic: &str,
) -> Result<Option<TopicDescription>> {
    describe_topic_within(cluster, topic, TIMEOUT).await
}

/// Describes a topic, waiting at most `timeout` for the cluster.
pub async fn describe_topic_within(
    cluster: &Arc<Cluster>,
    topic: &str,
    timeout: Duration,
) -> Result<Option<TopicDescription>> {
    let (c, t) = (cluster.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || describe_topics(c.admin.inner(), &[&t], timeout))
        .await
        .map_err(|e| cluster.error(e))?
        .map(|mut v| v.pop().flatten())
        .map_err(|e| cluster.error(format!("describing topic {topic}: {e}")))
}

/// Log start and end of a partition.
pub async fn watermarks(cluster: &Arc<Cluster>, topic: &str, partition: i32) -> Result<(i64, i64)> {
    let (c, t) = (cluster.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || c.admin.inner().fetch_watermarks(&t, partition, TIMEOUT))
        .await
        .map_err(|e| cluster.error(e))?
        .map_err(|e| cluster.error(format!("offsets of {topic}[{partition}]: {e}")))
}

/// Names of all topics.
pub async fn list_topics(cluster: &Arc<Cluster>) -> Result<Vec<String>> {
    let c = cluster.clone();
    let md = tokio::task::spawn_blocking(move || c.admin.inner().fetch_metadata(None, TIMEOUT))
        .await
        .map_err(|e| cluster.error(e))?
        .map_err(|e| cluster.error(format!("listing topics: {e}")))?;
    Ok(md.topics().iter().map(|t| t.name().to_string()).collect())
}

/// A topic's configs as DescribeConfigs reports them.
#[derive(Debug, Clone, Default)]
pub struct TopicConfigs {
    /// Set explicitly on the topic (dynamic topic configs).
    pub dynamic: BTreeMap<String, String>,
    /// Every config's effective value (topic override, else the broker's default), sensitive
    /// ones without their value: the names are those the broker knows.
    pub effective: BTreeMap<String, Option<String>>,
}

impl TopicConfigs {
    /// The effective `max.message.bytes`.
    pub fn max_message_bytes(&self) -> Option<i64> {
        self.effective
            .get("max.message.bytes")
            .and_then(|v| v.as_deref())
            .and_then(|v| v.trim().parse().ok())
    }
}

/// Configs of a topic: dynamic and effective.
pub async fn describe_topic_configs(cluster: &Arc<Cluster>, topic: &str) -> Result<TopicConfigs> {
    let results = cluster
        .admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &options())
        .await
        .map_err(|e| cluster.error(format!("describing configs of {topic}: {e}")))?;
    let mut out = TopicConfigs::default();
    for r in results {
        let resource =
            r.map_err(|code| cluster.error(format!("describing configs of {topic}: {code:?}")))?;
        for e in resource.entries {
            let value = e.value.filter(|_| !e.is_sensitive);
            if e.source == ConfigSource::DynamicTopic
                && let Some(v) = &value
            {
                out.dynamic.insert(e.name.clone(), v.clone());
            }
            out.effective.insert(e.name, value);
        }
    }
    Ok(out)
}

/// Configs of a topic set explicitly on it (dynamic topic configs).
pub async fn topic_configs(
    cluster: &Arc<Cluster>,
    topic: &str,
) -> Result<BTreeMap<String, String>> {
    Ok(describe_topic_configs(cluster, topic).await?.dynamic)
}

/// What a topic creation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creation {
    /// The broker created the topic.
    Created,
    /// The topic existed already (a reconcile whose describe did not see it yet, or a deletion
    /// not yet settled).
    Existed,
}

/// Creates a topic with the cluster's default replication factor (already existing is fine).
pub async fn create_topic(
    cluster: &Arc<Cluster>,
    topic: &str,
    partitions: i32,
    configs: &BTreeMap<String, String>,
) -> Result<Creation> {
    create_topic_answer(cluster, topic, partitions, None, configs)
        .await?
        .map_err(|e| cluster.error(format!("creating topic {topic}: {e}")))
}

/// Creates a topic with `replication_factor` replicas (`None`: the cluster's default);
/// `Ok(Err(refusal))`: the broker refused it, with its error message (already existing is not a
/// refusal: [`Creation::Existed`]).
pub async fn create_topic_answer(
    cluster: &Arc<Cluster>,
    topic: &str,
    partitions: i32,
    replication_factor: Option<i32>,
    configs: &BTreeMap<String, String>,
) -> Result<std::result::Result<Creation, AdminError>> {
    let (c, t) = (cluster.clone(), topic.to_string());
    let configs: Vec<(String, String)> = configs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let answer = tokio::task::spawn_blocking(move || {
        let pairs: Vec<(&str, &str)> = configs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        kafka_admin::create_topic(
            c.admin.inner(),
            &t,
            partitions,
            replication_factor,
            &pairs,
            TIMEOUT,
        )
    })
    .await
    .map_err(|e| cluster.error(e))?;
    Ok(match answer {
        Ok(()) => Ok(Creation::Created),
        Err(e) if e.code() == Some(RDKafkaErrorCode::TopicAlreadyExists) => Ok(Creation::Existed),
        Err(e @ AdminError::Kafka { .. }) => Err(e),
        Err(e) => return Err(cluster.error(format!("creating topic {topic}: {e}"))),
    })
}

/// How many brokers the cluster has (as its metadata lists them).
pub async fn broker_count(cluster: &Arc<Cluster>, topic: &str) -> Result<usize> {
    let (c, t) = (cluster.clone(), topic.to_string());
    let md = tokio::task::spawn_blocking(move || c.admin.inner().fetch_metadata(Some(&t), TIMEOUT))
        .await
        .map_err(|e| cluster.error(e))?
        .map_err(|e| cluster.error(format!("listing brokers: {e}")))?;
    Ok(md.brokers().len())
}

/// Grows a topic to `partitions`.
pub async fn add_partitions(cluster: &Arc<Cluster>, topic: &str, partitions: usize) -> Result<()> {
    let new = NewPartitions::new(topic, partitions);
    let results = cluster
        .admin
        .create_partitions([&new], &options())
        .await
        .map_err(|e| cluster.error(format!("adding partitions to {topic}: {e}")))?;
    for r in results {
        r.map_err(|(_, code)| cluster.error(format!("adding partitions to {topic}: {code:?}")))?;
    }
    Ok(())
}

/// Deletes a topic (absent is fine).
pub async fn delete_topic(cluster: &Arc<Cluster>, topic: &str) -> Result<()> {
    let results = cluster
        .admin
        .delete_topics(&[topic], &options())
        .await
        .map_err(|e| cluster.error(format!("deleting topic {topic}: {e}")))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((_, code)) => {
                return Err(cluster.error(format!("deleting topic {topic}: {code:?}")));
            }
        }
    }
    Ok(())
}
