//! Which source topic configs are copied to the destination, and what must change there. Pure.

use std::collections::BTreeMap;

/// Configs that never make sense to copy, whatever the exclude list says: they are the
/// destination's own business or would break mirroring.
pub const ALWAYS_EXCLUDED: &[&str] = &[
    "message.timestamp.type",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "remote.storage.enable",
];

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
}
