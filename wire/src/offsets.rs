//! ListOffsets: the earliest, latest (high watermark, or last stable offset under
//! read_committed) or first-at-timestamp offset of partitions, asked of their leaders.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::{Client, Leader};
use crate::error::{KafkaCode, WireError};
use crate::fetch::Isolation;

/// The replica id of consumers' ListOffsets requests (high watermark or last stable offset).
const CONSUMER_REPLICA_ID: i32 = -1;

/// The replica id brokers answer from their local log without isolation (its log end).
const DEBUGGING_REPLICA_ID: i32 = -2;

/// Which offset to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end: high watermark (read_uncommitted) or last stable offset (read_committed).
    Latest,
    /// The first offset whose timestamp is at or after this one (ms).
    Timestamp(i64),
}

impl OffsetSpec {
    fn wire(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(ts) => ts,
        }
    }
}

/// A listed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// Partition.
    pub partition: i32,
    /// Error for the partition.
    pub error: KafkaCode,
    /// The offset (-1 when none, e.g. no record at or after a timestamp).
    pub offset: i64,
    /// Timestamp of that record, for timestamp lookups (-1 otherwise).
    pub timestamp: i64,
    /// Leader epoch of that offset (-1 when unknown).
    pub leader_epoch: i32,
}

impl Client {
    /// Looks up offsets of `topic` partitions at their leaders; the answers come in the order of
    /// `partitions`, which may name a partition more than once (e.g. earliest and latest).
    pub async fn list_offsets(
        &self,
        topic: &str,
        partitions: &[(i32, OffsetSpec)],
        isolation: Isolation,
    ) -> Result<Vec<ListedOffset>, WireError> {
        // A request may name each partition once: repeated partitions go in later rounds.
        let mut rounds: Vec<Vec<(usize, i32, OffsetSpec)>> = Vec::new();
        for (i, &(partition, spec)) in partitions.iter().enumerate() {
            match rounds
                .iter_mut()
                .find(|r| r.iter().all(|&(_, p, _)| p != partition))
            {
                Some(round) => round.push((i, partition, spec)),
                None => rounds.push(vec![(i, partition, spec)]),
            }
        }
        let mut out: Vec<Option<ListedOffset>> = vec![None; partitions.len()];
        for round in rounds {
            let asked: Vec<(i32, OffsetSpec)> = round.iter().map(|&(_, p, s)| (p, s)).collect();
            let answers = self
                .list_offsets_once(topic, &asked, isolation, CONSUMER_REPLICA_ID)
                .await?;
            for (i, partition, _) in round {
                out[i] = answers.iter().find(|a| a.partition == partition).copied();
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The log end offsets of `topic` partitions at their leaders: not the high watermark but
    /// the end of the leader's own log, records not yet on every in-sync replica included
    /// (ListOffsets sent with the debugging replica id, which brokers answer from the local
    /// replica without isolation).
    pub async fn log_ends(
        &self,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<ListedOffset>, WireError> {
        let asked: Vec<(i32, OffsetSpec)> = partitions
            .iter()
            .map(|p| (*p, OffsetSpec::Latest))
            .collect();
        self.list_offsets_once(
            topic,
            &asked,
            Isolation::ReadUncommitted,
            DEBUGGING_REPLICA_ID,
        )
        .await
    }

    /// Like [`Client::list_offsets`] (each partition once), but a leader that does not answer
    /// within `timeout` or whose connection fails affects only its own partitions: they come back
    /// with NETWORK_EXCEPTION or REQUEST_TIMED_OUT, the others with their answers.
    pub async fn list_offsets_each(
        &self,
        topic: &str,
        partitions: &[(i32, OffsetSpec)],
        isolation: Isolation,
        timeout: Duration,
    ) -> Result<Vec<ListedOffset>, WireError> {
        let answers = self
            .list_offsets_by_leader(topic, partitions, isolation, CONSUMER_REPLICA_ID, timeout)
            .await?;
        let mut out = Vec::with_capacity(partitions.len());
        for (parts, answer) in answers {
            match answer {
                Ok(listed) => out.extend(listed),
                Err(e) => {
                    let code = if matches!(e, WireError::Timeout { .. }) {
                        KafkaCode::REQUEST_TIMED_OUT
                    } else {
                        KafkaCode::NETWORK_EXCEPTION
                    };
                    out.extend(parts.into_iter().map(|p| failed(p, code)));
                }
            }
        }
        out.sort_by_key(|o| o.partition);
        Ok(out)
    }

    async fn list_offsets_once(
        &self,
        topic: &str,
        partitions: &[(i32, OffsetSpec)],
        isolation: Isolation,
        replica_id: i32,
    ) -> Result<Vec<ListedOffset>, WireError> {
        let timeout = self.config().connect_timeout + self.config().request_timeout;
        let answers = self
            .list_offsets_by_leader(topic, partitions, isolation, replica_id, timeout)
            .await?;
        let mut out = Vec::with_capacity(partitions.len());
        for (_, answer) in answers {
            out.extend(answer?);
        }
        out.sort_by_key(|o| o.partition);
        Ok(out)
    }

    /// Asks each leader for its partitions, the leaders side by side, each within `timeout`;
    /// partitions without a leader are answered with their error in a group of their own.
    #[allow(clippy::type_complexity)]
    async fn list_offsets_by_leader(
        &self,
        topic: &str,
        partitions: &[(i32, OffsetSpec)],
        isolation: Isolation,
        replica_id: i32,
        timeout: Duration,
    ) -> Result<Vec<(Vec<i32>, Result<Vec<ListedOffset>, WireError>)>, WireError> {
        let mut leaderless = Vec::new();
        let mut by_leader: BTreeMap<String, (Leader, Vec<(i32, OffsetSpec, i32)>)> =
            BTreeMap::new();
        for &(partition, spec) in partitions {
            match self.leader(topic, partition).await? {
                Err(code) => leaderless.push(failed(partition, code)),
                Ok(leader) => {
                    let epoch = leader.leader_epoch;
                    by_leader
                        .entry(leader.address.clone())
                        .or_insert_with(|| (leader, Vec::new()))
                        .1
                        .push((partition, spec, epoch));
                }
            }
        }
        let asked = by_leader.into_values().map(|(leader, parts)| {
            let client = self.clone();
            async move {
                let answer = tokio::time::timeout(
                    timeout,
                    client.list_offsets_from(topic, &leader, &parts, isolation, replica_id),
                )
                .await
                .unwrap_or_else(|_| {
                    client.mark_stale();
                    Err(WireError::Timeout {
                        broker: leader.address.clone(),
                        api: "ListOffsets",
                        after: timeout,
                    })
                });
                (
                    parts.iter().map(|(p, _, _)| *p).collect::<Vec<i32>>(),
                    answer,
                )
            }
        });
        let mut out = futures::future::join_all(asked).await;
        if !leaderless.is_empty() {
            out.push((Vec::new(), Ok(leaderless)));
        }
        Ok(out)
    }

    /// One ListOffsets request to `leader` for `parts`.
    async fn list_offsets_from(
        &self,
        topic: &str,
        leader: &Leader,
        parts: &[(i32, OffsetSpec, i32)],
        isolation: Isolation,
        replica_id: i32,
    ) -> Result<Vec<ListedOffset>, WireError> {
        let list_error = |reason: String| WireError::ListOffsets {
            topic: topic.to_string(),
            reason,
        };
        let route = self.connect_to(leader).await?;
        let conn = &route.conn;
        let version = conn.version::<ListOffsetsRequest>(10)?;
        if version < 2 && isolation == Isolation::ReadCommitted {
            return Err(list_error(format!(
                "{} speaks ListOffsets v{version} only, without read_committed",
                conn.broker()
            )));
        }
        let mut request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(replica_id))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|&(p, spec, epoch)| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(p)
                                    .with_current_leader_epoch(epoch)
                                    .with_timestamp(spec.wire())
                            })
                            .collect(),
                    ),
            ]);
        if version >= 2 {
            request = request.with_isolation_level(isolation.code());
        }
        if version >= 10 {
            request = request.with_timeout_ms(
                self.config()
                    .request_timeout
                    .as_millis()
                    .min(i32::MAX as u128) as i32,
            );
        }
        let response = match conn
            .request(&request, version, Duration::ZERO)?
            .wait()
            .await
        {
            Ok(r) => r,
            Err(e) => {
                self.forget(conn);
                return Err(e);
            }
        };
        let mut answered: BTreeMap<i32, _> = response
            .topics
            .into_iter()
            .filter(|t| t.name.0.as_str() == topic)
            .flat_map(|t| t.partitions)
            .map(|p| (p.partition_index, p))
            .collect();
        let mut out = Vec::with_capacity(parts.len());
        for &(partition, _, _) in parts {
            match answered.remove(&partition) {
                None => out.push(failed(partition, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION)),
                Some(p) => {
                    let error = KafkaCode(p.error_code);
                    if error.is_leader_change() {
                        self.mark_stale();
                    }
                    out.push(ListedOffset {
                        partition,
                        error,
                        offset: p.offset,
                        timestamp: p.timestamp,
                        leader_epoch: p.leader_epoch,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// The answer for a partition whose leader gave none.
fn failed(partition: i32, error: KafkaCode) -> ListedOffset {
    ListedOffset {
        partition,
        error,
        offset: -1,
        timestamp: -1,
        leader_epoch: -1,
    }
}
