//! Start-up: create the clients, check the source identity, and prepare every owned partition —
//! settle on the destination log end, read the source watermarks, decide the start
//! ([`start_plan`](super::start_plan)), record a first start, check the last copied record, skip
//! or refuse what retention deleted, align the prefix — then assign the consumer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::{Offset, TopicPartitionList};

use super::clients::{cluster_config, producer_config, source_consumer_config};
use super::delivery::{self, DeliveryContext, Pending};
use super::start_plan::{
    LastCopy, Recorded, Start, StartFacts, Then, check_recorded_identity, decide_start,
};
use super::stop::{Side, Stop};
use super::{ADMIN_TIMEOUT, Fetcher, Handles, Unit};
use crate::config::FetcherConfig;
use crate::cursor::Cursor;
use crate::throttle::Throttle;
use kmirror_state::kafka_admin::describe_topics;
use kmirror_state::kafka_record::{PLACEHOLDER_HEADER, read_record_at};
use kmirror_state::records::{FetcherStatus, PartitionRecords, PrefixAlignment};
use kmirror_state::store::{self, StateWriter};

/// Times the destination log end is read while it still moves before giving up.
const SETTLE_ATTEMPTS: usize = 30;

impl<'a> Fetcher<'a> {
    /// Creates the clients, prepares every owned partition and assigns the consumer.
    pub(super) fn start(
        config: &'a FetcherConfig,
        handles: &'a Handles,
    ) -> Result<Fetcher<'a>, Stop> {
        let source_config = source_consumer_config(config)?;
        let destination_config = cluster_config(config, Side::Destination)?;
        let consumer: BaseConsumer =
            source_config
                .create()
                .map_err(|source| Stop::CreateClient {
                    client: "source consumer",
                    source,
                })?;
        let producer: BaseProducer<DeliveryContext> = producer_config(config)?
            .create_with_context(DeliveryContext::default())
            .map_err(|source| Stop::CreateClient {
                client: "destination producer",
                source,
            })?;
        let source_admin: AdminClient<DefaultClientContext> = cluster_config(config, Side::Source)?
            .create()
            .map_err(|source| Stop::CreateClient {
                client: "source admin client",
                source,
            })?;
        let state =
            StateWriter::new(&destination_config, &config.state_topic).map_err(Stop::WriteState)?;
        let source_cluster_id = consumer
            .client()
            .fetch_cluster_id(ADMIN_TIMEOUT)
            .ok_or(Stop::FetchSourceClusterId)?;
        let mut fetcher = Fetcher {
            config,
            handles,
            source_config,
            destination_config,
            consumer,
            producer,
            source_admin,
            state,
            source_cluster_id,
            source_topic_id: None,
            units: BTreeMap::new(),
            throttle: config
                .throttle_bytes_per_second
                .map(|r| Throttle::new(r, Instant::now())),
        };
        fetcher.source_topic_id = fetcher.describe_source()?;
        let records = store::load(
            &fetcher.destination_config,
            &config.state_topic,
            |k| {
                k.mirror == config.mirror
                    && k.topic == config.source_topic
                    && config.partitions.contains(&k.partition)
            },
            Duration::from_secs(60),
        )
        .map_err(Stop::LoadState)?;
        for &partition in &config.partitions {
            let recorded = records
                .get(&(
                    config.mirror.clone(),
                    config.source_topic.clone(),
                    partition,
                ))
                .cloned()
                .unwrap_or_default();
            fetcher.prepare_partition(partition, &recorded)?;
        }
        let assign = |source| Stop::AssignSource {
            topic: config.source_topic.clone(),
            source,
        };
        let mut tpl = TopicPartitionList::new();
        for (p, unit) in &fetcher.units {
            tpl.add_partition_offset(
                &config.source_topic,
                *p,
                Offset::Offset(unit.cursor.next_src),
            )
            .map_err(assign)?;
        }
        fetcher.consumer.assign(&tpl).map_err(assign)?;
        for unit in fetcher.units.values_mut() {
            unit.position_dirty = true;
            handles
                .metrics
                .set_state(&unit.labels, PartitionState::Mirroring);
        }
        fetcher.persist_positions(FetcherStatus::Running, None)?;
        handles.health.set_ready(true);
        handles.health.beat();
        tracing::info!(
            mirror = %config.mirror,
            topic = %config.source_topic,
            partitions = ?config.partitions,
            starts = ?fetcher.units.iter().map(|(p, u)| (*p, u.cursor.next_src)).collect::<Vec<_>>(),
            "mirroring"
        );
        Ok(fetcher)
    }

    /// Describes the source topic: it must exist with every owned partition. Returns its topic
    /// ID (checked against the recorded one by the caller).
    pub(super) fn describe_source(&self) -> Result<Option<String>, Stop> {
        let topic = &self.config.source_topic;
        let description = describe_topics(self.source_admin.inner(), &[topic], ADMIN_TIMEOUT)
            .map_err(|source| Stop::DescribeSourceTopic {
                topic: topic.clone(),
                source,
            })?
            .pop()
            .flatten()
            .ok_or_else(|| Stop::SourceTopicDeleted {
                topic: topic.clone(),
            })?;
        if let Some(&partition) = self
            .config
            .partitions
            .iter()
            .find(|&&p| p < 0 || p as usize >= description.partitions)
        {
            return Err(Stop::SourcePartitionMissing {
                topic: topic.clone(),
                partitions: description.partitions,
                partition,
            });
        }
        Ok(description.topic_id)
    }

    /// The source partition's (log start, high watermark).
    pub(super) fn source_watermarks(
        &self,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), Stop> {
        let topic = &self.config.source_topic;
        self.consumer
            .fetch_watermarks(topic, partition, timeout)
            .map_err(|source| Stop::FetchWatermarks {
                side: Side::Source,
                topic: topic.clone(),
                partition,
                source,
            })
    }

    /// Destination watermarks once the log end has stopped moving.
    fn settled_destination_watermarks(&self, partition: i32) -> Result<(i64, i64), Stop> {
        let mut last = self.destination_watermarks(partition)?;
        for _ in 0..SETTLE_ATTEMPTS {
            std::thread::sleep(self.config.startup_settle);
            let now = self.destination_watermarks(partition)?;
            if now.1 == last.1 {
                return Ok(now);
            }
            tracing::warn!(
                partition,
                from = last.1,
                to = now.1,
                "destination log end still moving; waiting"
            );
            last = now;
        }
        Err(Stop::DestinationLogEndMoving {
            topic: self.config.destination_topic.clone(),
            partition,
        })
    }

    fn destination_watermarks(&self, partition: i32) -> Result<(i64, i64), Stop> {
        let topic = &self.config.destination_topic;
        let reader: BaseConsumer = self
            .destination_config
            .clone()
            .set("group.id", "kmirror-fetcher-watermarks")
            .create()
            .map_err(|source| Stop::CreateClient {
                client: "destination watermark reader",
                source,
            })?;
        reader
            .fetch_watermarks(topic, partition, ADMIN_TIMEOUT)
            .map_err(|e| match e {
                KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                    Stop::DestinationTopicMissing {
                        topic: topic.clone(),
                        partition,
                    }
                }
                source => Stop::FetchWatermarks {
                    side: Side::Destination,
                    topic: topic.clone(),
                    partition,
                    source,
                },
            })
    }

    /// Gathers the facts of one partition, decides its start and carries the decision out.
    fn prepare_partition(
        &mut self,
        partition: i32,
        recorded: &PartitionRecords,
    ) -> Result<(), Stop> {
        let config = self.config;
        let position = recorded.position.as_ref();
        check_recorded_identity(
            &config.source_topic,
            position,
            &self.source_cluster_id,
            self.source_topic_id.as_deref(),
        )?;
        let (_, destination_end) = self.settled_destination_watermarks(partition)?;
        let (source_low, source_high) = self.source_watermarks(partition, ADMIN_TIMEOUT)?;
        let recorded_start = match position {
            Some(p) => Some(Recorded {
                map: recorded
                    .offset_map()
                    .map_err(|message| Stop::ReadOffsetMap { partition, message })?,
                prefix: p.prefix_alignment,
            }),
            None => None,
        };
        let facts = StartFacts {
            partition,
            recorded: recorded_start,
            destination_end,
            source_low,
            source_high,
        };
        let plan = decide_start(config, &facts)?;
        if let Start::Translated { from } = plan.how {
            tracing::warn!(
                partition,
                src_low = from,
                limit = config.prefix_alignment_limit,
                "source log starts beyond the prefix alignment limit; offsets will be translated"
            );
        }
        let first_start = plan.first_start();
        let recorded_chunks = position.map_or(0, |p| p.map_chunks as usize);
        let mut unit = Unit::new(
            plan.cursor,
            self.labels(partition),
            plan.prefix,
            recorded_chunks,
        );
        if first_start {
            // Record the identity (and any alignment plan or starting map) before writing data.
            self.write_position(&unit, FetcherStatus::Running, None)?;
            self.write_map(&mut unit)?;
            self.flush_state()?;
        }
        if let Some(last) = plan.compare_last {
            self.verify_last_record(partition, last)?;
        }
        match plan.then {
            Then::Mirror => {}
            Then::Fail(stop) => return Err(stop),
            Then::SkipTruncated { from, to } => {
                let lost = Stop::SourceTruncated {
                    topic: config.source_topic.clone(),
                    partition,
                    next: from,
                    log_start: to,
                };
                tracing::warn!(
                    partition,
                    lost = to - from,
                    "{lost}; continuing as configured"
                );
                self.write_map(&mut unit)?;
                self.flush_state()?;
            }
            Then::AlignPrefix { target } => {
                self.units.insert(partition, unit);
                return self.align_prefix(partition, target);
            }
        }
        self.units.insert(partition, unit);
        Ok(())
    }

    /// The last destination record must be the copy of its source record; anything else was
    /// written by someone else.
    fn verify_last_record(&self, partition: i32, last: LastCopy) -> Result<(), Stop> {
        let config = self.config;
        let read = |side: Side, client, topic: &str, offset| {
            read_record_at(client, topic, partition, offset, ADMIN_TIMEOUT).map_err(|source| {
                Stop::ReadRecord {
                    side,
                    topic: topic.to_string(),
                    partition,
                    offset,
                    source,
                }
            })
        };
        let (dst, src) = (last.destination_offset, last.source_offset);
        let destination = read(
            Side::Destination,
            &self.destination_config,
            &config.destination_topic,
            dst,
        )?;
        let source = read(Side::Source, &self.source_config, &config.source_topic, src)?;
        match (destination, source) {
            (Some(d), Some(s)) if d.offset == dst && s.offset == src => {
                if !d.same_content(&s) {
                    return Err(Stop::LastRecordNotACopy {
                        topic: config.destination_topic.clone(),
                        partition,
                        destination_offset: dst,
                        source_offset: src,
                    });
                }
            }
            _ => tracing::info!(
                partition,
                dst_last = dst,
                src,
                "last record not comparable (compacted or deleted); skipping the check"
            ),
        }
        Ok(())
    }

    /// Placeholders for destination offsets up to `target`, then DeleteRecords, so that the
    /// destination log starts where the source log starts and offsets stay identical.
    fn align_prefix(&mut self, partition: i32, target: i64) -> Result<(), Stop> {
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
            let record = BaseRecord::<(), [u8], Box<Pending>>::with_opaque_to(
                topic,
                Box::new(Pending {
                    partition,
                    expected_dst: expected,
                    bytes: 0,
                    timestamp: None,
                }),
            )
            .partition(partition)
            .payload(&[][..])
            .headers(headers.clone());
            delivery::send(&self.producer, &mut self.units, self.handles, record)?;
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
        futures::executor::block_on(admin.delete_records(&tpl, &options)).map_err(delete_failed)?;
        let unit = self
            .units
            .get_mut(&partition)
            .expect("unit inserted before alignment");
        unit.prefix = Some(PrefixAlignment { target, done: true });
        unit.cursor = Cursor::resume(partition, unit.cursor.map.clone(), target);
        self.write_position(&self.units[&partition], FetcherStatus::Running, None)?;
        self.flush_state()?;
        Ok(())
    }
}
