//! Telling a deleted source topic from one that is only missing for a moment: a topic counts as
//! deleted only when it is missing on two looks at least [`CONFIRM_AFTER`] apart, both answered
//! by the source cluster the fetchers recorded. A wrong bootstrap address (another cluster), a
//! metadata glitch or a broker restart must never look like a deletion.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How far apart two looks that find the topic missing must be.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(5);

/// One look that found the source topic missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    /// When, ms since the epoch.
    pub at_ms: i64,
    /// The cluster ID the source answered with (None: it did not say).
    pub cluster_id: Option<String>,
}

/// What a look concludes: the sighting to keep for the next look, and whether the deletion is
/// confirmed.
pub fn judge(
    previous: Option<&Sighting>,
    now: Sighting,
    recorded_cluster: Option<&str>,
) -> (Sighting, bool) {
    let Some(id) = now.cluster_id.as_deref() else {
        // No cluster ID: nothing to compare; the first sighting stays.
        return (previous.cloned().unwrap_or(now), false);
    };
    if recorded_cluster.is_some_and(|r| r != id) {
        // Another cluster answers at the source address: not a deletion on ours.
        return (now, false);
    }
    match previous {
        Some(p) if p.cluster_id.as_deref() == Some(id) => {
            let confirmed = now.at_ms - p.at_ms >= CONFIRM_AFTER.as_millis() as i64;
            (p.clone(), confirmed)
        }
        _ => (now, false),
    }
}

/// The first sighting of each missing source topic, by MirrorTopic (`namespace/name`).
#[derive(Debug, Default)]
pub struct Sightings(Mutex<HashMap<String, Sighting>>);

impl Sightings {
    /// Records a look that found the topic of `key` missing; whether its deletion is confirmed.
    pub fn missing(&self, key: &str, now: Sighting, recorded_cluster: Option<&str>) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (keep, confirmed) = judge(map.get(key), now, recorded_cluster);
        map.insert(key.to_string(), keep);
        confirmed
    }

    /// Forgets `key`: its topic was found (or the MirrorTopic is gone).
    pub fn present(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64, id: Option<&str>) -> Sighting {
        Sighting {
            at_ms: s * 1000,
            cluster_id: id.map(str::to_string),
        }
    }

    #[test]
    fn a_deletion_needs_two_looks_apart_at_the_recorded_cluster() {
        #[rustfmt::skip]
        let table: Vec<(&str, Vec<Sighting>, Option<&str>, bool)> = vec![
            // name, looks that found the topic missing, cluster the fetchers recorded → confirmed
            ("one look is not enough", vec![at(0, Some("c1"))], Some("c1"), false),
            ("two looks apart, same cluster", vec![at(0, Some("c1")), at(5, Some("c1"))], Some("c1"), true),
            ("two looks too close", vec![at(0, Some("c1")), at(4, Some("c1"))], Some("c1"), false),
            ("many close looks add up from the first", vec![at(0, Some("c1")), at(2, Some("c1")), at(4, Some("c1")), at(6, Some("c1"))], Some("c1"), true),
            ("another cluster answers", vec![at(0, Some("c2")), at(10, Some("c2"))], Some("c1"), false),
            ("the cluster changed between looks: the wait starts again",
             vec![at(0, Some("c1")), at(3, Some("c9")), at(6, Some("c1")), at(10, Some("c1"))], None, false),
            ("... and confirms after its own gap",
             vec![at(0, Some("c1")), at(3, Some("c9")), at(6, Some("c1")), at(11, Some("c1"))], None, true),
            ("no cluster ID: never confirmed", vec![at(0, None), at(60, None)], Some("c1"), false),
            ("no cluster ID in between keeps the first sighting",
             vec![at(0, Some("c1")), at(3, None), at(5, Some("c1"))], Some("c1"), true),
            ("nothing recorded yet: two looks at one cluster", vec![at(0, Some("c1")), at(5, Some("c1"))], None, true),
        ];
        for (name, looks, recorded, expect) in table {
            let s = Sightings::default();
            let mut confirmed = false;
            for look in looks {
                confirmed = s.missing("ns/t", look, recorded);
            }
            assert_eq!(confirmed, expect, "{name}");
        }
    }

    #[test]
    fn a_topic_found_again_starts_over() {
        let s = Sightings::default();
        assert!(!s.missing("ns/t", at(0, Some("c1")), Some("c1")));
        s.present("ns/t");
        assert!(!s.missing("ns/t", at(6, Some("c1")), Some("c1")));
        assert!(s.missing("ns/t", at(11, Some("c1")), Some("c1")));
    }
}
