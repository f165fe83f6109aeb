//! A token bucket: the operator's client-side limits on status writes (queries per second with
//! a burst). Pure arithmetic on instants the caller passes in, so it is table-tested.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Tokens refill at `rate` per second up to `burst`; one write takes one.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    /// Tokens at `.1` (negative while reservations are in debt).
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens (at least one) refilling at `rate` per second (at least
    /// one every hour).
    pub fn new(rate: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate: rate.max(1.0 / 3600.0),
            burst,
            state: Mutex::new((burst, now)),
        }
    }

    fn refilled(&self, now: Instant) -> std::sync::MutexGuard<'_, (f64, Instant)> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(state.1).as_secs_f64();
        state.0 = (state.0 + elapsed * self.rate).min(self.burst);
        state.1 = state.1.max(now);
        state
    }

    fn until_one(&self, tokens: f64) -> Duration {
        Duration::from_secs_f64(((1.0 - tokens) / self.rate).max(0.0))
    }

    /// Takes a token when there is one; else how long until there is (nothing taken).
    pub fn try_take(&self, now: Instant) -> Result<(), Duration> {
        let mut state = self.refilled(now);
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            Ok(())
        } else {
            Err(self.until_one(state.0))
        }
    }

    /// Takes a token now, in debt when there is none: how long to wait before using it. Later
    /// `try_take`s see the debt, so reserved writes go first.
    pub fn reserve(&self, now: Instant) -> Duration {
        let mut state = self.refilled(now);
        let wait = self.until_one(state.0);
        state.0 -= 1.0;
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let t0 = Instant::now();
        let b = TokenBucket::new(2.0, 3, t0);
        for _ in 0..3 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        assert_eq!(b.try_take(t0), Err(Duration::from_millis(500)));
        // Half a second later one token is back, not two.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.try_take(t1), Ok(()));
        assert!(b.try_take(t1).is_err());
        // Long idle refills to the burst only.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.try_take(t2), Ok(()));
        }
        assert!(b.try_take(t2).is_err());
    }

    #[test]
    fn reservations_go_into_debt_and_go_first() {
        let t0 = Instant::now();
        let b = TokenBucket::new(1.0, 1, t0);
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::from_secs(1));
        assert_eq!(b.reserve(t0), Duration::from_secs(2));
        // Two tokens of debt: a try_take waits until the debt is paid and one token is back.
        assert_eq!(b.try_take(t0), Err(Duration::from_secs(3)));
        assert_eq!(b.try_take(t0 + Duration::from_secs(3)), Ok(()));
    }

    #[test]
    fn time_going_backwards_takes_nothing_away() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let b = TokenBucket::new(1.0, 2, t0);
        assert_eq!(b.try_take(t0 - Duration::from_secs(5)), Ok(()));
        assert_eq!(b.try_take(t0), Ok(()));
        assert!(b.try_take(t0).is_err());
    }
}
