//! Delivery: the producer context that collects delivery reports, handing records to the
//! producer under back-pressure, and checking every delivered offset against the one the record
//! had to get.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

use super::stop::Stop;
use super::{Fetcher, Handles, Unit};

/// One produced record awaiting its delivery report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pending {
    /// Destination partition (= source partition).
    pub partition: i32,
    /// The offset the record must land at.
    pub expected_dst: i64,
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

/// Collects delivery reports; the loop drains them.
#[derive(Default)]
pub(super) struct DeliveryContext {
    deliveries: Mutex<Vec<Delivery>>,
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

impl Unit {
    /// Applies one delivery report: a failed delivery or an offset other than the expected one
    /// stops the partition; otherwise the cursor and the counters advance.
    pub(super) fn confirm(
        &mut self,
        destination_topic: &str,
        delivery: Delivery,
    ) -> Result<Confirmed, Stop> {
        let p = delivery.pending;
        let actual = delivery.result.map_err(|source| Stop::Delivery {
            topic: destination_topic.to_string(),
            partition: p.partition,
            source,
        })?;
        self.cursor
            .delivered(p.expected_dst, actual)
            .map_err(|m| Stop::OffsetMismatch {
                topic: destination_topic.to_string(),
                partition: p.partition,
                expected: m.expected,
                actual: m.actual,
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

/// Applies the delivery reports collected so far.
pub(super) fn drain(
    producer: &BaseProducer<DeliveryContext>,
    units: &mut BTreeMap<i32, Unit>,
    handles: &Handles,
    destination_topic: &str,
) -> Result<(), Stop> {
    let deliveries = std::mem::take(
        &mut *producer
            .context()
            .deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    let metrics = &handles.metrics;
    for delivery in deliveries {
        let partition = delivery.pending.partition;
        let bytes = delivery.pending.bytes;
        let unit = units.get_mut(&partition).ok_or(Stop::UnownedPartition {
            what: "delivery for",
            partition,
        })?;
        if unit.confirm(destination_topic, delivery)? == Confirmed::Record {
            metrics.records.get_or_create(&unit.labels).inc();
            metrics
                .bytes
                .get_or_create(&unit.labels)
                .inc_by(bytes as u64);
        }
    }
    Ok(())
}

/// Hands a record to the producer; while its queue is full, serves delivery reports and tries
/// again.
pub(super) fn send<K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
    producer: &BaseProducer<DeliveryContext>,
    units: &mut BTreeMap<i32, Unit>,
    handles: &Handles,
    mut record: BaseRecord<'_, K, P, Box<Pending>>,
) -> Result<(), Stop> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(Duration::from_millis(10));
                drain(producer, units, handles, record.topic)?;
            }
            Err((source, r)) => {
                return Err(Stop::Produce {
                    topic: r.topic.to_string(),
                    partition: r.partition.unwrap_or(-1),
                    source,
                });
            }
        }
    }
}

impl Fetcher<'_> {
    pub(super) fn drain_deliveries(&mut self) -> Result<(), Stop> {
        drain(
            &self.producer,
            &mut self.units,
            self.handles,
            &self.config.destination_topic,
        )
    }

    /// Waits until the destination confirmed everything produced, applying each report.
    pub(super) fn flush_producer(&mut self, timeout: Duration) -> Result<(), Stop> {
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
        let labels = PartitionLabels {
            mirror: "ns/m".into(),
            topic: "orders".into(),
            partition: 0,
        };
        Unit::new(
            Cursor::resume(0, OffsetMap::identity(), dst_end),
            labels,
            None,
            0,
        )
    }

    fn delivery(expected: i64, result: Result<i64, KafkaError>, bytes: usize) -> Delivery {
        Delivery {
            pending: Pending {
                partition: 0,
                expected_dst: expected,
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

    #[test]
    fn delivery_reports() {
        let refused = || KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        #[rustfmt::skip]
        let table: Vec<(&str, Delivery, Result<Confirmed, StopReason>, i64)> = vec![
            // name, report for a record produced at destination 10 → outcome, confirmed log end
            ("landed where expected", delivery(10, Ok(10), 5), Ok(Confirmed::Record), 11),
            ("a placeholder landed", delivery(10, Ok(10), 0), Ok(Confirmed::Placeholder), 11),
            ("an empty record landed", empty_record(10, Ok(10)), Ok(Confirmed::Record), 11),
            ("landed one too far", delivery(10, Ok(11), 5), Err(StopReason::ForeignWrite), 10),
            ("landed too early", delivery(10, Ok(9), 5), Err(StopReason::ForeignWrite), 10),
            ("refused by the destination", delivery(10, Err(refused()), 5), Err(StopReason::Error), 10),
        ];
        for (name, report, expect, confirmed) in table {
            let mut u = unit(10);
            assert_eq!(
                u.cursor.accept(10),
                crate::cursor::Accept::Produce {
                    expected_dst: 10,
                    gap: false
                }
            );
            u.position_dirty = false;
            let result = u.confirm("orders", report);
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
        u.cursor.accept(10);
        let stop = u.confirm("orders", delivery(10, Ok(12), 5)).unwrap_err();
        let message = stop.to_string();
        assert!(message.contains("orders[0]"), "{message}");
        assert!(
            message.contains("expected at offset 10 landed at 12"),
            "{message}"
        );
        let stop = u
            .confirm(
                "orders",
                delivery(
                    10,
                    Err(KafkaError::MessageProduction(
                        RDKafkaErrorCode::MessageSizeTooLarge,
                    )),
                    5,
                ),
            )
            .unwrap_err();
        assert!(
            matches!(stop, Stop::Delivery { partition: 0, .. }),
            "{stop:?}"
        );
    }

    #[test]
    fn newest_timestamp_is_kept_for_the_lag() {
        let mut u = unit(0);
        for src in 0..3 {
            u.cursor.accept(src);
        }
        u.confirm("orders", delivery(0, Ok(0), 5)).unwrap();
        u.confirm("orders", delivery(1, Ok(1), 5)).unwrap();
        assert_eq!(u.last_timestamp, Some(1_700_000_000_001));
        assert_eq!(u.records, 2);
        assert_eq!(u.cursor.last_mirrored_src, 1);
    }
}
