//! The lifecycle of one replication unit (a source partition) and its status.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// State of one mirrored partition.
///
/// ```text
/// UNKNOWN ─▶ PREPARING ─▶ MIRRORING ─▶ PAUSED
///               │  ▲          │          │
///               ▼  │          ▼          ▼
///             STOPPING ◀──────┴──────────┘ ─▶ STOPPED ─▶ PREPARING (mirror again)
///  any ─▶ FAILED ─▶ PREPARING (retry with backoff, unless non-retryable)
///         FAILED ─▶ STOPPING (failover stays possible)
/// ```
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PartitionState {
    /// No state recorded yet.
    #[default]
    Unknown,
    /// Destination partition being aligned with the source: created, start offset decided,
    /// divergence checked.
    Preparing,
    /// A fetcher copies records.
    Mirroring,
    /// Pause requested: the fetcher is still stopping (flushing, persisting its position).
    Pausing,
    /// No fetching (the fetcher is gone); the destination topic stays read-only.
    Paused,
    /// Failover requested (or source topic deleted): the fetcher stops and the final position is
    /// recorded.
    Stopping,
    /// Last mirrored offset persisted; the destination topic is writable.
    Stopped,
    /// An error; retried with backoff unless non-retryable.
    Failed,
}

impl PartitionState {
    /// All states, in lifecycle order.
    pub const ALL: [PartitionState; 8] = [
        PartitionState::Unknown,
        PartitionState::Preparing,
        PartitionState::Mirroring,
        PartitionState::Pausing,
        PartitionState::Paused,
        PartitionState::Stopping,
        PartitionState::Stopped,
        PartitionState::Failed,
    ];

    /// The name used in status, metrics and the state topic.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionState::Unknown => "UNKNOWN",
            PartitionState::Preparing => "PREPARING",
            PartitionState::Mirroring => "MIRRORING",
            PartitionState::Pausing => "PAUSING",
            PartitionState::Paused => "PAUSED",
            PartitionState::Stopping => "STOPPING",
            PartitionState::Stopped => "STOPPED",
            PartitionState::Failed => "FAILED",
        }
    }

    /// Whether the lifecycle allows going from `self` to `to`. Staying in a state is allowed.
    pub fn can_transition_to(self, to: PartitionState) -> bool {
        use PartitionState::*;
        if self == to || to == Failed {
            return true;
        }
        match to {
            Unknown => false,
            Preparing => matches!(self, Unknown | Stopped | Failed | Paused),
            Mirroring => self == Preparing,
            // A pause stops the fetcher first (PAUSING); a topic created (or retried) paused
            // waits in PAUSED without mirroring first.
            Pausing => self == Mirroring,
            Paused => matches!(self, Pausing | Preparing),
            // Failover must stay possible from FAILED (e.g. the source is broken for good).
            Stopping => matches!(self, Preparing | Mirroring | Pausing | Paused | Failed),
            Stopped => self == Stopping,
            Failed => true,
        }
    }

    /// A fetcher process should run for the partition in this state.
    pub fn needs_fetcher(self) -> bool {
        matches!(self, PartitionState::Mirroring)
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of one partition of a `MirrorTopic`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStatus {
    /// Partition number (same on both sides).
    pub partition: i32,
    /// Lifecycle state.
    pub state: PartitionState,
    /// Monotonic counter of state transitions, as persisted in the state topic.
    #[serde(default)]
    pub state_epoch: i64,
    /// Source log-end offset (high watermark).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_log_end_offset: Option<i64>,
    /// Source last stable offset, when the fetcher reads committed records only: what it can
    /// copy up to, and what `lag` is measured against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_last_stable_offset: Option<i64>,
    /// A source transaction still open that holds the partition: its records, and every record
    /// after its first, become readable when it commits (or are skipped when it aborts). The
    /// partition waits for it; that is not a fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_source_transaction: Option<OpenTransactionStatus>,
    /// Destination log-end offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_log_end_offset: Option<i64>,
    /// Last source offset copied to the destination (-1: none yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirrored_offset: Option<i64>,
    /// Records the destination is behind what it can copy (the last stable offset under
    /// read_committed, else the log end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// Age in seconds of the oldest record not yet mirrored (0 when caught up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
    /// Every destination offset equals its source offset (no translation needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offsets_identical: Option<bool>,
    /// Pod that runs this partition's fetcher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetcher_pod: Option<String>,
    /// Failed retries so far (reset on success); -1 when the failure is not retryable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_attempt: Option<i32>,
    /// Human-readable reason of the last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the partition entered its current state (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Records found on the destination-to-be (the old source, on failback) after the last
    /// mirrored offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<DivergenceStatus>,
}

/// An open source transaction holding a partition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenTransactionStatus {
    /// The first offset it holds (the last stable offset).
    pub from_offset: i64,
    /// Since when it has held it, as the fetcher first saw it (RFC 3339).
    pub since: String,
}

/// Divergent records found on failback.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DivergenceStatus {
    /// First divergent offset (the last mirrored offset + 1).
    pub from_offset: i64,
    /// One past the last divergent offset.
    pub to_offset: i64,
    /// Topic holding copies of the divergent records.
    pub quarantine_topic: String,
    /// Records copied to the quarantine topic so far.
    pub quarantined_records: i64,
    /// Resolution applied, once a policy is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::PartitionState::{self, *};

    #[test]
    fn lifecycle_transitions() {
        let allowed = [
            (Unknown, Preparing),
            (Preparing, Mirroring),
            (Mirroring, Pausing),
            (Pausing, Paused),
            (Pausing, Stopping),
            (Preparing, Paused),
            (Paused, Preparing),
            (Mirroring, Stopping),
            (Paused, Stopping),
            (Preparing, Stopping),
            (Stopping, Stopped),
            (Stopped, Preparing),
            (Failed, Preparing),
            (Mirroring, Failed),
            (Stopped, Failed),
            (Failed, Stopping),
        ];
        for (from, to) in allowed {
            assert!(from.can_transition_to(to), "{from} -> {to} must be allowed");
        }
        let refused = [
            (Unknown, Mirroring),
            (Stopped, Mirroring),
            (Stopped, Paused),
            (Unknown, Paused),
            (Mirroring, Stopped),
            (Mirroring, Paused),
            (Pausing, Mirroring),
            (Paused, Mirroring),
            (Failed, Mirroring),
            (Mirroring, Unknown),
            (Stopping, Mirroring),
        ];
        for (from, to) in refused {
            assert!(
                !from.can_transition_to(to),
                "{from} -> {to} must be refused"
            );
        }
    }

    #[test]
    fn state_names_round_trip() {
        for s in PartitionState::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<PartitionState>(&json).unwrap(), s);
        }
    }
}
