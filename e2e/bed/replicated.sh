# The replicated pair of the test bed (`e2e/testbed.sh up --brokers 3`): a source and a destination
# cluster of three brokers each, next to (not instead of) the one-broker pair. Sourced by
# e2e/testbed.sh after kafka.sh, not executed. See docs/testbed-faults.md.
#
# Each cluster is one KRaft controller (process.roles=controller, node id 100) and three brokers
# (process.roles=broker, node ids 1-3). The controller is separate so that any number of
# brokers can be killed, frozen or stopped without losing the metadata quorum: an unclean
# leader election needs every in-sync replica of a partition gone while the controller still
# elects leaders. The controller is not a target of the fault verbs.
#
#   r-source       like the one-broker source: StandardAuthorizer allowing what no ACL mentions,
#                  super users ANONYMOUS, admin, mirror; SCRAM-SHA-256/512 users admin, mirror, app
#                    broker N (1-3): 191N2 PLAINTEXT, 191N4 SASL_SSL (SCRAM-SHA-512), 191N5 SSL (mTLS),
#                                    191N7 PROXIED (PLAINTEXT) advertised as 191N6, the fault proxy
#                    controller:     19103
#   r-destination  like the one-broker destination: StandardAuthorizer, super user admin, ACLs for
#                  mirror; users admin, mirror, app (PLAIN, SCRAM-SHA-256/512)
#                    broker N (1-3): 291N2 SASL_PLAINTEXT, 291N4 SASL_PLAINTEXT (OAUTHBEARER),
#                                    291N7 PROXIED (SASL_PLAINTEXT) advertised as 291N6, the fault proxy
#                    controller:     29103 (SASL_PLAINTEXT, PLAIN, user admin)
#
# Both: default.replication.factor=3, min.insync.replicas=2 (internal topics too),
# unclean.leader.election.enable=false by default and settable per topic. The PROXIED listeners
# are reached through toxiproxy (e2e/bed/net.sh: 1NN6 -> 1NN7): a client bootstrapping on the
# 1NN6 ports learns the proxied address of every broker, so the network verbs break its
# connections; inter-broker traffic stays on the direct listeners. Brokers run with
# KMIRROR_R_BROKER_HEAP (384m), controllers with KMIRROR_R_CONTROLLER_HEAP (256m), every node with
# KMIRROR_R_JVM_OPTS (-XX:TieredStopAtLevel=1).
# Component names (pid files, logs, verbs): kafka-r-source-1..3, kafka-r-source-controller,
# kafka-r-destination-1..3, kafka-r-destination-controller.

KAFKA_R_HEAP="${KMIRROR_R_BROKER_HEAP:-384m}"
# The JIT's first tier only: eight JVMs starting at once on two cores spend most of their start
# in the optimising compiler (measured: up in 15 s instead of 40 s); the bed's traffic is light.
KAFKA_R_JVM_OPTS="${KMIRROR_R_JVM_OPTS--XX:TieredStopAtLevel=1}"
KAFKA_R_CONTROLLER_HEAP="${KMIRROR_R_CONTROLLER_HEAP:-256m}"
KAFKA_R_BROKERS=(1 2 3)
KAFKA_R_CONTROLLER_ID=100
KAFKA_R_SOURCE_ID="cnNyYy1rbWlycm9yLXRzdA"
KAFKA_R_DEST_ID="cmRzdC1rbWlycm9yLXRzdA"
# A broker that stops heartbeating (killed, frozen) is fenced after this long; its leaderships
# move then. It also bounds how long freeze-follower holds the high watermark back.
KAFKA_R_SESSION_MS="${KMIRROR_R_BROKER_SESSION_MS:-9000}"

# kafka_r_port CLUSTER BROKER SUFFIX: 191N2 / 291N2 style ports (BROKER 0: the controller, 19103).
kafka_r_port() {
  local base
  case "$1" in r-source) base=19100 ;; r-destination) base=29100 ;; *) die "no cluster $1" ;; esac
  echo $((base + 10 * $2 + $3))
}

# Comma-separated addresses of a listener (port suffix) on every broker of a cluster.
kafka_r_bootstrap() {
  local cluster="$1" suffix="$2" n out=""
  for n in "${KAFKA_R_BROKERS[@]}"; do out+="${out:+,}127.0.0.1:$(kafka_r_port "$cluster" "$n" "$suffix")"; done
  echo "$out"
}

kafka_r_common_props() {
  # kafka_r_common_props DATA_DIR: replication 3, min ISR 2 (internal topics too).
  kafka_common_props "$1" 3 2
  cat <<EOF
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
unclean.leader.election.enable=false
broker.session.timeout.ms=$KAFKA_R_SESSION_MS
replica.lag.time.max.ms=30000
num.replica.fetchers=1
EOF
}

kafka_r_source_security() {
  cat <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$KAFKA_PKI/server.p12
ssl.keystore.password=$KAFKA_TLS_PASSWORD
ssl.truststore.type=PKCS12
ssl.truststore.location=$KAFKA_PKI/truststore.p12
ssl.truststore.password=$KAFKA_TLS_PASSWORD
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+).*$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=true
super.users=User:ANONYMOUS;User:admin;User:mirror
EOF
}

kafka_r_source_props() {
  # kafka_r_source_props N (N=0: the controller)
  local n="$1" c="r-source"
  kafka_r_common_props "$KAFKA_DIR/$c-$(kafka_r_node_dir "$n")/data"
  echo "controller.quorum.voters=$KAFKA_R_CONTROLLER_ID@127.0.0.1:$(kafka_r_port "$c" 0 3)"
  echo "controller.listener.names=CONTROLLER"
  echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,PROXIED:PLAINTEXT"
  if ((n == 0)); then
    cat <<EOF
process.roles=controller
node.id=$KAFKA_R_CONTROLLER_ID
listeners=CONTROLLER://127.0.0.1:$(kafka_r_port "$c" 0 3)
EOF
  else
    local p s t x a
    p=$(kafka_r_port "$c" "$n" 2) s=$(kafka_r_port "$c" "$n" 4) t=$(kafka_r_port "$c" "$n" 5)
    x=$(kafka_r_port "$c" "$n" 7) a=$(kafka_r_port "$c" "$n" 6)
    cat <<EOF
process.roles=broker
node.id=$n
listeners=PLAINTEXT://127.0.0.1:$p,SASL_SSL://127.0.0.1:$s,SSL://127.0.0.1:$t,PROXIED://127.0.0.1:$x
advertised.listeners=PLAINTEXT://127.0.0.1:$p,SASL_SSL://127.0.0.1:$s,SSL://127.0.0.1:$t,PROXIED://127.0.0.1:$a
inter.broker.listener.name=PLAINTEXT
EOF
  fi
  kafka_r_source_security
}

kafka_r_dest_props() {
  local n="$1" c="r-destination"
  local plain="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"$KAFKA_ADMIN_PASSWORD\""
  plain+=" user_admin=\"$KAFKA_ADMIN_PASSWORD\" user_mirror=\"$KAFKA_MIRROR_PASSWORD\" user_app=\"$KAFKA_APP_PASSWORD\";"
  kafka_r_common_props "$KAFKA_DIR/$c-$(kafka_r_node_dir "$n")/data"
  cat <<EOF
controller.quorum.voters=$KAFKA_R_CONTROLLER_ID@127.0.0.1:$(kafka_r_port "$c" 0 3)
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,OAUTH:SASL_PLAINTEXT,PROXIED:SASL_PLAINTEXT
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.plain.sasl.jaas.config=$plain
listener.name.controller.sasl.enabled.mechanisms=PLAIN
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false
EOF
  if ((n == 0)); then
    cat <<EOF
process.roles=controller
node.id=$KAFKA_R_CONTROLLER_ID
listeners=CONTROLLER://127.0.0.1:$(kafka_r_port "$c" 0 3)
sasl.enabled.mechanisms=PLAIN
EOF
  else
    local p o x a
    p=$(kafka_r_port "$c" "$n" 2) o=$(kafka_r_port "$c" "$n" 4)
    x=$(kafka_r_port "$c" "$n" 7) a=$(kafka_r_port "$c" "$n" 6)
    cat <<EOF
process.roles=broker
node.id=$n
listeners=SASL_PLAINTEXT://127.0.0.1:$p,OAUTH://127.0.0.1:$o,PROXIED://127.0.0.1:$x
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$p,OAUTH://127.0.0.1:$o,PROXIED://127.0.0.1:$a
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=$plain
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.proxied.plain.sasl.jaas.config=$plain
listener.name.proxied.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.proxied.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.proxied.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=file://$KAFKA_PKI/jwks.json
sasl.oauthbearer.expected.audience=kmirror-testbed
sasl.oauthbearer.expected.issuer=http://127.0.0.1/kmirror-testbed
EOF
  fi
}

# Node directory/name suffix: 1..3 for brokers, "controller" for 0.
kafka_r_node_dir() { if (($1 == 0)); then echo controller; else echo "$1"; fi; }

# Every node of the pair as "CLUSTER N": controllers first.
kafka_r_nodes() {
  local c n
  for c in r-source r-destination; do
    for n in 0 "${KAFKA_R_BROKERS[@]}"; do echo "$c $n"; done
  done
}

# The port that tells a node is up: the controller port, or the broker's first listener.
kafka_r_node_port() { if (($2 == 0)); then kafka_r_port "$1" 0 3; else kafka_r_port "$1" "$2" 2; fi; }

kafka_r_running() {
  local c n
  while read -r c n; do
    is_running "kafka-$c-$(kafka_r_node_dir "$n")" && return 0
  done < <(kafka_r_nodes)
  return 1
}

kafka_r_dest_acls() {
  local marker="$KAFKA_DIR/r-destination-controller/.acls-v2"
  [ -f "$marker" ] && return 0
  # The same ACLs as the one-broker destination's (kafka_dest_acls), without a JVM per call.
  local admin=(python3 "$(dirname "${BASH_SOURCE[0]}")/kafka_admin.py" --sasl "admin:$KAFKA_ADMIN_PASSWORD"
    "$(kafka_r_bootstrap r-destination 2)" allow User:mirror)
  "${admin[@]}" topic '*' all >/dev/null &&
    "${admin[@]}" group '*' all >/dev/null &&
    "${admin[@]}" cluster kafka-cluster idempotentwrite,describe,describeconfigs,alter,alterconfigs,create >/dev/null ||
    die "could not create the replicated destination's ACLs for the mirror principal"
  touch "$marker"
}

# kafka_r_up: write configs, format new storage (in parallel), start what is not running, wait.
kafka_r_up() {
  local t0=$SECONDS c n dir name scram=() pids=() u m
  for u in "admin:$KAFKA_ADMIN_PASSWORD" "mirror:$KAFKA_MIRROR_PASSWORD" "app:$KAFKA_APP_PASSWORD"; do
    for m in SCRAM-SHA-256 SCRAM-SHA-512; do scram+=(-S "$m=[name=${u%%:*},password=${u#*:}]"); done
  done
  # Formatted storage is kept as a template in the cache: the next `up` after `down` copies it
  # instead of starting eight storage-tool JVMs.
  local templates key copied=0
  key="$(printf '%s ' "$KAFKA_R_SOURCE_ID" "$KAFKA_R_DEST_ID" "${scram[@]}" | md5sum | cut -c1-12)"
  templates="$KM_CACHE/kafka/$KAFKA_VERSION/replicated-storage-$key"
  while read -r c n; do
    dir="$c-$(kafka_r_node_dir "$n")"
    mkdir -p "$KAFKA_DIR/$dir"
    if [ "$c" = r-source ]; then kafka_r_source_props "$n"; else kafka_r_dest_props "$n"; fi |
      write_file "$KAFKA_DIR/$dir/server.properties"
    [ -f "$KAFKA_DIR/$dir/data/meta.properties" ] && continue
    if [ -f "$templates/$dir/meta.properties" ]; then
      rm -rf "$KAFKA_DIR/$dir/data" && cp -a "$templates/$dir" "$KAFKA_DIR/$dir/data"
      copied=$((copied + 1))
      continue
    fi
    local id="$KAFKA_R_SOURCE_ID"
    [ "$c" = r-destination ] && id="$KAFKA_R_DEST_ID"
    (KMIRROR_KAFKA_JVM_OPTS="$KAFKA_R_JVM_OPTS" kafka_format "$dir" "$KAFKA_VERSION" "$id" "${scram[@]}" &&
      mkdir -p "$templates" && rm -rf "$templates/$dir.tmp" &&
      cp -a "$KAFKA_DIR/$dir/data" "$templates/$dir.tmp" && mv "$templates/$dir.tmp" "$templates/$dir") &
    pids+=($!)
  done < <(kafka_r_nodes)
  for n in "${pids[@]}"; do wait "$n" || die "formatting the replicated clusters' storage failed"; done
  ((${#pids[@]} == 0)) || log "replicated pair: storage formatted ($((SECONDS - t0))s)"
  ((copied == 0)) || log "replicated pair: storage of $copied node(s) copied from $templates"
  while read -r c n; do
    dir="$c-$(kafka_r_node_dir "$n")"
    local heap="$KAFKA_R_HEAP"
    ((n == 0)) && heap="$KAFKA_R_CONTROLLER_HEAP"
    KAFKA_HEAP="$heap" KMIRROR_KAFKA_JVM_OPTS="$KAFKA_R_JVM_OPTS" \
      kafka_start "$dir" "$KAFKA_VERSION" "$(kafka_r_node_port "$c" "$n")"
  done < <(kafka_r_nodes)
  while read -r c n; do
    ((n == 0)) && continue
    kafka_wait "$c-$n" "$(kafka_r_node_port "$c" "$n")"
  done < <(kafka_r_nodes)
  kafka_r_dest_acls
  log "replicated pair (3 + 3 brokers) is up ($((SECONDS - t0))s)"
}

kafka_r_env() {
  kafka_r_running || return 0
  cat <<EOF
export KMIRROR_R_SOURCE_BOOTSTRAP='$(kafka_r_bootstrap r-source 2)'
export KMIRROR_R_SOURCE_SASL_SSL_BOOTSTRAP='$(kafka_r_bootstrap r-source 4)'
export KMIRROR_R_SOURCE_MTLS_BOOTSTRAP='$(kafka_r_bootstrap r-source 5)'
export KMIRROR_R_DEST_BOOTSTRAP='$(kafka_r_bootstrap r-destination 2)'
export KMIRROR_R_DEST_OAUTH_BOOTSTRAP='$(kafka_r_bootstrap r-destination 4)'
export KMIRROR_R_SOURCE_PROXIED_BOOTSTRAP='$(kafka_r_bootstrap r-source 6)'
export KMIRROR_R_DEST_PROXIED_BOOTSTRAP='$(kafka_r_bootstrap r-destination 6)'
export KMIRROR_R_BROKER_SESSION_MS='$KAFKA_R_SESSION_MS'
EOF
}

kafka_r_status() {
  local c n name state
  kafka_r_running || { echo "replicated pair: not started (up --brokers 3)"; return 0; }
  while read -r c n; do
    name="kafka-$c-$(kafka_r_node_dir "$n")"
    if is_running "$name"; then
      state="running (pid $(cat "$KM_PIDS/$name.pid"))"
      if [ "$(awk '{print $3}' "/proc/$(cat "$KM_PIDS/$name.pid")/stat" 2>/dev/null)" = T ]; then
        state="frozen (SIGSTOP; pid $(cat "$KM_PIDS/$name.pid"))"
      fi
    else
      state=stopped
    fi
    echo "$name: $state"
  done < <(kafka_r_nodes)
}

kafka_r_down() {
  local c n name
  while read -r c n; do
    name="kafka-$c-$(kafka_r_node_dir "$n")"
    if is_running "$name"; then kill -CONT "$(cat "$KM_PIDS/$name.pid")" 2>/dev/null || true; fi
  done < <(kafka_r_nodes)
  # Brokers before controllers (a broker's controlled shutdown needs its controller).
  while read -r c n; do
    ((n == 0)) || stop_pid "kafka-$c-$n" 30 &
  done < <(kafka_r_nodes)
  wait
  stop_pid kafka-r-source-controller 30
  stop_pid kafka-r-destination-controller 30
  rm -rf "$KAFKA_DIR"/r-source-* "$KAFKA_DIR"/r-destination-*
}
