//! The soak's topics: what each holds and how it is written (idempotent producers: plain, lz4,
//! compacted with live compaction, tombstones and headers, records near the size limit; a
//! transactional producer with aborts; a log that starts above 0; the consumer group's topic; the
//! target of unclean elections), created on the replicated source before the mirror starts.

use crate::Testbed;
use crate::faults::create_replicated_topic;
use crate::kafka::{Rng, TestRecord, delete_records, produce_all};

/// What a topic is for in the soak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Mirrored and verified.
    Plain,
    /// Consumed by the soak's consumer group; failed over and back in the middle.
    Orders,
    /// Target of unclean elections: its source log diverges.
    Diverge,
}

/// How a topic's records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// Idempotent producer.
    Idempotent {
        /// `compression.type`.
        compression: &'static str,
        /// Keys drawn from this many (compaction), or unique keys.
        keyspace: Option<u64>,
        /// Percent of records without a value.
        tombstone_pct: u64,
        /// Records carry headers.
        headers: bool,
        /// Value sizes (bytes), smallest and largest.
        value_len: (usize, usize),
    },
    /// Transactional producer: transactions of 1-20 records, `abort_pct` percent aborted.
    Transactional {
        /// Percent of transactions aborted.
        abort_pct: u64,
    },
}

/// A soak topic.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    /// Name on both clusters.
    pub name: String,
    /// Partitions.
    pub partitions: i32,
    /// Topic configs.
    pub configs: Vec<(&'static str, String)>,
    /// Records per second, whole topic.
    pub rate: f64,
    /// The producer.
    pub writer: Writer,
    /// Records written before the mirror starts.
    pub prefill: usize,
    /// Records deleted (DeleteRecords) from partition 0 before the mirror starts.
    pub delete_before: i64,
    /// Role in the soak.
    pub role: Role,
}

pub(super) const LARGE: usize = 1_000_000;

/// The soak's topics, named `<prefix><kind>`.
pub fn topics(prefix: &str) -> Vec<TopicSpec> {
    let idem = |compression, keyspace, tombstone_pct, headers, value_len| Writer::Idempotent {
        compression,
        keyspace,
        tombstone_pct,
        headers,
        value_len,
    };
    let spec = |kind: &str, partitions, rate, writer, role| TopicSpec {
        name: format!("{prefix}{kind}"),
        partitions,
        configs: Vec::new(),
        rate,
        writer,
        prefill: 0,
        delete_before: 0,
        role,
    };
    let mut compacted = spec(
        "compacted",
        2,
        20.0,
        idem("none", Some(100), 5, false, (20, 400)),
        Role::Plain,
    );
    compacted.configs = vec![
        ("cleanup.policy", "compact".into()),
        ("segment.ms", "15000".into()),
        ("min.cleanable.dirty.ratio", "0.01".into()),
        ("delete.retention.ms", "5000".into()),
        ("min.compaction.lag.ms", "0".into()),
    ];
    let mut log_start = spec(
        "logstart",
        1,
        5.0,
        idem("none", None, 0, false, (50, 300)),
        Role::Plain,
    );
    log_start.prefill = 1000;
    log_start.delete_before = 500;
    let mut large = spec(
        "large",
        1,
        0.3,
        idem("none", None, 0, false, (LARGE - 2000, LARGE)),
        Role::Plain,
    );
    large.configs = vec![("max.message.bytes", "1048588".into())];
    vec![
        spec(
            "dense",
            3,
            30.0,
            idem("none", None, 0, false, (50, 500)),
            Role::Plain,
        ),
        spec(
            "lz4",
            2,
            20.0,
            idem("lz4", None, 0, true, (100, 2000)),
            Role::Plain,
        ),
        compacted,
        spec(
            "txn",
            2,
            20.0,
            Writer::Transactional { abort_pct: 25 },
            Role::Plain,
        ),
        log_start,
        large,
        spec(
            "tombstones",
            2,
            10.0,
            idem("zstd", Some(5000), 10, true, (0, 800)),
            Role::Plain,
        ),
        spec(
            "orders",
            3,
            30.0,
            idem("none", None, 0, false, (50, 300)),
            Role::Orders,
        ),
        spec(
            "diverge",
            1,
            5.0,
            idem("none", None, 0, false, (50, 300)),
            Role::Diverge,
        ),
    ]
}

/// Creates the topics on the replicated source, writes prefills, deletes records below the
/// log starts asked for.
pub async fn create_topics(bed: &Testbed, topics: &[TopicSpec], seed: u64) -> anyhow::Result<()> {
    let source = bed.r_source_config();
    for t in topics {
        let configs: Vec<(&str, &str)> = t.configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        create_replicated_topic(&source, &t.name, t.partitions, &configs).await?;
        if t.prefill > 0 {
            let mut rng = Rng::new(seed ^ 0x9e37);
            let records: Vec<TestRecord> = (0..t.prefill)
                .map(|i| TestRecord {
                    partition: 0,
                    key: Some(format!("pre-{i}").into_bytes()),
                    value: Some(value(&t.name, 0, i as u64, 50 + rng.below(200) as usize)),
                    headers: Vec::new(),
                })
                .collect();
            produce_all(&source, &t.name, &records, &[])?;
        }
        if t.delete_before > 0 {
            delete_records(&source, &t.name, 0, t.delete_before).await?;
        }
    }
    Ok(())
}

/// A record value: who wrote it and where, padded to `len`.
pub(super) fn value(topic: &str, partition: i32, seq: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{topic}|{partition}|{seq}|").into_bytes();
    let filler = b"abcdefghijklmnopqrstuvwxyz0123456789";
    while v.len() < len {
        let take = (len - v.len()).min(filler.len());
        v.extend_from_slice(&filler[..take]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_say_where_they_were_written_and_have_the_asked_size() {
        let v = value("soak-x-dense", 2, 41, 100);
        assert_eq!(v.len(), 100);
        assert!(v.starts_with(b"soak-x-dense|2|41|"));
        assert_eq!(
            value("t", 0, 1, 0),
            b"t|0|1|".to_vec(),
            "never shorter than the tag"
        );
    }

    #[test]
    fn the_topics_cover_what_the_soak_needs() {
        let t = topics("p-");
        assert!(t.len() >= 8);
        assert!(t.iter().all(|t| t.name.starts_with("p-")));
        assert_eq!(t.iter().filter(|t| t.role == Role::Orders).count(), 1);
        assert_eq!(t.iter().filter(|t| t.role == Role::Diverge).count(), 1);
        assert!(
            t.iter()
                .any(|t| matches!(t.writer, Writer::Transactional { .. }))
        );
        assert!(
            t.iter()
                .any(|t| t.delete_before > 0 && t.prefill as i64 > t.delete_before)
        );
        assert!(t.iter().any(|t| {
            t.configs
                .iter()
                .any(|(k, v)| *k == "cleanup.policy" && v == "compact")
        }));
        assert!(t.iter().any(
            |t| matches!(t.writer, Writer::Idempotent { value_len, .. } if value_len.1 >= LARGE)
        ));
    }
}
