//! Stop: how a run ends — flush what the producer holds, persist the final positions with the
//! outcome, set the state metrics — and how a start-up failure is recorded for the operator.

use std::time::Duration;

use kmirror_crds::v1alpha1::PartitionState;
use kmirror_state::records::{
    FetcherStatus, PositionRecord, RecordKind, StateKey, StopReason, now_ms,
};
use kmirror_state::store::{self, StateWriter};

use super::clients::cluster_config;
use super::stop::{Side, Stop};
use super::{Fetcher, Outcome};
use crate::config::FetcherConfig;

/// Time kept from the shutdown budget for persisting the final positions.
const PERSIST_BUDGET: Duration = Duration::from_secs(3);

impl Fetcher<'_> {
    /// Ends the run: flush what can be flushed, persist the final positions with the outcome.
    pub(super) fn finish(mut self, result: Result<(), Stop>) -> Outcome {
        let flush_budget = self.config.shutdown_timeout.saturating_sub(PERSIST_BUDGET);
        let flushed = self.flush_producer(flush_budget);
        let (status, error, outcome) = match (result, flushed) {
            (Ok(()), Ok(())) => (FetcherStatus::Stopped, None, Outcome::Stopped),
            (Ok(()), Err(stop)) | (Err(stop), _) => {
                let status = if stop.reason().retryable() {
                    FetcherStatus::Stopped
                } else {
                    FetcherStatus::Failed
                };
                (status, Some(stop.to_record()), Outcome::failed(&stop))
            }
        };
        if let Outcome::Failed { reason, message } = &outcome {
            tracing::error!(?reason, "{message}");
        }
        self.handles.health.set_ready(false);
        let persisted = self
            .persist_positions(status, error)
            .and_then(|_| self.state.flush(PERSIST_BUDGET).map_err(Stop::WriteState));
        if let Err(e) = persisted {
            tracing::warn!(error = %e, "could not persist the final position (the destination log remains the checkpoint)");
        }
        let state = if status == FetcherStatus::Failed {
            PartitionState::Failed
        } else {
            PartitionState::Stopped
        };
        for unit in self.units.values() {
            self.handles.metrics.set_state(&unit.labels, state);
        }
        outcome
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
    for &partition in &config.partitions {
        let key = (
            config.mirror.clone(),
            config.source_topic.clone(),
            partition,
        );
        let mut position = records
            .get(&key)
            .and_then(|r| r.position.clone())
            .unwrap_or_else(|| PositionRecord {
                destination_topic: config.destination_topic.clone(),
                last_mirrored_offset: -1,
                ..Default::default()
            });
        position.status = FetcherStatus::Failed;
        position.error = Some(stop.to_record());
        position.writer = config.writer.clone();
        position.updated_at_ms = now_ms();
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
