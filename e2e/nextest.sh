#!/usr/bin/env bash
# The test runner of `make test`: the pinned cargo-nextest (e2e/bed/cargo-tools.sh installs it
# into ~/.cache/kmirror/tools on first use) run from the repository root with the arguments
# given. Configuration: .config/nextest.toml; how to run one suite or test: docs/testing.md.
#
#   e2e/nextest.sh run -E 'binary(fetcher_topics)'     one suite against the running bed
#   e2e/nextest.sh list                                every test and its group
#   e2e/nextest.sh show-config test-groups             which test is in which group
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kmirror/target}"
nextest="$("$root/e2e/bed/cargo-tools.sh" cargo-nextest)"
cd "$root"
exec "$nextest" nextest "$@"
