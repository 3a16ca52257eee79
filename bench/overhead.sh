#!/usr/bin/env bash
# bench/overhead.sh — what each front adds to a streamed request's TTFT when nothing is queued:
# the plumbing, measured apart from the routing (issue 14).
#
# One simulated replica (warmpath-sim, default costs) and, in front of it, in turn: nothing
# (`direct`), warmpath (`prefix` policy), warmpath routing from the replica's KV events, nginx
# (round-robin, keepalive, no buffering) and SMG 1.13, the Shepherd Model Gateway (`smg`,
# cache_aware, through ../shared/peers/smg.sh; the older sglang-router 0.3.2 as `sglang` when
# SYSTEMS names it). Each gets the same
# closed loop of ONE request at a time: short prompts (64-token shared part, 32-token question),
# 8 output tokens, streamed. ROUNDS rounds, the fronts in a seeded shuffled order per round, the
# fleet and the front restarted each time; a front's figure is the median over rounds of its
# run's TTFT p50 (and p90), and "added" subtracts `direct`'s median.
#
# Writes RESULTS/overhead.tsv (every run) and RESULTS/OVERHEAD.md (the table). About 3 minutes.
# SMG's version and flags go to RESULTS/commands.txt and OVERHEAD.md.
# Knobs: ROUNDS (3), REQUESTS (120, of which WARMUP 20 left out), SMG_DIR, SGLANG_DIR, BIN_DIR, NGINX,
# ports SIM_PORT KV_PORT FRONT_PORT ADMIN_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results-overhead}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-120}
WARMUP=${WARMUP:-20}
SGLANG_DIR=${SGLANG_DIR:-/work/peers/sglang}
NGINX=${NGINX:-nginx}
SIM_PORT=${SIM_PORT:-18401}
KV_PORT=${KV_PORT:-18451}
FRONT_PORT=${FRONT_PORT:-18480}
ADMIN_PORT=${ADMIN_PORT:-18490}
BIN=${BIN_DIR:-target/release}
SYSTEMS=${SYSTEMS:-"direct warmpath warmpath-events nginx smg"}

[ -n "${BIN_DIR:-}" ] || cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench
# shellcheck source=bench/lib.sh
. bench/lib.sh
mkdir -p "$RESULTS"
printf 'round\tsystem\tttft_p50_ms\tttft_p90_ms\terrors\n' > "$RESULTS/overhead.tsv"
: > "$RESULTS/commands.txt"
SMG_LINE=""
case " $SYSTEMS " in
  *" smg "*)
    if smg_ready; then
      SMG_LINE="smg $(smg_version): smg launch --policy cache_aware --backend vllm --log-level warn"
      echo "# $SMG_LINE" >> "$RESULTS/commands.txt"
    fi ;;
esac

RUN_PIDS=()
stop_run() {
  for p in "${RUN_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${RUN_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  RUN_PIDS=()
}
start() { # log command...
  local log=$1; shift
  echo "$*" | sed "s#$BIN/##" >> "$RESULTS/commands.txt"
  "$@" >"$log" 2>&1 &
  RUN_PIDS+=($!); PIDS+=($!)
}

run() { # round system
  local round=$1 system=$2 url
  start "$WORK/sim.log" "$BIN/warmpath-sim" --listen "127.0.0.1:$SIM_PORT" --kv-events-endpoint "tcp://*:$KV_PORT"
  wait_http "http://127.0.0.1:$SIM_PORT/health" 30
  case $system in
    direct) url="http://127.0.0.1:$SIM_PORT" ;;
    warmpath|warmpath-events)
      {
        echo "listen: 127.0.0.1:$FRONT_PORT"
        echo "admin: 127.0.0.1:$ADMIN_PORT"
        echo "pools:"
        echo "  - name: sim"
        echo "    models: [tiny]"
        [ "$system" = warmpath-events ] && echo "    kv_events: {}"
        echo "    replicas:"
        echo "      - { name: sim-0, url: \"http://127.0.0.1:$SIM_PORT\", kv_events_endpoint: \"tcp://127.0.0.1:$KV_PORT\" }"
      } > "$WORK/router.yaml"
      start "$WORK/front.log" "$BIN/warmpath-router" --config "$WORK/router.yaml"
      wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 30
      url="http://127.0.0.1:$FRONT_PORT" ;;
    nginx)
      local user=""
      [ "$(id -u)" = 0 ] && user="user root;"
      cat > "$WORK/nginx.conf" <<EOF
$user
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  upstream engines { server 127.0.0.1:$SIM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$FRONT_PORT;
    location / {
      proxy_pass http://engines;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
      start "$WORK/front.log" "$NGINX" -c "$WORK/nginx.conf"
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 30
      url="http://127.0.0.1:$FRONT_PORT" ;;
    smg)
      smg_ready || { echo "no SMG under $SMG_DIR: skipped" >&2; stop_run; return 0; }
      start "$WORK/front.log" bash "$PEERS/smg.sh" serve "$SMG_DIR" "$FRONT_PORT" cache_aware "http://127.0.0.1:$SIM_PORT"
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 90
      url="http://127.0.0.1:$FRONT_PORT" ;;
    sglang)
      [ -x "$SGLANG_DIR/venv/bin/python" ] || { echo "no SGLang gateway under $SGLANG_DIR: skipped" >&2; stop_run; return 0; }
      start "$WORK/front.log" "$SGLANG_DIR/venv/bin/python" -m sglang_router.launch_router --host 127.0.0.1 \
        --port "$FRONT_PORT" --prometheus-port $((FRONT_PORT + 1000)) --policy cache_aware --log-level warn \
        --worker-urls "http://127.0.0.1:$SIM_PORT"
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 90
      url="http://127.0.0.1:$FRONT_PORT" ;;
  esac
  local out="$WORK/$system-$round.json"
  local cmd=("$BIN/warmpath-bench" run --url "$url" --suite overhead --label "$system" --seed "$round"
    --workload shared-prefix --system-tokens 64 --question-tokens 32 --output-tokens 8 --mode closed
    --concurrency 1 --requests "$REQUESTS" --warmup "$WARMUP" --no-oracle --quiet --out "$out")
  [ "$round" = 1 ] && echo "${cmd[*]}" | sed "s#$BIN/##" >> "$RESULTS/commands.txt"
  "${cmd[@]}" >"$WORK/bench.log" 2>&1 || { echo "$system round $round failed: $(tail -2 "$WORK/bench.log")" >&2; stop_run; return 0; }
  python3 - "$out" "$round" "$system" >> "$RESULTS/overhead.tsv" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["latency_ms"]["ttft"]
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{t['p50']:.3f}\t{t['p90']:.3f}\t{d['counts'].get('errors', 0)}")
PY
  stop_run
}

for round in $(seq 1 "$ROUNDS"); do
  for system in $(printf '%s\n' $SYSTEMS | shuf --random-source=<(yes "$round")); do
    echo "== $system (round $round)" >&2
    run "$round" "$system"
  done
done

python3 - "$RESULTS/overhead.tsv" "$ROUNDS" "$SMG_LINE" > "$RESULTS/OVERHEAD.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = {}
for r in rows:
    by.setdefault(r["system"], []).append(r)
med = {s: (statistics.median(float(r["ttft_p50_ms"]) for r in rs),
           statistics.median(float(r["ttft_p90_ms"]) for r in rs)) for s, rs in by.items()}
base = med.get("direct", (0.0, 0.0))
print("# Low-load TTFT overhead of each front (`bench/overhead.sh`)\n")
print(f"One simulated replica, one streamed request at a time (64 + 32 prompt tokens, 8 out); median over {sys.argv[2]} rounds of each run's TTFT p50 and p90; added = the front's median minus `direct`'s.\n")
print("| front | TTFT p50 ms | TTFT p90 ms | added p50 ms | added p90 ms | per-round p50 ms |")
print("|---|---:|---:|---:|---:|---|")
for s in ["direct", "warmpath", "warmpath-events", "nginx", "smg", "sglang"]:
    if s not in med:
        continue
    p50, p90 = med[s]
    rounds = ", ".join(f"{float(r['ttft_p50_ms']):.2f}" for r in by[s])
    print(f"| {s} | {p50:.2f} | {p90:.2f} | {p50 - base[0]:+.2f} | {p90 - base[1]:+.2f} | {rounds} |")
if sys.argv[3]:
    print(f"\n`smg`: {sys.argv[3]}.")
PY
cat "$RESULTS/OVERHEAD.md"
