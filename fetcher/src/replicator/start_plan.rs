//! The start-up decisions that need no broker: whether the recorded source identity still
//! holds, where a partition starts (or why it must not), which record pair the last-record check
//! compares, and whether the source still holds the next offset. Pure; the tables in the tests
//! are their specification.

use kmirror_state::offset_map::OffsetMap;
use kmirror_state::records::{PositionRecord, PrefixAlignment};

use super::source_check::{Finding, Known, SourceLog, judge};
use super::stop::Stop;
use crate::config::{FetcherConfig, TruncationPolicy};
use crate::cursor::Cursor;

/// The source's cluster ID must be the recorded one.
pub(super) fn check_cluster_id(recorded: &str, now: &str) -> Result<(), Stop> {
    if recorded == now {
        return Ok(());
    }
    Err(Stop::SourceClusterChanged {
        recorded: recorded.to_string(),
        now: now.to_string(),
    })
}

/// A cluster must report the ID its connection pins, when one is pinned.
pub(super) fn check_pinned(
    side: &'static str,
    pinned: Option<&str>,
    found: &str,
) -> Result<(), Stop> {
    match pinned {
        Some(pinned) if pinned != found => Err(Stop::ClusterIdMismatch {
            side,
            pinned: pinned.to_string(),
            found: found.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The source topic's ID must be the recorded one when both are known (old brokers report
/// none).
pub(super) fn check_topic_id(
    topic: &str,
    was: Option<&str>,
    now: Option<&str>,
) -> Result<(), Stop> {
    match (was, now) {
        (Some(was), Some(now)) if was != now => Err(Stop::SourceTopicRecreated {
            topic: topic.to_string(),
            was: was.to_string(),
            now: now.to_string(),
        }),
        _ => Ok(()),
    }
}

/// A recorded position must come from the source as it is now: same cluster, same topic.
pub(super) fn check_recorded_identity(
    topic: &str,
    recorded: Option<&PositionRecord>,
    cluster_id: &str,
    topic_id: Option<&str>,
) -> Result<(), Stop> {
    let Some(p) = recorded else {
        return Ok(());
    };
    check_cluster_id(&p.source_cluster_id, cluster_id)?;
    check_topic_id(topic, p.source_topic_id.as_deref(), topic_id)
}

/// What a recorded position contributes to the start.
#[derive(Debug, Clone)]
pub(super) struct Recorded {
    /// The recorded offset map.
    pub map: OffsetMap,
    /// The recorded prefix alignment.
    pub prefix: Option<PrefixAlignment>,
}

/// What start-up learnt about one partition before deciding.
#[derive(Debug, Clone)]
pub(super) struct StartFacts {
    /// The partition.
    pub partition: i32,
    /// The recorded position; `None` when the state topic has none (a first start).
    pub recorded: Option<Recorded>,
    /// The settled destination log-end offset.
    pub destination_end: i64,
    /// Source log-start offset.
    pub source_low: i64,
    /// Source high watermark.
    pub source_high: i64,
    /// The destination log end the recorded position confirmed (`None`: nothing recorded).
    pub recorded_confirmed: Option<i64>,
    /// A mirrored record whose source leader epoch the recorded position names.
    pub known: Option<Known>,
    /// Where that epoch ends on the source now (`None`: not asked, or no answer).
    pub epoch_end: Option<i64>,
}

/// How a partition starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// Resume a recorded position at the destination log end, through the recorded map.
    Resume,
    /// First start with a source log starting at 0: offsets identical.
    Identity,
    /// First start on an empty destination whose source log starts at `target` > 0 (within the
    /// alignment limit): placeholders up to `target`, then DeleteRecords.
    AlignPrefix {
        /// The source log start.
        target: i64,
    },
    /// First start with a source log starting at `from`, beyond the alignment limit: destination
    /// offset 0 holds source offset `from`, offsets are translated.
    Translated {
        /// The source log start.
        from: i64,
    },
}

/// What follows the last-record check.
#[derive(Debug)]
pub(super) enum Then {
    /// Mirror from the cursor.
    Mirror,
    /// Write placeholders up to `target` (a first start, or an alignment a crash interrupted).
    AlignPrefix {
        /// The source log start to align to.
        target: i64,
    },
    /// Retention deleted `[from, to)` before it was copied and the policy is to skip: the
    /// plan's cursor already continues at `to` (a gap in its map); persist the map first.
    SkipTruncated {
        /// First lost source offset.
        from: i64,
        /// The source log start.
        to: i64,
    },
    /// Retention deleted records and the policy is to fail. Reported after the last-record
    /// check, so that a foreign write is named first.
    Fail(Stop),
    /// The destination lost records this mirror had confirmed: the plan's cursor and map are
    /// cut back to its log end, to be persisted before the stop is reported (the next start
    /// then resumes there).
    DestinationTruncated(Stop),
}

/// The destination record the last-record check compares, and the source record it must be the
/// copy of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LastCopy {
    /// Destination offset.
    pub destination_offset: i64,
    /// Source offset.
    pub source_offset: i64,
}

/// The start decided for a partition.
#[derive(Debug)]
pub(super) struct StartPlan {
    /// How it starts.
    pub how: Start,
    /// Where it starts.
    pub cursor: Cursor,
    /// The prefix alignment (planned, in progress or done).
    pub prefix: Option<PrefixAlignment>,
    /// The last-record check, when there is a comparable copy.
    pub compare_last: Option<LastCopy>,
    /// What follows the check.
    pub then: Then,
}

impl StartPlan {
    /// Nothing is recorded yet: the identity, alignment plan and map are persisted before any
    /// data is written.
    pub fn first_start(&self) -> bool {
        self.how != Start::Resume
    }
}

/// Decides where a partition starts from the recorded position, the settled destination log end
/// and the source watermarks.
pub(super) fn decide_start(config: &FetcherConfig, facts: &StartFacts) -> Result<StartPlan, Stop> {
    let partition = facts.partition;
    let (how, map, prefix) = match &facts.recorded {
        Some(r) => (Start::Resume, r.map.clone(), r.prefix),
        None if facts.destination_end > 0 => {
            return Err(Stop::DestinationNotEmpty {
                topic: config.destination_topic.clone(),
                partition,
                records: facts.destination_end,
            });
        }
        None if facts.source_low > 0 && facts.source_low <= config.prefix_alignment_limit => (
            Start::AlignPrefix {
                target: facts.source_low,
            },
            OffsetMap::identity(),
            Some(PrefixAlignment {
                target: facts.source_low,
                done: false,
            }),
        ),
        None if facts.source_low > 0 => (
            Start::Translated {
                from: facts.source_low,
            },
            OffsetMap::starting_at(facts.source_low),
            None,
        ),
        None => (Start::Identity, OffsetMap::identity(), None),
    };
    if let Some(confirmed) = facts.recorded_confirmed
        && facts.destination_end < confirmed
    {
        return Ok(destination_truncated(config, facts, confirmed, map, prefix));
    }
    let mut cursor = Cursor::resume(partition, map, facts.destination_end);
    let log = SourceLog {
        low: facts.source_low,
        high: facts.source_high,
        epoch_end: facts.epoch_end,
    };
    match judge(cursor.next_src, facts.known, &log) {
        Finding::Diverged { from, evidence } => {
            return Err(Stop::SourceDiverged {
                topic: config.source_topic.clone(),
                partition,
                source_from: from,
                source_to: cursor.next_src,
                destination_from: cursor.map.src_to_dst(from),
                destination_to: facts.destination_end,
                evidence,
            });
        }
        Finding::Behind => {
            return Err(Stop::SourceBehind {
                topic: config.source_topic.clone(),
                partition,
                next: cursor.next_src,
                high: facts.source_high,
            });
        }
        Finding::BeyondEnd => {
            return Err(beyond_source_end(
                config,
                partition,
                cursor.next_src,
                facts.source_high,
            ));
        }
        Finding::Covered | Finding::Lost { .. } => {}
    }
    let compare_last = last_copy(&cursor, prefix);
    let then = match prefix.filter(|p| !p.done) {
        Some(p) => Then::AlignPrefix { target: p.target },
        None => match check_source_range(
            config,
            partition,
            cursor.next_src,
            facts.source_low,
            facts.source_high,
        ) {
            Ok(SourceRange::Covered) => Then::Mirror,
            Ok(SourceRange::Skip { from, to }) => {
                skip_source_gap(&mut cursor, to)
                    .map_err(|source| Stop::OffsetMapOrder { partition, source })?;
                Then::SkipTruncated { from, to }
            }
            Err(stop) => Then::Fail(stop),
        },
    };
    Ok(StartPlan {
        how,
        cursor,
        prefix,
        compare_last,
        then,
    })
}

/// The plan for a destination that ends below what was confirmed: resume at its log end, with
/// the map cut back to it and a prefix alignment that lost its placeholders to be done again.
fn destination_truncated(
    config: &FetcherConfig,
    facts: &StartFacts,
    confirmed: i64,
    mut map: OffsetMap,
    prefix: Option<PrefixAlignment>,
) -> StartPlan {
    map.truncate_to_dst(facts.destination_end);
    let cursor = Cursor::resume(facts.partition, map, facts.destination_end);
    let prefix = prefix.map(|p| PrefixAlignment {
        target: p.target,
        done: p.done && facts.destination_end >= p.target,
    });
    let stop = Stop::DestinationTruncated {
        topic: config.destination_topic.clone(),
        partition: facts.partition,
        log_end: facts.destination_end,
        confirmed,
        resume_source: cursor.next_src,
    };
    StartPlan {
        how: Start::Resume,
        cursor,
        prefix,
        compare_last: None,
        then: Then::DestinationTruncated(stop),
    }
}

/// The last destination record and its source record, when the destination holds a copy to
/// compare: not below the aligned prefix, and not when the open map segment was recorded ahead
/// (a gap, or records kept on failback) with nothing written in it yet.
pub(super) fn last_copy(cursor: &Cursor, prefix: Option<PrefixAlignment>) -> Option<LastCopy> {
    let destination_offset = cursor.confirmed_dst - 1;
    let aligned_to = prefix.map_or(0, |p| p.target);
    if destination_offset < aligned_to.max(0) {
        return None;
    }
    let open = cursor.map.last();
    if open.dst == cursor.confirmed_dst && cursor.confirmed_dst > 0 {
        return None;
    }
    Some(LastCopy {
        destination_offset,
        source_offset: cursor.map.dst_to_src(destination_offset),
    })
}

/// Where the next source offset stands against the source log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SourceRange {
    /// The source holds the next offset (or it is the log end).
    Covered,
    /// Retention deleted `[from, to)` before it was copied and the policy is to skip: continue
    /// at `to`.
    Skip {
        /// First lost source offset.
        from: i64,
        /// The source log start.
        to: i64,
    },
}

/// Checks the next source offset `next_src` against the source log `[low, high]`: beyond the end
/// means the destination holds more than the source has; below the start means retention
/// deleted records before they were copied (failed or skipped by policy).
pub(super) fn check_source_range(
    config: &FetcherConfig,
    partition: i32,
    next_src: i64,
    low: i64,
    high: i64,
) -> Result<SourceRange, Stop> {
    if next_src > high {
        return Err(beyond_source_end(config, partition, next_src, high));
    }
    if next_src < low {
        return match config.on_source_truncation {
            TruncationPolicy::Fail => Err(Stop::DataLoss {
                topic: config.source_topic.clone(),
                partition,
                next: next_src,
                log_start: low,
            }),
            TruncationPolicy::Skip => Ok(SourceRange::Skip {
                from: next_src,
                to: low,
            }),
        };
    }
    Ok(SourceRange::Covered)
}

/// Moves the cursor over source offsets retention deleted: the next copied record is source
/// `to`, at the next destination offset (a new map segment).
pub(super) fn skip_source_gap(
    cursor: &mut Cursor,
    to: i64,
) -> Result<(), kmirror_state::offset_map::MapOrderError> {
    cursor.map.record_gap(to, cursor.next_dst)?;
    cursor.next_src = to;
    Ok(())
}

fn beyond_source_end(config: &FetcherConfig, partition: i32, next_src: i64, high: i64) -> Stop {
    Stop::DestinationBeyondSource {
        topic: config.destination_topic.clone(),
        partition,
        last_copied: next_src - 1,
        source_end: high,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::ClusterSettings;
    use kmirror_state::records::StopReason;

    fn config(limit: i64, policy: TruncationPolicy) -> FetcherConfig {
        let mut c = FetcherConfig::new(
            "ns/m",
            "orders",
            "orders-copy",
            vec![0],
            ClusterSettings::new("src:9092"),
            ClusterSettings::new("dst:9092"),
        );
        c.prefix_alignment_limit = limit;
        c.on_source_truncation = policy;
        c
    }

    /// What follows the check, comparable.
    #[derive(Debug, PartialEq, Eq)]
    enum Next {
        Mirror,
        Align(i64),
        Skip(i64, i64),
        Fail(StopReason),
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Expect {
        /// how, next source offset, next destination offset, compared (dst, src), then
        Plan(Start, i64, i64, Option<(i64, i64)>, Next),
        Refused(StopReason),
    }

    use Expect::{Plan, Refused};

    /// name, recorded, destination end, source (low, high), alignment limit, policy → expected
    type StartRow = (
        &'static str,
        Option<Recorded>,
        i64,
        (i64, i64),
        i64,
        TruncationPolicy,
        Expect,
    );
    /// name, recorded, cluster ID now, topic ID now → refusal
    type IdentityRow = (
        &'static str,
        Option<PositionRecord>,
        &'static str,
        Option<&'static str>,
        Option<StopReason>,
    );
    /// name, next source offset, source (low, high), policy → expected
    type RangeRow = (
        &'static str,
        i64,
        (i64, i64),
        TruncationPolicy,
        Result<SourceRange, StopReason>,
    );
    use TruncationPolicy::{Fail, Skip};

    fn recorded(map: OffsetMap, prefix: Option<(i64, bool)>) -> Option<Recorded> {
        Some(Recorded {
            map,
            prefix: prefix.map(|(target, done)| PrefixAlignment { target, done }),
        })
    }

    fn gap_at(src: i64, dst: i64) -> OffsetMap {
        let mut map = OffsetMap::identity();
        map.record_gap(src, dst).unwrap();
        map
    }

    fn outcome(result: Result<StartPlan, Stop>) -> Expect {
        match result {
            Err(stop) => Refused(stop.reason()),
            Ok(plan) => Plan(
                plan.how,
                plan.cursor.next_src,
                plan.cursor.next_dst,
                plan.compare_last
                    .map(|c| (c.destination_offset, c.source_offset)),
                match plan.then {
                    Then::Mirror => Next::Mirror,
                    Then::AlignPrefix { target } => Next::Align(target),
                    Then::SkipTruncated { from, to } => Next::Skip(from, to),
                    Then::Fail(stop) | Then::DestinationTruncated(stop) => {
                        Next::Fail(stop.reason())
                    }
                },
            ),
        }
    }

    #[test]
    fn start_decisions() {
        let id = OffsetMap::identity;
        #[rustfmt::skip]
        let table: Vec<StartRow> = vec![
            // name, recorded, destination end, source (low, high), alignment limit, policy → expected
            ("first start, source from 0",
             None, 0, (0, 100), 1000, Fail, Plan(Start::Identity, 0, 0, None, Next::Mirror)),
            ("first start, empty source",
             None, 0, (0, 0), 1000, Fail, Plan(Start::Identity, 0, 0, None, Next::Mirror)),
            ("first start on a destination with records",
             None, 5, (0, 100), 1000, Fail, Refused(StopReason::DestinationNotEmpty)),
            ("first start on a destination with records, source above 0",
             None, 5, (300, 400), 1000, Fail, Refused(StopReason::DestinationNotEmpty)),
            ("first start, source from 300: align the prefix",
             None, 0, (300, 400), 1000, Fail, Plan(Start::AlignPrefix { target: 300 }, 0, 0, None, Next::Align(300))),
            ("first start, source start at the limit: align",
             None, 0, (300, 400), 300, Fail, Plan(Start::AlignPrefix { target: 300 }, 0, 0, None, Next::Align(300))),
            ("first start, source start beyond the limit: translate",
             None, 0, (2000, 2100), 1000, Fail, Plan(Start::Translated { from: 2000 }, 2000, 0, None, Next::Mirror)),
            ("resume mid-stream",
             recorded(id(), None), 42, (0, 100), 1000, Fail, Plan(Start::Resume, 42, 42, Some((41, 41)), Next::Mirror)),
            ("resume with nothing copied yet",
             recorded(id(), None), 0, (0, 100), 1000, Fail, Plan(Start::Resume, 0, 0, None, Next::Mirror)),
            ("resume caught up",
             recorded(id(), None), 100, (0, 100), 1000, Fail, Plan(Start::Resume, 100, 100, Some((99, 99)), Next::Mirror)),
            ("destination beyond the source end",
             recorded(id(), None), 120, (0, 100), 1000, Fail, Refused(StopReason::ForeignWrite)),
            ("source truncated, policy fail: after the last-record check",
             recorded(id(), None), 42, (60, 100), 1000, Fail, Plan(Start::Resume, 42, 42, Some((41, 41)), Next::Fail(StopReason::DataLoss))),
            ("source truncated, policy skip: a gap to the log start",
             recorded(id(), None), 42, (60, 100), 1000, Skip, Plan(Start::Resume, 60, 42, Some((41, 41)), Next::Skip(42, 60))),
            ("source starts exactly at the next offset",
             recorded(id(), None), 60, (60, 100), 1000, Fail, Plan(Start::Resume, 60, 60, Some((59, 59)), Next::Mirror)),
            ("alignment interrupted by a crash: continue it, no truncation check",
             recorded(id(), Some((300, false))), 120, (300, 400), 1000, Fail, Plan(Start::Resume, 120, 120, None, Next::Align(300))),
            ("alignment done, nothing copied after it",
             recorded(id(), Some((300, true))), 300, (300, 400), 1000, Fail, Plan(Start::Resume, 300, 300, None, Next::Mirror)),
            ("alignment done, copies after it",
             recorded(id(), Some((300, true))), 350, (300, 400), 1000, Fail, Plan(Start::Resume, 350, 350, Some((349, 349)), Next::Mirror)),
            ("gap recorded ahead, nothing written in it yet",
             recorded(gap_at(20, 10), None), 10, (0, 100), 1000, Fail, Plan(Start::Resume, 20, 10, None, Next::Mirror)),
            ("gap with copies after it",
             recorded(gap_at(20, 10), None), 15, (0, 100), 1000, Fail, Plan(Start::Resume, 25, 15, Some((14, 24)), Next::Mirror)),
            ("translated map resumes through the map",
             recorded(OffsetMap::starting_at(2000), None), 5, (2000, 2100), 1000, Fail, Plan(Start::Resume, 2005, 5, Some((4, 2004)), Next::Mirror)),
            ("translated map, retention passed the mirror, skip",
             recorded(OffsetMap::starting_at(2000), None), 5, (2100, 2200), 1000, Skip, Plan(Start::Resume, 2100, 5, Some((4, 2004)), Next::Skip(2005, 2100))),
            ("translated map, nothing copied yet",
             recorded(OffsetMap::starting_at(2000), None), 0, (2000, 2100), 1000, Fail, Plan(Start::Resume, 2000, 0, None, Next::Mirror)),
        ];
        for (name, recorded, destination_end, (source_low, source_high), limit, policy, expect) in
            table
        {
            let facts = StartFacts {
                partition: 0,
                recorded_confirmed: recorded.as_ref().map(|_| destination_end),
                recorded,
                destination_end,
                source_low,
                source_high,
                known: None,
                epoch_end: None,
            };
            let result = decide_start(&config(limit, policy), &facts);
            assert_eq!(outcome(result), expect, "{name}");
        }
    }

    /// The fields the older tables do not set.
    fn facts_rest() -> StartFacts {
        StartFacts {
            partition: 0,
            recorded: None,
            destination_end: 0,
            source_low: 0,
            source_high: 0,
            recorded_confirmed: None,
            known: None,
            epoch_end: None,
        }
    }

    #[test]
    fn a_source_that_diverged_or_a_destination_that_lost_records() {
        let known = |offset, epoch| Some(Known { offset, epoch });
        let id = || recorded(OffsetMap::identity(), None);
        #[rustfmt::skip]
        let table: Vec<(&str, StartFacts, Expect)> = vec![
            ("recorded epoch still holds",
             StartFacts { recorded: id(), recorded_confirmed: Some(15), destination_end: 15, source_high: 15, known: known(14, 3), epoch_end: Some(15), ..facts_rest() },
             Plan(Start::Resume, 15, 15, Some((14, 14)), Next::Mirror)),
            ("unclean election replaced 10..14 while stopped",
             StartFacts { recorded: id(), recorded_confirmed: Some(15), destination_end: 15, source_high: 15, known: known(14, 3), epoch_end: Some(10), ..facts_rest() },
             Refused(StopReason::SourceDiverged)),
            ("diverged and shorter: named as divergence, not a foreign write",
             StartFacts { recorded: id(), recorded_confirmed: Some(15), destination_end: 15, source_high: 12, known: known(14, 3), epoch_end: Some(10), ..facts_rest() },
             Refused(StopReason::SourceDiverged)),
            ("new leader's watermark behind, its log agrees: retried",
             StartFacts { recorded: id(), recorded_confirmed: Some(15), destination_end: 15, source_high: 12, known: known(14, 3), epoch_end: Some(15), ..facts_rest() },
             Refused(StopReason::Error)),
            ("beyond the source end, nothing known",
             StartFacts { recorded: id(), recorded_confirmed: Some(15), destination_end: 15, source_high: 12, ..facts_rest() },
             Refused(StopReason::ForeignWrite)),
            ("destination recreated: cut back and reported",
             StartFacts { recorded: id(), recorded_confirmed: Some(100), destination_end: 0, source_high: 100, ..facts_rest() },
             Plan(Start::Resume, 0, 0, None, Next::Fail(StopReason::DestinationTruncated))),
            ("destination lost its last records",
             StartFacts { recorded: id(), recorded_confirmed: Some(100), destination_end: 90, source_high: 100, ..facts_rest() },
             Plan(Start::Resume, 90, 90, None, Next::Fail(StopReason::DestinationTruncated))),
            ("destination ahead of the recorded position (records after the last position write)",
             StartFacts { recorded: id(), recorded_confirmed: Some(90), destination_end: 100, source_high: 100, ..facts_rest() },
             Plan(Start::Resume, 100, 100, Some((99, 99)), Next::Mirror)),
        ];
        for (name, facts, expect) in table {
            let result = decide_start(&config(1000, Fail), &facts);
            assert_eq!(outcome(result), expect, "{name}");
        }
    }

    #[test]
    fn a_truncated_destination_cuts_the_map_and_the_alignment_back() {
        let mut map = OffsetMap::identity();
        map.record_gap(350, 340).unwrap();
        let facts = StartFacts {
            recorded: recorded(map, Some((300, true))),
            recorded_confirmed: Some(400),
            destination_end: 0,
            source_low: 300,
            source_high: 500,
            ..facts_rest()
        };
        let plan = decide_start(&config(1000, Fail), &facts).unwrap();
        assert_eq!(plan.cursor.map, OffsetMap::identity());
        assert_eq!(
            plan.prefix,
            Some(PrefixAlignment {
                target: 300,
                done: false
            }),
            "the placeholders went with the records: align again"
        );
        let Then::DestinationTruncated(stop) = plan.then else {
            panic!("a destination truncation");
        };
        let message = stop.to_string();
        assert!(message.contains("ends at offset 0"), "{message}");
        assert!(message.contains("offsets 0–399"), "{message}");
        let facts = StartFacts {
            recorded: recorded(OffsetMap::identity(), None),
            recorded_confirmed: Some(15),
            destination_end: 15,
            source_high: 15,
            known: Some(Known {
                offset: 14,
                epoch: 3,
            }),
            epoch_end: Some(10),
            ..facts_rest()
        };
        let message = decide_start(&config(1000, Fail), &facts)
            .unwrap_err()
            .to_string();
        assert!(message.contains("source offsets 10–14"), "{message}");
        assert!(message.contains("destination offsets 10–14"), "{message}");
    }

    #[test]
    fn skipping_records_the_gap_in_the_map() {
        let facts = StartFacts {
            partition: 0,
            recorded: recorded(OffsetMap::identity(), None),
            destination_end: 42,
            source_low: 60,
            source_high: 100,
            ..facts_rest()
        };
        let plan = decide_start(&config(1000, Skip), &facts).unwrap();
        assert_eq!(plan.cursor.map.src_to_dst(60), 42);
        assert_eq!(plan.cursor.map.dst_to_src(41), 41);
        assert_eq!(plan.cursor.confirmed_next_src(), 60);
        assert!(!plan.first_start());
    }

    #[test]
    fn refusals_name_the_partition_and_the_offsets() {
        let facts = StartFacts {
            partition: 3,
            recorded: None,
            destination_end: 7,
            source_low: 0,
            source_high: 10,
            ..facts_rest()
        };
        let message = decide_start(&config(1000, Fail), &facts)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("orders-copy[3] already holds 7 records"),
            "{message}"
        );
        let facts = StartFacts {
            partition: 3,
            recorded: recorded(OffsetMap::identity(), None),
            destination_end: 120,
            source_low: 0,
            source_high: 100,
            ..facts_rest()
        };
        let message = decide_start(&config(1000, Fail), &facts)
            .unwrap_err()
            .to_string();
        assert!(message.contains("up to source offset 119"), "{message}");
        assert!(message.contains("log ends at 100"), "{message}");
    }

    #[test]
    fn identity_checks() {
        let position = |cluster: &str, topic_id: Option<&str>| PositionRecord {
            source_cluster_id: cluster.into(),
            source_topic_id: topic_id.map(String::from),
            ..Default::default()
        };
        #[rustfmt::skip]
        let table: Vec<IdentityRow> = vec![
            // name, recorded, cluster ID now, topic ID now → refusal
            ("first start", None, "c1", Some("t1"), None),
            ("same source", Some(position("c1", Some("t1"))), "c1", Some("t1"), None),
            ("cluster replaced", Some(position("c1", Some("t1"))), "c2", Some("t1"), Some(StopReason::SourceClusterChanged)),
            ("topic recreated", Some(position("c1", Some("t1"))), "c1", Some("t2"), Some(StopReason::SourceTopicRecreated)),
            ("both changed: the cluster is named", Some(position("c1", Some("t1"))), "c2", Some("t2"), Some(StopReason::SourceClusterChanged)),
            ("source upgraded to topic IDs", Some(position("c1", None)), "c1", Some("t1"), None),
            ("source reports no topic ID", Some(position("c1", Some("t1"))), "c1", None, None),
        ];
        for (name, recorded, cluster, topic_id, expect) in table {
            let result = check_recorded_identity("orders", recorded.as_ref(), cluster, topic_id);
            assert_eq!(result.err().map(|s| s.reason()), expect, "{name}");
        }
    }

    #[test]
    fn source_range_checks() {
        #[rustfmt::skip]
        let table: Vec<RangeRow> = vec![
            // name, next source offset, source (low, high), policy → expected
            ("inside", 50, (0, 100), Fail, Ok(SourceRange::Covered)),
            ("at the log end", 100, (0, 100), Fail, Ok(SourceRange::Covered)),
            ("at the log start", 60, (60, 100), Fail, Ok(SourceRange::Covered)),
            ("beyond the log end", 101, (0, 100), Fail, Err(StopReason::ForeignWrite)),
            ("beyond the log end, skip policy", 101, (0, 100), Skip, Err(StopReason::ForeignWrite)),
            ("below the log start, fail", 40, (60, 100), Fail, Err(StopReason::DataLoss)),
            ("below the log start, skip", 40, (60, 100), Skip, Ok(SourceRange::Skip { from: 40, to: 60 })),
            ("log emptied by retention, skip", 40, (100, 100), Skip, Ok(SourceRange::Skip { from: 40, to: 100 })),
        ];
        for (name, next, (low, high), policy, expect) in table {
            let result = check_source_range(&config(1000, policy), 0, next, low, high);
            assert_eq!(result.map_err(|s| s.reason()), expect, "{name}");
        }
    }
}
