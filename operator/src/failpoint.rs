//! Failpoints: named places between the steps of a failover or failback where a test makes the
//! operator crash. Compiled in only with the feature `failpoints` (the test build enables it;
//! the release image does not); inert otherwise. `KMIRROR_FAILPOINTS=name[,name…]` makes the
//! process abort — like a SIGKILL: nothing flushed, nothing cleaned up — when it reaches one.
//! An entry `name=wait:PATH` instead holds the task that reaches `name` until the file PATH
//! exists (an operator stalled mid-reconcile, as a frozen or partitioned leader is).

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

/// Holds the task here while `name=wait:PATH` is listed in `KMIRROR_FAILPOINTS` and PATH does
/// not exist.
#[cfg(feature = "failpoints")]
pub async fn pause_point(name: &str) {
    let Some(list) = std::env::var_os("KMIRROR_FAILPOINTS") else {
        return;
    };
    let list = list.to_string_lossy().into_owned();
    let prefix = format!("{name}=wait:");
    let Some(path) = list
        .split(',')
        .find_map(|entry| entry.trim().strip_prefix(&prefix))
    else {
        return;
    };
    if std::path::Path::new(path).exists() {
        return;
    }
    tracing::warn!(failpoint = name, %path, "failpoint reached: waiting");
    while !std::path::Path::new(path).exists() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tracing::warn!(failpoint = name, "failpoint released");
}

/// Holds the task here while `name=wait:PATH` is listed (not in this build).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn pause_point(_name: &str) {}
