//! The start-up settle: before a partition resumes, its destination log end must stand still for
//! a settle time (a previous incarnation's last requests drain) and every in-sync replica must
//! hold it (the leader's own log end, `log_end`, equals the high watermark). All owned
//! partitions settle together — one settle time per round, not one per partition — with one
//! watermark reader; each partition's end is confirmed again just before its start is decided.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::stop::{Side, Stop};
use super::{ADMIN_TIMEOUT, Fetcher};

/// Rounds the destination log end is read while it still moves before giving up.
const SETTLE_ATTEMPTS: usize = 30;

/// What the settle does once a partition's high watermark `hw` stood still for a settle time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SettleStep {
    /// Every in-sync replica holds the log up to `hw`: resume from it.
    Settled,
    /// The leader's log ends beyond the high watermark (records a follower lacks): wait.
    AheadOfReplicas(i64),
    /// The leader's log end is unknown: wait one more settle time, once.
    WaitLonger,
}

fn settle_step(hw: i64, leader_end: Option<i64>, waited_longer: bool) -> SettleStep {
    match leader_end {
        Some(end) if end > hw => SettleStep::AheadOfReplicas(end),
        Some(_) => SettleStep::Settled,
        None if waited_longer => SettleStep::Settled,
        None => SettleStep::WaitLonger,
    }
}

/// One partition on its way to a settled log end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settling {
    /// The high watermark read a settle time ago.
    last: i64,
    /// It already waited one more settle time for an unknown leader log end.
    waited_longer: bool,
}

impl Settling {
    fn new(hw: i64) -> Settling {
        Settling {
            last: hw,
            waited_longer: false,
        }
    }

    /// A settle time later the high watermark is `hw`; `leader_end` asks the leader for its log
    /// end (only when the high watermark stood still). The settled end, once there is one.
    fn observe(
        &mut self,
        partition: i32,
        hw: i64,
        leader_end: impl FnOnce() -> Option<i64>,
    ) -> Option<i64> {
        let last = std::mem::replace(&mut self.last, hw);
        if hw != last {
            tracing::warn!(
                partition,
                from = last,
                to = hw,
                "destination log end still moving; waiting"
            );
            return None;
        }
        match settle_step(hw, leader_end(), self.waited_longer) {
            SettleStep::Settled => Some(hw),
            SettleStep::AheadOfReplicas(end) => {
                tracing::warn!(
                    partition,
                    high_watermark = hw,
                    leader_log_end = end,
                    "the destination leader holds records not yet on every in-sync replica; \
                     waiting"
                );
                None
            }
            SettleStep::WaitLonger => {
                tracing::warn!(
                    partition,
                    "the destination leader's log end is unknown (see above); waiting one more \
                     settle time for the high watermark instead"
                );
                self.waited_longer = true;
                None
            }
        }
    }
}

/// Reads the destination topic's high watermarks, one client for the whole start-up.
pub(super) struct DestinationEnds {
    reader: BaseConsumer,
    topic: String,
}

impl DestinationEnds {
    /// A reader of `topic` on the destination.
    pub(super) fn new(destination: &ClientConfig, topic: &str) -> Result<DestinationEnds, Stop> {
        let reader = destination
            .clone()
            .set("group.id", "kmirror-fetcher-watermarks")
            .create()
            .map_err(|source| Stop::CreateClient {
                client: "destination watermark reader",
                source,
            })?;
        Ok(DestinationEnds {
            reader,
            topic: topic.to_string(),
        })
    }

    /// The high watermark of `partition`.
    fn high_watermark(&self, partition: i32) -> Result<i64, Stop> {
        let topic = &self.topic;
        self.reader
            .fetch_watermarks(topic, partition, ADMIN_TIMEOUT)
            .map(|(_, high)| high)
            .map_err(|e| match e {
                KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                    Stop::DestinationTopicMissing {
                        topic: topic.clone(),
                        partition,
                    }
                }
                source => Stop::FetchWatermarks {
                    side: Side::Destination,
                    topic: topic.clone(),
                    partition,
                    source,
                },
            })
    }
}

impl Fetcher<'_> {
    /// The settled destination log end of every partition of `partitions`: the high watermark
    /// stopped moving for a settle time and equals the leader's own log end (without the
    /// leader's answer, it must stay put for one more settle time).
    pub(super) fn settle_destination(
        &mut self,
        ends: &DestinationEnds,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, i64>, Stop> {
        let mut settling = BTreeMap::new();
        for &p in partitions {
            settling.insert(p, Settling::new(ends.high_watermark(p)?));
        }
        let mut settled = BTreeMap::new();
        for _ in 0..SETTLE_ATTEMPTS {
            if settling.is_empty() {
                break;
            }
            self.pause_in_start(self.config.startup_settle)?;
            for (&p, s) in settling.iter_mut() {
                let hw = ends.high_watermark(p)?;
                let log_ends = &mut self.log_ends;
                let topic = &self.config.destination_topic;
                if let Some(end) = s.observe(p, hw, || log_ends.end_of(topic, p)) {
                    settled.insert(p, end);
                }
            }
            settling.retain(|p, _| !settled.contains_key(p));
        }
        match settling.keys().next() {
            None => Ok(settled),
            Some(&partition) => Err(Stop::DestinationLogEndMoving {
                topic: self.config.destination_topic.clone(),
                partition,
            }),
        }
    }

    /// The destination log end of `partition` to resume from: its settled end `settled` while
    /// the destination still ends there (the others' start-up took time since), else settled
    /// again.
    pub(super) fn confirm_settled(
        &mut self,
        ends: &DestinationEnds,
        partition: i32,
        settled: i64,
    ) -> Result<i64, Stop> {
        let now = ends.high_watermark(partition)?;
        if now == settled {
            return Ok(now);
        }
        tracing::warn!(
            partition,
            settled,
            now,
            "the destination log end moved after it settled; settling again"
        );
        let again = self.settle_destination(ends, &[partition])?;
        Ok(again[&partition])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settle_waits_for_the_log_end_every_in_sync_replica_holds() {
        assert_eq!(settle_step(40, Some(40), false), SettleStep::Settled);
        assert_eq!(
            settle_step(40, Some(46), false),
            SettleStep::AheadOfReplicas(46),
            "a frozen follower: the leader holds 6 records the high watermark does not cover"
        );
        assert_eq!(settle_step(40, None, false), SettleStep::WaitLonger);
        assert_eq!(settle_step(40, None, true), SettleStep::Settled);
    }

    /// name, high watermarks a settle time apart (the first at the start), leader log ends
    /// asked in turn → the round that settles (1-based) and the end, or none
    type SettleRow = (
        &'static str,
        Vec<i64>,
        Vec<Option<i64>>,
        Option<(usize, i64)>,
    );

    #[test]
    fn a_partition_settles_once_its_end_stood_still_and_the_replicas_hold_it() {
        #[rustfmt::skip]
        let table: Vec<SettleRow> = vec![
            ("still at once", vec![10, 10], vec![Some(10)], Some((1, 10))),
            ("draining, then still", vec![10, 12, 15, 15], vec![Some(15)], Some((3, 15))),
            ("a follower behind, then caught up", vec![7, 7, 7], vec![Some(9), Some(7)], Some((2, 7))),
            ("leader silent: one more round", vec![7, 7, 7], vec![None, None], Some((2, 7))),
            ("leader silent, then moving", vec![7, 7, 8, 8], vec![None, None], Some((3, 8))),
            ("never still", vec![1, 2, 3, 4], vec![], None),
        ];
        for (name, hws, leader, expect) in table {
            let mut s = Settling::new(hws[0]);
            let mut leader = leader.into_iter();
            let mut settled = None;
            for (round, &hw) in hws[1..].iter().enumerate() {
                if let Some(end) = s.observe(0, hw, || leader.next().flatten()) {
                    settled = Some((round + 1, end));
                    break;
                }
            }
            assert_eq!(settled, expect, "{name}");
        }
    }
}
