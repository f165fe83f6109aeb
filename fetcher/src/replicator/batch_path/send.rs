//! The batch engine's writes. A partition's batches are queued in order and go on the wire as
//! its [`Window`](super::window::Window) allows, all on the connection the earlier ones took: a
//! batch whose route moved (a reconnect, a new leader) waits until every earlier one is
//! answered. The broker's answers are applied in order — each base offset checked against the
//! one the batch had to get. A retriable failure stops the partition's sends: every other answer
//! still out is awaited and checked (one that landed elsewhere than it had to stops the
//! partition), then every unconfirmed batch is sent again unchanged, one at a time, until all of
//! them are confirmed. A refusal is named with the batch's first source offset; the stall
//! watchdog turns a destination that confirms nothing into a stop.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use kmirror_wire::{KafkaCode, Produced, Rewrite, WireError, batch};
use rdkafka::error::RDKafkaErrorCode;

use super::{MAX_IN_FLIGHT, Outgoing, RETRY_BACKOFF};
use crate::replicator::Fetcher;
use crate::replicator::stop::Stop;
use crate::replicator::watchdog::Watch;
use kmirror_state::records::now_ms;

pub(super) type Answer = Pin<Box<dyn Future<Output = Result<Produced, WireError>> + Send>>;

/// Where a batch is.
enum Wire {
    /// Not on the wire: new, or to be sent again.
    Queued,
    /// On connection `conn` (0: the send itself failed), its answer to come.
    Out { conn: u64, answer: Answer },
}

/// A batch not yet confirmed.
pub(super) struct Sent {
    /// The bytes as produced (sent again unchanged after a retriable failure).
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
    wire: Wire,
}

impl Sent {
    fn conn(&self) -> Option<u64> {
        match &self.wire {
            Wire::Out { conn, .. } if *conn != 0 => Some(*conn),
            _ => None,
        }
    }

    fn is_out(&self) -> bool {
        matches!(self.wire, Wire::Out { .. })
    }
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

/// Whether the failure of a partition's oldest unconfirmed batch leaves the batch to be sent
/// again (it may or may not have landed; resent unchanged, the broker answers a batch it has
/// with its offset).
fn retriable(e: &WireError) -> bool {
    e.is_retriable()
}

impl Fetcher<'_> {
    /// Queues one batch of partition `p` (waiting for room first) and puts what the window
    /// allows on the wire.
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
        let source_topic = self.config.source_topic.clone();
        let path = self.batch_path();
        let lane = path.lanes.get_mut(&p).expect("owned partition");
        let count = (out.last_dst - out.first_dst + 1) as i32;
        let rewrite = Rewrite {
            producer_id: lane.producer.id,
            producer_epoch: lane.producer.epoch,
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
        lane.sent.push_back(Sent {
            batch: bytes,
            first_dst: out.first_dst,
            last_dst: out.last_dst,
            first_src: out.first_src,
            bytes: out.bytes,
            max_timestamp: out.max_timestamp,
            wire: Wire::Queued,
        });
        self.pump(p)
    }

    /// Puts partition `p`'s queued batches on the wire while its window has room and their route
    /// is the connection the batches out took (after the lease check, each).
    fn pump(&mut self, p: i32) -> Result<(), Stop> {
        let topic = self.config.destination_topic.clone();
        loop {
            let path = self.batch.as_mut().expect("the batch engine runs");
            let lane = path.lanes.get_mut(&p).expect("owned partition");
            let out = lane.sent.iter().take_while(|s| s.is_out()).count();
            if out >= lane.sent.len() || out >= lane.window.limit() {
                return Ok(());
            }
            // A send that failed by itself (conn 0) is dealt with by the next drain first.
            if lane.sent.iter().take(out).any(|s| s.conn().is_none()) {
                return Ok(());
            }
            let pin = lane.sent.front().and_then(Sent::conn);
            if let Some(l) = self.lease {
                l.check()?;
            }
            let path = self.batch.as_mut().expect("the batch engine runs");
            let lane = path.lanes.get_mut(&p).expect("owned partition");
            let next = &mut lane.sent[out];
            let sent = path.runtime.block_on(path.destination.send_produce_pinned(
                &topic,
                p,
                next.batch.clone(),
                &path.produce,
                pin,
            ));
            next.wire = match sent {
                Ok(in_flight) => Wire::Out {
                    conn: in_flight.connection(),
                    answer: Box::pin(in_flight.wait()),
                },
                // The route moved: this batch waits until the batches on the old one are
                // answered (and, if they failed, sent again first).
                Err(WireError::RouteChanged { .. }) => return Ok(()),
                Err(WireError::Fenced { .. }) => {
                    if let Some(l) = self.lease {
                        l.check()?;
                    }
                    return Err(Stop::WireDelivery {
                        topic,
                        partition: p,
                        source: WireError::Fenced {
                            broker: "(destination)".into(),
                            api: "Produce",
                        },
                    });
                }
                // Nothing went out; the failure is this batch's answer, and nothing after it
                // goes out before the next drain has dealt with it.
                Err(e) => {
                    next.wire = Wire::Out {
                        conn: 0,
                        answer: Box::pin(std::future::ready(Err(e))),
                    };
                    return Ok(());
                }
            };
        }
    }

    /// Applies the answers that arrived — with `block`, waits for at least the oldest one (up to
    /// a second) — and puts on the wire what the windows then allow.
    pub(in crate::replicator) fn drain_batches(&mut self, block: bool) -> Result<(), Stop> {
        let partitions: Vec<i32> = self.batch_path().lanes.keys().copied().collect();
        let mut confirmed = 0usize;
        let mut waited = false;
        for p in partitions {
            loop {
                let path = self.batch.as_mut().expect("the batch engine runs");
                let lane = path.lanes.get_mut(&p).expect("owned");
                let Some(Sent {
                    wire: Wire::Out { answer, .. },
                    ..
                }) = lane.sent.front_mut()
                else {
                    break;
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
                        lane.window.confirmed(sent.max_timestamp, now_ms());
                        self.confirm_batch(p, &sent, produced)?;
                        confirmed += 1;
                    }
                    Err(e) if retriable(&e) => self.recover(p, &e)?,
                    Err(e) => return Err(self.write_failed(p, e)),
                }
            }
            self.pump(p)?;
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

    /// After a retriable failure of partition `p`'s oldest batch: sends nothing more until every
    /// other answer still out is in — each checked: one that landed must have landed where it
    /// had to —, then queues every unconfirmed batch to be sent again, unchanged, one at a time.
    fn recover(&mut self, p: i32, cause: &WireError) -> Result<(), Stop> {
        if self.batch_path().warn_retry() {
            tracing::warn!(partition = p, error = %cause, "write failed; sending the unconfirmed batches again, one at a time");
        } else {
            tracing::debug!(partition = p, error = %cause, "write failed; sending the unconfirmed batches again, one at a time");
        }
        let topic = self.config.destination_topic.clone();
        let landed = {
            let path = self.batch_path();
            let lane = path.lanes.get_mut(&p).expect("owned");
            let mut answers = Vec::new();
            for (i, s) in lane.sent.iter_mut().enumerate() {
                if let Wire::Out { answer, .. } = std::mem::replace(&mut s.wire, Wire::Queued)
                    && i > 0
                {
                    answers.push((s.first_dst, s.first_src, answer));
                }
            }
            let unconfirmed = lane.sent.len();
            lane.window.failed(unconfirmed);
            let landed = path.runtime.block_on(async {
                let mut landed = Vec::new();
                for (expected, first_src, answer) in answers {
                    if let Ok(produced) = answer.await {
                        landed.push((expected, first_src, produced.base_offset));
                    }
                }
                landed
            });
            path.destination.mark_stale();
            landed
        };
        // A batch after the failed one that was appended must be where it had to be; anywhere
        // else, it overtook the failed one: stop, nothing more is written.
        if let Some(&(expected, first_src, actual)) = landed
            .iter()
            .find(|(expected, _, actual)| expected != actual)
        {
            tracing::error!(
                partition = p,
                first_src,
                expected,
                actual,
                "a batch landed at another offset than it had to after an earlier one failed"
            );
            return Err(if actual < expected {
                Stop::LandedBelow {
                    topic,
                    partition: p,
                    expected,
                    actual,
                }
            } else {
                Stop::OffsetMismatch {
                    topic,
                    partition: p,
                    expected,
                    actual,
                }
            });
        }
        std::thread::sleep(RETRY_BACKOFF);
        if let Some(l) = self.lease {
            l.check()?;
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

    /// Waits until the destination confirmed every batch queued or in flight.
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
            // Batches held back (a route that moved, a failed send) go out with the next drain.
            if !self
                .batch_path()
                .lanes
                .values()
                .any(|l| l.sent.iter().any(Sent::is_out))
            {
                std::thread::sleep(RETRY_BACKOFF);
            }
        }
    }
}
