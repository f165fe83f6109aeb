//! Restart back-off for crashing containers.
//!
//! Like a kubelet, the first restart of a crash streak is immediate and every further one waits
//! twice as long as the previous one, up to a cap; a container that ran for at least the reset
//! period starts a new streak. The kubelet uses a 10 s base, a 5 min cap and a 10 min reset;
//! the test bed defaults to 1 s, 60 s and 60 s so that crash loops are visible within seconds.

use std::time::Duration;

/// Back-off settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay before the second restart of a streak.
    pub base: Duration,
    /// The longest delay.
    pub cap: Duration,
    /// A run at least this long resets the streak.
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            reset_after: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The delay before the next start, given how many restarts the current streak already
    /// counted (0 for the first crash).
    pub fn delay(&self, streak: u32) -> Duration {
        if streak == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(streak - 1).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The streak to continue with after a run of `ran_for`.
    pub fn streak_after_run(&self, streak: u32, ran_for: Duration) -> u32 {
        if ran_for >= self.reset_after {
            0
        } else {
            streak
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn doubles_from_the_base_up_to_the_cap() {
        let b = Backoff::default();
        let delays: Vec<u64> = (0..10).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(delays, vec![0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(b.delay(200), Duration::from_secs(60));
    }

    #[test]
    fn a_long_run_resets_the_streak() {
        let b = Backoff::default();
        assert_eq!(b.streak_after_run(5, Duration::from_secs(3)), 5);
        assert_eq!(b.streak_after_run(5, Duration::from_secs(60)), 0);
    }
}
