# Network faults of the replicated pair: toxiproxy in front of every broker, and the verbs that
# break the connections through it. Sourced by e2e/testbed.sh after replicated.sh and faults.sh,
# not executed. See docs/testbed-faults.md ("Network faults").
#
# toxiproxy (github.com/Shopify/toxiproxy/v2, built from its Go module by e2e/bed/go-tools.sh and
# cached in $KM_CACHE/toxiproxy/<version>) runs as the component `toxiproxy` with its API on
# 127.0.0.1:$NET_API_PORT (KMIRROR_TOXIPROXY_PORT, 18474). One proxy per broker, named like the
# broker without `kafka-`: r-source-N listens on 127.0.0.1:191N6 and forwards to the broker's
# PROXIED listener 127.0.0.1:191N7, which advertises 191N6 (replicated.sh); r-destination-N the
# same on 291N6 -> 291N7. A client that bootstraps on the 1NN6 ports therefore reaches every
# broker through the proxy, and only those clients are affected by the verbs.
#
#   net-cut CLUSTER BROKER [--hold S]       blackhole: connections stay open, nothing passes
#   net-reset CLUSTER BROKER [--times N] [--every MS]
#                                           reset (RST) the connections N times, MS apart
#   net-latency CLUSTER BROKER MS [--jitter MS] [--hold S]
#   net-bandwidth CLUSTER BROKER KBPS [--hold S]
#   net-heal [CLUSTER BROKER]               remove every toxic (of one broker, or all)
#   net-status                              the proxies and their toxics
#   pod-net-cut NS/POD | pod-net-restore NS/POD
#                                           cut one pod of an isolated namespace off the network
#                                           (its processes keep running) / join it again
#   pod-net-unsent NS/POD                   bytes its connections hold in their send queues
#   pod-freeze NS/POD | pod-thaw NS/POD     SIGSTOP / SIGCONT every process of such a pod
#
# Functions: net_provision, net_up, net_down, net_status_line, net_env, and net_* verbs.

NET_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NET_API_PORT="${KMIRROR_TOXIPROXY_PORT:-18474}"
NET_API="http://127.0.0.1:$NET_API_PORT"
NET_STATE="$KM_RUN/net"

# net_provision: the toxiproxy binary (built once per version); prints its path.
net_provision() { "$NET_HERE/go-tools.sh" toxiproxy; }

_net_api() {
  # _net_api METHOD PATH [JSON]: the toxiproxy API; the body on stdout, fails on HTTP errors.
  local method="$1" path="$2"
  curl -sS --fail-with-body --max-time 10 -X "$method" -H 'Content-Type: application/json' \
    ${3:+--data "$3"} "$NET_API$path"
}

_net_api_up() { curl -sf --max-time 2 "$NET_API/version" >/dev/null; }

# The proxies: "NAME LISTEN_PORT UPSTREAM_PORT", one per broker of the pair.
_net_proxies() {
  local c n
  for c in r-source r-destination; do
    for n in "${KAFKA_R_BROKERS[@]}"; do
      echo "$c-$n $(kafka_r_port "$c" "$n" 6) $(kafka_r_port "$c" "$n" 7)"
    done
  done
}

# net_up: start toxiproxy unless it runs, and (re)create one proxy per broker, without toxics.
net_up() {
  local bin json="[" name lp up
  bin="$(net_provision)" || die "could not build toxiproxy"
  mkdir -p "$NET_STATE"
  if ! is_running toxiproxy; then
    start_bg toxiproxy "$bin" -host 127.0.0.1 -port "$NET_API_PORT"
  fi
  wait_for "toxiproxy's API on $NET_API_PORT" 30 toxiproxy _net_api_up || die "toxiproxy did not start"
  while read -r name lp up; do
    json+="{\"name\":\"$name\",\"listen\":\"127.0.0.1:$lp\",\"upstream\":\"127.0.0.1:$up\",\"enabled\":true},"
  done < <(_net_proxies)
  json="${json%,}]"
  _net_api POST /populate "$json" >/dev/null || die "could not create the proxies"
  log "toxiproxy: 6 proxies on the PROXIED listeners (API $NET_API)"
}

net_down() {
  stop_pid toxiproxy 10
  rm -rf "$NET_STATE"
}

net_status_line() {
  if is_running toxiproxy; then
    echo "toxiproxy: running (pid $(cat "$KM_PIDS/toxiproxy.pid"), API $NET_API)"
  else
    echo "toxiproxy: stopped"
  fi
}

net_env() {
  is_running toxiproxy || return 0
  echo "export KMIRROR_TOXIPROXY_API='$NET_API'"
}

# _net_target ARGS...: the proxy named by "CLUSTER BROKER" (r-source 2, source 2, destination 1)
# or one word (r-source-2, kafka-r-destination-3) into NET_P; the remaining args in NET_REST.
_net_target() {
  local c n
  case "${1:-}" in
    kafka-r-source-[0-9] | kafka-r-destination-[0-9]) c="${1#kafka-}" && n="${c##*-}" && c="${c%-*}" && shift ;;
    r-source-[0-9] | r-destination-[0-9]) n="${1##*-}" && c="${1%-*}" && shift ;;
    r-source | r-destination | source | destination)
      c="$1" n="${2:-}"
      shift 2 2>/dev/null || die "usage: net-VERB CLUSTER BROKER ..."
      ;;
    *) die "name a broker of the replicated pair: CLUSTER BROKER (r-source 1 .. r-destination 3)" ;;
  esac
  case "$c" in source) c=r-source ;; destination) c=r-destination ;; esac
  case "$n" in 1 | 2 | 3) ;; *) die "BROKER is 1, 2 or 3 (got '$n')" ;; esac
  _net_api_up || die "toxiproxy is not running (e2e/testbed.sh up --brokers 3)"
  NET_P="$c-$n"
  NET_REST=("$@")
}

# _net_opts ARGS...: --hold S, --times N, --every MS, --jitter MS; positionals in NET_POS.
_net_opts() {
  NET_HOLD=0 NET_TIMES=1 NET_EVERY=1000 NET_JITTER=0 NET_POS=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --hold) NET_HOLD="${2:?--hold SECONDS}" && shift ;;
      --times) NET_TIMES="${2:?--times N}" && shift ;;
      --every) NET_EVERY="${2:?--every MS}" && shift ;;
      --jitter) NET_JITTER="${2:?--jitter MS}" && shift ;;
      --*) die "unknown option $1" ;;
      *) NET_POS+=("$1") ;;
    esac
    shift
  done
}

# _net_toxic PROXY NAME TYPE STREAM ATTRIBUTES_JSON: add (or replace) a toxic.
_net_toxic() {
  _net_api DELETE "/proxies/$1/toxics/$2" >/dev/null 2>&1 || true
  _net_api POST "/proxies/$1/toxics" \
    "{\"name\":\"$2\",\"type\":\"$3\",\"stream\":\"$4\",\"toxicity\":1,\"attributes\":$5}" >/dev/null ||
    die "could not add the $3 toxic to $1"
}

_net_untoxic() { _net_api DELETE "/proxies/$1/toxics/$2" >/dev/null 2>&1 || true; }

# _net_conns PORT: the client endpoints connected to a proxy port, one per line.
_net_conns() { ss -Htn state established "( sport = :$1 )" 2>/dev/null | awk '{print $NF}' | sort; }

_net_port() { _net_proxies | awk -v p="$1" '$1 == p {print $2}'; }

# net-cut: a timeout toxic (timeout 0) in both directions. Connections are accepted and stay
# open, but no byte passes either way: what a client sees when packets are dropped. Removing it
# (net-heal, or after --hold) closes the connections it held; new ones then pass.
net_cut() {
  _net_target "$@"
  _net_opts "${NET_REST[@]}"
  local p="$NET_P" conns
  conns="$(_net_conns "$(_net_port "$p")" | wc -l)"
  _net_toxic "$p" cut-up timeout upstream '{"timeout":0}'
  _net_toxic "$p" cut-down timeout downstream '{"timeout":0}'
  say "net-cut: $p blackholed ($conns connection(s) open through it now hang)"
  if ((NET_HOLD > 0)); then
    sleep "$NET_HOLD"
    _net_untoxic "$p" cut-up
    _net_untoxic "$p" cut-down
    say "net-cut: $p healed after ${NET_HOLD}s (held connections closed)"
  fi
}

# net-reset: NET_TIMES rounds, NET_EVERY ms apart: a reset_peer toxic (timeout 0) on the client
# side for the round's window (half the interval, at least 300 ms), then removed. A connection
# opened meanwhile is reset with an RST (SO_LINGER 0) at its first bytes; one already open is
# closed by the proxy as soon as its client sends (toxiproxy sets SO_LINGER only on new
# connections): either way the request in flight is lost. The connections open before a round
# and gone after it are counted as reset; the total is also added to $NET_STATE/resets-PROXY.
net_reset() {
  _net_target "$@"
  _net_opts "${NET_REST[@]}"
  local p="$NET_P" port i before after gone total=0 window cum=0
  port="$(_net_port "$p")"
  window=$((NET_EVERY / 2))
  ((window >= 300)) || window=300
  for ((i = 1; i <= NET_TIMES; i++)); do
    before="$(_net_conns "$port")"
    _net_toxic "$p" reset reset_peer upstream '{"timeout":0}'
    sleep "$(awk -v ms="$window" 'BEGIN { printf "%.3f", ms / 1000 }')"
    _net_untoxic "$p" reset
    after="$(_net_conns "$port")"
    gone="$(comm -23 <(printf '%s\n' "$before" | sed '/^$/d') <(printf '%s\n' "$after" | sed '/^$/d') | wc -l)"
    total=$((total + gone))
    say "net-reset: $p round $i/$NET_TIMES: $gone of $(printf '%s\n' "$before" | sed '/^$/d' | wc -l) connection(s) reset"
    ((i == NET_TIMES)) || sleep "$(awk -v ms="$((NET_EVERY - window))" 'BEGIN { printf "%.3f", (ms > 0 ? ms : 0) / 1000 }')"
  done
  mkdir -p "$NET_STATE"
  [ -f "$NET_STATE/resets-$p" ] && cum="$(cat "$NET_STATE/resets-$p")"
  echo $((cum + total)) >"$NET_STATE/resets-$p"
  say "net-reset: $p: $total connection(s) reset in $NET_TIMES round(s) ($((cum + total)) since up)"
}

# net-latency: every byte from the broker to the client is delayed MS (± jitter).
net_latency() {
  _net_target "$@"
  _net_opts "${NET_REST[@]}"
  local p="$NET_P" ms="${NET_POS[0]:-}"
  [[ "$ms" =~ ^[0-9]+$ ]] || die "usage: net-latency CLUSTER BROKER MS [--jitter MS] [--hold S]"
  _net_toxic "$p" latency latency downstream "{\"latency\":$ms,\"jitter\":$NET_JITTER}"
  say "net-latency: $p: responses delayed ${ms} ms (jitter $NET_JITTER ms)"
  if ((NET_HOLD > 0)); then
    sleep "$NET_HOLD"
    _net_untoxic "$p" latency
    say "net-latency: $p: latency removed after ${NET_HOLD}s"
  fi
}

# net-bandwidth: the broker-to-client direction limited to KBPS kilobytes per second.
net_bandwidth() {
  _net_target "$@"
  _net_opts "${NET_REST[@]}"
  local p="$NET_P" kbps="${NET_POS[0]:-}"
  [[ "$kbps" =~ ^[0-9]+$ ]] || die "usage: net-bandwidth CLUSTER BROKER KBPS [--hold S]"
  _net_toxic "$p" bandwidth bandwidth downstream "{\"rate\":$kbps}"
  say "net-bandwidth: $p: broker-to-client limited to $kbps KB/s"
  if ((NET_HOLD > 0)); then
    sleep "$NET_HOLD"
    _net_untoxic "$p" bandwidth
    say "net-bandwidth: $p: limit removed after ${NET_HOLD}s"
  fi
}

# net-heal [CLUSTER BROKER]: every toxic removed and the proxy enabled (one broker, or all);
# without a broker also every pod link that pod-net-cut took down is up again.
net_heal() {
  local proxies=() p t removed=0 links=0 l
  if [ $# -gt 0 ]; then
    _net_target "$@"
    proxies=("$NET_P")
  else
    for l in $(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^kmh-/ && $3 !~ /[<,]UP[,>]/ {sub(/@.*/, "", $2); print $2}'); do
      ip link set "$l" up && links=$((links + 1))
    done
    ((links == 0)) || say "net-heal: $links pod link(s) up again"
    _net_api_up || { say "net-heal: toxiproxy is not running"; return 0; }
    mapfile -t proxies < <(_net_proxies | awk '{print $1}')
  fi
  for p in "${proxies[@]}"; do
    for t in $(_net_api GET "/proxies/$p/toxics" | jq -r '.[].name'); do
      _net_untoxic "$p" "$t"
      removed=$((removed + 1))
    done
    _net_api POST "/proxies/$p" '{"enabled":true}' >/dev/null || die "could not enable proxy $p"
  done
  say "net-heal: $removed toxic(s) removed from ${#proxies[@]} proxy(ies)"
}

net_status() {
  _net_api_up || { say "toxiproxy: not running"; return 0; }
  _net_api GET /proxies | jq -r 'to_entries | sort_by(.key)[] | .value |
    "\(.name): \(.listen) -> \(.upstream)\(if .enabled then "" else " (disabled)" end)" +
    (if (.toxics | length) == 0 then "" else "; toxics: " +
      ([.toxics[] | "\(.name) \(.type) \(.stream) \(.attributes | tojson)"] | join(", ")) end)'
  local f
  for f in "$NET_STATE"/resets-*; do
    [ -f "$f" ] && say "${f##*/resets-}: $(cat "$f") connection(s) reset since up"
  done
  return 0
}

# _pod_net NS/POD: the host end of an isolated pod's link (kmh-A-B for pod IP 10.(213+A).B.2,
# e2e/node-agent/src/netns.rs) into POD_LINK, its IP into POD_IP.
# A pod IP instead of NS/POD reaches a pod whose object is gone (a zombie's process lives on).
_pod_net() {
  local target="${1:-}" ns pod a b
  if [[ "$target" =~ ^10\.[0-9]+\.[0-9]+\.2$ ]]; then
    POD_IP="$target"
  else
    [[ "$target" == */* ]] || die "usage: pod-net-cut|pod-net-restore NAMESPACE/POD|POD_IP"
    declare -F _node_kubectl >/dev/null || die "the node agent is not part of this bed"
    ns="${target%%/*}" pod="${target#*/}"
    POD_IP="$(_node_kubectl get pod -n "$ns" "$pod" -o jsonpath='{.status.podIP}' 2>/dev/null)" ||
      die "no pod $target"
  fi
  [[ "$POD_IP" =~ ^10\.([0-9]+)\.([0-9]+)\.2$ ]] ||
    die "$target (IP ${POD_IP:-none}) is not in an isolated network: annotate its namespace kmirror.io/test-network=isolated before the pod starts"
  a=$((BASH_REMATCH[1] - 213)) b="${BASH_REMATCH[2]}"
  POD_LINK="kmh-$a-$b"
  [ -e "/run/netns/kmpod-$a-$b" ] && ip link show "$POD_LINK" >/dev/null 2>&1 ||
    die "$target: no network namespace kmpod-$a-$b (is the node agent the one of this checkout? e2e/testbed.sh restart node-agent)"
}

# pod-net-cut NS/POD: the host end of the pod's link goes down: every packet from and to the pod
# is dropped, open connections hang, new ones time out; its processes keep running.
pod_net_cut() {
  _pod_net "$@"
  ip link set "$POD_LINK" down || die "could not take $POD_LINK down"
  say "pod-net-cut: $1 ($POD_IP) cut off: link $POD_LINK down; its processes keep running"
}

pod_net_restore() {
  _pod_net "$@"
  ip link set "$POD_LINK" up || die "could not bring $POD_LINK up"
  say "pod-net-restore: $1 ($POD_IP) joined again: link $POD_LINK up"
}

# pod-net-unsent NS/POD|POD_IP: what the pod's TCP connections hold in their send queues (sent
# but not acknowledged, or not sent yet): a cut link keeps it there, and the kernel delivers it
# when the link is up again, unless the socket was reset. One line: total bytes and connections,
# then each connection with a queue (local -> peer: bytes).
pod_net_unsent() {
  _pod_net "$@"
  local netns="kmpod-${POD_LINK#kmh-}" rows total=0 conns=0 line
  rows="$(ip netns exec "$netns" ss -tnH 2>/dev/null | awk '$3 > 0 {print $4 " -> " $5 ": " $3}')"
  while read -r line; do
    [ -n "$line" ] || continue
    total=$((total + ${line##*: })) conns=$((conns + 1))
  done <<<"$rows"
  say "pod-net-unsent: $1 ($POD_IP): $total byte(s) unsent on $conns connection(s)"
  [ -z "$rows" ] || printf '%s\n' "$rows"
}

# pod-freeze / pod-thaw NS/POD|POD_IP: SIGSTOP / SIGCONT every process of the pod's network
# namespace (a paused VM or a long GC pause: nothing of it runs, its sockets stay as they are).
pod_signal() {
  local verb="$1" sig="$2"
  shift 2
  _pod_net "$@"
  local netns="kmpod-${POD_LINK#kmh-}" pids
  pids="$(ip netns pids "$netns" 2>/dev/null | tr '\n' ' ')"
  [ -n "${pids// /}" ] || die "$verb: no process runs in $1's network namespace"
  # shellcheck disable=SC2086
  kill "-$sig" $pids || die "$verb: could not send SIG$sig to $pids"
  say "$verb: $1 ($POD_IP): SIG$sig to pid(s) ${pids% }"
}
pod_freeze() { pod_signal pod-freeze STOP "$@"; }
pod_thaw() { pod_signal pod-thaw CONT "$@"; }
