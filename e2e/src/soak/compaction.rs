//! A compacted topic's check for the soak. Both clusters compact on their own schedules, so the
//! destination may still hold records the source has already compacted away (`kmirror-verify`
//! counts them as extra) and may have compacted away records the source still holds (counted as
//! missing). Neither is a duplicate or a loss when the side that still has them may remove them:
//! a later record with the same key follows them, or they are tombstones (a cleaner removes a
//! tombstone, the key's last record, once it is older than `delete.retention.ms`). Every soak
//! record's value is unique (it names its topic, partition and sequence number), so a value found
//! twice on the destination is a real duplicate; and the latest record per key must be the same
//! on both sides.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// What the check found for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionCheck {
    /// Records read on the destination.
    pub destination_records: u64,
    /// Destination records a cleaner may remove: followed by a later record with the same key,
    /// or tombstones.
    pub removable: u64,
    /// Source records a cleaner may remove.
    pub source_removable: u64,
    /// Destination records whose (non-null) value appears more than once there.
    pub duplicate_values: u64,
    /// Keys whose latest value differs between the sides (a tombstone counts as absent).
    pub latest_mismatches: u64,
    /// Keys compared.
    pub keys: u64,
}

impl CompactionCheck {
    /// Extra and missing records explained by compaction: no duplicate values, the same latest
    /// value for every key, at least `extra` removable records on the destination and at least
    /// `missing` on the source.
    pub fn explains(&self, extra: u64, missing: u64) -> bool {
        self.duplicate_values == 0
            && self.latest_mismatches == 0
            && self.removable >= extra
            && self.source_removable >= missing
    }
}

type Record = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Every record (key, value) of a partition up to its end, in offset order, read committed.
fn read(config: &ClientConfig, topic: &str, partition: i32) -> Result<Vec<Record>, String> {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", "kmirror-soak-compaction")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| e.to_string())?;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(low))
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut position = low;
    while position < high {
        if Instant::now() > deadline {
            return Err(format!(
                "reading {topic}-{partition} up to {high} timed out at {position}"
            ));
        }
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                position = m.offset() + 1;
                out.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec)));
            }
            // The end, also when compacted gaps or markers come after the last record.
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => return Err(e.to_string()),
            None => {}
        }
    }
    Ok(out)
}

/// How many of the source's records come after the destination's newest one: 0 when the copy has
/// caught up. The destination's log end says nothing here: a record the source compacted away
/// before the fetcher read it is a gap in the offset map, not a destination offset, so a caught-up
/// destination may end well below the source. Every soak value is unique and the copy keeps the
/// source's order, so the destination has caught up when its last record is the source's last;
/// otherwise the source's records after the destination's last one are still to come (all of
/// them when the destination's last record is not on the source).
pub fn still_to_copy(source: &[Record], destination: &[Record]) -> usize {
    match destination.last() {
        None => source.len(),
        Some(last) => source
            .iter()
            .rposition(|r| r == last)
            .map_or(source.len(), |i| source.len() - i - 1),
    }
}

/// Compares one partition of a compacted topic on both sides, once the destination holds every
/// record the source has (the traffic is stopped). The status's lag is not enough for that: it
/// can say 0 from positions and a source end read a moment before the last records, and then
/// the newest values of a few keys are not on the destination yet when both sides are read.
pub fn check(
    source: &ClientConfig,
    destination: &ClientConfig,
    topic: &str,
    partition: i32,
) -> Result<CompactionCheck, String> {
    // A cleaner never removes the active segment's last record, so the source's newest record
    // stays put while the destination is read again.
    let src = read(source, topic, partition)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dst = read(destination, topic, partition)?;
        let behind = still_to_copy(&src, &dst);
        if behind == 0 {
            return Ok(compare(&src, &dst));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "60 s after the traffic stopped, {behind} of the source's {} records come after the destination's newest",
                src.len()
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn latest(records: &[Record]) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for (k, v) in records {
        if let Some(k) = k {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Records a cleaner may remove: followed by a later record with the same key, or tombstones.
fn removable(records: &[Record]) -> u64 {
    let mut last_index: HashMap<&[u8], usize> = HashMap::new();
    for (i, (k, _)) in records.iter().enumerate() {
        if let Some(k) = k {
            last_index.insert(k.as_slice(), i);
        }
    }
    records
        .iter()
        .enumerate()
        .filter(|(i, (k, v))| {
            v.is_none()
                || k.as_ref()
                    .and_then(|k| last_index.get(k.as_slice()))
                    .is_some_and(|last| last > i)
        })
        .count() as u64
}

/// The comparison itself (records in offset order).
pub fn compare(source: &[Record], destination: &[Record]) -> CompactionCheck {
    let mut c = CompactionCheck {
        destination_records: destination.len() as u64,
        ..Default::default()
    };
    c.removable = removable(destination);
    c.source_removable = removable(source);
    let mut seen: HashMap<&[u8], u64> = HashMap::new();
    for (_, v) in destination {
        if let Some(v) = v {
            *seen.entry(v.as_slice()).or_default() += 1;
        }
    }
    c.duplicate_values = seen.values().map(|n| n - 1).sum();
    let (src, dst) = (latest(source), latest(destination));
    let keys: std::collections::BTreeSet<&Vec<u8>> = src.keys().chain(dst.keys()).collect();
    c.keys = keys.len() as u64;
    for k in keys {
        let a = src.get(k).cloned().flatten();
        let b = dst.get(k).cloned().flatten();
        if a != b {
            c.latest_mismatches += 1;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(k: &str, v: Option<&str>) -> Record {
        (
            Some(k.as_bytes().to_vec()),
            v.map(|v| v.as_bytes().to_vec()),
        )
    }

    #[test]
    fn records_compacted_away_on_the_source_only_are_explained() {
        let source = vec![r("a", Some("a2")), r("b", None)];
        let destination = vec![
            r("a", Some("a1")),
            r("b", Some("b1")),
            r("a", Some("a2")),
            r("b", None),
        ];
        let c = compare(&source, &destination);
        assert_eq!(
            c.removable, 3,
            "a1 and b1 are superseded, b's tombstone is removable"
        );
        assert_eq!(c.duplicate_values, 0);
        assert_eq!(c.latest_mismatches, 0);
        assert!(c.explains(2, 0));
        assert!(c.explains(3, 0));
        assert!(!c.explains(4, 0), "more extra records than removable ones");
        // Compacted on the destination first: the source holds a superseded record it lacks.
        let c = compare(
            &[r("k", Some("k1")), r("k", Some("k2"))],
            &[r("k", Some("k2"))],
        );
        assert_eq!(c.source_removable, 1);
        assert!(c.explains(0, 1));
        assert!(!c.explains(0, 2));
    }

    #[test]
    fn a_tombstone_one_side_has_removed_is_explained() {
        // The source's cleaner removed a key's last record, a tombstone older than
        // delete.retention.ms; the destination's has not yet.
        let source = vec![r("a", Some("a1"))];
        let destination = vec![r("a", Some("a1")), r("x", Some("x1")), r("x", None)];
        assert!(compare(&source, &destination).explains(2, 0));
        // And the other way round: the destination removed it first.
        assert!(compare(&destination, &source).explains(0, 2));
        // A live value is never removable on its own.
        assert!(!compare(&[], &[r("y", Some("y1"))]).explains(1, 0));
    }

    #[test]
    fn the_check_waits_for_the_copy_of_the_source_newest_record() {
        let source = vec![
            r("a", Some("a1")),
            r("b", Some("b1")),
            r("a", Some("a2")),
            r("c", Some("c1")),
        ];
        assert_eq!(still_to_copy(&source, &source), 0);
        assert_eq!(still_to_copy(&source, &source[..2]), 2, "a2 and c1 to come");
        assert_eq!(still_to_copy(&source, &[]), 4);
        // The source compacted a1 away before the fetcher read it: the destination is a gap
        // shorter (it ends one offset lower) and has still caught up.
        assert_eq!(still_to_copy(&source[1..], &source[1..]), 0);
        // The destination's cleaner removed a1 and b1; the newest record is what counts.
        assert_eq!(still_to_copy(&source, &source[2..]), 0);
        // A destination whose newest record the source does not hold is not caught up.
        assert_eq!(still_to_copy(&source, &[r("z", Some("z9"))]), 4);
    }

    #[test]
    fn a_copied_twice_record_or_a_wrong_latest_value_is_not_explained() {
        let source = vec![r("a", Some("a1"))];
        let twice = compare(&source, &[r("a", Some("a1")), r("a", Some("a1"))]);
        assert_eq!(twice.duplicate_values, 1);
        assert!(!twice.explains(1, 0));
        let wrong = compare(&source, &[r("a", Some("a0"))]);
        assert_eq!(wrong.latest_mismatches, 1);
        assert!(!wrong.explains(0, 0));
        // A key deleted (tombstone) on one side and gone on the other agrees.
        assert_eq!(compare(&[], &[r("x", None)]).latest_mismatches, 0);
    }
}
