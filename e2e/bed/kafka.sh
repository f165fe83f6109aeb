# The Kafka half of the test bed. Sourced by e2e/testbed.sh after common.sh.
#
# Clusters (all single-node, loopback, started from the official jars on Maven Central):
#
#   source       Kafka $KAFKA_VERSION KRaft combined node, StandardAuthorizer that allows what no
#                ACL mentions (ANONYMOUS, admin and mirror are super users), so ACLs can be synced
#                  19092 PLAINTEXT
#                  19094 SASL_SSL   (SCRAM-SHA-512; users admin, mirror)
#                  19095 SSL        (mutual TLS; client certificate required)
#                  19093 controller
#   destination  Kafka $KAFKA_VERSION KRaft combined node, StandardAuthorizer
#                  29092 SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
#                  29094 SASL_PLAINTEXT (OAUTHBEARER: RS256 JWTs checked against the bed's JWKS)
#                  29095 SASL_SSL (SCRAM-SHA-512; what the README's first mirror connects to)
#                  29093 controller (SASL_PLAINTEXT, PLAIN, user admin)
#                  users: admin (super user), mirror (fetchers), app (no ACLs)
#   oidc         29096 an OAuth 2 token endpoint (client credentials; e2e/bed/oidc.py) whose
#                tokens carry sub=mirror (client kmirror-mirror) or sub=app (client kmirror-app)
#   compat39     (up --compat) Kafka 3.9.1 KRaft, 39092 PLAINTEXT, 39093 controller
#   compat28     (up --compat) Kafka 2.8.2 with ZooKeeper, 28092 PLAINTEXT, ZooKeeper 22181
#   compat21     (up --compat) Kafka 2.1.1 with ZooKeeper (same server, chroot /kafka21), 21092
#                PLAINTEXT, ACL authorizer that allows what no ACL names
#
# Jars are fetched once with Maven into $KM_CACHE/kafka/<version>/libs.

KAFKA_VERSION="${KMIRROR_KAFKA_VERSION:-4.1.1}"
KAFKA_LOG4J2_VERSION="2.24.3"
KAFKA_COMPAT39_VERSION="3.9.1"
KAFKA_COMPAT28_VERSION="2.8.2"
KAFKA_COMPAT21_VERSION="2.1.1"
KAFKA_HEAP="${KMIRROR_BROKER_HEAP:-768m}"

KAFKA_DIR="$KM_RUN/kafka"
KAFKA_PKI="$KAFKA_DIR/pki"
# Credentials of the test bed (loopback only, throwaway).
KAFKA_ADMIN_PASSWORD="admin-secret"
KAFKA_MIRROR_PASSWORD="mirror-secret"
KAFKA_APP_PASSWORD="app-secret"
KAFKA_TLS_PASSWORD="testbed-store"
KAFKA_OIDC_MIRROR_SECRET="mirror-oauth-secret"
KAFKA_OIDC_APP_SECRET="app-oauth-secret"
KAFKA_OIDC_PORT=29096
KAFKA_OIDC_SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/oidc.py"
# Fixed cluster IDs make logs and state easier to read; they are base64 UUIDs.
KAFKA_SOURCE_ID="c3JjLWttaXJyb3ItdGVzdA"
KAFKA_DEST_ID="ZHN0LWttaXJyb3ItdGVzdA"
KAFKA_COMPAT39_ID="Mzk5LWttaXJyb3ItdGVzdA"

kafka_libs() { echo "$KM_CACHE/kafka/$1/libs"; }

# kafka_fetch VERSION DEP...: resolve the runtime classpath of the given Maven coordinates
# (group:artifact:version) into $KM_CACHE/kafka/VERSION/libs, once.
kafka_fetch() {
  local version="$1"; shift
  local dir; dir="$(dirname "$(kafka_libs "$version")")"
  [ -f "$dir/.complete" ] && return 0
  log "downloading Apache Kafka $version jars from Maven Central (once)"
  rm -rf "$dir" && mkdir -p "$dir"
  local deps="" g a v
  for coord in "$@"; do
    IFS=: read -r g a v <<<"$coord"
    deps+="<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
  done
  cat >"$dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.kmirror.testbed</groupId><artifactId>kafka-libs</artifactId><version>$version</version>
  <packaging>pom</packaging>
  <dependencies>$deps</dependencies>
</project>
EOF
  mvn -B -q -Dstyle.color=never -f "$dir/pom.xml" -Dmaven.repo.local="$KM_CACHE/m2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dir/libs" >&2 \
    || die "maven could not fetch Kafka $version"
  touch "$dir/.complete"
}

kafka_provision() {
  kafka_fetch "$KAFKA_VERSION" \
    "org.apache.kafka:kafka_2.13:$KAFKA_VERSION" \
    "org.apache.kafka:kafka-tools:$KAFKA_VERSION" \
    "org.apache.kafka:connect-mirror:$KAFKA_VERSION" \
    "org.apache.logging.log4j:log4j-core:$KAFKA_LOG4J2_VERSION" \
    "org.apache.logging.log4j:log4j-slf4j-impl:$KAFKA_LOG4J2_VERSION"
}

kafka_provision_compat() {
  kafka_fetch "$KAFKA_COMPAT39_VERSION" \
    "org.apache.kafka:kafka_2.13:$KAFKA_COMPAT39_VERSION" \
    "ch.qos.reload4j:reload4j:1.2.25" \
    "org.slf4j:slf4j-reload4j:1.7.36"
  kafka_fetch "$KAFKA_COMPAT28_VERSION" \
    "org.apache.kafka:kafka_2.13:$KAFKA_COMPAT28_VERSION" \
    "log4j:log4j:1.2.17" \
    "org.slf4j:slf4j-log4j12:1.7.30"
  # Kafka 2.1's own ZooKeeper client (3.4.13) cannot connect on Java 14 and later (it reads the
  # server's address back from a string whose format changed); the 3.5 client the 2.8 broker
  # uses speaks the same API. Only that library is swapped: the broker is 2.1.1's own.
  kafka_fetch "$KAFKA_COMPAT21_VERSION" \
    "org.apache.kafka:kafka_2.12:$KAFKA_COMPAT21_VERSION" \
    "org.apache.zookeeper:zookeeper:3.5.9" \
    "log4j:log4j:1.2.17" \
    "org.slf4j:slf4j-log4j12:1.7.25"
}

# Logging configs: brokers log at INFO to their log file; tools only warn.
kafka_write_log_configs() {
  mkdir -p "$KAFKA_DIR"
  write_file "$KAFKA_DIR/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.ak.name = org.apache.kafka
logger.ak.level = INFO
logger.req.name = kafka.request.logger
logger.req.level = WARN
EOF
  sed -e 's/^rootLogger.level = .*/rootLogger.level = WARN/' \
      -e 's/^logger.kafka.level = .*/logger.kafka.level = WARN/' \
      -e 's/^logger.ak.level = .*/logger.ak.level = WARN/' \
      -e 's/^appender.out.type = Console/appender.out.type = Console\nappender.out.target = SYSTEM_ERR/' \
      "$KAFKA_DIR/log4j2.properties" | write_file "$KAFKA_DIR/tools-log4j2.properties"
  write_file "$KAFKA_DIR/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
EOF
}

# A CA, a server certificate for 127.0.0.1/localhost and a client certificate (CN=mirror) for
# mutual TLS, as PEM files plus PKCS12 stores for the broker.
kafka_pki() {
  [ -f "$KAFKA_PKI/server.p12" ] && return 0
  mkdir -p "$KAFKA_PKI"
  (
    cd "$KAFKA_PKI"
    openssl req -x509 -new -nodes -newkey rsa:2048 -keyout ca.key -out ca.crt -days 30 \
      -subj "/CN=kmirror-testbed-ca" 2>/dev/null
    openssl req -new -nodes -newkey rsa:2048 -keyout server.key -out server.csr \
      -subj "/CN=localhost" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -out server.crt -extfile server.ext 2>/dev/null
    openssl req -new -nodes -newkey rsa:2048 -keyout client.key -out client.csr \
      -subj "/CN=mirror" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -out client.crt -extfile client.ext 2>/dev/null
    openssl pkcs12 -export -in server.crt -inkey server.key -certfile ca.crt -name server \
      -out server.p12 -password "pass:$KAFKA_TLS_PASSWORD"
    keytool -importcert -noprompt -alias ca -file ca.crt -keystore truststore.p12 \
      -storetype PKCS12 -storepass "$KAFKA_TLS_PASSWORD" >/dev/null 2>&1
    rm -f ./*.csr ./*.ext
  ) || die "could not generate the Kafka test certificates"
}

# The identity provider's signing key, the JWKS the destination checks tokens against, and the
# OAuth clients (client_id:client_secret:principal).
kafka_oidc_keys() {
  [ -f "$KAFKA_PKI/jwks.json" ] && return 0
  mkdir -p "$KAFKA_PKI"
  openssl genrsa -out "$KAFKA_PKI/oidc.key" 2048 2>/dev/null &&
    python3 "$KAFKA_OIDC_SCRIPT" jwks "$KAFKA_PKI/oidc.key" >"$KAFKA_PKI/jwks.json.tmp" &&
    mv "$KAFKA_PKI/jwks.json.tmp" "$KAFKA_PKI/jwks.json" ||
    die "could not generate the OAuth signing key"
  printf 'kmirror-mirror:%s:mirror\nkmirror-app:%s:app\n' \
    "$KAFKA_OIDC_MIRROR_SECRET" "$KAFKA_OIDC_APP_SECRET" >"$KAFKA_PKI/oidc-clients"
}

kafka_oidc_up() {
  if ! is_running oidc; then
    port_open 127.0.0.1 "$KAFKA_OIDC_PORT" &&
      die "port $KAFKA_OIDC_PORT is in use by something this test bed did not start"
    start_bg oidc python3 "$KAFKA_OIDC_SCRIPT" serve "$KAFKA_OIDC_PORT" \
      "$KAFKA_PKI/oidc.key" "$KAFKA_PKI/oidc-clients"
  fi
  wait_for "the OAuth token endpoint on 127.0.0.1:$KAFKA_OIDC_PORT" 30 oidc \
    port_open 127.0.0.1 "$KAFKA_OIDC_PORT" || die "the OAuth token endpoint did not start"
}

# Launchers for the JVM side, written into $KM_RUN/bin:
#   kafka-java VERSION HEAP CLASS ARGS...   any class of the cached jars of VERSION (brokers)
#   kafka-run CLASS ARGS...                 a Kafka tool of the main version, warnings only
kafka_write_launchers() {
  mkdir -p "$KM_RUN/bin"
  write_file "$KM_RUN/bin/kafka-java" 755 <<EOF
#!/usr/bin/env bash
version="\$1" heap="\$2"; shift 2
case "\$version" in
  4.*) logopt="-Dlog4j2.configurationFile=$KAFKA_DIR/log4j2.properties" ;;
  *) logopt="-Dlog4j.configuration=file:$KAFKA_DIR/log4j.properties" ;;
esac
# KMIRROR_KAFKA_JVM_OPTS: extra JVM options (word-split), e.g. the replicated pair's.
# shellcheck disable=SC2086
exec java -Xms256m "-Xmx\$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \${KMIRROR_KAFKA_JVM_OPTS:-} \\
  -XX:InitiatingHeapOccupancyPercent=35 -Djava.awt.headless=true \\
  -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=file://$KAFKA_PKI/jwks.json \\
  "\$logopt" -Dkafka.logs.dir="$KAFKA_DIR" -cp "$KM_CACHE/kafka/\$version/libs/*" "\$@"
EOF
  write_file "$KM_RUN/bin/kafka-run" 755 <<EOF
#!/usr/bin/env bash
# e.g. kafka-run org.apache.kafka.tools.AclCommand --bootstrap-server 127.0.0.1:29092 \\
#        --command-config $KAFKA_DIR/dest-admin.properties --list
exec java -Xmx\${KAFKA_TOOL_HEAP:-512m} -XX:+UseG1GC -Djava.awt.headless=true \\
  -Dlog4j2.configurationFile=$KAFKA_DIR/tools-log4j2.properties -cp "$(kafka_libs "$KAFKA_VERSION")/*" "\$@"
EOF
}

kafka_common_props() {
  # kafka_common_props DATA_DIR [REPLICATION_FACTOR MIN_INSYNC_REPLICAS] (default 1 1)
  local rf="${2:-1}" min_isr="${3:-1}"
  cat <<EOF
log.dirs=$1
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$min_isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
log.segment.bytes=67108864
auto.create.topics.enable=false
log.cleaner.backoff.ms=1000
delete.topic.enable=true
EOF
}

kafka_source_props() {
  local dir="$KAFKA_DIR/source"
  kafka_common_props "$dir/data"
  cat <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:19093
listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,SASL_SSL://127.0.0.1:19094,SSL://127.0.0.1:19095
advertised.listeners=PLAINTEXT://127.0.0.1:19092,SASL_SSL://127.0.0.1:19094,SSL://127.0.0.1:19095
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
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

kafka_dest_props() {
  local dir="$KAFKA_DIR/destination"
  kafka_common_props "$dir/data"
  local plain="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"$KAFKA_ADMIN_PASSWORD\""
  plain+=" user_admin=\"$KAFKA_ADMIN_PASSWORD\" user_mirror=\"$KAFKA_MIRROR_PASSWORD\" user_app=\"$KAFKA_APP_PASSWORD\";"
  cat <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:29093
listeners=SASL_PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093,OAUTH://127.0.0.1:29094,SASL_SSL://127.0.0.1:29095
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:29092,OAUTH://127.0.0.1:29094,SASL_SSL://127.0.0.1:29095
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,OAUTH:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=$plain
listener.name.controller.plain.sasl.jaas.config=$plain
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$KAFKA_PKI/server.p12
ssl.keystore.password=$KAFKA_TLS_PASSWORD
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=file://$KAFKA_PKI/jwks.json
sasl.oauthbearer.expected.audience=kmirror-testbed
sasl.oauthbearer.expected.issuer=http://127.0.0.1/kmirror-testbed
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false
EOF
}

kafka_compat39_props() {
  kafka_common_props "$KAFKA_DIR/compat39/data"
  cat <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:39093
listeners=PLAINTEXT://127.0.0.1:39092,CONTROLLER://127.0.0.1:39093
advertised.listeners=PLAINTEXT://127.0.0.1:39092
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
EOF
}

kafka_compat28_props() {
  kafka_common_props "$KAFKA_DIR/compat28/data"
  cat <<EOF
broker.id=0
zookeeper.connect=127.0.0.1:22181
listeners=PLAINTEXT://127.0.0.1:28092
advertised.listeners=PLAINTEXT://127.0.0.1:28092
EOF
}

# The oldest source kmirror supports. Its ACLs live in ZooKeeper (the authorizer of its day);
# what no ACL names is allowed, so the tests need no credentials to create the ACLs they sync.
kafka_compat21_props() {
  kafka_common_props "$KAFKA_DIR/compat21/data"
  cat <<EOF
broker.id=0
zookeeper.connect=127.0.0.1:22181/kafka21
listeners=PLAINTEXT://127.0.0.1:21092
advertised.listeners=PLAINTEXT://127.0.0.1:21092
authorizer.class.name=kafka.security.auth.SimpleAclAuthorizer
allow.everyone.if.no.acl.found=true
super.users=User:ANONYMOUS
EOF
}

# kafka_format NAME VERSION CLUSTER_ID [STORAGE TOOL ARGS...]: format the KRaft data dir once.
kafka_format() {
  local name="$1" version="$2" cid="$3"; shift 3
  local dir="$KAFKA_DIR/$name"
  [ -f "$dir/data/meta.properties" ] && return 0
  mkdir -p "$dir/data"
  ("$KM_RUN/bin/kafka-java" "$version" 256m kafka.tools.StorageTool format -t "$cid" \
    -c "$dir/server.properties" --ignore-formatted "$@") >>"$KM_LOGS/kafka-$name.log" 2>&1 \
    || { tail -n 20 "$KM_LOGS/kafka-$name.log" >&2; die "formatting the $name storage failed"; }
}

# kafka_start NAME VERSION PORT: start a broker from $KAFKA_DIR/NAME/server.properties.
kafka_start() {
  local name="$1" version="$2" port="$3"
  is_running "kafka-$name" && return 0
  port_open 127.0.0.1 "$port" && die "port $port is in use by something this test bed did not start"
  start_bg "kafka-$name" "$KM_RUN/bin/kafka-java" "$version" "$KAFKA_HEAP" kafka.Kafka \
    "$KAFKA_DIR/$name/server.properties"
}

kafka_started() {
  # kafka_started NAME PORT: the broker logged its start and accepts connections.
  port_open 127.0.0.1 "$2" && grep -qE 'Kafka Server started|\] started \(kafka.server.KafkaServer\)' "$KM_LOGS/kafka-$1.log"
}

kafka_wait() {
  local name="$1" port="$2"
  wait_for "kafka $name on 127.0.0.1:$port" "${KMIRROR_KAFKA_START_TIMEOUT:-90}" "kafka-$name" \
    kafka_started "$name" "$port" || die "kafka $name did not start"
}

kafka_write_client_configs() {
  # Java client property files for Kafka's own tools (kafka-acls, kafka-consumer-groups, ...).
  write_file "$KAFKA_DIR/dest-admin.properties" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$KAFKA_ADMIN_PASSWORD";
EOF
  sed -e "s/username=\"admin\" password=\"$KAFKA_ADMIN_PASSWORD\"/username=\"app\" password=\"$KAFKA_APP_PASSWORD\"/" \
    "$KAFKA_DIR/dest-admin.properties" | write_file "$KAFKA_DIR/dest-app.properties"
  sed -e "s/username=\"admin\" password=\"$KAFKA_ADMIN_PASSWORD\"/username=\"mirror\" password=\"$KAFKA_MIRROR_PASSWORD\"/" \
    "$KAFKA_DIR/dest-admin.properties" | write_file "$KAFKA_DIR/dest-mirror.properties"
  write_file "$KAFKA_DIR/source-sasl-ssl.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$KAFKA_ADMIN_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$KAFKA_PKI/ca.crt
EOF
}

# The mirror principal is what a ClusterMirror's destination connection uses: it writes
# (fetchers), creates topics, alters configs and ACLs (operator). app gets nothing.
kafka_dest_acls() {
  [ -f "$KAFKA_DIR/destination/.acls-v2" ] && return 0
  local run=("$KM_RUN/bin/kafka-run" org.apache.kafka.tools.AclCommand
    --bootstrap-server 127.0.0.1:29092 --command-config "$KAFKA_DIR/dest-admin.properties")
  "${run[@]}" --add --allow-principal User:mirror --operation All --topic '*' >/dev/null &&
    "${run[@]}" --add --allow-principal User:mirror --operation All --group '*' >/dev/null &&
    "${run[@]}" --add --allow-principal User:mirror --operation IdempotentWrite \
      --operation Describe --operation DescribeConfigs --operation Alter --operation AlterConfigs \
      --operation Create --cluster >/dev/null ||
    die "could not create the destination ACLs for the mirror principal"
  touch "$KAFKA_DIR/destination/.acls-v2"
}

kafka_up() {
  kafka_provision
  kafka_write_log_configs
  kafka_write_launchers
  kafka_pki
  kafka_oidc_keys
  mkdir -p "$KAFKA_DIR/source" "$KAFKA_DIR/destination"
  kafka_source_props | write_file "$KAFKA_DIR/source/server.properties"
  kafka_dest_props | write_file "$KAFKA_DIR/destination/server.properties"
  local scram=()
  for u in "admin:$KAFKA_ADMIN_PASSWORD" "mirror:$KAFKA_MIRROR_PASSWORD" "app:$KAFKA_APP_PASSWORD"; do
    for m in SCRAM-SHA-256 SCRAM-SHA-512; do
      scram+=(-S "$m=[name=${u%%:*},password=${u#*:}]")
    done
  done
  kafka_format source "$KAFKA_VERSION" "$KAFKA_SOURCE_ID" "${scram[@]}"
  kafka_format destination "$KAFKA_VERSION" "$KAFKA_DEST_ID" "${scram[@]}"
  kafka_start source "$KAFKA_VERSION" 19092
  kafka_start destination "$KAFKA_VERSION" 29092
  kafka_oidc_up
  kafka_write_client_configs
  kafka_wait source 19092
  kafka_wait destination 29092
  # A destination started by an older version of this script lacks the OAUTHBEARER listener.
  port_open 127.0.0.1 29094 ||
    log "warning: the destination has no OAUTHBEARER listener on 29094 (started with an older configuration); run: e2e/testbed.sh restart kafka-destination"
  port_open 127.0.0.1 29095 ||
    log "warning: the destination has no SASL_SSL listener on 29095 (started with an older configuration); run: e2e/testbed.sh restart kafka-destination"
  kafka_dest_acls
}

kafka_up_compat() {
  kafka_provision_compat
  kafka_write_log_configs
  kafka_write_launchers
  mkdir -p "$KAFKA_DIR/compat39" "$KAFKA_DIR/compat28/data" "$KAFKA_DIR/compat21/data" \
    "$KAFKA_DIR/zookeeper/data"
  kafka_compat39_props | write_file "$KAFKA_DIR/compat39/server.properties"
  kafka_format compat39 "$KAFKA_COMPAT39_VERSION" "$KAFKA_COMPAT39_ID"
  kafka_start compat39 "$KAFKA_COMPAT39_VERSION" 39092
  if kafka_zookeeper_sources; then
    write_file "$KAFKA_DIR/zookeeper/zk.properties" <<EOF
dataDir=$KAFKA_DIR/zookeeper/data
clientPort=22181
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok
EOF
    kafka_compat28_props | write_file "$KAFKA_DIR/compat28/server.properties"
    kafka_compat21_props | write_file "$KAFKA_DIR/compat21/server.properties"
    if ! is_running zookeeper; then
      # ZooKeeper restores sessions from its snapshot and keeps their ephemeral nodes until they
      # time out, so a broker started right after a restart finds its own old /brokers/ids/0 and
      # exits. The old sources only hold topics the tests create per run: start all empty.
      is_running kafka-compat28 && stop_pid kafka-compat28 30
      is_running kafka-compat21 && stop_pid kafka-compat21 30
      rm -rf "$KAFKA_DIR/zookeeper/data" "$KAFKA_DIR/compat28/data" "$KAFKA_DIR/compat21/data"
      mkdir -p "$KAFKA_DIR/zookeeper/data" "$KAFKA_DIR/compat28/data" "$KAFKA_DIR/compat21/data"
      start_bg zookeeper "$KM_RUN/bin/kafka-java" "$KAFKA_COMPAT28_VERSION" 256m \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$KAFKA_DIR/zookeeper/zk.properties"
    fi
    wait_for "zookeeper on 127.0.0.1:22181" 60 zookeeper port_open 127.0.0.1 22181 || die "zookeeper did not start"
    kafka_start compat28 "$KAFKA_COMPAT28_VERSION" 28092
    kafka_start compat21 "$KAFKA_COMPAT21_VERSION" 21092
  fi
  kafka_wait compat39 39092
  if kafka_zookeeper_sources; then
    kafka_wait compat28 28092
    kafka_wait compat21 21092
  fi
}

# The ZooKeeper-based sources (Kafka 2.8 and 2.1) predate Java 17 support and run on it all
# the same; KMIRROR_ZOOKEEPER_SOURCES=0 leaves them (and ZooKeeper) out.
kafka_zookeeper_sources() {
  [ "${KMIRROR_ZOOKEEPER_SOURCES:-1}" != 0 ]
}

# Brokers by component name: NAME VERSION PORT HEAP. The replicated pair's nodes
# (kafka-r-source-1, ..., kafka-r-destination-controller) are known when e2e/bed/replicated.sh
# is sourced.
kafka_broker_spec() {
  case "$1" in
    kafka-source) echo "source $KAFKA_VERSION 19092 $KAFKA_HEAP" ;;
    kafka-destination) echo "destination $KAFKA_VERSION 29092 $KAFKA_HEAP" ;;
    kafka-compat39) echo "compat39 $KAFKA_COMPAT39_VERSION 39092 $KAFKA_HEAP" ;;
    kafka-compat28) echo "compat28 $KAFKA_COMPAT28_VERSION 28092 $KAFKA_HEAP" ;;
    kafka-compat21) echo "compat21 $KAFKA_COMPAT21_VERSION 21092 $KAFKA_HEAP" ;;
    kafka-r-source-[123] | kafka-r-destination-[123])
      local c="${1#kafka-}" n="${1##*-}"
      c="${c%-*}"
      echo "$c-$n $KAFKA_VERSION $(kafka_r_port "$c" "$n" 2) $KAFKA_R_HEAP" ;;
    kafka-r-source-controller | kafka-r-destination-controller)
      local c="${1#kafka-}"
      c="${c%-controller}"
      echo "$c-controller $KAFKA_VERSION $(kafka_r_port "$c" 0 3) $KAFKA_R_CONTROLLER_HEAP" ;;
    *) die "unknown broker $1 (kafka-source, kafka-destination, kafka-compat39, kafka-compat28, kafka-compat21, kafka-r-source-1..3, kafka-r-destination-1..3)" ;;
  esac
}

# Stop one broker, keeping its data (for restart tests).
kafka_stop_one() {
  kafka_broker_spec "$1" >/dev/null
  stop_pid "$1" 30
}

kafka_start_one() {
  local name version port heap lines
  read -r name version port heap <<<"$(kafka_broker_spec "$1")"
  lines=$(wc -l <"$KM_LOGS/kafka-$name.log" 2>/dev/null || echo 0)
  # A restart runs the bed's current configuration (a listener added since `up` appears).
  case "$name" in
    source) kafka_source_props | write_file "$KAFKA_DIR/source/server.properties" ;;
    destination) kafka_dest_props | write_file "$KAFKA_DIR/destination/server.properties" ;;
  esac
  local opts="${KMIRROR_KAFKA_JVM_OPTS:-}"
  case "$name" in r-*) opts="$KAFKA_R_JVM_OPTS" ;; esac
  KAFKA_HEAP="$heap" KMIRROR_KAFKA_JVM_OPTS="$opts" kafka_start "$name" "$version" "$port"
  wait_for "kafka $name to start" "${KMIRROR_KAFKA_START_TIMEOUT:-90}" "kafka-$name" \
    kafka_started_after "$name" "$port" "$lines" || die "kafka $name did not start"
}

# kafka_started_after NAME PORT LINES: started, judging only log lines after LINES.
kafka_started_after() {
  port_open 127.0.0.1 "$2" &&
    log_has_after "$KM_LOGS/kafka-$1.log" "$3" \
      'Kafka Server started|\] started \(kafka\.server\.KafkaServer\)|Kafka controller started'
}

kafka_env() {
  cat <<EOF
export KMIRROR_KAFKA_VERSION='$KAFKA_VERSION'
export KMIRROR_SOURCE_BOOTSTRAP='127.0.0.1:19092'
export KMIRROR_SOURCE_SASL_SSL_BOOTSTRAP='127.0.0.1:19094'
export KMIRROR_SOURCE_MTLS_BOOTSTRAP='127.0.0.1:19095'
export KMIRROR_DEST_BOOTSTRAP='127.0.0.1:29092'
export KMIRROR_DEST_OAUTH_BOOTSTRAP='127.0.0.1:29094'
export KMIRROR_DEST_SASL_SSL_BOOTSTRAP='127.0.0.1:29095'
export KMIRROR_OIDC_TOKEN_URL='http://127.0.0.1:$KAFKA_OIDC_PORT/token'
export KMIRROR_OIDC_MIRROR_CLIENT_ID='kmirror-mirror'
export KMIRROR_OIDC_MIRROR_CLIENT_SECRET='$KAFKA_OIDC_MIRROR_SECRET'
export KMIRROR_OIDC_APP_CLIENT_ID='kmirror-app'
export KMIRROR_OIDC_APP_CLIENT_SECRET='$KAFKA_OIDC_APP_SECRET'
export KMIRROR_ADMIN_USER='admin'
export KMIRROR_ADMIN_PASSWORD='$KAFKA_ADMIN_PASSWORD'
export KMIRROR_MIRROR_USER='mirror'
export KMIRROR_MIRROR_PASSWORD='$KAFKA_MIRROR_PASSWORD'
export KMIRROR_APP_USER='app'
export KMIRROR_APP_PASSWORD='$KAFKA_APP_PASSWORD'
export KMIRROR_CA='$KAFKA_PKI/ca.crt'
export KMIRROR_CLIENT_CERT='$KAFKA_PKI/client.crt'
export KMIRROR_CLIENT_KEY='$KAFKA_PKI/client.key'
export KMIRROR_KAFKA_CLASSPATH='$(kafka_libs "$KAFKA_VERSION")/*'
export KMIRROR_KAFKA_RUN='$KM_RUN/bin/kafka-run'
export KMIRROR_DEST_ADMIN_PROPERTIES='$KAFKA_DIR/dest-admin.properties'
export KMIRROR_DEST_APP_PROPERTIES='$KAFKA_DIR/dest-app.properties'
export KMIRROR_DEST_MIRROR_PROPERTIES='$KAFKA_DIR/dest-mirror.properties'
export KMIRROR_SOURCE_SASL_SSL_PROPERTIES='$KAFKA_DIR/source-sasl-ssl.properties'
EOF
  if is_running kafka-compat39; then echo "export KMIRROR_COMPAT39_BOOTSTRAP='127.0.0.1:39092'"; fi
  if is_running kafka-compat28; then echo "export KMIRROR_COMPAT28_BOOTSTRAP='127.0.0.1:28092'"; fi
  if is_running kafka-compat21; then echo "export KMIRROR_COMPAT21_BOOTSTRAP='127.0.0.1:21092'"; fi
}

kafka_status() {
  local n
  for n in kafka-source kafka-destination oidc kafka-compat39 zookeeper kafka-compat28 kafka-compat21; do
    if is_running "$n"; then echo "$n: running (pid $(cat "$KM_PIDS/$n.pid"))"; else echo "$n: stopped"; fi
  done
}

kafka_down() {
  local n
  for n in kafka-compat21 kafka-compat28 zookeeper kafka-compat39 oidc kafka-destination kafka-source; do
    stop_pid "$n" 30
  done
  rm -rf "$KAFKA_DIR"
}
