//! Stop: how a run ends — flush what the producer holds (or purge it, after a failed delivery
//! or a finding that forbids writing on), persist the final positions with the outcome, set the
//! state metrics — and how a start-up failure is recorded for the operator.

use std::collections::BTreeMap;
use std::time::Duration;

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_state::records::{
    FetcherStatus, PositionRecord, RecordKind, StateKey, StopReason, now_ms,
};
use kmirror_state::store::{self, StateWriter};

use super::clients::cluster_config;
use super::delivery;
use super::position::outcome_of;
use super::stop::{Side, Stop};
use super::{Fetcher, Outcome};
use crate::config::FetcherConfig;

/// Time kept from the shutdown budget for persisting the final positions.
const PERSIST_BUDGET: Duration = Duration::from_secs(3);

impl Fetcher<'_> {
    /// Ends the run: flush what can be flushed — nothing after a failed delivery (the gapless
    /// producer must not deliver what followed it) or a finding that forbids writing on (another
    /// writer, a refused record, a diverged source): that is purged — and persist the final
    /// positions with the outcome. Also says whether everything produced was confirmed (nothing
    /// purged, nothing left in flight), so that the write lease can be released.
    pub(super) fn finish(mut self, result: Result<(), Stop>) -> (Outcome, bool) {
        // Whatever stopped the run, once the lease ran out another process may write: nothing
        // more is delivered or persisted.
        if let Some(lease) = self.lease
            && let Err(expired) = lease.check()
        {
            return (self.lease_expired(&expired), false);
        }
        let flush_budget = self.config.shutdown_timeout.saturating_sub(PERSIST_BUDGET);
        let flushed = match &result {
            Err(stop) if stop.purges() => {
                self.purge_producer();
                Ok(())
            }
            _ => self.flush_producer(flush_budget),
        };
        let confirmed = flushed.is_ok() && !result.as_ref().is_err_and(Stop::purges);
        // A failed flush is itself a failed delivery: drop what remains.
        if let Err(stop) = &flushed
            && stop.purges()
        {
            self.purge_producer();
        }
        let (status, error, about, outcome) = match (result, flushed) {
            (Ok(()), Ok(())) => (FetcherStatus::Stopped, None, None, Outcome::Stopped),
            (Ok(()), Err(stop)) | (Err(stop), _) => {
                let status = if stop.reason().retryable() {
                    FetcherStatus::Stopped
                } else {
                    FetcherStatus::Failed
                };
                let about = stop.partition();
                (
                    status,
                    Some(stop.to_record()),
                    about,
                    Outcome::failed(&stop),
                )
            }
        };
        if let Outcome::Failed {
            reason,
            partition,
            message,
        } = &outcome
        {
            tracing::error!(?reason, ?partition, "{message}");
        }
        self.handles.health.set_ready(false);
        let persisted = self
            .persist_final_positions(status, error.clone(), about)
            .and_then(|_| self.state.flush(PERSIST_BUDGET).map_err(Stop::WriteState));
        if let Err(e) = persisted {
            tracing::warn!(error = %e, "could not persist the final position (the destination log remains the checkpoint)");
        }
        for (p, unit) in &self.units {
            let state = match outcome_of(*p, about, status, &error).0 {
                FetcherStatus::Failed => PartitionState::Failed,
                _ => PartitionState::Stopped,
            };
            self.handles.metrics.set_state(&unit.labels, state);
        }
        (outcome, confirmed)
    }
}

impl Fetcher<'_> {
    /// Ends a run whose lease ran out: the producer is purged (by the lease thread already),
    /// positions are not written (the next holder's start reads the destination log).
    fn lease_expired(mut self, stop: &Stop) -> Outcome {
        delivery::purge(&self.producer, &mut BTreeMap::new());
        if let Some(path) = self.batch.as_mut() {
            path.purge(&mut BTreeMap::new());
        }
        self.handles.health.set_ready(false);
        for unit in self.units.values() {
            self.handles
                .metrics
                .set_state(&unit.labels, PartitionState::Stopped);
        }
        tracing::error!(reason = ?stop.reason(), "{stop}");
        Outcome::failed(stop)
    }
}

/// The outcome of a start-up that failed. A non-retryable reason is also recorded in the
/// partitions' positions, so that the operator (and a person) can read why the fetcher refused
/// to start.
pub(super) fn start_failed(config: &FetcherConfig, stop: &Stop) -> Outcome {
    tracing::error!(reason = ?stop.reason(), "{stop}");
    if stop.reason() != StopReason::Error
        && let Err(e) = record_start_failure(config, stop)
    {
        tracing::warn!(error = %e, "could not record the failure in the state topic");
    }
    Outcome::failed(stop)
}

/// The position to record for a start-up failure: the recorded one marked failed with the
/// reason. A partition without a recorded position gets none: a position is only ever written
/// with the source identity it was mirrored from, and a made-up one (no cluster ID, no map)
/// would be taken for a recorded start by the next start.
pub(super) fn failed_position(
    recorded: Option<PositionRecord>,
    stop: &Stop,
    (writer, writer_uid): (Option<String>, Option<String>),
) -> Option<PositionRecord> {
    let mut position = recorded.filter(|p| !p.source_cluster_id.is_empty())?;
    position.status = FetcherStatus::Failed;
    position.error = Some(stop.to_record());
    position.writer = writer;
    position.writer_uid = writer_uid;
    position.updated_at_ms = now_ms();
    Some(position)
}

/// Marks the recorded positions of the owned partitions as failed with the stop reason.
fn record_start_failure(config: &FetcherConfig, stop: &Stop) -> Result<(), Stop> {
    let destination = cluster_config(config, Side::Destination)?;
    let records = store::load(
        &destination,
        &config.state_topic,
        |k| {
            k.kind == RecordKind::Position
                && k.mirror == config.mirror
                && k.topic == config.source_topic
        },
        Duration::from_secs(30),
    )
    .map_err(Stop::LoadState)?;
    let writer = StateWriter::new(&destination, &config.state_topic).map_err(Stop::WriteState)?;
    let about = stop.partition();
    for &partition in &config.partitions {
        if about.is_some_and(|p| p != partition) {
            // Not the partition the finding is about: it only stopped with it.
            continue;
        }
        let key = (
            config.mirror.clone(),
            config.source_topic.clone(),
            partition,
        );
        let recorded = records.get(&key).and_then(|r| r.position.clone());
        let Some(position) =
            failed_position(recorded, stop, (config.writer.clone(), config.writer_uid()))
        else {
            continue;
        };
        let key = StateKey::new(
            RecordKind::Position,
            &config.mirror,
            &config.source_topic,
            partition,
        );
        writer
            .send(&key, Some(&position))
            .map_err(Stop::WriteState)?;
    }
    writer
        .flush(Duration::from_secs(10))
        .map_err(Stop::WriteState)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_failure_never_makes_up_a_position() {
        let stop = Stop::DestinationNotEmpty {
            topic: "orders".into(),
            partition: 0,
            records: 3,
        };
        assert_eq!(
            failed_position(None, &stop, (None, None)),
            None,
            "nothing recorded"
        );
        let poisoned = PositionRecord {
            last_mirrored_offset: -1,
            ..Default::default()
        };
        assert_eq!(
            failed_position(Some(poisoned), &stop, (None, None)),
            None,
            "a position without a source cluster ID is not kept either"
        );
        let recorded = PositionRecord {
            source_cluster_id: "c1".into(),
            last_mirrored_offset: 41,
            next_source_offset: 42,
            destination_offset: 42,
            ..Default::default()
        };
        let failed = failed_position(
            Some(recorded.clone()),
            &stop,
            (Some("pod-0".into()), Some("uid-0".into())),
        )
        .unwrap();
        assert_eq!(failed.status, FetcherStatus::Failed);
        assert_eq!(
            failed.error.as_ref().map(|e| e.reason),
            Some(StopReason::DestinationNotEmpty)
        );
        assert_eq!(
            (failed.source_cluster_id.as_str(), failed.destination_offset),
            ("c1", 42),
            "the identity and offsets stay"
        );
        assert_eq!(failed.writer.as_deref(), Some("pod-0"));
        assert_eq!(
            failed.writer_uid.as_deref(),
            Some("uid-0"),
            "the pod instance too"
        );
    }
}
