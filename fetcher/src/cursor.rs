//! Per-partition bookkeeping of a running fetcher: which source offset comes next, which
//! destination offset each produced record must get, and what the broker confirmed. Pure logic.

use std::collections::VecDeque;

use kmirror_state::offset_map::OffsetMap;

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
    /// Records produced but not yet confirmed: (expected destination offset, source offset).
    inflight: VecDeque<(i64, i64)>,
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
            inflight: VecDeque::new(),
        }
    }

    /// Decides for source record `src`.
    pub fn accept(&mut self, src: i64) -> Accept {
        if src < self.next_src {
            return Accept::Skip;
        }
        let gap = src > self.next_src && self.map.record_gap(src, self.next_dst);
        let expected_dst = self.next_dst;
        self.inflight.push_back((expected_dst, src));
        self.next_src = src + 1;
        self.next_dst += 1;
        Accept::Produce { expected_dst, gap }
    }

    /// Reserves the next destination offset for a placeholder (prefix alignment).
    pub fn accept_placeholder(&mut self) -> i64 {
        let expected = self.next_dst;
        self.inflight.push_back((expected, -1));
        self.next_dst += 1;
        expected
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
        while let Some(&(dst, src)) = self.inflight.front() {
            if dst > expected_dst {
                break;
            }
            self.inflight.pop_front();
            if dst == expected_dst && src >= 0 {
                self.last_mirrored_src = src;
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
                c.accept(src),
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
            c.accept(0),
            Accept::Produce {
                expected_dst: 0,
                gap: false
            }
        );
        assert_eq!(
            c.accept(2),
            Accept::Produce {
                expected_dst: 1,
                gap: true
            }
        );
        assert_eq!(c.accept(2), Accept::Skip);
        assert_eq!(c.accept(1), Accept::Skip);
        assert_eq!(
            c.accept(3),
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
        c.accept(10);
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
        map.record_gap(20, 10);
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
}
