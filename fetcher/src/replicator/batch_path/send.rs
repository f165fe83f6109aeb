//! The batch engine's writes: batches in flight per partition (at most five), the broker's
//! answers applied in order — each base offset checked against the one the batch had to get —,
//! a retriable failure answered by resending the partition's unconfirmed batches unchanged and
//! in order, a refusal named with the batch's first source offset, and the stall watchdog.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use kmirror_wire::{Client, KafkaCode, ProduceOptions, Produced, Rewrite, WireError, batch};
use rdkafka::error::RDKafkaErrorCode;

use super::{MAX_IN_FLIGHT, Outgoing, RETRY_BACKOFF};
use crate::replicator::Fetcher;
use crate::replicator::stop::Stop;
use crate::replicator::watchdog::Watch;

pub(super) type Answer = Pin<Box<dyn Future<Output = Result<Produced, WireError>> + Send>>;

/// A batch on its way to the destination.
pub(super) struct Sent {
    /// The bytes as produced (resent unchanged after a retriable failure).
    batch: Bytes,
    /// Destination offsets its first and last record must get.
    first_dst: i64,
    last_dst: i64,
    /// Source offset of its first record.
    first_src: i64,
    /// Bytes of keys, values and headers (for the metrics; batch bytes for passed batches).
    bytes: u64,
    /// Its newest record timestamp.
    max_timestamp: i64,
    /// The broker's answer; `None` after a failure until the batch is resent.
    answer: Option<Answer>,
}

/// The librdkafka code of a broker error code the limits know how to explain.
fn refusal_code(code: KafkaCode) -> Option<RDKafkaErrorCode> {
    Some(match code.0 {
        4 => RDKafkaErrorCode::InvalidMessageSize,
        10 => RDKafkaErrorCode::MessageSizeTooLarge,
        18 => RDKafkaErrorCode::MessageBatchTooLarge,
        32 => RDKafkaErrorCode::InvalidTimestamp,
        87 => RDKafkaErrorCode::InvalidRecord,
        _ => return None,
    })
}

impl Fetcher<'_> {
    /// Puts one batch on the wire (after the lease check), waiting for room first.
    pub(super) fn send_batch(&mut self, p: i32, out: Outgoing) -> Result<(), Stop> {
        while self.batch_path().lanes[&p].sent.len() >= MAX_IN_FLIGHT {
            self.drain_batches(true)?;
        }
        // The throttle holds a batch back before it is written, not after.
        if let Some(t) = self.throttle.as_mut() {
            let mut wait = t.take(out.bytes as usize, Instant::now());
            while !wait.is_zero() {
                let slice = wait.min(Duration::from_millis(50));
                std::thread::sleep(slice);
                self.drain_batches(false)?;
                wait -= slice;
            }
        }
        if let Some(l) = self.lease {
            l.check()?;
        }
        let topic = self.config.destination_topic.clone();
        let source_topic = self.config.source_topic.clone();
        let path = self.batch.as_mut().expect("the batch engine runs");
        let producer = path.producer;
        let lane = path.lanes.get_mut(&p).expect("owned partition");
        let count = (out.last_dst - out.first_dst + 1) as i32;
        let rewrite = Rewrite {
            producer_id: producer.id,
            producer_epoch: producer.epoch,
            base_sequence: lane.sequence,
        };
        let bytes = if out.passed {
            batch::rewrite(&out.batch, &rewrite)
        } else {
            let mut b = out.batch.to_vec();
            batch::rewrite_in_place(&mut b, &rewrite).map(|_| Bytes::from(b))
        }
        .map_err(|source| Stop::SourceBatch {
            topic: source_topic,
            partition: p,
            offset: out.first_src,
            source,
        })?;
        lane.sequence = batch::next_sequence(lane.sequence, count);
        let answer = send(
            &path.runtime,
            &path.destination,
            &topic,
            p,
            bytes.clone(),
            path.produce,
        );
        lane.sent.push_back(Sent {
            batch: bytes,
            first_dst: out.first_dst,
            last_dst: out.last_dst,
            first_src: out.first_src,
            bytes: out.bytes,
            max_timestamp: out.max_timestamp,
            answer: Some(answer),
        });
        Ok(())
    }

    /// Applies the answers that arrived — with `block`, waits for at least the oldest one (up to
    /// a second). A retriable failure resends that partition's unconfirmed batches unchanged
    /// and in order.
    pub(in crate::replicator) fn drain_batches(&mut self, block: bool) -> Result<(), Stop> {
        let partitions: Vec<i32> = self.batch_path().lanes.keys().copied().collect();
        let mut confirmed = 0usize;
        let mut waited = false;
        for p in partitions {
            loop {
                let path = self.batch.as_mut().expect("the batch engine runs");
                let lane = path.lanes.get_mut(&p).expect("owned");
                let Some(front) = lane.sent.front_mut() else {
                    break;
                };
                let Some(answer) = front.answer.as_mut() else {
                    break; // awaiting a resend (below)
                };
                let result = if block && !waited {
                    waited = true;
                    let _guard = path.runtime.enter();
                    match path.runtime.block_on(async {
                        tokio::time::timeout(Duration::from_secs(1), answer).await
                    }) {
                        Ok(r) => r,
                        Err(_) => break,
                    }
                } else {
                    let _guard = path.runtime.enter();
                    match answer.now_or_never() {
                        Some(r) => r,
                        None => break,
                    }
                };
                match result {
                    Ok(produced) => {
                        let sent = lane.sent.pop_front().expect("front");
                        self.confirm_batch(p, &sent, produced)?;
                        confirmed += 1;
                    }
                    Err(e) if e.is_retriable() => {
                        // This answer is spent; the resend gives the batch a new one.
                        lane.sent.front_mut().expect("front").answer = None;
                        self.resend(p, &e)?;
                    }
                    Err(e) => return Err(self.write_failed(p, e)),
                }
            }
        }
        let in_flight = self.batch_path().in_flight() as i32;
        match self
            .batch_path()
            .watchdog
            .observe(Instant::now(), in_flight, confirmed)
        {
            Watch::Fine => Ok(()),
            Watch::Warn { in_flight, waited } => {
                tracing::warn!(
                    in_flight,
                    "{in_flight} batches in flight, none confirmed by the destination for {}s",
                    waited.as_secs()
                );
                Ok(())
            }
            Watch::Stalled { in_flight, waited } => Err(Stop::Stalled {
                topic: self.config.destination_topic.clone(),
                in_flight,
                seconds: waited.as_secs(),
            }),
        }
    }

    /// A failed write of partition `p`'s oldest batch: a refusal names its first source offset;
    /// anything else stops the run (the next start reads the destination log end).
    fn write_failed(&mut self, p: i32, e: WireError) -> Stop {
        let topic = self.config.destination_topic.clone();
        let front = &self.batch.as_ref().expect("the batch engine runs").lanes[&p].sent[0];
        if let WireError::Produce { error, .. } = &e
            && let Some(code) = refusal_code(*error)
            && let Some(why) =
                self.limits
                    .refusal_for(code, front.bytes as usize, Some(front.max_timestamp))
        {
            return Stop::DeliveryRefused {
                topic,
                partition: p,
                source_offset: front.first_src,
                why,
            };
        }
        Stop::WireDelivery {
            topic,
            partition: p,
            source: e,
        }
    }

    /// After a retriable failure of partition `p`'s oldest batch: waits for the answers of the
    /// batches after it (each either failed too or is in the broker's memory), pauses, and sends
    /// every unconfirmed batch again, unchanged and in order.
    fn resend(&mut self, p: i32, cause: &WireError) -> Result<(), Stop> {
        if self.batch_path().warn_retry() {
            tracing::warn!(partition = p, error = %cause, "write failed; sending the unconfirmed batches again");
        } else {
            tracing::debug!(partition = p, error = %cause, "write failed; sending the unconfirmed batches again");
        }
        let topic = self.config.destination_topic.clone();
        {
            let path = self.batch_path();
            let lane = path.lanes.get_mut(&p).expect("owned");
            let answers: Vec<Answer> = lane
                .sent
                .iter_mut()
                .filter_map(|s| s.answer.take())
                .collect();
            path.runtime.block_on(async {
                for a in answers {
                    let _ = a.await;
                }
            });
            path.destination.mark_stale();
        }
        std::thread::sleep(RETRY_BACKOFF);
        if let Some(l) = self.lease {
            l.check()?;
        }
        let path = self.batch_path();
        let lane = path.lanes.get_mut(&p).expect("owned");
        for sent in lane.sent.iter_mut() {
            sent.answer = Some(send(
                &path.runtime,
                &path.destination,
                &topic,
                p,
                sent.batch.clone(),
                path.produce,
            ));
        }
        Ok(())
    }

    /// Applies the broker's acknowledgement of a batch: it must have landed where its first
    /// record had to (above: another writer; below: the destination lost records).
    fn confirm_batch(&mut self, p: i32, sent: &Sent, produced: Produced) -> Result<(), Stop> {
        let topic = &self.config.destination_topic;
        let unit = self.units.get_mut(&p).expect("owned partition");
        if produced.base_offset < 0 {
            return Err(Stop::DeliveredWithoutOffset {
                topic: topic.clone(),
                partition: p,
                expected: sent.first_dst,
            });
        }
        let actual_last = produced.base_offset + (sent.last_dst - sent.first_dst);
        let mismatch = |expected: i64, actual: i64| {
            if actual < expected {
                Stop::LandedBelow {
                    topic: topic.clone(),
                    partition: p,
                    expected,
                    actual,
                }
            } else {
                Stop::OffsetMismatch {
                    topic: topic.clone(),
                    partition: p,
                    expected,
                    actual,
                }
            }
        };
        if produced.base_offset != sent.first_dst {
            return Err(mismatch(sent.first_dst, produced.base_offset));
        }
        unit.cursor
            .delivered(sent.last_dst, actual_last)
            .map_err(|m| mismatch(m.expected, m.actual))?;
        let records = (sent.last_dst - sent.first_dst + 1) as u64;
        unit.position_dirty = true;
        unit.records += records;
        unit.last_timestamp = Some(sent.max_timestamp)
            .filter(|&t| t >= 0)
            .or(unit.last_timestamp);
        let metrics = &self.handles.metrics;
        metrics.records.get_or_create(&unit.labels).inc_by(records);
        metrics.bytes.get_or_create(&unit.labels).inc_by(sent.bytes);
        Ok(())
    }

    /// Waits until the destination confirmed every batch in flight.
    pub(in crate::replicator) fn flush_batches(&mut self, timeout: Duration) -> Result<(), Stop> {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain_batches(true)?;
            let in_flight = self.batch_path().in_flight();
            if in_flight == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Stop::Unconfirmed {
                    count: in_flight as i32,
                    timeout,
                });
            }
        }
    }
}

/// Puts a batch on the wire; a failure to send becomes the answer.
fn send(
    runtime: &tokio::runtime::Runtime,
    destination: &Client,
    topic: &str,
    partition: i32,
    batch: Bytes,
    options: ProduceOptions,
) -> Answer {
    let sent = runtime.block_on(destination.send_produce(topic, partition, batch, &options));
    match sent {
        Ok(in_flight) => Box::pin(in_flight.wait()),
        Err(e) => Box::pin(std::future::ready(Err(e))),
    }
}
