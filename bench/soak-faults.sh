#!/usr/bin/env bash
# bench/soak-faults.sh — does the router lose servable requests, memory or file descriptors when
# its replicas misbehave for a long time? (issue 16)
#
# REPLICAS simulator processes (warmpath-sim, one replica each) behind one warmpath router, under
# closed-loop streaming load (warmpath-bench, CONCURRENCY clients, runs of CHUNK_S seconds back to
# back, each with a new seed) for DURATION_S seconds, while faults are injected:
#   - every FAULT_S seconds one replica (in turn) gets a fault for FAULT_FOR_S seconds, the kinds
#     in turn: errors (half its answers 500), hang (it answers nothing, metrics still fine),
#     drop (streams cut after 2 chunks), slow (a chunk every 200 ms), refuse (connections refused);
#   - every CHURN_S seconds the router's configuration file drops one replica (a different one
#     each time) and brings the previous one back (the router reloads it);
#   - every KILL_S seconds one simulator process is killed (SIGKILL, its streams cut) and started
#     again 5 s later.
# Every SAMPLE_S seconds: the router's RSS and open file descriptors (/proc). Writes into RESULTS:
# samples.tsv, faults.txt, the commands, the router configuration, and summary.txt: every client
# outcome by kind, what of it a router cannot save (below), RSS and fds after warm-up, at the end,
# their maximum and their slope over the second half. About DURATION_S + 1 minute.
#
# What no router can save: a failure after a success status reached the client (a stream cut or
# failed midway: the router had committed to that answer; warmpath-bench counts these as
# `errors_after_response`). Everything else failing is a servable request lost, whether or not
# warmpath promises to save it today: an engine's 500 or a 504 from an engine that hung, both
# before any byte reached the client, are listed by kind as what a retry before the first byte
# would have saved (issue 34), not as unsavable. (Until 2026-12-03 this script counted those as
# unsavable; its earlier summaries read so.)
#
# Knobs (environment): DURATION_S (1800), CHUNK_S (60), FAULT_S (40), FAULT_FOR_S (25),
# CHURN_S (90), KILL_S (150), SAMPLE_S (15), REPLICAS (4), CONCURRENCY (16), HEADER_MS (8000),
# BIN_DIR (prebuilt binaries; otherwise a release build), ports SIM_PORT ROUTER_PORT ADMIN_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results-soak-faults}
DURATION_S=${DURATION_S:-1800}
CHUNK_S=${CHUNK_S:-60}
FAULT_S=${FAULT_S:-40}
FAULT_FOR_S=${FAULT_FOR_S:-25}
CHURN_S=${CHURN_S:-90}
KILL_S=${KILL_S:-150}
SAMPLE_S=${SAMPLE_S:-15}
REPLICAS=${REPLICAS:-4}
CONCURRENCY=${CONCURRENCY:-16}
HEADER_MS=${HEADER_MS:-8000}
SIM_PORT=${SIM_PORT:-19101}
ROUTER_PORT=${ROUTER_PORT:-19181}
ADMIN_PORT=${ADMIN_PORT:-19191}
BIN=${BIN_DIR:-target/release}

[ -n "${BIN_DIR:-}" ] || cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench
# shellcheck source=bench/lib.sh
. bench/lib.sh
mkdir -p "$RESULTS"
rm -f "$RESULTS"/samples.tsv "$RESULTS"/commands.txt "$RESULTS"/summary.txt "$RESULTS"/faults.txt

declare -A SIM_PIDS
start_sim() { # replica index
  local i=$1
  local cmd=("$BIN/warmpath-sim" --listen "127.0.0.1:$((SIM_PORT + i))" --replicas 1
    --kv-blocks 2048 --block-size 16 --max-num-seqs 64)
  [ "$i" = 0 ] && echo "${cmd[*]} (one process per replica, ports $SIM_PORT+i)" | sed "s#$BIN/##" >> "$RESULTS/commands.txt"
  "${cmd[@]}" >>"$WORK/sim-$i.log" 2>&1 &
  SIM_PIDS[$i]=$!
  PIDS+=("$!")
  disown "$!" # its SIGKILL is the point; no job notice
}
for i in $(seq 0 $((REPLICAS - 1))); do start_sim "$i"; done
for i in $(seq 0 $((REPLICAS - 1))); do wait_http "http://127.0.0.1:$((SIM_PORT + i))/health" 30; done

CFG="$WORK/router.yaml"
write_config() { # the replica to leave out (-1: none)
  local out=$1
  {
    echo "listen: 127.0.0.1:$ROUTER_PORT"
    echo "admin: 127.0.0.1:$ADMIN_PORT"
    echo "timeouts:"
    echo "  header_ms: $HEADER_MS"
    echo "pools:"
    echo "  - name: sim"
    echo "    models: [tiny]"
    echo "    replicas:"
    for i in $(seq 0 $((REPLICAS - 1))); do
      [ "$i" = "$out" ] && continue
      echo "      - { name: sim-$i, url: \"http://127.0.0.1:$((SIM_PORT + i))\" }"
    done
  } > "$CFG.tmp"
  mv "$CFG.tmp" "$CFG"
}
write_config -1
cp "$CFG" "$RESULTS/router.yaml"
echo "warmpath-router --config router.yaml" >> "$RESULTS/commands.txt"
"$BIN/warmpath-router" --config "$CFG" >"$WORK/router.log" 2>&1 &
ROUTER_PID=$!; PIDS+=("$ROUTER_PID")
wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 30

printf 'elapsed_s\trss_kib\tfds\trequests_200\n' > "$RESULTS/samples.tsv"
sampler() {
  local start=$SECONDS
  while kill -0 "$ROUTER_PID" 2>/dev/null; do
    local rss fds ok
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$ROUTER_PID/status" 2>/dev/null || echo 0)
    fds=$(find "/proc/$ROUTER_PID/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    ok=$(curl -fsS "http://127.0.0.1:$ADMIN_PORT/metrics" 2>/dev/null |
      awk '/^warmpath_requests_total\{/ && /status="200"/ { s += $2 } END { printf "%d", s }')
    printf '%d\t%s\t%s\t%s\n' $((SECONDS - start)) "$rss" "$fds" "$ok" >> "$RESULTS/samples.tsv"
    sleep "$SAMPLE_S"
  done
}
sampler &
PIDS+=($!)

fault() { # replica index, JSON body
  curl -fsS -m 2 -X POST -H 'content-type: application/json' \
    "http://127.0.0.1:$((SIM_PORT + $1))/admin/faults" -d "$2" >/dev/null 2>&1 || true
}
injector() {
  local k=0 kinds=(errors hang drop slow refuse) ms=$((FAULT_FOR_S * 1000)) start=$SECONDS
  while true; do
    sleep "$FAULT_S"
    local i=$((k % REPLICAS)) kind=${kinds[$((k % 5))]}
    echo "$((SECONDS - start))s fault $kind on sim-$i for ${FAULT_FOR_S}s" >> "$RESULTS/faults.txt"
    case $kind in
      errors) fault "$i" "{\"error_rate\": 0.5, \"for_ms\": $ms}" ;;
      hang) fault "$i" "{\"hang\": true, \"for_ms\": $ms}" ;;
      drop) fault "$i" "{\"drop_mid_stream\": true, \"drop_after_chunks\": 2, \"for_ms\": $ms}" ;;
      slow) fault "$i" "{\"slow_stream\": true, \"slow_stream_ms\": 200, \"for_ms\": $ms}" ;;
      refuse) fault "$i" "{\"refuse_connections\": true, \"for_ms\": $ms}" ;;
    esac
    k=$((k + 1))
  done
}
injector &
PIDS+=($!)
churner() {
  local k=0 start=$SECONDS
  while true; do
    sleep "$CHURN_S"
    echo "$((SECONDS - start))s config without sim-$((k % REPLICAS))" >> "$RESULTS/faults.txt"
    write_config $((k % REPLICAS))
    k=$((k + 1))
  done
}
churner &
PIDS+=($!)

END=$((SECONDS + DURATION_S))
NEXT_KILL=$((SECONDS + KILL_S))
START=$SECONDS
kills=0
run_chunk() { # seed seconds
  "$BIN/warmpath-bench" run --url "http://127.0.0.1:$ROUTER_PORT" --suite soak-faults --label soak \
    --seed "$1" --fleet-replicas "$REPLICAS" --fleet-kv-blocks 2048 --fleet-block-size 16 \
    --workload shared-prefix --mode closed --concurrency "$CONCURRENCY" --working-set 1 \
    --output-tokens 32 --duration "${2}s" --warmup 0 --timeout 30s --no-oracle --quiet \
    --out "$WORK/run-$1.json" >"$WORK/bench-$1.log" 2>&1 || echo "load chunk $1 failed: $(tail -1 "$WORK/bench-$1.log")" >&2
}
seed=100
echo "warmpath-bench run --url ROUTER --workload shared-prefix --mode closed --concurrency $CONCURRENCY --working-set 1 --output-tokens 32 --duration ${CHUNK_S}s --timeout 30s --no-oracle (a new --seed every ${CHUNK_S}s)" >> "$RESULTS/commands.txt"
while [ $SECONDS -lt $END ]; do
  chunk=$(( END - SECONDS < CHUNK_S ? END - SECONDS : CHUNK_S ))
  [ "$chunk" -gt 5 ] || break
  seed=$((seed + 1))
  run_chunk "$seed" "$chunk" &
  load=$!
  # Kill a simulator process while the chunk runs, when one is due.
  while kill -0 "$load" 2>/dev/null; do
    if [ $SECONDS -ge $NEXT_KILL ]; then
      i=$((kills % REPLICAS))
      echo "$((SECONDS - START))s SIGKILL sim-$i, restarted 5 s later" >> "$RESULTS/faults.txt"
      kill -9 "${SIM_PIDS[$i]}" 2>/dev/null || true
      sleep 5
      start_sim "$i"
      kills=$((kills + 1))
      NEXT_KILL=$((SECONDS + KILL_S))
    fi
    sleep 1
  done
  wait "$load" || true
done
sleep "$SAMPLE_S"
# What the router saved: its retries by reason (an engine's 5xx, a refused connection, a request
# taken back from a hung engine), counted since it started (it runs the whole soak).
curl -fsS -m 5 "http://127.0.0.1:$ADMIN_PORT/metrics" | grep '^warmpath_retries_total' > "$WORK/retries.txt" || true
# The router's warnings, colours stripped: what it said about each fault.
sed 's/\x1b\[[0-9;]*m//g' "$WORK/router.log" | grep -E ' (WARN|ERROR) ' > "$RESULTS/router-warnings.txt" || true

run_line="run: commit $(commit_said ' with uncommitted changes') (binaries: $BIN), $(date -u +%F), DURATION_S=$DURATION_S, $REPLICAS replicas, $CONCURRENCY streaming clients"
python3 - "$RESULTS/samples.tsv" "$DURATION_S" "$WORK" "$run_line" > "$RESULTS/summary.txt" <<'PY'
import csv, glob, json, re, sys
print(sys.argv[4])
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
duration = int(sys.argv[2])
ok = 0
after = 0
kinds = {}
for path in sorted(glob.glob(sys.argv[3] + "/run-*.json")):
    r = json.load(open(path))
    counts = r["counts"]
    ok += counts["ok"]
    after += counts.get("errors_after_response", 0)
    for k, v in counts["errors_by_kind"].items():
        kinds[k] = kinds.get(k, 0) + v
failed = sum(kinds.values())
total = ok + failed
print(f"requests: {total}; answered whole: {ok} ({100 * ok / max(1, total):.2f} %); failed: {failed} {kinds}")
print(f"  not savable (failed after a success status reached the client): {after}")
print(f"servable requests lost (failed before any byte reached the client; a retry could have saved them): {failed - after}")
for k in ("status_500", "status_504"):
    print(f"  of which {k} ({'an engine 500' if k == 'status_500' else 'an engine that hung'}): {kinds.get(k, 0)}")
retries = {}
try:
    for line in open(sys.argv[3] + "/retries.txt"):
        m = re.match(r'warmpath_retries_total\{.*reason="([^"]+)".*\} ([0-9.e+]+)', line)
        if m:
            retries[m.group(1)] = retries.get(m.group(1), 0) + int(float(m.group(2)))
except OSError:
    pass
print(f"tries the router made again (warmpath_retries_total by reason; what saved the servable ones): {retries}")
def series(col):
    return [(int(r["elapsed_s"]), int(r[col])) for r in rows if int(r[col]) > 0]
def describe(col, unit, scale):
    s = series(col)
    warm_at = min(300, duration // 6)
    warm = [v for t, v in s if t >= warm_at]
    half = [(t, v) for t, v in s if t >= duration // 2]
    n = len(half)
    mt = sum(t for t, _ in half) / n
    mv = sum(v for _, v in half) / n
    slope = sum((t - mt) * (v - mv) for t, v in half) / max(1e-9, sum((t - mt) ** 2 for t, _ in half))
    print(f"{col}: after warm-up ({warm_at} s) {warm[0] / scale:.1f} {unit}, at the end {s[-1][1] / scale:.1f},"
          f" maximum {max(v for _, v in s) / scale:.1f}, slope over the second half {slope * 3600 / scale:+.2f} {unit} per hour")
print(f"samples: {len(rows)} over {rows[-1]['elapsed_s']} s")
describe("rss_kib", "MiB", 1024)
describe("fds", "fds", 1)
PY
cat "$RESULTS/summary.txt"
