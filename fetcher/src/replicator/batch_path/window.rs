//! How many of a partition's batches may be on the wire at once. A broker that has no state for
//! the producer id on the partition — the fetcher's first batch there, or state the broker let
//! expire — takes *any* sequence number: a batch that overtook an earlier, failed one would be
//! appended at the earlier one's offset. So one batch at a time until the broker confirmed one
//! of this producer (it then checks every sequence), up to five after that; and after a failure
//! one at a time again until every batch that was unconfirmed at the failure is confirmed. Pure;
//! the table test is its specification.

/// Batches the broker remembers per producer and partition to answer a resent one.
const PIPELINE: usize = 5;

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

    /// The broker confirmed the oldest batch.
    pub(super) fn confirmed(&mut self) {
        self.anchored = true;
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
        ];
        for (name, events, limit) in table {
            let mut w = Window::new();
            for e in events {
                match e {
                    Confirm => w.confirmed(),
                    Fail(n) => w.failed(n),
                }
            }
            assert_eq!(w.limit(), limit, "{name}");
        }
    }
}
