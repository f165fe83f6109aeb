//! The document of `kubectl mirror translate` and its table.

use serde::{Deserialize, Serialize};

use super::*;

/// `translate -o json|yaml`: the offsets asked for, translated or with the reason they are not.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TranslateDocument {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// Source topic.
    pub source_topic: String,
    /// Destination topic.
    pub destination_topic: String,
    /// `source-to-destination` or `destination-to-source`.
    pub direction: String,
    /// One per offset asked for, in the order asked.
    pub translations: Vec<TranslationView>,
}

/// One offset, as kmirror-verify translated it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TranslationView {
    /// The topic of the side translated from.
    #[serde(default)]
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The offset asked for.
    pub offset: i64,
    /// The translated offset; null when it cannot be translated.
    #[serde(default)]
    pub translated: Option<i64>,
    /// `identical`, `mapped`, or why not: `not-mirrored`, `before-map`,
    /// `deleted-on-destination`, `not-a-copy`, `unknown`.
    pub how: String,
    /// Why it cannot be translated.
    #[serde(default)]
    pub reason: Option<String>,
}

impl TranslationView {
    /// True when it has a translated offset.
    pub fn is_translated(&self) -> bool {
        self.translated.is_some()
    }
}

/// The translation table: one row per offset; the reason of an offset that cannot be
/// translated in the last column.
pub fn translate_table(doc: &TranslateDocument) -> String {
    let (from, to) = if doc.direction == "destination-to-source" {
        ("DESTINATION-OFFSET", "SOURCE-OFFSET")
    } else {
        ("SOURCE-OFFSET", "DESTINATION-OFFSET")
    };
    let rows: Vec<Vec<String>> = doc
        .translations
        .iter()
        .map(|t| {
            vec![
                t.topic.clone(),
                t.partition.to_string(),
                t.offset.to_string(),
                t.translated.map_or("-".into(), |o| o.to_string()),
                t.how.clone(),
                t.reason.as_deref().map(one_line).unwrap_or_default(),
            ]
        })
        .collect();
    table(&["TOPIC", "PARTITION", from, to, "HOW", "REASON"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_the_direction_and_the_reasons() {
        let view =
            |partition, offset, translated, how: &str, reason: Option<&str>| TranslationView {
                topic: "orders".into(),
                partition,
                offset,
                translated,
                how: how.into(),
                reason: reason.map(Into::into),
            };
        let mut doc = TranslateDocument {
            mirror: "shop/dr".into(),
            source_topic: "orders".into(),
            destination_topic: "orders".into(),
            direction: "source-to-destination".into(),
            translations: vec![
                view(0, 120, Some(97), "mapped", None),
                view(
                    1,
                    900,
                    None,
                    "not-mirrored",
                    Some("source offset 900 is not\nmirrored yet"),
                ),
            ],
        };
        assert_eq!(
            translate_table(&doc),
            "TOPIC    PARTITION   SOURCE-OFFSET   DESTINATION-OFFSET   HOW            REASON\n\
             orders   0           120             97                   mapped\n\
             orders   1           900             -                    not-mirrored   source \
             offset 900 is not mirrored yet\n"
        );
        doc.direction = "destination-to-source".into();
        assert!(translate_table(&doc).starts_with("TOPIC    PARTITION   DESTINATION-OFFSET"));
        // The verifier's JSON reads into the view.
        let line = r#"{"partition":2,"offset":7,"how":"before-map","reason":"why"}"#;
        let parsed: TranslationView = serde_json::from_str(line).unwrap();
        assert!(!parsed.is_translated());
        assert_eq!(parsed.how, "before-map");
    }
}
