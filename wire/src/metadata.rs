//! Cluster metadata as the client keeps it: brokers, topics with their ids, and each partition's
//! leader and leader epoch, read from Metadata responses.

use std::collections::BTreeMap;
use std::time::Instant;

use kafka_protocol::messages::MetadataResponse;
use uuid::Uuid;

use crate::error::KafkaCode;

/// A broker of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// Node id.
    pub id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
    /// Rack, if configured.
    pub rack: Option<String>,
}

impl Broker {
    /// `host:port` to connect to.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One partition's leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// Partition number.
    pub partition: i32,
    /// Error the broker reported for the partition (e.g. LEADER_NOT_AVAILABLE).
    pub error: KafkaCode,
    /// Leader node id (-1: none).
    pub leader: i32,
    /// Leader epoch (-1: unknown).
    pub leader_epoch: i32,
    /// Replica node ids.
    pub replicas: Vec<i32>,
    /// In-sync replica node ids.
    pub isr: Vec<i32>,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Name.
    pub name: String,
    /// Topic id (nil on brokers before Kafka 2.8).
    pub id: Uuid,
    /// Error for the topic (e.g. UNKNOWN_TOPIC_OR_PARTITION).
    pub error: KafkaCode,
    /// Partitions by number.
    pub partitions: BTreeMap<i32, PartitionMetadata>,
}

/// What the client knows about the cluster.
#[derive(Debug, Clone)]
pub struct ClusterMetadata {
    /// Cluster id.
    pub cluster_id: Option<String>,
    /// Controller node id.
    pub controller: i32,
    /// Brokers by node id.
    pub brokers: BTreeMap<i32, Broker>,
    /// Topics by name (those asked for).
    pub topics: BTreeMap<String, TopicMetadata>,
    /// When this was read.
    pub fetched_at: Instant,
}

impl ClusterMetadata {
    /// Nothing known yet.
    pub fn empty() -> ClusterMetadata {
        ClusterMetadata {
            cluster_id: None,
            controller: -1,
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            fetched_at: Instant::now(),
        }
    }

    /// Reads a Metadata response; topics in it replace the ones known.
    pub fn merge(&self, response: &MetadataResponse) -> ClusterMetadata {
        let mut topics = self.topics.clone();
        for t in &response.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.as_str().to_string()) else {
                continue;
            };
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.partition_index,
                        PartitionMetadata {
                            partition: p.partition_index,
                            error: KafkaCode(p.error_code),
                            leader: p.leader_id.0,
                            leader_epoch: p.leader_epoch,
                            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                        },
                    )
                })
                .collect();
            topics.insert(
                name.clone(),
                TopicMetadata {
                    name,
                    id: t.topic_id,
                    error: KafkaCode(t.error_code),
                    partitions,
                },
            );
        }
        ClusterMetadata {
            cluster_id: response
                .cluster_id
                .as_ref()
                .map(|c| c.as_str().to_string())
                .or_else(|| self.cluster_id.clone()),
            controller: response.controller_id.0,
            brokers: response
                .brokers
                .iter()
                .map(|b| {
                    (
                        b.node_id.0,
                        Broker {
                            id: b.node_id.0,
                            host: b.host.as_str().to_string(),
                            port: b.port,
                            rack: b.rack.as_ref().map(|r| r.as_str().to_string()),
                        },
                    )
                })
                .collect(),
            topics,
            fetched_at: Instant::now(),
        }
    }

    /// The leader broker and leader epoch of a partition, when there is one.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<(&Broker, i32)> {
        let p = self.topics.get(topic)?.partitions.get(&partition)?;
        let broker = self.brokers.get(&p.leader)?;
        Some((broker, p.leader_epoch))
    }
}
