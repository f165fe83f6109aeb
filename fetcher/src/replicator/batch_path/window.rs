//! How many of a partition's batches may be on the wire at once. A broker that has no state for
//! the producer id on the partition — the fetcher's first batch there, or state the broker let
//! expire — takes *any* sequence number: a batch that overtook an earlier, failed one would be
//! appended at the earlier one's offset. So one batch at a time until the broker confirmed one
//! of this producer (it then checks every sequence), up to five after that; and after a failure
//! one at a time again until every batch that was unconfirmed at the failure is confirmed.
//!
//! A broker drops a producer's state once its last batch's newest timestamp is older than
//! `producer.id.expiration.ms` (a day by default; checked every ten minutes) — with CreateTime
//! topics that is the *source* timestamp, so while old records are copied the state can vanish
//! between two batches. A confirmation of such a batch anchors nothing: one at a time. Pure; the
//! table test is its specification.

/// Batches the broker remembers per producer and partition to answer a resent one.
const PIPELINE: usize = 5;

/// A batch whose newest timestamp is older than this may leave the broker without state for
/// the producer (the broker's default `producer.id.expiration.ms` is 24 hours).
pub(super) const STATE_EXPIRY_MARGIN_MS: i64 = 23 * 3_600_000;

/// A partition's send window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    /// A batch of this producer was confirmed on the partition: the broker checks sequences.
    anchored: bool,
    /// Batches still to confirm one at a time after a failure.
    recovering: usize,
}

impl Window {
    /// A new producer's window: one batch at a time.
    pub(super) fn new() -> Window {
        Window {
            anchored: false,
            recovering: 0,
        }
    }

    /// How many batches may be on the wire now.
    pub(super) fn limit(&self) -> usize {
        if self.anchored && self.recovering == 0 {
            PIPELINE
        } else {
            1
        }
    }

    /// The broker confirmed the oldest batch, whose newest record timestamp is `max_timestamp`
    /// (-1: none), at `now_ms`: the broker keeps state for the producer unless that timestamp is
    /// so old that it may drop it.
    pub(super) fn confirmed(&mut self, max_timestamp: i64, now_ms: i64) {
        self.anchored = max_timestamp < 0 || now_ms - max_timestamp < STATE_EXPIRY_MARGIN_MS;
        self.recovering = self.recovering.saturating_sub(1);
    }

    /// A batch failed with `unconfirmed` batches not yet confirmed (the failed one included):
    /// they are sent again one at a time.
    pub(super) fn failed(&mut self, unconfirmed: usize) {
        self.recovering = self.recovering.max(unconfirmed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    enum Ev {
        Confirm,
        /// A confirmation of a batch whose newest timestamp is a day old.
        ConfirmOld,
        Fail(usize),
    }

    #[test]
    fn one_batch_at_a_time_until_the_broker_knows_the_producer_and_after_a_failure() {
        use Ev::*;
        #[rustfmt::skip]
        let table: Vec<(&str, Vec<Ev>, usize)> = vec![
            ("a new producer: one at a time", vec![], 1),
            ("a failure before any confirmation: still one", vec![Fail(1)], 1),
            ("the first confirmation opens the window", vec![Confirm], 5),
            ("a failure with four unconfirmed: one at a time", vec![Confirm, Fail(4)], 1),
            ("three of the four confirmed: still one", vec![Confirm, Fail(4), Confirm, Confirm, Confirm], 1),
            ("all four confirmed: open again", vec![Confirm, Fail(4), Confirm, Confirm, Confirm, Confirm], 5),
            ("a second failure while recovering does not shorten the count",
             vec![Confirm, Fail(4), Confirm, Fail(2), Confirm, Confirm], 1),
            ("... and the count ends", vec![Confirm, Fail(4), Confirm, Fail(2), Confirm, Confirm, Confirm], 5),
            ("a failure first, then confirmations: anchored once the failed ones are in",
             vec![Fail(2), Confirm, Confirm], 5),
            ("old records: the broker may drop the producer's state, one at a time",
             vec![Confirm, ConfirmOld], 1),
            ("fresh records again: pipelined again", vec![ConfirmOld, Confirm], 5),
        ];
        for (name, events, limit) in table {
            let mut w = Window::new();
            let now = 1_700_000_000_000;
            for e in events {
                match e {
                    Confirm => w.confirmed(now - 1_000, now),
                    ConfirmOld => w.confirmed(now - 24 * 3_600_000, now),
                    Fail(n) => w.failed(n),
                }
            }
            assert_eq!(w.limit(), limit, "{name}");
        }
    }
}
