//! The exact offset map between a source partition and its destination partition.
//!
//! Destination offsets are assigned densely by the destination broker, while a source partition
//! can have gaps (compaction, transaction markers, aborted records, or a log that starts above
//! 0). The map is a sorted list of segments; segment `i` says that the source record at
//! `src_start` landed at `dst_start` and that records after it were dense up to the next
//! segment. With a single `(0, 0)` segment the offsets are identical.
//!
//! The map is never sampled: every source offset translates exactly. A source offset that falls
//! into a gap (no record there) translates to the destination offset of the next record, which
//! is where a consumer that committed that offset resumes.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One segment: from `src` on, source offsets map to `dst + (offset - src)` until the next
/// segment starts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First source offset of the segment.
    pub src: i64,
    /// Destination offset of that record.
    pub dst: i64,
}

/// A segment that would break the map's order: sources must increase and destinations must not
/// decrease. Checked in every build: a map out of order translates offsets wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error(
    "offset map out of order: a segment for source offset {src} at destination offset {dst} \
     after the segment ({}, {})",
    last.src,
    last.dst
)]
pub struct MapOrderError {
    /// The open segment.
    pub last: Segment,
    /// The source offset of the refused segment.
    pub src: i64,
    /// Its destination offset.
    pub dst: i64,
}

/// An offset map; always holds at least the first segment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct OffsetMap {
    segments: Vec<Segment>,
}

impl Default for OffsetMap {
    fn default() -> Self {
        OffsetMap::identity()
    }
}

impl OffsetMap {
    /// Source and destination offsets are identical.
    pub fn identity() -> OffsetMap {
        OffsetMap {
            segments: vec![Segment { src: 0, dst: 0 }],
        }
    }

    /// A map whose first destination offset 0 holds source offset `src` (the source log started
    /// at `src` and was not prefix-aligned).
    pub fn starting_at(src: i64) -> OffsetMap {
        OffsetMap {
            segments: vec![Segment { src, dst: 0 }],
        }
    }

    /// Builds a map from persisted segments; sources must strictly increase and destinations
    /// must not decrease. (A destination may run ahead of its source where it holds records that
    /// are not copies: divergent records kept on failback.)
    pub fn from_segments(segments: Vec<Segment>) -> Result<OffsetMap, String> {
        if segments.is_empty() {
            return Err("an offset map needs at least one segment".into());
        }
        for pair in segments.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.dst < a.dst || b.src <= a.src {
                return Err(format!(
                    "offset map segments out of order: {a:?} then {b:?}"
                ));
            }
        }
        Ok(OffsetMap { segments })
    }

    /// The segments, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The open (last) segment.
    pub fn last(&self) -> Segment {
        *self.segments.last().expect("an offset map is never empty")
    }

    /// True when every destination offset equals its source offset.
    pub fn is_identity(&self) -> bool {
        self.segments.iter().all(|s| s.src == s.dst)
    }

    /// Records that the source record at `src` is written at `dst`, after a gap. Returns false
    /// (and changes nothing) when `src`/`dst` already follow the open segment densely, and an
    /// error (changing nothing) when the segment would come before the open one.
    pub fn record_gap(&mut self, src: i64, dst: i64) -> Result<bool, MapOrderError> {
        let last = self.last();
        if src - last.src == dst - last.dst {
            return Ok(false);
        }
        if src <= last.src || dst < last.dst {
            return Err(MapOrderError { last, src, dst });
        }
        if dst == last.dst {
            // Nothing was written in the open segment yet: move its start.
            self.segments.last_mut().expect("non-empty").src = src;
        } else {
            self.segments.push(Segment { src, dst });
        }
        Ok(true)
    }

    /// Forgets the segments of destination offsets at or beyond `dst_end` (the destination lost
    /// those records): afterwards the map describes the log `0..dst_end` and what comes next is
    /// recorded again. A segment starting exactly at `dst_end` is kept (recorded ahead of the
    /// next record). Returns whether anything was removed.
    pub fn truncate_to_dst(&mut self, dst_end: i64) -> bool {
        let keep = self.segments.partition_point(|s| s.dst <= dst_end).max(1);
        let removed = keep < self.segments.len();
        self.segments.truncate(keep);
        removed
    }

    /// Removes the first `n` segments (the map keeps at least one): their source offsets lie
    /// below the source log start and are never translated again.
    pub fn drop_first(&mut self, n: usize) {
        let n = n.min(self.segments.len() - 1);
        self.segments.drain(..n);
    }

    /// How many leading segments cover only source offsets below `log_start` (each ends where
    /// the next begins, at or below it).
    pub fn segments_below(&self, log_start: i64) -> usize {
        self.segments
            .windows(2)
            .take_while(|w| w[1].src <= log_start)
            .count()
    }

    fn segment_for_dst(&self, dst: i64) -> usize {
        self.segments
            .partition_point(|s| s.dst <= dst)
            .saturating_sub(1)
    }

    /// The source offset of the record at destination offset `dst` (or, for the destination
    /// log-end offset, the next source offset to copy).
    pub fn dst_to_src(&self, dst: i64) -> i64 {
        let segment = self.segments[self.segment_for_dst(dst)];
        segment.src + (dst - segment.dst)
    }

    /// The destination offset for source offset `src`: exact for a record, and the next record's
    /// destination offset for an offset inside a gap.
    pub fn src_to_dst(&self, src: i64) -> i64 {
        let i = self.segments.partition_point(|s| s.src <= src);
        if i == 0 {
            // Before the first mirrored record: the first destination offset.
            return self.segments[0].dst;
        }
        let segment = self.segments[i - 1];
        let dst = segment.dst + (src - segment.src);
        match self.segments.get(i) {
            // Inside the dense run of this segment, or in the gap before the next one.
            Some(next) => dst.min(next.dst),
            None => dst,
        }
    }

    /// The destination offset a consumer group that committed source offset `committed` (the
    /// next record it would read) resumes at: [`OffsetMap::src_to_dst`] clamped to the
    /// destination's `(log start, log end)`. The one translation of committed offsets: group
    /// sync commits it, and `kubectl mirror translate` reports it (with the reason instead of
    /// the clamp when a bound applies, see [`crate::translate`]).
    pub fn translate_committed(&self, committed: i64, destination: (i64, i64)) -> i64 {
        self.src_to_dst(committed)
            .clamp(destination.0, destination.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_translates_to_itself() {
        let map = OffsetMap::identity();
        assert!(map.is_identity());
        for o in [0, 1, 17, 1_000_000] {
            assert_eq!(map.src_to_dst(o), o);
            assert_eq!(map.dst_to_src(o), o);
        }
    }

    #[test]
    fn gaps_translate_exactly() {
        // Source records at 0,1,2 then a marker at 3, records 4,5, compaction removed 6..9,
        // records 10.. .
        let mut map = OffsetMap::identity();
        assert!(!map.record_gap(1, 1).unwrap(), "dense: no new segment");
        assert!(map.record_gap(4, 3).unwrap());
        assert!(map.record_gap(10, 5).unwrap());
        assert!(!map.is_identity());
        let pairs = [
            (0, 0),
            (1, 1),
            (2, 2),
            (4, 3),
            (5, 4),
            (10, 5),
            (11, 6),
            (20, 15),
        ];
        for (src, dst) in pairs {
            assert_eq!(map.src_to_dst(src), dst, "src {src}");
            assert_eq!(map.dst_to_src(dst), src, "dst {dst}");
        }
        // Offsets inside gaps go to the next record.
        assert_eq!(map.src_to_dst(3), 3);
        for src in 6..10 {
            assert_eq!(map.src_to_dst(src), 5, "src {src} in a gap");
        }
        // The next source offset after a destination log end.
        assert_eq!(map.dst_to_src(7), 12);
    }

    #[test]
    fn committed_offsets_translate_and_clamp() {
        let identity = OffsetMap::identity();
        assert_eq!(identity.translate_committed(42, (0, 100)), 42);
        assert_eq!(
            identity.translate_committed(420, (0, 100)),
            100,
            "clamped to the destination end"
        );
        assert_eq!(
            identity.translate_committed(3, (10, 100)),
            10,
            "clamped to the destination start"
        );
        let mut map = OffsetMap::identity();
        map.record_gap(10, 8).expect("an ordered segment");
        assert_eq!(map.translate_committed(12, (0, 100)), 10);
        assert_eq!(
            map.translate_committed(9, (0, 100)),
            8,
            "an offset in a gap resumes at the next record"
        );
    }

    #[test]
    fn gap_before_any_record_moves_the_start() {
        let mut map = OffsetMap::identity();
        assert!(map.record_gap(5, 0).unwrap());
        assert_eq!(map.segments(), &[Segment { src: 5, dst: 0 }]);
        assert_eq!(map.src_to_dst(2), 0);
        assert_eq!(map.src_to_dst(7), 2);
        assert_eq!(map.dst_to_src(0), 5);
        assert_eq!(OffsetMap::starting_at(5), map);
    }

    #[test]
    fn written_ahead_segment_without_records_resumes_at_its_source() {
        let mut map = OffsetMap::identity();
        map.record_gap(10, 8).unwrap(); // persisted before record 10 was produced
        assert_eq!(
            map.dst_to_src(8),
            10,
            "destination log end 8 resumes at source 10"
        );
        assert_eq!(map.dst_to_src(7), 7);
    }

    #[test]
    fn segments_out_of_order_are_refused_in_every_build() {
        let mut map = OffsetMap::identity();
        map.record_gap(10, 5).unwrap();
        let before = map.clone();
        #[rustfmt::skip]
        let table = [
            // src, dst → refused
            (9, 6, true),    // source behind the open segment
            (10, 7, true),   // the same source again, elsewhere
            (12, 4, true),   // destination behind
            (20, 5, false),  // nothing written since: the open segment moves
        ];
        for (src, dst, refused) in table {
            let mut m = before.clone();
            let result = m.record_gap(src, dst);
            assert_eq!(result.is_err(), refused, "({src}, {dst}): {result:?}");
            if refused {
                assert_eq!(m, before, "a refused segment changes nothing");
                let message = result.unwrap_err().to_string();
                assert!(
                    message.contains(&format!("source offset {src}")),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn truncating_and_pruning() {
        let mut map = OffsetMap::identity();
        map.record_gap(10, 5).unwrap();
        map.record_gap(30, 20).unwrap();
        map.record_gap(50, 30).unwrap();
        let full = map.clone();
        assert!(!map.truncate_to_dst(30), "a segment at the end is kept");
        assert!(map.truncate_to_dst(25));
        assert_eq!(map.segments().len(), 3);
        assert_eq!(map.dst_to_src(25), 35);
        assert!(map.truncate_to_dst(0));
        assert_eq!(map, OffsetMap::identity());

        let mut map = full.clone();
        assert_eq!(map.segments_below(9), 0);
        assert_eq!(map.segments_below(10), 1);
        assert_eq!(map.segments_below(45), 2);
        assert_eq!(map.segments_below(1000), 3, "the open segment stays");
        map.drop_first(2);
        assert_eq!(map.segments()[0], Segment { src: 30, dst: 20 });
        for src in [30, 40, 50, 60] {
            assert_eq!(map.src_to_dst(src), full.src_to_dst(src), "src {src}");
        }
        map.drop_first(10);
        assert_eq!(map.segments().len(), 1);
    }

    #[test]
    fn rejects_inconsistent_segments() {
        assert!(OffsetMap::from_segments(vec![]).is_err());
        let bad = vec![Segment { src: 5, dst: 0 }, Segment { src: 5, dst: 9 }];
        assert!(
            OffsetMap::from_segments(bad).is_err(),
            "sources must increase"
        );
        let bad = vec![Segment { src: 0, dst: 4 }, Segment { src: 5, dst: 3 }];
        assert!(
            OffsetMap::from_segments(bad).is_err(),
            "destinations must not decrease"
        );
        let kept = vec![Segment { src: 0, dst: 0 }, Segment { src: 5, dst: 9 }];
        assert!(
            OffsetMap::from_segments(kept).is_ok(),
            "kept divergent records"
        );
        let good = vec![Segment { src: 0, dst: 0 }, Segment { src: 5, dst: 3 }];
        assert_eq!(
            OffsetMap::from_segments(good.clone()).unwrap().segments(),
            &good[..]
        );
    }
}
