#!/usr/bin/env bash
# Refreshes the RustSec advisory snapshot that `make deny` checks against when GitHub cannot be
# reached (`make advisory-db`): packs `crates/` and the licence of an advisory-db checkout into
# deny/advisory-db.tar.xz and records its commit and date in deny/advisory-db.txt. Commit both.
#
# Usage: deny/update-advisory-db.sh [GIT_URL_OR_PATH]   (default https://github.com/rustsec/advisory-db)
# The database is CC0 (its LICENSE.txt travels inside the archive).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="${1:-https://github.com/rustsec/advisory-db}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q --depth 1 "$src" "$work/db"
commit="$(git -C "$work/db" rev-parse HEAD)"
date="$(git -C "$work/db" show -s --format=%cI HEAD)"
count="$(find "$work/db/crates" -name 'RUSTSEC-*.md' | wc -l)"
# Reproducible archive: sorted names, fixed owner and times.
tar -C "$work/db" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$date" \
  -cf - crates LICENSE.txt LICENSES | xz -9 >"$here/advisory-db.tar.xz"
cat >"$here/advisory-db.txt" <<TXT
commit $commit
date $date
advisories $count
source https://github.com/rustsec/advisory-db
TXT
echo "advisory snapshot: $count advisories, commit $commit of $date -> deny/advisory-db.tar.xz"
