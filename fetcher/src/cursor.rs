//! Per-partition bookkeeping of a running fetcher: which source offset comes next, which
//! destination offset each produced record must get, and what the broker confirmed. Pure logic.

use std::collections::VecDeque;

use kmirror_state::offset_map::{MapOrderError, OffsetMap};

/// What to do with a record the source delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// Already on the destination (the source re-delivered it): drop it.
    Skip,
    /// Produce it; the broker must assign `expected_dst`. `gap` is true when the offset map
    /// gained a segment for it (persist the map before producing).
    Produce {
        /// The destination offset the record must land at.
        expected_dst: i64,
        /// A new map segment was recorded.
        gap: bool,
    },
}

/// A delivery that did not land where it had to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetMismatch {
    /// Offset the record had to get.
    pub expected: i64,
    /// Offset the broker assigned.
    pub actual: i64,
}

/// Mirroring progress of one partition.
#[derive(Debug, Clone)]
pub struct Cursor {
    /// Partition number.
    pub partition: i32,
    /// The offset map (written ahead of the records it describes).
    pub map: OffsetMap,
    /// Next source offset expected from the consumer.
    pub next_src: i64,
    /// Destination offset the next produced record will get.
    pub next_dst: i64,
    /// Destination log end confirmed by the broker.
    pub confirmed_dst: i64,
    /// Source offset of the last confirmed record (-1: none).
    pub last_mirrored_src: i64,
    /// Source leader epoch of the last confirmed record (-1: unknown).
    pub last_mirrored_epoch: i32,
    /// The last record accepted (source offset, its leader epoch; -1: unknown), whether or not
    /// it is confirmed yet.
    pub last_accepted: Option<(i64, i32)>,
    /// Records produced but not yet confirmed.
    inflight: VecDeque<Inflight>,
}

/// A produced record awaiting its delivery report.
#[derive(Debug, Clone, Copy)]
struct Inflight {
    dst: i64,
    /// Source offset (-1: a placeholder).
    src: i64,
    epoch: i32,
}

impl Cursor {
    /// A cursor resuming at destination log end `dst_end` with `map`.
    pub fn resume(partition: i32, map: OffsetMap, dst_end: i64) -> Cursor {
        let next_src = map.dst_to_src(dst_end);
        let last_mirrored_src = if dst_end > 0 {
            map.dst_to_src(dst_end - 1)
        } else {
            -1
        };
        Cursor {
            partition,
            map,
            next_src,
            next_dst: dst_end,
            confirmed_dst: dst_end,
            last_mirrored_src,
            last_mirrored_epoch: -1,
            last_accepted: None,
            inflight: VecDeque::new(),
        }
    }

    /// A resumed cursor that knows the leader epoch of the record at `last_mirrored_src` (from
    /// the recorded position, when it names that very record).
    pub fn with_last_epoch(mut self, last_mirrored_src: i64, epoch: Option<i32>) -> Cursor {
        if let Some(e) = epoch
            && last_mirrored_src == self.last_mirrored_src
            && last_mirrored_src >= 0
        {
            self.last_mirrored_epoch = e;
            self.last_accepted = Some((last_mirrored_src, e));
        }
        self
    }

    /// Decides for source record `src` of leader epoch `epoch` (-1: unknown). A new map segment
    /// that would break the map's order is refused.
    pub fn accept(&mut self, src: i64, epoch: i32) -> Result<Accept, MapOrderError> {
        if src < self.next_src {
            return Ok(Accept::Skip);
        }
        let gap = src > self.next_src && self.map.record_gap(src, self.next_dst)?;
        let expected_dst = self.next_dst;
        self.inflight.push_back(Inflight {
            dst: expected_dst,
            src,
            epoch,
        });
        self.next_src = src + 1;
        self.next_dst += 1;
        self.last_accepted = Some((src, epoch));
        Ok(Accept::Produce { expected_dst, gap })
    }

    /// Reserves the next destination offset for a placeholder (prefix alignment).
    pub fn accept_placeholder(&mut self) -> i64 {
        let expected = self.next_dst;
        self.inflight.push_back(Inflight {
            dst: expected,
            src: -1,
            epoch: -1,
        });
        self.next_dst += 1;
        expected
    }

    /// The source offset of the record produced for `expected_dst`, if it is in flight.
    pub fn inflight_source(&self, expected_dst: i64) -> Option<i64> {
        self.inflight
            .iter()
            .find(|i| i.dst == expected_dst)
            .map(|i| i.src)
    }

    /// Forgets the records in flight (purged: they may or may not have landed) and goes back to
    /// the confirmed position.
    pub fn forget_inflight(&mut self) {
        self.inflight.clear();
        self.next_dst = self.confirmed_dst;
        self.next_src = self.confirmed_next_src();
        self.last_accepted = (self.last_mirrored_src >= 0)
            .then_some((self.last_mirrored_src, self.last_mirrored_epoch));
    }

    /// Records the broker's answer for the record produced with `expected_dst`.
    pub fn delivered(&mut self, expected_dst: i64, actual_dst: i64) -> Result<(), OffsetMismatch> {
        if actual_dst != expected_dst {
            return Err(OffsetMismatch {
                expected: expected_dst,
                actual: actual_dst,
            });
        }
        // Deliveries arrive in order per partition; drop everything up to this one.
        while let Some(&i) = self.inflight.front() {
            if i.dst > expected_dst {
                break;
            }
            self.inflight.pop_front();
            if i.dst == expected_dst && i.src >= 0 {
                self.last_mirrored_src = i.src;
                self.last_mirrored_epoch = i.epoch;
            }
        }
        self.confirmed_dst = self.confirmed_dst.max(expected_dst + 1);
        Ok(())
    }

    /// Records still waiting for the broker.
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// The next source offset to copy from the confirmed destination log end.
    pub fn confirmed_next_src(&self) -> i64 {
        self.map.dst_to_src(self.confirmed_dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_records_keep_identity() {
        let mut c = Cursor::resume(0, OffsetMap::identity(), 0);
        for src in 0..5 {
            assert_eq!(
                c.accept(src, 3).unwrap(),
                Accept::Produce {
                    expected_dst: src,
                    gap: false
                }
            );
        }
        for dst in 0..5 {
            c.delivered(dst, dst).unwrap();
        }
        assert_eq!(c.confirmed_dst, 5);
        assert_eq!(c.last_mirrored_src, 4);
        assert!(c.map.is_identity());
        assert_eq!(c.inflight(), 0);
    }

    #[test]
    fn gaps_extend_the_map_and_redeliveries_are_skipped() {
        let mut c = Cursor::resume(0, OffsetMap::identity(), 0);
        assert_eq!(
            c.accept(0, 1).unwrap(),
            Accept::Produce {
                expected_dst: 0,
                gap: false
            }
        );
        assert_eq!(
            c.accept(2, 1).unwrap(),
            Accept::Produce {
                expected_dst: 1,
                gap: true
            }
        );
        assert_eq!(c.accept(2, 1).unwrap(), Accept::Skip);
        assert_eq!(c.accept(1, 1).unwrap(), Accept::Skip);
        assert_eq!(
            c.accept(3, 2).unwrap(),
            Accept::Produce {
                expected_dst: 2,
                gap: false
            }
        );
        c.delivered(0, 0).unwrap();
        c.delivered(1, 1).unwrap();
        assert_eq!(c.last_mirrored_src, 2);
        assert_eq!(c.confirmed_next_src(), 3);
        assert_eq!(c.map.src_to_dst(3), 2);
    }

    #[test]
    fn foreign_write_is_a_mismatch() {
        let mut c = Cursor::resume(0, OffsetMap::identity(), 10);
        assert_eq!(c.next_src, 10);
        assert_eq!(c.last_mirrored_src, 9);
        c.accept(10, 0).unwrap();
        assert_eq!(
            c.delivered(10, 11),
            Err(OffsetMismatch {
                expected: 10,
                actual: 11
            })
        );
    }

    #[test]
    fn resume_after_a_written_ahead_gap() {
        let mut map = OffsetMap::identity();
        map.record_gap(20, 10).unwrap();
        let c = Cursor::resume(3, map, 10);
        assert_eq!(c.next_src, 20);
        assert_eq!(c.last_mirrored_src, 9);
    }

    #[test]
    fn placeholders_do_not_count_as_mirrored() {
        let mut c = Cursor::resume(0, OffsetMap::identity(), 0);
        assert_eq!(c.accept_placeholder(), 0);
        assert_eq!(c.accept_placeholder(), 1);
        c.delivered(1, 1).unwrap();
        assert_eq!(c.confirmed_dst, 2);
        assert_eq!(c.last_mirrored_src, -1);
    }

    #[test]
    fn leader_epochs_follow_the_confirmed_records() {
        let mut c = Cursor::resume(0, OffsetMap::identity(), 5).with_last_epoch(4, Some(2));
        assert_eq!((c.last_mirrored_epoch, c.last_accepted), (2, Some((4, 2))));
        c.accept(5, 2).unwrap();
        c.accept(6, 3).unwrap();
        assert_eq!(c.last_accepted, Some((6, 3)));
        assert_eq!(c.inflight_source(6), Some(6));
        c.delivered(5, 5).unwrap();
        assert_eq!((c.last_mirrored_src, c.last_mirrored_epoch), (5, 2));
        c.forget_inflight();
        assert_eq!((c.next_src, c.next_dst, c.inflight()), (6, 6, 0));
        assert_eq!(c.last_accepted, Some((5, 2)));
        // A recorded epoch of another record than the last one on the destination is unusable.
        let c = Cursor::resume(0, OffsetMap::identity(), 9).with_last_epoch(4, Some(2));
        assert_eq!((c.last_mirrored_epoch, c.last_accepted), (-1, None));
    }

    #[test]
    fn a_record_behind_a_segment_is_refused() {
        let mut map = OffsetMap::identity();
        map.record_gap(20, 10).unwrap();
        // The map says source 20 is at destination 10; a cursor behind it (a map recorded
        // further than the destination holds) cannot add a segment before it.
        let mut c = Cursor::resume(0, map, 10);
        c.next_src = 5;
        assert!(c.accept(7, 0).is_err());
    }
}
