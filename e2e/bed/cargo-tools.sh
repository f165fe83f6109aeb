#!/usr/bin/env bash
# Cargo tools of `make test`, installed from crates.io at pinned versions and cached, keyed by
# version (like the bed's Go tools in e2e/bed/go-tools.sh). Prints the path of the tool's binary
# on stdout, installing it first when the cache does not hold it; messages go to stderr.
#
#   e2e/bed/cargo-tools.sh cargo-deny      cargo-deny $CARGO_DENY_VERSION (e2e/deny.sh)
#   e2e/bed/cargo-tools.sh cargo-nextest   cargo-nextest $CARGO_NEXTEST_VERSION (e2e/nextest.sh)
#   e2e/bed/cargo-tools.sh all             both, one path per line
#
# Binaries: $KMIRROR_CACHE (~/.cache/kmirror)/tools/<tool>-<version>/bin/<tool>. A lock keeps two
# installs of one version apart; the binary appears only once `cargo install` finished. The tools
# build at opt-level 1, without link-time optimisation and with parallel code generation: they
# start processes and read files, their own speed does not matter, and a cold install on 2 cores
# takes a fraction of the release profile's time.
set -euo pipefail

KM_CACHE="${KMIRROR_CACHE:-$HOME/.cache/kmirror}"
CARGO_DENY_VERSION=0.20.2
CARGO_NEXTEST_VERSION=0.9.151

log() { printf '[cargo-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# _install TOOL VERSION [cargo install options]: TOOL's binary path, installed once.
_install() {
  local tool="$1" version="$2" dir lock start
  shift 2
  dir="$KM_CACHE/tools/$tool-$version"
  if [ ! -x "$dir/bin/$tool" ]; then
    mkdir -p "$dir"
    exec {lock}>"$dir/.lock"
    if ! flock -n "$lock"; then
      log "another install of $tool $version is running; waiting for it"
      flock "$lock"
    fi
    if [ ! -x "$dir/bin/$tool" ]; then
      start=$SECONDS
      log "installing $tool $version into $dir (once; log: $dir/install.log)"
      if ! CARGO_TARGET_DIR="$dir/target" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=false \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=false \
        CARGO_PROFILE_RELEASE_INCREMENTAL=false \
        cargo install "$tool" --version "$version" --locked --root "$dir" "$@" \
        >"$dir/install.log" 2>&1; then
        tail -n 30 "$dir/install.log" >&2
        log "installing $tool $version failed (log: $dir/install.log)"
        exit 1
      fi
      rm -rf "$dir/target"
      log "installed $tool $version in $((SECONDS - start)) s"
    fi
    exec {lock}>&-
  fi
  printf '%s\n' "$dir/bin/$tool"
}

# Without nextest's self-update (an HTTP client and archive readers the runner never uses here).
tool_nextest() {
  _install cargo-nextest "$CARGO_NEXTEST_VERSION" --no-default-features --features default-no-update
}

tool_deny() { _install cargo-deny "$CARGO_DENY_VERSION"; }

case "${1:-}" in
  cargo-deny) tool_deny ;;
  cargo-nextest) tool_nextest ;;
  all) tool_deny && tool_nextest ;;
  *) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
