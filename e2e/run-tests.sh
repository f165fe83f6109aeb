#!/usr/bin/env bash
# The test command (`make test`): lint, bring the test bed up (reusing a running one), run every
# test against it with cargo-nextest, and stop the bed again if this run started it.
#
# What a cold machine must download and build besides the workspace — Kafka jars, Kubernetes and
# helm, promtool and the Argo CD health runner, cargo-deny and cargo-nextest — starts at once in
# the background at a low CPU priority (nice 10), so it takes the cores lint and the cargo build
# leave idle and downloads while they compile; each part is skipped when its cached version
# matches. The tests: .config/nextest.toml; docs/testing.md explains the runner, its groups and
# the two engine passes.
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
declare -A prep_pid=()
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

# rdkafka-sys compiles librdkafka (C) with CMake.
for tool in cargo cc cmake make; do
  command -v "$tool" >/dev/null || { echo "make test: $tool is missing (see README: Quick start)" >&2; exit 1; }
done

# prepare NAME CMD...: CMD in the background (its own process group, nice 10), output kept for
# `prepared NAME`.
prepare() {
  local name="$1"
  shift
  setsid nice -n 10 "$@" >"$prep/$name.log" 2>&1 </dev/null &
  prep_pid[$name]=$!
}
# prepared NAME: waits for it; prints what it said, and fails the run if it failed.
prepared() {
  local name="$1" rc=0
  wait "${prep_pid[$name]}" || rc=$?
  unset "prep_pid[$name]"
  cat "$prep/$name.log"
  if ((rc != 0)); then
    echo "make test: preparing $name failed (status $rc, output above)" >&2
    exit 1
  fi
}

step "prepare (in the background: bed downloads and builds, Go and cargo tools)"
prepare bed e2e/testbed.sh provision --compat
# promtool (alert rule tests) and the Argo CD health runner, built from their Go modules once
# and cached under ~/.cache/kmirror; the tests that use them would build them too.
prepare go-tools e2e/bed/go-tools.sh all
prepare cargo-tools e2e/bed/cargo-tools.sh all

step "lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

step "build"
# One build for everything: the tests' helpers and the bed's node agent build the same way, so
# their builds find it done (other package selections would compile shared crates again).
export KMIRROR_NODE_BUILD="--workspace --bins --tests"
cargo build $KMIRROR_NODE_BUILD

step "cargo-deny, SBOM"
prepared cargo-tools
e2e/deny.sh
deploy/sbom.py "$CARGO_TARGET_DIR/sbom.cdx.json" --check

# nextest runs no doc tests.
step "doc tests"
cargo test --doc --workspace

step "test bed up"
prepared bed
e2e/testbed.sh up --compat --brokers 3

step "test tools"
prepared go-tools

# The default engine (batch) runs every test; every test binary is built already, so the
# tests' own build helper (kmirror_e2e::fetcher::binary) need not ask cargo again.
export KMIRROR_E2E_BUILT=1
threads=()
if [ -n "${KMIRROR_TEST_THREADS:-}" ]; then threads=(--test-threads "$KMIRROR_TEST_THREADS"); fi
status=0
step "tests"
e2e/nextest.sh run --workspace --no-fail-fast "${threads[@]}" || status=1
e2e/slowest.py "$(pwd)/target/nextest/default/junit.xml" 10 || true

# The record engine again where the engines behave differently (the record profile's filter,
# docs/testing.md): each fetcher these tests start inherits KMIRROR_ENGINE.
step "tests with the record engine"
KMIRROR_ENGINE=record e2e/nextest.sh run --profile record --workspace --no-fail-fast \
  "${threads[@]}" || status=1
e2e/slowest.py --count "$(pwd)/target/nextest/default/junit.xml" \
  "$(pwd)/target/nextest/record/junit.xml" || true
exit "$status"
