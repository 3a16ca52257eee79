#!/usr/bin/env bash
# Deletes the kind cluster and its kubeconfig.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need kind
kind delete cluster --name "$KIND_CLUSTER"
rm -f "$kubeconfig"
