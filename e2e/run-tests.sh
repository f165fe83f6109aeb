#!/usr/bin/env bash
# The test command (`make test`): lint, bring the test bed up (reusing a running one), run every
# test against it with cargo-nextest, and stop the bed again if this run started it.
#
# What a cold machine must download and build besides the workspace starts at once in the
# background, each part skipped when its cached version matches. What the tests wait for first —
# the bed's Kafka jars, Kubernetes and helm; cargo-nextest — runs at nice 10 beside the cargo
# build. What only the end of the run needs — clippy (in a target directory of its own, so that
# it never waits for the build's lock), promtool and the Argo CD health runner (used by two
# suites that run last), cargo-deny with its check — runs at nice 19: it takes the cores the
# build leaves idle, and above all the ones the tests leave idle while they wait on brokers and
# leases. Whatever still runs when the tests start drops to nice 19.
# docs/testing.md explains the steps, the runner, its groups and the two engine passes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kmirror/target}"

t0=$SECONDS
step() { printf '\n=== %s (%ss)\n' "$*" "$((SECONDS - t0))"; }

started=0
if ! e2e/testbed.sh status 2>/dev/null | grep -q 'kafka-source: running'; then
  started=1
fi
prep="$(mktemp -d)"
declare -A prep_pid=() prep_t0=()
cleanup() {
  local rc=$? name
  for name in "${!prep_pid[@]}"; do
    kill -- "-${prep_pid[$name]}" 2>/dev/null || true
  done
  if ((started)) && [ "${KMIRROR_KEEP_TESTBED:-0}" != 1 ]; then
    step "stopping the test bed"
    e2e/testbed.sh down || true
  fi
  rm -rf "$prep"
  printf '\n=== make test finished with status %s in %ss\n' "$rc" "$((SECONDS - t0))"
}
trap cleanup EXIT

# free_gib DIR: free space of DIR's file system, in whole GiB.
free_gib() { df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'; }
# A full disk shows up late and as something else (the linker dies of SIGBUS writing a test
# binary): below KMIRROR_MIN_FREE_GIB (default 12) free, what the cargo target directory holds
# that a build can make again goes first — incremental state, then the whole debug build (a cold
# build is slower; a failed one is not a test run).
mkdir -p "$CARGO_TARGET_DIR"
min_free="${KMIRROR_MIN_FREE_GIB:-12}"
step "disk: $(free_gib "$CARGO_TARGET_DIR") GiB free for $CARGO_TARGET_DIR, $(free_gib /tmp) GiB for /tmp"
if (($(free_gib "$CARGO_TARGET_DIR") < min_free)); then
  echo "make test: less than $min_free GiB free; removing the target directory's incremental state" >&2
  rm -rf "$CARGO_TARGET_DIR"/debug/incremental "$CARGO_TARGET_DIR"/release/incremental \
    "$CARGO_TARGET_DIR"/clippy/debug/incremental
  if (($(free_gib "$CARGO_TARGET_DIR") < min_free)); then
    echo "make test: still less than $min_free GiB free; removing the debug build ($(du -sh "$CARGO_TARGET_DIR/debug" 2>/dev/null | cut -f1))" >&2
    rm -rf "$CARGO_TARGET_DIR"/debug
  fi
  step "disk: $(free_gib "$CARGO_TARGET_DIR") GiB free now"
fi
# A clean clone builds once: incremental state only costs disk there.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

# rdkafka-sys compiles librdkafka (C) with CMake.
for tool in cargo cc cmake make; do
  command -v "$tool" >/dev/null || { echo "make test: $tool is missing (see README: Quick start)" >&2; exit 1; }
done

# prepare NAME NICE CMD...: CMD in the background, in its own process group, at nice NICE; its
# output is kept for `prepared NAME`.
#
# A job in its own session is its own scheduling group where the kernel groups by session
# (autogroup, /proc/sys/kernel/sched_autogroup_enabled): there a process's nice value weighs only
# against its own group, and each group gets an equal share of the CPU — five background jobs
# left the build a sixth of the cores, whatever their nice. So the job sets its group's nice
# too (/proc/self/autogroup, from inside the new session), then runs at that nice.
prepare() {
  local name="$1" niceness="$2"
  shift 2
  setsid bash -c 'echo "$1" >/proc/self/autogroup 2>/dev/null; n="$1"; shift; exec nice -n "$n" "$@"' \
    _ "$niceness" "$@" >"$prep/$name.log" 2>&1 </dev/null &
  prep_pid[$name]=$!
  prep_t0[$name]=$SECONDS
}
# prepared NAME: waits for it and prints what it said (and how long it ran); fails the run if it
# failed.
prepared() {
  local name="$1" rc=0
  wait "${prep_pid[$name]}" || rc=$?
  unset "prep_pid[$name]"
  cat "$prep/$name.log"
  printf '[%s: done %ss after it started, status %s]\n' "$name" "$((SECONDS - prep_t0[$name]))" "$rc"
  if ((rc != 0)); then
    echo "make test: $name failed (status $rc, output above)" >&2
    exit 1
  fi
}

step "prepare in the background: the bed's downloads and builds, Go and cargo tools, cargo-deny"
prepare bed 10 e2e/testbed.sh provision --compat
prepare nextest 10 e2e/bed/cargo-tools.sh cargo-nextest
# promtool (alert rule tests) and the Argo CD health runner, built from their Go modules once
# and cached under ~/.cache/kmirror; the two suites that use them run last and wait for them.
prepare go-tools 19 e2e/bed/go-tools.sh all
prepare deny 19 bash -c 'e2e/deny.sh && deploy/sbom.py "$CARGO_TARGET_DIR/sbom.cdx.json" --check'
# Warnings are errors; the run fails at the end if clippy does.
prepare clippy 19 env CARGO_TARGET_DIR="$CARGO_TARGET_DIR/clippy" \
  cargo clippy --workspace --all-targets -- -D warnings

step "lint: formatting (clippy runs in the background)"
cargo fmt --all -- --check

step "build"
# One build for everything: the tests' helpers and the bed's node agent build the same way, so
# their builds find it done (other package selections would compile shared crates again). The
# examples too, which nextest's own build would otherwise compile before the tests.
export KMIRROR_NODE_BUILD="--workspace --bins --tests"
cargo build $KMIRROR_NODE_BUILD --examples

# nextest runs no doc tests.
step "doc tests"
cargo test --doc --workspace

step "test bed up"
prepared bed
e2e/testbed.sh up --compat --brokers 3

step "tests ($(free_gib "$CARGO_TARGET_DIR") GiB free for the build, $(free_gib /tmp) GiB for the bed)"
prepared nextest
for name in "${!prep_pid[@]}"; do
  renice -n 19 -g "${prep_pid[$name]}" >/dev/null 2>&1 || true
  echo 19 >"/proc/${prep_pid[$name]}/autogroup" 2>/dev/null || true
done
# Every test binary is built: the tests' own build helper (kmirror_e2e::fetcher::binary) need
# not ask cargo again, once per test process.
export KMIRROR_E2E_BUILT=1
threads=()
if [ -n "${KMIRROR_TEST_THREADS:-}" ]; then threads=(--test-threads "$KMIRROR_TEST_THREADS"); fi
junit="$(pwd)/target/nextest"
status=0
# Every test with the default engine (batch).
e2e/nextest.sh run --workspace --no-fail-fast "${threads[@]}" || status=1
e2e/slowest.py "$junit/default/junit.xml" 10 || true

# The record engine again where the engines behave differently (the record profile's filter,
# docs/testing.md): each fetcher these tests start inherits KMIRROR_ENGINE.
step "tests with the record engine"
KMIRROR_ENGINE=record e2e/nextest.sh run --profile record --workspace --no-fail-fast \
  "${threads[@]}" || status=1
e2e/slowest.py --count "$junit/default/junit.xml" "$junit/record/junit.xml" || true

step "clippy, test tools, cargo-deny, SBOM"
prepared clippy
prepared go-tools
prepared deny
exit "$status"
