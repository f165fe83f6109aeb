#!/usr/bin/env bash
# Test tools built from their Go modules and cached, keyed by version (like the bed's Kubernetes
# binaries). Prints the path of the tool's binary on stdout, building it first when the cache
# does not hold it; messages go to stderr.
#
#   e2e/bed/go-tools.sh promtool        promtool of github.com/prometheus/prometheus (PROMTOOL_MODULE_VERSION)
#   e2e/bed/go-tools.sh argocd-health   e2e/bed/argocd-health: runs Argo CD health Lua with gopher-lua
#                                       (GOPHER_LUA_VERSION), the library and setup Argo CD uses
#   e2e/bed/go-tools.sh toxiproxy       toxiproxy-server of github.com/Shopify/toxiproxy/v2
#                                       (TOXIPROXY_VERSION; toxiproxy-cli beside it), the bed's
#                                       network fault proxy (e2e/bed/net.sh)
#   e2e/bed/go-tools.sh all             all three, one path per line
#
# Binaries: $KMIRROR_CACHE (~/.cache/kmirror)/promtool/<version>/promtool and
# .../argocd-health/<version>-<hash of the source>/argocd-health,
# .../toxiproxy/<version>/{toxiproxy-server,toxiproxy-cli}. A marker file says a build
# finished; a lock keeps two builds of one version apart. The Go module and build caches are the
# bed's ($KMIRROR_CACHE/go/{mod,build}). A fresh machine needs only Go and the module proxy.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KM_CACHE="${KMIRROR_CACHE:-$HOME/.cache/kmirror}"

# Prometheus publishes its Go module as v0.<major*100+minor>.<patch>: v0.316.0 is Prometheus
# 3.16.0 (the version promtool reports).
PROMTOOL_MODULE_VERSION="${KMIRROR_PROMTOOL_VERSION:-v0.316.0}"
# The gopher-lua release Argo CD builds with.
GOPHER_LUA_VERSION="${KMIRROR_GOPHER_LUA_VERSION:-v1.1.1}"
# Toxiproxy, the TCP fault proxy of the bed's network faults.
TOXIPROXY_VERSION="${KMIRROR_TOXIPROXY_VERSION:-v2.5.0}"

log() { printf '[go-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[go-tools] ERROR: %s\n' "$*" >&2; exit 1; }

# Caches under $KM_CACHE, no cgo, never a toolchain download (as in e2e/bed/k8s.sh).
_go() {
  env GOMODCACHE="$KM_CACHE/go/mod" GOCACHE="$KM_CACHE/go/build" GOTOOLCHAIN=local \
    CGO_ENABLED=0 GOFLAGS="-modcacherw -buildvcs=false" GOWORK=off go "$@"
}

_complete() { [ -f "$1/.complete" ] && [ "$(cat "$1/.complete")" = "$2" ]; }

# _cached DIR MARKER BUILD_FUNCTION: runs BUILD_FUNCTION DIR unless DIR/.complete holds MARKER;
# one build per DIR at a time. Build functions chain their steps with && (set -e does not apply
# inside a tested subshell).
_cached() {
  local dir="$1" marker="$2" build="$3" lock start
  _complete "$dir" "$marker" && return 0
  command -v go >/dev/null || die "go is needed to build $marker (see README: Quick start)"
  mkdir -p "$dir"
  exec {lock}>"$dir/.lock"
  if ! flock -n "$lock"; then
    log "another build of $marker is running; waiting for it"
    flock "$lock"
  fi
  if ! _complete "$dir" "$marker"; then
    start=$SECONDS
    log "building $marker into $dir (log: $dir/build.log)"
    if ! ("$build" "$dir") >"$dir/build.log" 2>&1; then
      tail -n 30 "$dir/build.log" >&2
      die "building $marker failed (log: $dir/build.log)"
    fi
    printf '%s\n' "$marker" >"$dir/.complete"
    log "built $marker in $((SECONDS - start)) s"
  fi
  exec {lock}>&-
}

# promtool from its module, in a wrapper module of its own. `remove_all_sd` leaves out the
# service-discovery plugins (cloud SDKs) that rule checks and rule unit tests never use.
_build_promtool() {
  local dir="$1" minor ld
  minor="${PROMTOOL_MODULE_VERSION#v0.}"
  ld="-s -w -X github.com/prometheus/common/version.Version=$((${minor%%.*} / 100)).$((${minor%%.*} % 100)).${minor#*.}"
  rm -rf "$dir/src" && mkdir -p "$dir/src" && cd "$dir/src" &&
    _go mod init kmirror.local/testbed/promtool &&
    _go get -tags remove_all_sd -tool \
      "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_MODULE_VERSION" &&
    _go build -tags remove_all_sd -trimpath -gcflags=all=-dwarf=false -ldflags "$ld" \
      -o "$dir/promtool.new" github.com/prometheus/prometheus/cmd/promtool &&
    mv "$dir/promtool.new" "$dir/promtool"
}

_build_argocd_health() {
  local dir="$1"
  rm -rf "$dir/src" && mkdir -p "$dir/src" && cd "$dir/src" &&
    cp "$HERE/argocd-health/main.go" . &&
    _go mod init kmirror.local/testbed/argocd-health &&
    _go get "github.com/yuin/gopher-lua@$GOPHER_LUA_VERSION" &&
    _go build -trimpath -o "$dir/argocd-health.new" . &&
    mv "$dir/argocd-health.new" "$dir/argocd-health"
}

# toxiproxy's server and CLI from its module (as `go install` would), in a wrapper module.
_build_toxiproxy() {
  local dir="$1" ld="-s -w -X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}"
  rm -rf "$dir/src" && mkdir -p "$dir/src" && cd "$dir/src" &&
    _go mod init kmirror.local/testbed/toxiproxy &&
    _go get -tool "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
      "github.com/Shopify/toxiproxy/v2/cmd/cli@$TOXIPROXY_VERSION" &&
    _go build -trimpath -ldflags "$ld" -o "$dir/toxiproxy-server.new" github.com/Shopify/toxiproxy/v2/cmd/server &&
    _go build -trimpath -ldflags "$ld" -o "$dir/toxiproxy-cli.new" github.com/Shopify/toxiproxy/v2/cmd/cli &&
    mv "$dir/toxiproxy-cli.new" "$dir/toxiproxy-cli" && mv "$dir/toxiproxy-server.new" "$dir/toxiproxy-server"
}

tool_toxiproxy() {
  local dir="$KM_CACHE/toxiproxy/$TOXIPROXY_VERSION"
  _cached "$dir" "toxiproxy $TOXIPROXY_VERSION" _build_toxiproxy
  printf '%s\n' "$dir/toxiproxy-server"
}

tool_promtool() {
  local dir="$KM_CACHE/promtool/$PROMTOOL_MODULE_VERSION"
  _cached "$dir" "promtool $PROMTOOL_MODULE_VERSION" _build_promtool
  printf '%s\n' "$dir/promtool"
}

tool_argocd_health() {
  local hash dir
  hash="$(sha256sum "$HERE/argocd-health/main.go" | cut -c1-12)"
  dir="$KM_CACHE/argocd-health/$GOPHER_LUA_VERSION-$hash"
  _cached "$dir" "argocd-health gopher-lua $GOPHER_LUA_VERSION $hash" _build_argocd_health
  printf '%s\n' "$dir/argocd-health"
}

case "${1:-}" in
  promtool) tool_promtool ;;
  argocd-health) tool_argocd_health ;;
  toxiproxy) tool_toxiproxy ;;
  all) tool_promtool && tool_argocd_health && tool_toxiproxy ;;
  *) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
