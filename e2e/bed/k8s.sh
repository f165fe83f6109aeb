# Kubernetes control plane of the test bed. Sourced after e2e/bed/common.sh, not executed.
#
# Parts
#   provision  etcd, kube-apiserver, kube-controller-manager and kubectl are built from the pinned
#              k8s.io/kubernetes Go module (a wrapper module that `replace`s every staging repo
#              k8s.io/<repo> with its published v0.X.Y tag), and helm v3 from its own module.
#              Binaries land in $KM_CACHE/k8s/<k8s version>/bin; the Go module and build caches
#              are $KM_CACHE/go/{mod,build}. A marker file says the build finished.
#   pki        a CA, the apiserver serving cert, an admin client cert (O=system:masters) and the
#              service-account signing key pair, once per run dir, in $KM_RUN/k8s/pki;
#              the admin kubeconfig is $KM_RUN/k8s/admin.kubeconfig.
#   processes  etcd (data in $KM_RUN/k8s/etcd, no fsync), kube-apiserver (RBAC, ServiceAccount
#              admission on, TokenRequest served), kube-controller-manager (the controllers in
#              K8S_CONTROLLERS). No scheduler and no kubelet: Pods stay Pending unless the e2e
#              harness binds and runs them.
#
# Ports (all on 127.0.0.1; Kafka uses 19092-19095, 29092-29095, 39092-39093, 28092, 22181)
#   12379  etcd clients            12380  etcd peers
#   16443  kube-apiserver (https)  16457  kube-controller-manager (https, /healthz)
#
# Functions: k8s_provision, k8s_up, k8s_env, k8s_status, k8s_down.

K8S_VERSION="${KMIRROR_K8S_VERSION:-v1.36.3}"
K8S_HELM_VERSION="${KMIRROR_HELM_VERSION:-v3.22.0}"
K8S_ETCD_PORT="${KMIRROR_ETCD_PORT:-12379}"
K8S_ETCD_PEER_PORT="${KMIRROR_ETCD_PEER_PORT:-12380}"
K8S_API_PORT="${KMIRROR_APISERVER_PORT:-16443}"
K8S_KCM_PORT="${KMIRROR_KCM_PORT:-16457}"
K8S_SERVICE_CIDR="10.0.0.0/24"
K8S_CONTROLLERS="${KMIRROR_K8S_CONTROLLERS:-garbage-collector-controller,namespace-controller,deployment-controller,replicaset-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller}"

K8S_HOME="$KM_CACHE/k8s/$K8S_VERSION"
K8S_BIN="$K8S_HOME/bin"
K8S_DIR="$KM_RUN/k8s"
K8S_PKI="$K8S_DIR/pki"
K8S_KUBECONFIG="$K8S_DIR/admin.kubeconfig"
K8S_URL="https://127.0.0.1:$K8S_API_PORT"

# ---------------------------------------------------------------------------------------------
# provision

# The Go environment of every build step: caches under $KM_CACHE, no cgo, never a toolchain
# download, module cache writable so that `rm -rf` of the cache works.
_k8s_go() {
  env GOMODCACHE="$KM_CACHE/go/mod" GOCACHE="$KM_CACHE/go/build" GOTOOLCHAIN=local \
    CGO_ENABLED=0 GOFLAGS="-modcacherw -buildvcs=false" GOWORK=off go "$@"
}

# The marker records what was built; a different pin or a half-finished build means rebuild.
_k8s_marker_text() { printf 'kubernetes=%s helm=%s\n' "$K8S_VERSION" "$K8S_HELM_VERSION"; }

_k8s_built() {
  [ -f "$K8S_BIN/.complete" ] && [ "$(cat "$K8S_BIN/.complete")" = "$(_k8s_marker_text)" ]
}

# _k8s_wrapper_module DIR: a module requiring k8s.io/kubernetes at $K8S_VERSION, with every
# staging repo listed in upstream's go.mod replaced by its published v0.X.Y tag, upstream's go
# and godebug lines, and the four commands (etcd's at the version upstream requires) as tools.
_k8s_wrapper_module() {
  local dir="$1" staging="v0.${K8S_VERSION#v1.}" upstream etcd_version m
  local -a edits=()
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || return 1
  _k8s_go mod init kmirror.local/testbed/kubernetes || return 1
  upstream="$(_k8s_go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@$K8S_VERSION")" || return 1
  while read -r m; do
    edits+=("-replace=$m=$m@$staging")
  done < <(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+) => \./staging/.*#\1#p' "$upstream")
  [ "${#edits[@]}" -gt 0 ] || { log "no staging replaces found in $upstream"; return 1; }
  edits+=("-go=$(sed -n 's/^go //p' "$upstream")")
  while read -r m; do edits+=("-godebug=$m"); done < <(sed -n 's/^godebug //p' "$upstream")
  _k8s_go mod edit "${edits[@]}" || return 1
  etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' "$upstream")"
  [ -n "$etcd_version" ] || { log "go.etcd.io/etcd/server/v3 not in $upstream"; return 1; }
  _k8s_go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION" "go.etcd.io/etcd/server/v3@$etcd_version"
}

# Version variables as upstream's hack/lib/version.sh sets them (server and client side).
_k8s_ldflags() {
  local minor p ld="-s -w"
  minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean"
  done
  printf '%s' "$ld"
}

# The four control-plane binaries in one `go build` (shared packages compile once).
_k8s_build_kubernetes() {
  local dir="$K8S_HOME/src/kubernetes" out="$K8S_HOME/bin.new/kubernetes"
  _k8s_wrapper_module "$dir" || return 1
  mkdir -p "$out" && cd "$dir" || return 1
  _k8s_go build -trimpath -gcflags=all=-dwarf=false -ldflags "$(_k8s_ldflags)" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3 || return 1
  # `go build -o dir/` names the etcd binary after its import path (server/v3 -> server).
  if [ -f "$out/server" ]; then mv "$out/server" "$out/etcd"; fi
  [ -x "$out/etcd" ]
}

# helm v3 from its own module (its pinned k8s libraries differ from the apiserver's), with the
# version variables of helm's Makefile and the default capabilities of the bed's Kubernetes.
_k8s_build_helm() {
  local dir="$K8S_HOME/src/helm" out="$K8S_HOME/bin.new/helm" minor ld p
  minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$K8S_HELM_VERSION"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
  done
  rm -rf "$dir" && mkdir -p "$dir" "$out" && cd "$dir" || return 1
  _k8s_go mod init kmirror.local/testbed/helm || return 1
  _k8s_go get -tool "helm.sh/helm/v3/cmd/helm@$K8S_HELM_VERSION" || return 1
  _k8s_go build -trimpath -gcflags=all=-dwarf=false -ldflags "$ld" -o "$out/helm" \
    helm.sh/helm/v3/cmd/helm
}

# Fail fast, before an expensive build, when a pinned version is not served.
_k8s_check_pins() {
  local mod
  for mod in "k8s.io/kubernetes@$K8S_VERSION" "helm.sh/helm/v3@$K8S_HELM_VERSION"; do
    if ! (cd "$K8S_HOME" && _k8s_go list -m "$mod" >/dev/null 2>&1); then
      die "$mod is not available from the Go module proxy; served versions: $(cd "$K8S_HOME" &&
        _k8s_go list -m -versions "${mod%@*}" 2>/dev/null | tr ' ' '\n' | tail -n 6 | tr '\n' ' ')"
    fi
  done
}

# k8s_provision: build once per version; a finished build is reused. The two builds run side
# by side: on 2 cores the helm build fills the gaps while the big binaries are linked.
k8s_provision() {
  if _k8s_built; then
    log "kubernetes $K8S_VERSION + helm $K8S_HELM_VERSION: cached in $K8S_BIN"
    return 0
  fi
  command -v go >/dev/null || die "go is needed to build the Kubernetes binaries"
  mkdir -p "$K8S_HOME"
  # One build at a time per version (two beds provisioning at once would clobber each other).
  local lock
  exec {lock}>"$K8S_HOME/.lock"
  if ! flock -n "$lock"; then
    log "another build of kubernetes $K8S_VERSION is running; waiting for it"
    flock "$lock"
  fi
  if ! _k8s_built; then _k8s_build_all; fi
  exec {lock}>&-
}

_k8s_build_all() {
  local start=$SECONDS klog="$K8S_HOME/build-kubernetes.log" hlog="$K8S_HOME/build-helm.log"
  local kpid hpid kst=0 hst=0 f
  rm -rf "$K8S_HOME/bin.new"
  _k8s_check_pins
  log "building kubernetes $K8S_VERSION and helm $K8S_HELM_VERSION into $K8S_BIN (cold: ~6 min on 2 cores, ~1 GB of modules)"
  (_k8s_build_kubernetes) >"$klog" 2>&1 &
  kpid=$!
  (_k8s_build_helm) >"$hlog" 2>&1 &
  hpid=$!
  wait "$kpid" || kst=$?
  wait "$hpid" || hst=$?
  for f in "$klog:$kst" "$hlog:$hst"; do
    if [ "${f##*:}" != 0 ]; then
      log "build failed, last lines of ${f%:*}:"
      tail -n 30 "${f%:*}" >&2
    fi
  done
  [ "$kst" = 0 ] && [ "$hst" = 0 ] || die "building the Kubernetes binaries failed"
  rm -rf "$K8S_BIN" && mkdir -p "$K8S_BIN"
  mv "$K8S_HOME"/bin.new/kubernetes/* "$K8S_HOME"/bin.new/helm/* "$K8S_BIN"/
  rm -rf "$K8S_HOME/bin.new"
  _k8s_marker_text >"$K8S_BIN/.complete"
  log "built in $((SECONDS - start)) s: $(cd "$K8S_BIN" && echo *)"
}

# ---------------------------------------------------------------------------------------------
# pki (openssl; EC P-256 like envtest's tiny CA; valid 30 days, renewed by `up` a day before)

# _k8s_cert NAME SUBJECT EXTENSIONS: a key and a cert for NAME signed by the bed's CA.
_k8s_cert() {
  local name="$1" subject="$2" ext="$3"
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$name.key" -out "$name.csr" -subj "$subject" 2>/dev/null &&
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -out "$name.crt" -extfile <(printf '%s\n' "$ext") 2>/dev/null &&
    rm -f "$name.csr"
}

_k8s_pki() {
  if [ -f "$K8S_PKI/.complete" ] &&
    openssl x509 -checkend 86400 -noout -in "$K8S_PKI/apiserver.crt" >/dev/null 2>&1; then
    return 0
  fi
  command -v openssl >/dev/null || die "openssl is needed for the test bed certificates"
  rm -rf "$K8S_PKI" && mkdir -p "$K8S_PKI"
  (
    cd "$K8S_PKI" && umask 077 &&
      openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -keyout ca.key -out ca.crt -days 30 -subj /CN=kmirror-testbed-ca 2>/dev/null &&
      _k8s_cert apiserver /CN=kube-apiserver "$(printf '%s\n' \
        'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local' \
        'extendedKeyUsage=serverAuth' 'keyUsage=critical,digitalSignature,keyEncipherment')" &&
      _k8s_cert admin "/O=system:masters/CN=kmirror-admin" "$(printf '%s\n' \
        'extendedKeyUsage=clientAuth' 'keyUsage=critical,digitalSignature,keyEncipherment')" &&
      openssl genrsa -out sa.key 2048 2>/dev/null &&
      openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null &&
      chmod 644 ca.crt sa.pub
  ) || die "generating the test bed certificates in $K8S_PKI failed"
  touch "$K8S_PKI/.complete"
}

# The admin kubeconfig, credentials embedded (usable from any directory).
_k8s_kubeconfig() {
  local b64="base64 -w0"
  write_file "$K8S_KUBECONFIG" 600 <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: kmirror-testbed
  cluster:
    server: $K8S_URL
    certificate-authority-data: $($b64 <"$K8S_PKI/ca.crt")
users:
- name: kmirror-admin
  user:
    client-certificate-data: $($b64 <"$K8S_PKI/admin.crt")
    client-key-data: $($b64 <"$K8S_PKI/admin.key")
contexts:
- name: kmirror-testbed
  context:
    cluster: kmirror-testbed
    user: kmirror-admin
    namespace: default
current-context: kmirror-testbed
KUBECONFIG
}

# ---------------------------------------------------------------------------------------------
# processes (pid/log names: k8s-etcd, k8s-apiserver, k8s-controller-manager)

_k8s_kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$K8S_KUBECONFIG" --request-timeout=5s "$@"; }

# _k8s_port_free NAME PORT: fail clearly when a process the bed did not start holds PORT.
_k8s_port_free() {
  if ! is_running "$1" && port_open 127.0.0.1 "$2"; then
    die "port $2 (for $1) is already in use by another process"
  fi
}

_k8s_start_etcd() {
  _k8s_port_free k8s-etcd "$K8S_ETCD_PORT"
  _k8s_port_free k8s-etcd "$K8S_ETCD_PEER_PORT"
  mkdir -p "$K8S_DIR/etcd" && chmod 700 "$K8S_DIR/etcd"
  start_bg k8s-etcd "$K8S_BIN/etcd" --name=kmirror --data-dir="$K8S_DIR/etcd" \
    --unsafe-no-fsync=true --log-level=warn \
    --listen-client-urls="http://127.0.0.1:$K8S_ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$K8S_ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$K8S_ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$K8S_ETCD_PEER_PORT" \
    --initial-cluster="kmirror=http://127.0.0.1:$K8S_ETCD_PEER_PORT"
  wait_for "etcd on :$K8S_ETCD_PORT" 30 k8s-etcd port_open 127.0.0.1 "$K8S_ETCD_PORT"
}

# The ServiceAccount admission plugin stays on: Pods get projected token volumes, and the
# TokenRequest API signs with sa.key. The `kubernetes` Service gets no endpoints (127.0.0.1 is
# not a valid endpoint address), hence --endpoint-reconciler-type=none.
_k8s_start_apiserver() {
  _k8s_port_free k8s-apiserver "$K8S_API_PORT"
  start_bg k8s-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$K8S_ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$K8S_API_PORT" \
    --tls-cert-file="$K8S_PKI/apiserver.crt" --tls-private-key-file="$K8S_PKI/apiserver.key" \
    --client-ca-file="$K8S_PKI/ca.crt" --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$K8S_PKI/sa.pub" \
    --service-account-signing-key-file="$K8S_PKI/sa.key" \
    --service-cluster-ip-range="$K8S_SERVICE_CIDR" --allow-privileged=true \
    --endpoint-reconciler-type=none --profiling=false
  wait_for "kube-apiserver /readyz on :$K8S_API_PORT" 90 k8s-apiserver \
    _k8s_kubectl get --raw /readyz
}

# KCM talks to the apiserver as the admin (system:masters), so it needs no RBAC of its own.
_k8s_start_controller_manager() {
  _k8s_port_free k8s-controller-manager "$K8S_KCM_PORT"
  start_bg k8s-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig="$K8S_KUBECONFIG" --authorization-kubeconfig="$K8S_KUBECONFIG" \
    --authentication-kubeconfig="$K8S_KUBECONFIG" --authentication-skip-lookup=true \
    --client-ca-file="$K8S_PKI/ca.crt" \
    --bind-address=127.0.0.1 --secure-port="$K8S_KCM_PORT" --cert-dir="$K8S_DIR/kcm" \
    --controllers="$K8S_CONTROLLERS" --leader-elect=false \
    --root-ca-file="$K8S_PKI/ca.crt" --service-account-private-key-file="$K8S_PKI/sa.key" \
    --use-service-account-credentials=false --kube-api-qps=100 --kube-api-burst=200 \
    --profiling=false
  wait_for "kube-controller-manager on :$K8S_KCM_PORT" 30 k8s-controller-manager \
    port_open 127.0.0.1 "$K8S_KCM_PORT" &&
    wait_for "the default ServiceAccount in namespace default" 60 k8s-controller-manager \
    _k8s_kubectl -n default get serviceaccount default
}

# k8s_up: start whatever is not running, then wait until the control plane serves.
k8s_up() {
  local start=$SECONDS
  _k8s_built || k8s_provision
  mkdir -p "$K8S_DIR"
  _k8s_pki
  _k8s_kubeconfig
  _k8s_start_etcd || die "etcd did not start"
  _k8s_start_apiserver || die "kube-apiserver did not become ready"
  _k8s_start_controller_manager || die "kube-controller-manager did not become ready"
  log "kubernetes $K8S_VERSION up at $K8S_URL in $((SECONDS - start)) s (KUBECONFIG=$K8S_KUBECONFIG)"
}

# k8s_env: export lines for tests and tools (eval-able; nothing else on stdout).
k8s_env() {
  cat <<ENV
export KUBECONFIG='$K8S_KUBECONFIG'
export KMIRROR_KUBECTL='$K8S_BIN/kubectl'
export KMIRROR_HELM='$K8S_BIN/helm'
export KMIRROR_K8S_BIN='$K8S_BIN'
export KMIRROR_APISERVER='$K8S_URL'
export KMIRROR_K8S_VERSION='$K8S_VERSION'
ENV
}

k8s_status() {
  local name
  for name in k8s-etcd k8s-apiserver k8s-controller-manager; do
    if is_running "$name"; then
      echo "$name: running (pid $(cat "$KM_PIDS/$name.pid"))"
    else
      echo "$name: stopped"
    fi
  done
}

# k8s_down: stop in reverse order and drop etcd's data so that the next `up` starts empty.
# The PKI and kubeconfig stay (they belong to the run dir).
k8s_down() {
  stop_pid k8s-controller-manager
  stop_pid k8s-apiserver
  stop_pid k8s-etcd
  rm -rf "$K8S_DIR/etcd" "$K8S_DIR/kcm"
  log "kubernetes control plane stopped"
}
