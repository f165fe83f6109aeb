#!/usr/bin/env bash
# The kmirror benchmark: kmirror fetchers vs MirrorMaker 2 vs the test bed's limit.
#
#   bench/run.sh [full]        make bench          (BENCH_BYTES=200MB BENCH_RUNS=1 for a quick try)
#   bench/run.sh fetcher       make bench-fetcher  (the fetcher alone, ~1 GB)
#
# Brings the Kafka half of the test bed up when it is not running (and leaves it running), builds
# the release fetcher, then runs bench/bench.py with the bed's environment. Options: bench.py
# --help; every option also has a BENCH_* environment variable. See bench/README.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kmirror/target}"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if port_open 19092 && port_open 29092; then
  echo "bench: using the running test bed"
else
  echo "bench: starting the Kafka test bed (e2e/testbed.sh up --kafka-only); it stays up afterwards"
  "$REPO/e2e/testbed.sh" up --kafka-only
fi
eval "$("$REPO/e2e/testbed.sh" env)"

echo "bench: building the release fetcher"
(cd "$REPO" && cargo build --release -p kmirror-fetcher)
# A group-offset sync command, once some crate provides one, is used for the failover phase.
if (cd "$REPO" && cargo metadata --no-deps --format-version 1 2>/dev/null) |
  python3 -c 'import json,sys; sys.exit(0 if any(t["name"]=="kmirror-sync-groups" for p in json.load(sys.stdin)["packages"] for t in p["targets"]) else 1)'; then
  echo "bench: building kmirror-sync-groups"
  (cd "$REPO" && cargo build --release --bin kmirror-sync-groups)
fi

exec python3 -B "$HERE/bench.py" "$@"
