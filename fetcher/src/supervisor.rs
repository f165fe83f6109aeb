//! One process, several topics: each topic's partitions run in their own replication thread
//! (their own copy clients, cursor and stop), so that a stop of one topic — a foreign write, a
//! refused record, a source that went away — leaves the others copying; the lease hub, the
//! state-topic producer and the source admin client are shared. SIGTERM stops them all.
//! Topics start a few at a time ([`START_CONCURRENCY`]). The process is ready once every topic
//! started and while every running topic is ready, alive while every running topic is; it ends
//! when every topic ended, with the most serious outcome among them.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kmirror_state::pool::{START_CONCURRENCY, START_SLOT};
use kmirror_state::records::StopReason;

use crate::config::FetcherConfig;
use crate::http::LIVENESS_WINDOW;
use crate::replicator::{Handles, Health, Outcome, run};

/// How often the process health is derived from the topics'.
const HEALTH_INTERVAL: Duration = Duration::from_millis(200);

/// The configurations of `topics` sharing one process: the memory budget and the throttle are
/// divided by the topics' partition counts (each topic has its own clients).
pub fn share(topics: Vec<FetcherConfig>) -> Vec<FetcherConfig> {
    let total: usize = topics
        .iter()
        .map(|c| c.partitions.len())
        .sum::<usize>()
        .max(1);
    topics
        .into_iter()
        .map(|mut c| {
            let n = c.partitions.len();
            c.memory_budget = part_of(c.memory_budget, n, total);
            c.throttle_bytes_per_second = c.throttle_bytes_per_second.map(|t| part_of(t, n, total));
            c
        })
        .collect()
}

/// `n` of `total` shares of `whole`, at least 1.
fn part_of(whole: u64, n: usize, total: usize) -> u64 {
    ((u128::from(whole) * n as u128 / total as u128) as u64).max(1)
}

/// One topic's replication thread.
struct Runner {
    topic: String,
    health: Arc<Health>,
    thread: Option<JoinHandle<Outcome>>,
    outcome: Option<Outcome>,
    started: Instant,
}

fn start(config: FetcherConfig, handles: &Handles) -> Runner {
    let own = Handles {
        shutdown: handles.shutdown.clone(),
        metrics: handles.metrics.clone(),
        health: Arc::new(Health::default()),
    };
    let health = own.health.clone();
    let topic = config.source_topic.clone();
    let thread = std::thread::Builder::new()
        .name(format!("copy {topic}"))
        .spawn(move || {
            let _span = tracing::info_span!("copy", topic = %config.source_topic).entered();
            run(&config, &own)
        })
        .expect("a replication thread");
    Runner {
        topic,
        health,
        thread: Some(thread),
        outcome: None,
        started: Instant::now(),
    }
}

/// Runs every topic of `topics` until SIGTERM (`handles.shutdown`) or until each stopped; the
/// outcome is the most serious of theirs (a finding before a retryable error before a clean
/// stop). At most [`START_CONCURRENCY`] topics start at once.
pub fn run_topics(topics: Vec<FetcherConfig>, handles: &Handles) -> Outcome {
    let mut waiting: std::collections::VecDeque<FetcherConfig> = share(topics).into();
    let mut runners: Vec<Runner> = Vec::new();
    loop {
        let starting = runners
            .iter()
            .filter(|r| {
                r.thread.is_some() && !r.health.is_ready() && r.started.elapsed() < START_SLOT
            })
            .count();
        let free = START_CONCURRENCY.saturating_sub(starting);
        if !handles.shutdown.load(std::sync::atomic::Ordering::SeqCst) {
            for config in waiting.drain(..free.min(waiting.len())) {
                runners.push(start(config, handles));
            }
        }
        for r in runners.iter_mut() {
            if r.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                let outcome = r
                    .thread
                    .take()
                    .expect("running")
                    .join()
                    .unwrap_or_else(|_| Outcome::Failed {
                        reason: StopReason::Error,
                        partition: None,
                        message: format!("the replication thread of {} panicked", r.topic),
                    });
                match &outcome {
                    Outcome::Stopped => tracing::info!(topic = %r.topic, "topic stopped"),
                    Outcome::Failed { reason, .. } => tracing::warn!(
                        topic = %r.topic,
                        ?reason,
                        "topic stopped; the process copies its other topics on"
                    ),
                }
                r.outcome = Some(outcome);
            }
        }
        let running: Vec<&Runner> = runners.iter().filter(|r| r.thread.is_some()).collect();
        let shutdown = handles.shutdown.load(std::sync::atomic::Ordering::SeqCst);
        if running.is_empty() && (waiting.is_empty() || shutdown) {
            break;
        }
        handles
            .health
            .set_ready(waiting.is_empty() && running.iter().all(|r| r.health.is_ready()));
        if running.iter().all(|r| r.health.is_alive(LIVENESS_WINDOW)) {
            handles.health.beat();
        }
        std::thread::sleep(HEALTH_INTERVAL);
    }
    handles.health.set_ready(false);
    runners
        .into_iter()
        .filter_map(|r| r.outcome)
        .max_by_key(severity)
        .unwrap_or(Outcome::Stopped)
}

/// How serious an outcome is for the process's exit: a finding retrying cannot change, then a
/// retryable error, then a clean stop.
fn severity(o: &Outcome) -> u8 {
    match o {
        Outcome::Stopped => 0,
        Outcome::Failed { reason, .. } if reason.retryable() => 1,
        Outcome::Failed { .. } => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_state::ClusterSettings;

    fn topic(name: &str, partitions: usize) -> FetcherConfig {
        let mut c = FetcherConfig::new(
            "ns/m",
            name,
            name,
            (0..partitions as i32).collect(),
            ClusterSettings::default(),
            ClusterSettings::default(),
        );
        c.memory_budget = 100 << 20;
        c.throttle_bytes_per_second = Some(1000);
        c
    }

    #[test]
    fn budget_and_throttle_are_shared_by_partitions() {
        let shared = share(vec![topic("a", 1), topic("b", 3), topic("c", 6)]);
        let budgets: Vec<u64> = shared.iter().map(|c| c.memory_budget).collect();
        assert_eq!(
            budgets,
            vec![(100 << 20) / 10, 3 * (100 << 20) / 10, 6 * (100 << 20) / 10]
        );
        let throttles: Vec<Option<u64>> =
            shared.iter().map(|c| c.throttle_bytes_per_second).collect();
        assert_eq!(throttles, vec![Some(100), Some(300), Some(600)]);
        let one = share(vec![topic("a", 4)]);
        assert_eq!(
            one[0].memory_budget,
            100 << 20,
            "one topic keeps the whole budget"
        );
    }

    #[test]
    fn the_most_serious_outcome_ends_the_process() {
        let failed = |reason| Outcome::Failed {
            reason,
            partition: None,
            message: String::new(),
        };
        let all = [
            Outcome::Stopped,
            failed(StopReason::ForeignWrite),
            failed(StopReason::Error),
        ];
        let worst = all.iter().cloned().max_by_key(severity).unwrap();
        assert_eq!(worst, failed(StopReason::ForeignWrite));
        assert_eq!(
            [Outcome::Stopped, failed(StopReason::Error)]
                .into_iter()
                .max_by_key(severity),
            Some(failed(StopReason::Error))
        );
    }
}
