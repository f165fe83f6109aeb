//! Persisting progress to the state topic: position records and offset-map chunks (only the
//! chunks that changed are rewritten, straight from the map's segments; chunks that cover only
//! source offsets below the source log start are removed).

use kmirror_state::records::{
    FetcherError, FetcherStatus, PositionRecord, RecordKind, StateKey, map_chunk, map_chunk_count,
    now_ms,
};
use kmirror_state::records::{MAP_CHUNK_SEGMENTS, POSITION_HEARTBEAT};
use kmirror_state::store::StateWriter;

use super::stop::Stop;
use super::{Fetcher, Unit};
use crate::config::FetcherConfig;

impl Fetcher<'_> {
    /// The position record of `unit`.
    pub(super) fn position_record(
        &self,
        unit: &Unit,
        status: FetcherStatus,
        error: Option<FetcherError>,
    ) -> PositionRecord {
        let cursor = &unit.cursor;
        let chunks = map_chunk_count(&cursor.map).max(unit.persisted_chunks) as u32;
        PositionRecord {
            source_cluster_id: self.source_cluster_id.clone(),
            source_topic_id: self.source_topic_id.clone(),
            destination_topic: self.config.destination_topic.clone(),
            last_mirrored_offset: cursor.last_mirrored_src,
            next_source_offset: cursor.confirmed_next_src(),
            destination_offset: cursor.confirmed_dst,
            map_chunks: unit.first_chunk + chunks,
            map_first_chunk: unit.first_chunk,
            offsets_identical: cursor.map.is_identity(),
            prefix_alignment: unit.prefix,
            status,
            error,
            source_high_watermark: unit.high_watermark,
            source_last_stable_offset: unit.last_stable,
            open_transaction: super::source_ends::reported(unit.open_transaction, now_ms()),
            source_position: Some(unit.source_position.max(cursor.confirmed_next_src())),
            lag_seconds: Some(unit.lag_seconds),
            records_mirrored: unit.records,
            writer: self.config.writer.clone(),
            writer_uid: self.config.writer_uid(),
            last_mirrored_leader_epoch: (cursor.last_mirrored_epoch >= 0
                && cursor.last_mirrored_src >= 0)
                .then_some(cursor.last_mirrored_epoch),
            data_loss: unit.data_loss.clone(),
            updated_at_ms: now_ms(),
        }
    }

    /// Enqueues the position record of `unit` (not flushed).
    pub(super) fn write_position(
        &self,
        unit: &Unit,
        status: FetcherStatus,
        error: Option<FetcherError>,
    ) -> Result<(), Stop> {
        let record = self.position_record(unit, status, error);
        let key = StateKey::new(
            RecordKind::Position,
            &self.config.mirror,
            &self.config.source_topic,
            unit.cursor.partition,
        );
        self.state
            .send(&key, Some(&record))
            .map_err(Stop::WriteState)
    }

    /// Enqueues the map chunks of `unit` that changed since the last write (not flushed).
    pub(super) fn write_map(&self, unit: &mut Unit) -> Result<(), Stop> {
        persist_map(&self.state, self.config, unit)
    }

    /// Waits until everything enqueued for the state topic is acknowledged.
    pub(super) fn flush_state(&self) -> Result<(), Stop> {
        self.state
            .flush(super::ADMIN_TIMEOUT)
            .map_err(Stop::WriteState)
    }

    /// Enqueues the positions that changed (all of them when `status` is not `Running`).
    pub(super) fn persist_positions(
        &mut self,
        status: FetcherStatus,
        error: Option<FetcherError>,
    ) -> Result<(), Stop> {
        self.persist_final_positions(status, error, None)
    }

    /// Like [`Fetcher::persist_positions`], for a run that ended with `status` and `error`
    /// about partition `about` alone (every partition when `None`): the other partitions are
    /// recorded as stopped cleanly, nothing wrong with them.
    pub(super) fn persist_final_positions(
        &mut self,
        status: FetcherStatus,
        error: Option<FetcherError>,
        about: Option<i32>,
    ) -> Result<(), Stop> {
        // Unchanged positions are rewritten every heartbeat: their age tells the operator
        // whether the lag it shows is current.
        let due: Vec<i32> = self
            .units
            .iter()
            .filter(|(_, u)| {
                u.position_dirty
                    || status != FetcherStatus::Running
                    || u.position_written.elapsed() >= POSITION_HEARTBEAT
            })
            .map(|(p, _)| *p)
            .collect();
        for p in &due {
            let (status, error) = outcome_of(*p, about, status, &error);
            self.write_position(&self.units[p], status, error)?;
        }
        let now = std::time::Instant::now();
        for p in &due {
            if let Some(unit) = self.units.get_mut(p) {
                unit.position_written = now;
            }
        }
        for unit in self.units.values_mut() {
            unit.position_dirty = false;
        }
        Ok(())
    }
}

/// What is recorded for `partition` when a run ends with `status` and `error` about partition
/// `about` alone (every partition when `None`).
pub(super) fn outcome_of(
    partition: i32,
    about: Option<i32>,
    status: FetcherStatus,
    error: &Option<FetcherError>,
) -> (FetcherStatus, Option<FetcherError>) {
    match about {
        Some(p) if p != partition => (FetcherStatus::Stopped, None),
        _ => (status, error.clone()),
    }
}

/// Enqueues the map chunks of `unit` that changed since the last write (not flushed).
pub(super) fn persist_map(
    state: &StateWriter,
    config: &FetcherConfig,
    unit: &mut Unit,
) -> Result<(), Stop> {
    let count = map_chunk_count(&unit.cursor.map);
    for i in unit.sealed_chunks..count {
        let chunk = map_chunk(&unit.cursor.map, i).expect("chunk below the count");
        let key = StateKey::map_chunk(
            &config.mirror,
            &config.source_topic,
            unit.cursor.partition,
            unit.first_chunk + i as u32,
        );
        state.send(&key, Some(&chunk)).map_err(Stop::WriteState)?;
    }
    unit.persisted_chunks = count;
    unit.sealed_chunks = count.saturating_sub(1);
    Ok(())
}

/// Rewrites every map chunk of `unit` after its map was cut back (the destination lost records),
/// and removes the chunk records beyond it (not flushed).
pub(super) fn rewrite_map(
    state: &StateWriter,
    config: &FetcherConfig,
    unit: &mut Unit,
) -> Result<(), Stop> {
    let before = unit.persisted_chunks;
    unit.sealed_chunks = 0;
    persist_map(state, config, unit)?;
    for i in unit.persisted_chunks..before {
        let key = StateKey::map_chunk(
            &config.mirror,
            &config.source_topic,
            unit.cursor.partition,
            unit.first_chunk + i as u32,
        );
        state.send::<()>(&key, None).map_err(Stop::WriteState)?;
    }
    Ok(())
}

impl Fetcher<'_> {
    /// Removes the sealed map chunks of partitions whose segments all lie below the source log
    /// start (`log_starts` by partition): no record of theirs is left on the source to
    /// translate. The positions naming the new first chunks are persisted before the chunk
    /// records are deleted, so that a crash in between leaves a readable map.
    pub(super) fn prune_maps(
        &mut self,
        log_starts: &std::collections::BTreeMap<i32, i64>,
    ) -> Result<(), Stop> {
        let mut removed: Vec<(i32, std::ops::Range<u32>)> = Vec::new();
        for (p, unit) in self.units.iter_mut() {
            let Some(&low) = log_starts.get(p) else {
                continue;
            };
            let whole = unit.cursor.map.segments_below(low) / MAP_CHUNK_SEGMENTS;
            let chunks = whole.min(unit.sealed_chunks);
            if chunks == 0 {
                continue;
            }
            unit.cursor.map.drop_first(chunks * MAP_CHUNK_SEGMENTS);
            let first = unit.first_chunk;
            unit.first_chunk += chunks as u32;
            unit.sealed_chunks -= chunks;
            unit.persisted_chunks -= chunks;
            removed.push((*p, first..unit.first_chunk));
        }
        if removed.is_empty() {
            return Ok(());
        }
        for (p, _) in &removed {
            self.write_position(&self.units[p], FetcherStatus::Running, None)?;
        }
        self.flush_state()?;
        for (p, chunks) in removed {
            tracing::info!(
                partition = p,
                chunks = ?chunks,
                "offset-map chunks below the source log start removed"
            );
            for i in chunks {
                let key = StateKey::map_chunk(&self.config.mirror, &self.config.source_topic, p, i);
                self.state
                    .send::<()>(&key, None)
                    .map_err(Stop::WriteState)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::records::StopReason;

    #[test]
    fn a_finding_about_one_partition_fails_that_one_only() {
        let error = Some(FetcherError {
            reason: StopReason::ForeignWrite,
            message: "another writer".into(),
        });
        let failed = (FetcherStatus::Failed, error.clone());
        assert_eq!(
            outcome_of(2, Some(2), FetcherStatus::Failed, &error),
            failed
        );
        assert_eq!(
            outcome_of(1, Some(2), FetcherStatus::Failed, &error),
            (FetcherStatus::Stopped, None),
            "a partition that only shared the process stopped cleanly"
        );
        assert_eq!(
            outcome_of(1, None, FetcherStatus::Failed, &error),
            failed,
            "a stop of the whole process is every partition's"
        );
    }
}
