#!/usr/bin/env bash
# The test command (`make test`): lint, bring the test bed up (reusing a running one), run all
# tests against it, and stop the bed again if this run started it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kmirror/target}"

t0=$SECONDS
step() { printf '\n=== %s (%ss)\n' "$*" "$((SECONDS - t0))"; }

started=0
if ! e2e/testbed.sh status 2>/dev/null | grep -q 'kafka-source: running'; then
  started=1
fi
cleanup() {
  local rc=$?
  if ((started)) && [ "${KMIRROR_KEEP_TESTBED:-0}" != 1 ]; then
    step "stopping the test bed"
    e2e/testbed.sh down || true
  fi
  printf '\n=== make test finished with status %s in %ss\n' "$rc" "$((SECONDS - t0))"
}
trap cleanup EXIT

# rdkafka-sys compiles librdkafka (C) with CMake.
for tool in cargo cc cmake make; do
  command -v "$tool" >/dev/null || { echo "make test: $tool is missing (see README: Quick start)" >&2; exit 1; }
done

step "lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
e2e/deny.sh
deploy/sbom.py "${CARGO_TARGET_DIR:-$HOME/.cache/kmirror/target}/sbom.cdx.json" --check

step "build"
# One build for everything: the tests' helpers and the bed's node agent build the same way, so
# their builds find it done (other package selections would compile shared crates again).
export KMIRROR_NODE_BUILD="--workspace --bins --tests"
cargo build $KMIRROR_NODE_BUILD

step "test bed up"
e2e/testbed.sh up --compat --brokers 3

# promtool (alert rule tests) and the Argo CD health runner, built from their Go modules once
# and cached under ~/.cache/kmirror; the tests that use them would build them too.
step "test tools"
e2e/bed/go-tools.sh all

step "tests"
cargo test --workspace --no-fail-fast -- --test-threads="${KMIRROR_TEST_THREADS:-4}"

# Every fetcher suite again with the batch engine (record batches as bytes): each fetcher these
# tests start inherits KMIRROR_ENGINE.
step "fetcher suites with the batch engine"
KMIRROR_ENGINE=batch cargo test -p kmirror-e2e --no-fail-fast \
  --test fetcher_mirroring --test fetcher_refusals --test fetcher_crashes \
  --test fetcher_faults --test fetcher_broker_restarts --test fetcher_topics \
  -- --test-threads="${KMIRROR_TEST_THREADS:-4}"
