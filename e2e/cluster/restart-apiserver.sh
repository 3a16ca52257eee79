#!/usr/bin/env bash
# Stops the test cluster's kube-apiserver (etcd keeps running, so no state is lost), waits
# SECONDS (default 0), starts it again with the same flags and waits until it is ready.
# For tests of clients that must keep working through an API-server outage.
# Usage: restart-apiserver.sh [SECONDS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/cluster/lib.sh
. "$here/lib.sh"
cache="$(e2e_cache "$here")"
run="$cache/run"
down_for="${1:-0}"
log() { echo "restart-apiserver.sh: $*" >&2; }

[ -x "$run/kube-apiserver.sh" ] || { log "no running test cluster (start it with up.sh)"; exit 1; }
exec 8>"$cache/up.lock"
flock 8
pid="$(cat "$run/kube-apiserver.pid")"
if kill -0 "$pid" 2>/dev/null && grep -qa -- kube-apiserver "/proc/$pid/cmdline" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
fi
log "kube-apiserver stopped; starting again in ${down_for}s"
sleep "$down_for"
setsid "$run/kube-apiserver.sh" </dev/null >>"$run/kube-apiserver.log" 2>&1 8>&- &
echo $! >"$run/kube-apiserver.pid"
for _ in $(seq 1 600); do
  if "$cache/bin/kubectl" --kubeconfig "$run/kubeconfig" --request-timeout=2s get --raw /readyz >/dev/null 2>&1; then
    log "kube-apiserver ready again"
    exit 0
  fi
  kill -0 "$(cat "$run/kube-apiserver.pid")" 2>/dev/null || { log "kube-apiserver exited; see $run/kube-apiserver.log"; exit 1; }
  sleep 0.1
done
log "kube-apiserver not ready after 60 s"
exit 1
