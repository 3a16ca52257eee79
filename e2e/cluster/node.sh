#!/usr/bin/env bash
# A single-node Kubernetes cluster of real components, as kind gives one but without Docker:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet over containerd and runc,
# kube-proxy (iptables) and CNI bridge networking, each a process on this machine, the pods in
# network namespaces on a bridge the script creates (wp0, 10.244.0.1/24, Services 10.96.0.0/16).
# Every binary comes from build.sh (Go modules) or Debian (containerd, runc, CNI plugins,
# iptables); the pod sandbox's image is built here (tools/pause, image.sh): nothing is pulled.
#
#   node.sh check   exit 0 when this machine can run it (root, containerd, runc, CNI plugins,
#                   iptables, a free wp0 and 10.244.0.0/24), else exit 3 with the reason
#   node.sh up      start it (idempotent); the LAST line of standard output is the admin
#                   kubeconfig's path
#   node.sh down    stop everything it started, remove its pods, mounts, rules and bridge, and
#                   wipe its state (e2e/.cache/node-run); the built binaries are kept
#
# Environment: WARMPATH_CLUSTER_OWNER_PID (as up.sh: stop once that process and every other
# owner have exited), WARMPATH_E2E_CACHE (default e2e/.cache). Images for the pods are imported
# with `ctr --address $(node.sh socket) -n k8s.io images import FILE` (e2e/src/node.rs does it).
# One node cluster per machine: the bridge, the pod range and the iptables rules are global.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/cluster/lib.sh
. "$here/lib.sh"
cache="$(e2e_cache "$here")"
export WARMPATH_E2E_CACHE="$cache"
bin="$cache/bin"
run="$cache/node-run"
kubeconfig="$run/kubeconfig"
sock="$run/containerd.sock"

bridge=wp0
node_ip=10.244.0.1
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/16
kubernetes_svc=10.96.0.1
node_name=warmpath-node
cni_bin=${WARMPATH_CNI_BIN:-/usr/lib/cni}
pause_ref=registry.k8s.io/pause:warmpath-e2e


log() { echo "node.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# --- check -----------------------------------------------------------------------------------
# Why this machine cannot run the node cluster, or nothing.
cannot() {
  [ "$(id -u)" = 0 ] || { echo "not root (containerd, network namespaces and iptables need it)"; return; }
  local c
  for c in containerd containerd-shim-runc-v2 runc ctr iptables iptables-save iptables-restore ip openssl flock; do
    command -v "$c" >/dev/null || { echo "$c is not installed"; return; }
  done
  for c in bridge host-local loopback portmap; do
    [ -x "$cni_bin/$c" ] || { echo "the CNI plugin $cni_bin/$c is missing (Debian: containernetworking-plugins)"; return; }
  done
  [ -d /sys/fs/cgroup ] || { echo "no cgroup file system"; return; }
  if ip link show "$bridge" >/dev/null 2>&1 && [ ! -f "$run/bridge" ]; then
    echo "a network interface $bridge exists that this script did not create"; return
  fi
  if [ ! -f "$run/bridge" ] && [ -n "$(ip -4 route show | awk '$1 ~ /^10\.244\./')" ]; then
    echo "10.244.0.0/24 is already routed on this machine"; return
  fi
}

# --- down ------------------------------------------------------------------------------------
stop() { stop_pidfile "$run" "$1" "$2" 100; }

# Our rules only: kube-proxy's (KUBE-*) and the bridge plugin's (CNI-*), table by table. The
# rules are read whole first: `iptables-save | grep -q` would fail under pipefail whenever grep
# stops reading before iptables-save has written everything (SIGPIPE), and leave the rules.
flush_rules() {
  local t rules
  for t in nat filter mangle; do
    rules=$(iptables-save -t "$t" 2>/dev/null) || continue
    case "$rules" in
      *KUBE-*|*CNI-*)
        grep -v -e KUBE- -e CNI- <<<"$rules" | iptables-restore -w 5 -T "$t" || log "could not clean the $t table" ;;
    esac
  done
}

down() {
  [ -d "$run" ] || return 0
  local down_start
  down_start=$(date +%s)
  [ "${1:-}" = --from-watchdog ] || stop watchdog warmpath-node-watchdog
  stop kubelet kubelet
  stop kube-proxy kube-proxy
  stop kube-scheduler kube-scheduler
  stop kube-controller-manager kube-controller-manager
  # The pods: their tasks killed, their sandboxes' network torn down by containerd's own CNI call
  # is not possible without the kubelet, so their namespaces and veths go with the bridge.
  if [ -S "$sock" ]; then
    local id
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
    done
  fi
  stop containerd containerd
  # Shims outlive containerd by design; ours are the ones serving our state directory.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null || true
  stop kube-apiserver kube-apiserver
  stop etcd etcd
  # Network namespaces of our pods (containerd names them cni-*, under /var/run/netns).
  if [ -f "$run/netns-before" ]; then
    local ns
    for ns in /var/run/netns/*; do
      [ -e "$ns" ] || continue
      ns=$(basename "$ns")
      grep -qx "$ns" "$run/netns-before" || ip netns delete "$ns" 2>/dev/null || true
    done
  fi
  # The kubelet writes pods' logs under /var/log/pods and /var/log/containers whatever its
  # root directory; ours are the entries that were not there before.
  if [ -f "$run/logs-before" ]; then
    local entry
    for entry in /var/log/pods/* /var/log/containers/*; do
      [ -e "$entry" ] || [ -L "$entry" ] || continue
      grep -qxF "$entry" "$run/logs-before" || rm -rf "$entry"
    done
  fi
  if [ -f "$run/bridge" ]; then ip link delete "$bridge" 2>/dev/null || true; fi
  flush_rules
  # Mounts below the state directory (pod volumes, overlay snapshots, shm), deepest first.
  awk -v r="$run" '$2 ~ "^"r {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$run"
  log "node cluster stopped"
  phase "node cluster: torn down" "$down_start"
}

case "${1:-}" in
  check)
    why="$(cannot)"
    if [ -n "$why" ]; then echo "node.sh: cannot run a node here: $why" >&2; exit 3; fi
    exit 0 ;;
  socket) echo "$sock"; exit 0 ;;
  down) # [--locked] [--from-watchdog]: the watchdog holds the lock already, and is not stopped
    shift
    case " $* " in *" --locked "*) ;; *) exec 8>"$cache/node-up.lock"; flock 8 ;; esac
    case " $* " in *" --from-watchdog "*) down --from-watchdog ;; *) down ;; esac
    exit 0 ;;
  up) ;;
  *) echo "usage: node.sh check|up|down|socket" >&2; exit 2 ;;
esac

# --- up --------------------------------------------------------------------------------------
why="$(cannot)"
[ -z "$why" ] || { log "cannot run a node here: $why"; exit 3; }
build_start=$(date +%s)
"$here/build.sh" etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet \
  kube-proxy pause helm >&2 || exit 3
phase "node cluster: Go binaries built or checked" "$build_start"

exec 8>"$cache/node-up.lock"
flock 8

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" --request-timeout=5s "$@"; }
node_ready() {
  [ "$(kubectl get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
add_owner() {
  if [ -n "${WARMPATH_CLUSTER_OWNER_PID:-}" ]; then echo "$WARMPATH_CLUSTER_OWNER_PID" >>"$run/owners"; fi
}
components=(etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet kube-proxy)
all_alive() { local c; for c in "${components[@]}"; do alive "$run/$c.pid" || return 1; done; }

if all_alive && node_ready; then
  add_owner
  echo "$kubeconfig"
  exit 0
fi

# Whatever a crashed run left is stopped and wiped: every run starts from an empty cluster.
down
mkdir -p "$run"/{pki,etcd-data,kubelet,cni/net.d,cni/ipam,containerd}
started=1
on_exit() {
  local rc=$?
  if [ "$rc" != 0 ] && [ "$started" = 1 ]; then
    mkdir -p "$cache/logs/node"
    cp -f "$run"/*.log "$cache/logs/node/" 2>/dev/null || true
    down >&2 || true
    log "logs kept in $cache/logs/node/"
  fi
}
trap on_exit EXIT
start_time=$(date +%s)
ls /var/run/netns 2>/dev/null >"$run/netns-before" || true
for entry in /var/log/pods/* /var/log/containers/*; do
  if [ -e "$entry" ] || [ -L "$entry" ]; then echo "$entry"; fi
done >"$run/logs-before"

# --- network ---------------------------------------------------------------------------------
# The bridge exists before any pod, holding the node's address, so that the API server can
# listen there and pods reach it through the `kubernetes` Service.
ip link add "$bridge" type bridge
touch "$run/bridge"
ip addr add "$node_ip/24" dev "$bridge"
ip link set "$bridge" up
sysctl -qw net.ipv4.ip_forward=1
if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
else
  log "warning: br_netfilter is not loaded; Services between pods on the bridge may not route"
fi
cat >"$run/cni/net.d/10-warmpath.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "warmpath-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$run/cni/ipam",
        "ranges": [[{"subnet": "$pod_cidr", "rangeStart": "10.244.0.10", "gateway": "$node_ip"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

# --- keys and certificates -------------------------------------------------------------------
pki="$run/pki"
{
  new_pki "$pki" warmpath-e2e-node-ca &&
    sign_cert "$pki" apiserver "/CN=kube-apiserver" \
      "subjectAltName=IP:$node_ip,IP:$kubernetes_svc,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      "extendedKeyUsage=serverAuth" "keyUsage=digitalSignature,keyEncipherment" &&
    # The API server's identity towards the kubelet (logs, exec, port-forward).
    sign_cert "$pki" kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      "extendedKeyUsage=clientAuth" "keyUsage=digitalSignature,keyEncipherment" &&
    sign_cert "$pki" kubelet "/CN=$node_name" "subjectAltName=IP:$node_ip,DNS:$node_name" \
      "extendedKeyUsage=serverAuth" "keyUsage=digitalSignature,keyEncipherment"
} || die "generating keys with openssl failed"

# --- etcd and the API server -----------------------------------------------------------------
start_etcd "$bin" "$run" warmpath-node

api_port=$(free_port "$etcd_port" "$etcd_peer_port")
setsid "$bin/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address "$node_ip" --advertise-address "$node_ip" --secure-port "$api_port" \
  --endpoint-reconciler-type lease \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
  --kubelet-client-certificate "$pki/kubelet-client.crt" --kubelet-client-key "$pki/kubelet-client.key" \
  --kubelet-certificate-authority "$pki/ca.crt" \
  --kubelet-preferred-address-types InternalIP \
  --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range "$service_cidr" \
  --allow-privileged=true --profiling=false --cert-dir "$run/apiserver-certs" \
  </dev/null >"$run/kube-apiserver.log" 2>&1 8>&- &
echo $! >"$run/kube-apiserver.pid"

write_kubeconfig "$kubeconfig" warmpath-node "https://$node_ip:$api_port" "$pki"

wait_for() { # what seconds command...
  local what=$1 limit=$2; shift 2
  local deadline=$(( $(date +%s) + limit )) c
  until "$@" >/dev/null 2>&1; do
    for c in "${components[@]}"; do
      if [ -f "$run/$c.pid" ] && ! alive "$run/$c.pid"; then
        tail -n 30 "$run/$c.log" >&2; die "$c exited while waiting for $what; log: $run/$c.log"
      fi
    done
    [ "$(date +%s)" -lt "$deadline" ] || die "$what not within ${limit}s"
    sleep 0.5
  done
}
wait_for "the API server" 60 kubectl get --raw /readyz

# --- containerd and the sandbox image --------------------------------------------------------
cat >"$run/containerd.toml" <<EOF
version = 2
root = "$run/containerd/root"
state = "$run/containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$run/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_ref"
  enable_selinux = false
  # Pods' processes get no lower oom_score_adj than containerd's own: setting a negative one
  # needs CAP_SYS_RESOURCE, which a machine that is itself a container may not grant root.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$run/cni/net.d"
    max_conf_num = 1
EOF
setsid containerd --config "$run/containerd.toml" </dev/null >"$run/containerd.log" 2>&1 8>&- &
echo $! >"$run/containerd.pid"
wait_for "containerd" 30 ctr --address "$sock" version
"$here/image.sh" "$bin/pause" "$pause_ref" "$run/pause.tar" >/dev/null 2>&1 || die "packing the pause image failed"
ctr --address "$sock" -n k8s.io images import "$run/pause.tar" >/dev/null || die "importing the pause image failed"

# --- controller-manager, scheduler -----------------------------------------------------------
setsid "$bin/kube-controller-manager" --kubeconfig "$kubeconfig" \
  --leader-elect=false --secure-port 0 \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --use-service-account-credentials=false \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --node-monitor-grace-period 20s \
  </dev/null >"$run/kube-controller-manager.log" 2>&1 8>&- &
echo $! >"$run/kube-controller-manager.pid"
setsid "$bin/kube-scheduler" --kubeconfig "$kubeconfig" \
  --leader-elect=false --secure-port 0 \
  </dev/null >"$run/kube-scheduler.log" 2>&1 8>&- &
echo $! >"$run/kube-scheduler.pid"

# --- kubelet ---------------------------------------------------------------------------------
grep -v '^#' /etc/resolv.conf >"$run/resolv.conf" || true
kubelet_port=$(free_port "$etcd_port" "$etcd_peer_port" "$api_port")
cat >"$run/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $kubelet_port
readOnlyPort: 0
healthzPort: 0
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
resolvConf: $run/resolv.conf
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
rotateCertificates: false
serverTLSBootstrap: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
EOF
setsid "$bin/kubelet" --config "$run/kubelet.yaml" --kubeconfig "$kubeconfig" \
  --hostname-override "$node_name" --node-ip "$node_ip" \
  --root-dir "$run/kubelet" --cert-dir "$run/kubelet/pki" --v 1 \
  </dev/null >"$run/kubelet.log" 2>&1 8>&- &
echo $! >"$run/kubelet.pid"

# --- kube-proxy ------------------------------------------------------------------------------
cat >"$run/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $kubeconfig}
mode: iptables
clusterCIDR: 10.244.0.0/16
hostnameOverride: $node_name
bindAddress: 127.0.0.1
healthzBindAddress: ""
metricsBindAddress: 127.0.0.1:$(free_port "$etcd_port" "$etcd_peer_port" "$api_port" "$kubelet_port")
conntrack: {maxPerCore: 0}
iptables: {minSyncPeriod: 0s, syncPeriod: 10s}
nodePortAddresses: [$node_ip/32]
EOF
# --v=2: every rules sync with its time, to line a refused connection up with the endpoints.
setsid "$bin/kube-proxy" --config "$run/kube-proxy.yaml" --v=2 \
  </dev/null >"$run/kube-proxy.log" 2>&1 8>&- &
echo $! >"$run/kube-proxy.pid"

wait_for "node $node_name Ready" 120 node_ready
# The default ServiceAccount comes from the controller-manager; pods are refused without it.
wait_for "the default ServiceAccount" 60 kubectl -n default get serviceaccount default
started=0
log "node cluster up in $(( $(date +%s) - start_time ))s: https://$node_ip:$api_port, node $node_name Ready"
phase "node cluster: components started, node Ready" "$start_time"

if [ -n "${WARMPATH_CLUSTER_OWNER_PID:-}" ]; then
  add_owner
  start_watchdog "$run" "$cache/node-up.lock" "$cache/node-watchdog.log" warmpath-node-watchdog \
    "$here/node.sh" down --locked --from-watchdog
fi

echo "$kubeconfig"
