//! Which cluster a mirror's side must be: the ID its connection pins (`spec.<side>.clusterId`)
//! and, for the destination, the ID it reported before (`status.destinationClusterId`). The
//! destination's address may change (listeners move); an address that reaches another cluster is
//! refused before anything is read from or written to it, naming both IDs.

/// Why the `side` cluster of mirror `mirror`, which reports `found`, must not be used (`None`: it
/// may): another ID than the `pinned` one, or a destination other than the `recorded` one.
pub fn mismatch(
    side: &str,
    mirror: &str,
    pinned: Option<&str>,
    recorded: Option<&str>,
    found: &str,
) -> Option<String> {
    if let Some(pinned) = pinned {
        return (pinned != found).then(|| {
            format!(
                "the {side} cluster reports cluster ID {found} but ClusterMirror {mirror} pins \
                 spec.{side}.clusterId {pinned}: its fetchers are stopped and nothing is copied \
                 until the pin or the address is fixed"
            )
        });
    }
    let recorded = recorded.filter(|_| side == "destination")?;
    (recorded != found).then(|| {
        format!(
            "spec.destination.bootstrapServers reaches cluster {found}, but the destination of \
             ClusterMirror {mirror} is cluster {recorded} (status.destinationClusterId): its \
             fetchers are stopped and nothing is written until the address reaches {recorded} \
             again; another cluster takes a new ClusterMirror"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pin_and_then_the_recorded_destination_decide() {
        /// Name, side, pinned, recorded, found, refused (and the IDs the message names).
        type Case = (
            &'static str,
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
            &'static str,
            bool,
        );
        let cases: &[Case] = &[
            ("first look", "destination", None, None, "A", false),
            ("same cluster", "destination", None, Some("A"), "A", false),
            (
                "moved to another cluster",
                "destination",
                None,
                Some("A"),
                "B",
                true,
            ),
            (
                "pinned and found",
                "destination",
                Some("A"),
                Some("A"),
                "A",
                false,
            ),
            (
                "pinned, other found",
                "destination",
                Some("A"),
                Some("A"),
                "B",
                true,
            ),
            (
                "pin decides over the record",
                "destination",
                Some("B"),
                Some("A"),
                "B",
                false,
            ),
            (
                "the source is not recorded",
                "source",
                None,
                Some("A"),
                "B",
                false,
            ),
            (
                "pinned source, other found",
                "source",
                Some("A"),
                None,
                "B",
                true,
            ),
        ];
        for (name, side, pinned, recorded, found, refused) in cases {
            let got = mismatch(side, "dr", *pinned, *recorded, found);
            assert_eq!(got.is_some(), *refused, "{name}: {got:?}");
            if let Some(message) = got {
                let expected = pinned.or(*recorded).unwrap();
                assert!(
                    message.contains(found) && message.contains(expected),
                    "{name}: {message}"
                );
            }
        }
        let message = mismatch("destination", "dr", None, Some("A-id"), "B-id").unwrap();
        assert!(message.contains("status.destinationClusterId"), "{message}");
    }
}
