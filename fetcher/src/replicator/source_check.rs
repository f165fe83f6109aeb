//! Whether the source still holds what was mirrored, from its watermarks and where the leader
//! epoch of a mirrored record ends now. Asked at start and whenever the consumer reports a reset
//! (librdkafka stops fetching a partition after an out-of-range offset or a detected log
//! truncation when `auto.offset.reset` is `error`): the answer is to re-position, to wait, to
//! report records deleted before they were copied, or to stop because the source diverged.
//! Pure; the table in the tests is its specification.

/// What the source says about a partition now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SourceLog {
    /// Log start offset.
    pub low: i64,
    /// High watermark.
    pub high: i64,
    /// Where the leader epoch of the known mirrored record ends on the source's leader
    /// (`None`: not asked, or no answer).
    pub epoch_end: Option<i64>,
}

/// A mirrored record whose source leader epoch is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Known {
    /// Its source offset.
    pub offset: i64,
    /// Its leader epoch.
    pub epoch: i32,
}

/// What to do about a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Finding {
    /// The source holds the next offset and what was mirrored: (re-)position and go on.
    Covered,
    /// The source's log agrees with what was mirrored but its high watermark has not reached
    /// the next offset yet (a new leader catching up): wait.
    Behind,
    /// The high watermark is below the next offset and nothing tells whether the log agrees.
    BeyondEnd,
    /// Retention deleted `[from, to)` before it was copied.
    Lost {
        /// First lost offset.
        from: i64,
        /// The log start.
        to: i64,
    },
    /// The source no longer holds mirrored records from `from` on.
    Diverged {
        /// First source offset whose record differs.
        from: i64,
        /// What showed it.
        evidence: String,
    },
}

/// Judges a partition whose next source offset is `next`, given a mirrored record of known
/// epoch (if any) and the source's log.
pub(super) fn judge(next: i64, known: Option<Known>, log: &SourceLog) -> Finding {
    // The known record is gone when its epoch ends at or before it on the source now: the
    // source's leader took another history from that offset (KIP-101 truncation point).
    if let (Some(k), Some(end)) = (known, log.epoch_end)
        && end >= 0
        && end <= k.offset
    {
        return Finding::Diverged {
            from: end,
            evidence: format!(
                "the record at source offset {} had leader epoch {}, which ends at offset {end} \
                 on the source now",
                k.offset, k.epoch
            ),
        };
    }
    if next < log.low {
        return Finding::Lost {
            from: next,
            to: log.low,
        };
    }
    if next > log.high {
        // The epoch of the record just before `next` still running past it: the leader has the
        // records, its high watermark lags.
        return match (known, log.epoch_end) {
            (Some(k), Some(end)) if k.offset == next - 1 && end >= next => Finding::Behind,
            _ => Finding::BeyondEnd,
        };
    }
    Finding::Covered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(offset: i64, epoch: i32) -> Option<Known> {
        Some(Known { offset, epoch })
    }

    fn log(low: i64, high: i64, epoch_end: Option<i64>) -> SourceLog {
        SourceLog {
            low,
            high,
            epoch_end,
        }
    }

    fn short(f: Finding) -> String {
        match f {
            Finding::Covered => "covered".into(),
            Finding::Behind => "behind".into(),
            Finding::BeyondEnd => "beyond".into(),
            Finding::Lost { from, to } => format!("lost {from}..{to}"),
            Finding::Diverged { from, .. } => format!("diverged from {from}"),
        }
    }

    #[test]
    fn findings() {
        #[rustfmt::skip]
        let table: Vec<(&str, i64, Option<Known>, SourceLog, &str)> = vec![
            // name, next, known record, source log → finding
            ("inside the log", 15, known(14, 3), log(0, 20, Some(25)), "covered"),
            ("at the log end", 20, known(19, 3), log(0, 20, Some(20)), "covered"),
            ("no epoch known", 15, None, log(0, 20, None), "covered"),
            ("epoch unknown to the source (no answer)", 15, known(14, 3), log(0, 20, None), "covered"),
            ("unclean election replaced 10..14", 15, known(14, 3), log(0, 15, Some(10)), "diverged from 10"),
            ("replaced and shorter", 15, known(14, 3), log(0, 12, Some(10)), "diverged from 10"),
            ("the known record itself is the first replaced", 15, known(14, 3), log(0, 15, Some(14)), "diverged from 14"),
            ("an older known record still holds", 15, known(9, 3), log(0, 15, Some(12)), "covered"),
            ("an older known record replaced", 15, known(9, 3), log(0, 15, Some(8)), "diverged from 8"),
            ("a later epoch began after the known record", 15, known(9, 3), log(0, 20, Some(11)), "covered"),
            ("retention passed the next offset", 15, known(14, 3), log(40, 60, Some(60)), "lost 15..40"),
            ("retention removed the whole epoch", 15, known(14, 3), log(40, 60, Some(40)), "lost 15..40"),
            ("divergence is named before loss", 15, known(14, 3), log(40, 60, Some(10)), "diverged from 10"),
            ("new leader's watermark lags, its log agrees", 15, known(14, 3), log(0, 12, Some(15)), "behind"),
            ("watermark lags, nothing known", 15, None, log(0, 12, None), "beyond"),
            ("watermark lags, known record older", 15, known(9, 3), log(0, 12, Some(40)), "beyond"),
            ("source emptied by retention, next at the end", 15, known(14, 3), log(15, 15, Some(15)), "covered"),
        ];
        for (name, next, k, l, expect) in table {
            assert_eq!(short(judge(next, k, &l)), expect, "{name}");
        }
    }

    #[test]
    fn divergence_says_what_showed_it() {
        let Finding::Diverged { evidence, .. } = judge(15, known(14, 3), &log(0, 15, Some(10)))
        else {
            panic!("diverged");
        };
        assert!(
            evidence.contains("source offset 14 had leader epoch 3, which ends at offset 10"),
            "{evidence}"
        );
    }
}
