# Node agent of the test bed: e2e/node-agent, a stand-in for a kubelet that binds pods to one
# local Node and runs their containers as processes. Sourced after e2e/bed/common.sh and
# e2e/bed/k8s.sh, not executed. See docs/testbed-node-agent.md.
#
# Layout
#   binary     cargo build -p kmirror-node-agent into ${CARGO_TARGET_DIR:-$KM_CACHE/target}/debug,
#              run from a copy in $KM_RUN/bin (a later build does not pull it from under the agent)
#   state      $KM_RUN/node   per-pod state: volumes, private /tmp, process records
#   pod logs   $KM_RUN/pods/<namespace>_<pod>/<container>.log (previous instance: .log.1)
#   agent log  $KM_LOGS/node-agent.log
#
# Container commands are looked up in the directories of the pod's namespace annotation
# kmirror.io/test-bin-path (colon-separated; the e2e tests set it to their own target dir), then
# ${KMIRROR_NODE_BIN_PATH} (colon-separated, optional), then the cargo target's debug and release
# directories, then PATH.
#
# Functions: node_up, node_restart, node_env, node_status, node_down, node_list_pod_logs,
# node_pod_log NAME.

NODE_NAME="${KMIRROR_NODE_NAME:-kmirror-node}"
NODE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NODE_TARGET="${CARGO_TARGET_DIR:-$KM_CACHE/target}"
NODE_BIN="$NODE_TARGET/debug/kmirror-node-agent"
# The agent runs from a copy: a later cargo build replaces $NODE_BIN, and a running program whose
# file was replaced can no longer be run again by path (/proc/PID/exe says "(deleted)").
NODE_RUN_BIN="$KM_RUN/bin/kmirror-node-agent"
NODE_STATE="$KM_RUN/node"
NODE_PODS="$KM_RUN/pods"

_node_kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$K8S_KUBECONFIG" --request-timeout=5s "$@"; }

_node_ready() {
  [ "$(_node_kubectl get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

_node_build() {
  local build_log="$KM_LOGS/node-agent-build.log"
  # KMIRROR_NODE_BUILD (make test sets it to its own build, "--workspace --bins --tests", so the
  # agent comes out of that build instead of a second one with other dependency features).
  local args=(${KMIRROR_NODE_BUILD:--p kmirror-node-agent})
  log "building the node agent (cargo build ${args[*]})"
  if ! (cd "$NODE_REPO" && CARGO_TARGET_DIR="$NODE_TARGET" cargo build "${args[@]}") \
    >"$build_log" 2>&1; then
    tail -n 30 "$build_log" >&2
    die "building the node agent failed (full output: $build_log)"
  fi
}

# node_up [--built]: build (unless --built) and start the agent unless it runs, then wait until
# the Node is Ready.
node_up() {
  if ! is_running node-agent; then
    command -v cargo >/dev/null || die "cargo is needed to build the node agent"
    if [ "${1:-}" != --built ]; then _node_build; fi
    local -a bins=() extra=()
    local dir
    if ((${#NODE_KEEP_BIN_DIRS[@]} > 0)); then
      for dir in "${NODE_KEEP_BIN_DIRS[@]}"; do bins+=(--bin-path "$dir"); done
    else
      IFS=: read -r -a extra <<<"${KMIRROR_NODE_BIN_PATH:-}"
      for dir in "${extra[@]}"; do
        if [ -n "$dir" ]; then bins+=(--bin-path "$dir"); fi
      done
      bins+=(--bin-path "$NODE_TARGET/debug" --bin-path "$NODE_TARGET/release")
    fi
    mkdir -p "${NODE_RUN_BIN%/*}"
    cp -f "$NODE_BIN" "$NODE_RUN_BIN.new" && mv -f "$NODE_RUN_BIN.new" "$NODE_RUN_BIN" ||
      die "cannot copy the node agent to $NODE_RUN_BIN"
    start_bg node-agent "$NODE_RUN_BIN" run --kubeconfig "$K8S_KUBECONFIG" --node-name "$NODE_NAME" \
      --state-dir "$NODE_STATE" --logs-dir "$NODE_PODS" "${bins[@]}"
  fi
  wait_for "node $NODE_NAME to be Ready" 60 node-agent _node_ready ||
    die "the node agent did not register a Ready node"
  log "node agent up: node $NODE_NAME, pod logs in $NODE_PODS"
}

# The --bin-path directories node_up passes instead of the default ones (set by node_restart).
NODE_KEEP_BIN_DIRS=()

# node_restart: rebuild the agent from this checkout and restart it without stopping any pod.
# SIGKILL leaves the pod processes running; the new agent re-adopts them. The running agent's
# --bin-path directories are kept (so namespaces without kmirror.io/test-bin-path still run the
# binaries they ran before), unless KMIRROR_NODE_BIN_PATH is set.
node_restart() {
  command -v cargo >/dev/null || die "cargo is needed to build the node agent"
  _node_build
  local pid i
  local -a args=()
  if is_running node-agent; then
    pid="$(cat "$KM_PIDS/node-agent.pid")"
    if [ -z "${KMIRROR_NODE_BIN_PATH:-}" ]; then
      mapfile -d '' args <"/proc/$pid/cmdline"
      for ((i = 0; i + 1 < ${#args[@]}; i++)); do
        if [ "${args[i]}" = --bin-path ]; then NODE_KEEP_BIN_DIRS+=("${args[i + 1]}"); fi
      done
    fi
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$KM_PIDS/node-agent.pid"
    log "node agent (pid $pid) killed; its pods keep running and are re-adopted"
  fi
  node_up --built
  log "node agent restarted from $NODE_BIN (pid $(cat "$KM_PIDS/node-agent.pid")); bin path: $(
    tr '\0' '\n' <"/proc/$(cat "$KM_PIDS/node-agent.pid")/cmdline" | sed -n '/^--bin-path$/{n;p}' | paste -sd:)"
}

# node_env: export lines for tests and tools (eval-able; nothing else on stdout).
node_env() {
  cat <<ENV
export KMIRROR_NODE_NAME=$NODE_NAME
export KMIRROR_PODS_DIR=$NODE_PODS
export KMIRROR_NODE_STATE_DIR=$NODE_STATE
export KMIRROR_NODE_AGENT_BIN=$NODE_RUN_BIN
ENV
}

node_status() {
  if is_running node-agent; then
    local ready=NotReady
    if _node_ready; then ready=Ready; fi
    echo "node-agent: running (pid $(cat "$KM_PIDS/node-agent.pid"); node $NODE_NAME $ready)"
  else
    echo "node-agent: stopped"
  fi
}

# node_down: the agent stops every pod process on SIGTERM (grace capped at 15 s per pod); what
# a killed agent may have left behind is stopped from its state dir. Pod logs are removed too.
node_down() {
  stop_pid node-agent 60
  if [ -d "$NODE_STATE" ]; then
    local agent="$NODE_RUN_BIN"
    [ -x "$agent" ] || agent="$NODE_BIN"
    if [ -x "$agent" ]; then
      "$agent" cleanup --state-dir "$NODE_STATE" >>"$KM_LOGS/node-agent.log" 2>&1 ||
        log "node agent cleanup failed; see $KM_LOGS/node-agent.log"
    fi
    rm -rf "$NODE_STATE"
  fi
  rm -rf "$NODE_PODS"
  log "node agent stopped"
}

node_list_pod_logs() {
  local dir f
  [ -d "$NODE_PODS" ] || return 0
  echo "pod logs in $NODE_PODS (print one with: e2e/testbed.sh logs POD):"
  for dir in "$NODE_PODS"/*/; do
    [ -d "$dir" ] || continue
    printf '  %s:' "$(basename "$dir" | sed 's#_#/#')"
    for f in "$dir"*.log; do
      [ -f "$f" ] && printf ' %s' "$(basename "$f" .log)"
    done
    echo
  done
}

# node_pod_log NAME: every container log (previous instance first) of the pods named NAME in
# any namespace (or NAMESPACE/NAME); 1 when there is none.
node_pod_log() {
  local name="$1" dir f found=1
  case "$name" in */*) name="${name/\//_}" ;; *) name="*_$name" ;; esac
  for dir in "$NODE_PODS"/$name; do
    [ -d "$dir" ] || continue
    for f in "$dir"/*.log; do
      [ -f "$f" ] || continue
      if [ -f "$f.1" ]; then
        printf '==> %s %s (previous instance) <==\n' "$(basename "$dir" | sed 's#_#/#')" "$(basename "$f" .log)"
        cat "$f.1"
      fi
      printf '==> %s %s <==\n' "$(basename "$dir" | sed 's#_#/#')" "$(basename "$f" .log)"
      cat "$f"
      found=0
    done
  done
  return "$found"
}
