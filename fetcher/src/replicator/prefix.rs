//! Prefix alignment: a destination that starts empty while the source log starts above 0 gets
//! placeholder records up to the source's log start, then DeleteRecords, so the destination log
//! starts where the source log starts and every later record lands at its source offset.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::{Offset, TopicPartitionList};

use super::delivery::{self, Pending};
use super::stop::Stop;
use super::{ADMIN_TIMEOUT, Fetcher};
use crate::cursor::Cursor;
use kmirror_state::kafka_record::{PLACEHOLDER_HEADER, PLACEHOLDER_KEY};
use kmirror_state::records::{FetcherStatus, PrefixAlignment};

impl Fetcher<'_> {
    /// Placeholders for destination offsets up to `target`, then DeleteRecords, so that the
    /// destination log starts where the source log starts and offsets stay identical.
    pub(super) fn align_prefix(&mut self, partition: i32, target: i64) -> Result<(), Stop> {
        let config = self.config;
        let topic = &config.destination_topic;
        let from = self.units[&partition].cursor.next_dst;
        tracing::info!(
            partition,
            target,
            from,
            "aligning an empty destination with a source log starting above 0"
        );
        let headers = OwnedHeaders::new().insert(Header {
            key: PLACEHOLDER_HEADER,
            value: Some(b"1".as_slice()),
        });
        loop {
            let unit = self
                .units
                .get_mut(&partition)
                .expect("unit inserted before alignment");
            if unit.cursor.next_dst >= target {
                break;
            }
            let expected = unit.cursor.accept_placeholder();
            // A keyed tombstone: a compacted destination refuses records without a key, and
            // removes tombstones itself where DeleteRecords is not allowed.
            let record = BaseRecord::<[u8], [u8], Box<Pending>>::with_opaque_to(
                topic,
                Box::new(Pending {
                    partition,
                    expected_dst: expected,
                    source_offset: -1,
                    bytes: 0,
                    timestamp: None,
                }),
            )
            .partition(partition)
            .key(PLACEHOLDER_KEY)
            .headers(headers.clone());
            let target = delivery::Target {
                topic,
                limits: &self.limits,
            };
            delivery::send(
                &self.producer,
                &mut self.units,
                self.handles,
                target,
                record,
            )?;
            self.producer.poll(Duration::ZERO);
            self.drain_deliveries()?;
        }
        self.flush_producer(Duration::from_secs(120))?;
        let delete_failed = |source| Stop::DeleteRecords {
            topic: topic.clone(),
            partition,
            offset: target,
            source,
        };
        let admin: AdminClient<DefaultClientContext> =
            self.destination_config
                .create()
                .map_err(|source| Stop::CreateClient {
                    client: "destination admin client",
                    source,
                })?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(target))
            .map_err(delete_failed)?;
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let deleted = futures::executor::block_on(admin.delete_records(&tpl, &options))
            .map_err(delete_failed)?;
        let answer = deleted
            .elements()
            .iter()
            .find(|e| e.partition() == partition)
            .map(|e| match e.error() {
                Ok(()) => None,
                Err(err) => Some(
                    err.rdkafka_error_code()
                        .unwrap_or(RDKafkaErrorCode::Unknown),
                ),
            });
        match placeholders_deleted(answer) {
            Deleted::Yes => {}
            Deleted::NotAllowed(code) => tracing::warn!(
                partition,
                target,
                ?code,
                "the destination refuses DeleteRecords (POLICY_VIOLATION: cleanup.policy without \
                 delete); the placeholders below offset {target} stay, as tombstones of key \
                 {PLACEHOLDER_HEADER}, until compaction removes them"
            ),
            Deleted::Failed(code) => {
                return Err(Stop::DeletePlaceholders {
                    topic: topic.clone(),
                    partition,
                    offset: target,
                    code,
                });
            }
        }
        let unit = self
            .units
            .get_mut(&partition)
            .expect("unit inserted before alignment");
        unit.prefix = Some(PrefixAlignment { target, done: true });
        let map = std::mem::take(&mut unit.cursor.map);
        unit.cursor = Cursor::resume(partition, map, target);
        self.write_position(&self.units[&partition], FetcherStatus::Running, None)?;
        self.flush_state()?;
        Ok(())
    }
}

/// What a DeleteRecords answer for the placeholders' partition means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deleted {
    /// Deleted: the destination log starts at the target.
    Yes,
    /// The topic does not allow deleting records (compact-only): the placeholders stay.
    NotAllowed(RDKafkaErrorCode),
    /// The partition's deletion failed (retried by the next start).
    Failed(RDKafkaErrorCode),
}

/// Reads the partition's result of a DeleteRecords call: `None` when it is missing from the
/// answer, `Some(None)` for success, `Some(Some(code))` for its error.
fn placeholders_deleted(answer: Option<Option<RDKafkaErrorCode>>) -> Deleted {
    match answer {
        Some(None) => Deleted::Yes,
        Some(Some(RDKafkaErrorCode::PolicyViolation)) => {
            Deleted::NotAllowed(RDKafkaErrorCode::PolicyViolation)
        }
        Some(Some(code)) => Deleted::Failed(code),
        None => Deleted::Failed(RDKafkaErrorCode::UnknownPartition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_records_answers() {
        use RDKafkaErrorCode as C;
        #[rustfmt::skip]
        let table = [
            // the partition's answer → meaning
            (Some(None), Deleted::Yes),
            (Some(Some(C::PolicyViolation)), Deleted::NotAllowed(C::PolicyViolation)),
            (Some(Some(C::NotLeaderForPartition)), Deleted::Failed(C::NotLeaderForPartition)),
            (Some(Some(C::TopicAuthorizationFailed)), Deleted::Failed(C::TopicAuthorizationFailed)),
            (None, Deleted::Failed(C::UnknownPartition)),
        ];
        for (answer, expect) in table {
            assert_eq!(placeholders_deleted(answer), expect, "{answer:?}");
        }
    }
}
