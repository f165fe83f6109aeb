#!/usr/bin/env bash
# cargo-deny over the workspace (deny.toml): licences, bans (duplicate versions listed), sources
# and RustSec advisories. The pinned cargo-deny comes from e2e/bed/cargo-tools.sh (installed into
# ~/.cache/kmirror/tools/cargo-deny-<version> on first use).
# Advisories: against the live database when github.com/rustsec/advisory-db can be fetched,
# otherwise against the snapshot committed in deny/advisory-db.tar.xz (its date is printed; refresh
# it with `make advisory-db`). The snapshot check proves it can fail: the same run with one
# made-up advisory against a crate of Cargo.lock must be refused.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deny="$("$root/e2e/bed/cargo-tools.sh" cargo-deny)"
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
# The directory cargo-deny derives from the default database URL (pinned cargo-deny version).
db_dir=advisory-db-3157b0e258782691
if timeout 60 git ls-remote https://github.com/rustsec/advisory-db HEAD >/dev/null 2>&1; then
  "$deny" --log-level error check advisories
  echo "[deny] advisories (live RustSec database): ok"
  exit 0
fi

# snapshot_db ROOT [EXTRA_ADVISORY]: the committed snapshot unpacked under ROOT/$db_dir as the
# git checkout cargo-deny expects (it reads HEAD's date), plus one more advisory file if given.
snapshot_db() {
  local db="$1/$db_dir"
  rm -rf "$1" && mkdir -p "$db"
  tar -C "$db" -xJf "$root/deny/advisory-db.tar.xz"
  if [ -n "${2:-}" ]; then
    mkdir -p "$db/crates/$3" && cp "$2" "$db/crates/$3/"
  fi
  git -C "$db" init -q
  git -C "$db" add -A
  GIT_AUTHOR_DATE="$snapshot_date" GIT_COMMITTER_DATE="$snapshot_date" \
    git -C "$db" -c user.name=kmirror -c user.email=kmirror@localhost commit -q -m snapshot
}

# check_against ROOT: cargo-deny's advisories check, offline, against the database under ROOT.
check_against() {
  local config
  config="$(mktemp)"
  awk -v db="$1" '{ print } /^\[advisories\]/ { print "db-path = \"" db "\"" }' deny.toml >"$config"
  "$deny" --offline --log-level error --config "$config" check advisories
  local rc=$?
  rm -f "$config"
  return $rc
}

snapshot_commit="$(awk '$1 == "commit" { print $2 }' deny/advisory-db.txt)"
snapshot_date="$(awk '$1 == "date" { print $2 }' deny/advisory-db.txt)"
cache="${KMIRROR_CACHE:-$HOME/.cache/kmirror}/advisory-db"
snapshot_db "$cache/$snapshot_commit"
if ! check_against "$cache/$snapshot_commit"; then
  echo "[deny] advisories: FAILED against the RustSec snapshot of $snapshot_date (deny/advisory-db.txt)" >&2
  exit 1
fi
# The check can fail: a made-up advisory against the workspace's serde_json (every version
# affected) must be refused.
canary="$(mktemp -d)"
cat >"$canary/RUSTSEC-2099-0001.md" <<'MD'
```toml
[advisory]
id = "RUSTSEC-2099-0001"
package = "serde_json"
date = "2099-01-01"
url = "https://example.invalid/kmirror-deny-canary"

[versions]
patched = []
```

# kmirror's canary advisory

Made up by e2e/deny.sh to show that the advisories check refuses an affected crate.
MD
snapshot_db "$canary/db" "$canary/RUSTSEC-2099-0001.md" serde_json
if canary_out="$(check_against "$canary/db" 2>&1)"; then
  rm -rf "$canary"
  echo "[deny] advisories: the check let a crate with a known advisory through (canary RUSTSEC-2099-0001) — it would not catch a real one" >&2
  exit 1
fi
rm -rf "$canary"
# ...refused for the advisory, not for some other reason.
if ! grep -q "RUSTSEC-2099-0001" <<<"$canary_out"; then
  printf '%s\n' "$canary_out" | tail -5 >&2
  echo "[deny] advisories: the canary run failed, but not on the canary advisory (above)" >&2
  exit 1
fi
echo "[deny] advisories: ok against the RustSec snapshot of $snapshot_date (commit ${snapshot_commit:0:12}; deny/advisory-db.txt; a live check needs github.com — refresh with make advisory-db); a made-up advisory is refused"
