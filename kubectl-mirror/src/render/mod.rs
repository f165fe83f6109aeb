//! Pure rendering: the status document and its table, progress lines, offset tables and the
//! verification summary. Nothing here talks to the cluster.

use std::collections::BTreeMap;

use kmirror_crds::v1alpha1::{
    ClusterMirror, DesiredState, DivergencePolicy, FailoverMode, MirrorTopic, PartitionCounts,
    PartitionState, PartitionStatus,
};
use serde::{Deserialize, Serialize};

use crate::cli::Output;
use crate::select::object_name;

mod progress;
mod translation;
mod verification;

pub use progress::*;
pub use translation::*;
pub use verification::*;

/// `status -o json|yaml`: every mirror shown, with its topics and partitions.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StatusDocument {
    /// Mirrors, by namespace then name.
    pub mirrors: Vec<MirrorView>,
    /// MirrorTopics whose ClusterMirror does not exist (listed when no mirror is named).
    #[serde(default)]
    pub orphan_topics: Vec<OrphanTopicView>,
}

/// A `MirrorTopic` whose `spec.mirror` names no existing `ClusterMirror`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OrphanTopicView {
    /// Namespace.
    pub namespace: String,
    /// The missing ClusterMirror's name.
    pub mirror: String,
    /// The topic.
    #[serde(flatten)]
    pub topic: TopicView,
}

/// One `ClusterMirror`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MirrorView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Source bootstrap servers.
    pub source: String,
    /// Destination bootstrap servers.
    pub destination: String,
    /// `namespace/name` of the mirror this one reverses (failback).
    pub reverse_of: Option<String>,
    /// The `Ready` condition, if reported.
    pub ready: Option<ConditionView>,
    /// Partitions per state over the listed topics (all their partitions, listed or not).
    pub partition_counts: PartitionCounts,
    /// Topics, by source topic.
    pub topics: Vec<TopicView>,
}

/// A condition's status, reason and message.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// One `MirrorTopic`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TopicView {
    /// Object name.
    pub name: String,
    /// Source topic.
    pub source_topic: String,
    /// Destination topic.
    pub destination_topic: String,
    /// `spec.state`.
    pub desired_state: DesiredState,
    /// `spec.failover.mode`.
    pub failover_mode: FailoverMode,
    /// `spec.divergencePolicy`.
    pub divergence_policy: Option<DivergencePolicy>,
    /// `status.phase`, `Pending` without status.
    pub phase: String,
    /// `status.maxLag`.
    pub max_lag: Option<i64>,
    /// `status.offsetsIdentical`.
    pub offsets_identical: Option<bool>,
    /// `status.partitionCounts`: partitions per state, over all partitions of the topic.
    pub partition_counts: PartitionCounts,
    /// Partitions, by number.
    pub partitions: Vec<PartitionView>,
    /// Partitions not in `partitions`: a large topic's status lists only its worst ones
    /// (`--partitions all` reads the others from the state topic).
    pub partitions_omitted: i32,
}

/// One partition of a topic (every key always present).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PartitionView {
    /// Partition number.
    pub partition: i32,
    /// Lifecycle state.
    pub state: PartitionState,
    /// State transitions so far.
    pub state_epoch: i64,
    /// Records behind the source.
    pub lag: Option<i64>,
    /// Age of the oldest record not mirrored yet.
    pub lag_seconds: Option<f64>,
    /// Last source offset copied (-1: none).
    pub last_mirrored_offset: Option<i64>,
    /// Source log-end offset.
    pub source_log_end_offset: Option<i64>,
    /// Destination log-end offset.
    pub destination_log_end_offset: Option<i64>,
    /// Offsets identical on both sides.
    pub offsets_identical: Option<bool>,
    /// Fetcher pod.
    pub fetcher_pod: Option<String>,
    /// Failed retries (-1: not retryable).
    pub retry_attempt: Option<i32>,
    /// Last error.
    pub last_error: Option<String>,
    /// When the state was entered.
    pub last_transition_time: Option<String>,
    /// Divergence found on failback.
    pub divergence: Option<DivergenceView>,
    /// An open source transaction the partition waits for.
    pub open_source_transaction: Option<OpenTransactionView>,
}

/// An open source transaction holding a partition.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OpenTransactionView {
    /// The first offset it holds.
    pub from_offset: i64,
    /// Since when (RFC 3339).
    pub since: String,
}

/// Divergent records found on failback.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DivergenceView {
    /// First divergent offset.
    pub from_offset: i64,
    /// One past the last divergent offset.
    pub to_offset: i64,
    /// Where copies of the divergent records are.
    pub quarantine_topic: String,
    /// Records copied there so far.
    pub quarantined_records: i64,
    /// Resolution applied, if any.
    pub resolution: Option<String>,
}

impl From<&PartitionStatus> for PartitionView {
    fn from(p: &PartitionStatus) -> PartitionView {
        PartitionView {
            partition: p.partition,
            state: p.state,
            state_epoch: p.state_epoch,
            lag: p.lag,
            lag_seconds: p.lag_seconds,
            last_mirrored_offset: p.last_mirrored_offset,
            source_log_end_offset: p.source_log_end_offset,
            destination_log_end_offset: p.destination_log_end_offset,
            offsets_identical: p.offsets_identical,
            fetcher_pod: p.fetcher_pod.clone(),
            retry_attempt: p.retry_attempt,
            last_error: p.last_error.clone(),
            last_transition_time: p.last_transition_time.clone(),
            divergence: p.divergence.as_ref().map(|d| DivergenceView {
                from_offset: d.from_offset,
                to_offset: d.to_offset,
                quarantine_topic: d.quarantine_topic.clone(),
                quarantined_records: d.quarantined_records,
                resolution: d.resolution.clone(),
            }),
            open_source_transaction: p.open_source_transaction.as_ref().map(|t| {
                OpenTransactionView {
                    from_offset: t.from_offset,
                    since: t.since.clone(),
                }
            }),
        }
    }
}

/// The view of one topic.
pub fn topic_view(t: &MirrorTopic) -> TopicView {
    let status = t.status.as_ref();
    let mut partitions: Vec<PartitionView> = status
        .map(|s| s.partitions.iter().map(PartitionView::from).collect())
        .unwrap_or_default();
    partitions.sort_by_key(|p| p.partition);
    TopicView {
        name: object_name(t).to_string(),
        source_topic: t.spec.source_topic.clone(),
        destination_topic: t.destination_topic().to_string(),
        desired_state: t.spec.state,
        failover_mode: t.spec.failover.mode,
        divergence_policy: t.spec.divergence_policy,
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".to_string()),
        max_lag: status.and_then(|s| s.max_lag),
        offsets_identical: status.and_then(|s| s.offsets_identical),
        partition_counts: status.map(|s| s.counts()).unwrap_or_default(),
        partitions,
        partitions_omitted: status.map_or(0, |s| s.partitions_omitted),
    }
}

/// The line that says what a topic's listed partitions leave out: "7 more partitions not shown
/// (6 MIRRORING, lag at most 3; 1 STOPPING); --partitions all shows them" (`None`: nothing left
/// out). The MIRRORING ones left out have no more lag than the least of those listed.
pub fn omitted_note(t: &TopicView) -> Option<String> {
    if t.partitions_omitted <= 0 {
        return None;
    }
    let mut parts = Vec::new();
    for state in PartitionState::ALL {
        let listed = t.partitions.iter().filter(|p| p.state == state).count() as i32;
        let left = t.partition_counts.get(state) - listed;
        if left <= 0 {
            continue;
        }
        let mut part = format!("{left} {state}");
        if state == PartitionState::Mirroring {
            let bound = t
                .partitions
                .iter()
                .filter(|p| p.state == state)
                .filter_map(|p| p.lag)
                .min()
                .or(t.max_lag);
            if let Some(lag) = bound {
                part.push_str(&format!(", lag at most {lag}"));
            }
        }
        parts.push(part);
    }
    let what = if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join("; "))
    };
    Some(format!(
        "{}: {} more partitions not shown{what}; --partitions all shows them",
        t.name, t.partitions_omitted
    ))
}

/// Builds the document from mirrors and topics (topics of other mirrors are ignored).
pub fn status_document(mirrors: &[ClusterMirror], topics: &[MirrorTopic]) -> StatusDocument {
    let mut by_mirror: BTreeMap<(String, String), Vec<&MirrorTopic>> = BTreeMap::new();
    for t in topics {
        let ns = t.metadata.namespace.clone().unwrap_or_default();
        by_mirror
            .entry((ns, t.spec.mirror.clone()))
            .or_default()
            .push(t);
    }
    let mut views: Vec<MirrorView> = mirrors
        .iter()
        .map(|m| {
            let namespace = m.metadata.namespace.clone().unwrap_or_default();
            let name = m.metadata.name.clone().unwrap_or_default();
            let mut topics: Vec<TopicView> = by_mirror
                .get(&(namespace.clone(), name.clone()))
                .map(|ts| ts.iter().map(|t| topic_view(t)).collect())
                .unwrap_or_default();
            topics.sort_by(|a, b| (&a.source_topic, &a.name).cmp(&(&b.source_topic, &b.name)));
            let counts = topics.iter().fold(PartitionCounts::default(), |acc, t| {
                acc.add(&t.partition_counts)
            });
            let ready = m.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| ConditionView {
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                    })
            });
            MirrorView {
                namespace,
                name,
                source: m.spec.source.bootstrap_servers.clone(),
                destination: m.spec.destination.bootstrap_servers.clone(),
                reverse_of: m.spec.reverse_of.clone(),
                ready,
                partition_counts: counts,
                topics,
            }
        })
        .collect();
    views.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    StatusDocument {
        mirrors: views,
        orphan_topics: Vec::new(),
    }
}

/// The topics whose ClusterMirror is not among `all_mirrors` (every mirror of the namespaces
/// the topics were listed from), by namespace, mirror and name.
pub fn orphan_topics(
    all_mirrors: &[ClusterMirror],
    topics: &[MirrorTopic],
) -> Vec<OrphanTopicView> {
    let known: std::collections::BTreeSet<(&str, &str)> = all_mirrors
        .iter()
        .map(|m| {
            (
                m.metadata.namespace.as_deref().unwrap_or_default(),
                m.metadata.name.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    let mut orphans: Vec<OrphanTopicView> = topics
        .iter()
        .filter(|t| {
            let ns = t.metadata.namespace.as_deref().unwrap_or_default();
            !known.contains(&(ns, t.spec.mirror.as_str()))
        })
        .map(|t| OrphanTopicView {
            namespace: t.metadata.namespace.clone().unwrap_or_default(),
            mirror: t.spec.mirror.clone(),
            topic: topic_view(t),
        })
        .collect();
    orphans.sort_by(|a, b| {
        (&a.namespace, &a.mirror, &a.topic.name).cmp(&(&b.namespace, &b.mirror, &b.topic.name))
    });
    orphans
}

/// Aligns rows under headers, columns three spaces apart, no trailing spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < cells.len() {
                let pad = widths[i] - cell.chars().count() + 3;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn yes_no(v: Option<bool>) -> String {
    match v {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => "-".into(),
    }
}

/// A message on one line.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The records at offsets `from` up to `to` (exclusive) as people read a range: first and
/// last offset and the count, e.g. `offsets 2169–2173 (5 records)`, `offset 7 (1 record)`.
pub fn offset_range(from: i64, to: i64) -> String {
    match to - from {
        n if n <= 0 => format!("no records (offset {from})"),
        1 => format!("offset {from} (1 record)"),
        n => format!("offsets {from}–{} ({n} records)", to - 1),
    }
}

/// How a divergence reads in a table cell and in messages.
pub fn divergence_note(d: &DivergenceView) -> String {
    let resolution = match &d.resolution {
        Some(r) => format!("resolved: {r}"),
        None => "waiting for a divergence policy".to_string(),
    };
    format!(
        "divergence: {} quarantined in {}; {resolution}",
        offset_range(d.from_offset, d.to_offset),
        d.quarantine_topic
    )
}

/// The topic cell: source topic, with the destination when it has another name.
fn topic_cell(t: &TopicView) -> String {
    if t.destination_topic == t.source_topic {
        t.source_topic.clone()
    } else {
        format!("{} → {}", t.source_topic, t.destination_topic)
    }
}

/// The header line of one mirror in the status table.
pub fn mirror_header(m: &MirrorView) -> String {
    let ready = match &m.ready {
        Some(c) if c.status == "True" || c.reason.is_empty() => c.status.clone(),
        Some(c) => format!("{} ({})", c.status, c.reason),
        None => "Unknown".to_string(),
    };
    let mut header = format!(
        "MIRROR {}/{}   READY {ready}   {} → {}   TOPICS {}",
        m.namespace,
        m.name,
        m.source,
        m.destination,
        m.topics.len()
    );
    if let Some(r) = &m.reverse_of {
        header.push_str(&format!("   REVERSE-OF {r}"));
    }
    header
}

/// Column headers of the status table.
pub const STATUS_COLUMNS: [&str; 8] = [
    "TOPIC",
    "PARTITION",
    "STATE",
    "LAG",
    "LAST-MIRRORED",
    "IDENTICAL",
    "POD",
    "ERROR",
];

/// Column headers of `status -o wide`: the table's, with the log-end offsets of both sides,
/// the lag in seconds, the state epoch, the retry attempt and when the state was entered
/// before the error.
pub const STATUS_WIDE_COLUMNS: [&str; 14] = [
    "TOPIC",
    "PARTITION",
    "STATE",
    "LAG",
    "LAG-SECONDS",
    "LAST-MIRRORED",
    "SOURCE-END",
    "DESTINATION-END",
    "IDENTICAL",
    "EPOCH",
    "RETRY",
    "SINCE",
    "POD",
    "ERROR",
];

fn seconds(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |s| format!("{s:.1}"))
}

/// Rows of one topic in `-o wide`.
pub fn topic_rows_wide(t: &TopicView) -> Vec<Vec<String>> {
    if t.partitions.is_empty() {
        let mut row = vec!["-".to_string(); STATUS_WIDE_COLUMNS.len()];
        row[0] = topic_cell(t);
        row[2] = t.phase.to_uppercase();
        row[3] = opt(t.max_lag);
        row[8] = yes_no(t.offsets_identical);
        row[13] = String::new();
        return vec![row];
    }
    t.partitions
        .iter()
        .map(|p| {
            vec![
                topic_cell(t),
                p.partition.to_string(),
                p.state.to_string(),
                opt(p.lag),
                seconds(p.lag_seconds),
                opt(p.last_mirrored_offset),
                opt(p.source_log_end_offset),
                opt(p.destination_log_end_offset),
                yes_no(p.offsets_identical),
                p.state_epoch.to_string(),
                opt(p.retry_attempt),
                opt(p.last_transition_time.as_deref()),
                opt(p.fetcher_pod.as_deref()),
                error_cell(p),
            ]
        })
        .collect()
}

fn error_cell(p: &PartitionView) -> String {
    match (&p.last_error, &p.divergence, &p.open_source_transaction) {
        (Some(e), _, _) => one_line(e),
        (None, Some(d), _) => divergence_note(d),
        (None, None, Some(t)) => open_transaction_note(t),
        (None, None, None) => String::new(),
    }
}

/// "waiting: a source transaction open since 2026-12-07T10:00:00Z holds offsets ≥ 150".
pub fn open_transaction_note(t: &OpenTransactionView) -> String {
    format!(
        "waiting: a source transaction open since {} holds offsets ≥ {} (copied once it commits)",
        t.since, t.from_offset
    )
}

/// Rows of one topic: one per partition, or one `PENDING` row without partition status.
pub fn topic_rows(t: &TopicView) -> Vec<Vec<String>> {
    if t.partitions.is_empty() {
        return vec![vec![
            topic_cell(t),
            "-".into(),
            t.phase.to_uppercase(),
            opt(t.max_lag),
            "-".into(),
            yes_no(t.offsets_identical),
            "-".into(),
            String::new(),
        ]];
    }
    t.partitions
        .iter()
        .map(|p| {
            let error = error_cell(p);
            vec![
                topic_cell(t),
                p.partition.to_string(),
                p.state.to_string(),
                opt(p.lag),
                opt(p.last_mirrored_offset),
                yes_no(p.offsets_identical),
                opt(p.fetcher_pod.as_deref()),
                error,
            ]
        })
        .collect()
}

/// How the rows of one topic are made.
type RowsOf = fn(&TopicView) -> Vec<Vec<String>>;

/// The human-readable status: per mirror a header line, a table, a blank line; `wide` adds
/// columns.
pub fn status_table(doc: &StatusDocument, wide: bool) -> String {
    let (columns, rows): (&[&str], RowsOf) = if wide {
        (&STATUS_WIDE_COLUMNS, topic_rows_wide)
    } else {
        (&STATUS_COLUMNS, topic_rows)
    };
    let mut out = String::new();
    for (i, m) in doc.mirrors.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&mirror_header(m));
        out.push('\n');
        if let Some(c) = &m.ready
            && c.status != "True"
            && !c.message.is_empty()
        {
            out.push_str(&format!("  {}\n", one_line(&c.message)));
        }
        if m.topics.is_empty() {
            out.push_str("  (no MirrorTopics)\n");
            continue;
        }
        let all: Vec<Vec<String>> = m.topics.iter().flat_map(rows).collect();
        out.push_str(&table(columns, &all));
        for note in m.topics.iter().filter_map(omitted_note) {
            out.push_str(&format!("  {note}\n"));
        }
    }
    for o in &doc.orphan_topics {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!(
            "MIRRORTOPIC {}/{}   ClusterMirror {} not found: nothing mirrors it\n",
            o.namespace, o.topic.name, o.mirror
        ));
        out.push_str(&table(columns, &rows(&o.topic)));
        if let Some(note) = omitted_note(&o.topic) {
            out.push_str(&format!("  {note}\n"));
        }
    }
    out
}

/// Serializes a document as JSON or YAML (`Output::Table` is the caller's business).
pub fn document<T: Serialize>(value: &T, output: Output) -> String {
    match output {
        Output::Yaml => serde_yaml::to_string(value).expect("documents serialize"),
        _ => {
            let mut s = serde_json::to_string_pretty(value).expect("documents serialize");
            s.push('\n');
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{condition, mirror, partition, topic, with_status};
    use kmirror_crds::v1alpha1::DivergenceStatus;

    #[test]
    fn orphans_are_topics_whose_mirror_is_missing_in_their_namespace() {
        let mirrors = vec![mirror("dr", "ns"), mirror("lost", "other")];
        let topics = vec![
            topic("dr-orders", "dr", "orders"),
            topic("lost-b", "lost", "b"),
            topic("lost-a", "lost", "a"),
        ];
        let orphans = orphan_topics(&mirrors, &topics);
        // `lost` exists, but in another namespace than the topics (all in `ns`).
        let names: Vec<_> = orphans.iter().map(|o| o.topic.name.as_str()).collect();
        assert_eq!(names, ["lost-a", "lost-b"]);
        assert!(
            orphans
                .iter()
                .all(|o| o.mirror == "lost" && o.namespace == "ns")
        );

        let mut doc = status_document(&mirrors[..1], &topics);
        assert_eq!(doc.mirrors[0].topics.len(), 1);
        doc.orphan_topics = orphans;
        let text = status_table(&doc, false);
        assert!(
            text.contains("MIRRORTOPIC ns/lost-a   ClusterMirror lost not found"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&document(&doc, Output::Json)).unwrap();
        assert_eq!(json["orphanTopics"][1]["sourceTopic"], "b");
        // Without orphans the key is still there, as every key of the document.
        let doc = status_document(&mirrors, &topics[..1]);
        let json: serde_json::Value = serde_json::from_str(&document(&doc, Output::Json)).unwrap();
        assert_eq!(json["orphanTopics"], serde_json::json!([]), "{json}");
    }

    fn fixture() -> StatusDocument {
        let mut m = mirror("dr", "ns");
        m.status = Some(kmirror_crds::v1alpha1::ClusterMirrorStatus {
            conditions: vec![condition(
                "Ready",
                "False",
                "SourceUnreachable",
                "no\nbrokers",
            )],
            ..Default::default()
        });
        let orders = with_status(
            topic("dr-orders", "dr", "orders"),
            vec![
                PartitionStatus {
                    lag: Some(5),
                    last_error: Some("broker   down\nagain".into()),
                    state: PartitionState::Failed,
                    ..partition(1, PartitionState::Failed)
                },
                PartitionStatus {
                    lag: Some(0),
                    last_mirrored_offset: Some(1499),
                    offsets_identical: Some(true),
                    fetcher_pod: Some("dr-orders-fetcher-0".into()),
                    ..partition(0, PartitionState::Mirroring)
                },
            ],
        );
        let mut pending = topic("dr-audit", "dr", "audit");
        pending.spec.destination_topic = Some("audit-copy".into());
        let other = topic("x-orders", "other", "orders");
        status_document(&[m, mirror("b", "ns")], &[orders, pending, other])
    }

    #[test]
    fn document_groups_sorts_and_counts() {
        let doc = fixture();
        assert_eq!(doc.mirrors.len(), 2);
        assert_eq!(doc.mirrors[0].name, "b");
        assert!(doc.mirrors[0].topics.is_empty());
        let dr = &doc.mirrors[1];
        assert_eq!(dr.source, "src:9092");
        assert_eq!(dr.destination, "dst:9092");
        let names: Vec<&str> = dr.topics.iter().map(|t| t.source_topic.as_str()).collect();
        assert_eq!(names, ["audit", "orders"]);
        assert_eq!(dr.topics[0].phase, "Pending");
        assert_eq!(dr.topics[0].destination_topic, "audit-copy");
        let parts: Vec<i32> = dr.topics[1]
            .partitions
            .iter()
            .map(|p| p.partition)
            .collect();
        assert_eq!(parts, [0, 1]);
        assert_eq!(dr.partition_counts.total, 2);
        assert_eq!(dr.partition_counts.mirroring, 1);
        assert_eq!(dr.partition_counts.failed, 1);
        assert_eq!(dr.ready.as_ref().unwrap().reason, "SourceUnreachable");
    }

    #[test]
    fn json_keys_are_always_present() {
        let json = serde_json::to_value(fixture()).unwrap();
        let dr = &json["mirrors"][1];
        for key in [
            "namespace",
            "name",
            "source",
            "destination",
            "reverseOf",
            "ready",
            "partitionCounts",
            "topics",
        ] {
            assert!(dr.get(key).is_some(), "mirror key {key}");
        }
        for key in ["partitionCounts", "partitionsOmitted", "partitions"] {
            assert!(dr["topics"][1].get(key).is_some(), "topic key {key}");
        }
        let p = &dr["topics"][1]["partitions"][0];
        for key in [
            "partition",
            "state",
            "stateEpoch",
            "lag",
            "lagSeconds",
            "lastMirroredOffset",
            "sourceLogEndOffset",
            "destinationLogEndOffset",
            "offsetsIdentical",
            "fetcherPod",
            "retryAttempt",
            "lastError",
            "lastTransitionTime",
            "divergence",
        ] {
            assert!(p.get(key).is_some(), "partition key {key}");
        }
        assert_eq!(p["state"], "MIRRORING");
        assert_eq!(dr["topics"][1]["desiredState"], "Mirroring");
        assert_eq!(dr["topics"][1]["failoverMode"], "Graceful");
        assert!(dr["reverseOf"].is_null());
        let back: StatusDocument = serde_json::from_value(json).unwrap();
        assert_eq!(back, fixture());
        let yaml = document(&fixture(), Output::Yaml);
        assert!(yaml.contains("lastMirroredOffset: 1499"), "{yaml}");
    }

    #[test]
    fn table_shows_header_rows_pending_and_errors() {
        let text = status_table(&fixture(), false);
        let expected = "\
MIRROR ns/b   READY Unknown   src:9092 → dst:9092   TOPICS 0
  (no MirrorTopics)

MIRROR ns/dr   READY False (SourceUnreachable)   src:9092 → dst:9092   TOPICS 2
  no brokers
TOPIC                PARTITION   STATE       LAG   LAST-MIRRORED   IDENTICAL   POD                   ERROR
audit → audit-copy   -           PENDING     -     -               -           -
orders               0           MIRRORING   0     1499            yes         dr-orders-fetcher-0
orders               1           FAILED      5     -               -           -                     broker down again
";
        assert_eq!(text, expected);
    }

    #[test]
    fn divergence_shows_in_error_column() {
        let t = with_status(
            topic("r-orders", "r", "orders"),
            vec![PartitionStatus {
                divergence: Some(DivergenceStatus {
                    from_offset: 100,
                    to_offset: 120,
                    quarantine_topic: "orders.kmirror-quarantine".into(),
                    quarantined_records: 20,
                    resolution: None,
                }),
                ..partition(0, PartitionState::Preparing)
            }],
        );
        let rows = topic_rows(&topic_view(&t));
        assert_eq!(
            rows[0][7],
            "divergence: offsets 100–119 (20 records) quarantined in \
             orders.kmirror-quarantine; waiting for a divergence policy"
        );
        assert_eq!(unresolved_divergences(&t).len(), 1);
    }

    #[test]
    fn offset_ranges_name_first_and_last_offset() {
        assert_eq!(offset_range(2169, 2174), "offsets 2169–2173 (5 records)");
        assert_eq!(offset_range(7, 8), "offset 7 (1 record)");
        assert_eq!(offset_range(7, 7), "no records (offset 7)");
    }

    #[test]
    fn wide_status_has_offsets_epoch_and_retry() {
        let t = with_status(
            topic("dr-orders", "dr", "orders"),
            vec![PartitionStatus {
                lag: Some(3),
                lag_seconds: Some(1.25),
                last_mirrored_offset: Some(96),
                source_log_end_offset: Some(100),
                destination_log_end_offset: Some(97),
                state_epoch: 4,
                retry_attempt: Some(2),
                last_transition_time: Some("2026-01-01T00:00:00Z".into()),
                fetcher_pod: Some("dr-orders-0".into()),
                ..partition(0, PartitionState::Mirroring)
            }],
        );
        let rows = topic_rows_wide(&topic_view(&t));
        assert_eq!(
            rows[0],
            [
                "orders",
                "0",
                "MIRRORING",
                "3",
                "1.2",
                "96",
                "100",
                "97",
                "-",
                "4",
                "2",
                "2026-01-01T00:00:00Z",
                "dr-orders-0",
                ""
            ]
        );
        let pending = topic_rows_wide(&topic_view(&topic("p", "dr", "p")));
        assert_eq!(pending[0].len(), STATUS_WIDE_COLUMNS.len());
        assert_eq!(pending[0][2], "PENDING");
    }

    #[test]
    fn progress_lines() {
        let mut t = with_status(
            topic("dr-orders", "dr", "orders"),
            vec![
                PartitionStatus {
                    lag: Some(100),
                    ..partition(0, PartitionState::Stopping)
                },
                PartitionStatus {
                    lag: Some(20),
                    last_error: Some("boom".into()),
                    ..partition(1, PartitionState::Failed)
                },
                PartitionStatus {
                    lag: Some(0),
                    last_mirrored_offset: Some(41),
                    ..partition(2, PartitionState::Stopped)
                },
            ],
        );
        let p = progress(&t, PartitionState::Stopped, None);
        assert_eq!(
            progress_line(&p, PartitionState::Stopped),
            "orders: 1/3 partitions STOPPED, 1 FAILED, lag 120"
        );
        assert_eq!(failed_lines(&p), ["orders[1] FAILED: boom"]);
        assert!(!p.complete());
        for part in &mut t.status.as_mut().unwrap().partitions {
            part.state = PartitionState::Stopped;
            part.lag = None;
        }
        t.status.as_mut().unwrap().observed_generation = Some(2);
        let p = progress(&t, PartitionState::Stopped, Some(3));
        assert!(p.stale && !p.complete());
        assert!(progress(&t, PartitionState::Stopped, Some(2)).complete());
        assert_eq!(
            progress_line(
                &progress(&t, PartitionState::Stopped, Some(2)),
                PartitionState::Stopped
            ),
            "orders: 3/3 partitions STOPPED"
        );
        let empty = topic("dr-x", "dr", "x");
        assert_eq!(
            progress_line(
                &progress(&empty, PartitionState::Stopped, None),
                PartitionState::Stopped
            ),
            "x: waiting for the operator to report partitions"
        );
        assert!(!progress(&empty, PartitionState::Stopped, None).complete());
        // No partition reported because the operator refuses the topic: the reason is shown.
        let mut refused = with_status(topic("dr-y", "dr", "y"), vec![]);
        refused.status.as_mut().unwrap().conditions = vec![condition(
            "Ready",
            "False",
            "DestinationUnsupported",
            "the destination's brokers are Kafka 2.1 or earlier",
        )];
        assert_eq!(
            progress_line(
                &progress(&refused, PartitionState::Mirroring, None),
                PartitionState::Mirroring
            ),
            "y: waiting for the operator to report partitions (DestinationUnsupported: the \
             destination's brokers are Kafka 2.1 or earlier)"
        );
        assert_eq!(
            progress(&refused, PartitionState::Mirroring, None).refused(),
            Some(
                "y: DestinationUnsupported: the destination's brokers are Kafka 2.1 or earlier"
                    .to_string()
            )
        );
        assert_eq!(
            progress(&empty, PartitionState::Stopped, None).refused(),
            None
        );
        let lmo = last_mirrored_table(&[&t]);
        assert!(
            lmo.starts_with("TOPIC    PARTITION   STATE     LAST-MIRRORED-OFFSET\n"),
            "{lmo}"
        );
        assert!(lmo.contains("orders   2           STOPPED   41\n"), "{lmo}");
    }

    #[test]
    fn verify_summary() {
        let doc = VerifyDocument {
            mirror: "ns/dr".into(),
            clean: false,
            topics: vec![
                TopicVerification {
                    name: "dr-orders".into(),
                    source_topic: "orders".into(),
                    destination_topic: "orders".into(),
                    clean: false,
                    error: None,
                    reports: vec![
                        serde_json::json!({"partition": 0, "sourceRecords": 10, "matched": 10,
                            "missing": 0, "different": 0, "extra": 0, "trailing": 0,
                            "offsetsIdentical": true, "examples": []}),
                        serde_json::json!({"partition": 1, "sourceRecords": 10, "matched": 9,
                            "missing": 1, "different": 0, "extra": 0, "trailing": 0,
                            "offsetsIdentical": true, "examples": [[5, 5, "missing"]]}),
                    ],
                },
                TopicVerification {
                    name: "dr-pay".into(),
                    source_topic: "pay".into(),
                    destination_topic: "pay".into(),
                    clean: false,
                    error: Some("no state\nrecorded".into()),
                    reports: vec![],
                },
            ],
        };
        let text = verify_table(&doc, false);
        assert!(
            text.contains("orders   0           clean      10"),
            "{text}"
        );
        let wide = verify_table(&doc, true);
        assert!(
            wide.lines().next().unwrap().contains("DESTINATION-TOPIC")
                && wide.contains("source offset 5, destination offset 5: missing"),
            "{wide}"
        );
        assert!(
            text.contains("orders   1           MISMATCH   10"),
            "{text}"
        );
        assert!(text.ends_with("error: pay: no state recorded\n"), "{text}");
    }

    #[test]
    fn table_alignment_counts_characters() {
        let t = table(
            &["A", "B"],
            &[
                vec!["→x".into(), "1".into()],
                vec!["long".into(), "".into()],
            ],
        );
        assert_eq!(t, "A      B\n→x     1\nlong\n");
    }
}
