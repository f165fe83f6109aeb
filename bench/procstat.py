"""Child processes with exact resource accounting, and a /proc sampler for time series.

- `Proc` starts a process and reaps it with wait4(2), which returns its exact final CPU time
  (user + sys, including its reaped descendants) — nothing is lost between the last sample and
  the exit.
- `Sampler` reads /proc/<pid>/stat (utime + stime) and /proc/<pid>/status (VmHWM, VmRSS) of a
  set of root processes and their live descendants a few times per second, so CPU can be read at
  any moment (first record on the destination, catch-up, window start/end) and per thread.
"""

import os
import re
import signal
import subprocess
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def read_stat(path):
    """(comm, ppid, utime+stime ticks) from a /proc stat file, or None when gone."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    left = data.find("(")
    right = data.rfind(")")
    comm = data[left + 1:right]
    fields = data[right + 2:].split()
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    return comm, int(fields[1]), int(fields[11]) + int(fields[12])


def read_status_kb(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def descendants(roots):
    """Live descendants of the given PIDs (a scan of /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = read_stat(f"/proc/{name}/stat")
        if st:
            children.setdefault(st[1], []).append(int(name))
    out = []
    stack = list(roots)
    while stack:
        pid = stack.pop()
        for c in children.get(pid, []):
            out.append(c)
            stack.append(c)
    return out


def thread_cpu(pids):
    """CPU seconds per thread name over the given processes (digits in names folded to '#')."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            st = read_stat(f"/proc/{pid}/task/{tid}/stat")
            if st:
                name = re.sub(r"\d+", "#", st[0])
                out[name] = out.get(name, 0.0) + st[2] / TICK
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


class Proc:
    """A child process reaped with wait4 for exact CPU and peak-RSS accounting."""

    def __init__(self, argv, log_path, env=None):
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.popen = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                      stdin=subprocess.DEVNULL)
        self.pid = self.popen.pid
        self.started = time.monotonic()
        self.code = None
        self.rusage = None

    def poll(self):
        if self.code is None:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status, ru)
        return self.code

    def _reaped(self, status, ru):
        self.code = os.waitstatus_to_exitcode(status)
        self.rusage = ru
        self.popen.returncode = self.code
        self.log.close()

    def signal(self, sig=signal.SIGTERM):
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout):
        """Waits up to `timeout` seconds, then SIGKILLs; returns the exit code."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                self.signal(signal.SIGKILL)
                _, status, ru = os.wait4(self.pid, 0)
                self._reaped(status, ru)
                break
            time.sleep(0.05)
        return self.code

    def stop(self, timeout=30.0):
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    @property
    def cpu_seconds(self):
        """Exact user+sys CPU once reaped."""
        return None if self.rusage is None else self.rusage.ru_utime + self.rusage.ru_stime

    @property
    def maxrss_mb(self):
        """ru_maxrss. Beware: Linux folds the RSS high-water mark of the pre-exec memory image
        (the forked or vfork-shared *harness*) into it, so it is never below the harness's own
        peak RSS. Use the sampler's VmHWM (post-exec) for small processes."""
        return None if self.rusage is None else self.rusage.ru_maxrss / 1024.0

    def tail(self, lines=30):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""


class Sampler(threading.Thread):
    """Samples CPU and memory of root processes and their descendants until stopped."""

    def __init__(self, pids, interval=0.2, rescan=2.0):
        super().__init__(daemon=True)
        self.roots = list(pids)
        self.interval = interval
        self.rescan = rescan
        self.ticks = {}  # pid -> last utime+stime
        self.hwm_kb = {}  # pid -> last VmHWM
        self.rss_kb = {}  # pid -> last VmRSS
        self.extra = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.start()

    def _sample(self, pids):
        for pid in pids:
            st = read_stat(f"/proc/{pid}/stat")
            if st is None:
                continue
            hwm = read_status_kb(pid, "VmHWM")
            rss = read_status_kb(pid, "VmRSS")
            with self.lock:
                self.ticks[pid] = st[2]
                if hwm is not None:
                    self.hwm_kb[pid] = hwm
                if rss is not None:
                    self.rss_kb[pid] = rss

    def run(self):
        last_scan = 0.0
        while not self.done.is_set():
            now = time.monotonic()
            if now - last_scan >= self.rescan:
                self.extra = descendants(self.roots)
                last_scan = now
            self._sample(self.roots + self.extra)
            self.done.wait(self.interval)

    def now(self):
        """Samples immediately and returns CPU seconds so far (sum over the tree)."""
        self._sample(self.roots + self.extra)
        with self.lock:
            return sum(self.ticks.values()) / TICK

    def peak_rss_mb(self):
        """Sum of the last VmHWM seen per process (VmHWM only grows; sampled until exit)."""
        with self.lock:
            return sum(self.hwm_kb.values()) / 1024.0

    def threads(self):
        return thread_cpu(self.roots + self.extra)

    def stop(self):
        self.done.set()
        self.join(5)
