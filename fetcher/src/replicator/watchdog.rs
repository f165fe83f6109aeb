//! The stall watchdogs: records in flight while the destination confirms none of them for too
//! long is a stall, not patience, and so is a source partition that holds records the consumer
//! does not read, or whose leader does not answer, while nothing moves. librdkafka retries
//! retriable errors in silence (until `message.timeout.ms`, 5 minutes, on the producer; for ever
//! on the consumer) and can stay stuck on stale metadata after brokers restart; the watchdogs
//! turn that into a warning and then a stop with a reason, and a new start gets new clients.

use std::time::{Duration, Instant};

/// What the watchdog makes of the latest look at the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watch {
    /// Confirmations arrive, or nothing waits for one.
    Fine,
    /// Nothing confirmed for a quarter of the stall timeout: said once per wait.
    Warn { in_flight: i32, waited: Duration },
    /// Nothing confirmed for the whole stall timeout.
    Stalled { in_flight: i32, waited: Duration },
}

/// Tracks how long records have waited for a delivery report.
#[derive(Debug)]
pub(super) struct Watchdog {
    stall_after: Duration,
    /// Since when records are in flight with no report.
    waiting_since: Option<Instant>,
    warned: bool,
}

impl Watchdog {
    /// A watchdog that calls `stall_after` without a confirmation a stall.
    pub(super) fn new(stall_after: Duration) -> Watchdog {
        Watchdog {
            stall_after,
            waiting_since: None,
            warned: false,
        }
    }

    /// Looks at the producer: `in_flight` records it still holds, `reports` delivery reports
    /// received since the last look.
    pub(super) fn observe(&mut self, now: Instant, in_flight: i32, reports: usize) -> Watch {
        if reports > 0 || in_flight <= 0 {
            self.waiting_since = (in_flight > 0).then_some(now);
            self.warned = false;
            return Watch::Fine;
        }
        let waited = now.saturating_duration_since(*self.waiting_since.get_or_insert(now));
        if waited >= self.stall_after {
            Watch::Stalled { in_flight, waited }
        } else if !self.warned && waited >= self.stall_after / 4 {
            self.warned = true;
            Watch::Warn { in_flight, waited }
        } else {
            Watch::Fine
        }
    }
}

/// What a look at one source partition found wrong, held for the whole stall timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SourceStall {
    /// The source holds records up to `high`, and nothing after `next` was read.
    Unread {
        next: i64,
        high: i64,
        waited: Duration,
    },
    /// No watermark query was answered, and nothing after `next` was read.
    Unanswered { next: i64, waited: Duration },
}

/// Watches one source partition's progress against its high watermark.
#[derive(Debug)]
pub(super) struct SourceWatch {
    stall_after: Duration,
    /// The next source offset at the last look, and since when something has been wrong
    /// without it moving.
    last_next: Option<i64>,
    since: Option<Instant>,
}

impl SourceWatch {
    /// A watch calling `stall_after` without progress a stall.
    pub(super) fn new(stall_after: Duration) -> SourceWatch {
        SourceWatch {
            stall_after,
            last_next: None,
            since: None,
        }
    }

    /// Looks at the partition: `next` is the next source offset read (or skipped), `high` the
    /// source end just queried (None: the query was not answered). The query carries the
    /// consumer's isolation level, so with `read_committed` it is the last stable offset: an
    /// open transaction holds it down and is no stall.
    pub(super) fn observe(
        &mut self,
        now: Instant,
        next: i64,
        high: Option<i64>,
    ) -> Option<SourceStall> {
        let moved = self.last_next != Some(next);
        self.last_next = Some(next);
        let wrong = match high {
            None => true,
            Some(h) => h > next,
        };
        if !wrong {
            self.since = None;
            return None;
        }
        if moved {
            // Progress up to now: the wait starts here.
            self.since = Some(now);
            return None;
        }
        let waited = now.saturating_duration_since(*self.since.get_or_insert(now));
        if waited < self.stall_after {
            return None;
        }
        Some(match high {
            Some(high) => SourceStall::Unread { next, high, waited },
            None => SourceStall::Unanswered { next, waited },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look at a source partition: (second, next offset, high watermark).
    type SourceLook = (u64, i64, Option<i64>);

    #[test]
    fn a_source_stalls_only_when_nothing_moves_while_records_wait_or_it_does_not_answer() {
        let s = |n| Duration::from_secs(n);
        #[rustfmt::skip]
        let table: Vec<(&str, Vec<SourceLook>, Option<SourceStall>)> = vec![
            // name, looks (second, next, high) → the last verdict
            ("caught up for ever", vec![(0, 10, Some(10)), (500, 10, Some(10))], None),
            ("behind but reading",
             vec![(0, 10, Some(50)), (100, 20, Some(60)), (200, 30, Some(70))], None),
            ("behind and nothing read for the whole timeout",
             vec![(0, 10, Some(50)), (60, 10, Some(50)), (120, 10, Some(55))],
             Some(SourceStall::Unread { next: 10, high: 55, waited: s(120) })),
            ("behind, not yet the whole timeout",
             vec![(0, 10, Some(50)), (119, 10, Some(50))], None),
            ("records arrive after a long idle: the wait starts then",
             vec![(0, 10, Some(10)), (1000, 10, Some(10)), (1001, 10, Some(12)), (1100, 10, Some(12))],
             None),
            ("no answer while nothing moves",
             vec![(0, 10, Some(10)), (1, 10, None), (121, 10, None)],
             Some(SourceStall::Unanswered { next: 10, waited: s(120) })),
            ("no answer but records still arrive",
             vec![(0, 10, None), (100, 20, None), (200, 30, None)], None),
            ("an answer in between restarts the wait",
             vec![(0, 10, None), (100, 10, Some(10)), (101, 10, None), (220, 10, None)], None),
            ("the first look already behind counts",
             vec![(0, 10, Some(50)), (120, 10, Some(50))],
             Some(SourceStall::Unread { next: 10, high: 50, waited: s(120) })),
        ];
        for (name, looks, expect) in table {
            let t0 = Instant::now();
            let mut w = SourceWatch::new(s(120));
            let mut last = None;
            for (at, next, high) in looks {
                last = w.observe(t0 + s(at), next, high);
            }
            assert_eq!(last, expect, "{name}");
        }
    }

    /// A look at the producer: (second, records in flight, reports since the last look).
    type Look = (u64, i32, usize);

    #[test]
    fn stalls_only_when_records_wait_without_any_report() {
        let s = |n| Duration::from_secs(n);
        #[rustfmt::skip]
        let table: Vec<(&str, Vec<Look>, Watch)> = vec![
            // name, looks (second, in flight, reports) → the last verdict
            ("idle: nothing in flight", vec![(0, 0, 0), (500, 0, 0)], Watch::Fine),
            ("reports keep coming", vec![(0, 5, 0), (100, 5, 1), (200, 5, 1)], Watch::Fine),
            ("long idle, then a record: the wait starts at the record",
             vec![(0, 0, 0), (1000, 3, 0), (1010, 3, 0)], Watch::Fine),
            ("a quarter of the timeout: warned", vec![(0, 3, 0), (30, 3, 0)],
             Watch::Warn { in_flight: 3, waited: s(30) }),
            ("warned once per wait", vec![(0, 3, 0), (30, 3, 0), (40, 3, 0)], Watch::Fine),
            ("the whole timeout without a report: stalled", vec![(0, 3, 0), (30, 3, 0), (120, 4, 0)],
             Watch::Stalled { in_flight: 4, waited: s(120) }),
            ("a report restarts the wait", vec![(0, 3, 0), (100, 3, 1), (219, 3, 0)],
             Watch::Warn { in_flight: 3, waited: s(119) }),
            ("drained in between restarts the wait", vec![(0, 3, 0), (100, 0, 0), (101, 2, 0), (220, 2, 0)],
             Watch::Warn { in_flight: 2, waited: s(119) }),
        ];
        for (name, looks, expect) in table {
            let t0 = Instant::now();
            let mut w = Watchdog::new(s(120));
            let mut last = Watch::Fine;
            for (at, in_flight, reports) in looks {
                last = w.observe(t0 + s(at), in_flight, reports);
            }
            assert_eq!(last, expect, "{name}");
        }
    }
}
