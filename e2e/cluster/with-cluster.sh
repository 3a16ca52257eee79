#!/usr/bin/env bash
# Runs a command with the test API server up and WARMPATH_KUBECONFIG set, e.g.
#   e2e/cluster/with-cluster.sh cargo test --workspace
# Builds the binaries on first use (many minutes; cached in e2e/.cache/bin). The cluster stops
# when the command ends, unless it was already running before (then it is left as it was).
# When the binaries cannot be built (no Go, no module proxy) the command still runs and the
# cluster tests skip loudly; with WARMPATH_E2E_REQUIRED=1 (CI) that is an error instead.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

set +e
out="$(WARMPATH_CLUSTER_OWNER_PID=$$ "$here/up.sh")"
rc=$?
set -e
if [ "$rc" = 0 ]; then
  export WARMPATH_KUBECONFIG="${out##*$'\n'}"
  echo "with-cluster.sh: WARMPATH_KUBECONFIG=$WARMPATH_KUBECONFIG" >&2
elif [ "$rc" = 3 ] && [ "${WARMPATH_E2E_REQUIRED:-0}" != 1 ]; then
  echo "with-cluster.sh: *** the test API server cannot be built here; cluster tests will SKIP ***" >&2
else
  echo "with-cluster.sh: e2e/cluster/up.sh failed (exit $rc)" >&2
  exit "$rc"
fi
# Not exec: this shell is the cluster's owner, and its exit is what stops the cluster.
"$@"
