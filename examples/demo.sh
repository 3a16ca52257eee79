#!/usr/bin/env bash
# `make demo`: four simulated replicas on 127.0.0.1:8001-8004 and warmpath-router on
# 127.0.0.1:8080 (admin 127.0.0.1:9090) with examples/static.yaml. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p warmpath-router -p warmpath-sim
bin=${CARGO_TARGET_DIR:-target}/release

pids=()
cleanup() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

wait_http() { # URL: wait up to 10 s for it to answer
  for _ in $(seq 100); do curl -fs -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "demo: $1 did not come up" >&2; exit 1
}

"$bin/warmpath-sim" --listen 127.0.0.1:8001 --replicas 4 &
pids+=($!)
wait_http http://127.0.0.1:8004/health

"$bin/warmpath-router" --config examples/static.yaml &
pids+=($!)
wait_http http://127.0.0.1:9090/readyz

cat <<'MSG'

warmpath demo is up: router http://127.0.0.1:8080 (admin http://127.0.0.1:9090), replicas 8001-8004.
Try:

  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \
    -d '{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"Hello!"}]}' -i

  curl -sN http://127.0.0.1:8080/v1/completions -H 'content-type: application/json' \
    -d '{"model":"tiny","prompt":"Once upon a time","max_tokens":8,"stream":true}'

  curl -s http://127.0.0.1:9090/metrics | grep ^warmpath_

  # why that replica: every candidate's scores (the demo's config allows the header)
  curl -s -D - -o /dev/null http://127.0.0.1:8080/v1/completions -H 'content-type: application/json' \
    -H 'x-warmpath-explain: 1' -d '{"model":"tiny","prompt":"Once upon a time","max_tokens":4}' \
    | grep -i ^x-warmpath

Open http://127.0.0.1:9090/ in a browser for the live status page (replicas, indexes,
tenants, recent decisions with their scores).

The x-warmpath-replica response header names the replica that answered. Edit
examples/static.yaml (e.g. scheduling.policy) and the router reloads it. Ctrl-C stops everything.
MSG
wait -n "${pids[@]}"
