//! The container shim: a small single-threaded process (`kmirror-node-agent shim SPEC`) that sits
//! between the node agent and one container process.
//!
//! It forks the container's main process into private mount and UTS namespaces (bind mounts for
//! the volumes, a private `/tmp`, the pod's `/etc/hosts`, hostname = pod name), switches to the
//! pod's user, and execs the command with stdout/stderr appended to the container log. Then it
//! waits, stops whatever the process left behind in its process group, and records how the
//! process ended in an exit file. Because the shim is a process of its own, a container survives
//! a restart of the node agent and its exit status is never lost.
//!
//! The shim leads the container's process group: the agent signals the whole group to stop a
//! container. The shim itself ignores SIGTERM/SIGINT/SIGHUP (its handlers do nothing and are
//! reset by `exec` in the child), so it stays to record the exit.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal, sigaction};
use nix::sys::stat::{Mode, SFlag, fstat};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, fork, getpgrp, pipe2};

use crate::launch::{ExitRecord, LaunchSpec};
use crate::process::group_members;

extern "C" fn ignore_signal(_: libc::c_int) {}

const FORWARDED: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Runs the shim for the launch spec at `spec_path`; returns the shim's exit code.
pub fn main(spec_path: &Path) -> i32 {
    let spec: LaunchSpec = match std::fs::read(spec_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("shim: cannot read launch spec {}: {e}", spec_path.display());
            return 2;
        }
    };
    let record = supervise(&spec);
    if let Err(e) = record.write(&spec.exit_file) {
        eprintln!("shim: cannot write {}: {e}", spec.exit_file.display());
        return 1;
    }
    0
}

/// Starts the process, waits for it and cleans up its process group.
fn supervise(spec: &LaunchSpec) -> ExitRecord {
    // Orphans of the container are re-parented to the shim, which reaps them.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let handler = SigAction::new(
        SigHandler::Handler(ignore_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in FORWARDED {
        // SAFETY: the handler does nothing and is async-signal-safe.
        let _ = unsafe { sigaction(signal, &handler) };
    }

    let prepared = match Prepared::new(spec) {
        Ok(prepared) => prepared,
        Err(message) => return ExitRecord::start_error(message, now()),
    };
    let (read_end, write_end) = match pipe2(OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(e) => return ExitRecord::start_error(format!("pipe: {e}"), now()),
    };
    // SAFETY: the shim is single-threaded, so the child may allocate and run ordinary code.
    let child = match unsafe { fork() } {
        Err(e) => return ExitRecord::start_error(format!("fork: {e}"), now()),
        Ok(ForkResult::Child) => {
            drop(read_end);
            let message = prepared.exec(spec);
            let mut out = File::from(write_end);
            let _ = std::io::Write::write_all(&mut out, message.as_bytes());
            // SAFETY: leave without running the parent's exit handlers.
            unsafe { libc::_exit(127) }
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    drop(write_end);
    let _ = std::fs::write(&spec.pid_file, child.as_raw().to_string());

    let mut failure = String::new();
    let _ = File::from(read_end).read_to_string(&mut failure);
    let (code, signal) = wait_for(child);
    stop_group_leftovers();
    if !failure.is_empty() {
        return ExitRecord::start_error(failure, now());
    }
    ExitRecord::from_wait(code, signal, now())
}

/// Reaps children until `main` has ended; returns its exit code or signal.
fn wait_for(main: Pid) -> (Option<i32>, Option<i32>) {
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == main => return (Some(code), None),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == main => {
                return (None, Some(signal as i32));
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => return (None, None),
        }
    }
}

/// A container stops as a whole: kill what the main process left in the group, reap it.
fn stop_group_leftovers() {
    let me = std::process::id() as i32;
    let group = getpgrp().as_raw();
    for _ in 0..100 {
        let members = group_members(group, me);
        if members.is_empty() {
            break;
        }
        for pid in members {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
        while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
    }
    while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// What is opened and converted before the fork, so that errors surface early.
struct Prepared {
    log: File,
    program: File,
    script: bool,
    program_path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

fn cstring(s: &[u8], what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} contains a NUL byte"))
}

impl Prepared {
    fn new(spec: &LaunchSpec) -> Result<Prepared, String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log_file)
            .map_err(|e| format!("cannot open log file {}: {e}", spec.log_file.display()))?;
        let mut program = File::open(&spec.program)
            .map_err(|e| format!("cannot open {}: {e}", spec.program.display()))?;
        let mut magic = [0u8; 2];
        let script = program.read_exact(&mut magic).is_ok() && &magic == b"#!";
        let argv = spec
            .argv
            .iter()
            .map(|a| cstring(a.as_bytes(), "an argument"))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = spec
            .env
            .iter()
            .map(|(k, v)| cstring(format!("{k}={v}").as_bytes(), "an environment variable"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Prepared {
            log,
            program,
            script,
            program_path: cstring(spec.program.as_os_str().as_bytes(), "the program path")?,
            argv,
            envp,
        })
    }

    /// In the forked child: namespaces, mounts, identity, exec. Returns only on failure, with
    /// a message for the container status.
    fn exec(self, spec: &LaunchSpec) -> String {
        match self.setup(spec) {
            Err(message) => message,
            Ok(()) => {
                let err = if self.script {
                    nix::unistd::execve(&self.program_path, &self.argv, &self.envp)
                } else {
                    // By descriptor: the binary may sit in a directory the user cannot search.
                    nix::unistd::fexecve(&self.program, &self.argv, &self.envp)
                };
                match err {
                    Err(e) => format!("exec {}: {e}", spec.program.display()),
                    Ok(never) => match never {},
                }
            }
        }
    }

    fn setup(&self, spec: &LaunchSpec) -> Result<(), String> {
        let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        for signal in FORWARDED.into_iter().chain([Signal::SIGPIPE]) {
            // SAFETY: restoring the default disposition.
            let _ = unsafe { sigaction(signal, &default) };
        }
        let _ =
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);

        if let Some(path) = &spec.netns {
            let file = std::fs::File::open(path)
                .map_err(|e| format!("open network namespace {}: {e}", path.display()))?;
            nix::sched::setns(&file, CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("join network namespace {}: {e}", path.display()))?;
        }
        unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)
            .map_err(|e| format!("unshare mount/UTS namespaces: {e}"))?;
        nix::unistd::sethostname(&spec.hostname).map_err(|e| format!("sethostname: {e}"))?;
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| format!("make / private: {e}"))?;
        // Sources are opened first: a mount over /tmp may hide later sources under /tmp.
        let sources = spec
            .mounts
            .iter()
            .map(|m| {
                open(&m.source, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                    .map_err(|e| format!("volume source {}: {e}", m.source.display()))
            })
            .collect::<Result<Vec<OwnedFd>, _>>()?;
        for (m, source) in spec.mounts.iter().zip(&sources) {
            bind(source, &m.target, m.read_only)?;
        }
        let _ = std::fs::create_dir_all(&spec.working_dir);
        if spec.read_only_root {
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&str>,
            )
            .map_err(|e| format!("remount / read-only: {e}"))?;
        }
        nix::unistd::chdir(&spec.working_dir)
            .map_err(|e| format!("working directory {}: {e}", spec.working_dir.display()))?;

        let null = File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
        nix::unistd::dup2_stdin(&null).map_err(|e| format!("stdin: {e}"))?;
        nix::unistd::dup2_stdout(&self.log).map_err(|e| format!("stdout: {e}"))?;
        nix::unistd::dup2_stderr(&self.log).map_err(|e| format!("stderr: {e}"))?;

        if let Some(user) = &spec.user {
            let groups: Vec<Gid> = std::iter::once(user.gid)
                .chain(user.groups.iter().copied())
                .map(Gid::from_raw)
                .collect();
            nix::unistd::setgroups(&groups).map_err(|e| format!("setgroups: {e}"))?;
            nix::unistd::setgid(Gid::from_raw(user.gid)).map_err(|e| format!("setgid: {e}"))?;
            nix::unistd::setuid(Uid::from_raw(user.uid)).map_err(|e| format!("setuid: {e}"))?;
        }
        Ok(())
    }
}

/// Bind-mounts the opened `source` at `target`, creating the mount point (a directory or an
/// empty file, like the source) when it is missing.
fn bind(source: &OwnedFd, target: &Path, read_only: bool) -> Result<(), String> {
    let is_dir = fstat(source)
        .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
        .map_err(|e| format!("stat volume source for {}: {e}", target.display()))?;
    if is_dir {
        std::fs::create_dir_all(target)
            .map_err(|e| format!("mount point {}: {e}", target.display()))?;
    } else if !target.exists() {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("mount point {}: {e}", parent.display()))?;
        }
        File::create(target).map_err(|e| format!("mount point {}: {e}", target.display()))?;
    }
    let from = format!("/proc/self/fd/{}", source.as_raw_fd());
    mount(
        Some(from.as_str()),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind mount at {}: {e}", target.display()))?;
    if read_only {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(|e| format!("read-only remount of {}: {e}", target.display()))?;
    }
    Ok(())
}
