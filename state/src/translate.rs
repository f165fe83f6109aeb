//! Translating single offsets through a partition's offset map, for applications that keep
//! their own offsets (`kubectl mirror translate`, run by `kmirror-verify --translate`). Pure.
//!
//! Source to destination uses the translation group sync commits
//! ([`OffsetMap::translate_committed`]): a source offset `O` — the next record a consumer would
//! read — goes to the destination offset of the first copied record at or after `O`. An offset
//! that holds no copied record (a transaction marker, an aborted record, a record compaction
//! removed before it was copied) therefore goes to the next copied record's destination offset,
//! and an offset after the last copy but not beyond what the mirror has read goes to the end of
//! the copies (where the next copy will land). Where group sync would clamp, this reports why
//! instead of a number: never a guess.
//!
//! Destination to source gives the source offset of the record copied to destination offset `D`
//! (or, for the end of the copies, the source offset after the last copy), so a source offset
//! of a copied record survives the round trip.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::offset_map::OffsetMap;

/// Which way to translate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Source offsets to destination offsets.
    #[default]
    SourceToDestination,
    /// Destination offsets to source offsets.
    DestinationToSource,
}

impl Direction {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::SourceToDestination => "source-to-destination",
            Direction::DestinationToSource => "destination-to-source",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Direction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "source-to-destination" => Ok(Direction::SourceToDestination),
            "destination-to-source" => Ok(Direction::DestinationToSource),
            other => Err(format!(
                "unknown direction {other:?} (source-to-destination or destination-to-source)"
            )),
        }
    }
}

/// One offset to translate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Partition.
    pub partition: i32,
    /// Offset on the side translated from.
    pub offset: i64,
}

/// Parses `P:O[,P:O…]` (partition and offset pairs).
pub fn parse_requests(text: &str) -> Result<Vec<Request>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (p, o) = pair
                .split_once(':')
                .ok_or_else(|| format!("{pair:?} is not PARTITION:OFFSET"))?;
            let partition = p
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|p| *p >= 0)
                .ok_or_else(|| format!("{pair:?}: the partition is not a number >= 0"))?;
            let offset = o
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|o| *o >= 0)
                .ok_or_else(|| format!("{pair:?}: the offset is not a number >= 0"))?;
            Ok(Request { partition, offset })
        })
        .collect()
}

/// What the mirror has done on a partition, besides its map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The next source offset to copy: every record below it that is copied is on the
    /// destination.
    pub source_end: i64,
    /// The destination offset after the last copy (where the next copy lands).
    pub copies_end: i64,
    /// The destination partition's log start offset (records below it were deleted there).
    pub destination_start: i64,
    /// Every destination offset equals its source offset.
    pub identical: bool,
}

/// How an offset translated, or why it did not.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum How {
    /// The partition's offsets are identical on both sides.
    Identical,
    /// Through the offset map.
    Mapped,
    /// Not copied yet: beyond what the mirror has read (source) or past the copies
    /// (destination).
    NotMirrored,
    /// Below the start of the offset map: the map's part for those offsets was dropped when
    /// the source log start passed them.
    BeforeMap,
    /// The destination record was deleted there (below its log start).
    DeletedOnDestination,
    /// The destination record is not a copy (a record kept from a divergence on failback).
    NotACopy,
    /// No offset map is recorded for the partition.
    Unknown,
}

impl How {
    /// True when the entry has a translated offset.
    pub fn translated(self) -> bool {
        matches!(self, How::Identical | How::Mapped)
    }
}

/// One translated (or untranslatable) offset.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Translation {
    /// Partition.
    pub partition: i32,
    /// The offset asked for.
    pub offset: i64,
    /// The translated offset; absent when it cannot be translated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub translated: Option<i64>,
    /// How, or why not.
    pub how: How,
    /// Why it cannot be translated, for a person.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn refused(r: Request, how: How, reason: String) -> Translation {
    Translation {
        partition: r.partition,
        offset: r.offset,
        translated: None,
        how,
        reason: Some(reason),
    }
}

fn done(r: Request, map: &OffsetMap, extent: &Extent, translated: i64) -> Translation {
    Translation {
        partition: r.partition,
        offset: r.offset,
        translated: Some(translated),
        how: if extent.identical && map.is_identity() {
            How::Identical
        } else {
            How::Mapped
        },
        reason: None,
    }
}

/// The entry for a partition without a recorded map.
pub fn unknown(r: Request) -> Translation {
    refused(
        r,
        How::Unknown,
        format!(
            "no offset map is recorded for partition {} (is it mirrored by this mirror?)",
            r.partition
        ),
    )
}

/// Translates one offset of a partition mirrored with `map` and `extent`.
pub fn translate(
    map: &OffsetMap,
    extent: &Extent,
    direction: Direction,
    r: Request,
) -> Translation {
    let first = map.segments()[0];
    match direction {
        Direction::SourceToDestination => {
            let o = r.offset;
            if o > extent.source_end {
                return refused(
                    r,
                    How::NotMirrored,
                    format!(
                        "source offset {o} is not mirrored yet: the next source offset to copy \
                         is {}",
                        extent.source_end
                    ),
                );
            }
            if o < first.src && first.dst > 0 {
                return refused(
                    r,
                    How::BeforeMap,
                    format!(
                        "source offset {o} is below the offset map's start (source offset {}): \
                         it was below the source log start when that part of the map was dropped",
                        first.src
                    ),
                );
            }
            let exact = map.src_to_dst(o);
            if exact < extent.destination_start {
                return refused(
                    r,
                    How::DeletedOnDestination,
                    format!(
                        "its destination offset {exact} is below the destination log start {} \
                         (deleted there)",
                        extent.destination_start
                    ),
                );
            }
            // At most the end of the copies: an offset after the last copy (not beyond what was
            // read) resumes where the next copy lands.
            let translated =
                map.translate_committed(o, (extent.destination_start, extent.copies_end));
            done(r, map, extent, translated)
        }
        Direction::DestinationToSource => {
            let d = r.offset;
            if d > extent.copies_end {
                return refused(
                    r,
                    How::NotMirrored,
                    format!(
                        "destination offset {d} is past the copies, which end at destination \
                         offset {}",
                        extent.copies_end
                    ),
                );
            }
            if d < first.dst {
                return refused(
                    r,
                    How::BeforeMap,
                    format!(
                        "destination offset {d} is below the offset map's start (destination \
                         offset {})",
                        first.dst
                    ),
                );
            }
            let src = map.dst_to_src(d);
            let next = map.segments().iter().find(|s| s.dst > d);
            if next.is_some_and(|n| src >= n.src) {
                return refused(
                    r,
                    How::NotACopy,
                    format!(
                        "destination offset {d} holds a record that is not a copy of a source \
                         record (kept from a divergence)"
                    ),
                );
            }
            done(r, map, extent, src)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offset_map::Segment;

    /// The pairs parsed, or a part of the error.
    type Expected = Result<Vec<(i32, i64)>, &'static str>;

    #[test]
    fn requests_parse() {
        #[rustfmt::skip]
        let table: [(&str, Expected); 7] = [
            ("0:120", Ok(vec![(0, 120)])),
            ("0:120,1:77", Ok(vec![(0, 120), (1, 77)])),
            (" 2 : 5 , ", Ok(vec![(2, 5)])),
            ("3", Err("is not PARTITION:OFFSET")),
            ("a:1", Err("the partition is not a number")),
            ("1:-4", Err("the offset is not a number >= 0")),
            ("-1:4", Err("the partition is not a number >= 0")),
        ];
        for (text, want) in table {
            let got = parse_requests(text);
            match want {
                Ok(pairs) => {
                    let pairs: Vec<Request> = pairs
                        .into_iter()
                        .map(|(partition, offset)| Request { partition, offset })
                        .collect();
                    assert_eq!(got, Ok(pairs), "{text:?}");
                }
                Err(part) => {
                    let e = got.expect_err(text);
                    assert!(e.contains(part), "{text:?}: {e}");
                }
            }
        }
        assert_eq!(
            "destination-to-source".parse::<Direction>(),
            Ok(Direction::DestinationToSource)
        );
        assert!("sideways".parse::<Direction>().is_err());
    }

    fn req(offset: i64) -> Request {
        Request {
            partition: 0,
            offset,
        }
    }

    #[test]
    fn source_offsets_translate_as_group_sync_or_say_why_not() {
        // Source: records 0,1,2; a commit marker at 3; records 4,5; an aborted transaction and
        // its marker 6..9; records 10..=14. Copies 0..=9 on the destination; next source 15.
        let mut map = OffsetMap::identity();
        map.record_gap(4, 3).unwrap();
        map.record_gap(10, 5).unwrap();
        let extent = Extent {
            source_end: 15,
            copies_end: 10,
            destination_start: 0,
            identical: false,
        };
        use How::*;
        #[rustfmt::skip]
        let table = [
            // source offset → (destination offset, how)
            (0, Some(0), Mapped),
            (2, Some(2), Mapped),
            (3, Some(3), Mapped),   // the marker: the next record (4) is at 3
            (5, Some(4), Mapped),
            (6, Some(5), Mapped),   // aborted records and their marker: the next record, 10
            (9, Some(5), Mapped),
            (10, Some(5), Mapped),
            (14, Some(9), Mapped),
            (15, Some(10), Mapped), // the end: where the next copy lands
            (16, None, NotMirrored),
        ];
        for (o, want, how) in table {
            let t = translate(&map, &extent, Direction::SourceToDestination, req(o));
            assert_eq!(
                (t.translated, t.how),
                (want, how),
                "source offset {o}: {t:?}"
            );
            assert_eq!(t.reason.is_some(), want.is_none(), "{t:?}");
            if let Some(d) = want {
                assert_eq!(
                    d,
                    map.translate_committed(o, (0, extent.copies_end)),
                    "as group sync commits it"
                );
            }
        }
        // A trailing gap the fetcher has read past but not recorded yet: the next copy's place.
        let trailing = Extent {
            source_end: 18,
            ..extent
        };
        let t = translate(&map, &trailing, Direction::SourceToDestination, req(17));
        assert_eq!((t.translated, t.how), (Some(10), Mapped));
        // The destination deleted its first records.
        let retained = Extent {
            destination_start: 4,
            ..extent
        };
        let t = translate(&map, &retained, Direction::SourceToDestination, req(2));
        assert_eq!(t.how, DeletedOnDestination, "{t:?}");
        let t = translate(&map, &retained, Direction::SourceToDestination, req(5));
        assert_eq!(t.translated, Some(4));
    }

    #[test]
    fn identical_partitions_and_dropped_map_starts() {
        let map = OffsetMap::identity();
        let extent = Extent {
            source_end: 50,
            copies_end: 50,
            destination_start: 0,
            identical: true,
        };
        for direction in [
            Direction::SourceToDestination,
            Direction::DestinationToSource,
        ] {
            let t = translate(&map, &extent, direction, req(7));
            assert_eq!((t.translated, t.how), (Some(7), How::Identical));
            let t = translate(&map, &extent, direction, req(51));
            assert_eq!(t.how, How::NotMirrored, "{direction}");
        }
        // A source log that started at 5: offsets below it resume at the first copy.
        let start = OffsetMap::starting_at(5);
        let extent = Extent {
            source_end: 9,
            copies_end: 4,
            destination_start: 0,
            identical: false,
        };
        let t = translate(&start, &extent, Direction::SourceToDestination, req(2));
        assert_eq!((t.translated, t.how), (Some(0), How::Mapped));
        // A map whose first segments were dropped (below the source log start).
        let dropped = OffsetMap::from_segments(vec![Segment { src: 30, dst: 20 }]).unwrap();
        let extent = Extent {
            source_end: 40,
            copies_end: 30,
            destination_start: 0,
            identical: false,
        };
        let t = translate(&dropped, &extent, Direction::SourceToDestination, req(29));
        assert_eq!(t.how, How::BeforeMap, "{t:?}");
        let t = translate(&dropped, &extent, Direction::DestinationToSource, req(19));
        assert_eq!(t.how, How::BeforeMap, "{t:?}");
        let t = translate(&dropped, &extent, Direction::DestinationToSource, req(25));
        assert_eq!((t.translated, t.how), (Some(35), How::Mapped));
    }

    #[test]
    fn destination_offsets_translate_back() {
        let mut map = OffsetMap::identity();
        map.record_gap(4, 3).unwrap();
        map.record_gap(10, 5).unwrap();
        let extent = Extent {
            source_end: 15,
            copies_end: 10,
            destination_start: 0,
            identical: false,
        };
        // Every copied source record survives the round trip.
        for o in [0, 1, 2, 4, 5, 10, 11, 14] {
            let there = translate(&map, &extent, Direction::SourceToDestination, req(o));
            let back = translate(
                &map,
                &extent,
                Direction::DestinationToSource,
                req(there.translated.unwrap()),
            );
            assert_eq!(back.translated, Some(o), "source offset {o}: {back:?}");
        }
        let end = translate(&map, &extent, Direction::DestinationToSource, req(10));
        assert_eq!(end.translated, Some(15), "the end of the copies");
        let past = translate(&map, &extent, Direction::DestinationToSource, req(11));
        assert_eq!(past.how, How::NotMirrored);
        // Records kept from a divergence: destination 5..=8 are not copies.
        let kept =
            OffsetMap::from_segments(vec![Segment { src: 0, dst: 0 }, Segment { src: 5, dst: 9 }])
                .unwrap();
        let extent = Extent {
            source_end: 8,
            copies_end: 12,
            destination_start: 0,
            identical: false,
        };
        for (d, how) in [
            (4, How::Mapped),
            (5, How::NotACopy),
            (8, How::NotACopy),
            (9, How::Mapped),
        ] {
            let t = translate(&kept, &extent, Direction::DestinationToSource, req(d));
            assert_eq!(t.how, how, "destination offset {d}: {t:?}");
        }
    }
}
