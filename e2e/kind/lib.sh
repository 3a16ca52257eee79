# shellcheck shell=bash
# Shared settings of the kind scripts (sourced). Override with environment variables.
set -euo pipefail
KIND_CLUSTER="${KIND_CLUSTER:-warmpath}"
IMAGE_TAG="${IMAGE_TAG:-dev}"
RELEASE="${RELEASE:-warmpath}"
NAMESPACE="${NAMESPACE:-warmpath-system}"
# Binaries to build into images; warmpath-sim serves as the model server behind the router.
BINARIES="${BINARIES:-warmpath-router warmpath-controller warmpath-sim}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck disable=SC2034 # used by the scripts that source this file
kind_dir="$repo/e2e/kind"
# shellcheck disable=SC2034 # used by the scripts that source this file
kubeconfig="${KIND_KUBECONFIG:-$repo/e2e/.cache/kind-$KIND_CLUSTER.kubeconfig}"

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$(basename "$0"): $tool is required" >&2; exit 2; }
  done
}
