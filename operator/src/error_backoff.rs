//! Per-object exponential backoff for failed reconciles: an object whose reconcile keeps failing
//! is looked at again after 2 s, 4 s, 8 s … up to 5 minutes, each failure told in a Warning Event;
//! one success starts it over. Other objects keep their own pace.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The first retry delay.
pub const FIRST: Duration = Duration::from_secs(2);
/// The longest retry delay.
pub const MAX: Duration = Duration::from_secs(300);

/// The delay before the retry after `failures` failures in a row (at least 1).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << doublings).min(MAX)
}

/// Failures in a row, by object (`controller/namespace/name`).
#[derive(Debug, Default)]
pub struct ErrorBackoff(Mutex<HashMap<String, u32>>);

impl ErrorBackoff {
    /// The key of an object of `controller`.
    pub fn key(controller: &str, namespace: &str, name: &str) -> String {
        format!("{controller}/{namespace}/{name}")
    }

    /// Counts a failure of `key`; the failures in a row so far.
    pub fn failed(&self, key: &str) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key.to_string()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// The delay before `key` is looked at again after its latest failure.
    pub fn delay_of(&self, key: &str) -> Duration {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        delay(map.get(key).copied().unwrap_or(1))
    }

    /// A reconcile of `key` succeeded: the next failure starts over.
    pub fn succeeded(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_per_failure_up_to_five_minutes() {
        let s = Duration::from_secs;
        #[rustfmt::skip]
        let table = [(0, s(2)), (1, s(2)), (2, s(4)), (3, s(8)), (6, s(64)), (8, s(256)),
                     (9, s(300)), (40, s(300)), (u32::MAX, s(300))];
        for (failures, expect) in table {
            assert_eq!(delay(failures), expect, "after {failures} failures");
        }
    }

    #[test]
    fn each_object_backs_off_alone_and_a_success_starts_over() {
        let b = ErrorBackoff::default();
        let (x, y) = ("mirrortopic/ns/x", "mirrortopic/ns/y");
        assert_eq!(b.failed(x), 1);
        assert_eq!(b.failed(x), 2);
        assert_eq!(b.failed(x), 3);
        assert_eq!(b.delay_of(x), Duration::from_secs(8));
        assert_eq!(b.failed(y), 1);
        assert_eq!(b.delay_of(y), Duration::from_secs(2), "y has its own count");
        b.succeeded(x);
        assert_eq!(b.failed(x), 1, "a success starts over");
    }
}
