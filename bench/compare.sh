#!/usr/bin/env bash
# bench/compare.sh — the side-by-side comparison in one command (`make bench` runs it).
#
# On one simulated fleet (warmpath-sim, REPLICAS replicas with a small KV cache each), runs the
# same seeded workloads through:
#   warmpath round_robin, least_load, prefix, predicted_ttft   (warmpath-router, static config)
#   SMG 1.13 (the Shepherd Model Gateway) cache_aware, prefix_hash, round_robin (../shared/peers/smg.sh)
# and, when named in SYSTEMS (make bench-full names them all): the peers' algorithms on
# warmpath's data path (warmpath-consistent-hash, warmpath-llm-d, warmpath-dynamo), SMG with
# power_of_two, and cache_aware with balance thresholds sized for this fleet
# (smg-cache-aware-tuned, SMG_TUNED_ARGS, chosen by bench/tune-smg.sh on tuning seeds only).
# The older sglang-router 0.3.2 (sglang-* labels, SGLANG_DIR, SGLANG_TUNED_ARGS) runs only when
# SYSTEMS names it. SMG's version and each smg-* row's flags go to machine.txt.
# then the data-path suite (bench/datapath.sh, when present), writes bench/results/*.json and
# regenerates BENCHMARKS.md with `warmpath-bench report`.
#
# The fleet and the router or gateway are restarted (cold caches) before every run, so each
# starts from the same state. Every command that produced a number is appended to
# bench/results/commands.txt, and the machine is described in bench/results/machine.txt.
#
# Knobs (environment; SYSTEMS, OTHER_SYSTEMS and OTHER_WORKLOADS set but empty mean none):
# DURATION (closed-loop runs), SWEEP_DURATION (each open-loop point),
# RATES (open-loop offered req/s), CONCURRENCY, REPLICAS, KV_BLOCKS, PREFILL_US (simulated
# prefill cost per uncached token), SYSTEMS (subset of labels), OTHER_WORKLOADS,
# OTHER_SYSTEMS, SKIP_DATAPATH=1, SMG_DIR (default /work/peers/smg), SGLANG_DIR, PROFILE (release|debug), BIN_DIR, BASELINE_ROUTER (another
# warmpath-router binary, e.g. the last commit's: systems named baseline-POLICY run it, side by
# side with warmpath-POLICY); for the data-path suite
# DATAPATH_DURATION, DATAPATH_ROUNDS, DATAPATH_LAT_DURATION, DATAPATH_PROFILE (default: the
# release build this script already made, which is the shipping build: fat LTO, see Cargo.toml).
# For the sensitivity runs (bench/sensitivity.sh sets them): SUITE (results of another suite
# are named after it and added to RESULTS, which is then not emptied), STEP_OVERHEAD_MS (a fixed
# cost of every engine step), DECODE_BASE_MS, REPLICA_SPEEDS (comma-separated, a mixed fleet),
# SIM_TOKENIZER (a tokenizer.json for the simulator), TEXT (words|natural),
# ORACLE_BYTES_PER_TOKEN, SCRAPE_INTERVAL_MS (how often warmpath reads engine metrics),
# ROUTER_EXTRA (YAML appended to warmpath's configuration, e.g. a `predictor:` block),
# SCHEDULING_EXTRA (lines indented under its `scheduling:` section, e.g.
# `  placement: {leave_factor: 4}`),
# KEEP_RESULTS=1 (keep the suite's earlier results: a run split into parts by seeds),
# SWEEP_SYSTEMS (which SYSTEMS also run the open-loop sweep; default all), OTHER_REQUESTS and
# OTHER_WARMUP (fixed counts for the other workloads; default REQUESTS and WARMUP).
# For the llm-d systems (llm-d: its shipped profile; llm-d-precise: KV events, real vLLM only):
# EPP_BIN (llm-d's EPP, built by bench/llm-d-build.sh from the pinned commit) and
# GATEWAY_BIN (default BIN/warmpath-extproc-gateway, which the build above makes).
#
# The defaults keep the whole comparison, data-path suite included, under 15 minutes on two
# shared cores: closed loop 10 s, open-loop points 8 s (each point's first second or two is the
# cold-cache warm-up, so shorter points would mostly measure that), an overloaded point drains
# for at most 5 s, other workloads 6 s, data-path rounds 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results}
REPORT=${REPORT:-BENCHMARKS.md}
PROFILE=${PROFILE:-release}
DURATION=${DURATION:-10s}
SWEEP_DURATION=${SWEEP_DURATION:-8s}
# Bounds how long an overloaded point drains after its arrivals stop; later answers count as
# timeouts (such a point did not keep up anyway).
SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-5s}
OTHER_DURATION=${OTHER_DURATION:-6s}
RATES=${RATES:-"20 40 80 120"}
DATAPATH_DURATION=${DATAPATH_DURATION:-5s}
DATAPATH_ROUNDS=${DATAPATH_ROUNDS:-3}
DATAPATH_LAT_DURATION=${DATAPATH_LAT_DURATION:-3s}
DATAPATH_PROFILE=${DATAPATH_PROFILE:-$PROFILE}
CONCURRENCY=${CONCURRENCY:-32}
REPLICAS=${REPLICAS:-8}
KV_BLOCKS=${KV_BLOCKS:-512}
BLOCK_SIZE=16
PREFILL_US=${PREFILL_US:-100}
SEED=${SEED:-1}
SUITE=${SUITE:-sim}
STEP_OVERHEAD_MS=${STEP_OVERHEAD_MS:-0}
DECODE_BASE_MS=${DECODE_BASE_MS:-5}
REPLICA_SPEEDS=${REPLICA_SPEEDS:-}
SIM_TOKENIZER=${SIM_TOKENIZER:-}
TEXT=${TEXT:-words}
ORACLE_BYTES_PER_TOKEN=${ORACLE_BYTES_PER_TOKEN:-4}
SCRAPE_INTERVAL_MS=${SCRAPE_INTERVAL_MS:-}
# Seeds: every point is run once per seed (the report gives medians and bootstrap intervals over
# them; one seed gives no interval). The systems run in a different shuffled order per seed.
SEEDS=${SEEDS:-$SEED}
# With REQUESTS set, runs have a fixed request count (WARMUP of them left out of the figures)
# instead of a duration, so every system answers the same requests.
REQUESTS=${REQUESTS:-}
WARMUP=${WARMUP:-0}
OTHER_REQUESTS=${OTHER_REQUESTS:-$REQUESTS}
OTHER_WARMUP=${OTHER_WARMUP:-$WARMUP}
# A section where the cache binds: shared-prefix with its distinct prefixes sized at
# BINDING_WORKING_SET × the fleet's KV cache and Zipf(BINDING_ZIPF) popularity, for the
# BINDING_SYSTEMS (none by default; make bench-full sets them).
BINDING_SYSTEMS=${BINDING_SYSTEMS:-}
BINDING_WORKING_SET=${BINDING_WORKING_SET:-1.5}
BINDING_ZIPF=${BINDING_ZIPF:-1.0}
# A recorded production trace replayed at its own arrival times (bench/trace.sh sets these):
# TRACE_FILE (Mooncake format), for the TRACE_SYSTEMS (none by default), TRACE_REQUESTS of it
# per run (each seed its own window), TRACE_WARMUP left out, times divided by TRACE_TIME_SCALE,
# each 512-token trace block made TRACE_BLOCK_TOKENS tokens (default one KV block).
TRACE_SYSTEMS=${TRACE_SYSTEMS:-}
TRACE_FILE=${TRACE_FILE:-}
# 1,000 requests of the trace (about 330 s of it, 16 s at 20×: about 73 req/s offered on the
# fleet, TTFT p90 near 0.1 s for warmpath's default, so load and cache both matter), the first
# 200 to complete left out of latencies and throughput.
TRACE_REQUESTS=${TRACE_REQUESTS:-1000}
TRACE_WARMUP=${TRACE_WARMUP:-200}
TRACE_TIME_SCALE=${TRACE_TIME_SCALE:-20}
TRACE_BLOCK_TOKENS=${TRACE_BLOCK_TOKENS:-16}
TRACE_TIMEOUT=${TRACE_TIMEOUT:-30s}
# SMG_DIR and SMG_TUNED_ARGS (SMG's balance thresholds for a fleet of this size, for
# smg-cache-aware-tuned; bench/tune-smg.sh writes the chosen pair, which bench/full.sh passes
# here; SMG's own defaults are abs 64, rel 1.5) take their defaults in bench/lib.sh.
# The older sglang-router's, for sglang-cache-aware-tuned (only when SYSTEMS names it).
SGLANG_TUNED_ARGS=${SGLANG_TUNED_ARGS:-"--balance-abs-threshold 4 --balance-rel-threshold 1.25"}
SIM_PORT=${SIM_PORT:-18101}
FRONT_PORT=${FRONT_PORT:-18180}
ADMIN_PORT=${ADMIN_PORT:-18190}
SGLANG_DIR=${SGLANG_DIR:-/work/peers/sglang}
PEERS=${PEERS:-$(cd .. && pwd)/shared/peers}
SYSTEMS=${SYSTEMS-"warmpath-round-robin warmpath-least-load warmpath-prefix warmpath-predicted-ttft smg-round-robin smg-prefix-hash smg-cache-aware"}
OTHER_WORKLOADS=${OTHER_WORKLOADS-"multi-turn agent long-doc no-sharing noisy-neighbour"}
OTHER_SYSTEMS=${OTHER_SYSTEMS-"warmpath-round-robin warmpath-prefix warmpath-predicted-ttft smg-cache-aware"}
SWEEP_SYSTEMS=${SWEEP_SYSTEMS:-$SYSTEMS}
# The plumbing alone: one request at a time, short prompts, no sharing, each system and the
# engine reached directly (`direct`), so that what a router or gateway adds to an idle request's
# TTFT stands on its own line (suite sim-idle). Empty by default; make bench-full sets it.
IDLE_SYSTEMS=${IDLE_SYSTEMS:-}
IDLE_REQUESTS=${IDLE_REQUESTS:-200}
# Results of the main suite keep their historical names; another suite's carry its name.
if [ "$SUITE" = sim ]; then NAME_PREFIX=""; else NAME_PREFIX="$SUITE-"; fi

if [ "$PROFILE" = release ]; then BIN=target/release; BUILD=(--release); else BIN=target/debug; BUILD=(); fi
# BIN_DIR: binaries built elsewhere (warmpath-sim, -router, -bench), measured as they are.
[ -n "${BIN_DIR:-}" ] && BIN=$BIN_DIR
say() { printf '\n== %s\n' "$*" >&2; }

# How long a run lasts: DURATION, or REQUESTS with WARMUP left out.
length() { # duration [requests warmup]
  local n=${2:-$REQUESTS} w=${3:-$WARMUP}
  if [ -n "$n" ]; then echo "--requests $n --warmup $w"; else echo "--duration $1"; fi
}
length_text() {
  if [ -n "$REQUESTS" ]; then echo "$REQUESTS requests per run, the first $WARMUP left out (other workloads: ${OTHER_REQUESTS:-?}, ${OTHER_WARMUP:-?})"; else echo "$DURATION per run"; fi
}


if [ -z "${BIN_DIR:-}" ]; then
  say "building warmpath-sim, warmpath-router, warmpath-bench ($PROFILE)"
  cargo build "${BUILD[@]}" -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench -p warmpath-extproc-gateway
fi

mkdir -p "$RESULTS"
# KEEP_RESULTS=1: a later part of a run split by seeds (bench/full.sh's main part) adds to what
# the earlier parts of the same commit wrote instead of starting the suite afresh.
if [ -n "${KEEP_RESULTS:-}" ]; then
  :
elif [ "$SUITE" = sim ]; then
  rm -f "$RESULTS"/warmpath-*.json "$RESULTS"/baseline-*.json "$RESULTS"/smg-*.json "$RESULTS"/llm-d-*.json "$RESULTS"/sglang-*.json "$RESULTS"/sim-*.png "$RESULTS"/sim-idle-*.json "$RESULTS"/commands.txt
else
  rm -f "$RESULTS/$SUITE"-*.json
fi
# shellcheck source=bench/lib.sh
. bench/lib.sh

warn_ephemeral_ports "$SIM_PORT" "$((SIM_PORT + REPLICAS - 1))" "$FRONT_PORT" "$ADMIN_PORT"

SIM_FLAGS=(--prefill-us-per-token "$PREFILL_US" --decode-base-ms "$DECODE_BASE_MS" --step-overhead-ms "$STEP_OVERHEAD_MS")
# Dynamo's KV router routes from its engines' KV events by default, so its re-implementation
# (`warmpath-dynamo`, labelled as ours) does too: when an invocation runs it, every replica
# publishes its events on KV_PORT+i (for every system of that invocation alike, so that they
# share the same fleet) and warmpath-dynamo's pool follows them.
KV_PORT=${KV_PORT:-$((SIM_PORT + 600))}
KV_EVENTS=""
case " $SYSTEMS $BINDING_SYSTEMS $OTHER_SYSTEMS $TRACE_SYSTEMS " in
  *" warmpath-dynamo "*) KV_EVENTS=1; SIM_FLAGS+=(--kv-events-endpoint "tcp://*:$KV_PORT") ;;
esac
[ -n "$REPLICA_SPEEDS" ] && SIM_FLAGS+=(--replica-speeds "$REPLICA_SPEEDS")
[ -n "$SIM_TOKENIZER" ] && SIM_FLAGS+=(--tokenizer "$SIM_TOKENIZER")
FLEET_LINE="warmpath-sim, $REPLICAS replicas × $KV_BLOCKS KV blocks × $BLOCK_SIZE tokens, ${SIM_FLAGS[*]}, other costs default; workload text: $TEXT${SCRAPE_INTERVAL_MS:+; warmpath scrapes every $SCRAPE_INTERVAL_MS ms}"
if [ "$SUITE" != sim ] && [ -f "$RESULTS/machine.txt" ]; then
  echo "suite $SUITE: $FLEET_LINE; $(length_text)" >> "$RESULTS/machine.txt"
else
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(commit_said ' (with uncommitted changes)')"
  echo "kernel: $(uname -srm)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') × $(nproc) cores"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "rustc: $(rustc --version)"
  echo "smg: $(smg_version) (PyPI smg, $SMG_DIR/venv/bin/smg)"
  case " $SYSTEMS $BINDING_SYSTEMS $OTHER_SYSTEMS $TRACE_SYSTEMS $IDLE_SYSTEMS " in
    *" sglang-"*) echo "sglang-router: $("$SGLANG_DIR/venv/bin/python" -m pip show sglang-router 2>/dev/null | awk '/^Version/ {print $2}' || echo absent)" ;;
  esac
  echo "fleet: $FLEET_LINE"
  [ -n "$SYSTEMS" ] && echo "load: closed loop $CONCURRENCY in flight, $(length_text); open-loop sweep at $RATES req/s, $SWEEP_DURATION each"
  [ -n "$TRACE_SYSTEMS" ] && echo "trace: $TRACE_FILE, $TRACE_REQUESTS requests per run (the first $TRACE_WARMUP to complete left out), its times / $TRACE_TIME_SCALE, $TRACE_BLOCK_TOKENS tokens per 512-token block"
  [ -n "$KV_EVENTS" ] && echo "kv events: every replica publishes them (tcp://127.0.0.1:$KV_PORT+i); warmpath-dynamo (Dynamo's KV cost, re-implemented on warmpath's data path) routes from them, as Dynamo does by default; warmpath-llm-d's index (llm-d's scorers, re-implemented) is bounded by each engine's KV capacity (cache_config_info), as llm-d's prefix scorer sizes itself"
  echo "note: load generator, router or gateway, and all simulated replicas share these cores"
} > "$RESULTS/machine.txt"
fi


SIM_PID=""
FRONT_PID=""
launch_sim() {
  stop_sim
  wait_ports_free 20 "$SIM_PORT"
  "$BIN/warmpath-sim" --listen "127.0.0.1:$SIM_PORT" --replicas "$REPLICAS" --kv-blocks "$KV_BLOCKS" \
    --block-size "$BLOCK_SIZE" "${SIM_FLAGS[@]}" --max-model-len 8192 \
    >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!; PIDS+=("$SIM_PID")
  local i
  for i in $(seq 0 $((REPLICAS - 1))); do wait_http "http://127.0.0.1:$((SIM_PORT + i))/health" 20 || return 1; done
}
# Tried once more when it does not come up, as start_front_retry below.
start_sim() {
  launch_sim && return 0
  echo "the simulated fleet did not start; its log ends:" >&2
  tail -5 "$WORK/sim.log" >&2 || true
  sleep 3
  launch_sim
}
stop_sim() {
  if [ -n "$SIM_PID" ]; then kill "$SIM_PID" 2>/dev/null || true; wait "$SIM_PID" 2>/dev/null || true; SIM_PID=""; fi
}
stop_front() {
  if [ -n "$FRONT_PID" ]; then kill "$FRONT_PID" 2>/dev/null || true; wait "$FRONT_PID" 2>/dev/null || true; FRONT_PID=""; fi
}

replica_urls() { for i in $(seq 0 $((REPLICAS - 1))); do echo "http://127.0.0.1:$((SIM_PORT + i))"; done; }

FRONT_URL="http://127.0.0.1:$FRONT_PORT"
start_front() { # label
  local label=$1
  stop_front
  wait_ports_free 20 "$FRONT_PORT" "$ADMIN_PORT"
  FRONT_URL="http://127.0.0.1:$FRONT_PORT"
  case $label in
    direct)
      # No router: the first replica itself.
      FRONT_URL="http://127.0.0.1:$SIM_PORT"
      ;;
    warmpath-*|baseline-*)
      local policy=${label#*-}; policy=${policy//-/_}
      local router_bin="$BIN/warmpath-router"
      [[ $label == baseline-* ]] && router_bin=$BASELINE_ROUTER
      local cfg="$WORK/router-$policy.yaml"
      {
        echo "listen: 127.0.0.1:$FRONT_PORT"
        echo "admin: 127.0.0.1:$ADMIN_PORT"
        echo "pools:"
        echo "  - name: tiny"
        echo "    models: [tiny]"
        local i=0 events=""
        [ -n "$KV_EVENTS" ] && [ "$policy" = dynamo ] && events=1
        [ -n "$events" ] && echo "    kv_events: {}"
        echo "    replicas:"
        for u in $(replica_urls); do
          if [ -n "$events" ]; then
            echo "      - { name: sim-$i, url: \"$u\", kv_events_endpoint: \"tcp://127.0.0.1:$((KV_PORT + i))\" }"
          else
            echo "      - { name: sim-$i, url: \"$u\" }"
          fi
          i=$((i + 1))
        done
        echo "scheduling:"
        echo "  policy: $policy"
        # Settings of the scheduling section (indented under it), e.g. a placement knob.
        [ -n "${SCHEDULING_EXTRA:-}" ] && printf '%s\n' "$SCHEDULING_EXTRA"
        # The load generator plays the gateway that names tenants (noisy-neighbour).
        echo "tenants:"
        echo "  trusted_sources: [127.0.0.0/8]"
        [ -n "${ROUTER_EXTRA:-}" ] && printf '%s\n' "$ROUTER_EXTRA"
        if [ -n "$SCRAPE_INTERVAL_MS" ]; then
          echo "scrape:"
          echo "  interval_ms: $SCRAPE_INTERVAL_MS"
          # Every SCRAPE_INTERVAL_MS exactly, as the fleet line says: no stretched pause beyond it
          # (and the router refuses a ceiling below the interval).
          echo "  max_interval_ms: $SCRAPE_INTERVAL_MS"
          echo "  stale_after_ms: $((SCRAPE_INTERVAL_MS * 4 > 1000 ? SCRAPE_INTERVAL_MS * 4 : 1000))"
        fi
      } > "$cfg"
      [ "$SUITE" = sim ] && cp "$cfg" "$RESULTS/router-$policy.yaml"
      "$router_bin" --config "$cfg" >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 20
      ;;
    sglang-cache-aware-tuned)
      # The shared script passes no extra flags: launch the same gateway with the thresholds.
      # shellcheck disable=SC2046,SC2086
      "$SGLANG_DIR/venv/bin/python" -m sglang_router.launch_router --host 127.0.0.1 \
        --port "$FRONT_PORT" --prometheus-port $((FRONT_PORT + 1000)) --policy cache_aware \
        --log-level warn $SGLANG_TUNED_ARGS --worker-urls $(replica_urls) >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
    smg-*)
      # shellcheck disable=SC2046
      smg_start "$label" "$FRONT_PORT" "$WORK/front.log" $(replica_urls)
      FRONT_PID=$SMG_PID
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      # The exact flags of the row, once per label, beside the version in machine.txt.
      local row_text; row_text="row $(smg_row_text "$label")"
      grep -qxF "$row_text" "$RESULTS/machine.txt" 2>/dev/null || echo "$row_text" >> "$RESULTS/machine.txt"
      ;;
    sglang-*)
      local policy=${label#sglang-}; policy=${policy//-/_}
      # shellcheck disable=SC2046
      bash "$PEERS/sglang-router.sh" serve "$SGLANG_DIR" "$FRONT_PORT" "$policy" $(replica_urls) \
        >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
    llm-d|llm-d-*)
      # llm-d's EPP (EPP_BIN, built by bench/llm-d-build.sh) with file discovery, behind
      # warmpath-extproc-gateway (bench/llm-d.sh); llm-d-CONFIG runs bench/llm-d/CONFIG.yaml.
      if [ -z "${EPP_BIN:-}" ]; then
        echo "system $label needs EPP_BIN: llm-d's EPP binary, built by bench/llm-d-build.sh from the pinned commit" >&2
        return 1
      fi
      local llmd_config=default
      [ "$label" = llm-d ] || llmd_config=${label#llm-d-}
      # shellcheck disable=SC2046
      LLMD_CONFIG=$llmd_config GATEWAY_BIN=${GATEWAY_BIN:-$BIN/warmpath-extproc-gateway} \
        bash bench/llm-d.sh serve "$FRONT_PORT" $(replica_urls) >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "$FRONT_URL/v1/models" 90
      ;;
    *) echo "unknown system $label" >&2; return 1 ;;
  esac
}

# A front that does not come up (a port not yet released, a gateway slow to start on a loaded
# machine) is tried once more after its log's last lines are shown, so that one slow start does
# not end a long run; a second failure does.
start_front_retry() { # label
  start_front "$1" && return 0
  echo "$1 did not start; its log ends:" >&2
  tail -5 "$WORK/front.log" >&2 || true
  stop_front; sleep 3
  start_front "$1"
}

have_system() { # label
  case $1 in
    baseline-*) [ -x "${BASELINE_ROUTER:-}" ] ;;
    direct) true ;;
    smg-*) smg_ready ;;
    sglang-*) [ -x "$SGLANG_DIR/venv/bin/python" ] && [ -f "$PEERS/sglang-router.sh" ] ;;
    *) true ;;
  esac
}

METRICS=()
for u in $(replica_urls); do METRICS+=(--metrics-url "$u/metrics"); done
FLEET=(--fleet-replicas "$REPLICAS" --fleet-kv-blocks "$KV_BLOCKS" --fleet-block-size "$BLOCK_SIZE")

bench() { # label out-name args...
  local label=$1 name=$2; shift 2
  local cmd=("$BIN/warmpath-bench" run --url "$FRONT_URL" --suite "$SUITE" --label "$label" \
    --seed "$SEED" "${FLEET[@]}" "${METRICS[@]}" --text "$TEXT" --oracle-bytes-per-token "$ORACLE_BYTES_PER_TOKEN" \
    --out "$RESULTS/$NAME_PREFIX$name-s$SEED.json" "$@")
  echo "${cmd[*]}" | sed "s#$BIN/##" >> "$RESULTS/commands.txt"
  "${cmd[@]}"
}

# The systems in an order of their own for each seed (reproducible: seeded by it).
shuffled() { # seed systems...
  local seed=$1; shift
  printf '%s\n' "$@" | shuf --random-source=<(yes "$seed")
}

for SEED in $SEEDS; do
for label in $(shuffled "$SEED" $SYSTEMS); do
  if ! have_system "$label"; then
    echo "!!!!! SKIPPING $label: its gateway is not installed (SMG: bash $PEERS/smg.sh install $SMG_DIR; sglang-router: bash $PEERS/sglang-router.sh install $SGLANG_DIR) !!!!!" >&2
    continue
  fi
  say "$label: shared-prefix, closed loop (seed $SEED)"
  start_sim; start_front_retry "$label"
  # shellcheck disable=SC2046
  bench "$label" "$label-shared-prefix-closed" --workload shared-prefix --mode closed \
    --concurrency "$CONCURRENCY" $(length "$DURATION")
  case " $SWEEP_SYSTEMS " in *" $label "*) ;; *) stop_front; continue ;; esac
  say "$label: shared-prefix, open-loop sweep (seed $SEED)"
  for rate in $RATES; do
    # Cold caches at every point, so each point's hit rate is comparable with its oracle.
    start_sim; start_front_retry "$label"
    bench "$label" "$label-shared-prefix-open-$rate" --workload shared-prefix --mode open \
      --rate "$rate" --duration "$SWEEP_DURATION" --timeout "$SWEEP_TIMEOUT"
  done
  stop_front
done

for label in $(shuffled "$SEED" $BINDING_SYSTEMS); do
  have_system "$label" || continue
  say "$label: shared-prefix where the cache binds (working set ${BINDING_WORKING_SET}x, zipf $BINDING_ZIPF, seed $SEED)"
  start_sim; start_front_retry "$label"
  # shellcheck disable=SC2046
  bench "$label" "$label-shared-prefix-binding-closed" --workload shared-prefix --mode closed \
    --concurrency "$CONCURRENCY" --working-set "$BINDING_WORKING_SET" --zipf "$BINDING_ZIPF" \
    $(length "$DURATION")
  stop_front
done

for label in $(shuffled "$SEED" $TRACE_SYSTEMS); do
  have_system "$label" || continue
  [ -f "$TRACE_FILE" ] || { echo "TRACE_SYSTEMS needs TRACE_FILE (a Mooncake-format trace)" >&2; exit 2; }
  say "$label: trace $(basename "$TRACE_FILE"), $TRACE_REQUESTS requests at its times / $TRACE_TIME_SCALE (seed $SEED)"
  start_sim; start_front_retry "$label"
  bench "$label" "$label-trace-$(basename "$TRACE_FILE" .jsonl)" --workload trace --mode trace \
    --trace "$TRACE_FILE" --trace-block-tokens "$TRACE_BLOCK_TOKENS" --time-scale "$TRACE_TIME_SCALE" \
    --requests "$TRACE_REQUESTS" --warmup "$TRACE_WARMUP" --timeout "$TRACE_TIMEOUT"
  stop_front
done

for label in $(shuffled "$SEED" $OTHER_SYSTEMS); do
  have_system "$label" || continue
  for w in $OTHER_WORKLOADS; do
    say "$label: $w, closed loop (seed $SEED)"
    start_sim; start_front_retry "$label"
    # shellcheck disable=SC2046
    bench "$label" "$label-$w-closed" --workload "$w" --mode closed --concurrency "$CONCURRENCY" \
      $(length "$OTHER_DURATION" "$OTHER_REQUESTS" "$OTHER_WARMUP")
  done
  stop_front
done

if [ -n "$IDLE_SYSTEMS" ]; then
  for label in $(shuffled "$SEED" direct $IDLE_SYSTEMS); do
    have_system "$label" || continue
    say "$label: idle TTFT, one request at a time (seed $SEED)"
    start_sim; start_front_retry "$label"
    SUITE=sim-idle NAME_PREFIX=sim-idle- bench "$label" "$label" --workload no-sharing \
      --prompt-tokens 128 --output-tokens 8 --mode closed --concurrency 1 \
      --requests "$IDLE_REQUESTS" --warmup 20
    stop_front
  done
fi
done
stop_sim

if [ -z "${SKIP_DATAPATH:-}" ] && [ "$SUITE" = sim ] && [ -f bench/datapath.sh ]; then
  say "data-path suite (bench/datapath.sh)"
  echo "DURATION=$DATAPATH_DURATION ROUNDS=$DATAPATH_ROUNDS LAT_DURATION=$DATAPATH_LAT_DURATION PROFILE=$DATAPATH_PROFILE bash bench/datapath.sh" >> "$RESULTS/commands.txt"
  DURATION="$DATAPATH_DURATION" ROUNDS="$DATAPATH_ROUNDS" LAT_DURATION="$DATAPATH_LAT_DURATION" \
    PROFILE="$DATAPATH_PROFILE" \
    OUT="$(cd "$RESULTS" && pwd)/datapath.json" bash bench/datapath.sh || echo "!!!!! bench/datapath.sh failed; its section is missing from the report !!!!!" >&2
fi

# SKIP_REPORT=1: the caller (bench/sensitivity.sh, bench/full.sh) writes one report at the end.
if [ -z "${SKIP_REPORT:-}" ]; then
  say "report"
  echo "warmpath-bench report --results $RESULTS --out $REPORT" >> "$RESULTS/commands.txt"
  "$BIN/warmpath-bench" report --results "$RESULTS" --out "$REPORT"
  echo "wrote $REPORT and $RESULTS/" >&2
fi
