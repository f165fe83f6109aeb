#!/usr/bin/env bash
# The kmirror test bed: real Apache Kafka clusters and a real Kubernetes control plane on loopback.
#
#   e2e/testbed.sh up [--compat] [--kafka-only]   start everything (idempotent)
#   e2e/testbed.sh env                            shell exports for tests and tools: eval "$(e2e/testbed.sh env)"
#   e2e/testbed.sh status                         what runs, by recorded PID
#   e2e/testbed.sh logs [NAME|POD]                list logs, or print one (a component or a pod)
#   e2e/testbed.sh restart NAME                   restart one broker (kafka-source, kafka-destination, ...)
#                                                 or the node agent (node-agent: rebuilt, pods keep running)
#   e2e/testbed.sh stop NAME | start NAME         stop or start one broker, keeping its data
#   e2e/testbed.sh down                           stop what `up` started and remove its state
#
# Downloads and builds are cached under ~/.cache/kmirror (KMIRROR_CACHE), keyed by version;
# runtime state lives under /tmp/kmirror-testbed (KMIRROR_RUN_DIR). See docs/testbed.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bed/common.sh
. "$HERE/bed/common.sh"
# shellcheck source=bed/kafka.sh
. "$HERE/bed/kafka.sh"
HAVE_K8S=0
if [ -f "$HERE/bed/k8s.sh" ]; then
  # shellcheck source=bed/k8s.sh
  . "$HERE/bed/k8s.sh"
  HAVE_K8S=1
fi
if [ -f "$HERE/bed/node.sh" ]; then
  # shellcheck source=bed/node.sh
  . "$HERE/bed/node.sh"
fi

usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

cmd_up() {
  local compat=0 kafka_only=0 arg
  for arg in "$@"; do
    case "$arg" in
      --compat) compat=1 ;;
      --kafka-only) kafka_only=1 ;;
      *) die "unknown option for up: $arg" ;;
    esac
  done
  local t0=$SECONDS
  need java keytool mvn openssl python3 setsid
  if ((HAVE_K8S && !kafka_only)); then need go cargo; fi
  # Provision first (downloads, builds), then start: a cold cache shows up as one long step.
  kafka_provision
  if ((HAVE_K8S && !kafka_only)); then k8s_provision; fi
  kafka_up
  log "kafka source and destination are up ($((SECONDS - t0))s)"
  if ((compat)); then
    kafka_up_compat
    log "compatibility sources are up ($((SECONDS - t0))s)"
  fi
  if ((HAVE_K8S && !kafka_only)); then
    k8s_up
    log "kubernetes control plane is up ($((SECONDS - t0))s)"
    if declare -F node_up >/dev/null; then
      node_up
      log "node agent is up ($((SECONDS - t0))s)"
    fi
  fi
  log "test bed ready in $((SECONDS - t0))s; load it with: eval \"\$(e2e/testbed.sh env)\""
}

cmd_env() {
  echo "export KMIRROR_TESTBED_DIR='$KM_RUN'"
  echo "export KMIRROR_CACHE='$KM_CACHE'"
  kafka_env
  if ((HAVE_K8S)); then k8s_env; fi
  if declare -F node_env >/dev/null; then node_env; fi
}

cmd_status() {
  kafka_status
  if ((HAVE_K8S)); then k8s_status; fi
  if declare -F node_status >/dev/null; then node_status; fi
}

cmd_logs() {
  if [ $# -eq 0 ]; then
    echo "component logs in $KM_LOGS:"
    ls -1 "$KM_LOGS" 2>/dev/null | sed 's/\.log$//;s/^/  /'
    if declare -F node_list_pod_logs >/dev/null; then node_list_pod_logs; fi
    return 0
  fi
  local name="$1"
  if [ -f "$KM_LOGS/$name.log" ]; then
    cat "$KM_LOGS/$name.log"
  elif declare -F node_pod_log >/dev/null && node_pod_log "$name"; then
    :
  else
    die "no log named $name (try: e2e/testbed.sh logs)"
  fi
}

cmd_stop() {
  [ $# -eq 1 ] || die "usage: e2e/testbed.sh stop NAME"
  kafka_stop_one "$1"
}

cmd_start() {
  [ $# -eq 1 ] || die "usage: e2e/testbed.sh start NAME"
  kafka_start_one "$1"
}

cmd_restart() {
  if [ "${1:-}" = node-agent ] && declare -F node_restart >/dev/null; then
    node_restart
    return
  fi
  cmd_stop "$@"
  cmd_start "$@"
}

cmd_down() {
  if declare -F node_down >/dev/null; then node_down; fi
  if ((HAVE_K8S)); then k8s_down; fi
  kafka_down
  log "test bed stopped"
}

main() {
  local cmd="${1:-}"
  [ $# -gt 0 ] && shift
  case "$cmd" in
    up) cmd_up "$@" ;;
    env) cmd_env ;;
    status) cmd_status ;;
    logs) cmd_logs "$@" ;;
    stop) cmd_stop "$@" ;;
    start) cmd_start "$@" ;;
    restart) cmd_restart "$@" ;;
    down) cmd_down ;;
    -h | --help | help | "") usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
