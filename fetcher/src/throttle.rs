//! A byte-rate limiter (token bucket) for the mirrored data.

use std::time::{Duration, Instant};

/// Allows `rate` bytes per second on average with bursts of at most `burst` bytes.
#[derive(Debug, Clone)]
pub struct Throttle {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Throttle {
    /// A limiter of `bytes_per_second`; the burst is a tenth of a second's worth (at least 64 KiB)
    /// so that a 10 s window stays close to the rate.
    pub fn new(bytes_per_second: u64, now: Instant) -> Throttle {
        let rate = bytes_per_second as f64;
        let burst = (rate / 10.0).max(64.0 * 1024.0);
        Throttle {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes `bytes` and returns how long the caller must wait before sending more. Debt is
    /// allowed (a single record larger than the burst passes, then the wait pays it back).
    pub fn take(&mut self, bytes: usize, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn average_rate_is_respected() {
        let start = Instant::now();
        let mut now = start;
        let mut t = Throttle::new(1_000_000, now);
        let mut sent = 0usize;
        // Simulate a sender that always sleeps as told, over 10 simulated seconds.
        while now.duration_since(start) < Duration::from_secs(10) {
            let wait = t.take(10_000, now);
            sent += 10_000;
            now += wait.max(Duration::from_micros(1));
        }
        let rate = sent as f64 / now.duration_since(start).as_secs_f64();
        assert!(rate <= 1_000_000.0 * 1.02, "rate {rate}");
        assert!(rate >= 1_000_000.0 * 0.95, "rate {rate}");
    }

    #[test]
    fn large_record_creates_debt() {
        let now = Instant::now();
        let mut t = Throttle::new(100_000, now);
        let wait = t.take(1_000_000, now);
        assert!(wait > Duration::from_secs(8), "{wait:?}");
    }
}
