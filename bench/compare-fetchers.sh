#!/usr/bin/env bash
# Two fetcher builds on the same bed, interleaved: `bench/compare-fetchers.sh BASE NEW [PAIRS]`
# runs `bench.py fetcher --runs 1` PAIRS times (default 8) for each binary, alternating BASE and
# NEW so that drift of a noisy machine hits both alike, then prints each side's median MB/s and
# CPU s/GB and peak RSS, and the ratios NEW/BASE. BASE and NEW are fetcher binaries (e.g. a release build of
# an older commit in its own worktree). Needs the Kafka half of the bed (bench/run.sh starts it).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 BASE_FETCHER NEW_FETCHER [PAIRS]" >&2; exit 2; }
base="$1" new="$2" pairs="${3:-8}"
for b in "$base" "$new"; do [ -x "$b" ] || { echo "$b: not an executable" >&2; exit 2; }; done
eval "$("$REPO/e2e/testbed.sh" env)"
results="$(mktemp -d /tmp/kmirror-compare.XXXXXX)"
for i in $(seq "$pairs"); do
  for side in base new; do
    bin="$base"; [ "$side" = new ] && bin="$new"
    echo "pair $i/$pairs: $side"
    python3 -B "$HERE/bench.py" fetcher --runs 1 --fetcher-bin "$bin" --results "$results/$side" >/dev/null
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
from pathlib import Path
root = Path(sys.argv[1])
def runs(side):
    out = []
    for f in sorted((root / side).glob("*.json")):
        out += [r for r in json.loads(f.read_text())["runs"]
                if r.get("phase") == "catchup" and "error" not in r]
    return out
sides = {s: runs(s) for s in ("base", "new")}
med = {s: (statistics.median(r["mb_s"] for r in v), statistics.median(r["cpu_s_per_gb_copy"] for r in v),
           statistics.median(r["peak_rss_mb"] for r in v))
       for s, v in sides.items()}
for s, (mb, cpu, rss) in med.items():
    print(f"{s:5} runs {len(sides[s]):2}  median MB/s {mb:6.1f}  median CPU s/GB (copy) {cpu:5.2f}"
          f"  median peak RSS MB (sum) {rss:6.0f}")
print(f"new/base: MB/s x{med['new'][0] / med['base'][0]:.3f}, CPU s/GB x{med['new'][1] / med['base'][1]:.3f}, "
      f"peak RSS x{med['new'][2] / med['base'][2]:.3f}")
PY
echo "raw runs: $results"
