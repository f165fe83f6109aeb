//! `kmirror-node-agent enter`: runs a command inside a running container's mount and UTS
//! namespaces, as the container's user, with the caller's environment. Exec probes and preStop
//! hooks use it.

use std::ffi::CString;
use std::fs::File;
use std::path::Path;

use nix::sched::{CloneFlags, setns};
use nix::unistd::{Gid, Uid};

use crate::launch::UserSpec;

/// Joins the namespaces of `target_pid`, changes directory and identity, and execs `argv` (looked
/// up in `PATH`). Returns only on failure.
pub fn main(target_pid: i32, user: Option<UserSpec>, cwd: &Path, argv: &[String]) -> i32 {
    match enter(target_pid, user, cwd, argv) {
        Ok(never) => match never {},
        Err(message) => {
            eprintln!("enter: {message}");
            126
        }
    }
}

fn enter(
    target_pid: i32,
    user: Option<UserSpec>,
    cwd: &Path,
    argv: &[String],
) -> Result<std::convert::Infallible, String> {
    let argv = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| "an argument contains NUL".to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let program = argv.first().ok_or("no command given")?.clone();
    for (ns, flag) in [
        ("mnt", CloneFlags::CLONE_NEWNS),
        ("uts", CloneFlags::CLONE_NEWUTS),
    ] {
        let path = format!("/proc/{target_pid}/ns/{ns}");
        let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        setns(&file, flag).map_err(|e| format!("setns {path}: {e}"))?;
    }
    let _ = nix::unistd::chdir(cwd);
    if let Some(user) = user {
        let groups: Vec<Gid> = std::iter::once(user.gid)
            .chain(user.groups)
            .map(Gid::from_raw)
            .collect();
        nix::unistd::setgroups(&groups).map_err(|e| format!("setgroups: {e}"))?;
        nix::unistd::setgid(Gid::from_raw(user.gid)).map_err(|e| format!("setgid: {e}"))?;
        nix::unistd::setuid(Uid::from_raw(user.uid)).map_err(|e| format!("setuid: {e}"))?;
    }
    nix::unistd::execvp(&program, &argv).map_err(|e| format!("exec {program:?}: {e}"))
}
