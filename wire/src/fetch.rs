//! Fetch: record batches of partitions as raw bytes, with each partition's watermarks, aborted
//! transactions and error, from the partitions' leaders (one request per leader, the leaders
//! asked side by side; [`Client::fetch_groups`] lets a caller take each leader's answer as it
//! comes, so that one unreachable broker holds up only the partitions it leads).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition as WirePartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::batch::RecordBatches;
use crate::client::{Client, Leader, Route};
use crate::error::{KafkaCode, WireError};

/// Which records a read may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Everything up to the high watermark, aborted transactions included.
    ReadUncommitted,
    /// Up to the last stable offset; aborted transactions are listed to be filtered.
    #[default]
    ReadCommitted,
}

impl Isolation {
    pub(crate) fn code(self) -> i8 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
}

/// Request-wide fetch settings.
#[derive(Debug, Clone, Copy)]
pub struct FetchOptions {
    /// Isolation level.
    pub isolation: Isolation,
    /// How long the broker may wait for `min_bytes`.
    pub max_wait: Duration,
    /// Bytes the broker waits for.
    pub min_bytes: i32,
    /// Bytes per response (the first batch is returned even when larger).
    pub max_bytes: i32,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            isolation: Isolation::ReadCommitted,
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 52_428_800,
        }
    }
}

/// One partition to fetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchPartition {
    /// Partition number.
    pub partition: i32,
    /// Offset to read from.
    pub offset: i64,
    /// Bytes for this partition (the first batch is returned even when larger).
    pub max_bytes: i32,
    /// Leader epoch of the last batch fetched before `offset`, to detect a diverged log
    /// (answered with [`FetchedPartition::diverging_epoch`]); `None` skips the check.
    pub last_fetched_epoch: Option<i32>,
}

impl FetchPartition {
    /// Reads `partition` from `offset`, up to 8 MiB.
    pub fn new(partition: i32, offset: i64) -> FetchPartition {
        FetchPartition {
            partition,
            offset,
            max_bytes: 8 * 1024 * 1024,
            last_fetched_epoch: None,
        }
    }
}

/// A transaction whose records from `first_offset` on are aborted (read_committed only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The transactional producer.
    pub producer_id: i64,
    /// Its first offset in this response's range.
    pub first_offset: i64,
}

/// What the leader returned for one partition.
#[derive(Debug, Clone)]
pub struct FetchedPartition {
    /// Partition number.
    pub partition: i32,
    /// The fetch offset asked for.
    pub fetch_offset: i64,
    /// Error for the partition (e.g. OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER,
    /// FENCED_LEADER_EPOCH); leadership errors have already marked the metadata stale.
    pub error: KafkaCode,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset (-1 when the broker did not say).
    pub last_stable_offset: i64,
    /// Log start offset (-1 when the broker did not say).
    pub log_start_offset: i64,
    /// Aborted transactions overlapping the returned records (read_committed).
    pub aborted: Vec<AbortedTransaction>,
    /// When the log diverged before `offset`: the end offset of the largest epoch at or below
    /// `last_fetched_epoch` (`(epoch, end_offset)`); truncate to it before fetching on.
    pub diverging_epoch: Option<(i32, i64)>,
    /// The leader epoch the request carried (-1: none).
    pub leader_epoch: i32,
    /// The record batches as the broker stored them: the first may start before the fetch offset
    /// (skip what is below it), the last may be cut off (see [`RecordBatches::partial_tail`]).
    pub records: Bytes,
    /// What happened on the client's side when the leader gave no answer (the connection
    /// broke, the request timed out): `error` is then NETWORK_EXCEPTION or REQUEST_TIMED_OUT.
    pub failure: Option<String>,
}

impl FetchedPartition {
    /// The batches in [`FetchedPartition::records`].
    pub fn batches(&self) -> RecordBatches {
        RecordBatches::new(self.records.clone())
    }

    fn failed(partition: &FetchPartition, error: KafkaCode) -> FetchedPartition {
        FetchedPartition {
            partition: partition.partition,
            fetch_offset: partition.offset,
            error,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted: Vec::new(),
            diverging_epoch: None,
            leader_epoch: -1,
            records: Bytes::new(),
            failure: None,
        }
    }
}

/// One leader's share of a fetch: its partitions and their answer to come. The answer never
/// fails as a whole: a lost connection, a timeout or an unreachable leader comes back as each
/// partition's error ([`KafkaCode::NETWORK_EXCEPTION`], [`KafkaCode::REQUEST_TIMED_OUT`]) with
/// [`FetchedPartition::failure`] saying what happened.
pub struct FetchGroup {
    /// The partitions asked of this leader, in request order.
    pub partitions: Vec<i32>,
    /// The answer (every partition of the group, in request order).
    pub answer: Pin<Box<dyn Future<Output = Vec<FetchedPartition>> + Send>>,
}

/// A leader's answer, or why it gave none.
type GroupAnswer = Result<Vec<FetchedPartition>, WireError>;

impl Client {
    /// Fetches `partitions` of `topic` from their leaders. Partitions without a reachable leader
    /// come back with an error code; a connection failure fails the call (and the connection is
    /// replaced on the next call).
    pub async fn fetch(
        &self,
        topic: &str,
        partitions: &[FetchPartition],
        options: &FetchOptions,
    ) -> Result<Vec<FetchedPartition>, WireError> {
        let (mut out, groups) = self.plan_fetch(topic, partitions).await?;
        let answers = futures::future::join_all(groups.into_iter().map(|(leader, parts)| {
            let client = self.clone();
            let topic = topic.to_string();
            let options = *options;
            async move { client.fetch_from(&topic, &leader, &parts, &options).await }
        }))
        .await;
        for answer in answers {
            out.extend(answer?);
        }
        out.sort_by_key(|p| p.partition);
        Ok(out)
    }

    /// The fetch of `partitions` split by leader, each share to be awaited on its own, so that one
    /// leader that does not answer holds up only its own partitions; each share gives up after
    /// `timeout` (from when its future is first polled: connecting, sending and waiting).
    /// Partitions without a known leader come back at once in the first element.
    pub async fn fetch_groups(
        &self,
        topic: &str,
        partitions: &[FetchPartition],
        options: &FetchOptions,
        timeout: Duration,
    ) -> Result<(Vec<FetchedPartition>, Vec<FetchGroup>), WireError> {
        let (failed, groups) = self.plan_fetch(topic, partitions).await?;
        let groups = groups
            .into_iter()
            .map(|(leader, parts)| {
                let client = self.clone();
                let topic = topic.to_string();
                let options = *options;
                let partitions = parts.iter().map(|(p, _)| p.partition).collect();
                let answer = async move {
                    let answer = tokio::time::timeout(
                        timeout,
                        client.fetch_from(&topic, &leader, &parts, &options),
                    )
                    .await;
                    let (code, failure) = match answer {
                        Ok(Ok(fetched)) => return fetched,
                        Ok(Err(e)) => (KafkaCode::NETWORK_EXCEPTION, e.to_string()),
                        Err(_) => {
                            client.mark_stale();
                            (
                                KafkaCode::REQUEST_TIMED_OUT,
                                format!(
                                    "no answer from {} within {} ms",
                                    leader.address,
                                    timeout.as_millis()
                                ),
                            )
                        }
                    };
                    parts
                        .iter()
                        .map(|(p, _)| FetchedPartition {
                            failure: Some(failure.clone()),
                            ..FetchedPartition::failed(p, code)
                        })
                        .collect()
                };
                FetchGroup {
                    partitions,
                    answer: Box::pin(answer),
                }
            })
            .collect();
        Ok((failed, groups))
    }

    /// Partitions grouped by leader (from the metadata, no connection opened), and those without
    /// a leader as failed answers.
    #[allow(clippy::type_complexity)]
    async fn plan_fetch(
        &self,
        topic: &str,
        partitions: &[FetchPartition],
    ) -> Result<
        (
            Vec<FetchedPartition>,
            Vec<(Leader, Vec<(FetchPartition, i32)>)>,
        ),
        WireError,
    > {
        let mut failed = Vec::new();
        let mut by_leader: BTreeMap<String, (Leader, Vec<(FetchPartition, i32)>)> = BTreeMap::new();
        for p in partitions {
            match self.leader(topic, p.partition).await? {
                Err(code) => failed.push(FetchedPartition::failed(p, code)),
                Ok(leader) => {
                    let epoch = leader.leader_epoch;
                    by_leader
                        .entry(leader.address.clone())
                        .or_insert_with(|| (leader, Vec::new()))
                        .1
                        .push((*p, epoch));
                }
            }
        }
        Ok((failed, by_leader.into_values().collect()))
    }

    /// Fetches `parts` from `leader` (connecting first): every partition's answer in request
    /// order, or why the leader gave none.
    async fn fetch_from(
        &self,
        topic: &str,
        leader: &Leader,
        parts: &[(FetchPartition, i32)],
        options: &FetchOptions,
    ) -> GroupAnswer {
        let route = self.connect_to(leader).await?;
        let (pending, by_id) = self.send_fetch(topic, &route, parts, options)?;
        let response = match pending.wait().await {
            Ok(r) => r,
            Err(e) => {
                self.forget(&route.conn);
                return Err(e);
            }
        };
        if response.error_code != 0 {
            self.mark_stale();
            return Err(WireError::Fetch {
                broker: route.conn.broker().to_string(),
                reason: KafkaCode(response.error_code).to_string(),
            });
        }
        let mut answered = BTreeMap::new();
        for t in response.responses {
            let is_ours = if by_id {
                t.topic_id == route.topic_id
            } else {
                t.topic.0.as_str() == topic
            };
            if !is_ours {
                continue;
            }
            for p in t.partitions {
                answered.insert(p.partition_index, p);
            }
        }
        let mut out = Vec::with_capacity(parts.len());
        for (asked, epoch) in parts {
            let Some(p) = answered.remove(&asked.partition) else {
                out.push(FetchedPartition::failed(
                    asked,
                    KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                ));
                continue;
            };
            let error = KafkaCode(p.error_code);
            if error.is_leader_change() {
                self.mark_stale();
            }
            out.push(FetchedPartition {
                partition: asked.partition,
                fetch_offset: asked.offset,
                error,
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                log_start_offset: p.log_start_offset,
                aborted: p
                    .aborted_transactions
                    .unwrap_or_default()
                    .iter()
                    .map(|a| AbortedTransaction {
                        producer_id: a.producer_id.0,
                        first_offset: a.first_offset,
                    })
                    .collect(),
                diverging_epoch: (p.diverging_epoch.epoch >= 0)
                    .then_some((p.diverging_epoch.epoch, p.diverging_epoch.end_offset)),
                leader_epoch: *epoch,
                records: p.records.unwrap_or_default(),
                failure: None,
            });
        }
        Ok(out)
    }

    #[allow(clippy::type_complexity)]
    fn send_fetch(
        &self,
        topic: &str,
        route: &Route,
        parts: &[(FetchPartition, i32)],
        options: &FetchOptions,
    ) -> Result<
        (
            crate::connection::PendingResponse<kafka_protocol::messages::FetchResponse>,
            bool,
        ),
        WireError,
    > {
        let conn = &route.conn;
        let mut version = conn.version::<FetchRequest>(17)?;
        if route.topic_id.is_nil() {
            version = conn.version::<FetchRequest>(12)?;
        }
        let by_id = version >= 13;
        let mut fetch_topic = FetchTopic::default().with_partitions(
            parts
                .iter()
                .map(|(p, epoch)| {
                    let mut w = WirePartition::default()
                        .with_partition(p.partition)
                        .with_current_leader_epoch(*epoch)
                        .with_fetch_offset(p.offset)
                        .with_partition_max_bytes(p.max_bytes);
                    if version >= 12
                        && let Some(e) = p.last_fetched_epoch
                    {
                        w = w.with_last_fetched_epoch(e);
                    }
                    w
                })
                .collect(),
        );
        fetch_topic = if by_id {
            fetch_topic.with_topic_id(route.topic_id)
        } else {
            fetch_topic.with_topic(TopicName(StrBytes::from_string(topic.to_string())))
        };
        let request = FetchRequest::default()
            .with_max_wait_ms(options.max_wait.as_millis().min(i32::MAX as u128) as i32)
            .with_min_bytes(options.min_bytes)
            .with_max_bytes(options.max_bytes)
            .with_isolation_level(options.isolation.code())
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![fetch_topic]);
        let pending = conn.request(&request, version, options.max_wait)?;
        Ok((pending, by_id))
    }
}
