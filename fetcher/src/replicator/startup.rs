//! Start-up: read what the destination topic accepts, create the clients, check the source
//! identity, settle every owned partition's destination log end (`settle`), and prepare each
//! partition — confirm its settled end, read the
//! source watermarks and where the recorded record's leader epoch ends, decide the start
//! ([`start_plan`](super::start_plan)), record a first start, check the last copied record, skip
//! or refuse what retention deleted, align the prefix — then assign the consumer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kmirror_crds::v1alpha1::PartitionState;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::BaseProducer;
use rdkafka::{Offset, TopicPartitionList};

use super::batch_path::BatchPath;
use super::clients::{
    cluster_config, producer_compresses, producer_config, source_consumer_config,
};
use super::delivery::DeliveryContext;
use super::epochs::SourceEpochs;
use super::lease::LeaseHolder;
use super::limits::DestinationLimits;
use super::log_end::DestinationLogEnds;
use super::position::rewrite_map;
use super::settle::DestinationEnds;
use super::shared_clients;
use super::source_check::Known;
use super::source_ends::{SourceEnds, SourceWire};
use super::start_plan::{
    LastCopy, Recorded, Start, StartFacts, Then, check_pinned, check_recorded_identity,
    decide_start,
};
use super::stop::{Side, Stop};
use super::{ADMIN_TIMEOUT, Fetcher, Handles, Unit};
use crate::config::{Engine, FetcherConfig};
use crate::throttle::Throttle;
use kmirror_state::kafka_admin::describe_topics;
use kmirror_state::kafka_record::{read_record_at, set_leader_epoch};
use kmirror_state::records::{DataLossRecord, FetcherStatus, PartitionRecords, now_ms};
use kmirror_state::store;

/// Times a source topic must be reported missing, a second apart, before it counts as deleted
/// (a broker that has not learnt of the topic yet answers "unknown" too).
const MISSING_CONFIRMATIONS: usize = 3;

/// What the destination topic accepts, from its effective configs (broker defaults included).
/// Without an answer nothing is checked before producing and the destination's refusals decide.
fn destination_limits(config: &FetcherConfig, destination: &ClientConfig) -> DestinationLimits {
    let compressing = producer_compresses(config);
    let unknown = DestinationLimits::from_configs([], compressing);
    let topic = &config.destination_topic;
    let admin: AdminClient<DefaultClientContext> = match destination.create() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(%topic, "cannot read the destination topic's limits: {e}");
            return unknown;
        }
    };
    let options = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let described = futures::executor::block_on(
        admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options),
    );
    match described.map(|mut r| r.pop()) {
        Ok(Some(Ok(resource))) => {
            let limits = DestinationLimits::from_configs(
                resource
                    .entries
                    .iter()
                    .map(|e| (e.name.as_str(), e.value.as_deref())),
                compressing,
            );
            tracing::info!(%topic, ?limits, "destination topic limits");
            limits
        }
        Ok(Some(Err(code))) => {
            tracing::warn!(%topic, ?code, "cannot read the destination topic's limits");
            unknown
        }
        Ok(None) => unknown,
        Err(e) => {
            tracing::warn!(%topic, "cannot read the destination topic's limits: {e}");
            unknown
        }
    }
}

impl<'a> Fetcher<'a> {
    /// Creates the clients, prepares every owned partition and assigns the consumer.
    pub(super) fn start(
        config: &'a FetcherConfig,
        handles: &'a Handles,
        lease: Option<&'a LeaseHolder>,
    ) -> Result<Fetcher<'a>, Stop> {
        let source_config = source_consumer_config(config)?;
        let destination_config = cluster_config(config, Side::Destination)?;
        let limits = destination_limits(config, &destination_config);
        let consumer: BaseConsumer =
            source_config
                .create()
                .map_err(|source| Stop::CreateClient {
                    client: "source consumer",
                    source,
                })?;
        let producer: Arc<BaseProducer<DeliveryContext>> = Arc::new(
            producer_config(config, &limits)?
                .create_with_context(DeliveryContext::new(config.stall_timeout))
                .map_err(|source| Stop::CreateClient {
                    client: "destination producer",
                    source,
                })?,
        );
        if let Some(l) = lease {
            l.guard(producer.clone());
        }
        let source_admin = shared_clients::source_admin(&cluster_config(config, Side::Source)?)?;
        let state = shared_clients::state_writer(&destination_config, &config.state_topic)?;
        let source_cluster_id = consumer
            .client()
            .fetch_cluster_id(ADMIN_TIMEOUT)
            .ok_or(Stop::FetchSourceClusterId)?;
        let pins = &config.pinned_cluster_ids;
        check_pinned("source", pins.source.as_deref(), &source_cluster_id)?;
        if let Some(pinned) = pins.destination.as_deref() {
            let found = rdkafka::producer::Producer::client(producer.as_ref())
                .fetch_cluster_id(ADMIN_TIMEOUT)
                .ok_or(Stop::FetchDestinationClusterId)?;
            check_pinned("destination", Some(pinned), &found)?;
        }
        let epochs = SourceEpochs::new(&source_config);
        let log_ends = DestinationLogEnds::new(&destination_config);
        let source_wire = SourceWire::connect(&source_config)?;
        let source_ends = SourceEnds::new(
            &config.source_topic,
            config.partitions.clone(),
            config.isolation,
        );
        let mut fetcher = Fetcher {
            config,
            handles,
            limits,
            epochs,
            log_ends,
            source_config,
            destination_config,
            consumer,
            producer,
            lease,
            source_admin,
            state,
            source_cluster_id,
            source_topic_id: None,
            units: BTreeMap::new(),
            throttle: config
                .throttle_bytes_per_second
                .map(|r| Throttle::new(r, Instant::now())),
            source_wire,
            source_ends,
            batch: None,
        };
        fetcher.source_topic_id = fetcher.describe_source()?;
        fetcher.go_on()?;
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
        let ends = DestinationEnds::new(&fetcher.destination_config, &config.destination_topic)?;
        let settled = fetcher.settle_destination(&ends, &config.partitions)?;
        for &partition in &config.partitions {
            fetcher.go_on()?;
            let recorded = records
                .get(&(
                    config.mirror.clone(),
                    config.source_topic.clone(),
                    partition,
                ))
                .cloned()
                .unwrap_or_default();
            let end = fetcher.confirm_settled(&ends, partition, settled[&partition])?;
            fetcher.prepare_partition(partition, &recorded, end)?;
        }
        if config.engine == Engine::Batch {
            let path = BatchPath::start(
                config,
                &fetcher.source_wire,
                &fetcher.source_config,
                &fetcher.destination_config,
                &fetcher.limits,
                &fetcher.units,
            )?;
            // The moment the lease runs out, the wire client writes nothing more either.
            if let Some(l) = lease {
                l.guard_wire(path.destination().clone());
            }
            fetcher.batch = Some(path);
        } else {
            let starts: Vec<(i32, i64)> = fetcher
                .units
                .iter()
                .map(|(p, u)| (*p, u.cursor.next_src))
                .collect();
            if let Some(stop) = super::old_formats::unreadable_start(
                &fetcher.source_wire,
                &config.source_topic,
                &starts,
            ) {
                return Err(stop);
            }
            fetcher.assign_consumer()?;
        }
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

    /// Fails with `StartInterrupted` once SIGTERM arrived.
    pub(super) fn go_on(&self) -> Result<(), Stop> {
        if self.handles.shutdown.load(Ordering::Relaxed) {
            return Err(Stop::StartInterrupted);
        }
        Ok(())
    }

    /// Sleeps `pause` in short steps, ending early (with `StartInterrupted`) on SIGTERM.
    pub(super) fn pause_in_start(&self, pause: Duration) -> Result<(), Stop> {
        let until = Instant::now() + pause;
        loop {
            self.go_on()?;
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }

    /// Assigns the source consumer (the record engine) at every partition's cursor.
    fn assign_consumer(&mut self) -> Result<(), Stop> {
        let config = self.config;
        let assign = |source| Stop::AssignSource {
            topic: config.source_topic.clone(),
            source,
        };
        let mut tpl = TopicPartitionList::new();
        for (p, unit) in &self.units {
            tpl.add_partition_offset(
                &config.source_topic,
                *p,
                Offset::Offset(unit.cursor.next_src),
            )
            .map_err(assign)?;
            // With the epoch of the record just before, librdkafka validates the position
            // against the leader before fetching (and after every leader change).
            if let Some((offset, epoch)) = unit.cursor.last_accepted
                && offset == unit.cursor.next_src - 1
                && epoch >= 0
            {
                set_leader_epoch(&mut tpl, &config.source_topic, *p, epoch);
            }
        }
        self.consumer.assign(&tpl).map_err(assign)?;
        Ok(())
    }

    /// Describes the source topic: it must exist with every owned partition. Returns its topic
    /// ID (checked against the recorded one by the caller). A topic reported missing is asked
    /// about again before it counts as deleted.
    pub(super) fn describe_source(&self) -> Result<Option<String>, Stop> {
        let topic = &self.config.source_topic;
        let description = confirm_missing(
            || {
                describe_topics(self.source_admin.inner(), &[topic], ADMIN_TIMEOUT)
                    .map(|mut d| d.pop().flatten())
                    .map_err(|source| Stop::DescribeSourceTopic {
                        topic: topic.clone(),
                        source,
                    })
            },
            Duration::from_secs(2),
        )?
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

    /// The source partition's (log start, high watermark), asked of its leader with the wire
    /// client (whose metadata follows leader changes as its requests meet them), again while the
    /// answer is an error, within `timeout`.
    pub(super) fn source_watermarks(
        &self,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), Stop> {
        use kmirror_wire::{Isolation, OffsetSpec};
        let topic = &self.config.source_topic;
        let client = &self.source_wire.client;
        let asked = self.source_wire.runtime.block_on(async {
            tokio::time::timeout(timeout, async {
                loop {
                    let listed = client
                        .list_offsets(
                            topic,
                            &[
                                (partition, OffsetSpec::Earliest),
                                (partition, OffsetSpec::Latest),
                            ],
                            Isolation::ReadUncommitted,
                        )
                        .await;
                    match listed.as_deref() {
                        Ok([low, high]) if low.error.is_ok() && high.error.is_ok() => {
                            return (low.offset, high.offset);
                        }
                        other => {
                            tracing::debug!(partition, answer = ?other.map(|l| l.len()), "source watermarks; asking again");
                            client.mark_stale();
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            })
            .await
        });
        asked.map_err(|_| Stop::FetchWatermarks {
            side: Side::Source,
            topic: topic.clone(),
            partition,
            source: rdkafka::error::KafkaError::MetadataFetch(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            ),
        })
    }

    /// Gathers the facts of one partition, decides its start and carries the decision out.
    fn prepare_partition(
        &mut self,
        partition: i32,
        recorded: &PartitionRecords,
        destination_end: i64,
    ) -> Result<(), Stop> {
        let config = self.config;
        // A position without a source cluster ID was never a start (older fetchers wrote one
        // when a first start failed): it is no record of anything.
        let position = recorded
            .position
            .as_ref()
            .filter(|p| !p.source_cluster_id.is_empty());
        if recorded.position.is_some() && position.is_none() {
            tracing::warn!(
                partition,
                "ignoring a position recorded without a source cluster ID (a failed first start)"
            );
        }
        check_recorded_identity(
            &config.source_topic,
            position,
            &self.source_cluster_id,
            self.source_topic_id.as_deref(),
        )?;
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
        let known = position.and_then(|p| {
            let epoch = p.last_mirrored_leader_epoch?;
            (p.last_mirrored_offset >= 0).then_some(Known {
                offset: p.last_mirrored_offset,
                epoch,
            })
        });
        let epoch_end = known.and_then(|k| {
            self.epochs
                .end_of(&config.source_topic, partition, k.epoch)
                .map(|e| e.end_offset)
        });
        let facts = StartFacts {
            partition,
            recorded: recorded_start,
            destination_end,
            source_low,
            source_high,
            recorded_confirmed: position.map(|p| p.destination_offset),
            known,
            epoch_end,
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
        let first_chunk = position.map_or(0, |p| p.map_first_chunk);
        let cursor = match position {
            Some(p) => plan
                .cursor
                .with_last_epoch(p.last_mirrored_offset, p.last_mirrored_leader_epoch),
            None => plan.cursor,
        };
        let mut unit = Unit::new(
            cursor,
            self.labels(partition),
            plan.prefix,
            first_chunk,
            recorded_chunks,
        );
        // A transaction the previous run saw open: still open since then if the last stable
        // offset still stands where it held it (the first look decides).
        unit.open_transaction = position.and_then(|p| p.open_transaction);
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
            Then::DestinationTruncated(stop) => {
                // Resume where the destination ends now: the cut-back map and position first.
                tracing::warn!(partition, "{stop}");
                rewrite_map(&self.state, config, &mut unit)?;
                self.write_position(&unit, FetcherStatus::Failed, Some(stop.to_record()))?;
                self.flush_state()?;
                return Err(stop);
            }
            Then::SkipTruncated { from, to } => {
                self.note_data_loss(&mut unit, from, to);
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

    /// Records that `[from, to)` was deleted on the source before it was copied and is skipped
    /// by policy: a warning, the data-loss counter, and a note in the position for the
    /// operator's Event.
    pub(super) fn note_data_loss(&self, unit: &mut Unit, from: i64, to: i64) {
        let lost = Stop::DataLoss {
            topic: self.config.source_topic.clone(),
            partition: unit.cursor.partition,
            next: from,
            log_start: to,
        };
        let message = format!("{lost}; skipped as configured");
        tracing::warn!(
            partition = unit.cursor.partition,
            lost = to - from,
            "{message}"
        );
        self.handles
            .metrics
            .data_loss_records
            .get_or_create(&unit.labels)
            .inc_by((to - from) as u64);
        unit.data_loss = Some(DataLossRecord {
            from_offset: from,
            to_offset: to,
            records: to - from,
            message,
            at_ms: now_ms(),
        });
        unit.position_dirty = true;
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
}

/// Runs `describe` until it finds the topic, or has found it missing `MISSING_CONFIRMATIONS`
/// times in a row, `pause` apart. Errors end the wait at once.
fn confirm_missing<T>(
    mut describe: impl FnMut() -> Result<Option<T>, Stop>,
    pause: Duration,
) -> Result<Option<T>, Stop> {
    for attempt in 1..=MISSING_CONFIRMATIONS {
        if let Some(found) = describe()? {
            return Ok(Some(found));
        }
        if attempt < MISSING_CONFIRMATIONS {
            tracing::warn!(
                attempt,
                "the source reports the topic missing; asking again"
            );
            std::thread::sleep(pause);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// name, answers in turn → result, questions asked
    type MissingRow = (&'static str, Vec<Option<u8>>, Option<u8>, usize);

    #[test]
    fn a_topic_reported_missing_once_is_not_deleted() {
        #[rustfmt::skip]
        let table: Vec<MissingRow> = vec![
            // name, answers in turn → result, questions asked
            ("found at once", vec![Some(1)], Some(1), 1),
            ("missing once, then found", vec![None, Some(1)], Some(1), 2),
            ("missing twice, then found", vec![None, None, Some(1)], Some(1), 3),
            ("missing every time", vec![None, None, None, Some(1)], None, 3),
        ];
        for (name, answers, expect, asked) in table {
            let mut answers = answers.into_iter();
            let mut n = 0;
            let result = confirm_missing(
                || {
                    n += 1;
                    Ok(answers.next().flatten())
                },
                Duration::ZERO,
            )
            .unwrap();
            assert_eq!((result, n), (expect, asked), "{name}");
        }
    }
}
