//! Host processes by identity: a pid plus its start time (so a recycled pid is never mistaken for
//! a container), liveness, signals to process groups, and the members of a group.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// A process identified by pid and start time (clock ticks since boot, `/proc/<pid>/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    /// The pid; for a shim it is also the id of the container's process group.
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat`.
    pub start_ticks: u64,
}

/// The state letter and start time of a process, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, u64, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses state, start time and process group out of a `/proc/<pid>/stat` line. The command
/// name (field 2) may contain spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat(text: &str) -> Option<(char, u64, i32)> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): field N is fields[N - 3].
    let state = fields.first()?.chars().next()?;
    let pgrp = fields.get(5 - 3)?.parse().ok()?;
    let start = fields.get(22 - 3)?.parse().ok()?;
    Some((state, start, pgrp))
}

impl ProcessId {
    /// The identity of a live process, `None` when it does not exist or is a zombie.
    pub fn of(pid: i32) -> Option<ProcessId> {
        match stat(pid)? {
            ('Z' | 'X', _, _) => None,
            (_, start_ticks, _) => Some(ProcessId { pid, start_ticks }),
        }
    }

    /// The process still runs (same pid, same start time, not a zombie).
    pub fn is_alive(&self) -> bool {
        ProcessId::of(self.pid) == Some(*self)
    }

    /// Sends `signal` to the process group this process leads. A group whose leader is gone is
    /// still signalled when `leader_gone_ok` is set (its members may live on).
    pub fn signal_group(&self, signal: Signal, leader_gone_ok: bool) -> nix::Result<()> {
        if !leader_gone_ok && !self.is_alive() {
            return Err(nix::errno::Errno::ESRCH);
        }
        match killpg(Pid::from_raw(self.pid), signal) {
            Err(nix::errno::Errno::ESRCH) if leader_gone_ok => Ok(()),
            other => other,
        }
    }
}

/// Live members of process group `pgid`, except `exclude`.
pub fn group_members(pgid: i32, exclude: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != exclude)
        .filter(|&pid| matches!(stat(pid), Some((state, _, pgrp)) if pgrp == pgid && state != 'Z'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{ProcessId, parse_stat};

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let line =
            "1234 (a) b (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat(line), Some(('S', 98765, 1234)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn knows_its_own_process() {
        let me = ProcessId::of(std::process::id() as i32).expect("self is alive");
        assert!(me.is_alive());
        let recycled = ProcessId {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!recycled.is_alive());
    }
}
