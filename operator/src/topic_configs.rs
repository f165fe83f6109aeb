//! Which source topic configs are copied to the destination, which ones kmirror sets itself so
//! that the destination takes every source record unchanged, and what must change there. Pure.

use std::collections::{BTreeMap, BTreeSet};

/// Configs that never make sense to copy, whatever the exclude list says: they are the
/// destination's own business or would break mirroring.
pub const ALWAYS_EXCLUDED: &[&str] = &[
    "message.timestamp.type",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "remote.storage.enable",
];

/// Kafka's `Long.MAX_VALUE`: a timestamp bound that accepts every timestamp.
pub const UNBOUNDED: &str = "9223372036854775807";

/// Destination configs kmirror sets itself, never copied from the source: a destination that
/// stamps its own time (`LogAppendTime`), takes smaller records than the source or bounds
/// timestamps tighter than the source would refuse or rewrite records it must copy exactly.
/// Only `spec.sync.topicConfigs.overrides` changes them (`message.timestamp.type` excepted).
pub const OWNED: &[&str] = &[
    "max.message.bytes",
    "message.timestamp.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
];

/// The timestamp bounds of Kafka 3.6 and later.
const BEFORE_AFTER: [&str; 2] = [
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
];

/// The timestamp bound of brokers before 4.0 (before 3.6 the only one).
const DIFFERENCE: &str = "message.timestamp.difference.max.ms";

/// What a destination topic's configs are built from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The source topic's dynamic configs, copied unless excluded (empty: copy nothing).
    pub source: &'a BTreeMap<String, String>,
    /// The source topic's effective `max.message.bytes` (its own, else the broker's
    /// `message.max.bytes`).
    pub source_max_message_bytes: Option<i64>,
    /// Config names never copied (`prefix*` matches a prefix).
    pub exclude: &'a [String],
    /// Values the spec sets on every destination topic.
    pub overrides: &'a BTreeMap<String, String>,
    /// The destination topic's dynamic configs now (empty when creating it).
    pub destination: &'a BTreeMap<String, String>,
    /// Topic config names the destination broker knows (empty: not known).
    pub known: &'a BTreeSet<String>,
    /// The fetchers copy record batches as bytes (`spec.fetcher.engine: Batch`): the
    /// destination keeps each batch's codec (`compression.type=producer`) instead of
    /// recompressing it to the source topic's setting.
    pub keeps_batch_codec: bool,
}

/// The destination topic's configs: the source's non-excluded ones, then kmirror's own —
/// `message.timestamp.type=CreateTime`, `max.message.bytes` at least the source's effective
/// value and never below the destination's current one, every timestamp bound the broker knows
/// unbounded, `compression.type=producer` for the batch engine — then the spec's overrides
/// (which cannot change the timestamp type).
pub fn destination_configs(i: &Inputs<'_>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = wanted(i.source, i.exclude)
        .into_iter()
        .filter(|(k, _)| !OWNED.contains(&k.as_str()))
        .collect();
    let size = |m: &BTreeMap<String, String>| {
        m.get("max.message.bytes")
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    if let Some(bytes) = [
        i.source_max_message_bytes,
        size(i.source),
        size(i.destination),
    ]
    .into_iter()
    .flatten()
    .max()
    {
        out.insert("max.message.bytes".into(), bytes.to_string());
    }
    let knows = |k: &str| i.known.contains(k);
    let before_after = i.known.is_empty() || BEFORE_AFTER.iter().any(|k| knows(k));
    let mut bounds: Vec<&str> = Vec::new();
    if before_after {
        bounds.extend(BEFORE_AFTER);
    }
    if knows(DIFFERENCE) {
        bounds.push(DIFFERENCE);
    }
    for k in bounds {
        out.insert(k.into(), UNBOUNDED.into());
    }
    if i.keeps_batch_codec {
        out.insert("compression.type".into(), "producer".into());
    }
    for (k, v) in i.overrides {
        out.insert(k.clone(), v.clone());
    }
    out.insert("message.timestamp.type".into(), "CreateTime".into());
    out
}

/// Whether `name` bounds timestamps (a broker that does not know it refuses it).
pub fn is_timestamp_bound(name: &str) -> bool {
    BEFORE_AFTER.contains(&name) || name == DIFFERENCE
}

/// Whether `name` matches an exclude entry (`prefix*` matches a prefix).
pub fn excluded(name: &str, exclude: &[String]) -> bool {
    ALWAYS_EXCLUDED.contains(&name)
        || exclude.iter().any(|e| match e.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => e == name,
        })
}

/// The configs to set on the destination: the source's non-default configs minus the excluded
/// ones.
pub fn wanted(
    source_non_default: &BTreeMap<String, String>,
    exclude: &[String],
) -> BTreeMap<String, String> {
    source_non_default
        .iter()
        .filter(|(k, _)| !excluded(k, exclude))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A change to the destination topic's configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Set a config to a value.
    Set(String, String),
    /// Remove a dynamic config (back to the destination's default).
    Delete(String),
}

/// What to change so that the destination's dynamic configs equal `wanted`, leaving excluded
/// configs on the destination alone.
pub fn diff(
    wanted: &BTreeMap<String, String>,
    destination_dynamic: &BTreeMap<String, String>,
    exclude: &[String],
) -> Vec<Change> {
    let mut changes: Vec<Change> = wanted
        .iter()
        .filter(|(k, v)| destination_dynamic.get(*k) != Some(*v))
        .map(|(k, v)| Change::Set(k.clone(), v.clone()))
        .collect();
    changes.extend(
        destination_dynamic
            .keys()
            .filter(|k| !wanted.contains_key(*k) && !excluded(k, exclude))
            .map(|k| Change::Delete(k.clone())),
    );
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn excludes_and_prefixes() {
        let ex = vec!["min.insync.replicas".to_string(), "confluent.*".to_string()];
        assert!(excluded("min.insync.replicas", &ex));
        assert!(excluded("confluent.tier.enable", &ex));
        assert!(excluded("message.timestamp.type", &[]), "always excluded");
        assert!(!excluded("retention.ms", &ex));
        let w = wanted(
            &map(&[
                ("retention.ms", "1000"),
                ("min.insync.replicas", "2"),
                ("cleanup.policy", "compact"),
            ]),
            &ex,
        );
        assert_eq!(
            w,
            map(&[("cleanup.policy", "compact"), ("retention.ms", "1000")])
        );
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    const KAFKA4: &[&str] = &[
        "cleanup.policy",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.type",
        "retention.ms",
    ];
    const KAFKA3_7: &[&str] = &[
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
    ];
    const KAFKA2_8: &[&str] = &[
        "max.message.bytes",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
    ];

    type Configs = BTreeMap<String, String>;
    /// name, source dynamic, source effective max.message.bytes, overrides, destination
    /// dynamic, known names → wanted
    type Row = (
        &'static str,
        Configs,
        Option<i64>,
        Configs,
        Configs,
        &'static [&'static str],
        Configs,
    );

    #[test]
    fn destination_configs_take_every_source_record() {
        let ex: Vec<String> = kmirror_crds::v1alpha1::DEFAULT_CONFIG_EXCLUDES
            .iter()
            .map(|s| s.to_string())
            .collect();
        let none = BTreeMap::new();
        let max = UNBOUNDED;
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // name, source dynamic, source effective max.message.bytes, overrides, destination dynamic, known → wanted
            ("plain topic, Kafka 4 destination",
             none.clone(), Some(1_048_588), none.clone(), none.clone(), KAFKA4,
             map(&[("max.message.bytes", "1048588"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("LogAppendTime source: copied as CreateTime",
             map(&[("message.timestamp.type", "LogAppendTime"), ("retention.ms", "1000")]), Some(1_048_588), none.clone(), none.clone(), KAFKA4,
             map(&[("max.message.bytes", "1048588"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime"), ("retention.ms", "1000")])),
            ("broker default of the source above the destination's",
             none.clone(), Some(3_000_000), none.clone(), none.clone(), KAFKA4,
             map(&[("max.message.bytes", "3000000"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("source bounds are not copied",
             map(&[("message.timestamp.after.max.ms", "1000"), ("message.timestamp.before.max.ms", "2000")]), Some(1_048_588), none.clone(), none.clone(), KAFKA4,
             map(&[("max.message.bytes", "1048588"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("source lowered its limit: the destination keeps the larger",
             map(&[("max.message.bytes", "1000000")]), Some(1_000_000), none.clone(), map(&[("max.message.bytes", "3000000")]), KAFKA4,
             map(&[("max.message.bytes", "3000000"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("source raised its limit",
             map(&[("max.message.bytes", "5000000")]), Some(5_000_000), none.clone(), map(&[("max.message.bytes", "3000000")]), KAFKA4,
             map(&[("max.message.bytes", "5000000"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("overrides win, but not over the timestamp type",
             none.clone(), Some(3_000_000), map(&[("message.timestamp.after.max.ms", "86400000"), ("max.message.bytes", "100000"), ("message.timestamp.type", "LogAppendTime"), ("min.insync.replicas", "2")]), none.clone(), KAFKA4,
             map(&[("max.message.bytes", "100000"), ("message.timestamp.after.max.ms", "86400000"), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime"), ("min.insync.replicas", "2")])),
            ("Kafka 3.6 to 3.9: the difference too (it applies where before/after are unbounded)",
             none.clone(), Some(1_048_588), none.clone(), none.clone(), KAFKA3_7,
             map(&[("max.message.bytes", "1048588"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.difference.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("before 3.6: the difference only",
             none.clone(), Some(1_048_588), none.clone(), none.clone(), KAFKA2_8,
             map(&[("max.message.bytes", "1048588"), ("message.timestamp.difference.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("broker not known: the bounds of Kafka 3.6 and later",
             none.clone(), None, none.clone(), none.clone(), &[],
             map(&[("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime")])),
            ("copying off: only what kmirror owns",
             none.clone(), Some(2_000_000), none.clone(), none.clone(), KAFKA4,
             map(&[("max.message.bytes", "2000000"), ("message.timestamp.after.max.ms", max), ("message.timestamp.before.max.ms", max), ("message.timestamp.type", "CreateTime")])),
        ];
        for (name, source, effective, overrides, destination, known, expect) in table {
            let known = set(known);
            let got = destination_configs(&Inputs {
                source: &source,
                source_max_message_bytes: effective,
                exclude: &ex,
                overrides: &overrides,
                destination: &destination,
                known: &known,
                keeps_batch_codec: false,
            });
            assert_eq!(got, expect, "{name}");
        }
    }

    #[test]
    fn sync_never_undoes_what_kmirror_owns() {
        // A source that stamps LogAppendTime, lowered its limit and bounds its timestamps: the
        // destination, already right, needs no change; an empty exclude list changes nothing.
        let source = map(&[
            ("message.timestamp.type", "LogAppendTime"),
            ("max.message.bytes", "500000"),
            ("message.timestamp.after.max.ms", "60000"),
            ("retention.ms", "1000"),
        ]);
        let known = set(KAFKA4);
        let destination = map(&[
            ("max.message.bytes", "3000000"),
            ("message.timestamp.type", "CreateTime"),
            ("message.timestamp.before.max.ms", UNBOUNDED),
            ("message.timestamp.after.max.ms", UNBOUNDED),
            ("retention.ms", "1000"),
        ]);
        for exclude in [vec![], vec!["retention.ms".to_string()]] {
            let want = destination_configs(&Inputs {
                source: &source,
                source_max_message_bytes: Some(500_000),
                exclude: &exclude,
                overrides: &BTreeMap::new(),
                destination: &destination,
                known: &known,
                keeps_batch_codec: false,
            });
            assert_eq!(diff(&want, &destination, &exclude), vec![], "{exclude:?}");
        }
        assert!(is_timestamp_bound("message.timestamp.difference.max.ms"));
        assert!(!is_timestamp_bound("message.timestamp.type"));
    }

    #[test]
    fn diff_sets_changed_and_removes_stale() {
        let ex = vec!["min.insync.replicas".to_string()];
        let wanted = map(&[("retention.ms", "2000"), ("cleanup.policy", "compact")]);
        let dest = map(&[
            ("retention.ms", "1000"),
            ("cleanup.policy", "compact"),
            ("segment.ms", "5"),
            ("min.insync.replicas", "2"),
        ]);
        let d = diff(&wanted, &dest, &ex);
        assert_eq!(
            d,
            vec![
                Change::Set("retention.ms".into(), "2000".into()),
                Change::Delete("segment.ms".into())
            ]
        );
        assert!(diff(&wanted, &wanted, &ex).is_empty());
    }

    #[test]
    fn the_batch_engine_keeps_each_batch_codec_unless_overridden() {
        let source = map(&[("compression.type", "zstd"), ("retention.ms", "1000")]);
        let known = set(KAFKA4);
        let none = BTreeMap::new();
        let built = |keeps_batch_codec: bool, overrides: &Configs| {
            destination_configs(&Inputs {
                source: &source,
                source_max_message_bytes: Some(1_048_588),
                exclude: &[],
                overrides,
                destination: &none,
                known: &known,
                keeps_batch_codec,
            })
        };
        let codec = |c: &Configs| c.get("compression.type").cloned();
        assert_eq!(
            codec(&built(false, &none)),
            Some("zstd".into()),
            "record engine: copied"
        );
        let batches = built(true, &none);
        assert_eq!(codec(&batches), Some("producer".into()), "batch engine");
        assert_eq!(batches.get("retention.ms"), Some(&"1000".to_string()));
        let overrides = map(&[("compression.type", "lz4")]);
        assert_eq!(
            codec(&built(true, &overrides)),
            Some("lz4".into()),
            "an override wins"
        );
    }
}
