#!/usr/bin/env bash
# Stops the test cluster started by up.sh (kube-apiserver, etcd, the owner watchdog) and wipes
# its state (e2e/.cache/run). The built binaries in e2e/.cache/bin are kept.
# Usage: down.sh   (--locked and --from-watchdog are for up.sh and its watchdog).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/cluster/lib.sh
. "$here/lib.sh"
cache="$(e2e_cache "$here")"
run="$cache/run"

locked=0 from_watchdog=0
for a in "$@"; do
  case "$a" in
    --locked) locked=1 ;;
    --from-watchdog) from_watchdog=1 ;;
    *) echo "down.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
if [ "$locked" = 0 ]; then
  exec 8>"$cache/up.lock"
  flock 8
fi

stop() { stop_pidfile "$run" "$@"; }

if [ "$from_watchdog" = 0 ]; then stop watchdog warmpath-e2e-watchdog; fi
stop kube-apiserver kube-apiserver
stop etcd etcd
rm -rf "$run"
echo "down.sh: test cluster stopped" >&2
