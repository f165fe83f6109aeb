# Shared helpers for e2e/testbed.sh and the e2e/bed/*.sh parts. Sourced, not executed.
#
# Layout:
#   $KM_CACHE  (default ~/.cache/kmirror)   downloads and builds, keyed by version; survives `down`
#   $KM_RUN    (default /tmp/kmirror-testbed) runtime state: data dirs, configs, logs, pid files

KM_CACHE="${KMIRROR_CACHE:-$HOME/.cache/kmirror}"
KM_RUN="${KMIRROR_RUN_DIR:-/tmp/kmirror-testbed}"
KM_LOGS="$KM_RUN/logs"
KM_PIDS="$KM_RUN/pids"
mkdir -p "$KM_CACHE" "$KM_LOGS" "$KM_PIDS"

# Run from a test (cargo test sets these for the crate under test), a cargo build here would see
# them: ring's build script reruns when CARGO_MANIFEST_DIR changes, so every crate above it would
# be compiled again and the binaries of running pods and of the node agent replaced mid-run.
for _var in $(compgen -e); do
  case "$_var" in
    CARGO_MANIFEST_* | CARGO_PKG_* | CARGO_CRATE_NAME | CARGO_BIN_* | CARGO_PRIMARY_PACKAGE | \
      CARGO_TARGET_TMPDIR | CARGO_RUSTC_CURRENT_DIR) unset "$_var" ;;
  esac
done
unset _var

# Messages go to stderr so that `testbed.sh env` stays eval-able.
log() { printf '[testbed %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[testbed] ERROR: %s\n' "$*" >&2; exit 1; }

# log_has_after FILE LINES REGEX: FILE has a line matching the extended REGEX after its first
# LINES lines. One process, no pipe: under `set -o pipefail`, `tail | grep -q` fails whenever grep
# stops early while tail still has more than a pipe's buffer to write (SIGPIPE, status 141), so
# a long log made a started broker look as if it never started.
log_has_after() {
  # The pattern goes through the environment: awk -v would interpret its backslashes.
  [ -f "$1" ] && LOG_HAS_AFTER_RE="$3" awk -v skip="$2" \
    'NR > skip && $0 ~ ENVIRON["LOG_HAS_AFTER_RE"] { found = 1; exit } END { exit !found }' "$1"
}

# write_file FILE [MODE]: stdin into FILE (mode MODE, default 644), atomically and only when it
# changed. Every test process runs `up` (Testbed::get), many at once under nextest, while other
# tests run the launchers and read the configs and the kubeconfig it writes: a reader must never
# find one truncated or half written.
write_file() {
  local f="$1" mode="${2:-644}" tmp
  tmp="$(mktemp "$f.XXXXXX")" || return 1
  if ! cat >"$tmp" || ! chmod "$mode" "$tmp"; then
    rm -f "$tmp"
    return 1
  fi
  if cmp -s "$tmp" "$f" 2>/dev/null; then rm -f "$tmp"; else mv -f "$tmp" "$f"; fi
}

# is_running NAME: true when the process recorded in $KM_PIDS/NAME.pid is alive.
is_running() {
  local f="$KM_PIDS/$1.pid"
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

# start_bg NAME CMD...: start CMD detached (own session), stdout+stderr to $KM_LOGS/NAME.log,
# PID recorded in $KM_PIDS/NAME.pid. Does nothing when NAME is already running.
# The clusters' own processes (Kafka brokers and controllers, ZooKeeper, etcd, the API server)
# run at a higher CPU priority (nice KMIRROR_BED_NICE, default -5) than the tests and the pods:
# on a 2-core machine, a starved KRaft controller misses broker heartbeats and fences healthy
# brokers, which is a fault nobody injected. Best effort: without the right, nice warns and runs.
start_bg() {
  local name="$1"; shift
  if is_running "$name"; then return 0; fi
  case "$name" in
    kafka-* | zookeeper | k8s-etcd | k8s-apiserver) set -- nice -n "${KMIRROR_BED_NICE:--5}" "$@" ;;
  esac
  if [ -n "${UP_LOCK_FD:-}" ]; then
    setsid "$@" >>"$KM_LOGS/$name.log" 2>&1 </dev/null {UP_LOCK_FD}>&- &
  else
    setsid "$@" >>"$KM_LOGS/$name.log" 2>&1 </dev/null &
  fi
  echo $! >"$KM_PIDS/$name.pid"
}

# stop_pid NAME [GRACE_SECONDS]: SIGTERM the recorded process group, wait, then SIGKILL.
# Only processes this script recorded are touched.
stop_pid() {
  local name="$1" grace="${2:-20}" f="$KM_PIDS/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    # A process frozen with SIGSTOP (a fault verb) would not act on SIGTERM.
    kill -CONT -- "-$pid" 2>/dev/null || kill -CONT "$pid" 2>/dev/null || true
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < grace * 5; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not stop within ${grace}s, killing"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$f"
}

# wait_for DESCRIPTION TIMEOUT_SECONDS LOGNAME CMD...: poll CMD until it succeeds. On timeout
# print the tail of $KM_LOGS/LOGNAME.log and fail.
wait_for() {
  local what="$1" timeout="$2" logname="$3"; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what; last lines of $KM_LOGS/$logname.log:"
      tail -n 40 "$KM_LOGS/$logname.log" >&2 2>/dev/null || true
      return 1
    fi
    if [ -n "$logname" ] && [ -f "$KM_PIDS/$logname.pid" ] && ! is_running "$logname"; then
      log "$logname exited while waiting for $what; last lines of $KM_LOGS/$logname.log:"
      tail -n 40 "$KM_LOGS/$logname.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.5
  done
}

# need TOOL...: fail early, naming every missing tool, instead of deep inside a step.
need() {
  local missing=() t
  for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  ((${#missing[@]} == 0)) || die "missing tools: ${missing[*]} (see README: Quick start)"
}

# port_open HOST PORT: a TCP connect succeeds.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
