//! A partition's status as a `MirrorTopic` shows it, projected from its records in the state
//! topic (the operator writes it into the object; `kmirror-verify --state-only` prints it for
//! partitions the object does not list), and the one-line wording of errors it uses. Pure.

use k8s_openapi::jiff::Timestamp;
use kmirror_crds::v1alpha1::{
    DivergenceStatus, OpenTransactionStatus, PartitionState, PartitionStatus,
};

use crate::records::{FetcherStatus, POSITION_HEARTBEAT, POSITION_STALE_AFTER, PartitionRecords};

fn rfc3339(ms: i64) -> Option<String> {
    Timestamp::from_millisecond(ms).ok().map(|t| t.to_string())
}

/// How long ago (seconds) the running fetcher of a MIRRORING (or draining) partition last wrote
/// its position, when that is longer than [`POSITION_STALE_AFTER`]: its lag is not current.
fn stale_for(r: &PartitionRecords, now_ms: i64) -> Option<i64> {
    let running = r.state.as_ref().is_some_and(|s| {
        matches!(
            s.state,
            PartitionState::Mirroring | PartitionState::Stopping
        )
    });
    let pos = r
        .position
        .as_ref()
        .filter(|p| p.status == FetcherStatus::Running)?;
    let age = now_ms - pos.updated_at_ms;
    (running && age > POSITION_STALE_AFTER.as_millis() as i64).then_some(age / 1000)
}

/// Projects one partition's status from its records at `now_ms`.
pub fn partition_status(
    p: i32,
    r: &PartitionRecords,
    fetcher_pod: Option<String>,
    now_ms: i64,
) -> PartitionStatus {
    let state = r.state.as_ref();
    let position = r.position.as_ref();
    let stale = stale_for(r, now_ms);
    // A position the fetcher stopped refreshing shows no lag: unknown, never "caught up".
    // Lag is against what the fetcher can copy: under read_committed, the last stable offset
    // (an open source transaction holds it; waiting for it is no lag).
    let lag = position.filter(|_| stale.is_none()).and_then(|pos| {
        pos.readable_end()
            .map(|end| (end - pos.source_position.unwrap_or(pos.next_source_offset)).max(0))
    });
    let last_mirrored = match state.map(|s| s.state) {
        Some(PartitionState::Stopped) => state.and_then(|s| s.last_mirrored_offset),
        _ => None,
    }
    .or(position.map(|pos| pos.last_mirrored_offset));
    let error = state
        .and_then(|s| s.error.clone())
        .filter(|_| {
            state.is_some_and(|s| {
                matches!(
                    s.state,
                    PartitionState::Failed | PartitionState::Stopping | PartitionState::Stopped
                )
            })
        })
        .or_else(|| position.and_then(|pos| pos.error.as_ref().map(|e| e.message.clone())))
        .or_else(|| {
            stale.map(|age| {
                format!(
                    "lag unknown: the fetcher has not reported its position for {age}s \
                     (it writes one at least every {}s; is it stuck? see its pod's log)",
                    POSITION_HEARTBEAT.as_secs()
                )
            })
        })
        .map(|e| human_line(&e))
        .filter(|e| !e.is_empty());
    PartitionStatus {
        partition: p,
        state: state.map_or(PartitionState::Unknown, |s| s.state),
        state_epoch: state.map_or(0, |s| s.state_epoch),
        source_log_end_offset: position.and_then(|pos| pos.source_high_watermark),
        source_last_stable_offset: position.and_then(|pos| pos.source_last_stable_offset),
        open_source_transaction: position
            .filter(|_| stale.is_none())
            .and_then(|pos| pos.open_transaction)
            .map(|t| OpenTransactionStatus {
                from_offset: t.from_offset,
                since: rfc3339(t.since_ms).unwrap_or_default(),
            }),
        destination_log_end_offset: position.map(|pos| pos.destination_offset),
        last_mirrored_offset: last_mirrored,
        lag,
        lag_seconds: position.and_then(|pos| pos.lag_seconds),
        offsets_identical: position.map(|pos| pos.offsets_identical),
        fetcher_pod,
        retry_attempt: state.map(|s| s.retry_attempt).filter(|a| *a != 0),
        last_error: error,
        last_transition_time: state.and_then(|s| rfc3339(s.updated_at_ms)),
        divergence: state
            .and_then(|s| s.divergence.as_ref())
            .filter(|d| d.records > 0)
            .map(|d| DivergenceStatus {
                from_offset: d.from_offset,
                to_offset: d.to_offset,
                quarantine_topic: d.quarantine_topic.clone(),
                quarantined_records: d.quarantined,
                resolution: d.resolution.clone(),
            }),
    }
}

/// Cuts a message to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Longest message put into a partition's `lastError` or a condition about one partition.
pub const LINE_MAX: usize = 320;

/// What a person should read of an error text: one line, without log framing, at most
/// [`LINE_MAX`] bytes. Structured log lines (JSON, as the fetcher logs) give their message and
/// error fields; of several lines, the last error line wins (it says why the process stopped).
pub fn human_line(text: &str) -> String {
    let mut lines: Vec<(bool, String)> = Vec::new();
    for raw in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(serde_json::Value::Object(o)) => {
                let fields = o.get("fields").and_then(|f| f.as_object());
                let field = |k: &str| {
                    fields
                        .and_then(|f| f.get(k))
                        .or_else(|| o.get(k))
                        .and_then(|v| v.as_str())
                        .map(str::trim)
                        .filter(|v| !v.is_empty())
                };
                let level = o.get("level").and_then(|v| v.as_str()).unwrap_or("");
                let error = level.eq_ignore_ascii_case("error");
                match (field("message").or_else(|| field("msg")), field("error")) {
                    (Some(m), Some(e)) => lines.push((error, format!("{m}: {e}"))),
                    (Some(m), None) | (None, Some(m)) => lines.push((error, m.to_string())),
                    (None, None) => {}
                }
            }
            _ => lines.push((false, raw.to_string())),
        }
    }
    let chosen = if lines.len() > 1 && lines.iter().any(|(e, _)| *e) {
        lines.iter().rev().find(|(e, _)| *e).map(|(_, l)| l.clone())
    } else if lines.iter().all(|(_, l)| l.len() < LINE_MAX / 4) {
        Some(
            lines
                .iter()
                .map(|(_, l)| l.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    } else {
        lines.last().map(|(_, l)| l.clone())
    };
    let line = chosen.unwrap_or_default();
    truncate(
        &line.split_whitespace().collect::<Vec<_>>().join(" "),
        LINE_MAX,
    )
}
