# Fault verbs of the test bed: break brokers, partitions, pods and the operator the way production
# does, each verb printing what it did on stdout. Sourced by e2e/testbed.sh after the other parts,
# not executed. See docs/testbed-faults.md.
#
#   kill BROKER                         SIGKILL a broker (start it again with: start BROKER)
#   sigstop BROKER | sigcont BROKER     freeze / unfreeze a broker's process
#   offsets TOPIC PARTITION [--on C] [--json]
#                                       leader, ISR, high watermark and every replica's log end
#   move-leader TOPIC PARTITION [TO] [--on C]
#                                       reassignment (TO first) + preferred election
#   freeze-follower TOPIC PARTITION [--on C] / thaw [BROKER]
#                                       SIGSTOP an in-sync follower: the leader's HW lags its LEO
#   unclean-election TOPIC PARTITION [--records N] [--hold SECONDS] [--on C]
#                                       make the log diverge: records truncated and replaced
#   heal                                thaw every frozen broker, start every stopped one of the
#                                       replicated pair, remove every network toxic (net.sh)
#   zombie NAMESPACE/POD                force-delete a pod object, its processes keep running
#   zombie-kill NAMESPACE/POD|all / zombies
#   kill-operator-leader NAMESPACE [--lease NAME] [--wait SECONDS]
#
# BROKER is a component name (kafka-r-source-2, or r-source-2). C is the cluster: r-source
# (default), r-destination, source or destination.

FAULTS_ADMIN="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kafka_admin.py"

# What a verb did, on stdout (logs go to stderr).
say() { printf '%s\n' "$*"; }

# _fault_admin CLUSTER ARGS...: kafka_admin.py against a cluster, as its admin.
_fault_admin() {
  local cluster="$1"
  shift
  case "$cluster" in
    r-source) python3 "$FAULTS_ADMIN" "$(kafka_r_bootstrap r-source 2)" "$@" ;;
    r-destination) python3 "$FAULTS_ADMIN" --sasl "admin:$KAFKA_ADMIN_PASSWORD" "$(kafka_r_bootstrap r-destination 2)" "$@" ;;
    source) python3 "$FAULTS_ADMIN" 127.0.0.1:19092 "$@" ;;
    destination) python3 "$FAULTS_ADMIN" --sasl "admin:$KAFKA_ADMIN_PASSWORD" 127.0.0.1:29092 "$@" ;;
    *) die "unknown cluster $cluster (r-source, r-destination, source, destination)" ;;
  esac
}

# _fault_ok JSON: fail with the tool's error message.
_fault_ok() {
  local err
  err="$(_jq "$1" 'j.get("error", "")')"
  [ -z "$err" ] || die "$err"
}

# _jq JSON EXPR: a Python expression over the parsed JSON `j`; lists print space-separated.
_jq() {
  python3 -c '
import json, sys
j = json.loads(sys.argv[1])
v = eval(sys.argv[2])
if isinstance(v, (list, tuple)):
    print(" ".join(str(x) for x in v))
elif isinstance(v, dict):
    print(json.dumps(v))
elif v is None:
    print("")
else:
    print(v)' "$@"
}

# _fault_broker NAME: the component name of a broker (accepts r-source-2 for kafka-r-source-2).
_fault_broker() {
  local name="$1"
  case "$name" in kafka-*) ;; *) name="kafka-$name" ;; esac
  kafka_broker_spec "$name" >/dev/null
  echo "$name"
}

# _fault_node CLUSTER ID: the component name of broker ID of a cluster.
_fault_node() {
  case "$1" in
    r-source | r-destination) echo "kafka-$1-$2" ;;
    source | destination) echo "kafka-$1" ;;
  esac
}

_fault_pid() {
  is_running "$1" || die "$1 is not running"
  cat "$KM_PIDS/$1.pid"
}

# Options shared by the verbs: --on CLUSTER, --json, --records N, --hold SECONDS, --lease NAME,
# --wait SECONDS.
_fault_args() {
  F_ON=r-source F_JSON=0 F_RECORDS=5 F_HOLD=0 F_LEASE="" F_WAIT=0
  F_POS=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --on) F_ON="$2"; shift ;;
      --json) F_JSON=1 ;;
      --records) F_RECORDS="$2"; shift ;;
      --hold) F_HOLD="$2"; shift ;;
      --lease) F_LEASE="$2"; shift ;;
      --wait) F_WAIT="$2"; shift ;;
      --*) die "unknown option $1" ;;
      *) F_POS+=("$1") ;;
    esac
    shift
  done
}

# ---------------------------------------------------------------------------------------------
# processes

fault_kill() {
  [ $# -eq 1 ] || die "usage: e2e/testbed.sh kill BROKER"
  local name pid
  name="$(_fault_broker "$1")"
  pid="$(_fault_pid "$name")"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$KM_PIDS/$name.pid"
  say "kill: $name (pid $pid) got SIGKILL; its leaderships move once the controller fences it (broker.session.timeout.ms=$KAFKA_R_SESSION_MS on the replicated pair); start it with: e2e/testbed.sh start $name"
}

fault_sigstop() {
  [ $# -eq 1 ] || die "usage: e2e/testbed.sh sigstop BROKER"
  local name pid
  name="$(_fault_broker "$1")"
  pid="$(_fault_pid "$name")"
  kill -STOP "$pid"
  say "sigstop: $name (pid $pid) frozen with SIGSTOP; e2e/testbed.sh sigcont $name resumes it"
}

fault_sigcont() {
  [ $# -eq 1 ] || die "usage: e2e/testbed.sh sigcont BROKER"
  local name pid
  name="$(_fault_broker "$1")"
  pid="$(_fault_pid "$name")"
  kill -CONT "$pid"
  say "sigcont: $name (pid $pid) resumed with SIGCONT"
}

# ---------------------------------------------------------------------------------------------
# partitions

# _fault_describe CLUSTER TOPIC PARTITION: sets D_LEADER, D_EPOCH, D_REPLICAS (array), D_ISR (array).
_fault_describe() {
  local out
  out="$(_fault_admin "$1" describe "$2" "$3")"
  _fault_ok "$out"
  [ -n "$(_jq "$out" 'j["partitions"]')" ] || die "$2 has no partition $3"
  D_LEADER="$(_jq "$out" 'j["partitions"][0]["leader"]')"
  D_EPOCH="$(_jq "$out" 'j["partitions"][0]["leader_epoch"]')"
  read -r -a D_REPLICAS <<<"$(_jq "$out" 'j["partitions"][0]["replicas"]')"
  read -r -a D_ISR <<<"$(_jq "$out" 'j["partitions"][0]["isr"]')"
}

_csv() { local IFS=,; echo "$*"; }

fault_offsets() {
  _fault_args "$@"
  [ ${#F_POS[@]} -eq 2 ] || die "usage: e2e/testbed.sh offsets TOPIC PARTITION [--on CLUSTER] [--json]"
  local out
  out="$(_fault_admin "$F_ON" offsets "${F_POS[0]}" "${F_POS[1]}")"
  _fault_ok "$out"
  if ((F_JSON)); then
    echo "$out"
    return
  fi
  _jq "$out" '"%s-%s on %s: leader %s (epoch %s), replicas %s, isr %s; high watermark %s, last stable %s, log start %s; log end per replica: %s%s" % (
    j["topic"], j["partition"], sys.argv[3], j["leader"], j["leader_epoch"],
    ",".join(map(str, j["replicas"])), ",".join(map(str, j["isr"])), j["hw"], j["lso"], j["log_start"],
    " ".join("%s=%s" % kv for kv in sorted(j["leo"].items())),
    ("; unreachable: " + ", ".join("%s (%s)" % kv for kv in sorted(j["errors"].items()))) if j["errors"] else "")' "$F_ON"
}

# _fault_wait_partition CLUSTER TOPIC PARTITION TIMEOUT WHAT EXPR: poll describe until the
# Python expression over p (the partition) holds.
_fault_wait_partition() {
  local cluster="$1" topic="$2" partition="$3" timeout="$4" what="$5" expr="$6" out deadline
  deadline=$((SECONDS + timeout))
  while :; do
    out="$(_fault_admin "$cluster" describe "$topic" "$partition" 2>/dev/null || true)"
    if [ -n "$out" ] && [ "$(_jq "$out" "(lambda p: bool($expr))(j['partitions'][0]) if j.get('partitions') else False" 2>/dev/null)" = True ]; then
      return 0
    fi
    ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for $what of $topic-$partition; last: $out"
    sleep 0.5
  done
}

fault_move_leader() {
  _fault_args "$@"
  [ ${#F_POS[@]} -ge 2 ] || die "usage: e2e/testbed.sh move-leader TOPIC PARTITION [TO-BROKER-ID] [--on CLUSTER]"
  local topic="${F_POS[0]}" partition="${F_POS[1]}" to="${F_POS[2]:-}" t0=$SECONDS r
  _fault_describe "$F_ON" "$topic" "$partition"
  local old_leader="$D_LEADER" old_epoch="$D_EPOCH" old_replicas=("${D_REPLICAS[@]}")
  ((old_leader >= 0)) || die "$topic-$partition has no leader"
  if [ -z "$to" ]; then
    for r in "${D_REPLICAS[@]}"; do
      if [ "$r" != "$old_leader" ] && [[ " ${D_ISR[*]} " == *" $r "* ]]; then to="$r"; break; fi
    done
    [ -n "$to" ] || die "$topic-$partition has no in-sync follower to move the leadership to"
  fi
  [ "$to" != "$old_leader" ] || die "broker $to already leads $topic-$partition"
  local new=("$to")
  for r in "${D_REPLICAS[@]}"; do [ "$r" != "$to" ] && new+=("$r"); done
  new=("${new[@]:0:${#D_REPLICAS[@]}}")
  local out
  out="$(_fault_admin "$F_ON" reassign "$topic" "$partition" "$(_csv "${new[@]}")")"
  _fault_ok "$out"
  _fault_wait_partition "$F_ON" "$topic" "$partition" 90 "the reassignment to $(_csv "${new[@]}")" \
    "p['replicas'] == [$(_csv "${new[@]}")] and set(p['replicas']) <= set(p['isr'])"
  out="$(_fault_admin "$F_ON" elect preferred "$topic" "$partition")"
  _fault_ok "$out"
  _fault_wait_partition "$F_ON" "$topic" "$partition" 60 "broker $to to lead" "p['leader'] == $to"
  _fault_describe "$F_ON" "$topic" "$partition"
  say "move-leader: $topic-$partition on $F_ON: leader $old_leader -> $D_LEADER (epoch $old_epoch -> $D_EPOCH), replicas $(_csv "${old_replicas[@]}") -> $(_csv "${D_REPLICAS[@]}") (reassignment + preferred election, $((SECONDS - t0))s)"
}

fault_freeze_follower() {
  _fault_args "$@"
  [ ${#F_POS[@]} -eq 2 ] || die "usage: e2e/testbed.sh freeze-follower TOPIC PARTITION [--on CLUSTER]"
  local topic="${F_POS[0]}" partition="${F_POS[1]}" r follower="" name pid
  case "$F_ON" in r-*) ;; *) die "freeze-follower needs a replicated cluster (--on r-source or r-destination)" ;; esac
  _fault_describe "$F_ON" "$topic" "$partition"
  for r in "${D_REPLICAS[@]}"; do
    if [ "$r" != "$D_LEADER" ] && [[ " ${D_ISR[*]} " == *" $r "* ]]; then follower="$r"; break; fi
  done
  [ -n "$follower" ] || die "$topic-$partition has no in-sync follower (isr $(_csv "${D_ISR[@]}"), leader $D_LEADER)"
  name="$(_fault_node "$F_ON" "$follower")"
  pid="$(_fault_pid "$name")"
  kill -STOP "$pid"
  say "freeze-follower: $topic-$partition on $F_ON: follower broker $follower ($name, pid $pid) frozen with SIGSTOP while in the ISR ($(_csv "${D_ISR[@]}")); leader $D_LEADER's high watermark stays behind its log end while broker $follower stays in the ISR, until thaw or until the controller fences it (broker.session.timeout.ms=$KAFKA_R_SESSION_MS)"
}

fault_thaw() {
  local names=() name c n
  if [ $# -eq 1 ]; then
    names=("$(_fault_broker "$1")")
  else
    while read -r c n; do names+=("kafka-$c-$(kafka_r_node_dir "$n")"); done < <(kafka_r_nodes)
    names+=(kafka-source kafka-destination)
  fi
  local thawed=0
  for name in "${names[@]}"; do
    is_running "$name" || continue
    local pid
    pid="$(cat "$KM_PIDS/$name.pid")"
    if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = T ]; then
      kill -CONT "$pid"
      say "thaw: $name (pid $pid) resumed with SIGCONT"
      thawed=$((thawed + 1))
    fi
  done
  ((thawed > 0)) || say "thaw: no frozen broker"
}

fault_heal() {
  local c n name pid started=0 thawed=0 t0=$SECONDS
  local starts=()
  while read -r c n; do
    name="kafka-$c-$(kafka_r_node_dir "$n")"
    if is_running "$name"; then
      pid="$(cat "$KM_PIDS/$name.pid")"
      if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = T ]; then
        kill -CONT "$pid"
        thawed=$((thawed + 1))
      fi
    elif kafka_r_running; then
      (kafka_start_one "$name") &
      starts+=($!)
      started=$((started + 1))
    fi
  done < <(kafka_r_nodes)
  for pid in "${starts[@]}"; do wait "$pid" || die "a broker of the replicated pair did not start"; done
  say "heal: $thawed broker(s) thawed, $started started ($((SECONDS - t0))s)"
  if declare -F net_heal >/dev/null; then net_heal; fi
}

# unclean-election: every follower stops, the leader takes records alone (min.insync.replicas=1
# for the topic meanwhile) and keeps them readable for --hold seconds, the leader is killed, a
# stale follower comes back and is elected uncleanly, takes different records at the same
# offsets, and the old leader, started again, truncates its log to the new leader's. Consumers
# that read the first records saw a history that no longer exists.
fault_unclean_election() {
  _fault_args "$@"
  [ ${#F_POS[@]} -eq 2 ] || die "usage: e2e/testbed.sh unclean-election TOPIC PARTITION [--records N] [--hold SECONDS] [--on CLUSTER]"
  local topic="${F_POS[0]}" partition="${F_POS[1]}" c="$F_ON" t0=$SECONDS r out
  case "$c" in r-*) ;; *) die "unclean-election needs a replicated cluster (--on r-source or r-destination)" ;; esac
  _fault_describe "$c" "$topic" "$partition"
  local leader="$D_LEADER" replicas=("${D_REPLICAS[@]}") followers=() stale=""
  ((leader >= 0)) || die "$topic-$partition has no leader"
  for r in "${D_REPLICAS[@]}"; do [ "$r" != "$leader" ] && followers+=("$r"); done
  ((${#followers[@]} > 0)) || die "$topic-$partition has one replica: nothing to elect"
  for r in "${followers[@]}"; do
    if [[ " ${D_ISR[*]} " == *" $r "* ]]; then stale="$r"; break; fi
  done
  stale="${stale:-${followers[0]}}"
  out="$(_fault_admin "$c" topic-configs "$topic")"
  _fault_ok "$out"
  local old_min_isr old_unclean
  old_min_isr="$(_jq "$out" 'j["dynamic"].get("min.insync.replicas") or "-"')"
  old_unclean="$(_jq "$out" 'j["dynamic"].get("unclean.leader.election.enable") or "-"')"
  _fault_ok "$(_fault_admin "$c" set-config "$topic" min.insync.replicas 1)"

  # 1. The followers stop (controlled shutdown): the leader is alone in the ISR.
  for r in "${followers[@]}"; do stop_pid "$(_fault_node "$c" "$r")" 30 & done
  wait
  _fault_wait_partition "$c" "$topic" "$partition" 60 "the ISR to shrink to $leader" "p['isr'] == [$leader]"
  # 2. The leader takes records nobody else has; they are below the high watermark (visible).
  local tag
  tag="$(date +%s)"
  out="$(_fault_admin "$c" produce "$topic" "$partition" "unclean-old-$tag" "$F_RECORDS" 1)"
  _fault_ok "$out"
  local old_first old_end
  old_first="$(_jq "$out" 'j["first_offset"]')"
  old_end="$(_jq "$out" 'j["end_offset"]')"
  # Readers (a mirror) may copy them meanwhile.
  sleep "$F_HOLD"
  # 3. The leader dies; the stale followers come back.
  local leader_name leader_pid
  leader_name="$(_fault_node "$c" "$leader")"
  leader_pid="$(_fault_pid "$leader_name")"
  kill -KILL "$leader_pid"
  while kill -0 "$leader_pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$KM_PIDS/$leader_name.pid"
  local starts=()
  for r in "${followers[@]}"; do
    (kafka_start_one "$(_fault_node "$c" "$r")") &
    starts+=($!)
  done
  for r in "${starts[@]}"; do wait "$r" || die "a follower of $topic-$partition did not start again"; done
  # 4. Unclean election: allowed for the topic, then asked for.
  _fault_ok "$(_fault_admin "$c" set-config "$topic" unclean.leader.election.enable true)"
  local deadline=$((SECONDS + 60)) new_leader=-1
  while ((SECONDS < deadline)); do
    _fault_admin "$c" elect unclean "$topic" "$partition" >/dev/null 2>&1 || true
    _fault_describe "$c" "$topic" "$partition"
    if ((D_LEADER >= 0)) && [ "$D_LEADER" != "$leader" ]; then new_leader="$D_LEADER"; break; fi
    sleep 1
  done
  ((new_leader >= 0)) || die "no unclean leader was elected for $topic-$partition within 60s"
  # 5. The new leader takes different records at the same offsets.
  out="$(_fault_admin "$c" produce "$topic" "$partition" "unclean-new-$tag" "$F_RECORDS" 1)"
  _fault_ok "$out"
  local new_first new_end
  new_first="$(_jq "$out" 'j["first_offset"]')"
  new_end="$(_jq "$out" 'j["end_offset"]')"
  # 6. The old leader comes back and truncates its log to the new leader's.
  kafka_start_one "$leader_name"
  _fault_wait_partition "$c" "$topic" "$partition" 120 "every replica back in the ISR" \
    "sorted(p['isr']) == sorted([$(_csv "${replicas[@]}")])"
  _fault_ok "$(_fault_admin "$c" set-config "$topic" min.insync.replicas "$old_min_isr")"
  _fault_ok "$(_fault_admin "$c" set-config "$topic" unclean.leader.election.enable "$old_unclean")"
  say "unclean-election: $topic-$partition on $c: leader $leader alone in the ISR took offsets $old_first..$((old_end - 1)) (unclean-old-$tag-*), was killed; stale broker $new_leader was elected uncleanly and took offsets $new_first..$((new_end - 1)) (unclean-new-$tag-*); broker $leader truncated its log when it came back: the log diverged from offset $new_first ($((SECONDS - t0))s)"
}

# ---------------------------------------------------------------------------------------------
# pods and the operator (the node agent and the control plane)

_fault_agent_bin() {
  is_running node-agent || die "the node agent is not running"
  local exe
  exe="$(readlink "/proc/$(cat "$KM_PIDS/node-agent.pid")/exe")"
  # A program whose file a rebuild replaced cannot be run by path; its copy in $KM_RUN/bin can.
  [ -x "$exe" ] || exe="$NODE_RUN_BIN"
  [ -x "$exe" ] || die "the running node agent's program is gone ($exe); e2e/testbed.sh restart node-agent"
  echo "$exe"
}

fault_zombie() {
  [ $# -eq 1 ] && [[ "$1" == */* ]] || die "usage: e2e/testbed.sh zombie NAMESPACE/POD"
  local ns="${1%%/*}" pod="${1#*/}" uid deadline
  uid="$(_node_kubectl -n "$ns" get pod "$pod" -o jsonpath='{.metadata.uid}')" || die "no pod $1"
  _node_kubectl -n "$ns" annotate pod "$pod" --overwrite kmirror.io/test-zombie-on-force-delete=true >/dev/null ||
    die "cannot annotate pod $1"
  deadline=$((SECONDS + 15))
  until [ -f "$NODE_STATE/pods/$uid/zombie-armed" ]; do
    ((SECONDS < deadline)) || die "the node agent did not take up the zombie switch of $1 within 15s (an agent without it? e2e/testbed.sh restart node-agent)"
    sleep 0.2
  done
  _node_kubectl -n "$ns" delete pod "$pod" --grace-period=0 --force --wait=false >/dev/null 2>&1 ||
    die "cannot delete pod $1"
  deadline=$((SECONDS + 15))
  until "$(_fault_agent_bin)" zombies --state-dir "$NODE_STATE" 2>/dev/null | grep -q "^$ns/$pod uid=$uid "; do
    ((SECONDS < deadline)) || die "the node agent did not leave $1 running as a zombie within 15s"
    sleep 0.2
  done
  local line
  line="$("$(_fault_agent_bin)" zombies --state-dir "$NODE_STATE" | grep "^$ns/$pod uid=$uid ")"
  say "zombie: pod $1 (uid $uid) deleted by force; its processes keep running: ${line#* }; end them with: e2e/testbed.sh zombie-kill $1"
}

fault_zombie_kill() {
  [ $# -eq 1 ] || die "usage: e2e/testbed.sh zombie-kill NAMESPACE/POD|all"
  local out
  if [ "$1" != all ] && ! "$(_fault_agent_bin)" zombies --state-dir "$NODE_STATE" | grep -q "^$1 "; then
    say "zombie-kill: $1 is not a zombie (any more): its processes ended by themselves, or it never was one"
    return 0
  fi
  out="$("$(_fault_agent_bin)" zombies --state-dir "$NODE_STATE" --kill "$1" 2>&1)" || die "$out"
  if [ -n "$out" ]; then say "zombie-kill: ${out//$'\n'/; }"; else say "zombie-kill: no zombie pods"; fi
}

fault_zombies() {
  "$(_fault_agent_bin)" zombies --state-dir "$NODE_STATE"
}

# kill-operator-leader: the Lease holder is a pod (the chart: identity = pod name; its container
# process is SIGKILLed and restarts like after a crash) or a local process (identity
# kmirror-operator-PID, as tests run it; SIGKILLed).
_operator_leader() {
  local ns="$1" leases lease holder duration
  leases="$(_node_kubectl -n "$ns" get leases -o json)" || die "cannot list the leases of $ns"
  lease="$(_jq "$leases" '
[l["metadata"]["name"] for l in j["items"] if (l.get("spec") or {}).get("holderIdentity")
 and ("'"$F_LEASE"'" in ("", l["metadata"]["name"]))]')"
  read -r -a lease <<<"$lease"
  ((${#lease[@]} > 0)) || die "no held lease in namespace $ns${F_LEASE:+ named $F_LEASE}"
  if ((${#lease[@]} > 1)); then
    [[ " ${lease[*]} " == *" kmirror-operator "* ]] || die "several held leases in $ns (${lease[*]}); pick one with --lease"
    lease=(kmirror-operator)
  fi
  lease="${lease[0]}"
  holder="$(_node_kubectl -n "$ns" get lease "$lease" -o jsonpath='{.spec.holderIdentity}')"
  duration="$(_node_kubectl -n "$ns" get lease "$lease" -o jsonpath='{.spec.leaseDurationSeconds}')"
  local cid pid shim what
  cid="$(_node_kubectl -n "$ns" get pod "$holder" -o jsonpath='{.status.containerStatuses[0].containerID}' 2>/dev/null || true)"
  if [[ "$cid" == process://* ]]; then
    shim="${cid#process://}"
    pid="$(pgrep -P "$shim" | head -n 1)"
    [ -n "$pid" ] || die "pod $ns/$holder holds lease $lease but its container process (shim $shim) is not running"
    what="pod $ns/$holder, container process pid $pid (shim $shim)"
  elif [[ "$holder" =~ ^kmirror-operator-([0-9]+)$ ]] && [[ "$(cat "/proc/${BASH_REMATCH[1]}/comm" 2>/dev/null)" == kmirror-operato* ]]; then
    pid="${BASH_REMATCH[1]}"
    what="local process pid $pid"
  else
    die "lease $ns/$lease is held by $holder: neither a pod of $ns run by the node agent nor a local kmirror-operator process"
  fi
  OP_NS="$ns" OP_LEASE="$lease" OP_HOLDER="$holder" OP_DURATION="$duration" OP_PID="$pid" OP_WHAT="$what"
}

# Waits up to F_WAIT seconds until another identity than OP_HOLDER holds OP_LEASE ($1: the verb).
_operator_leader_moved() {
  local t0=$2 deadline=$((SECONDS + F_WAIT)) now=""
  while ((SECONDS < deadline)); do
    now="$(_node_kubectl -n "$OP_NS" get lease "$OP_LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
    if [ -n "$now" ] && [ "$now" != "$OP_HOLDER" ]; then
      say "$1: lease $OP_NS/$OP_LEASE now held by $now ($((SECONDS - t0))s after the fault)"
      return 0
    fi
    sleep 0.5
  done
  return 1
}

fault_kill_operator_leader() {
  _fault_args "$@"
  [ ${#F_POS[@]} -eq 1 ] || die "usage: e2e/testbed.sh kill-operator-leader NAMESPACE [--lease NAME] [--wait SECONDS]"
  _operator_leader "${F_POS[0]}"
  local t0=$SECONDS
  kill -KILL "$OP_PID"
  local restarts=""
  [[ "$OP_WHAT" == pod* ]] && restarts="; the container restarts like after a crash"
  say "kill-operator-leader: lease $OP_NS/$OP_LEASE held by $OP_HOLDER; SIGKILL to $OP_WHAT$restarts; another replica takes over once the lease expires (leaseDurationSeconds=${OP_DURATION:-?})"
  if ((F_WAIT > 0)); then
    _operator_leader_moved kill-operator-leader "$t0" || die "lease $OP_NS/$OP_LEASE still held by $OP_HOLDER ${F_WAIT}s after the kill"
  fi
}

# freeze-operator-leader: SIGSTOP the Lease holder until another replica holds the Lease (at most
# --wait seconds, default 60) and a few seconds more, then SIGCONT: the old leader thaws believing
# it still leads — two operators overlap until it notices.
fault_freeze_operator_leader() {
  _fault_args "$@"
  [ ${#F_POS[@]} -eq 1 ] || die "usage: e2e/testbed.sh freeze-operator-leader NAMESPACE [--lease NAME] [--wait SECONDS]"
  ((F_WAIT > 0)) || F_WAIT=60
  _operator_leader "${F_POS[0]}"
  local t0=$SECONDS moved=0
  kill -STOP "$OP_PID"
  say "freeze-operator-leader: lease $OP_NS/$OP_LEASE held by $OP_HOLDER; SIGSTOP to $OP_WHAT"
  _operator_leader_moved freeze-operator-leader "$t0" && moved=1
  # The new leader reads its state and claims the mirrors before the old one thaws.
  ((moved)) && sleep 5
  kill -CONT "$OP_PID" 2>/dev/null || true
  if ((moved)); then
    say "freeze-operator-leader: SIGCONT to $OP_WHAT after $((SECONDS - t0))s: it thaws believing it leads (overlap)"
  else
    die "lease $OP_NS/$OP_LEASE still held by $OP_HOLDER ${F_WAIT}s into the freeze; SIGCONT sent"
  fi
}
