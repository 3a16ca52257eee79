#!/usr/bin/env bash
# bench/soak-kv.sh — does the router's memory stay flat while it follows KV events for a long
# time, through cache churn, replica churn and engine restarts? (issue 14)
#
# One simulated fleet (warmpath-sim, REPLICAS replicas × KV_BLOCKS blocks of 16 tokens, KV events
# on tcp://*:KV_PORT+i) and one warmpath router routing from those events (`prefix` policy, the
# pool with `kv_events`). For DURATION_S seconds:
#   - load: warmpath-bench runs of CHUNK_S seconds back to back, each with a new seed, on the
#     shared-prefix workload with a working set WORKING_SET × the fleet's KV cache (every run's
#     prefixes are new: the engines evict all the time, and the router's views churn with them);
#   - replica churn: every CHURN_S seconds the router's configuration file drops one replica (a
#     different one each time) and brings the previous one back (the router reloads it);
#   - engine restarts: at a third and two thirds of the time the whole fleet is restarted (new
#     event streams whose sequence numbers start again).
# Every SAMPLE_S seconds: the router's RSS (/proc) and its index metrics. Writes into RESULTS:
# samples.tsv, the commands, the router configuration, summary.txt (RSS after warm-up, at the
# end, the maximum, and the slope over the second half). About DURATION_S + 1 minute.
#
# Knobs (environment): DURATION_S (1800), CHUNK_S (60), CHURN_S (120), SAMPLE_S (15), REPLICAS
# (4), KV_BLOCKS (512), CONCURRENCY (16), WORKING_SET (4), PRECISE_MAX_PER_REPLICA (65536),
# PRECISE_MAX_TOTAL (262144), BIN_DIR (prebuilt binaries; otherwise a release build), ports
# SIM_PORT KV_PORT ROUTER_PORT ADMIN_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results-soak}
DURATION_S=${DURATION_S:-1800}
CHUNK_S=${CHUNK_S:-60}
CHURN_S=${CHURN_S:-120}
SAMPLE_S=${SAMPLE_S:-15}
REPLICAS=${REPLICAS:-4}
KV_BLOCKS=${KV_BLOCKS:-512}
CONCURRENCY=${CONCURRENCY:-16}
WORKING_SET=${WORKING_SET:-4}
PRECISE_MAX_PER_REPLICA=${PRECISE_MAX_PER_REPLICA:-65536}
PRECISE_MAX_TOTAL=${PRECISE_MAX_TOTAL:-262144}
SIM_PORT=${SIM_PORT:-18901}
KV_PORT=${KV_PORT:-18951}
ROUTER_PORT=${ROUTER_PORT:-18981}
ADMIN_PORT=${ADMIN_PORT:-18991}
BIN=${BIN_DIR:-target/release}

[ -n "${BIN_DIR:-}" ] || cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench
# shellcheck source=bench/lib.sh
. bench/lib.sh
mkdir -p "$RESULTS"
rm -f "$RESULTS"/samples.tsv "$RESULTS"/commands.txt "$RESULTS"/summary.txt

SIM_PID=""
start_sim() {
  local cmd=("$BIN/warmpath-sim" --listen "127.0.0.1:$SIM_PORT" --replicas "$REPLICAS"
    --kv-blocks "$KV_BLOCKS" --block-size 16 --prefill-us-per-token 20 --max-num-seqs 64
    --kv-events-endpoint "tcp://*:$KV_PORT")
  echo "${cmd[*]}" | sed "s#$BIN/##" >> "$RESULTS/commands.txt"
  "${cmd[@]}" >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!; PIDS+=("$SIM_PID")
  for i in $(seq 0 $((REPLICAS - 1))); do wait_http "http://127.0.0.1:$((SIM_PORT + i))/health" 30; done
}

CFG="$WORK/router.yaml"
write_config() { # the replica to leave out (-1: none)
  local out=$1
  {
    echo "listen: 127.0.0.1:$ROUTER_PORT"
    echo "admin: 127.0.0.1:$ADMIN_PORT"
    echo "index:"
    echo "  precise_max_blocks_per_replica: $PRECISE_MAX_PER_REPLICA"
    echo "  precise_max_blocks_total: $PRECISE_MAX_TOTAL"
    echo "pools:"
    echo "  - name: sim"
    echo "    models: [tiny]"
    echo "    kv_events: {}"
    echo "    replicas:"
    for i in $(seq 0 $((REPLICAS - 1))); do
      [ "$i" = "$out" ] && continue
      echo "      - { name: sim-$i, url: \"http://127.0.0.1:$((SIM_PORT + i))\", kv_events_endpoint: \"tcp://127.0.0.1:$((KV_PORT + i))\" }"
    done
  } > "$CFG.tmp"
  mv "$CFG.tmp" "$CFG"
}

start_sim
write_config -1
cp "$CFG" "$RESULTS/router.yaml"
echo "warmpath-router --config router.yaml" >> "$RESULTS/commands.txt"
"$BIN/warmpath-router" --config "$CFG" >"$WORK/router.log" 2>&1 &
ROUTER_PID=$!; PIDS+=("$ROUTER_PID")
wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 30

metric() { # name → the sum of its samples in the last scrape
  awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%d", s }' "$WORK/metrics.txt"
}
printf 'elapsed_s\trss_kib\tprecise_entries\tprecise_bytes\tpending_blocks\tapprox_entries\tstored\tremoved\trestarts\treplicas\trequests_ok\n' > "$RESULTS/samples.tsv"
sampler() {
  local start=$SECONDS
  while kill -0 "$ROUTER_PID" 2>/dev/null; do
    curl -fsS "http://127.0.0.1:$ADMIN_PORT/metrics" > "$WORK/metrics.txt" 2>/dev/null || true
    local rss
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$ROUTER_PID/status" 2>/dev/null || echo 0)
    printf '%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $((SECONDS - start)) "$rss" \
      "$(metric warmpath_kv_index_entries)" "$(metric warmpath_kv_index_bytes)" \
      "$(metric warmpath_kv_pending_blocks)" "$(metric warmpath_prefix_index_entries)" \
      "$(grep -E '^warmpath_kv_events_total\{kind="stored"\}' "$WORK/metrics.txt" | awk '{ print $2 }' || echo 0)" \
      "$(grep -E '^warmpath_kv_events_total\{kind="removed"\}' "$WORK/metrics.txt" | awk '{ print $2 }' || echo 0)" \
      "$(grep -E '^warmpath_kv_events_total\{kind="restart"\}' "$WORK/metrics.txt" | awk '{ print $2 }' || echo 0)" \
      "$(grep -c '^warmpath_kv_events_mode{' "$WORK/metrics.txt" || true)" \
      "$(grep -E '^warmpath_requests_total\{.*status="200"' "$WORK/metrics.txt" | awk '{ s += $2 } END { printf "%d", s }')" \
      >> "$RESULTS/samples.tsv"
    sleep "$SAMPLE_S"
  done
}
sampler &
PIDS+=($!)

churner() {
  local k=0
  while true; do
    sleep "$CHURN_S"
    write_config $((k % REPLICAS))
    k=$((k + 1))
  done
}
churner &
PIDS+=($!)

END=$((SECONDS + DURATION_S))
RESTARTS=("$((SECONDS + DURATION_S / 3))" "$((SECONDS + 2 * DURATION_S / 3))")
seed=100
while [ $SECONDS -lt $END ]; do
  if [ ${#RESTARTS[@]} -gt 0 ] && [ $SECONDS -ge "${RESTARTS[0]}" ]; then
    echo "restarting the fleet at ${SECONDS}s" >&2
    kill "$SIM_PID"; wait "$SIM_PID" 2>/dev/null || true
    start_sim
    RESTARTS=("${RESTARTS[@]:1}")
  fi
  chunk=$(( END - SECONDS < CHUNK_S ? END - SECONDS : CHUNK_S ))
  [ "$chunk" -gt 5 ] || break
  seed=$((seed + 1))
  cmd=("$BIN/warmpath-bench" run --url "http://127.0.0.1:$ROUTER_PORT" --suite soak --label soak
    --seed "$seed" --fleet-replicas "$REPLICAS" --fleet-kv-blocks "$KV_BLOCKS" --fleet-block-size 16
    --workload shared-prefix --mode closed --concurrency "$CONCURRENCY" --working-set "$WORKING_SET"
    --zipf 0.6 --duration "${chunk}s" --warmup 0 --timeout 30s --out "$WORK/run-$seed.json")
  [ "$seed" = 101 ] && echo "${cmd[*]} (a new --seed every ${CHUNK_S}s)" | sed "s#$BIN/##" >> "$RESULTS/commands.txt"
  "${cmd[@]}" >"$WORK/bench.log" 2>&1 || echo "a load chunk failed (seed $seed): $(tail -1 "$WORK/bench.log")" >&2
done
sleep "$SAMPLE_S"

python3 - "$RESULTS/samples.tsv" "$DURATION_S" > "$RESULTS/summary.txt" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
duration = int(sys.argv[2])
rss = [(int(r["elapsed_s"]), int(r["rss_kib"])) for r in rows if int(r["rss_kib"]) > 0]
warm = [v for t, v in rss if t >= min(300, duration // 6)]
half = [(t, v) for t, v in rss if t >= duration // 2]
n = len(half)
mt = sum(t for t, _ in half) / n
mv = sum(v for _, v in half) / n
slope = sum((t - mt) * (v - mv) for t, v in half) / max(1e-9, sum((t - mt) ** 2 for t, _ in half))
last = rows[-1]
print(f"samples: {len(rss)} over {rss[-1][0]} s")
print(f"RSS after warm-up (first sample at or after {min(300, duration // 6)} s): {warm[0] / 1024:.1f} MiB")
print(f"RSS at the end: {rss[-1][1] / 1024:.1f} MiB; maximum {max(v for _, v in rss) / 1024:.1f} MiB")
print(f"RSS slope over the second half (least squares): {slope * 3600 / 1024:+.2f} MiB per hour")
print(f"KV events applied: stored {last['stored']}, removed {last['removed']}, restarts seen {last['restarts']}")
print(f"precise index at the end: {last['precise_entries']} entries, {int(last['precise_bytes']) / 1048576:.1f} MiB estimated;"
      f" maximum {max(int(r['precise_entries']) for r in rows)} entries")
print(f"pending blocks at the end: {last['pending_blocks']}; approximate index entries: {last['approx_entries']}")
print(f"requests answered 200: {last['requests_ok']}")
PY
cat "$RESULTS/summary.txt"
