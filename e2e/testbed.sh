#!/usr/bin/env bash
# The kmirror test bed: real Apache Kafka clusters and a real Kubernetes control plane on loopback.
#
#   e2e/testbed.sh up [--compat] [--kafka-only] [--brokers 3]
#                                                 start everything (idempotent); --brokers 3 adds
#                                                 the replicated pair (3 + 3 brokers)
#   e2e/testbed.sh provision [--compat] [--kafka-only]
#                                                 only the downloads and builds `up` needs (Kafka
#                                                 jars, Kubernetes and helm), each skipped when cached
#   e2e/testbed.sh env                            shell exports for tests and tools: eval "$(e2e/testbed.sh env)"
#   e2e/testbed.sh status                         what runs, by recorded PID
#   e2e/testbed.sh logs [NAME|POD]                list logs, or print one (a component or a pod)
#   e2e/testbed.sh restart NAME                   restart one broker (kafka-source, kafka-destination, ...)
#                                                 or the node agent (node-agent: rebuilt, pods keep running)
#   e2e/testbed.sh stop NAME | start NAME         stop or start one broker, keeping its data
#   e2e/testbed.sh down [--replicated]            stop what `up` started and remove its state
#                                                 (--replicated: only the replicated pair)
#
# Fault verbs (docs/testbed-faults.md), each printing what it did:
#   kill BROKER | sigstop BROKER | sigcont BROKER  SIGKILL / SIGSTOP / SIGCONT one broker
#   offsets TOPIC PARTITION [--on C] [--json]     leader, ISR, high watermark, each replica's log end
#   move-leader TOPIC PARTITION [TO] [--on C]     reassignment + preferred election
#   freeze-follower TOPIC PARTITION [--on C]      SIGSTOP an in-sync follower (HW lags); thaw [BROKER]
#   unclean-election TOPIC PARTITION [--records N] [--hold S] [--on C]   make the log diverge
#   heal                                          thaw and start every broker of the replicated pair
#   zombie NS/POD | zombie-kill NS/POD|all | zombies          a pod process outliving its object
#   kill-operator-leader NAMESPACE [--lease NAME] [--wait SECONDS]
#   freeze-operator-leader NAMESPACE [--lease NAME] [--wait SECONDS]   SIGSTOP the leader until
#                                                 another leads, then SIGCONT (overlap)
#   (C: r-source (default), r-destination, source, destination)
#
# Network verbs (toxiproxy in front of each broker of the replicated pair, e2e/bed/net.sh); they
# affect clients on the PROXIED listeners (KMIRROR_R_{SOURCE,DEST}_PROXIED_BOOTSTRAP):
#   net-cut CLUSTER BROKER [--hold S]             blackhole: connections hang, nothing passes
#   net-reset CLUSTER BROKER [--times N] [--every MS]   reset its connections (counted)
#   net-latency CLUSTER BROKER MS [--jitter MS] [--hold S] | net-bandwidth CLUSTER BROKER KBPS [--hold S]
#   net-heal [CLUSTER BROKER] | net-status        remove the toxics / show the proxies
#   (CLUSTER BROKER: r-source 1 .. r-destination 3, or r-source-1; heal also heals the network)
#   pod-net-cut NS/POD|IP | pod-net-restore NS/POD|IP  cut a pod of a namespace annotated
#                                                 kmirror.io/test-network=isolated off the network
#                                                 while its processes run / join it again
#   pod-net-unsent NS/POD|IP                      bytes such a pod's connections hold unsent
#   pod-freeze NS/POD|IP | pod-thaw NS/POD|IP     SIGSTOP / SIGCONT every process of such a pod
#
# Downloads and builds are cached under ~/.cache/kmirror (KMIRROR_CACHE), keyed by version;
# runtime state lives under /tmp/kmirror-testbed (KMIRROR_RUN_DIR). See the README (The test bed)
# and docs/testbed-*.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bed/common.sh
. "$HERE/bed/common.sh"
# shellcheck source=bed/kafka.sh
. "$HERE/bed/kafka.sh"
# shellcheck source=bed/replicated.sh
. "$HERE/bed/replicated.sh"
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
# shellcheck source=bed/faults.sh
. "$HERE/bed/faults.sh"
# shellcheck source=bed/net.sh
. "$HERE/bed/net.sh"

usage() { sed -n '2,43p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

cmd_up() {
  local compat=0 kafka_only=0 brokers=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --compat) compat=1 ;;
      --kafka-only) kafka_only=1 ;;
      --brokers)
        brokers="${2:-}"
        shift
        ;;
      --brokers=*) brokers="${1#--brokers=}" ;;
      *) die "unknown option for up: $1" ;;
    esac
    shift
  done
  case "$brokers" in 1 | 3) ;; *) die "--brokers takes 1 (the default pair only) or 3 (adds the replicated pair)" ;; esac
  # One `up` at a time: every test process runs one (Testbed::get), many at once under nextest,
  # and two of them would both find a stopped broker stopped. start_bg keeps the lock out of
  # what it starts.
  exec {UP_LOCK_FD}>"$KM_RUN/up.lock"
  flock "$UP_LOCK_FD"
  local t0=$SECONDS
  need java keytool mvn openssl python3 setsid
  if ((HAVE_K8S && !kafka_only)); then need go cargo; fi
  if ((brokers == 3)); then need go curl jq ss; fi
  # Provision first (downloads, builds), then start: a cold cache shows up as one long step.
  kafka_provision
  if ((HAVE_K8S && !kafka_only)); then k8s_provision; fi
  if ((brokers == 3)); then net_provision >/dev/null; fi
  kafka_up
  log "kafka source and destination are up ($((SECONDS - t0))s)"
  if ((brokers == 3)); then
    net_up
    kafka_r_up
    log "replicated pair is up ($((SECONDS - t0))s)"
  fi
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

# cmd_provision: what `up` downloads and builds, without starting anything (make test runs it in
# the background while cargo builds).
cmd_provision() {
  local compat=0 kafka_only=0 t0=$SECONDS
  while [ $# -gt 0 ]; do
    case "$1" in
      --compat) compat=1 ;;
      --kafka-only) kafka_only=1 ;;
      *) die "unknown option for provision: $1" ;;
    esac
    shift
  done
  need java mvn
  kafka_provision
  if ((compat)); then kafka_provision_compat; fi
  if ((HAVE_K8S && !kafka_only)); then
    need go
    k8s_provision
    net_provision >/dev/null
  fi
  log "provisioned in $((SECONDS - t0))s"
}

cmd_env() {
  echo "export KMIRROR_TESTBED_DIR='$KM_RUN'"
  echo "export KMIRROR_CACHE='$KM_CACHE'"
  kafka_env
  kafka_r_env
  net_env
  if ((HAVE_K8S)); then k8s_env; fi
  if declare -F node_env >/dev/null; then node_env; fi
}

cmd_status() {
  kafka_status
  kafka_r_status
  net_status_line
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
  local name t0=$SECONDS
  name="$(_fault_broker "$1")"
  kafka_stop_one "$name"
  say "stop: $name stopped (SIGTERM, controlled shutdown; data kept) in $((SECONDS - t0))s"
}

cmd_start() {
  [ $# -eq 1 ] || die "usage: e2e/testbed.sh start NAME"
  local name t0=$SECONDS
  name="$(_fault_broker "$1")"
  kafka_start_one "$name"
  say "start: $name started (pid $(cat "$KM_PIDS/$name.pid")) in $((SECONDS - t0))s"
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
  if [ "${1:-}" = --replicated ]; then
    kafka_r_down
    net_down
    log "replicated pair stopped"
    return
  fi
  [ $# -eq 0 ] || die "usage: e2e/testbed.sh down [--replicated]"
  if declare -F node_down >/dev/null; then node_down; fi
  if ((HAVE_K8S)); then k8s_down; fi
  kafka_r_down
  net_down
  kafka_down
  log "test bed stopped"
}

main() {
  local cmd="${1:-}"
  [ $# -gt 0 ] && shift
  case "$cmd" in
    up) cmd_up "$@" ;;
    provision) cmd_provision "$@" ;;
    env) cmd_env ;;
    status) cmd_status ;;
    logs) cmd_logs "$@" ;;
    stop) cmd_stop "$@" ;;
    start) cmd_start "$@" ;;
    restart) cmd_restart "$@" ;;
    down) cmd_down "$@" ;;
    kill) fault_kill "$@" ;;
    sigstop) fault_sigstop "$@" ;;
    sigcont) fault_sigcont "$@" ;;
    offsets) fault_offsets "$@" ;;
    move-leader) fault_move_leader "$@" ;;
    freeze-follower) fault_freeze_follower "$@" ;;
    thaw) fault_thaw "$@" ;;
    heal) fault_heal ;;
    unclean-election) fault_unclean_election "$@" ;;
    net-cut) net_cut "$@" ;;
    net-reset) net_reset "$@" ;;
    net-latency) net_latency "$@" ;;
    net-bandwidth) net_bandwidth "$@" ;;
    net-heal) net_heal "$@" ;;
    net-status) net_status ;;
    pod-net-cut) pod_net_cut "$@" ;;
    pod-net-restore) pod_net_restore "$@" ;;
    pod-net-unsent) pod_net_unsent "$@" ;;
    pod-freeze) pod_freeze "$@" ;;
    pod-thaw) pod_thaw "$@" ;;
    zombie) fault_zombie "$@" ;;
    zombie-kill) fault_zombie_kill "$@" ;;
    zombies) fault_zombies ;;
    kill-operator-leader) fault_kill_operator_leader "$@" ;;
    freeze-operator-leader) fault_freeze_operator_leader "$@" ;;
    -h | --help | help | "") usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
