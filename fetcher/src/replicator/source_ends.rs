//! The source partitions' ends — log start, high watermark, last stable offset — asked of their
//! leaders with the wire client in the background, for both engines: one slow or unreachable
//! leader delays no copying and no other partition's answer. The lag and the stall watch measure
//! against the end a reader of the fetcher's isolation can reach (the last stable offset under
//! `read_committed`), and a last stable offset held below the high watermark is a source
//! transaction still open — a normal state of the world, tracked with when it was first seen.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kmirror_state::records::OpenTransaction;
use kmirror_wire::{Client, KafkaCode, OffsetSpec, WireConfig, WireError};
use rdkafka::ClientConfig;

use super::stop::{Side, Stop};
use crate::config::Isolation;

/// Bound on one leader's answer to a watermark query.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A source request never waits longer than this (a fetch waits at most 500 ms for records): a
/// leader that says nothing for longer is hung or gone, and the sooner its connection is given
/// up, the sooner the new leader is found.
pub(super) const SOURCE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// An open transaction is reported (position record, status) once it has held the last stable
/// offset this long: shorter ones are the normal rhythm of a transactional producer.
pub(super) const REPORT_OPEN_AFTER: Duration = Duration::from_secs(10);

/// The wire client of the source and the runtime it runs on (one worker thread), shared by the
/// source ends and the batch engine.
pub(super) struct SourceWire {
    pub runtime: Arc<tokio::runtime::Runtime>,
    pub client: Client,
}

/// The wire settings of `config`'s cluster.
pub(super) fn wire_config(config: &ClientConfig, side: Side) -> Result<WireConfig, Stop> {
    WireConfig::from_properties(&kmirror_state::connection::properties(config))
        .map_err(|source| Stop::ConnectWire { side, source })
}

impl SourceWire {
    /// Starts the runtime and connects to the source.
    pub(super) fn connect(source: &ClientConfig) -> Result<SourceWire, Stop> {
        let mut config = wire_config(source, Side::Source)?;
        config.request_timeout = config.request_timeout.min(SOURCE_REQUEST_TIMEOUT);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kmirror-wire")
            .enable_all()
            .build()
            .map_err(|e| Stop::ConnectWire {
                side: Side::Source,
                source: WireError::Connect {
                    broker: "(runtime)".into(),
                    reason: format!("starting the wire runtime: {e}"),
                },
            })?;
        let client = runtime
            .block_on(Client::connect(config))
            .map_err(|source| Stop::ConnectWire {
                side: Side::Source,
                source,
            })?;
        Ok(SourceWire {
            runtime: Arc::new(runtime),
            client,
        })
    }
}

/// What a partition's leader said of its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ends {
    pub log_start: i64,
    pub high_watermark: i64,
    /// The last stable offset (equal to the high watermark when no transaction is open).
    pub last_stable: i64,
}

impl Ends {
    /// The end a reader of `isolation` can read up to.
    pub(super) fn readable(&self, isolation: Isolation) -> i64 {
        match isolation {
            Isolation::ReadCommitted => self.last_stable,
            Isolation::ReadUncommitted => self.high_watermark,
        }
    }
}

/// One answer of every leader: each partition's ends, or `None` when its leader did not answer.
pub(super) type Answer = BTreeMap<i32, Option<Ends>>;

/// Asks the partitions' ends in the background and keeps the latest answer.
pub(super) struct SourceEnds {
    topic: String,
    partitions: Vec<i32>,
    isolation: Isolation,
    pending: Option<tokio::task::JoinHandle<Answer>>,
}

impl SourceEnds {
    pub(super) fn new(topic: &str, partitions: Vec<i32>, isolation: Isolation) -> SourceEnds {
        SourceEnds {
            topic: topic.to_string(),
            partitions,
            isolation,
            pending: None,
        }
    }

    /// The answer to the question out if it has come (waiting at most `wait` for it: a start-up
    /// waits, the copy loop does not), and the next question asked.
    pub(super) fn poll(&mut self, wire: &SourceWire, wait: Duration) -> Option<Answer> {
        let pending = match self.pending.take() {
            Some(pending) => pending,
            None => self.spawn(wire),
        };
        let mut pending = pending;
        let joined = if pending.is_finished() || !wait.is_zero() {
            wire.runtime
                .block_on(async { tokio::time::timeout(wait, &mut pending).await })
        } else {
            self.pending = Some(pending);
            return None;
        };
        let answer = match joined {
            Err(_) => {
                self.pending = Some(pending);
                return None;
            }
            Ok(Ok(answer)) => Some(answer),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "source watermark task failed");
                None
            }
        };
        self.pending = Some(self.spawn(wire));
        answer
    }

    fn spawn(&self, wire: &SourceWire) -> tokio::task::JoinHandle<Answer> {
        let client = wire.client.clone();
        let (topic, partitions, isolation) =
            (self.topic.clone(), self.partitions.clone(), self.isolation);
        wire.runtime
            .spawn(async move { ask(&client, &topic, &partitions, isolation).await })
    }
}

/// Asks every leader for its partitions' log starts, high watermarks and (read_committed) last
/// stable offsets, the three questions side by side.
async fn ask(client: &Client, topic: &str, partitions: &[i32], isolation: Isolation) -> Answer {
    let spec = |s: OffsetSpec| partitions.iter().map(|&p| (p, s)).collect::<Vec<_>>();
    let (starts, highs) = (spec(OffsetSpec::Earliest), spec(OffsetSpec::Latest));
    let uncommitted = kmirror_wire::Isolation::ReadUncommitted;
    let committed = kmirror_wire::Isolation::ReadCommitted;
    let stable = async {
        if isolation == Isolation::ReadCommitted {
            Some(
                client
                    .list_offsets_each(topic, &highs, committed, ANSWER_TIMEOUT)
                    .await,
            )
        } else {
            None
        }
    };
    let (starts, highs_answer, stable) = tokio::join!(
        client.list_offsets_each(topic, &starts, uncommitted, ANSWER_TIMEOUT),
        client.list_offsets_each(topic, &highs, uncommitted, ANSWER_TIMEOUT),
        stable
    );
    let by_partition = |answer: Result<Vec<kmirror_wire::ListedOffset>, WireError>| match answer {
        Ok(listed) => listed
            .into_iter()
            .filter(|l| l.error == KafkaCode::NONE)
            .map(|l| (l.partition, l.offset))
            .collect::<BTreeMap<i32, i64>>(),
        Err(e) => {
            tracing::debug!(error = %e, "source watermarks: no answer");
            client.mark_stale();
            BTreeMap::new()
        }
    };
    let (starts, highs) = (by_partition(starts), by_partition(highs_answer));
    let stable = stable.map(by_partition);
    partitions
        .iter()
        .map(|&p| {
            let ends = (|| {
                let high = *highs.get(&p)?;
                let last_stable = match &stable {
                    Some(stable) => *stable.get(&p)?,
                    None => high,
                };
                Some(Ends {
                    log_start: *starts.get(&p)?,
                    high_watermark: high,
                    last_stable: last_stable.min(high),
                })
            })();
            (p, ends)
        })
        .collect()
}

/// What a look at a partition's ends says about an open source transaction, given what the
/// previous look said: the last stable offset held below the high watermark is one, open since
/// the first look that saw it there (a look without an answer keeps the previous verdict).
pub(super) fn open_transaction(
    previous: Option<OpenTransaction>,
    ends: Option<Ends>,
    isolation: Isolation,
    now_ms: i64,
) -> Option<OpenTransaction> {
    let Some(ends) = ends else { return previous };
    if isolation == Isolation::ReadUncommitted || ends.last_stable >= ends.high_watermark {
        return None;
    }
    match previous {
        Some(open) if open.from_offset == ends.last_stable => Some(open),
        _ => Some(OpenTransaction {
            from_offset: ends.last_stable,
            since_ms: now_ms,
        }),
    }
}

/// The open transaction worth reporting at `now_ms` (one that has held the partition for a while).
pub(super) fn reported(open: Option<OpenTransaction>, now_ms: i64) -> Option<OpenTransaction> {
    open.filter(|o| now_ms - o.since_ms >= REPORT_OPEN_AFTER.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(high: i64, stable: i64) -> Option<Ends> {
        Some(Ends {
            log_start: 0,
            high_watermark: high,
            last_stable: stable,
        })
    }

    fn open(from: i64, since: i64) -> Option<OpenTransaction> {
        Some(OpenTransaction {
            from_offset: from,
            since_ms: since,
        })
    }

    /// name, previous, ends now, isolation → verdict
    type Row = (
        &'static str,
        Option<OpenTransaction>,
        Option<Ends>,
        Isolation,
        Option<OpenTransaction>,
    );

    #[test]
    fn an_open_transaction_is_the_last_stable_offset_held_below_the_high_watermark() {
        use Isolation::{ReadCommitted as Rc, ReadUncommitted as Ru};
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // name, previous, ends now, isolation → verdict (now = 5000)
            ("nothing open", None, ends(100, 100), Rc, None),
            ("first seen now", None, ends(100, 40), Rc, open(40, 5000)),
            ("still held at the same offset: since stays", open(40, 1000), ends(130, 40), Rc, open(40, 1000)),
            ("the last stable offset moved: another transaction, since restarts",
             open(40, 1000), ends(130, 90), Rc, open(90, 5000)),
            ("it ended", open(40, 1000), ends(130, 130), Rc, None),
            ("no answer keeps what was known", open(40, 1000), None, Rc, open(40, 1000)),
            ("no answer, nothing known", None, None, Rc, None),
            ("read_uncommitted copies open transactions: none to wait for",
             None, ends(100, 40), Ru, None),
        ];
        for (name, previous, ends, isolation, expect) in table {
            assert_eq!(
                open_transaction(previous, ends, isolation, 5000),
                expect,
                "{name}"
            );
        }
    }

    #[test]
    fn a_short_transaction_is_not_reported() {
        let t = open(40, 1000);
        assert_eq!(reported(t, 1000 + 9_999), None);
        assert_eq!(reported(t, 1000 + 10_000), t);
        assert_eq!(reported(None, 99_999), None);
    }

    #[test]
    fn the_readable_end_follows_the_isolation() {
        let e = ends(100, 40).unwrap();
        assert_eq!(e.readable(Isolation::ReadCommitted), 40);
        assert_eq!(e.readable(Isolation::ReadUncommitted), 100);
    }
}
