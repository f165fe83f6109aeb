#!/usr/bin/env python3
"""What a nextest run took, from its JUnit reports (target/nextest/<profile>/junit.xml).

    e2e/slowest.py JUNIT [N]          the N (default 10) slowest tests, slowest first
    e2e/slowest.py --count JUNIT...   how many tests each report ran, passed and failed, and in all
"""

import sys
import xml.etree.ElementTree as ET


def cases(path):
    """(suite, test, seconds, outcome) of every test case in a JUnit report."""
    root = ET.parse(path).getroot()
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            if case.find("skipped") is not None:
                continue
            failed = case.find("failure") is not None or case.find("error") is not None
            yield (
                suite.get("name", "?"),
                case.get("name", "?"),
                float(case.get("time", "0") or 0),
                "FAIL" if failed else "pass",
            )


def slowest(path, n):
    ranked = sorted(cases(path), key=lambda c: c[2], reverse=True)[:n]
    print(f"\nthe {len(ranked)} slowest tests ({path}):")
    for suite, test, seconds, outcome in ranked:
        flag = "" if outcome == "pass" else f"  [{outcome}]"
        print(f"  {seconds:7.1f} s  {suite} {test}{flag}")


def count(paths):
    total = passed = 0
    print()
    for path in paths:
        found = list(cases(path))
        ok = sum(1 for c in found if c[3] == "pass")
        print(f"tests run: {len(found):4d} ({ok} passed, {len(found) - ok} failed)  {path}")
        total += len(found)
        passed += ok
    print(f"tests run in all: {total} ({passed} passed, {total - passed} failed)")


def main(argv):
    if len(argv) >= 2 and argv[0] == "--count":
        count(argv[1:])
    elif 1 <= len(argv) <= 2 and not argv[0].startswith("-"):
        slowest(argv[0], int(argv[1]) if len(argv) == 2 else 10)
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
