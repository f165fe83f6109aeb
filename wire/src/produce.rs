//! Produce of raw record batches (one batch per partition per request, acks=all by default) and
//! InitProducerId for an idempotent producer without a transactional id.
//!
//! Sequence rules as the broker checks them: a producer id's first batch on a partition starts at
//! sequence 0, each next batch at the previous batch's base sequence plus its record count
//! ([`crate::batch::next_sequence`]), at most five batches in flight per partition. Requests are
//! written in the order of [`Client::send_produce`] calls. After a failure, wait for every batch
//! in flight, then resend the unacknowledged ones unchanged and in order: the broker answers a
//! batch it already has with its original offset.
//!
//! A broker that has no state for a producer id on a partition (a new producer, or state that
//! expired) accepts *any* sequence number there: a batch that overtakes an earlier one that failed
//! is appended at the earlier one's offset. A caller keeps a partition's batches on one
//! connection ([`Client::send_produce_pinned`]) and sends nothing more while an earlier batch is
//! unresolved after a failure.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    InitProducerIdRequest, ProduceRequest, ProduceResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::connection::{Connection, PendingResponse};
use crate::error::{KafkaCode, WireError};
use std::sync::Arc;

/// The identity of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    /// Producer id.
    pub id: i64,
    /// Producer epoch.
    pub epoch: i16,
}

/// Produce settings.
#[derive(Debug, Clone, Copy)]
pub struct ProduceOptions {
    /// -1: all in-sync replicas; 1: the leader.
    pub acks: i16,
    /// How long the broker waits for the replicas.
    pub timeout: Duration,
}

impl Default for ProduceOptions {
    fn default() -> Self {
        ProduceOptions {
            acks: -1,
            timeout: Duration::from_secs(30),
        }
    }
}

/// The broker's acknowledgement of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// Offset the batch's first record got (for a duplicate: the offset it got the first time).
    pub base_offset: i64,
    /// Append time for LogAppendTime topics (-1 otherwise).
    pub log_append_time: i64,
    /// The partition's log start offset (-1 when the broker did not say).
    pub log_start_offset: i64,
}

/// A produce request on the wire.
pub struct InFlightProduce {
    client: Client,
    conn: Arc<Connection>,
    topic: String,
    partition: i32,
    pending: PendingResponse<ProduceResponse>,
}

impl InFlightProduce {
    /// The connection the batch went on ([`Client::send_produce_pinned`]).
    pub fn connection(&self) -> u64 {
        self.conn.serial()
    }

    /// Waits for the broker's answer. Refusals are [`WireError::Produce`] with the broker's
    /// code; leadership errors have already marked the metadata stale.
    pub async fn wait(self) -> Result<Produced, WireError> {
        let response = match self.pending.wait().await {
            Ok(r) => r,
            Err(e) => {
                self.client.forget(&self.conn);
                return Err(e);
            }
        };
        let partition = response
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.index == self.partition)
            .ok_or_else(|| WireError::Protocol {
                broker: self.conn.broker().to_string(),
                api: "Produce",
                reason: format!("no answer for partition {}", self.partition),
            })?;
        let code = KafkaCode(partition.error_code);
        // Brokers before 2.x answer a re-sent batch with DUPLICATE_SEQUENCE_NUMBER and no offset.
        if code.is_ok()
            || (code == KafkaCode::DUPLICATE_SEQUENCE_NUMBER && partition.base_offset >= 0)
        {
            return Ok(Produced {
                base_offset: partition.base_offset,
                log_append_time: partition.log_append_time_ms,
                log_start_offset: partition.log_start_offset,
            });
        }
        if code.is_leader_change() {
            self.client.mark_stale();
        }
        let mut message = partition
            .error_message
            .as_ref()
            .map(|m| m.as_str().to_string());
        if let Some(first) = partition.record_errors.first()
            && let Some(m) = &first.batch_index_error_message
        {
            message = Some(match message {
                Some(top) => format!("{top}; {}", m.as_str()),
                None => m.as_str().to_string(),
            });
        }
        Err(WireError::Produce {
            topic: self.topic,
            partition: self.partition,
            error: code,
            message,
        })
    }
}

impl Client {
    /// Puts one raw record batch for `topic`-`partition` on the wire to its leader and returns
    /// the handle to the answer. Calls for one partition reach the broker in call order.
    pub async fn send_produce(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        options: &ProduceOptions,
    ) -> Result<InFlightProduce, WireError> {
        self.send_produce_pinned(topic, partition, batch, options, None)
            .await
    }

    /// [`Client::send_produce`], but only on connection `pin` (see
    /// [`InFlightProduce::connection`]) when given: when the partition's route is now another
    /// connection (a reconnect, a new leader), nothing is sent and the answer is
    /// [`WireError::RouteChanged`] — wait for the batches on the old route first.
    pub async fn send_produce_pinned(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        options: &ProduceOptions,
        pin: Option<u64>,
    ) -> Result<InFlightProduce, WireError> {
        let route = match self.route(topic, partition).await? {
            Ok(route) => route,
            Err(code) => {
                return Err(WireError::Produce {
                    topic: topic.to_string(),
                    partition,
                    error: code,
                    message: Some("no leader known".into()),
                });
            }
        };
        let conn = route.conn;
        if let Some(pinned) = pin
            && pinned != conn.serial()
        {
            return Err(WireError::RouteChanged {
                topic: topic.to_string(),
                partition,
                pinned,
                now: conn.serial(),
            });
        }
        let mut version = conn.version::<ProduceRequest>(13)?;
        if route.topic_id.is_nil() {
            version = conn.version::<ProduceRequest>(12)?;
        }
        let data = TopicProduceData::default().with_partition_data(vec![
            PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch)),
        ]);
        let data = if version >= 13 {
            data.with_topic_id(route.topic_id)
        } else {
            data.with_name(TopicName(StrBytes::from_string(topic.to_string())))
        };
        let request = ProduceRequest::default()
            .with_acks(options.acks)
            .with_timeout_ms(options.timeout.as_millis().min(i32::MAX as u128) as i32)
            .with_topic_data(vec![data]);
        let pending = conn.request(&request, version, options.timeout)?;
        Ok(InFlightProduce {
            client: self.clone(),
            conn,
            topic: topic.to_string(),
            partition,
            pending,
        })
    }

    /// Produces one raw batch and waits for the answer.
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        options: &ProduceOptions,
    ) -> Result<Produced, WireError> {
        self.send_produce(topic, partition, batch, options)
            .await?
            .wait()
            .await
    }

    /// A new idempotent producer id and epoch (InitProducerId without a transactional id),
    /// retrying while the broker says the request may succeed later.
    pub async fn init_producer_id(&self) -> Result<ProducerIdentity, WireError> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(i32::MAX)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let deadline = tokio::time::Instant::now() + self.config().request_timeout;
        loop {
            let conn = self.any_connection().await?;
            let response = conn.send(&request, 5).await.map_err(|e| {
                self.forget(&conn);
                WireError::InitProducerId {
                    reason: e.to_string(),
                }
            })?;
            let code = KafkaCode(response.error_code);
            if code.is_ok() {
                return Ok(ProducerIdentity {
                    id: response.producer_id.0,
                    epoch: response.producer_epoch,
                });
            }
            if !code.is_retriable() || tokio::time::Instant::now() > deadline {
                return Err(WireError::InitProducerId {
                    reason: code.to_string(),
                });
            }
            tokio::time::sleep(self.config().retry_backoff).await;
        }
    }
}
