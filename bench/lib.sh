# bench/lib.sh — what the benchmark scripts share (sourced, not run): a scratch folder, the
# processes they start (stopped when the script exits, however it exits), and a wait for an
# HTTP endpoint to come up.

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_http() { # URL seconds
  local url=$1 deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$url" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then echo "timed out waiting for $url" >&2; return 1; fi
    sleep 0.2
  done
}
