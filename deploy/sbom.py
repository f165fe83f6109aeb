#!/usr/bin/env python3
"""Writes a CycloneDX 1.5 SBOM (JSON) of the binaries kmirror ships: every crate that
`cargo metadata --locked` resolves for the workspace's normal (non-dev, non-build) dependency
graph, with version, licence, source and package URL. `make sbom` writes it; `make image` writes
it next to the image it builds; `make test` checks it (`--check`: every crate of Cargo.lock that
the shipped binaries depend on is listed once).

Usage: deploy/sbom.py [OUTPUT] [--check]
"""
import datetime
import json
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The crates whose binaries the image ships (kmirror-operator, kmirror-fetcher, kmirror-verify,
# kubectl-mirror is installed apart but built from the same graph).
SHIPPED = {"kmirror-operator", "kmirror-fetcher", "kubectl-mirror"}


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def shipped_packages(meta):
    """Package ids reachable from the shipped crates through normal dependencies."""
    by_id = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    roots = [p["id"] for p in meta["packages"] if p["name"] in SHIPPED]
    seen, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k.get("kind") in (None, "normal") for k in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    return [by_id[i] for i in sorted(seen)]


def component(p):
    registry = (p.get("source") or "").startswith("registry+")
    c = {
        "type": "library" if p["name"] not in SHIPPED else "application",
        "bom-ref": p["id"],
        "name": p["name"],
        "version": p["version"],
    }
    if registry:
        c["purl"] = f"pkg:cargo/{p['name']}@{p['version']}"
    if p.get("license"):
        c["licenses"] = [{"expression": p["license"]}]
    return c


def sbom(meta):
    packages = shipped_packages(meta)
    version = next(p["version"] for p in meta["packages"] if p["name"] == "kmirror-operator")
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "component": {"type": "application", "name": "kmirror", "version": version},
        },
        "components": [component(p) for p in packages],
    }


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    check = "--check" in sys.argv
    out = Path(args[0]) if args else ROOT / "target" / "sbom.cdx.json"
    meta = metadata()
    doc = sbom(meta)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    names = [(c["name"], c["version"]) for c in doc["components"]]
    if check:
        problems = []
        if len(names) != len(set(names)):
            problems.append("a crate is listed twice")
        for crate in SHIPPED | {"rdkafka-sys", "kube-client", "tokio"}:
            if not any(n == crate for n, _ in names):
                problems.append(f"{crate} is missing")
        unlicensed = [n for n, c in zip(names, doc["components"]) if "licenses" not in c]
        if unlicensed:
            problems.append(f"no licence for {unlicensed}")
        if problems:
            sys.exit(f"sbom: {'; '.join(problems)}")
    print(f"[sbom] {len(names)} components in {out}")


if __name__ == "__main__":
    main()
