//! What a failback does next, decided from what was observed. Pure.
//!
//! For each PREPARING partition of a reverse mirror: refuse it (nothing failed over, a mirror
//! loop, lost records), seed its fetcher after the last mirrored offset, or — when the old
//! source holds records written after the failover — quarantine them first and wait for
//! `spec.divergencePolicy`. Divergence is decided per topic: while any partition has unresolved
//! divergent records every preparing partition waits, so that a `Recreate` never deletes a topic
//! under a running fetcher.

use std::collections::BTreeMap;

use kmirror_crds::v1alpha1::DivergencePolicy;
use kmirror_state::kafka_record::RecordData;
use kmirror_state::records::{
    Divergence, FetcherStatus, MapChunk, PartitionRecords, PartitionStateRecord, PositionRecord,
    RecordKind, StateKey, map_to_chunks,
};

use super::{Comparison, Facts, QUARANTINE_SUFFIX, reverse_map};
use crate::context::Note;
use crate::lifecycle::FailbackGate;
use crate::status::offsets;

/// A failback step for the executor, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Create the quarantine topic (copies of divergent records go there).
    CreateQuarantine {
        /// Its name.
        topic: String,
        /// Its partitions (those of the topic it quarantines).
        partitions: i32,
    },
    /// Copy divergent records to the quarantine partition.
    Quarantine {
        /// The quarantine topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The records still to copy.
        records: Vec<RecordData>,
    },
    /// Write the position (and map) a failback fetcher starts from.
    Seed {
        /// The partition.
        partition: i32,
        /// Its position.
        position: Box<PositionRecord>,
        /// Its offset map.
        chunks: Vec<MapChunk>,
    },
    /// Record the divergence found (lifecycle records; the state does not change).
    RecordDivergence(Vec<(i32, PartitionStateRecord)>),
    /// Delete and recreate the destination topic, forget positions and maps, and record the
    /// divergence as resolved.
    Recreate {
        /// Partitions of the new topic.
        partitions: usize,
        /// Records to tombstone.
        forget: Vec<StateKey>,
        /// Lifecycle records with the divergence resolved.
        resolved: Vec<(i32, PartitionStateRecord)>,
    },
}

/// The source's identity as a seeded position records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceIds {
    /// Cluster ID.
    pub cluster_id: String,
    /// Topic ID (absent on sources without).
    pub topic_id: Option<String>,
}

/// What the failback plan is made from.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// `namespace/name` of this (reverse) mirror.
    pub mirror: &'a str,
    /// The forward mirror (`spec.reverseOf`).
    pub forward: &'a str,
    /// The state topic the forward mirror's records are read from.
    pub state_topic: &'a str,
    /// This mirror's source topic.
    pub topic: &'a str,
    /// This mirror's destination topic (the forward mirror's source topic).
    pub destination_topic: &'a str,
    /// `spec.divergencePolicy`.
    pub policy: Option<DivergencePolicy>,
    /// Partitions a recreated destination topic gets.
    pub partition_count: usize,
    /// The source's IDs, when it answered.
    pub source: Option<&'a SourceIds>,
    /// What was observed per PREPARING partition waiting for the failback gate.
    pub facts: &'a BTreeMap<i32, Facts>,
    /// Now, ms since the epoch.
    pub now_ms: i64,
}

/// The failback plan of a topic.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The gate of each PREPARING partition.
    pub gates: BTreeMap<i32, FailbackGate>,
    /// What to do, in order.
    pub steps: Vec<Step>,
    /// Events to publish once the steps are done.
    pub events: Vec<Note>,
}

enum Prepared {
    Ready,
    Blocked {
        note: String,
        divergence: Option<Divergence>,
    },
    Refused(String),
}

fn seed(
    input: &Input<'_>,
    partition: i32,
    c: &Comparison,
    source: &SourceIds,
) -> (Step, PositionRecord) {
    let map = reverse_map(&c.forward_map, c.lmo_src, c.lmo_dst, c.end);
    let chunks = map_to_chunks(&map);
    let position = PositionRecord {
        source_cluster_id: source.cluster_id.clone(),
        source_topic_id: source.topic_id.clone(),
        destination_topic: input.destination_topic.to_string(),
        last_mirrored_offset: c.lmo_dst,
        next_source_offset: c.lmo_dst + 1,
        destination_offset: c.end,
        map_chunks: chunks.len() as u32,
        offsets_identical: map.is_identity(),
        status: FetcherStatus::Stopped,
        writer: Some("kmirror-operator (failback)".into()),
        updated_at_ms: input.now_ms,
        ..Default::default()
    };
    (
        Step::Seed {
            partition,
            position: Box::new(position.clone()),
            chunks,
        },
        position,
    )
}

/// Why a partition that is ready to be seeded waits.
pub const NO_SOURCE_IDS: &str =
    "waiting for the source cluster to answer (its IDs go into the failback position)";

/// One partition: what it may do and the steps that get it there.
fn prepare(
    input: &Input<'_>,
    partition: i32,
    own: &PartitionRecords,
    facts: &Facts,
    steps: &mut Vec<Step>,
    seeded: &mut Vec<(i32, PositionRecord, Vec<MapChunk>)>,
) -> Prepared {
    let topic = input.destination_topic;
    let unresolved = own
        .state
        .as_ref()
        .and_then(|s| s.divergence.clone())
        .filter(|d| d.resolution.is_none());
    // A divergence fully quarantined under `Recreate` waits for the topic's recreate, whatever
    // the log shows now: after a crash inside the recreate the topic may be empty already.
    let recreating = unresolved
        .as_ref()
        .is_some_and(|d| d.quarantined >= d.records)
        && input.policy == Some(DivergencePolicy::Recreate);
    if recreating {
        return Prepared::Blocked {
            note: "recreating the destination topic".into(),
            divergence: None,
        };
    }
    let c = match facts {
        // Seeded. After a crash between the seed and the record of a kept divergence, that
        // record is written now (else the partition would wait for a policy forever).
        Facts::Prepared => {
            return match unresolved {
                Some(mut d) if input.policy == Some(DivergencePolicy::KeepAndTranslate) => {
                    d.resolution = Some("kept".into());
                    Prepared::Blocked {
                        note: "divergent records kept".into(),
                        divergence: Some(d),
                    }
                }
                _ => Prepared::Ready,
            };
        }
        Facts::NoForwardRecord => {
            return Prepared::Refused(format!(
                "no failover record of mirror {} for topic {topic} partition {partition} in {} on the source: \
                 nothing to fail back from",
                input.forward, input.state_topic
            ));
        }
        Facts::ForwardNotStopped(s) => {
            return Prepared::Refused(format!(
                "mirror {} still has {topic}[{partition}] in {s}: fail it over before failing back (a mirror loop is refused)",
                input.forward
            ));
        }
        Facts::Compared(c) => c,
    };
    if c.end < c.lmo_src + 1 {
        return Prepared::Refused(format!(
            "{topic}[{partition}] ends at {}, before the last mirrored offset {}: the topic lost records since the failover",
            c.end, c.lmo_src
        ));
    }
    let mut seed_step = |steps: &mut Vec<Step>| -> bool {
        let Some(source) = input.source else {
            return false;
        };
        let (step, position) = seed(input, partition, c, source);
        if let Step::Seed { chunks, .. } = &step {
            seeded.push((partition, position, chunks.clone()));
        }
        steps.push(step);
        true
    };
    if c.divergent.is_empty() {
        return if seed_step(steps) {
            Prepared::Ready
        } else {
            Prepared::Blocked {
                note: NO_SOURCE_IDS.into(),
                divergence: None,
            }
        };
    }
    let existing = own.state.as_ref().and_then(|s| s.divergence.clone());
    let mut d = existing.unwrap_or_else(|| Divergence {
        from_offset: c.divergent[0].offset,
        to_offset: c.end,
        quarantine_topic: format!("{topic}{QUARANTINE_SUFFIX}"),
        quarantine_base: -1,
        records: c.divergent.len() as i64,
        quarantined: 0,
        resolution: None,
    });
    if d.quarantine_base < 0 {
        // Create the quarantine topic and note where copies start before copying anything.
        steps.push(Step::CreateQuarantine {
            topic: d.quarantine_topic.clone(),
            partitions: c.destination_partitions.map_or(partition + 1, |n| n as i32),
        });
        d.quarantine_base = c.quarantine_end.unwrap_or(0);
        return Prepared::Blocked {
            note: "quarantining divergent records".into(),
            divergence: Some(d),
        };
    }
    if d.quarantined < d.records {
        let done = (c.quarantine_end.unwrap_or(0) - d.quarantine_base).max(0) as usize;
        steps.push(Step::Quarantine {
            topic: d.quarantine_topic.clone(),
            partition,
            records: c.divergent.iter().skip(done).cloned().collect(),
        });
        d.quarantined = d.records;
    }
    let note = format!(
        "divergence: {} of {topic}[{partition}] were written after the failover (copied to {}); \
         set spec.divergencePolicy to Recreate or KeepAndTranslate",
        offsets(d.from_offset, d.to_offset, Some(d.records)),
        d.quarantine_topic
    );
    match input.policy {
        None | Some(DivergencePolicy::Recreate) => Prepared::Blocked {
            note,
            divergence: Some(d),
        },
        Some(DivergencePolicy::KeepAndTranslate) => {
            if !seed_step(steps) {
                return Prepared::Blocked {
                    note: NO_SOURCE_IDS.into(),
                    divergence: Some(d),
                };
            }
            d.resolution = Some("kept".into());
            Prepared::Blocked {
                note: "divergent records kept".into(),
                divergence: Some(d),
            }
        }
    }
}

/// The failback plan of a topic; `records` (the topic's records) are updated with what the
/// steps will write, so that what follows sees them as persisted.
pub fn plan(input: &Input<'_>, records: &mut BTreeMap<i32, PartitionRecords>) -> Plan {
    let mut out = Plan::default();
    let mut blocked: BTreeMap<i32, String> = BTreeMap::new();
    let mut updates = Vec::new();
    let mut seeded = Vec::new();
    for (&p, facts) in input.facts {
        let own = records.get(&p).cloned().unwrap_or_default();
        let gate = match prepare(input, p, &own, facts, &mut out.steps, &mut seeded) {
            Prepared::Ready => FailbackGate::Open,
            Prepared::Refused(reason) => FailbackGate::Refuse(reason),
            Prepared::Blocked { note, divergence } => {
                blocked.insert(p, note.clone());
                if let Some(d) = divergence
                    && own.state.as_ref().and_then(|s| s.divergence.as_ref()) != Some(&d)
                {
                    let mut state = own.state.clone().unwrap_or_default();
                    state.divergence = Some(d);
                    updates.push((p, state));
                }
                FailbackGate::Wait(note)
            }
        };
        out.gates.insert(p, gate);
    }
    for (p, position, chunks) in seeded {
        let r = records.entry(p).or_default();
        r.position = Some(position);
        r.chunks = chunks
            .into_iter()
            .enumerate()
            .map(|(i, c)| (i as u32, c))
            .collect();
    }
    if !updates.is_empty() {
        for (p, state) in &updates {
            records.entry(*p).or_default().state = Some(state.clone());
        }
        out.steps.push(Step::RecordDivergence(updates));
    }
    let unresolved: Vec<(i32, Divergence)> = records
        .iter()
        .filter_map(|(p, r)| {
            r.state
                .as_ref()
                .and_then(|s| s.divergence.clone())
                .map(|d| (*p, d))
        })
        .filter(|(_, d)| d.resolution.is_none())
        .collect();
    if unresolved.is_empty() {
        return out;
    }
    let summary = unresolved
        .iter()
        .map(|(p, d)| {
            format!(
                "partition {p}: {} in {}",
                offsets(d.from_offset, d.to_offset, Some(d.records)),
                d.quarantine_topic
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let all_quarantined = unresolved.iter().all(|(_, d)| d.quarantined >= d.records);
    if all_quarantined && input.policy == Some(DivergencePolicy::Recreate) {
        let mut forget = Vec::new();
        let mut resolved = Vec::new();
        for (p, r) in records.iter_mut() {
            if r.position.take().is_some() {
                forget.push(StateKey::new(
                    RecordKind::Position,
                    input.mirror,
                    input.topic,
                    *p,
                ));
            }
            forget.extend(
                std::mem::take(&mut r.chunks)
                    .into_keys()
                    .map(|c| StateKey::map_chunk(input.mirror, input.topic, *p, c)),
            );
            let mut state = r.state.clone().unwrap_or_default();
            let mut d = state.divergence.clone().unwrap_or_default();
            d.resolution = Some("recreated".into());
            state.divergence = Some(d);
            r.state = Some(state.clone());
            resolved.push((*p, state));
        }
        out.steps.push(Step::Recreate {
            partitions: input.partition_count,
            forget,
            resolved,
        });
        out.events.push(Note::normal(
            "DivergenceResolved",
            "Failback",
            format!(
                "destination topic recreated; divergent records stay in quarantine ({summary})"
            ),
        ));
        return out;
    }
    let note = format!(
        "waiting for spec.divergencePolicy: divergent records on the destination: {summary}"
    );
    if unresolved.iter().any(|(p, _)| blocked.contains_key(p)) {
        out.events
            .push(Note::warning("Divergence", "Failback", note.clone()));
    }
    for gate in out.gates.values_mut() {
        if !matches!(gate, FailbackGate::Refuse(_)) {
            *gate = FailbackGate::Wait(note.clone());
        }
    }
    out
}
