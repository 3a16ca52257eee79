#!/usr/bin/env bash
# Starts a real Kubernetes API server for tests: etcd and kube-apiserver as local processes on
# loopback (as controller-runtime's envtest does), with RBAC authorization, service-account
# token issuing (TokenRequest) and an admin kubeconfig. Builds the binaries first if needed
# (build.sh). No kubelet, scheduler or controller-manager run: pods stay Pending, namespaces
# are not emptied by a namespace controller and owner references are not garbage-collected.
#
# Idempotent: when the cluster already runs, it only prints the kubeconfig's path.
# The LAST line of standard output is always the admin kubeconfig's absolute path.
#
# Environment:
#   WARMPATH_CLUSTER_OWNER_PID  stop the cluster once this process (and every other owner that
#                               reused the cluster) has exited; tests set it to their own pid.
#                               Without it the cluster runs until e2e/cluster/down.sh.
#   WARMPATH_E2E_CACHE          cache folder (default e2e/.cache); state lives in its run/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/cluster/lib.sh
. "$here/lib.sh"
cache="$(e2e_cache "$here")"
export WARMPATH_E2E_CACHE="$cache"
bin="$cache/bin"
run="$cache/run"
kubeconfig="$run/kubeconfig"


log() { echo "up.sh: $*" >&2; }
die() { log "$*"; exit 1; }
# A failed start keeps its logs (in e2e/.cache/logs/) and stops whatever it started.
started=0
on_exit() {
  local rc=$?
  if [ "$rc" != 0 ] && [ "$started" = 1 ]; then
    cp -f "$run"/*.log "$cache/logs/" 2>/dev/null || true
    "$here/down.sh" --locked >&2 || true
    log "logs kept in $cache/logs/ (etcd.log, kube-apiserver.log)"
  fi
}
trap on_exit EXIT

command -v openssl >/dev/null || die "openssl is required (certificates and keys)"
command -v flock >/dev/null || die "flock (util-linux) is required"

# Exit status 3 tells callers (the Rust test helper) that the binaries cannot be built at all.
build_start=$(date +%s)
"$here/build.sh" etcd kube-apiserver kubectl helm >&2 || exit 3
phase "API server: Go binaries built or checked" "$build_start"

mkdir -p "$run"
exec 8>"$cache/up.lock"
flock 8

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

ready() {
  [ -f "$kubeconfig" ] && "$bin/kubectl" --kubeconfig "$kubeconfig" --request-timeout=3s \
    get --raw /readyz >/dev/null 2>&1
}

add_owner() {
  if [ -n "${WARMPATH_CLUSTER_OWNER_PID:-}" ]; then
    echo "$WARMPATH_CLUSTER_OWNER_PID" >>"$run/owners"
  fi
}

if alive "$run/etcd.pid" && alive "$run/kube-apiserver.pid" && ready; then
  add_owner
  echo "$kubeconfig"
  exit 0
fi

# Anything left from a crashed run is stopped and wiped: tests always start from empty etcd.
"$here/down.sh" --locked >&2

mkdir -p "$run/pki" "$run/etcd-data"
started=1
start_time=$(date +%s)

# --- keys and certificates -------------------------------------------------------------------
pki="$run/pki"
{
  new_pki "$pki" warmpath-e2e-ca &&
    sign_cert "$pki" apiserver "/CN=kube-apiserver" \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" \
      "extendedKeyUsage=serverAuth" "keyUsage=digitalSignature,keyEncipherment"
} || die "generating keys with openssl failed"

# --- etcd ------------------------------------------------------------------------------------
start_etcd "$bin" "$run" warmpath-e2e

# --- kube-apiserver --------------------------------------------------------------------------
api_port=$(free_port "$etcd_port" "$etcd_peer_port")
# The launch command is kept in a script so that restart-apiserver.sh can stop and start the
# API server alone (tests of clients that must survive an API-server outage).
apiserver_args=(
  --etcd-servers "http://127.0.0.1:$etcd_port"
  --bind-address 127.0.0.1
  --advertise-address 127.0.0.1
  --endpoint-reconciler-type none
  --secure-port "$api_port"
  --tls-cert-file "$pki/apiserver.crt"
  --tls-private-key-file "$pki/apiserver.key"
  --client-ca-file "$pki/ca.crt"
  --token-auth-file "$pki/tokens.csv"
  --authorization-mode RBAC
  --service-account-issuer https://kubernetes.default.svc.cluster.local
  --service-account-key-file "$pki/sa.pub"
  --service-account-signing-key-file "$pki/sa.key"
  --service-cluster-ip-range 10.96.0.0/16
  --allow-privileged=true
  --profiling=false
  --cert-dir "$run/apiserver-certs"
)
{
  echo '#!/usr/bin/env bash'
  printf 'exec'
  printf ' %q' "$bin/kube-apiserver" "${apiserver_args[@]}"
  echo ' "$@"'
} >"$run/kube-apiserver.sh"
chmod +x "$run/kube-apiserver.sh"
setsid "$run/kube-apiserver.sh" </dev/null >"$run/kube-apiserver.log" 2>&1 8>&- &
echo $! >"$run/kube-apiserver.pid"

write_kubeconfig "$kubeconfig" warmpath-e2e "https://127.0.0.1:$api_port" "$pki"

deadline=$(( start_time + ${WARMPATH_CLUSTER_START_TIMEOUT:-60} ))
until ready; do
  if ! alive "$run/etcd.pid"; then tail -n 30 "$run/etcd.log" >&2; die "etcd exited; log: $run/etcd.log"; fi
  if ! alive "$run/kube-apiserver.pid"; then
    tail -n 30 "$run/kube-apiserver.log" >&2; die "kube-apiserver exited; log: $run/kube-apiserver.log"
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    tail -n 30 "$run/kube-apiserver.log" >&2
    die "kube-apiserver not ready within $(( deadline - start_time ))s"
  fi
  sleep 0.5
done
started=0
phase "API server: etcd and kube-apiserver started" "$start_time"
log "cluster up in $(( $(date +%s) - start_time ))s: https://127.0.0.1:$api_port (etcd 127.0.0.1:$etcd_port)"

if [ -n "${WARMPATH_CLUSTER_OWNER_PID:-}" ]; then
  add_owner
  start_watchdog "$run" "$cache/up.lock" "$cache/watchdog.log" warmpath-e2e-watchdog \
    "$here/down.sh" --locked --from-watchdog
fi

echo "$kubeconfig"
