//! The stall watchdog: records in flight while the destination confirms none of them for too
//! long is a stall, not patience. librdkafka retries retriable errors in silence until
//! `message.timeout.ms` (5 minutes), and can stay stuck on stale metadata after a broker
//! restart; the watchdog turns both into a warning and then a stop with a reason.

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

#[cfg(test)]
mod tests {
    use super::*;

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
