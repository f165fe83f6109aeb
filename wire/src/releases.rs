//! Which Apache Kafka release a broker is at least, judged by the requests it offers: each
//! release below added a request its brokers answer, so the newest one offered names the floor.

use std::collections::BTreeSet;

/// (request key, request name, the release that added it), newest first.
const MARKERS: [(i16, &str, &str); 7] = [
    (65, "DescribeTransactions", "3.0"),
    (61, "DescribeProducers", "2.8"),
    (57, "UpdateFeatures", "2.7"),
    (48, "DescribeClientQuotas", "2.6"),
    (47, "OffsetDelete", "2.4"),
    (44, "IncrementalAlterConfigs", "2.3"),
    (43, "ElectLeaders", "2.2"),
];

/// The release a broker offering `keys` is at least (`"2.8"`, `"2.1 or earlier"`, ...).
pub fn release_floor(keys: &BTreeSet<i16>) -> &'static str {
    MARKERS
        .iter()
        .find(|(key, _, _)| keys.contains(key))
        .map_or("2.1 or earlier", |m| m.2)
}

/// Whether a broker offering `keys` is Kafka 3.0 or later; if not, the request it lacks.
pub fn at_least_3_0(keys: &BTreeSet<i16>) -> Result<(), &'static str> {
    if keys.contains(&MARKERS[0].0) {
        Ok(())
    } else {
        Err(MARKERS[0].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_request_offered_names_the_release() {
        // (name, keys offered, release, 3.0 or later)
        type Row<'a> = (&'a str, &'a [i16], &'a str, Result<(), &'a str>);
        let lacks = Err("DescribeTransactions");
        let table: [Row; 5] = [
            (
                "Kafka 4",
                &[0, 1, 43, 44, 47, 48, 57, 61, 65, 66, 68],
                "3.0",
                Ok(()),
            ),
            ("Kafka 2.8", &[0, 1, 43, 44, 47, 48, 57, 61], "2.8", lacks),
            ("Kafka 2.3", &[0, 1, 43, 44], "2.3", lacks),
            ("Kafka 2.1", &[0, 1, 2, 3, 42], "2.1 or earlier", lacks),
            ("nothing offered", &[], "2.1 or earlier", lacks),
        ];
        for (name, keys, release, modern) in table {
            let keys: BTreeSet<i16> = keys.iter().copied().collect();
            assert_eq!(release_floor(&keys), release, "{name}");
            assert_eq!(at_least_3_0(&keys), modern, "{name}");
        }
    }
}
