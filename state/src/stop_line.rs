//! The one-line summary a fetcher leaves when it stops for a reason (its termination message),
//! and what the operator reads back from it: which partition the finding is about.
//!
//! A finding about one partition (another writer on it, a record its destination refuses, lost
//! source records) stops only that partition for good; the other partitions of the process stop
//! with it because they share the process, not because anything is wrong with them. The line
//! says so: `ForeignWrite on partition 3: <message>`. A stop of the whole process (a cluster
//! that changed, an error every partition shares) names no partition: `Error: <message>`.

use crate::records::StopReason;

const ON_PARTITION: &str = " on partition ";

/// The line for a stop for `reason`, about `partition` alone when it is given.
pub fn render(reason: StopReason, partition: Option<i32>, message: &str) -> String {
    match partition {
        Some(p) => format!("{}{ON_PARTITION}{p}: {message}", reason.as_str()),
        None => format!("{}: {message}", reason.as_str()),
    }
}

/// The partition a stop line is about alone; `None` for a stop of the whole process, and for
/// anything that is not such a line (an older fetcher's, a kill).
pub fn partition_of(line: &str) -> Option<i32> {
    let (head, _) = line.split_once(": ")?;
    let (reason, partition) = head.split_once(ON_PARTITION)?;
    if !StopReason::ALL.iter().any(|r| r.as_str() == reason) {
        return None;
    }
    partition.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_partition_it_is_about() {
        let line = render(
            StopReason::ForeignWrite,
            Some(3),
            "offset 7: another writer",
        );
        assert_eq!(
            line,
            "ForeignWrite on partition 3: offset 7: another writer"
        );
        assert_eq!(partition_of(&line), Some(3));
        let whole = render(StopReason::Error, None, "broker down on partition 2: x");
        assert_eq!(whole, "Error: broker down on partition 2: x");
        assert_eq!(partition_of(&whole), None, "the message is not the head");
        for other in [
            "",
            "killed",
            "Bogus on partition 1: x",
            "ForeignWrite on partition x: y",
        ] {
            assert_eq!(partition_of(other), None, "{other:?}");
        }
    }
}
