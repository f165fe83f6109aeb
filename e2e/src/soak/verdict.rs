//! The soak's verdict: the verification of every partition, the partitions' final states, and
//! the table the soak prints — faults injected by kind, records mirrored, lost, duplicated,
//! field mismatches, offsets identical, max lag, recovery time per fault kind, partitions FAILED
//! and why — with the exit status it implies.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use kmirror_crds::v1alpha1::PartitionState;

use super::compaction::CompactionCheck;
use super::cycle::CycleOutcome;
use super::mirror::{Monitor, PartitionView};
use super::plan::FaultKind;
use super::verify::{PartitionCheck, VerifyReport};

/// Totals over partitions.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Totals {
    /// Records found on the destination with the same content.
    pub mirrored: u64,
    /// Records absent.
    pub lost: u64,
    /// Destination records no source record maps to, plus trailing copies.
    pub duplicated: u64,
    /// Records with different content.
    pub mismatched: u64,
    /// Partitions whose offsets are identical.
    pub identical: usize,
    /// Partitions verified.
    pub verified: usize,
}

impl Totals {
    /// Adds a report.
    pub fn add(&mut self, r: &VerifyReport) {
        self.mirrored += r.matched;
        self.lost += r.missing;
        self.duplicated += r.extra + r.trailing;
        self.mismatched += r.different;
        self.identical += usize::from(r.offsets_identical);
        self.verified += 1;
    }

    /// Adds only what a stopped partition wrote wrongly (different and extra records).
    pub fn add_wrong(&mut self, r: &VerifyReport) {
        self.duplicated += r.extra + r.trailing;
        self.mismatched += r.different;
    }
}

/// One injected fault and the recovery after it.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    /// Kind.
    pub kind: FaultKind,
    /// What was done.
    pub what: String,
    /// Why injecting failed.
    pub error: Option<String>,
    /// Time from healed to caught up, or what stayed behind.
    pub recovery: Result<Duration, String>,
    /// How long the fault lasted, from its injection until it was healed.
    pub window: Duration,
}

/// Everything the table shows.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    /// Seed.
    pub seed: u64,
    /// Planned minutes of faults.
    pub minutes: f64,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// Faults injected.
    pub faults: Vec<FaultRecord>,
    /// Verification of the forward mirror.
    pub checks: Vec<PartitionCheck>,
    /// Final partition states of the forward mirror.
    pub final_states: Vec<PartitionView>,
    /// Lags seen.
    pub monitor: Monitor,
    /// The failover cycle.
    pub cycle: Option<CycleOutcome>,
    /// Records produced to the source (acknowledged), failed, aborted.
    pub produced: (u64, u64, u64),
    /// Records the consumer group consumed.
    pub consumed: u64,
    /// The topic whose source log is diverged on purpose.
    pub diverged_topic: String,
    /// The compacted partitions' own check, by `topic-partition`.
    pub compaction: BTreeMap<String, Result<CompactionCheck, String>>,
    /// Producers that gave up on records: topic, how many, the last error.
    pub producer_failures: Vec<(String, u64, Option<String>)>,
}

/// A partition FAILED (or otherwise not mirroring) at the end, with its reason when it has one.
fn not_mirroring(f: &Findings) -> Vec<(String, PartitionState, Option<String>)> {
    f.final_states
        .iter()
        .filter(|v| v.state != PartitionState::Mirroring)
        .map(|v| (v.label(), v.state, v.last_error.clone()))
        .collect()
}

/// p50 and max of durations.
fn p50_max(mut d: Vec<Duration>) -> Option<(Duration, Duration)> {
    if d.is_empty() {
        return None;
    }
    d.sort();
    Some((d[(d.len() - 1) / 2], d[d.len() - 1]))
}

/// The table and whether the run passed (and if not, why).
pub fn render(f: &Findings) -> (String, Vec<String>) {
    let mut why_failed = Vec::new();
    let stopped: Vec<_> = not_mirroring(f);
    // A partition that stopped with a reason is listed. What it did not copy after it stopped
    // is not loss; what it wrote wrongly before (different or extra records) still counts —
    // except on the topic whose source log is diverged on purpose, where the source itself
    // replaced records the mirror had already copied.
    let failed_with_reason = |label: &str| {
        stopped
            .iter()
            .any(|(l, state, e)| l == label && *state == PartitionState::Failed && e.is_some())
    };
    let mut totals = Totals::default();
    let mut excluded = Totals::default();
    let mut verifier_errors = Vec::new();
    let mut compacted_away = 0;
    let mut compacted_early = 0;
    for c in &f.checks {
        let label = format!("{}-{}", c.topic, c.partition);
        match &c.report {
            Ok(r) if failed_with_reason(&label) && c.topic == f.diverged_topic => excluded.add(r),
            Ok(r) if failed_with_reason(&label) => {
                excluded.add(r);
                totals.add_wrong(r);
                if r.different + r.extra + r.trailing > 0 {
                    for (s, d, what) in r
                        .examples
                        .iter()
                        .filter(|e| !e.2.contains("missing"))
                        .take(3)
                    {
                        verifier_errors
                            .push(format!("{label}: source {s} / destination {d}: {what}"));
                    }
                }
            }
            Ok(r) => {
                let (extra, missing) = match f.compaction.get(&label) {
                    Some(Ok(c)) if r.different == 0 && c.explains(r.extra, r.missing) => {
                        (r.extra, r.missing)
                    }
                    Some(Ok(c)) if r.extra + r.missing > 0 => {
                        verifier_errors.push(format!(
                            "{label}: compaction does not explain {} extra and {} missing: {} removable on the destination, {} on the source, {} values there twice, {} keys whose latest value differs",
                            r.extra,
                            r.missing,
                            c.removable,
                            c.source_removable,
                            c.duplicate_values,
                            c.latest_mismatches
                        ));
                        (0, 0)
                    }
                    _ => (0, 0),
                };
                compacted_away += extra;
                compacted_early += missing;
                let r = &VerifyReport {
                    extra: r.extra - extra,
                    missing: r.missing - missing,
                    ..r.clone()
                };
                totals.add(r);
                if !r.examples.is_empty() && (r.missing + r.different + r.extra + r.trailing) > 0 {
                    for (s, d, what) in r.examples.iter().take(3) {
                        verifier_errors
                            .push(format!("{label}: source {s} / destination {d}: {what}"));
                    }
                }
            }
            Err(e) => verifier_errors.push(format!("{label}: {e}")),
        }
    }
    let mut by_kind: BTreeMap<FaultKind, (usize, Vec<Duration>, usize)> = BTreeMap::new();
    let mut whole: BTreeMap<FaultKind, Vec<Duration>> = BTreeMap::new();
    for r in &f.faults {
        let e = by_kind.entry(r.kind).or_default();
        e.0 += 1;
        match &r.recovery {
            Ok(d) => {
                e.1.push(*d);
                whole.entry(r.kind).or_default().push(r.window + *d);
            }
            Err(_) => e.2 += 1,
        }
    }
    let mut t = String::new();
    let _ = writeln!(
        t,
        "kmirror soak — seed {}, {:.1} min of faults, {:.1} min in all",
        f.seed,
        f.minutes,
        f.elapsed.as_secs_f64() / 60.0
    );
    let _ = writeln!(t, "{:<34} {}", "faults injected", f.faults.len());
    for (kind, (n, _, _)) in &by_kind {
        let errors = f
            .faults
            .iter()
            .filter(|r| r.kind == *kind && r.error.is_some())
            .count();
        let note = if errors > 0 {
            format!(" ({errors} could not be injected)")
        } else {
            String::new()
        };
        let _ = writeln!(t, "  {:<32} {n}{note}", kind.name());
    }
    let _ = writeln!(
        t,
        "{:<34} {} (acknowledged on the source; {} failed, {} in aborted transactions); group consumed {}",
        "records produced", f.produced.0, f.produced.1, f.produced.2, f.consumed
    );
    for (topic, n, last) in &f.producer_failures {
        let _ = writeln!(
            t,
            "  {topic}: {n} records not acknowledged ({})",
            last.as_deref().unwrap_or("no error recorded")
        );
    }
    let _ = writeln!(t, "{:<34} {}", "records mirrored", totals.mirrored);
    let _ = writeln!(t, "{:<34} {}", "lost", totals.lost);
    if compacted_early > 0 {
        let _ = writeln!(
            t,
            "  (not counted: {compacted_early} source records the destination has compacted away; each is followed by a later record with the same key or a tombstone, and every key's latest value matches)"
        );
    }
    let _ = writeln!(t, "{:<34} {}", "duplicated", totals.duplicated);
    if compacted_away > 0 {
        let _ = writeln!(
            t,
            "  (not counted: {compacted_away} destination records the source has compacted away; each is followed by a later record with the same key or a tombstone, no value is there twice, and every key's latest value matches)"
        );
    }
    for (label, c) in &f.compaction {
        if let Err(e) = c {
            verifier_errors.push(format!("{label}: compaction check: {e}"));
        }
    }
    let _ = writeln!(t, "{:<34} {}", "field mismatches", totals.mismatched);
    let _ = writeln!(
        t,
        "{:<34} {}/{} partitions",
        "offsets identical", totals.identical, totals.verified
    );
    let lag = match (&f.monitor.max_lag, &f.monitor.max_lag_seconds) {
        (Some((n, at)), Some((s, at_s))) => format!("{n} records ({at}), {s:.1} s ({at_s})"),
        (Some((n, at)), None) => format!("{n} records ({at})"),
        _ => "not reported".into(),
    };
    let _ = writeln!(t, "{:<34} {lag}", "max lag");
    let _ = writeln!(
        t,
        "recovery time per fault kind (p50 / max; healed → every partition MIRRORING and caught up)"
    );
    for (kind, (_, times, stuck)) in &by_kind {
        let show = |d: Option<(Duration, Duration)>| match d {
            Some((p50, max)) => format!("{:.0} s / {:.0} s", p50.as_secs_f64(), max.as_secs_f64()),
            None => "-".into(),
        };
        let line = format!(
            "{:<14} (from injection: {})",
            show(p50_max(times.clone())),
            show(p50_max(whole.get(kind).cloned().unwrap_or_default()))
        );
        let stuck = if *stuck > 0 {
            format!(", {stuck} not recovered within the limit")
        } else {
            String::new()
        };
        let _ = writeln!(t, "  {:<32} {line}{stuck}", kind.name());
    }
    let _ = writeln!(
        t,
        "{:<34} {}",
        "partitions FAILED",
        stopped
            .iter()
            .filter(|s| s.1 == PartitionState::Failed)
            .count()
    );
    for (label, state, reason) in &stopped {
        let reason = reason.clone().unwrap_or_else(|| "no reason given".into());
        let _ = writeln!(t, "  {label:<32} {state:?}: {reason}");
        if reason == "no reason given" || *state != PartitionState::Failed {
            why_failed.push(format!("{label} is {state:?} at the end without a reason"));
        }
    }
    if excluded.verified > 0 {
        let _ = writeln!(
            t,
            "  (their verification: {} matched, {} missing, {} duplicated, {} different; only duplicated and different records off the diverged topic count above)",
            excluded.mirrored, excluded.lost, excluded.duplicated, excluded.mismatched
        );
    }
    if let Some(c) = &f.cycle {
        let _ = writeln!(t, "failover → failback cycle");
        for s in &c.steps {
            let _ = writeln!(t, "  {s}");
        }
        if let Some(r) = &c.replay {
            for d in &r.differences {
                let _ = writeln!(t, "  group replay: {d}");
            }
            if r.offsets_equal < r.partitions || r.records_equal < r.compared {
                why_failed.push("the consumer group did not resume at the same offsets and records on the destination".into());
            }
        }
        let mut reverse = Totals::default();
        for check in &c.reverse {
            match &check.report {
                Ok(r) => reverse.add(r),
                Err(e) => verifier_errors
                    .push(format!("reverse {}-{}: {e}", check.topic, check.partition)),
            }
        }
        if reverse.verified > 0 {
            let _ = writeln!(
                t,
                "  reverse mirror verified: {} mirrored, {} lost, {} duplicated, {} different",
                reverse.mirrored, reverse.lost, reverse.duplicated, reverse.mismatched
            );
            if reverse.lost + reverse.duplicated + reverse.mismatched > 0 {
                why_failed.push("the failback lost, duplicated or changed records".into());
            }
        }
        if let Some(e) = &c.failure {
            why_failed.push(format!("the failover cycle failed: {e}"));
        }
    }
    if totals.lost > 0 {
        why_failed.push(format!("{} records lost", totals.lost));
    }
    if totals.duplicated > 0 {
        why_failed.push(format!("{} records duplicated", totals.duplicated));
    }
    if totals.mismatched > 0 {
        why_failed.push(format!("{} records differ", totals.mismatched));
    }
    if !verifier_errors.is_empty() {
        let _ = writeln!(t, "verifier findings");
        for e in verifier_errors.iter().take(20) {
            let _ = writeln!(t, "  {e}");
        }
        if f.checks.iter().any(|c| c.report.is_err()) {
            why_failed.push("some partitions could not be verified".into());
        }
    }
    // Where records went missing, what the status said at the end: a partition that claims to
    // be caught up without its records points at the fetcher's view of the source.
    let lossy: Vec<String> = f
        .checks
        .iter()
        .filter_map(|c| match &c.report {
            Ok(r) if r.missing > 0 => {
                let view = f
                    .final_states
                    .iter()
                    .find(|v| v.topic == c.topic && v.partition == c.partition);
                let said = view.map_or("no status".to_string(), |v| {
                    format!(
                        "{}, last mirrored {:?}",
                        crate::soak::mirror::describe(&[v]),
                        v.last_mirrored
                    )
                });
                Some(format!(
                    "  {}-{}: {} missing of {}; at the end {said}",
                    c.topic, c.partition, r.missing, r.source_records
                ))
            }
            _ => None,
        })
        .collect();
    if !lossy.is_empty() {
        let _ = writeln!(t, "partitions missing records");
        for l in lossy.iter().take(20) {
            let _ = writeln!(t, "{l}");
        }
    }
    let verdict = if why_failed.is_empty() {
        "PASS".to_string()
    } else {
        format!("FAIL: {}", why_failed.join("; "))
    };
    let _ = writeln!(t, "{:<34} {verdict}", "verdict");
    (t, why_failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::mirror::MIRROR;

    fn report(partition: i32, matched: u64, missing: u64, extra: u64) -> VerifyReport {
        VerifyReport {
            partition,
            source_records: matched + missing,
            matched,
            missing,
            extra,
            offsets_identical: missing == 0,
            ..Default::default()
        }
    }

    fn view(topic: &str, p: i32, state: PartitionState, err: Option<&str>) -> PartitionView {
        PartitionView {
            mirror: MIRROR.into(),
            mirror_topic: topic.into(),
            topic: topic.into(),
            partition: p,
            state,
            lag: Some(0),
            lag_seconds: Some(0.0),
            last_mirrored: None,
            offsets_identical: Some(true),
            last_error: err.map(String::from),
            retry_attempt: err.map(|_| -1),
        }
    }

    fn findings() -> Findings {
        Findings {
            seed: 1,
            minutes: 3.0,
            faults: vec![
                FaultRecord {
                    kind: FaultKind::BrokerKill,
                    what: String::new(),
                    error: None,
                    recovery: Ok(Duration::from_secs(10)),
                    window: Duration::from_secs(5),
                },
                FaultRecord {
                    kind: FaultKind::BrokerKill,
                    what: String::new(),
                    error: None,
                    recovery: Ok(Duration::from_secs(30)),
                    window: Duration::from_secs(5),
                },
                FaultRecord {
                    kind: FaultKind::Zombie,
                    what: String::new(),
                    error: None,
                    recovery: Err("behind".into()),
                    window: Duration::from_secs(5),
                },
            ],
            checks: vec![
                PartitionCheck {
                    topic: "a".into(),
                    partition: 0,
                    report: Ok(report(0, 100, 0, 0)),
                },
                PartitionCheck {
                    topic: "d".into(),
                    partition: 0,
                    report: Ok(report(0, 10, 5, 0)),
                },
            ],
            final_states: vec![
                view("a", 0, PartitionState::Mirroring, None),
                view(
                    "d",
                    0,
                    PartitionState::Failed,
                    Some("source diverged at offset 10"),
                ),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn a_clean_run_passes_and_failed_partitions_with_a_reason_are_listed_not_counted() {
        let mut f = findings();
        f.diverged_topic = "d".into();
        let (table, why) = render(&f);
        assert!(why.is_empty(), "{why:?}\n{table}");
        assert!(
            table.contains("records mirrored                   100"),
            "{table}"
        );
        assert!(
            table.contains("lost                               0"),
            "{table}"
        );
        assert!(table.contains("d-0"), "{table}");
        assert!(table.contains("source diverged at offset 10"), "{table}");
        assert!(
            table.contains("broker-kill                      10 s / 30 s"),
            "{table}"
        );
        assert!(table.contains("1 not recovered"), "{table}");
        assert!(
            table.contains("verdict                            PASS"),
            "{table}"
        );
    }

    #[test]
    fn loss_duplicates_and_stuck_partitions_fail_the_run() {
        let mut f = findings();
        f.checks[0].report = Ok(report(0, 98, 2, 1));
        f.final_states[1].last_error = None;
        let (table, why) = render(&f);
        // d-0 has no reason any more: its 5 missing records count too.
        assert!(why.iter().any(|w| w.contains("7 records lost")), "{why:?}");
        assert!(
            why.iter().any(|w| w.contains("1 records duplicated")),
            "{why:?}"
        );
        assert!(
            why.iter()
                .any(|w| w.contains("d-0 is Failed at the end without a reason")),
            "{why:?}"
        );
        assert!(table.contains("FAIL: "), "{table}");
    }

    #[test]
    fn wrong_records_of_a_failed_partition_still_count_its_missing_ones_do_not() {
        let mut f = findings();
        f.diverged_topic = "d".into();
        f.checks.push(PartitionCheck {
            topic: "z".into(),
            partition: 0,
            report: Ok(VerifyReport {
                different: 2,
                ..report(0, 11, 308, 0)
            }),
        });
        f.final_states.push(view(
            "z",
            0,
            PartitionState::Failed,
            Some("another client wrote"),
        ));
        let (table, why) = render(&f);
        assert!(
            why.iter().any(|w| w.contains("2 records differ")),
            "{why:?}\n{table}"
        );
        assert!(!why.iter().any(|w| w.contains("lost")), "{why:?}");
        assert!(
            table.contains("offsets identical                  1/1 partitions"),
            "{table}"
        );
    }

    #[test]
    fn extra_records_compaction_explains_are_not_duplicates() {
        let mut f = findings();
        f.diverged_topic = "d".into();
        f.checks[0].report = Ok(report(0, 100, 0, 5));
        let check = CompactionCheck {
            destination_records: 105,
            removable: 7,
            keys: 10,
            ..Default::default()
        };
        f.compaction.insert("a-0".into(), Ok(check.clone()));
        let (table, why) = render(&f);
        assert!(why.is_empty(), "{why:?}\n{table}");
        assert!(
            table.contains("5 destination records the source has compacted away"),
            "{table}"
        );
        // A duplicated value is not explained.
        f.compaction.insert(
            "a-0".into(),
            Ok(CompactionCheck {
                duplicate_values: 1,
                ..check
            }),
        );
        let (table, why) = render(&f);
        assert!(
            why.iter().any(|w| w.contains("5 records duplicated")),
            "{why:?}"
        );
        assert!(
            table.contains("a-0: compaction does not explain 5 extra and 0 missing: 7 removable on the destination, 0 on the source, 1 values there twice"),
            "the table says why compaction did not explain them:\n{table}"
        );
    }
}
