//! Fits a destination topic's configs to what the destination broker takes: keys its Kafka
//! version removed are dropped, renamed ones translated, unknown ones dropped, and a key the
//! broker refuses (named in its error message) dropped — each named with the reason, for the
//! MirrorTopic's status. Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use kmirror_crds::v1alpha1::ConfigNotCopied;

/// Topic configs later Kafka versions removed: name, the version that removed it, what that
/// means for the copy.
pub const REMOVED: &[(&str, &str, &str)] = &[
    (
        "message.format.version",
        "4.0",
        "the destination stores every record in message format v2; records and offsets are \
         copied unchanged",
    ),
    (
        "message.downconversion.enable",
        "4.0",
        "Kafka 4 no longer converts records down for old consumers",
    ),
    (
        "message.timestamp.difference.max.ms",
        "4.0",
        "replaced by message.timestamp.before.max.ms and message.timestamp.after.max.ms",
    ),
];

/// Renamed topic configs: the old name and the names that take its value.
const RENAMED: &[(&str, &[&str])] = &[(
    "message.timestamp.difference.max.ms",
    &[
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
    ],
)];

/// What the destination gets and what it does not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fitted {
    /// The configs to set.
    pub configs: BTreeMap<String, String>,
    /// The configs left out (or set under another name), with the reason.
    pub not_copied: Vec<ConfigNotCopied>,
}

fn note(name: &str, reason: String) -> ConfigNotCopied {
    ConfigNotCopied {
        name: name.to_string(),
        reason,
    }
}

/// Hint for a key `spec.sync.topicConfigs.overrides` sets.
fn override_hint(name: &str, overrides: &BTreeMap<String, String>) -> &'static str {
    if overrides.contains_key(name) {
        "; remove it from spec.sync.topicConfigs.overrides"
    } else {
        ""
    }
}

/// Fits `wanted` to the topic config names the destination broker knows (`known`; empty: not
/// known, everything is kept). `overrides` are the spec's own values (they win over a
/// translation, and their reasons say to fix the spec).
pub fn fit(
    wanted: BTreeMap<String, String>,
    known: &BTreeSet<String>,
    overrides: &BTreeMap<String, String>,
) -> Fitted {
    if known.is_empty() {
        return Fitted {
            configs: wanted,
            not_copied: Vec::new(),
        };
    }
    let mut configs = BTreeMap::new();
    let mut not_copied = Vec::new();
    let mut translated = BTreeMap::new();
    for (name, value) in wanted {
        if known.contains(&name) {
            configs.insert(name, value);
            continue;
        }
        let hint = override_hint(&name, overrides);
        let renamed = RENAMED
            .iter()
            .find(|(old, _)| *old == name)
            .map(|(_, new)| *new)
            .filter(|new| new.iter().all(|n| known.contains(*n)));
        if let Some(new) = renamed {
            for n in new {
                translated.insert(n.to_string(), value.clone());
            }
            not_copied.push(note(
                &name,
                format!(
                    "the destination has no {name}: its value {value} is set as {}",
                    new.join(" and ")
                ),
            ));
        } else if let Some((_, version, meaning)) = REMOVED.iter().find(|(k, ..)| *k == name) {
            not_copied.push(note(
                &name,
                format!(
                    "removed in Kafka {version}, the destination does not take it: {meaning}{hint}"
                ),
            ));
        } else {
            not_copied.push(note(
                &name,
                format!(
                    "the destination broker does not know this topic config (one of a newer \
                     Kafka version or of another vendor){hint}"
                ),
            ));
        }
    }
    for (name, value) in translated {
        if !overrides.contains_key(&name) {
            configs.insert(name, value);
        }
    }
    Fitted {
        configs,
        not_copied,
    }
}

/// The config a broker's refusal `message` names, of the `sent` ones (the longest name found:
/// `message.timestamp.after.max.ms` rather than a shorter name inside it).
pub fn refused_key<'a>(
    message: &str,
    sent: impl IntoIterator<Item = &'a String>,
) -> Option<String> {
    sent.into_iter()
        .filter(|k| message.contains(k.as_str()))
        .max_by_key(|k| k.len())
        .cloned()
}

/// The note for a config the destination refused with `message`.
pub fn refused(name: &str, message: &str, overrides: &BTreeMap<String, String>) -> ConfigNotCopied {
    let fix = if overrides.contains_key(name) {
        "fix or remove it in spec.sync.topicConfigs.overrides"
    } else {
        "add it to spec.sync.topicConfigs.exclude to leave it out on purpose"
    };
    note(
        name,
        format!("the destination refused it: {}; {fix}", message.trim()),
    )
}

/// Merges `more` into `into`, one note per name (the first kept).
pub fn merge(into: &mut Vec<ConfigNotCopied>, more: Vec<ConfigNotCopied>) {
    for n in more {
        if !into.iter().any(|o| o.name == n.name) {
            into.push(n);
        }
    }
    into.sort_by(|a, b| a.name.cmp(&b.name));
}

/// What each mirrored topic's destination does not get, between the reconciles that learn it
/// (topic creation, the config sync) and the `MirrorTopic` status that shows it.
#[derive(Debug, Default)]
pub struct Notes(Mutex<HashMap<(String, String), Entry>>);

#[derive(Debug, Default)]
struct Entry {
    /// The configs not copied, as last learnt.
    notes: Vec<ConfigNotCopied>,
    /// Values the destination refused, by name: not sent again while the value is the same.
    refused: BTreeMap<String, (String, ConfigNotCopied)>,
    /// The notes last announced in an Event.
    announced: Option<Vec<ConfigNotCopied>>,
}

impl Notes {
    fn with<T>(&self, mirror: &str, topic: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(map
            .entry((mirror.to_string(), topic.to_string()))
            .or_default())
    }

    /// Records what `topic` of `mirror` does not get now (the refusals remembered included).
    pub fn record(&self, mirror: &str, topic: &str, notes: Vec<ConfigNotCopied>) {
        self.with(mirror, topic, |e| e.notes = notes);
    }

    /// Remembers that the destination refused `name` = `value`.
    pub fn refuse(
        &self,
        mirror: &str,
        topic: &str,
        name: &str,
        value: &str,
        note: ConfigNotCopied,
    ) {
        self.with(mirror, topic, |e| {
            e.refused
                .insert(name.to_string(), (value.to_string(), note));
        });
    }

    /// Drops from `configs` the values the destination refused before, with their notes.
    pub fn drop_refused(
        &self,
        mirror: &str,
        topic: &str,
        configs: &mut BTreeMap<String, String>,
    ) -> Vec<ConfigNotCopied> {
        self.with(mirror, topic, |e| {
            let mut out = Vec::new();
            for (name, (value, note)) in &e.refused {
                if configs.get(name) == Some(value) {
                    configs.remove(name);
                    out.push(note.clone());
                }
            }
            out
        })
    }

    /// The notes to show in the status of `topic` (None: nothing learnt since the operator
    /// started; the status keeps what it shows), and whether to announce them in an Event:
    /// they differ from what the status shows (`shown`) and from the last announcement.
    pub fn for_status(
        &self,
        mirror: &str,
        topic: &str,
        shown: &[ConfigNotCopied],
    ) -> Option<(Vec<ConfigNotCopied>, bool)> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.get_mut(&(mirror.to_string(), topic.to_string()))?;
        let notes = e.notes.clone();
        let announce = notes != shown && e.announced.as_ref() != Some(&notes) && !notes.is_empty();
        if announce || notes == shown {
            e.announced = Some(notes.clone());
        }
        Some((notes, announce))
    }

    /// Forgets a topic (its MirrorTopic is gone).
    pub fn forget(&self, mirror: &str, topic: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&(mirror.to_string(), topic.to_string()));
    }
}

/// One line for an Event: `name (reason); …`.
pub fn describe(notes: &[ConfigNotCopied]) -> String {
    notes
        .iter()
        .map(|n| format!("{} ({})", n.name, n.reason))
        .collect::<Vec<_>>()
        .join("; ")
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

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Topic config names of a Kafka 4 broker (the part these rows need).
    const KAFKA4: &[&str] = &[
        "cleanup.policy",
        "compression.type",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.type",
        "retention.ms",
    ];
    /// And of a Kafka 2.8 broker.
    const KAFKA2_8: &[&str] = &[
        "cleanup.policy",
        "max.message.bytes",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "retention.ms",
    ];

    #[test]
    fn the_destination_gets_what_its_version_takes() {
        // name, wanted, overrides, known → configs set, names not copied (with a word of the reason)
        type Row = (
            &'static str,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            &'static [&'static str],
            BTreeMap<String, String>,
            Vec<(&'static str, &'static str)>,
        );
        let none = BTreeMap::new();
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            ("2.8 topic on format 0.9.0 onto Kafka 4: the format dropped",
             map(&[("message.format.version", "0.9.0"), ("retention.ms", "1000")]), none.clone(), KAFKA4,
             map(&[("retention.ms", "1000")]),
             vec![("message.format.version", "removed in Kafka 4.0")]),
            ("down-conversion dropped too",
             map(&[("message.downconversion.enable", "false"), ("cleanup.policy", "compact")]), none.clone(), KAFKA4,
             map(&[("cleanup.policy", "compact")]),
             vec![("message.downconversion.enable", "removed in Kafka 4.0")]),
            ("a Kafka 2.8 destination keeps them",
             map(&[("message.format.version", "0.10.2"), ("message.downconversion.enable", "false")]), none.clone(), KAFKA2_8,
             map(&[("message.format.version", "0.10.2"), ("message.downconversion.enable", "false")]),
             vec![]),
            ("an override of the old timestamp bound becomes before and after",
             map(&[("message.timestamp.difference.max.ms", "86400000")]), map(&[("message.timestamp.difference.max.ms", "86400000")]), KAFKA4,
             map(&[("message.timestamp.after.max.ms", "86400000"), ("message.timestamp.before.max.ms", "86400000")]),
             vec![("message.timestamp.difference.max.ms", "set as message.timestamp.before.max.ms and message.timestamp.after.max.ms")]),
            ("an explicit after bound wins over the translation",
             map(&[("message.timestamp.difference.max.ms", "86400000"), ("message.timestamp.after.max.ms", "3600000")]),
             map(&[("message.timestamp.difference.max.ms", "86400000"), ("message.timestamp.after.max.ms", "3600000")]), KAFKA4,
             map(&[("message.timestamp.after.max.ms", "3600000"), ("message.timestamp.before.max.ms", "86400000")]),
             vec![("message.timestamp.difference.max.ms", "set as")]),
            ("before/after onto Kafka 2.8: not known there, the spec is told",
             map(&[("message.timestamp.after.max.ms", "3600000")]), map(&[("message.timestamp.after.max.ms", "3600000")]), KAFKA2_8,
             map(&[]),
             vec![("message.timestamp.after.max.ms", "remove it from spec.sync.topicConfigs.overrides")]),
            ("a newer or vendor key the destination does not know",
             map(&[("local.retention.ms", "1000"), ("retention.ms", "5")]), none.clone(), KAFKA2_8,
             map(&[("retention.ms", "5")]),
             vec![("local.retention.ms", "does not know this topic config")]),
            ("destination not known: everything kept",
             map(&[("message.format.version", "0.9.0")]), none.clone(), &[],
             map(&[("message.format.version", "0.9.0")]),
             vec![]),
        ];
        for (name, wanted, overrides, known, configs, not_copied) in table {
            let got = fit(wanted, &set(known), &overrides);
            assert_eq!(got.configs, configs, "{name}");
            assert_eq!(
                got.not_copied.len(),
                not_copied.len(),
                "{name}: {:?}",
                got.not_copied
            );
            for (n, (key, words)) in got.not_copied.iter().zip(not_copied) {
                assert_eq!(n.name, key, "{name}");
                assert!(n.reason.contains(words), "{name}: {}", n.reason);
            }
        }
    }

    #[test]
    fn a_refusal_names_the_key_and_the_broker_message() {
        let sent = map(&[
            ("message.timestamp.after.max.ms", "1"),
            ("max.message.bytes", "2"),
            ("retention.ms", "3"),
        ]);
        // Messages as Kafka brokers answer CreateTopics and IncrementalAlterConfigs.
        for (message, key) in [
            ("Unknown topic config name: message.format.version", None),
            (
                "Invalid value -5 for configuration retention.ms: Value must be at least -1",
                Some("retention.ms"),
            ),
            (
                "Unknown topic config name: message.timestamp.after.max.ms",
                Some("message.timestamp.after.max.ms"),
            ),
            ("Topic creation policy refused", None),
        ] {
            assert_eq!(
                refused_key(message, sent.keys()).as_deref(),
                key,
                "{message}"
            );
        }
        let overrides = map(&[("retention.ms", "3")]);
        let n = refused(
            "retention.ms",
            "Invalid value -5 for configuration retention.ms",
            &overrides,
        );
        assert!(n.reason.contains("Invalid value -5"), "{}", n.reason);
        assert!(
            n.reason.contains("spec.sync.topicConfigs.overrides"),
            "{}",
            n.reason
        );
        let n = refused("max.message.bytes", "too large", &overrides);
        assert!(
            n.reason.contains("spec.sync.topicConfigs.exclude"),
            "{}",
            n.reason
        );
        let mut all = vec![note("b", "x".into())];
        merge(&mut all, vec![note("a", "y".into()), note("b", "z".into())]);
        assert_eq!(
            all.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(all[1].reason, "x", "one note per name, the first kept");
    }

    #[test]
    fn notes_reach_the_status_and_one_event() {
        let notes = Notes::default();
        assert_eq!(
            notes.for_status("ns/dr", "t", &[]),
            None,
            "nothing learnt: status kept"
        );
        let format = vec![note("message.format.version", "removed".into())];
        notes.record("ns/dr", "t", format.clone());
        assert_eq!(
            notes.for_status("ns/dr", "t", &[]),
            Some((format.clone(), true)),
            "announced"
        );
        assert_eq!(
            notes.for_status("ns/dr", "t", &[]),
            Some((format.clone(), false)),
            "the status write was postponed: not announced again"
        );
        assert_eq!(
            notes.for_status("ns/dr", "t", &format),
            Some((format.clone(), false))
        );
        // After a restart the status shows them already: no Event.
        let restarted = Notes::default();
        restarted.record("ns/dr", "t", format.clone());
        assert_eq!(
            restarted.for_status("ns/dr", "t", &format),
            Some((format.clone(), false))
        );
        // A value refused once is not sent again while it stays the same.
        let refusal = refused("retention.ms", "Invalid value", &BTreeMap::new());
        notes.refuse("ns/dr", "t", "retention.ms", "-5", refusal.clone());
        let mut configs = map(&[("retention.ms", "-5"), ("cleanup.policy", "compact")]);
        assert_eq!(
            notes.drop_refused("ns/dr", "t", &mut configs),
            vec![refusal]
        );
        assert_eq!(configs, map(&[("cleanup.policy", "compact")]));
        let mut changed = map(&[("retention.ms", "1000")]);
        assert!(
            notes.drop_refused("ns/dr", "t", &mut changed).is_empty(),
            "a new value is tried"
        );
        notes.forget("ns/dr", "t");
        assert_eq!(notes.for_status("ns/dr", "t", &format), None);
    }
}
