//! The verification document of `kubectl mirror verify` and its summary table.

use serde::{Deserialize, Serialize};

use super::*;

/// `verify -o json|yaml`: the reports of every topic verified.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VerifyDocument {
    /// `namespace/name` of the mirror.
    pub mirror: String,
    /// No topic had mismatches or errors.
    pub clean: bool,
    /// Per topic.
    pub topics: Vec<TopicVerification>,
}

/// The verification of one topic.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TopicVerification {
    /// MirrorTopic name.
    pub name: String,
    /// Source topic.
    pub source_topic: String,
    /// Destination topic.
    pub destination_topic: String,
    /// Every report clean and no error.
    pub clean: bool,
    /// Why the verifier could not finish, if it could not.
    pub error: Option<String>,
    /// The verifier's per-partition reports, unchanged.
    pub reports: Vec<serde_json::Value>,
}

/// The fields of a verifier report the summary shows.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ReportSummary {
    /// Partition.
    pub partition: i32,
    /// Source records examined.
    pub source_records: u64,
    /// Found with the same content.
    pub matched: u64,
    /// Absent from the destination.
    pub missing: u64,
    /// Different on the destination.
    pub different: u64,
    /// On the destination only.
    pub extra: u64,
    /// After the last source record's copy.
    pub trailing: u64,
    /// Offsets identical.
    pub offsets_identical: bool,
    /// The first mismatches: (source offset, destination offset, what).
    pub examples: Vec<(i64, i64, String)>,
}

impl ReportSummary {
    /// No missing, different or extra records.
    pub fn is_clean(&self) -> bool {
        self.missing == 0 && self.different == 0 && self.extra == 0
    }
}

/// The verification summary table, followed by one line per topic that could not be verified;
/// `wide` adds the destination topic and the first mismatch.
pub fn verify_table(doc: &VerifyDocument, wide: bool) -> String {
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for t in &doc.topics {
        for r in &t.reports {
            let s: ReportSummary = serde_json::from_value(r.clone()).unwrap_or_default();
            let mut row = vec![
                t.source_topic.clone(),
                s.partition.to_string(),
                if s.is_clean() { "clean" } else { "MISMATCH" }.to_string(),
                s.source_records.to_string(),
                s.matched.to_string(),
                s.missing.to_string(),
                s.different.to_string(),
                s.extra.to_string(),
                s.trailing.to_string(),
                yes_no(Some(s.offsets_identical)),
            ];
            if wide {
                row.insert(1, t.destination_topic.clone());
                row.push(match s.examples.first() {
                    Some((src, dst, what)) => {
                        format!(
                            "source offset {src}, destination offset {dst}: {}",
                            one_line(what)
                        )
                    }
                    None => String::new(),
                });
            }
            rows.push(row);
        }
        if let Some(e) = &t.error {
            errors.push(format!("{}: {}", t.source_topic, one_line(e)));
        }
    }
    let mut out = String::new();
    if !rows.is_empty() {
        let mut headers = vec![
            "TOPIC",
            "PARTITION",
            "RESULT",
            "SOURCE-RECORDS",
            "MATCHED",
            "MISSING",
            "DIFFERENT",
            "EXTRA",
            "TRAILING",
            "IDENTICAL",
        ];
        if wide {
            headers.insert(1, "DESTINATION-TOPIC");
            headers.push("FIRST-MISMATCH");
        }
        out.push_str(&table(&headers, &rows));
    }
    for e in errors {
        out.push_str(&format!("error: {e}\n"));
    }
    out
}
