#!/usr/bin/env bash
# The whole kind flow: create the cluster, build and load the images, install the chart, smoke
# test the router through a port-forward, then run the e2e suite (cargo test -p warmpath-e2e)
# against the kind cluster instead of the local API server.
# Needs Docker, kind, kubectl, helm, curl and a Rust toolchain. `KEEP=1` keeps the cluster.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need docker kind kubectl helm curl cargo
"$kind_dir/create-cluster.sh" >/dev/null
"$kind_dir/build-and-load.sh"
"$kind_dir/install.sh"
export KUBECONFIG="$kubeconfig"
fullname="$RELEASE-warmpath"
[[ "$RELEASE" == *warmpath* ]] && fullname="$RELEASE"
kubectl -n "$NAMESPACE" port-forward "svc/$fullname-router" 18080:8080 19090:9090 >/dev/null 2>&1 &
pf=$!
trap 'kill $pf 2>/dev/null || true; [ "${KEEP:-0}" = 1 ] || "$kind_dir/delete-cluster.sh"' EXIT
for _ in $(seq 1 30); do curl -fsS localhost:19090/healthz >/dev/null 2>&1 && break; sleep 1; done
curl -fsS localhost:19090/healthz
curl -fsS localhost:18080/v1/models
# A completion through the router to a simulated replica; the answer names the replica.
headers="$(curl -fsS -o /dev/null -D - localhost:18080/v1/completions \
  -H 'content-type: application/json' -d '{"model": "tiny", "prompt": "hello from kind", "max_tokens": 4}')"
echo "$headers" | grep -i '^x-warmpath-replica: sim-[01]' || { echo "run-e2e.sh: no x-warmpath-replica header" >&2; exit 1; }
curl -fsS localhost:19090/metrics | head -n 5
# The node tests (e2e/tests/node_cluster.rs) run on the kind cluster too, loading their images
# with `kind load image-archive` instead of the local node's containerd.
WARMPATH_KUBECONFIG="$kubeconfig" WARMPATH_NODE_KUBECONFIG="$kubeconfig" WARMPATH_NODE_KIND="$KIND_CLUSTER" \
  WARMPATH_E2E_REQUIRED=1 WARMPATH_NODE_REQUIRED=1 cargo test -p warmpath-e2e -- --test-threads 2
