#!/usr/bin/env bash
# cargo-deny over the workspace (deny.toml): licences, bans (duplicate versions listed), sources.
# Installs the pinned cargo-deny into ~/.cache/kmirror/tools/cargo-deny-<version> on first use.
# RustSec advisories need the advisory database from GitHub: checked when it can be fetched
# otherwise said so — not silently skipped.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=0.20.2
tools="${KMIRROR_CACHE:-$HOME/.cache/kmirror}/tools/cargo-deny-$version"
deny="$tools/bin/cargo-deny"
if [ ! -x "$deny" ]; then
  echo "[deny] installing cargo-deny $version into $tools (once)"
  CARGO_TARGET_DIR="$tools/target" cargo install cargo-deny --version "$version" --locked \
    --root "$tools" --quiet
  rm -rf "$tools/target"
fi
cd "$root"
out="$(mktemp)"
if ! "$deny" --log-level warn check licenses bans sources >"$out" 2>&1; then
  cat "$out"
  rm -f "$out"
  echo "[deny] licences, bans or sources: FAILED (deny.toml)" >&2
  exit 1
fi
dups="$(sed -n "s/^warning\[duplicate\]: found \([0-9]*\) duplicate entries for crate '\(.*\)'/\2 (\1)/p" "$out" | paste -sd ' ' -)"
rm -f "$out"
echo "[deny] licences, bans and sources: ok; crates in more than one version: ${dups:-none}"
if timeout 60 git ls-remote https://github.com/rustsec/advisory-db HEAD >/dev/null 2>&1; then
  "$deny" --log-level error check advisories
  echo "[deny] advisories: ok"
else
  echo "[deny] advisories: NOT checked — the RustSec advisory database (github.com/rustsec/advisory-db) cannot be fetched from this machine"
fi
