#!/usr/bin/env bash
# A new 2048-token prefix sent 8 times, 20 ms apart, to one warmpath router (precise or
# approximate, bench/replicas.sh's configurations plus the decision headers), on an idle fleet
# and with 28 requests of the shared-prefix workload in flight: which replicas get it?
# Run from the repository root with BIN (release binaries) set; writes burst.txt beside it.
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd); BIN=${BIN:-target/release}; W=$(mktemp -d)
PIDS=(); trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$W"' EXIT
for load in idle loaded; do
  for mode in precise approx; do
    "$BIN/warmpath-sim" --listen 127.0.0.1:18701 --replicas 4 --kv-blocks 512 --block-size 16 --prefill-us-per-token 100 \
      --max-model-len 8192 --kv-events-endpoint 'tcp://*:18751' > "$W/sim.log" 2>&1 & SIM=$!; PIDS=("$SIM")
    sed "s/^listen: .*/listen: 127.0.0.1:18781/" "$D/../../configs/$mode-router-0.yaml" > "$W/r.yaml"
    echo 'response_headers: { decision: true }' >> "$W/r.yaml"
    sleep 1; "$BIN/warmpath-router" --config "$W/r.yaml" > "$W/r.log" 2>&1 & R=$!; PIDS+=("$R")
    until curl -fs -o /dev/null http://127.0.0.1:18791/readyz; do sleep 0.2; done; sleep 1.5
    BG=""
    if [ $load = loaded ]; then
      "$BIN/warmpath-bench" run --url http://127.0.0.1:18781 --seed 11 --fleet-replicas 4 --fleet-kv-blocks 512 \
        --workload shared-prefix --working-set 1.5 --zipf 1.0 --mode closed --concurrency 28 --duration 25s \
        --quiet --no-oracle --out "$W/bg.json" > /dev/null 2>&1 & BG=$!; PIDS+=("$BG")
      sleep 6
    fi
    echo "== $mode-1, $load fleet$([ $load = loaded ] && echo ' (28 shared-prefix requests in flight)')"
    python3 "$D/burst.py" http://127.0.0.1:18781 5 8
    [ -n "$BG" ] && wait "$BG"
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; PIDS=()
  done
done | tee "$D/burst.txt"
