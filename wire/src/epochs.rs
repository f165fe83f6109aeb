//! OffsetForLeaderEpoch: where a leader epoch ends in a partition's log as its leader sees it
//! now (KIP-101/KIP-320). A reader that copied a record of epoch `e` at offset `o` learns from
//! the answer whether the log still holds it: it does when epoch `e` (or the latest epoch at or
//! below `e` the leader knows) ends after `o`.

use std::collections::BTreeMap;

use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{BrokerId, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::error::{KafkaCode, WireError};

/// Where an epoch ends, as the partition's leader answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    /// Partition.
    pub partition: i32,
    /// Error for the partition.
    pub error: KafkaCode,
    /// The largest epoch at or below the one asked for that the leader knows (-1: none).
    pub leader_epoch: i32,
    /// The offset after the last record of that epoch: the start of the next epoch, or the log
    /// end for the current one (-1: unknown).
    pub end_offset: i64,
}

impl Client {
    /// Asks the leaders of `topic`'s partitions where the given epochs end, as a consumer
    /// (replica id -1). Answers come in the order of `partitions` (each named once).
    pub async fn offset_for_leader_epoch(
        &self,
        topic: &str,
        partitions: &[(i32, i32)],
    ) -> Result<Vec<EpochEnd>, WireError> {
        let failed = |partition, error| EpochEnd {
            partition,
            error,
            leader_epoch: -1,
            end_offset: -1,
        };
        let mut out: BTreeMap<i32, EpochEnd> = BTreeMap::new();
        let mut by_leader = BTreeMap::new();
        for &(partition, epoch) in partitions {
            match self.route(topic, partition).await? {
                Err(code) => {
                    out.insert(partition, failed(partition, code));
                }
                Ok(route) => by_leader
                    .entry(route.conn.broker().to_string())
                    .or_insert_with(|| (route.conn.clone(), Vec::new()))
                    .1
                    .push((partition, epoch, route.leader_epoch)),
            }
        }
        for (_, (conn, parts)) in by_leader {
            let version = conn.version::<OffsetForLeaderEpochRequest>(4)?;
            if version < 3 {
                return Err(WireError::OffsetForLeaderEpoch {
                    topic: topic.to_string(),
                    reason: format!(
                        "{} speaks OffsetForLeaderEpoch v{version} only, not as a consumer",
                        conn.broker()
                    ),
                });
            }
            let request = OffsetForLeaderEpochRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![
                    OffsetForLeaderTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(
                            parts
                                .iter()
                                .map(|&(p, epoch, current)| {
                                    OffsetForLeaderPartition::default()
                                        .with_partition(p)
                                        .with_current_leader_epoch(current)
                                        .with_leader_epoch(epoch)
                                })
                                .collect(),
                        ),
                ]);
            let response = match conn
                .request(&request, version, std::time::Duration::ZERO)?
                .wait()
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    self.forget(&conn);
                    return Err(e);
                }
            };
            let mut answered: BTreeMap<i32, _> = response
                .topics
                .into_iter()
                .filter(|t| t.topic.0.as_str() == topic)
                .flat_map(|t| t.partitions)
                .map(|p| (p.partition, p))
                .collect();
            for (partition, _, _) in parts {
                let end = match answered.remove(&partition) {
                    None => failed(partition, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
                    Some(p) => {
                        let error = KafkaCode(p.error_code);
                        if error.is_leader_change() {
                            self.mark_stale();
                        }
                        EpochEnd {
                            partition,
                            error,
                            leader_epoch: p.leader_epoch,
                            end_offset: p.end_offset,
                        }
                    }
                };
                out.insert(partition, end);
            }
        }
        Ok(partitions
            .iter()
            .filter_map(|(p, _)| out.get(p).copied())
            .collect())
    }
}
