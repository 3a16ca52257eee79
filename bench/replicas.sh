#!/usr/bin/env bash
# bench/replicas.sh — does warmpath keep its hit rate when it runs as several router replicas,
# and does routing from the engines' KV events beat guessing when the caches bind? (issue 14)
#
# One simulated fleet (warmpath-sim, REPLICAS replicas × KV_BLOCKS blocks of 16 tokens, the costs
# of bench/compare.sh, every replica publishing its KV events on tcp://*:KV_PORT+i), and in front
# of it, always behind one nginx (round-robin over its upstreams, keepalive, no buffering, so that
# the one-router and the N-router systems differ only in the number of routers):
#   precise-1, precise-N   warmpath `prefix`, the pool with `kv_events` (each replica's
#                          kv_events_endpoint), 1 or ROUTERS routers
#   approx-1, approx-N     the same without `kv_events`: the approximate index only
#   smg-1, smg-N           SMG 1.13 (the Shepherd Model Gateway, ../shared/peers/smg.sh), cache_aware
#                          with the tuned balance thresholds (SMG_ARGS, default
#                          bench/results/smg-tuned-args), 1 or ROUTERS gateways, each on its own
#                          (no `--enable-mesh`: the gateways share no state, as sglang-router's did not)
#   sglang-1, sglang-N     (when named) the older sglang-router 0.3.2 the same way (SGLANG_ARGS)
#   nginx-rr               nginx round-robin straight over the engines (no router: the floor)
#   shadow-N               (when named) precise-N's N routers running, nginx sending to the first
#                          only: one router's decisions with N routers' CPU use (a diagnosis)
#   peered-N               (when named) precise-N with `peers`: each router publishes its
#                          placements on PEER_PORT+k and follows every router's (its own
#                          included, as a headless Service's name would give it)
#   peered-approx-N        (when named) approx-N with `peers`
# and, when named in SYSTEMS (bench/sessions.sh names them, for issue 15):
#   sessions-1, sessions-N warmpath `prefix` with the approximate index and session affinity, the
#                          client echoing each session's `x-session-token`
#   sessionmap-N           the same without the echo: each router's own session map only
#   predicted-1, -N        warmpath `predicted_ttft`, approximate index
#   smg-key-1, -N          SMG's `manual` policy: a session's routing key (`x-smg-routing-key`)
#                          sticks to one worker (`--assignment-mode min_load`)
#   sglang-key-1, -N       (when named) the same on sglang-router 0.3.2
# Warmpath's systems other than sessions-* and sessionmap-* run with session affinity off, so
# that they route by prefix (and load) alone.
# on the shared-prefix workload (or WORKLOAD with WORKLOAD_ARGS) sized so that its distinct
# prefixes are WORKING_SET × the fleet's KV cache, Zipf(ZIPF) popularity (compare.sh's "binding"
# section), closed loop at CONCURRENCY,
# REQUESTS per run with the first WARMUP left out of latency and throughput (the hit rate is the
# engines' own, over the whole run, as compare.sh reads it). SEEDS seeds, the systems in a
# seeded shuffled order per seed, and the fleet and every router, gateway and nginx restarted
# before each run (caches start empty; routers subscribe before the first request, so their
# views of the engines start complete, `fresh`).
#
# Writes into RESULTS: one JSON per run (SYSTEM-sSEED.json), the routers' KV-event and decision
# metrics after each warmpath run (metrics/), the configurations used (configs/), every command
# (commands.txt), summary.json (medians and ratios) and REPORT.md (with notes.md appended when
# present). About 15 minutes on two cores with the defaults.
#
# Knobs (environment): SEEDS, SYSTEMS, ROUTERS, REPLICAS, KV_BLOCKS, PREFILL_US, CONCURRENCY,
# REQUESTS, WARMUP, WORKING_SET, ZIPF, WORKLOAD, WORKLOAD_ARGS (the bench's workload flags; default
# "--zipf $ZIPF"), REPORT_TITLE, SMG_ARGS, SMG_DIR, SGLANG_ARGS, SGLANG_DIR, BIN_DIR (prebuilt binaries;
# otherwise a release build into target/), NGINX, ports SIM_PORT KV_PORT FRONT_PORT ROUTER_PORT
# ADMIN_PORT, BINARIES_FROM (a note on where BIN_DIR's binaries were built from, for the record),
# REPORT_ONLY=1 (no runs: rewrite REPORT.md and summary.json from the results already there),
# KEEP_RESULTS=1 (a later part of a run split by seeds: keep the earlier parts' results),
# SCHEDULING_EXTRA (a line added under the routers' `scheduling:`, e.g.
# "placement: { new_prefix_slack: 1.5 }"), SESSIONS_EXTRA (added to the sessions-* routers'
# `sessions:` map, e.g. "max_extra_queue: 2"), INDEX_EXTRA and FLOW_EXTRA (the warmpath routers'
# `index:` and `flow:` maps, e.g. INDEX_EXTRA="pending_max_blocks: 0" or
# FLOW_EXTRA="enabled: true, saturation: { max_waiting_requests: 1 }").
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results-replicas}
SEEDS=${SEEDS:-"11 12 13"}
ROUTERS=${ROUTERS:-4}
SYSTEMS=${SYSTEMS:-"precise-1 precise-$ROUTERS approx-1 approx-$ROUTERS smg-1 smg-$ROUTERS nginx-rr"}
REPLICAS=${REPLICAS:-4}
KV_BLOCKS=${KV_BLOCKS:-512}
BLOCK_SIZE=16
PREFILL_US=${PREFILL_US:-100}
CONCURRENCY=${CONCURRENCY:-32}
REQUESTS=${REQUESTS:-800}
WARMUP=${WARMUP:-150}
WORKING_SET=${WORKING_SET:-1.5}
ZIPF=${ZIPF:-1.0}
WORKLOAD=${WORKLOAD:-shared-prefix}
WORKLOAD_ARGS=${WORKLOAD_ARGS:-"--zipf $ZIPF"}
REPORT_TITLE=${REPORT_TITLE:-"Router replicas: hit rate with 1 and $ROUTERS routers, precise against approximate (issue 14)"}
SIM_PORT=${SIM_PORT:-18701}
KV_PORT=${KV_PORT:-18751}
FRONT_PORT=${FRONT_PORT:-18780}
ROUTER_PORT=${ROUTER_PORT:-18781}
ADMIN_PORT=${ADMIN_PORT:-18791}
PEER_PORT=${PEER_PORT:-18761}
SMG_ARGS=${SMG_ARGS:-$(cat bench/results/smg-tuned-args 2>/dev/null || echo "--balance-abs-threshold 4 --balance-rel-threshold 1.25")}
SGLANG_DIR=${SGLANG_DIR:-/work/peers/sglang}
SGLANG_ARGS=${SGLANG_ARGS:-$(cat bench/results/sglang-tuned-args 2>/dev/null || echo "--balance-abs-threshold 4 --balance-rel-threshold 1.25")}
NGINX=${NGINX:-nginx}
BIN=${BIN_DIR:-target/release}

if [ -z "${REPORT_ONLY:-}" ]; then
  [ -n "${BIN_DIR:-}" ] || cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench
  command -v "$NGINX" >/dev/null || { echo "bench/replicas.sh: no nginx ($NGINX)" >&2; exit 1; }
  mkdir -p "$RESULTS/metrics" "$RESULTS/configs"
  # KEEP_RESULTS=1: a later part of a run split by seeds adds to what the earlier parts wrote
  # (same binaries and settings; commands.txt says when each part ran).
  [ -n "${KEEP_RESULTS:-}" ] || rm -f "$RESULTS"/*-s[0-9]*.json "$RESULTS"/metrics/*.txt "$RESULTS"/configs/* "$RESULTS"/commands.txt \
    "$RESULTS"/summary.json "$RESULTS"/runs.tsv "$RESULTS"/elapsed_s
fi
# shellcheck source=bench/lib.sh
. bench/lib.sh
# An interrupted run stops its processes too (lib.sh's EXIT trap).
trap 'exit 130' INT TERM

say() { printf '\n== %s\n' "$*" >&2; }

if [ -z "${REPORT_ONLY:-}" ]; then
started=$SECONDS
note_cmd() { echo "$*" | sed "s#$BIN/##g; s#$WORK#\$WORK#g" >> "$RESULTS/commands.txt"; }
{
  echo "# bench/replicas.sh, $(date -u +%FT%TZ), commit $(commit_said ' (with uncommitted changes)')"
  echo "# SEEDS=\"$SEEDS\" SYSTEMS=\"$SYSTEMS\" ROUTERS=$ROUTERS REPLICAS=$REPLICAS KV_BLOCKS=$KV_BLOCKS PREFILL_US=$PREFILL_US CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS WARMUP=$WARMUP WORKING_SET=$WORKING_SET ZIPF=$ZIPF WORKLOAD=$WORKLOAD WORKLOAD_ARGS=\"$WORKLOAD_ARGS\" SMG_ARGS=\"$SMG_ARGS\" bash bench/replicas.sh"
  case " $SYSTEMS " in *" smg-"*) smg_ready && echo "# smg $(smg_version) (PyPI smg, $SMG_DIR); rows: smg-K: smg launch --policy cache_aware $SMG_ARGS --backend vllm --log-level warn; smg-key-K: smg launch --policy manual --assignment-mode min_load --backend vllm --log-level warn" ;; esac
  case " $SYSTEMS " in *" sglang-"*) echo "# sglang-router rows: SGLANG_ARGS=\"$SGLANG_ARGS\"" ;; esac
  [ -n "${BINARIES_FROM:-}" ] && echo "# binaries (BIN_DIR=$BIN_DIR): $BINARIES_FROM"
  echo "# every run: the fleet, then its front (routers or gateways, then nginx), then the load"
} > "$RESULTS/commands.new"
if [ -n "${KEEP_RESULTS:-}" ] && [ -f "$RESULTS/commands.txt" ]; then
  { echo; echo "# a later part of the same run (KEEP_RESULTS=1):"; cat "$RESULTS/commands.new"; } >> "$RESULTS/commands.txt"
  rm -f "$RESULTS/commands.new"
else
  mv "$RESULTS/commands.new" "$RESULTS/commands.txt"
fi

# Processes this script started and has not stopped yet (lib.sh's cleanup kills what is left;
# stopped ones leave the list so that a reused pid is never signalled).
started_pid() { PIDS+=("$1"); }
stop_pid() { # pid
  local p=$1 keep=() q
  kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
  for q in "${PIDS[@]}"; do [ "$q" = "$p" ] || keep+=("$q"); done
  PIDS=("${keep[@]}")
}

SIM_PID=""
FRONT_PIDS=()
stop_all() {
  local p
  for p in "${FRONT_PIDS[@]}"; do stop_pid "$p"; done
  FRONT_PIDS=()
  if [ -n "$SIM_PID" ]; then stop_pid "$SIM_PID"; SIM_PID=""; fi
}

engine_url() { echo "http://127.0.0.1:$((SIM_PORT + $1))"; }

start_sim() {
  local cmd=("$BIN/warmpath-sim" --listen "127.0.0.1:$SIM_PORT" --replicas "$REPLICAS"
    --kv-blocks "$KV_BLOCKS" --block-size "$BLOCK_SIZE" --prefill-us-per-token "$PREFILL_US"
    --max-model-len 8192 --kv-events-endpoint "tcp://*:$KV_PORT")
  note_cmd "${cmd[*]}"
  "${cmd[@]}" >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!; started_pid "$SIM_PID"
  local i
  for i in $(seq 0 $((REPLICAS - 1))); do wait_http "$(engine_url "$i")/health" 30; done
}

router_yaml() { # precise|approx|sessions|sessionmap|predicted|peered|peered-approx k n
  local kind=$1 peered=""
  case $1 in peered) kind=precise peered=1 ;; peered-approx) kind=approx peered=1 ;; esac
  echo "listen: 127.0.0.1:$((ROUTER_PORT + $2))"
  echo "admin: 127.0.0.1:$((ADMIN_PORT + $2))"
  echo "pools:"
  echo "  - name: tiny"
  echo "    models: [tiny]"
  [ "$kind" = precise ] && echo "    kv_events: {}"
  echo "    replicas:"
  local i
  for i in $(seq 0 $((REPLICAS - 1))); do
    if [ "$kind" = precise ]; then
      echo "      - { name: sim-$i, url: \"$(engine_url "$i")\", kv_events_endpoint: \"tcp://127.0.0.1:$((KV_PORT + i))\" }"
    else
      echo "      - { name: sim-$i, url: \"$(engine_url "$i")\" }"
    fi
  done
  # Routers that honour each other's session tokens share the key (the chart mounts one Secret).
  case $1 in
    sessions|sessionmap) echo "sessions: { key_file: \"$WORK/session-key\"${SESSIONS_EXTRA:+, $SESSIONS_EXTRA} }" ;;
    *) echo "sessions: { enabled: false }" ;;
  esac
  [ -z "${INDEX_EXTRA:-}" ] || echo "index: { $INDEX_EXTRA }"
  if [ -n "$peered" ]; then
    local routers=()
    for i in $(seq 0 $(($3 - 1))); do routers+=("\"tcp://127.0.0.1:$((PEER_PORT + i))\""); done
    echo "peers: { listen: \"tcp://127.0.0.1:$((PEER_PORT + $2))\", routers: [$(IFS=,; echo "${routers[*]}")] }"
  fi
  [ -z "${FLOW_EXTRA:-}" ] || echo "flow: { $FLOW_EXTRA }"
  echo "scheduling:"
  if [ "$1" = predicted ]; then echo "  policy: predicted_ttft"; else echo "  policy: prefix"; fi
  [ -z "${SCHEDULING_EXTRA:-}" ] || echo "  $SCHEDULING_EXTRA"
}

nginx_conf() { # upstream-addresses...
  [ "$(id -u)" = 0 ] && echo "user root;"
  cat <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx-tmp/body;
  proxy_temp_path $WORK/nginx-tmp/proxy;
  fastcgi_temp_path $WORK/nginx-tmp/fastcgi;
  uwsgi_temp_path $WORK/nginx-tmp/uwsgi;
  scgi_temp_path $WORK/nginx-tmp/scgi;
  upstream front {
EOF
  local a
  for a in "$@"; do echo "    server $a;"; done
  cat <<EOF
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$FRONT_PORT;
    client_body_buffer_size 1m;
    client_max_body_size 16m;
    location = /nginx-up { return 200; }
    location / {
      proxy_pass http://front;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
EOF
}

# Wait until router k follows every engine's events (its view of each replica is no longer
# `off`); the ZMQ subscription then needs a moment to reach the publisher.
wait_kv_following() { # k
  local deadline=$((SECONDS + 20)) m i ok
  while :; do
    m=$(curl -fsS "http://127.0.0.1:$((ADMIN_PORT + $1))/metrics" 2>/dev/null || true)
    ok=1
    for i in $(seq 0 $((REPLICAS - 1))); do
      echo "$m" | grep -Eq "^warmpath_kv_events_mode\{replica=\"sim-$i\"\} [12]" || ok=0
    done
    [ $ok = 1 ] && return 0
    if [ $SECONDS -ge $deadline ]; then echo "router $1 does not follow every engine's events" >&2; return 1; fi
    sleep 0.2
  done
}

# The K-th gateway of a peer's row, started from the command given and added to start_front's
# upstream list; wait_gateways N waits until all N answer their health check.
start_gateway() { # k cmd...
  local k=$1; shift
  note_cmd "$*"
  "$@" >"$WORK/front-$k.log" 2>&1 &
  FRONT_PIDS+=($!); started_pid $!
  upstream+=("127.0.0.1:$((ROUTER_PORT + k))")
}
wait_gateways() { # n
  local k
  for k in $(seq 0 $(($1 - 1))); do
    wait_http "http://127.0.0.1:$((ROUTER_PORT + k))/health" 90 || { tail -20 "$WORK/front-$k.log" >&2; return 1; }
  done
}

start_front() { # system seed
  local system=$1 kind=${1%-*} n=${1##*-} k upstream=()
  case $system in
    nginx-rr)
      local i
      for i in $(seq 0 $((REPLICAS - 1))); do upstream+=("127.0.0.1:$((SIM_PORT + i))"); done
      ;;
    precise-*|approx-*|sessions-*|sessionmap-*|predicted-*|shadow-*|peered-*)
      # shadow-N: N event-fed routers started, nginx sending to the first only: one router's
      # routing with N routers' CPU use on this machine.
      [ "$kind" = shadow ] && kind=precise
      for k in $(seq 0 $((n - 1))); do
        router_yaml "$kind" "$k" "$n" > "$WORK/router-$k.yaml"
        cp "$WORK/router-$k.yaml" "$RESULTS/configs/$kind-router-$k.yaml"
        note_cmd "$BIN/warmpath-router --config configs/$kind-router-$k.yaml"
        "$BIN/warmpath-router" --config "$WORK/router-$k.yaml" >"$WORK/front-$k.log" 2>&1 &
        FRONT_PIDS+=($!); started_pid $!
        case $system in shadow-*) [ "$k" = 0 ] && upstream+=("127.0.0.1:$ROUTER_PORT") ;;
          *) upstream+=("127.0.0.1:$((ROUTER_PORT + k))") ;; esac
      done
      for k in $(seq 0 $((n - 1))); do
        wait_http "http://127.0.0.1:$((ADMIN_PORT + k))/readyz" 30 || { tail -20 "$WORK/front-$k.log" >&2; return 1; }
        case $kind in precise|peered) wait_kv_following "$k" || return 1 ;; esac
      done
      case $kind in precise|peered|peered-approx) sleep 1 ;; esac
      ;;
    smg-*)  # smg-K and smg-key-K
      local policy=cache_aware flags=()
      # shellcheck disable=SC2206
      flags=($SMG_ARGS)
      [ "$kind" = smg-key ] && policy=manual flags=(--assignment-mode min_load)
      smg_ready || { echo "no SMG under $SMG_DIR" >&2; return 1; }
      local urls=() i
      for i in $(seq 0 $((REPLICAS - 1))); do urls+=("$(engine_url "$i")"); done
      for k in $(seq 0 $((n - 1))); do
        start_gateway "$k" bash "$PEERS/smg.sh" serve "$SMG_DIR" $((ROUTER_PORT + k)) "$policy" "${urls[@]}" -- "${flags[@]}"
      done
      wait_gateways "$n" || return 1
      ;;
    sglang-*)  # sglang-K and sglang-key-K
      # shellcheck disable=SC2206
      local policy=(--policy cache_aware $SGLANG_ARGS)
      [ "$kind" = sglang-key ] && policy=(--policy manual --assignment-mode min_load)
      [ -x "$SGLANG_DIR/venv/bin/python" ] || { echo "no SGLang gateway under $SGLANG_DIR" >&2; return 1; }
      local urls=() i
      for i in $(seq 0 $((REPLICAS - 1))); do urls+=("$(engine_url "$i")"); done
      for k in $(seq 0 $((n - 1))); do
        start_gateway "$k" "$SGLANG_DIR/venv/bin/python" -m sglang_router.launch_router --host 127.0.0.1 \
          --port $((ROUTER_PORT + k)) --prometheus-port $((ROUTER_PORT + 1000 + k)) "${policy[@]}" \
          --log-level warn --worker-urls "${urls[@]}"
      done
      wait_gateways "$n" || return 1
      ;;
    *) echo "unknown system $system" >&2; return 1 ;;
  esac
  mkdir -p "$WORK/nginx-tmp"
  nginx_conf "${upstream[@]}" > "$WORK/nginx.conf"
  sed "s#$WORK#\$WORK#g" "$WORK/nginx.conf" > "$RESULTS/configs/nginx-$system.conf"
  note_cmd "$NGINX -p \$WORK -c \$WORK/nginx.conf   # configs/nginx-$system.conf"
  "$NGINX" -p "$WORK" -c "$WORK/nginx.conf" >"$WORK/nginx.log" 2>&1 &
  FRONT_PIDS+=($!); started_pid $!
  wait_http "http://127.0.0.1:$FRONT_PORT/nginx-up" 20 || { cat "$WORK/nginx.log" "$WORK/nginx-error.log" >&2; return 1; }
}

# After a warmpath run: each router's KV-event counters and modes, decisions and index state.
save_router_metrics() { # system seed
  local n=${1##*-} k
  for k in $(seq 0 $((n - 1))); do
    curl -fsS "http://127.0.0.1:$((ADMIN_PORT + k))/metrics" 2>/dev/null \
      | grep -E '^warmpath_(kv_events|decisions|hotspot|session|replica_prefill|requests_total|upstream_errors|prefix_blocks|prefix_index_(entries|evictions)|replica_ready|peer_messages|peers_followed)' \
      > "$RESULTS/metrics/$1-s$2-router$k.txt" || true
  done
}

head -c 32 /dev/urandom | base64 > "$WORK/session-key"
METRICS=()
for i in $(seq 0 $((REPLICAS - 1))); do METRICS+=(--metrics-url "$(engine_url "$i")/metrics"); done

[ -n "${KEEP_RESULTS:-}" ] && [ -f "$RESULTS/runs.tsv" ] || printf 'seed\tsystem\tstatus\tseconds\n' > "$RESULTS/runs.tsv"
for seed in $SEEDS; do
  for system in $(printf '%s\n' $SYSTEMS | shuf --random-source=<(yes "$seed")); do
    say "$system (seed $seed)"
    t0=$SECONDS status=ok
    stop_all
    echo "# $system, seed $seed" >> "$RESULTS/commands.txt"
    if start_sim && start_front "$system" "$seed"; then
      extra=()
      case $system in
        sessions-*) extra=(--echo-session-token) ;;
        smg-key-*|sglang-key-*) extra=(--session-header x-smg-routing-key) ;;
      esac
      # shellcheck disable=SC2206
      cmd=("$BIN/warmpath-bench" run --url "http://127.0.0.1:$FRONT_PORT" --suite replicas
        --label "$system" --seed "$seed" --fleet-replicas "$REPLICAS" --fleet-kv-blocks "$KV_BLOCKS"
        --fleet-block-size "$BLOCK_SIZE" "${METRICS[@]}" --workload "$WORKLOAD" $WORKLOAD_ARGS --mode closed
        --concurrency "$CONCURRENCY" --working-set "$WORKING_SET" "${extra[@]}"
        --requests "$REQUESTS" --warmup "$WARMUP" --out "$RESULTS/$system-s$seed.json")
      note_cmd "${cmd[*]}"
      "${cmd[@]}" || { status=bench-failed; echo "!!!!! $system seed $seed: warmpath-bench failed" >&2; }
      case $system in precise-*|approx-*|session*|predicted-*|shadow-*|peered-*) save_router_metrics "$system" "$seed" ;; esac
    else
      status=start-failed
      echo "!!!!! $system seed $seed did not start" >&2
    fi
    stop_all
    printf '%s\t%s\t%s\t%s\n' "$seed" "$system" "$status" $((SECONDS - t0)) >> "$RESULTS/runs.tsv"
  done
done
stop_all
earlier=0
[ -n "${KEEP_RESULTS:-}" ] && earlier=$(cat "$RESULTS/elapsed_s" 2>/dev/null || echo 0)
echo $((earlier + SECONDS - started)) > "$RESULTS/elapsed_s"
fi
elapsed=$(cat "$RESULTS/elapsed_s" 2>/dev/null || echo 0)

say "report"
# Where the binaries came from: BINARIES_FROM, or (rewriting a report) what the run recorded.
binaries_from=${BINARIES_FROM:-}
if [ -z "$binaries_from" ] && [ -n "${REPORT_ONLY:-}" ]; then
  binaries_from=$(sed -n 's/^# binaries ([^)]*): //p' "$RESULTS/commands.txt" | head -1)
fi
[ -n "$binaries_from" ] || binaries_from="the working tree at $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
BENCH="$BIN/warmpath-bench" REPORT_TITLE=$REPORT_TITLE WORKING_SET=$WORKING_SET python3 - "$RESULTS" "$ROUTERS" "$elapsed" "$binaries_from" <<'PY'
import glob, json, os, re, statistics, subprocess, sys
res, routers, elapsed, built = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

# Seeds are combined by bench/README.md's one rule, computed by warmpath-bench itself: the
# median of the per-seed paired ratios with its bootstrap 95 % interval; a target is met only
# when the whole interval clears it.
def interval(values, at_least=None):
    args = [os.environ["BENCH"], "interval"] + (["--at-least", str(at_least)] if at_least is not None else [])
    return json.loads(subprocess.check_output(args + ["--"] + [repr(v) for v in values]))
runs = {}
for f in sorted(glob.glob(os.path.join(res, "*-s[0-9]*.json"))):
    m = re.match(r"(.+)-s(\d+)\.json$", os.path.basename(f))
    d = json.load(open(f))
    runs.setdefault(m.group(1), {})[int(m.group(2))] = d

def fig(d):
    return {
        "hit_rate": d["cache"]["hit_rate"],
        "requests_per_s": d["throughput"]["requests_per_s"],
        "output_tokens_per_s": d["throughput"]["output_tokens_per_s"],
        "ttft_p50_ms": d["latency_ms"]["ttft"]["p50"],
        "ttft_p90_ms": d["latency_ms"]["ttft"]["p90"],
        "errors": d["counts"]["errors"] + d["counts"]["warmup_errors"],
        "oracle_lru_perfect": d["oracle"]["lru_perfect_placement"]["hit_rate"],
        "oracle_infinite": d["oracle"]["infinite"]["hit_rate"],
        "by_replica": d.get("by_replica", {}),
    }
KEYS = ["hit_rate", "requests_per_s", "ttft_p50_ms", "ttft_p90_ms"]
per = {s: {seed: fig(d) for seed, d in v.items()} for s, v in runs.items()}
med = {s: {k: statistics.median(x[k] for x in v.values()) for k in KEYS + ["errors", "oracle_lru_perfect", "oracle_infinite"]}
       for s, v in per.items()}
N = routers
pairs = [(f"precise-{N}", "precise-1"), (f"approx-{N}", "approx-1"), (f"smg-{N}", "smg-1"), (f"sglang-{N}", "sglang-1"),
         ("precise-1", "approx-1"), (f"precise-{N}", f"approx-{N}"),
         (f"precise-{N}", f"smg-{N}"), ("precise-1", "smg-1"), (f"precise-{N}", f"sglang-{N}"), ("precise-1", "sglang-1"),
         (f"smg-key-{N}", "smg-key-1"), ("sessions-1", "smg-key-1"), (f"sessions-{N}", f"smg-key-{N}"),
         (f"sessions-{N}", "sessions-1"), ("sessions-1", "approx-1"), (f"sessions-{N}", f"approx-{N}"),
         (f"sessionmap-{N}", f"approx-{N}"), (f"sessions-{N}", f"precise-{N}"), (f"sglang-key-{N}", "sglang-key-1"),
         ("sessions-1", "sglang-key-1"), (f"sessions-{N}", f"sglang-key-{N}"), ("predicted-1", "approx-1"),
         (f"predicted-{N}", f"approx-{N}"), (f"peered-{N}", "precise-1"), (f"peered-{N}", f"precise-{N}"),
         (f"peered-approx-{N}", "approx-1"), (f"peered-approx-{N}", f"approx-{N}")]
ratios = {}
for a, b in pairs:
    if a in per and b in per and a != b and f"{a}/{b}" not in ratios:
        seeds = sorted(set(per[a]) & set(per[b]))
        ratios[f"{a}/{b}"] = {
            k: {"of_medians": med[a][k] / med[b][k] if med[b][k] else None,
                "per_seed": {s: per[a][s][k] / per[b][s][k] if per[b][s][k] else None for s in seeds}}
            for k in KEYS}
        for k in KEYS:
            r = ratios[f"{a}/{b}"][k]
            r["paired"] = interval([v for v in r["per_seed"].values() if v is not None])

# The routers' own view: KV-event modes and counters after each warmpath run.
def router_metrics(system, seed):
    out = []
    for f in sorted(glob.glob(os.path.join(res, "metrics", f"{system}-s{seed}-router*.txt"))):
        vals = {}
        for line in open(f):
            name, _, v = line.rpartition(" ")
            try:
                vals[name] = float(v)
            except ValueError:
                pass
        out.append(vals)
    return out
kv = {}
for s in per:
    if not (s.startswith("precise") or s.startswith("peered-") and not s.startswith("peered-approx")):
        continue
    for seed in per[s]:
        ms = router_metrics(s, seed)
        modes = [v for m in ms for k, v in m.items() if k.startswith("warmpath_kv_events_mode")]
        counts = {}
        for m in ms:
            for k, v in m.items():
                mm = re.match(r'warmpath_kv_events_total\{kind="([a-z_]+)"\}', k)
                if mm:
                    counts[mm.group(1)] = counts.get(mm.group(1), 0) + v
        kv[f"{s}-s{seed}"] = {"routers": len(ms), "replica_views": len(modes),
                              "fresh": sum(1 for v in modes if v == 2), "uncertain": sum(1 for v in modes if v == 1),
                              "off": sum(1 for v in modes if v == 0), "events": counts}

json.dump({"medians": med, "ratios": ratios, "per_seed": per, "kv_events": kv, "elapsed_s": elapsed},
          open(os.path.join(res, "summary.json"), "w"), indent=1, sort_keys=True)

any_run = next(iter(next(iter(runs.values())).values()))
c, w = any_run["config"], any_run["config"]["workload"]
order = [s for s in ["precise-1", f"precise-{N}", f"peered-{N}", "approx-1", f"approx-{N}", f"peered-approx-{N}", "sessions-1", f"sessions-{N}", f"sessionmap-{N}",
                     "predicted-1", f"predicted-{N}", "smg-1", f"smg-{N}", "smg-key-1", f"smg-key-{N}",
                     "sglang-1", f"sglang-{N}", "sglang-key-1", f"sglang-key-{N}", "nginx-rr"] if s in per]
order = list(dict.fromkeys(order))
order += [s for s in sorted(per) if s not in order]
L = []
L.append("# %s\n" % os.environ["REPORT_TITLE"])
if w["kind"] == "shared-prefix":
    wdesc = (f"shared-prefix, {w['groups']} groups × {w['prompts_per_group']} prompts, {w['system_tokens']}-token shared prefixes, "
             f"{w['question_tokens']}-token questions, {w['output_tokens']} tokens out, Zipf {w['zipf']} "
             f"(distinct prefixes {os.environ.get('WORKING_SET', '1.5')}× the fleet's KV cache)")
else:
    wdesc = f"`{json.dumps(w, separators=(',', ':'))}`"
L.append(f"`bench/replicas.sh` ({elapsed // 60} min {elapsed % 60} s). Fleet: warmpath-sim, {c['fleet']['replicas']} replicas × "
         f"{c['fleet']['kv_blocks']} KV blocks × {c['fleet']['block_size']} tokens, prefill 100 µs per uncached token, "
         f"every replica publishing KV events. Workload: {wdesc}; closed loop, "
         f"{c['load']['concurrency']} in flight, {c['requests']} requests per run, the first {c['warmup']} left out of "
         "latency and throughput; hit rate = the engines' own prefix-cache counters over the whole run. "
         f"Seeds {', '.join(str(s) for s in sorted({s for v in per.values() for s in v}))}; systems in a seeded "
         "shuffled order per seed; fleet, routers or gateways and nginx restarted before every run. "
         "Every system is behind one nginx (round-robin, keepalive, proxy_buffering off), so that 1 and "
         f"{routers} routers differ only in the routers. Binaries: {built}. Commands: `commands.txt`; configurations: `configs/`.\n")
L.append("## Medians over seeds\n")
L.append("| system | hit rate | req/s | TTFT p50 ms | TTFT p90 ms | errors | per-seed hit rates |")
L.append("|---|---|---|---|---|---|---|")
for s in order:
    m = med[s]
    hs = ", ".join(f"{per[s][x]['hit_rate']:.3f}" for x in sorted(per[s]))
    L.append(f"| {s} | {m['hit_rate']:.3f} | {m['requests_per_s']:.1f} | {m['ttft_p50_ms']:.1f} | {m['ttft_p90_ms']:.1f} | {m['errors']:.0f} | {hs} |")
if per:
    o = next(iter(med.values()))
    L.append(f"\nOracle hit rates of the same requests (median): LRU with perfect placement {o['oracle_lru_perfect']:.3f}, "
             f"a cache that never evicts {o['oracle_infinite']:.3f}.\n")
L.append("## Ratios\n")
L.append("The median of the per-seed ratios (same seed, same requests) with its bootstrap 95 % interval, "
         "the ratio of the medians in brackets, then the per-seed ratios.\n")
L.append("| ratio | hit rate | req/s | TTFT p50 | TTFT p90 |")
L.append("|---|---|---|---|---|")
def paired(p):
    if p["median"] is None:
        return "–"
    if p["interval"] is None:
        return f"{p['median']:.3f} (one seed)"
    return f"{p['median']:.3f} [{p['interval'][0]:.3f}, {p['interval'][1]:.3f}]"
for name, r in ratios.items():
    cells = []
    for k in KEYS:
        ps = ", ".join(f"{v:.3f}" for _, v in sorted(r[k]["per_seed"].items()) if v is not None)
        om = "–" if r[k]["of_medians"] is None else f"{r[k]['of_medians']:.3f}"
        cells.append(f"{paired(r[k]['paired'])} ({om}); {ps}")
    L.append(f"| {name} | " + " | ".join(cells) + " |")
L.append("")
for key, label in [(f"precise-{routers}/precise-1", "Target"), (f"peered-{routers}/precise-1", "With `peers`"),
                   (f"peered-approx-{routers}/approx-1", "With `peers`, approximate")]:
    if key in ratios:
        r = ratios[key]["hit_rate"]
        vals = [v for v in r["per_seed"].values() if v is not None]
        j = interval(vals, at_least=0.97)
        verdict = {"met": "met", "missed": "MISSED", "undecided": "UNDECIDED (the interval straddles 0.97)",
                   "met-one-seed": "met on one seed (no interval)", "missed-one-seed": "MISSED on one seed (no interval)"}[j["verdict"]]
        L.append(f"**{label} ({key} hit rate ≥ 0.97 per seed): {verdict}**: {paired(j)} over {j['n']} seeds "
                 f"({r['of_medians']:.3f} between the medians), worst seed {min(vals):.3f}.\n")
for a, b in [(f"approx-{routers}", "approx-1"), (f"peered-approx-{routers}", "approx-1"), (f"smg-{routers}", "smg-1"), (f"sglang-{routers}", "sglang-1"), ("precise-1", "approx-1")]:
    k = f"{a}/{b}"
    if k in ratios:
        h = ratios[k]["hit_rate"]["paired"]; t = ratios[k]["ttft_p90_ms"]["paired"]; q = ratios[k]["requests_per_s"]["paired"]
        L.append(f"- {a} against {b}, per seed: hit rate ×{paired(h)}, throughput ×{paired(q)}, TTFT p90 ×{paired(t)}.")
L.append("")
sess = {}
for s in per:
    if s.startswith("session"):
        for seed in per[s]:
            for m in router_metrics(s, seed):
                for k, v in m.items():
                    mm = re.match(r'warmpath_session_affinity_total\{result="([a-z_]+)"\}', k)
                    if mm:
                        sess.setdefault(s, {}).setdefault(mm.group(1), []).append((seed, v))
if sess:
    L.append("## Session affinity as the routers counted it\n")
    L.append("`warmpath_session_affinity_total` by result, summed over the routers and seeds of each system.\n")
    results = sorted({r for v in sess.values() for r in v})
    L.append("| system | " + " | ".join(results) + " |")
    L.append("|---|" + "---|" * len(results))
    for s in sorted(sess):
        L.append(f"| {s} | " + " | ".join(f"{sum(v for _, v in sess[s].get(r, [])):.0f}" for r in results) + " |")
    L.append("")
if kv:
    L.append("## The precise routers' view of the engines after each run\n")
    L.append("Per run, over its routers: replica views `fresh` / `uncertain` / `off` at the end, and KV events applied (summed over routers).\n")
    L.append("| run | routers | fresh | uncertain | off | stored | removed | gaps | restarts | unknown parent | bound evicted |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, v in sorted(kv.items()):
        e = v["events"]
        L.append(f"| {name} | {v['routers']} | {v['fresh']} | {v['uncertain']} | {v['off']} | {e.get('stored', 0):.0f} | "
                 f"{e.get('removed', 0):.0f} | {e.get('gap', 0):.0f} | {e.get('restart', 0):.0f} | {e.get('unknown_parent', 0):.0f} | {e.get('bound_evicted', 0):.0f} |")
    L.append("")
L.append("## Requests per engine (median over seeds)\n")
L.append("| system | " + " | ".join(f"sim-{i}" for i in range(c["fleet"]["replicas"])) + " |")
L.append("|---|" + "---|" * c["fleet"]["replicas"])
for s in order:
    cells = []
    for i in range(c["fleet"]["replicas"]):
        vals = [per[s][x]["by_replica"].get(f"sim-{i}") for x in per[s]]
        vals = [v for v in vals if v is not None]
        cells.append(f"{statistics.median(vals):.0f}" if vals else "–")
    L.append(f"| {s} | " + " | ".join(cells) + " |")
L.append("\n(From the `x-warmpath-replica` header, which only warmpath sends: other systems show –.)\n")
runs_tsv = os.path.join(res, "runs.tsv")
if os.path.exists(runs_tsv):
    bad = [l.split("\t") for l in open(runs_tsv).read().splitlines()[1:] if l.split("\t")[2] != "ok"]
    if bad:
        L.append("**Runs that failed:** " + ", ".join(f"{b[1]} seed {b[0]} ({b[2]})" for b in bad) + "\n")
notes = os.path.join(res, "notes.md")
if os.path.exists(notes):
    L.append(open(notes).read())
open(os.path.join(res, "REPORT.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
echo "bench/replicas.sh: wrote $RESULTS/REPORT.md in $((elapsed / 60)) min" >&2
