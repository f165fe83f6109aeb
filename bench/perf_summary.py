#!/usr/bin/env python3
"""Aggregates `perf record` files of several fetcher processes into one flat profile.

    BENCH_FETCHER_WRAP='perf record -e cpu-clock -F 999 -g -o {logdir}/{uid}-{i}.perf --' \\
        bench/run.sh fetcher
    bench/perf_summary.py /tmp/kmirror-bench/<stamp>/logs/*.perf

Prints the share of samples per (thread kind, symbol) and per thread kind, summed over all files
(thread names have digits folded, e.g. rdk:broker# for every librdkafka broker thread).
"""

import re
import subprocess
import sys
from collections import Counter


def samples(path):
    out = subprocess.run(
        ["perf", "report", "-i", path, "--stdio", "--no-children", "-n", "-g", "none",
         "--sort", "comm,dso,sym", "--percent-limit", "0"],
        capture_output=True, text=True, check=True).stdout
    rows = Counter()
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+(\S+)\s+\[[.k]\]\s+(.*?)\s*$", line)
        if m:
            n, comm, dso, sym = int(m.group(1)), m.group(2), m.group(3), m.group(4)
            rows[(re.sub(r"\d+", "#", comm), dso, sym)] += n
    return rows


def main(paths):
    total = Counter()
    for p in paths:
        total.update(samples(p))
    n = sum(total.values())
    if not n:
        sys.exit("no samples")
    by_thread = Counter()
    by_dso = Counter()
    for (comm, dso, _), v in total.items():
        by_thread[comm] += v
        by_dso[dso] += v
    print(f"{n} samples from {len(paths)} file(s)\n")
    print("by thread:")
    for k, v in by_thread.most_common(8):
        print(f"  {100 * v / n:5.1f}%  {k}")
    print("\nby object:")
    for k, v in by_dso.most_common(6):
        print(f"  {100 * v / n:5.1f}%  {k}")
    print("\ntop symbols:")
    for (comm, dso, sym), v in total.most_common(30):
        print(f"  {100 * v / n:5.1f}%  {comm:16} {dso:18} {sym[:80]}")


if __name__ == "__main__":
    main(sys.argv[1:])
