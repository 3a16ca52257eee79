#!/usr/bin/env bash
# Runs a command with the test API server up and WARMPATH_KUBECONFIG set, e.g.
#   e2e/cluster/with-cluster.sh cargo test --workspace
# Builds the binaries on first use (many minutes; cached in e2e/.cache/bin). The cluster stops
# when the command ends, unless it was already running before (then it is left as it was).
# When the binaries cannot be built (no Go, no module proxy) the command still runs and the
# cluster tests skip loudly; with WARMPATH_E2E_REQUIRED=1 (CI) that is an error instead.
# Closes with the time of each phase: the clusters' builds, starts and teardowns (the node
# cluster's too, which the node tests start through node.sh) and the command's own run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
# shellcheck source=e2e/cluster/lib.sh
. "$here/lib.sh"
cache="$(e2e_cache "$here")"

WARMPATH_PHASES="$(mktemp)"
export WARMPATH_PHASES
summary() {
  echo "== phases (seconds) ==" >&2
  cat "$WARMPATH_PHASES" >&2
  rm -f "$WARMPATH_PHASES"
}
trap summary EXIT

running_before=0
if [ -f "$cache/run/kube-apiserver.pid" ] && kill -0 "$(cat "$cache/run/kube-apiserver.pid")" 2>/dev/null; then
  running_before=1
fi
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
command_start=$(date +%s)
set +e
"$@"
status=$?
set -e
phase "command: $1 ${2:-}" "$command_start"
# The cluster this script started stops now (its watchdog would, once this shell exits), so
# that its teardown is timed too; not when another live process still uses it.
if [ "$rc" = 0 ] && [ "$running_before" = 0 ] && ! owners_alive "$cache/run" $$ 2>/dev/null; then
  down_start=$(date +%s)
  "$here/down.sh" || true
  phase "API server: torn down" "$down_start"
fi
exit "$status"
