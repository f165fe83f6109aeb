//! Persisting progress to the state topic: position records and offset-map chunks (only the
//! chunks that changed are rewritten).

use kmirror_state::records::{
    FetcherError, FetcherStatus, PositionRecord, RecordKind, StateKey, map_to_chunks, now_ms,
};
use kmirror_state::store::StateWriter;

use super::stop::Stop;
use super::{Fetcher, Unit};
use crate::config::FetcherConfig;

impl Fetcher<'_> {
    /// Enqueues the position record of `unit` (not flushed).
    pub(super) fn write_position(
        &self,
        unit: &Unit,
        status: FetcherStatus,
        error: Option<FetcherError>,
    ) -> Result<(), Stop> {
        let cursor = &unit.cursor;
        let chunks = map_to_chunks(&cursor.map).len().max(unit.persisted_chunks) as u32;
        let record = PositionRecord {
            source_cluster_id: self.source_cluster_id.clone(),
            source_topic_id: self.source_topic_id.clone(),
            destination_topic: self.config.destination_topic.clone(),
            last_mirrored_offset: cursor.last_mirrored_src,
            next_source_offset: cursor.confirmed_next_src(),
            destination_offset: cursor.confirmed_dst,
            map_chunks: chunks,
            offsets_identical: cursor.map.is_identity(),
            prefix_alignment: unit.prefix,
            status,
            error,
            source_high_watermark: unit.high_watermark,
            source_position: Some(unit.source_position.max(cursor.confirmed_next_src())),
            lag_seconds: Some(unit.lag_seconds),
            records_mirrored: unit.records,
            writer: self.config.writer.clone(),
            updated_at_ms: now_ms(),
        };
        let key = StateKey::new(
            RecordKind::Position,
            &self.config.mirror,
            &self.config.source_topic,
            cursor.partition,
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
        for unit in self.units.values() {
            if unit.position_dirty || status != FetcherStatus::Running {
                self.write_position(unit, status, error.clone())?;
            }
        }
        for unit in self.units.values_mut() {
            unit.position_dirty = false;
        }
        Ok(())
    }
}

/// Enqueues the map chunks of `unit` that changed since the last write (not flushed).
pub(super) fn persist_map(
    state: &StateWriter,
    config: &FetcherConfig,
    unit: &mut Unit,
) -> Result<(), Stop> {
    let chunks = map_to_chunks(&unit.cursor.map);
    for (i, chunk) in chunks.iter().enumerate().skip(unit.sealed_chunks) {
        let key = StateKey::map_chunk(
            &config.mirror,
            &config.source_topic,
            unit.cursor.partition,
            i as u32,
        );
        state.send(&key, Some(chunk)).map_err(Stop::WriteState)?;
    }
    unit.persisted_chunks = chunks.len();
    unit.sealed_chunks = chunks.len().saturating_sub(1);
    Ok(())
}
