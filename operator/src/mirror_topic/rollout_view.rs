//! What the mirror's fetcher pod rollout ([`crate::rollout`]) learns from one topic's
//! observation: its per-topic pods and its partitions' progress. Pure.

use std::collections::BTreeMap;

use kmirror_state::leases::LeaseUnit;

use super::observe::Observation;
use crate::rollout::plan::{PodFacts, UnitFacts};

/// What the rollout learns from the observation of the topic of source `topic`: its per-topic
/// pods (a pooled topic's are the pool's, reported by the pool) and its partitions' progress.
pub fn report(o: &Observation, topic: &str) -> crate::rollout::Report {
    let pods = if o.pooled {
        BTreeMap::new()
    } else {
        o.pods
            .values()
            .map(|v| {
                let facts = PodFacts {
                    uid: v.uid.clone(),
                    ready: v.ready && v.exited.is_none(),
                    terminating: v.terminating,
                };
                (v.name.clone(), facts)
            })
            .collect()
    };
    let units = o
        .partitions()
        .into_iter()
        .map(|p| {
            let r = o.records.get(&p);
            let position = r.and_then(|r| r.position.as_ref());
            let facts = UnitFacts {
                state: o.state_of(p),
                writer_uid: position.and_then(|x| x.writer_uid.clone()),
                reached: position.map(|x| x.next_source_offset.max(x.source_position.unwrap_or(0))),
                stable_end: position.and_then(|x| x.source_last_stable_offset),
                // The source end last seen: the fetcher's report (no request to the source
                // per look), or a read of this reconcile.
                source_end: o
                    .source_ends
                    .get(&p)
                    .copied()
                    .flatten()
                    .max(position.and_then(|x| x.source_high_watermark)),
            };
            (LeaseUnit::new(topic, p), facts)
        })
        .collect();
    crate::rollout::Report {
        candidates: Vec::new(),
        pods,
        units,
    }
}
