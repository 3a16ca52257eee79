#!/usr/bin/env bash
# Builds the binaries of the local test cluster once and caches them in e2e/.cache/bin:
# kube-apiserver, kubectl, kube-controller-manager, kube-scheduler, kubelet and kube-proxy
# (k8s.io/kubernetes), etcd (go.etcd.io/etcd/server/v3), helm (helm.sh/helm/v3) and the pod
# sandbox's pause (tools/pause, static), each from a pinned Go module in e2e/cluster/tools/ with
# a committed go.sum. A binary is rebuilt only when its module files or the Go version change
# (a stamp beside it).
# Usage: build.sh [NAME...]   (default: all). Needs Go and the Go module proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/cluster/lib.sh
. "$here/lib.sh"
cache="$(e2e_cache "$here")"
mkdir -p "$cache/bin" "$cache/logs"
bin="$cache/bin"

command -v go >/dev/null || { echo "build.sh: Go is not installed (need go >= 1.26)" >&2; exit 2; }

# name  module-dir  package
tools=(
  "etcd etcd warmpath.dev/e2e/tools/etcd"
  "kube-apiserver kube k8s.io/kubernetes/cmd/kube-apiserver"
  "kubectl kube k8s.io/kubernetes/cmd/kubectl"
  "kube-controller-manager kube k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler kube k8s.io/kubernetes/cmd/kube-scheduler"
  "kubelet kube k8s.io/kubernetes/cmd/kubelet"
  "kube-proxy kube k8s.io/kubernetes/cmd/kube-proxy"
  "pause pause warmpath.dev/e2e/tools/pause"
  "helm helm helm.sh/helm/v3/cmd/helm"
)

wanted=("$@")
want() { [ ${#wanted[@]} -eq 0 ] && return 0; local w; for w in "${wanted[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }

# One build at a time, even when several test binaries start the cluster together.
exec 9>"$cache/build.lock"
flock 9

goversion="$(go env GOVERSION)"

# The version a module's go.mod requires, e.g. `required_version kube k8s.io/kubernetes`.
required_version() {
  awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' \
    "$here/tools/$1/go.mod" | head -n 1
}

# Release builds stamp versions with -X; without them kube-apiserver reports v0.0.0-master,
# which Helm's kubeVersion check and kubectl's version skew warnings would trip on.
version_ldflags() {
  local v major minor
  case "$1" in
    kube-*|kubectl|kubelet)
      v="$(required_version "$2" k8s.io/kubernetes)"
      major="${v#v}"; major="${major%%.*}"
      minor="${v#v*.}"; minor="${minor%%.*}"
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
          "$p" "$v" "$p" "$major" "$p" "$minor" "$p"
      done ;;
    helm)
      v="$(required_version "$2" helm.sh/helm/v3)"
      printf -- '-X helm.sh/helm/v3/internal/version.version=%s ' "$v"
      # Helm's default Kubernetes version for `helm template` and lint: the client-go it embeds.
      v="$(required_version "$2" k8s.io/client-go)"
      minor="${v#v0.}"; minor="${minor%%.*}"
      printf -- '-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=%s ' "$minor"
      printf -- '-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=%s ' "$minor" ;;
  esac
}
for entry in "${tools[@]}"; do
  read -r name dir pkg <<<"$entry"
  want "$name" || continue
  ldflags="-s -w $(version_ldflags "$name" "$dir")"
  stamp="$( { echo "$goversion $pkg $ldflags"; cat "$here/tools/$dir"/go.mod "$here/tools/$dir"/go.sum;
             find "$here/tools/$dir" -maxdepth 1 -name '*.go' -exec cat {} +; } | sha256sum | cut -d' ' -f1)"
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    continue
  fi
  echo "build.sh: building $name ($pkg) with $goversion; log: $cache/logs/build-$name.log" >&2
  start=$(date +%s)
  # The sandbox's process runs in an image with no libc: static.
  cgo=""; [ "$name" = pause ] && cgo=0
  if ! CGO_ENABLED="${cgo:-$(go env CGO_ENABLED)}" go build -C "$here/tools/$dir" -mod=readonly -trimpath -ldflags="$ldflags" \
        -o "$bin/$name.tmp" "$pkg" >"$cache/logs/build-$name.log" 2>&1; then
    echo "build.sh: building $name failed; last lines of $cache/logs/build-$name.log:" >&2
    tail -n 30 "$cache/logs/build-$name.log" >&2
    exit 1
  fi
  mv -f "$bin/$name.tmp" "$bin/$name"
  echo "$stamp" >"$bin/$name.stamp"
  secs=$(( $(date +%s) - start ))
  echo "$(date -u +%FT%TZ) $name $pkg ${secs}s $goversion" >>"$cache/logs/build-times.txt"
  echo "build.sh: built $name in ${secs}s" >&2
done
