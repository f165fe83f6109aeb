#!/usr/bin/env bash
# The kmirror demo (`make demo`): local test bed, kmirror installed with its Helm chart, a mirror
# under traffic, a failover, and a consumer group that resumes at the same offsets.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kmirror/target}"

# The test of this demo (e2e/tests/quick_start.rs) runs it beside other tests on the same clusters,
# so it names its own namespace and topic; a person running `make demo` never needs these.
NS="${KMIRROR_DEMO_NAMESPACE:-kmirror-demo}"
TOPIC="${KMIRROR_DEMO_TOPIC:-orders}"
GROUP="${KMIRROR_DEMO_GROUP:-demo-app}"
T0=$SECONDS
step() { printf '\n\033[1m== %s\033[0m (%ss)\n' "$*" "$((SECONDS - T0))"; }
say() { printf '   %s\n' "$*"; }

step "1/9 Building kmirror (operator, fetcher, kubectl plugin)"
# (`make test` runs this demo in a test: it builds what make test built, so nothing is rebuilt.)
# shellcheck disable=SC2086
cargo build ${KMIRROR_NODE_BUILD:---bins -p kmirror-operator -p kmirror-fetcher -p kubectl-mirror} 2>&1 | tail -n 1
PATH="$CARGO_TARGET_DIR/debug:$PATH"

step "2/9 Starting the test bed: two Kafka clusters, a Kubernetes control plane, a node agent"
e2e/testbed.sh up
eval "$(e2e/testbed.sh env)"
kubectl() { "$KMIRROR_KUBECTL" "$@"; }
helm() { "$KMIRROR_HELM" "$@"; }
kafka() { "$KMIRROR_KAFKA_RUN" "$@"; }
kubectl version 2>/dev/null | sed 's/^/   /'

step "3/9 Installing kmirror with the Helm chart into namespace $NS"
kubectl apply --server-side --force-conflicts -f charts/kmirror/crds/ | sed 's/^/   /'
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
helm upgrade --install kmirror charts/kmirror -n "$NS" \
  --set image.repository=kmirror --set image.tag=demo --wait --timeout 2m | sed 's/^/   /'
kubectl -n "$NS" get deploy,pods -l app.kubernetes.io/name=kmirror | sed 's/^/   /'

step "4/9 Creating topic $TOPIC (3 partitions) on the source and producing traffic"
kafka org.apache.kafka.tools.TopicCommand --bootstrap-server "$KMIRROR_SOURCE_BOOTSTRAP" \
  --create --if-not-exists --topic "$TOPIC" --partitions 3 2>/dev/null | sed 's/^/   /'
kafka org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records 3000 --record-size 300 \
  --throughput -1 --producer-props bootstrap.servers="$KMIRROR_SOURCE_BOOTSTRAP" | tail -n 1 | sed 's/^/   /'
# Traffic keeps flowing while the mirror starts.
# (started directly, not through the shell function, so that $! is the JVM itself)
"$KMIRROR_KAFKA_RUN" org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records 1000000 \
  --record-size 300 --throughput 200 --producer-props bootstrap.servers="$KMIRROR_SOURCE_BOOTSTRAP" >/dev/null 2>&1 &
PRODUCER=$!
trap 'kill $PRODUCER 2>/dev/null || true' EXIT
say "producer running at 200 records/s (pid $PRODUCER)"

step "5/9 Applying the example ClusterMirror (examples/minimal.yaml: every topic starting with 'orders')"
sed 's/^/   | /' examples/minimal.yaml
if [ "$TOPIC" = orders ]; then
  kubectl -n "$NS" apply -f examples/minimal.yaml | sed 's/^/   /'
else
  say "(the example's prefix 'orders' narrowed to '$TOPIC')"
  sed "s/- prefix: orders\$/- prefix: $TOPIC/" examples/minimal.yaml | kubectl -n "$NS" apply -f - | sed 's/^/   /'
fi

step "6/9 Watching the mirror converge (kubectl mirror status)"
converged=
for _ in $(seq 1 60); do
  if kubectl -n "$NS" get mirrortopics -o jsonpath='{.items[*].status.partitionsSummary}' 2>/dev/null | grep -q '^3/3$'; then
    converged=1
    break
  fi
  sleep 2
done
if [ -z "$converged" ]; then
  kubectl -n "$NS" get kmirror | sed 's/^/   /'
  echo "demo: the mirror did not reach 3/3 partitions MIRRORING within 120 s; see e2e/testbed.sh logs" >&2
  exit 1
fi
sleep 4
kubectl-mirror status minimal -n "$NS" | sed 's/^/   /'
kubectl -n "$NS" get kmirror | sed 's/^/   /'
kubectl -n "$NS" get pods -l app.kubernetes.io/name=kmirror-fetcher -o wide | sed 's/^/   /'

step "7/9 A consumer group reads 600 records on the source and commits"
kafka org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$KMIRROR_SOURCE_BOOTSTRAP" \
  --topic "$TOPIC" --group "$GROUP" --from-beginning --max-messages 600 >/dev/null 2>&1
# TOPIC PARTITION CURRENT-OFFSET of a group's describe output, sorted.
committed() { awk -v t="$TOPIC" '$2 == t {print $2, $3, $4}' | sort; }
SOURCE_DESCRIBE=$(kafka org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
  --bootstrap-server "$KMIRROR_SOURCE_BOOTSTRAP" --describe --group "$GROUP" 2>/dev/null)
awk 'NF {print "   source      | " $0}' <<<"$SOURCE_DESCRIBE"

step "8/9 Failing over: kubectl mirror failover minimal --topic $TOPIC --wait"
kill "$PRODUCER" 2>/dev/null || true
kubectl-mirror failover minimal --topic "$TOPIC" --wait --timeout 3m -n "$NS" | sed 's/^/   /'
DEST_DESCRIBE=$(kafka org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
  --bootstrap-server "$KMIRROR_DEST_BOOTSTRAP" --command-config "$KMIRROR_DEST_ADMIN_PROPERTIES" \
  --describe --group "$GROUP" 2>/dev/null)
awk 'NF {print "   destination | " $0}' <<<"$DEST_DESCRIBE"
if [ "$(committed <<<"$SOURCE_DESCRIBE")" != "$(committed <<<"$DEST_DESCRIBE")" ] ||
  [ -z "$(committed <<<"$SOURCE_DESCRIBE")" ]; then
  echo "demo: the group's committed offsets on the destination are not the source's" >&2
  exit 1
fi
say "the group's committed offsets are the same on both clusters"

step "9/9 The same group resumes on the destination: the first records it reads"
kafka org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$KMIRROR_DEST_BOOTSTRAP" \
  --consumer.config "$KMIRROR_DEST_ADMIN_PROPERTIES" --topic "$TOPIC" --group "$GROUP" --max-messages 3 \
  --property print.partition=true --property print.offset=true --property print.value=false 2>/dev/null |
  sed 's/^/   /'
say "Each partition continues at the CURRENT-OFFSET the group had committed on the source."

cat <<EOF

Demo finished in $((SECONDS - T0))s. Explore:
  eval "\$(e2e/testbed.sh env)"
  \$KMIRROR_KUBECTL -n $NS get kmirror
  $CARGO_TARGET_DIR/debug/kubectl-mirror status -n $NS
  \$KMIRROR_KUBECTL -n $NS describe mirrortopic
  e2e/testbed.sh logs            # component and pod logs
  $CARGO_TARGET_DIR/debug/kubectl-mirror failback minimal --all -n $NS --wait   # copy back what changed
Tear down:
  e2e/testbed.sh down
EOF
