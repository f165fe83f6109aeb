//! Failpoints: named places between the steps of a failover or failback where a test makes the
//! operator crash. Compiled in only with the feature `failpoints` (the test build enables it;
//! the release image does not); inert otherwise. `KMIRROR_FAILPOINTS=name[,name…]` makes the
//! process abort — like a SIGKILL: nothing flushed, nothing cleaned up — when it reaches one.

/// Crashes the process here when `name` is listed in `KMIRROR_FAILPOINTS`.
#[cfg(feature = "failpoints")]
pub fn failpoint(name: &str) {
    let Some(list) = std::env::var_os("KMIRROR_FAILPOINTS") else {
        return;
    };
    if list.to_string_lossy().split(',').any(|n| n.trim() == name) {
        tracing::error!(failpoint = name, "failpoint reached: crashing the operator");
        std::process::abort();
    }
}

/// Crashes the process here when `name` is listed in `KMIRROR_FAILPOINTS` (not in this build).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn failpoint(_name: &str) {}
