#!/usr/bin/env bash
# Creates the kind cluster (needs Docker and kind) and writes its kubeconfig to
# e2e/.cache/kind-<cluster>.kubeconfig, printed as the last line.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need docker kind
mkdir -p "$(dirname "$kubeconfig")"
if ! kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  kind create cluster --name "$KIND_CLUSTER" --config "$kind_dir/kind-config.yaml" --wait 180s
fi
kind get kubeconfig --name "$KIND_CLUSTER" >"$kubeconfig"
echo "$kubeconfig"
