//! The soak's fault plan: a seeded schedule in which every kind of fault occurs at least once,
//! more are drawn until the planned minutes are filled, and one failover → failback cycle sits
//! in the middle. Every kind once takes about [`EVERY_KIND_MINUTES`]; a shorter plan is a seeded
//! selection of kinds that fits (with the cycle from [`CYCLE_MINUTES`] on). The same seed and
//! minutes give the same plan; each planned fault carries its own seed for the choices made
//! when it is injected (which broker, partition, pod, how long).

use std::time::Duration;

use crate::kafka::Rng;

/// A kind of fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL a broker of either cluster, start it again later.
    BrokerKill,
    /// SIGSTOP a broker, SIGCONT it later.
    BrokerSigstop,
    /// Controlled shutdown and start of a broker.
    BrokerRestart,
    /// Move a partition's leadership.
    MoveLeader,
    /// Freeze an in-sync follower (HW lags the log end), thaw it later.
    FreezeFollower,
    /// Unclean leader election on the source: the source log diverges.
    UncleanElection,
    /// Force-delete a fetcher pod's object while its process keeps running; kill it later.
    Zombie,
    /// SIGKILL the operator replica holding the Lease.
    KillOperatorLeader,
    /// SIGSTOP the operator replica holding the Lease until another leads, then SIGCONT: two
    /// operators overlap, both believing they lead.
    OperatorOverlap,
    /// Pause a topic, resume it later.
    PauseResume,
    /// Fail a topic over, fail it back, and mirror it forward again.
    FailoverFailback,
    /// Reset the mirror's connections to one broker (through the fault proxy) a few times.
    NetReset,
    /// Cut one broker off from the mirror's clients (blackhole) for some seconds.
    NetCut,
    /// Add latency to one broker's responses to the mirror for some seconds.
    NetLatency,
    /// Cut one fetcher pod off the network past its lease while its process runs, then join it
    /// again.
    PodNetCut,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 15] = [
        FaultKind::BrokerKill,
        FaultKind::BrokerSigstop,
        FaultKind::BrokerRestart,
        FaultKind::MoveLeader,
        FaultKind::FreezeFollower,
        FaultKind::UncleanElection,
        FaultKind::Zombie,
        FaultKind::KillOperatorLeader,
        FaultKind::OperatorOverlap,
        FaultKind::PauseResume,
        FaultKind::FailoverFailback,
        FaultKind::NetReset,
        FaultKind::NetCut,
        FaultKind::NetLatency,
        FaultKind::PodNetCut,
    ];

    /// The name in plans and reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::BrokerKill => "broker-kill",
            FaultKind::BrokerSigstop => "broker-sigstop",
            FaultKind::BrokerRestart => "broker-restart",
            FaultKind::MoveLeader => "move-leader",
            FaultKind::FreezeFollower => "freeze-follower",
            FaultKind::UncleanElection => "unclean-election",
            FaultKind::Zombie => "zombie-fetcher",
            FaultKind::KillOperatorLeader => "kill-operator-leader",
            FaultKind::OperatorOverlap => "operator-overlap",
            FaultKind::PauseResume => "pause-resume",
            FaultKind::FailoverFailback => "failover-failback",
            FaultKind::NetReset => "net-reset",
            FaultKind::NetCut => "net-cut",
            FaultKind::NetLatency => "net-latency",
            FaultKind::PodNetCut => "fetcher-net-cut",
        }
    }

    /// About how long injecting and healing takes, for spacing the plan.
    fn estimate(self) -> Duration {
        Duration::from_secs(match self {
            FaultKind::BrokerKill => 40,
            FaultKind::BrokerSigstop => 30,
            FaultKind::BrokerRestart => 40,
            FaultKind::MoveLeader => 20,
            FaultKind::FreezeFollower => 25,
            FaultKind::UncleanElection => 90,
            FaultKind::Zombie => 60,
            FaultKind::KillOperatorLeader => 40,
            FaultKind::OperatorOverlap => 45,
            FaultKind::PauseResume => 40,
            FaultKind::FailoverFailback => 180,
            FaultKind::NetReset => 25,
            FaultKind::NetCut => 35,
            FaultKind::NetLatency => 30,
            FaultKind::PodNetCut => 75,
        })
    }
}

/// One fault of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFault {
    /// Earliest start, from the beginning of the fault phase.
    pub at: Duration,
    /// What to inject.
    pub kind: FaultKind,
    /// Seed for the choices made when injecting it.
    pub seed: u64,
}

/// At most this many unclean elections per plan: each diverges the same source partition.
const MAX_UNCLEAN: usize = 2;

/// Minutes a plan needs to hold every kind of fault once.
pub const EVERY_KIND_MINUTES: f64 = 16.0;

/// Shorter plans hold the failover cycle from this many minutes on.
pub const CYCLE_MINUTES: f64 = 6.0;

/// The plan for `minutes` of faults with `seed`.
pub fn plan(seed: u64, minutes: f64) -> Vec<PlannedFault> {
    if minutes < EVERY_KIND_MINUTES {
        return short_plan(seed, minutes);
    }
    let mut rng = Rng::new(seed ^ 0x5eed_fa17);
    let total = Duration::from_secs_f64((minutes * 60.0).max(0.0));
    // Every kind but the cycle once, in a seeded order; then random draws.
    let mut once: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|k| *k != FaultKind::FailoverFailback)
        .collect();
    for i in (1..once.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        once.swap(i, j);
    }
    let drawable: Vec<FaultKind> = once.clone();
    let mut kinds: Vec<FaultKind> = Vec::new();
    let mut t = Duration::from_secs(5);
    let mut cycle_placed = false;
    let mut unclean = 0;
    let mut queue = once.into_iter();
    loop {
        let next = match queue.next() {
            Some(k) => k,
            None if t < total => loop {
                let k = drawable[rng.below(drawable.len() as u64) as usize];
                if k != FaultKind::UncleanElection || unclean < MAX_UNCLEAN {
                    break k;
                }
            },
            None => break,
        };
        if !cycle_placed && t >= total / 2 {
            kinds.push(FaultKind::FailoverFailback);
            t += FaultKind::FailoverFailback.estimate();
            cycle_placed = true;
        }
        if next == FaultKind::UncleanElection {
            unclean += 1;
        }
        kinds.push(next);
        t += next.estimate() + Duration::from_secs(5 + rng.below(16));
    }
    if !cycle_placed {
        let middle = kinds.len() / 2;
        kinds.insert(middle, FaultKind::FailoverFailback);
    }
    let mut at = Duration::from_secs(5);
    kinds
        .into_iter()
        .map(|kind| {
            let planned = PlannedFault {
                at,
                kind,
                seed: rng.next_u64(),
            };
            at += kind.estimate() + Duration::from_secs(5 + rng.below(16));
            planned
        })
        .collect()
}

/// A seeded selection of kinds that fits `minutes` (at least one fault).
fn short_plan(seed: u64, minutes: f64) -> Vec<PlannedFault> {
    let mut rng = Rng::new(seed ^ 0x5eed_fa17);
    let total = Duration::from_secs_f64((minutes * 60.0).max(0.0));
    let mut order: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|k| *k != FaultKind::FailoverFailback)
        .collect();
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut budget = total;
    let mut kinds = Vec::new();
    if minutes >= CYCLE_MINUTES {
        budget = budget.saturating_sub(FaultKind::FailoverFailback.estimate());
    }
    for kind in order {
        let cost = kind.estimate() + Duration::from_secs(10);
        if cost <= budget || kinds.is_empty() {
            budget = budget.saturating_sub(cost);
            kinds.push(kind);
        }
    }
    if minutes >= CYCLE_MINUTES {
        kinds.insert(kinds.len() / 2, FaultKind::FailoverFailback);
    }
    let mut at = Duration::from_secs(5);
    kinds
        .into_iter()
        .map(|kind| {
            let planned = PlannedFault {
                at,
                kind,
                seed: rng.next_u64(),
            };
            at += kind.estimate() + Duration::from_secs(5 + rng.below(6));
            planned
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(plan: &[PlannedFault], kind: FaultKind) -> usize {
        plan.iter().filter(|p| p.kind == kind).count()
    }

    #[test]
    fn same_seed_same_plan_other_seed_other_plan() {
        assert_eq!(plan(1, 20.0), plan(1, 20.0));
        assert_ne!(plan(1, 20.0), plan(2, 20.0));
    }

    #[test]
    fn short_plans_fit_their_minutes_and_hold_the_cycle_from_six_minutes() {
        for seed in [1, 2, 3] {
            let p = plan(seed, 3.0);
            let planned: u64 = p.iter().map(|f| f.kind.estimate().as_secs()).sum();
            assert!(!p.is_empty() && planned <= 180, "{p:?}");
            assert_eq!(count(&p, FaultKind::FailoverFailback), 0);
            assert!(!plan(seed, 0.1).is_empty(), "always one fault");
            let p = plan(seed, 8.0);
            assert_eq!(count(&p, FaultKind::FailoverFailback), 1);
            assert!(p.len() >= 4, "{p:?}");
        }
        assert_ne!(
            plan(1, 3.0).iter().map(|f| f.kind).collect::<Vec<_>>(),
            plan(2, 3.0).iter().map(|f| f.kind).collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_kind_at_least_once_and_one_cycle_from_sixteen_minutes() {
        for (seed, minutes) in [(1, 16.0), (7, 17.5), (42, 20.0), (3, 60.0)] {
            let p = plan(seed, minutes);
            for kind in FaultKind::ALL {
                assert!(count(&p, kind) >= 1, "{kind:?} missing for seed {seed}");
            }
            assert_eq!(count(&p, FaultKind::FailoverFailback), 1);
            assert!(count(&p, FaultKind::UncleanElection) <= MAX_UNCLEAN);
            assert!(p.windows(2).all(|w| w[0].at < w[1].at), "in time order");
        }
    }

    #[test]
    fn longer_soaks_inject_more_and_put_the_cycle_in_the_middle() {
        let short = plan(5, EVERY_KIND_MINUTES);
        let longer = plan(5, EVERY_KIND_MINUTES + 8.0);
        assert!(
            longer.len() > short.len() + 5,
            "{} faults, {} in {EVERY_KIND_MINUTES} min",
            longer.len(),
            short.len()
        );
        let long = plan(5, 20.0);
        let cycle = long
            .iter()
            .position(|p| p.kind == FaultKind::FailoverFailback)
            .unwrap();
        let at = long[cycle].at.as_secs_f64();
        assert!(
            (7.0 * 60.0..=14.0 * 60.0).contains(&at),
            "cycle at {at}s of 20 min"
        );
    }
}
