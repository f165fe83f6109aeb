//! Delivery: the producer context that collects delivery reports, handing records to the
//! producer under back-pressure, and checking every delivered offset against the one the record
//! had to get. The producer is gapless: the first failed delivery stops the run (the caller
//! purges what is still queued or in flight), and a failure that is the destination refusing
//! the record is reported as such, with its source offset.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, PurgeConfig};

use super::limits::DestinationLimits;
use super::stop::Stop;
use super::watchdog::{Watch, Watchdog};
use super::{Fetcher, Handles, Unit};

/// One produced record awaiting its delivery report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pending {
    /// Destination partition (= source partition).
    pub partition: i32,
    /// The offset the record must land at.
    pub expected_dst: i64,
    /// Its source offset (-1 for a placeholder).
    pub source_offset: i64,
    /// Bytes of key, value and headers (0 for a placeholder).
    pub bytes: usize,
    /// The record's timestamp (none for a placeholder).
    pub timestamp: Option<i64>,
}

/// A delivery report: the offset the broker assigned, or why the record was not written.
#[derive(Debug)]
pub(super) struct Delivery {
    pub pending: Pending,
    pub result: Result<i64, KafkaError>,
}

/// Collects delivery reports; the loop drains them and the watchdog watches their pace.
pub(super) struct DeliveryContext {
    deliveries: Mutex<Vec<Delivery>>,
    watchdog: Mutex<Watchdog>,
}

impl DeliveryContext {
    /// A context whose watchdog calls `stall_after` without a delivery report a stall.
    pub(super) fn new(stall_after: Duration) -> DeliveryContext {
        DeliveryContext {
            deliveries: Mutex::default(),
            watchdog: Mutex::new(Watchdog::new(stall_after)),
        }
    }
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, pending: Box<Pending>) {
        let result = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.clone()),
        };
        self.deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Delivery {
                pending: *pending,
                result,
            });
    }
}

/// What a delivery did to its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Confirmed {
    /// A mirrored record (counted in the metrics).
    Record,
    /// A prefix-alignment placeholder.
    Placeholder,
}

/// Why a record was not delivered: the destination refusing it (named with its source offset),
/// or another delivery failure.
pub(super) fn delivery_failure(
    destination_topic: &str,
    limits: &DestinationLimits,
    pending: &Pending,
    source: KafkaError,
) -> Stop {
    if pending.source_offset >= 0
        && let Some(code) = source.rdkafka_error_code()
        && let Some(why) = limits.refusal_for(code, pending.bytes, pending.timestamp)
    {
        return Stop::DeliveryRefused {
            topic: destination_topic.to_string(),
            partition: pending.partition,
            source_offset: pending.source_offset,
            why,
        };
    }
    Stop::Delivery {
        topic: destination_topic.to_string(),
        partition: pending.partition,
        source,
    }
}

/// A failure that only follows from an earlier one (the producer failed, or purged what it
/// held): the earlier one is the cause to report.
fn is_consequence(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fatal
                | RDKafkaErrorCode::GaplessGuarantee
                | RDKafkaErrorCode::PurgeQueue
                | RDKafkaErrorCode::PurgeInflight
                | RDKafkaErrorCode::OutOfOrderSequenceNumber
        )
    )
}

impl Unit {
    /// Applies one delivery report: a failed delivery, a delivery without an offset or an offset
    /// other than the expected one stops the partition (a record landing below it means the
    /// destination lost records; above it, that another client wrote); otherwise the cursor and
    /// the counters advance.
    pub(super) fn confirm(
        &mut self,
        destination_topic: &str,
        limits: &DestinationLimits,
        delivery: Delivery,
    ) -> Result<Confirmed, Stop> {
        let p = delivery.pending;
        let actual = match delivery.result {
            Ok(offset) => offset,
            Err(source) => return Err(delivery_failure(destination_topic, limits, &p, source)),
        };
        if actual < 0 {
            return Err(Stop::DeliveredWithoutOffset {
                topic: destination_topic.to_string(),
                partition: p.partition,
                expected: p.expected_dst,
            });
        }
        self.cursor.delivered(p.expected_dst, actual).map_err(|m| {
            if m.actual < m.expected {
                Stop::LandedBelow {
                    topic: destination_topic.to_string(),
                    partition: p.partition,
                    expected: m.expected,
                    actual: m.actual,
                }
            } else {
                Stop::OffsetMismatch {
                    topic: destination_topic.to_string(),
                    partition: p.partition,
                    expected: m.expected,
                    actual: m.actual,
                }
            }
        })?;
        self.position_dirty = true;
        if p.timestamp.is_some() || p.bytes > 0 {
            self.records += 1;
            self.last_timestamp = p.timestamp.or(self.last_timestamp);
            Ok(Confirmed::Record)
        } else {
            Ok(Confirmed::Placeholder)
        }
    }
}

/// The destination, as delivery reports are checked against it.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    /// The destination topic.
    pub topic: &'a str,
    /// What it accepts.
    pub limits: &'a DestinationLimits,
}

/// Applies the delivery reports collected so far. The first failure stops; a failure that only
/// follows from another one (the producer failed, purged) gives way to its cause among the
/// reports collected.
pub(super) fn drain(
    producer: &BaseProducer<DeliveryContext>,
    units: &mut BTreeMap<i32, Unit>,
    handles: &Handles,
    target: Target<'_>,
) -> Result<(), Stop> {
    let deliveries = std::mem::take(
        &mut *producer
            .context()
            .deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    let watch = producer
        .context()
        .watchdog
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .observe(Instant::now(), producer.in_flight_count(), deliveries.len());
    match watch {
        Watch::Fine => {}
        Watch::Warn { in_flight, waited } => tracing::warn!(
            in_flight,
            "{in_flight} records in flight, none confirmed by the destination for {}s",
            waited.as_secs()
        ),
        Watch::Stalled { in_flight, waited } => {
            return Err(Stop::Stalled {
                topic: target.topic.to_string(),
                in_flight,
                seconds: waited.as_secs(),
            });
        }
    }
    let metrics = &handles.metrics;
    let mut consequence: Option<Stop> = None;
    for delivery in deliveries {
        let partition = delivery.pending.partition;
        let bytes = delivery.pending.bytes;
        let unit = units.get_mut(&partition).ok_or(Stop::UnownedPartition {
            what: "delivery for",
            partition,
        })?;
        if let Err(e) = &delivery.result
            && is_consequence(e)
        {
            if consequence.is_none() {
                let cause = producer.client().fatal_error();
                let pending = delivery.pending.clone();
                let source = match cause {
                    Some((code, _)) => KafkaError::MessageProduction(code),
                    None => delivery.result.unwrap_err(),
                };
                consequence = Some(delivery_failure(
                    target.topic,
                    target.limits,
                    &pending,
                    source,
                ));
            }
            continue;
        }
        if unit.confirm(target.topic, target.limits, delivery)? == Confirmed::Record {
            metrics.records.get_or_create(&unit.labels).inc();
            metrics
                .bytes
                .get_or_create(&unit.labels)
                .inc_by(bytes as u64);
        }
    }
    match consequence {
        Some(stop) => Err(stop),
        None => Ok(()),
    }
}

/// Drops what the producer still queues or has in flight (after the first failed delivery, or
/// a finding that forbids writing on) and collects the reports of what it drops. Records in
/// flight may still land; the next start resumes from the destination log end, as always.
pub(super) fn purge(producer: &BaseProducer<DeliveryContext>, units: &mut BTreeMap<i32, Unit>) {
    producer.purge(PurgeConfig::default().queue().inflight());
    let deadline = Instant::now() + Duration::from_secs(5);
    while producer.in_flight_count() > 0 && Instant::now() < deadline {
        producer.poll(Duration::from_millis(50));
    }
    let deliveries = std::mem::take(
        &mut *producer
            .context()
            .deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    for d in deliveries {
        if let (Ok(actual), Some(unit)) = (d.result, units.get_mut(&d.pending.partition)) {
            let _ = unit.cursor.delivered(d.pending.expected_dst, actual);
        }
    }
    for unit in units.values_mut() {
        unit.cursor.forget_inflight();
    }
}

/// Hands a record to the producer; while its queue is full, serves delivery reports and tries
/// again.
pub(super) fn send<K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
    producer: &BaseProducer<DeliveryContext>,
    units: &mut BTreeMap<i32, Unit>,
    handles: &Handles,
    target: Target<'_>,
    mut record: BaseRecord<'_, K, P, Box<Pending>>,
) -> Result<(), Stop> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(Duration::from_millis(10));
                drain(producer, units, handles, target)?;
            }
            Err((source, r)) => {
                // The producer's own refusal (a record over its message.max.bytes) names the
                // record like the destination's.
                return Err(
                    match delivery_failure(r.topic, target.limits, &r.delivery_opaque, source) {
                        Stop::Delivery {
                            topic,
                            partition,
                            source,
                        } => Stop::Produce {
                            topic,
                            partition,
                            source,
                        },
                        refused => refused,
                    },
                );
            }
        }
    }
}

impl Fetcher<'_> {
    /// Drops what the engine's producer still holds (see [`purge`]).
    pub(super) fn purge_producer(&mut self) {
        match self.batch.as_mut() {
            Some(path) => path.purge(&mut self.units),
            None => purge(&self.producer, &mut self.units),
        }
    }

    pub(super) fn drain_deliveries(&mut self) -> Result<(), Stop> {
        if self.batch.is_some() {
            return self.drain_batches(false);
        }
        drain(
            &self.producer,
            &mut self.units,
            self.handles,
            Target {
                topic: &self.config.destination_topic,
                limits: &self.limits,
            },
        )
    }

    /// Waits until the destination confirmed everything produced, applying each report.
    pub(super) fn flush_producer(&mut self, timeout: Duration) -> Result<(), Stop> {
        if self.batch.is_some() {
            return self.flush_batches(timeout);
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.producer.poll(Duration::from_millis(50));
            self.drain_deliveries()?;
            if self.producer.in_flight_count() == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Stop::Unconfirmed {
                    count: self.producer.in_flight_count(),
                    timeout,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::Cursor;
    use crate::metrics::PartitionLabels;
    use kmirror_state::offset_map::OffsetMap;
    use kmirror_state::records::StopReason;

    fn unit(dst_end: i64) -> Unit {
        let labels = PartitionLabels::new("ns/m", "orders", 0);
        Unit::new(
            Cursor::resume(0, OffsetMap::identity(), dst_end),
            labels,
            None,
            0,
            0,
        )
    }

    fn delivery(expected: i64, result: Result<i64, KafkaError>, bytes: usize) -> Delivery {
        Delivery {
            pending: Pending {
                partition: 0,
                expected_dst: expected,
                source_offset: expected,
                bytes,
                timestamp: (bytes > 0).then_some(1_700_000_000_000 + expected),
            },
            result,
        }
    }

    /// A record without key, value or headers: it still counts (it has a timestamp).
    fn empty_record(expected: i64, result: Result<i64, KafkaError>) -> Delivery {
        let mut d = delivery(expected, result, 0);
        d.pending.timestamp = Some(1_700_000_000_000);
        d
    }

    fn limits() -> DestinationLimits {
        DestinationLimits {
            max_message_bytes: Some(1_048_588),
            ..Default::default()
        }
    }

    #[test]
    fn delivery_reports() {
        let failed = |code| Err(KafkaError::MessageProduction(code));
        use RDKafkaErrorCode as C;
        #[rustfmt::skip]
        let table: Vec<(&str, Delivery, Result<Confirmed, StopReason>, i64)> = vec![
            // name, report for a record produced at destination 10 → outcome, confirmed log end
            ("landed where expected", delivery(10, Ok(10), 5), Ok(Confirmed::Record), 11),
            ("a placeholder landed", delivery(10, Ok(10), 0), Ok(Confirmed::Placeholder), 11),
            ("an empty record landed", empty_record(10, Ok(10)), Ok(Confirmed::Record), 11),
            ("landed one too far: another writer", delivery(10, Ok(11), 5), Err(StopReason::ForeignWrite), 10),
            ("landed too early: the destination lost records", delivery(10, Ok(9), 5), Err(StopReason::DestinationTruncated), 10),
            // librdkafka reports -1001 for a delivery whose offset it did not learn (e.g. a
            // retried batch the broker already had): written, but not where is unproven.
            ("delivered without an offset: unproven, retried", delivery(10, Ok(-1001), 5), Err(StopReason::Error), 10),
            ("a placeholder delivered without an offset", delivery(10, Ok(-1), 0), Err(StopReason::Error), 10),
            ("too large for the destination", delivery(10, failed(C::MessageSizeTooLarge), 5), Err(StopReason::RecordRefused), 10),
            ("a timestamp the destination refuses", delivery(10, failed(C::InvalidTimestamp), 5), Err(StopReason::RecordRefused), 10),
            ("a record the destination cannot validate", delivery(10, failed(C::InvalidRecord), 5), Err(StopReason::RecordRefused), 10),
            ("a placeholder refused: not a source record", delivery(10, failed(C::InvalidRecord), 0), Err(StopReason::Error), 10),
            ("timed out", delivery(10, failed(C::MessageTimedOut), 5), Err(StopReason::Error), 10),
        ];
        for (name, report, expect, confirmed) in table {
            let mut u = unit(10);
            assert_eq!(
                u.cursor.accept(10, 0).unwrap(),
                crate::cursor::Accept::Produce {
                    expected_dst: 10,
                    gap: false
                }
            );
            u.position_dirty = false;
            let mut report = report;
            if report.pending.bytes == 0 && report.pending.timestamp.is_none() {
                report.pending.source_offset = -1;
            }
            let result = u.confirm("orders", &limits(), report);
            assert_eq!(
                result.as_ref().map_err(|s| s.reason()).copied(),
                expect,
                "{name}"
            );
            assert_eq!(u.cursor.confirmed_dst, confirmed, "{name}");
            assert_eq!(u.position_dirty, expect.is_ok(), "{name}");
            assert_eq!(
                u.records,
                u64::from(expect == Ok(Confirmed::Record)),
                "{name}"
            );
        }
    }

    #[test]
    fn failures_name_the_partition_and_offsets() {
        let mut u = unit(10);
        u.cursor.accept(10, 0).unwrap();
        let stop = u
            .confirm("orders", &limits(), delivery(10, Ok(12), 5))
            .unwrap_err();
        let message = stop.to_string();
        assert!(message.contains("orders[0]"), "{message}");
        assert!(
            message.contains("expected at offset 10 landed at 12"),
            "{message}"
        );
        let stop = u
            .confirm(
                "orders",
                &limits(),
                delivery(
                    10,
                    Err(KafkaError::MessageProduction(
                        RDKafkaErrorCode::MessageSizeTooLarge,
                    )),
                    5,
                ),
            )
            .unwrap_err();
        let message = stop.to_string();
        assert!(
            matches!(
                stop,
                Stop::DeliveryRefused {
                    partition: 0,
                    source_offset: 10,
                    ..
                }
            ),
            "{stop:?}"
        );
        assert!(message.contains("max.message.bytes 1048588"), "{message}");
        assert!(!message.contains("another client"), "{message}");
    }

    #[test]
    fn newest_timestamp_is_kept_for_the_lag() {
        let mut u = unit(0);
        for src in 0..3 {
            u.cursor.accept(src, 0).unwrap();
        }
        u.confirm("orders", &limits(), delivery(0, Ok(0), 5))
            .unwrap();
        u.confirm("orders", &limits(), delivery(1, Ok(1), 5))
            .unwrap();
        assert_eq!(u.last_timestamp, Some(1_700_000_000_001));
        assert_eq!(u.records, 2);
        assert_eq!(u.cursor.last_mirrored_src, 1);
    }
}
