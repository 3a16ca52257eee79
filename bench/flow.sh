#!/usr/bin/env bash
# bench/flow.sh — per-tenant fairness under overload (issue 13), side by side:
#   warmpath-tokens      warmpath, flow control on, fair share by tokens (`flow.fairness: tokens`)
#   warmpath-requests    warmpath, flow control on, fair share by request count (llm-d's way)
#   warmpath-noflow      warmpath, flow control off (`flow.enabled: false`): the engines' FCFS
#   smg-queue            SMG 1.13, the Shepherd Model Gateway (cache_aware, ../shared/peers/smg.sh),
#                        with its one global admission queue (--max-concurrent-requests = the fleet's
#                        batch slots, --queue-size, --queue-timeout-secs); no tenants. (SMG also has a
#                        priority scheduler and per-tenant token rate limits, both off by default and
#                        configured by YAML; not measured here.)
#   sglang-queue         (when named) the same on the older sglang-router 0.3.2
# and, when named in SYSTEMS, warmpath-headroom: warmpath-tokens with HEADROOM of each replica's
# slots kept for tenants under their fair share (max_inflight_requests MAX_SEQS - HEADROOM,
# headroom_requests HEADROOM); warmpath-isolate: warmpath-headroom with, besides, queued work of
# tenants at or over their share held while ISOLATE_PREFILL prompt tokens per replica wait for
# their first token (max_pending_prefill_tokens ISOLATE_PREFILL), and, with LIGHT_FIRST=true, while
# a request of a tenant under its share waits for its first token (light_prefill_first).
# in front of REPLICAS simulated replicas (warmpath-sim) whose capacity is bounded by their batch
# (MAX_SEQS running sequences each; the router's saturation bound is the same number, so queued
# work waits in the router, in fair order, instead of in the engines).
#
# First the capacity: one closed-loop tenant (2 × the fleet's slots in flight) against
# warmpath-noflow, once per seed, median. From it the rates: a steady tenant at STEADY_FRACTION
# of capacity, a flood at FLOOD_FACTOR × capacity (open loop, Poisson). Then, per seed, every
# (system, scenario) pair in a seeded shuffled order, each on a freshly started fleet and front:
#   alone         the steady tenant alone
#   isolation     the steady tenant beside the flood: target TTFT p99 ≤ 1.25 × alone
#   long-prompts  two equal-weight backlogged tenants (BACKLOG in flight each), one with
#                 LONG_PROMPT-token prompts (8 × PROMPT): target Jain's index of tokens ≥ 0.98
#   weights       three backlogged tenants a, b, c with weights 1:2:4 (router config):
#                 target token shares within 5 % of 1/7, 2/7, 4/7
# Results (JSON per run, the router configurations, the commands) go to RESULTS, the report to
# RESULTS/REPORT.md (`warmpath-bench fairness-report`). About 15 minutes a seed, plus the build.
#
# In parts (a run of ten seeds is longer than a sitting): the first part measures the capacity
# over its seeds; a later part with KEEP_RESULTS=1 and CAPACITY set to the first part's (its
# REPORT.md says it) keeps the results already there and runs its seeds at the same rates. The
# report covers every seed in RESULTS.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results-flow}
SEEDS=${SEEDS:-"11 12 13"}
SYSTEMS=${SYSTEMS:-"warmpath-tokens warmpath-requests warmpath-noflow smg-queue"}
SCENARIOS=${SCENARIOS:-"alone isolation long-prompts weights"}
REPLICAS=${REPLICAS:-2}
MAX_SEQS=${MAX_SEQS:-16}          # per replica: the batch, and the router's max_inflight_requests
DECODE_MS=${DECODE_MS:-20}        # decode step base cost
PREFILL_US=${PREFILL_US:-50}      # prefill cost per prompt token
PROMPT=${PROMPT:-256}
LONG_PROMPT=${LONG_PROMPT:-2048}
OUTPUT=${OUTPUT:-16-48}           # output tokens, uniform per request (one fixed length runs the
                                  # fleet in lock-step waves: every slot frees at once)
STEADY_FRACTION=${STEADY_FRACTION:-0.2}
FLOOD_FACTOR=${FLOOD_FACTOR:-10}
WARMUP=${WARMUP:-10s}
DURATION=${DURATION:-30s}
DRAIN=${DRAIN:-20s}
TIMEOUT=${TIMEOUT:-60s}
QUEUE_TTL_MS=${QUEUE_TTL_MS:-60000}
HEADROOM=${HEADROOM:-2}           # warmpath-headroom and warmpath-isolate only
# warmpath-isolate only. Half a prompt per replica: the pool's bound (this × ready replicas) is
# then one backlog prompt pending at a time on the 2 replicas, so a light request always finds a
# replica with no backlog prefill in its step: the isolation target met for about a quarter of
# the fleet's tokens/s (bench/results-flow/isolation-strict/). 2 × PROMPT (the earlier default)
# costs about 9 % for 1.27× (bench/results-flow/isolation-perreplica/).
ISOLATE_PREFILL=${ISOLATE_PREFILL:-$((PROMPT / 2))}
LIGHT_FIRST=${LIGHT_FIRST:-false}                 # warmpath-isolate only
SGLANG_QUEUE=${SGLANG_QUEUE:-1000}
SMG_QUEUE=${SMG_QUEUE:-$SGLANG_QUEUE}   # the gateway queue's length (smg-queue, sglang-queue)
SIM_PORT=${SIM_PORT:-18601}
FRONT_PORT=${FRONT_PORT:-18680}
ADMIN_PORT=${ADMIN_PORT:-18690}
SGLANG_DIR=${SGLANG_DIR:-/work/peers/sglang}
# Release builds go to their own target folder (fat LTO; kept apart from the debug builds).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-flowbench}
BIN=${BIN_DIR:-$CARGO_TARGET_DIR/release}

SLOTS=$((REPLICAS * MAX_SEQS))
BACKLOG=${BACKLOG:-$((SLOTS * 3 / 2))}   # in flight per backlogged tenant

[ -n "${BIN_DIR:-}" ] || nice -n 19 cargo build --release -j "${JOBS:-1}" -p warmpath-sim -p warmpath-router -p warmpath-bench
# shellcheck source=bench/lib.sh
. bench/lib.sh
# What the binaries were built from (each result also records HEAD when its run started).
# BINARIES_FROM says it instead for prebuilt binaries (BIN_DIR) of another commit.
BUILT_FROM=${BINARIES_FROM:-$(commit_said ' plus uncommitted changes' 12)}
BUILT_AT=$(date -u -r "$BIN/warmpath-router" '+%Y-%m-%d %H:%M UTC' 2>/dev/null || echo unknown)
mkdir -p "$RESULTS"
if [ "${KEEP_RESULTS:-0}" != 1 ]; then
  rm -f "$RESULTS"/flow-*.json "$RESULTS"/commands-flow.txt "$RESULTS"/failed-*.log "$RESULTS"/metrics-*.txt
fi

url() { echo "http://127.0.0.1:$((SIM_PORT + $1))"; }
SIM_PID="" FRONT_PID=""
stop() {
  for p in $FRONT_PID $SIM_PID; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  FRONT_PID="" SIM_PID=""
}

router_yaml() { # system
  echo "listen: 127.0.0.1:$FRONT_PORT"
  echo "admin: 127.0.0.1:$ADMIN_PORT"
  echo "pools:"
  echo "  - name: sim"
  echo "    models: [tiny]"
  echo "    engine: vllm"
  echo "    replicas:"
  for i in $(seq 0 $((REPLICAS - 1))); do echo "      - { name: r$i, url: \"$(url "$i")\" }"; done
  echo "tenants:"
  echo "  trusted_sources: [127.0.0.0/8]   # the load generator plays the gateway naming tenants"
  echo "  policies:"
  echo "    - { name: a, weight: 1 }"
  echo "    - { name: b, weight: 2 }"
  echo "    - { name: c, weight: 4 }"
  echo "flow:"
  case $1 in
    warmpath-noflow) echo "  enabled: false"; return ;;
    warmpath-tokens|warmpath-headroom|warmpath-isolate) echo "  enabled: true"; echo "  fairness: tokens" ;;
    warmpath-requests) echo "  enabled: true"; echo "  fairness: requests" ;;
  esac
  echo "  saturation:"
  if [ "$1" = warmpath-headroom ] || [ "$1" = warmpath-isolate ]; then
    echo "    max_inflight_requests: $((MAX_SEQS - HEADROOM))"
    echo "    headroom_requests: $HEADROOM"
    if [ "$1" = warmpath-isolate ]; then
      echo "    max_pending_prefill_tokens: $ISOLATE_PREFILL"
      echo "    light_prefill_first: $LIGHT_FIRST"
    fi
  else
    echo "    max_inflight_requests: $MAX_SEQS"
  fi
  echo "    max_waiting_requests: null"
  echo "    max_kv_usage: null"
  echo "  queue: { ttl_ms: $QUEUE_TTL_MS }"
}

start() { # system
  stop
  "$BIN/warmpath-sim" --listen "127.0.0.1:$SIM_PORT" --replicas "$REPLICAS" --max-num-seqs "$MAX_SEQS" \
    --decode-base-ms "$DECODE_MS" --prefill-us-per-token "$PREFILL_US" >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!; PIDS+=("$SIM_PID")
  for i in $(seq 0 $((REPLICAS - 1))); do wait_http "$(url "$i")/health" 20; done
  case $1 in
    warmpath-*)
      router_yaml "$1" > "$RESULTS/router-$1.yaml"
      "$BIN/warmpath-router" --config "$RESULTS/router-$1.yaml" >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 20
      ;;
    smg-queue)
      local urls=()
      for i in $(seq 0 $((REPLICAS - 1))); do urls+=("$(url "$i")"); done
      bash "$PEERS/smg.sh" serve "$SMG_DIR" "$FRONT_PORT" cache_aware "${urls[@]}" -- \
        --max-concurrent-requests "$SLOTS" --queue-size "$SMG_QUEUE" \
        --queue-timeout-secs $((QUEUE_TTL_MS / 1000)) >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
    sglang-queue)
      local urls=()
      for i in $(seq 0 $((REPLICAS - 1))); do urls+=("$(url "$i")"); done
      "$SGLANG_DIR/venv/bin/python" -m sglang_router.launch_router --host 127.0.0.1 --port "$FRONT_PORT" \
        --prometheus-port $((FRONT_PORT + 1000)) --log-level warn --worker-urls "${urls[@]}" \
        --max-concurrent-requests "$SLOTS" --queue-size "$SGLANG_QUEUE" \
        --queue-timeout-secs $((QUEUE_TTL_MS / 1000)) >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
  esac
}

# The tenants of a scenario.
tenants() { # scenario
  local shape="prompt_tokens=$PROMPT,output_tokens=$OUTPUT"
  case $1 in
    capacity) echo "--tenant name=capacity,concurrency=$((2 * SLOTS)),$shape" ;;
    alone) echo "--tenant name=steady,rate=$STEADY_RATE,$shape" ;;
    isolation) echo "--tenant name=steady,rate=$STEADY_RATE,$shape --tenant name=flood,rate=$FLOOD_RATE,$shape" ;;
    long-prompts) echo "--tenant name=short,concurrency=$BACKLOG,$shape --tenant name=long,concurrency=$BACKLOG,prompt_tokens=$LONG_PROMPT,output_tokens=$OUTPUT" ;;
    weights)
      for t in a:1 b:2 c:4; do echo -n "--tenant name=${t%:*},weight=${t#*:},concurrency=$BACKLOG,$shape "; done ;;
  esac
}

measure() { # system scenario seed
  local system=$1 scenario=$2 seed=$3
  echo "== $scenario on $system (seed $seed)" >&2
  if ! start "$system"; then
    echo "!!!!! $system did not start; its log is $RESULTS/failed-$system-$scenario-s$seed.log" >&2
    cp "$WORK/front.log" "$RESULTS/failed-$system-$scenario-s$seed.log" || true
    return 0
  fi
  # shellcheck disable=SC2046,SC2207
  local cmd=("$BIN/warmpath-bench" fairness --url "http://127.0.0.1:$FRONT_PORT" --label "$system"
    --scenario "$scenario" --seed "$seed" $(tenants "$scenario") --warmup "$WARMUP" --duration "$DURATION"
    --drain "$DRAIN" --timeout "$TIMEOUT" --quiet --out "$RESULTS/flow-$scenario-$system-s$seed.json")
  echo "${cmd[*]}" | sed "s#$BIN/##" >> "$RESULTS/commands-flow.txt"
  if ! "${cmd[@]}"; then
    echo "!!!!! $scenario on $system failed" >&2
    cp "$WORK/front.log" "$RESULTS/failed-$system-$scenario-s$seed.log" || true
  fi
  # The router's own account of the run (queue, dispatches, refusals by tenant).
  case $system in
    warmpath-*) curl -fsS "http://127.0.0.1:$ADMIN_PORT/metrics" 2>/dev/null | grep '^warmpath_flow' \
      > "$RESULTS/metrics-$scenario-$system-s$seed.txt" || true ;;
  esac
  stop
}

# Capacity, then the rates derived from it (given by an earlier part: the same rates for all).
if [ -z "${CAPACITY:-}" ]; then
  for seed in $SEEDS; do measure warmpath-noflow capacity "$seed"; done
  CAPACITY=$(jq -s '[.[].fairness.requests_per_s] | sort | .[(length - 1) / 2 | floor] * 100 | round / 100' "$RESULTS"/flow-capacity-*.json)
fi
STEADY_RATE=$(jq -n "$CAPACITY * $STEADY_FRACTION * 100 | round / 100")
FLOOD_RATE=$(jq -n "$CAPACITY * $FLOOD_FACTOR * 100 | round / 100")
echo "capacity $CAPACITY req/s: steady $STEADY_RATE req/s, flood $FLOOD_RATE req/s" >&2

PAIRS=()
for system in $SYSTEMS; do for scenario in $SCENARIOS; do PAIRS+=("$system/$scenario"); done; done
for seed in $SEEDS; do
  for pair in $(printf '%s\n' "${PAIRS[@]}" | shuf --random-source=<(yes "$seed")); do
    system=${pair%/*} scenario=${pair#*/}
    if [ "$system" = smg-queue ] && ! smg_ready; then
      echo "!!!!! SKIPPING $system: no SMG under $SMG_DIR" >&2; continue
    fi
    if [ "$system" = sglang-queue ] && ! [ -x "$SGLANG_DIR/venv/bin/python" ]; then
      echo "!!!!! SKIPPING $system: no $SGLANG_DIR/venv" >&2; continue
    fi
    measure "$system" "$scenario" "$seed"
  done
done
stop

# The seeds whose results are in RESULTS (every part's), and those the capacity was measured on.
seeds_of() { # glob
  # shellcheck disable=SC2086
  ls $1 2>/dev/null | sed -E 's/.*-s([0-9]+)\.json$/\1/' | sort -nu | paste -sd' ' -
}
seeds_run() { seeds_of "$RESULTS/flow-[aliw]*.json"; }
capacity_seeds() { seeds_of "$RESULTS/flow-capacity-*.json"; }

describe_system() { # system: its line in the report's list
  case $1 in
    warmpath-tokens) echo "- \`warmpath-tokens\`: warmpath with flow control, fair share by tokens; saturated when the router has
  $MAX_SEQS requests in flight to every replica (\`flow.saturation.max_inflight_requests: $MAX_SEQS\`, the engine
  signals off), queue TTL $QUEUE_TTL_MS ms, the queue's other bounds at their defaults." ;;
    warmpath-requests) echo "- \`warmpath-requests\`: the same with \`flow.fairness: requests\`." ;;
    warmpath-noflow) echo "- \`warmpath-noflow\`: warmpath with \`flow.enabled: false\` (requests wait in the engines' FCFS queues)." ;;
    warmpath-headroom) echo "- \`warmpath-headroom\`: warmpath with flow control by tokens and $HEADROOM of each replica's $MAX_SEQS slots
  kept for tenants under their fair share (\`max_inflight_requests: $((MAX_SEQS - HEADROOM))\`, \`headroom_requests: $HEADROOM\`)." ;;
    warmpath-isolate) echo "- \`warmpath-isolate\`: warmpath-headroom and, besides, queued work of tenants at or over their share
  held while $ISOLATE_PREFILL prompt tokens per replica wait for their first token (\`max_pending_prefill_tokens: $ISOLATE_PREFILL\`)
  and (\`light_prefill_first: $LIGHT_FIRST\`) while a request of a tenant under its share waits for its first token." ;;
    smg-queue) echo "- \`smg-queue\`: SMG $(smg_version) (the Shepherd Model Gateway) with
  \`smg launch --policy cache_aware --backend vllm --log-level warn --max-concurrent-requests $SLOTS --queue-size $SMG_QUEUE --queue-timeout-secs $((QUEUE_TTL_MS / 1000))\`:
  one global queue, no tenants." ;;
    sglang-queue) echo "- \`sglang-queue\`: the SGLang gateway ($("$SGLANG_DIR/venv/bin/python" -m pip show sglang-router 2>/dev/null | awk '/^Version/ {print "sglang-router " $2}')) with
  \`--max-concurrent-requests $SLOTS --queue-size $SGLANG_QUEUE --queue-timeout-secs $((QUEUE_TTL_MS / 1000))\`: one global
  queue, no tenants." ;;
  esac
}

{
  cat <<EOF
\`bench/flow.sh\`: $REPLICAS simulated replicas (\`warmpath-sim --max-num-seqs $MAX_SEQS --decode-base-ms $DECODE_MS
--prefill-us-per-token $PREFILL_US\`, the simulator's other costs at their defaults), so the fleet runs $SLOTS
sequences at once. Requests: fresh random prompts (no shared prefix), $OUTPUT output tokens (uniform per request, \`ignore_eos\`),
streamed, the tenant in \`x-warmpath-tenant\`. Every run on a freshly started fleet and front; warm-up $WARMUP,
then a $DURATION window: TTFT and refusals of the requests sent in it, tokens served by the requests completed in
it; after it, load continues until the window's requests are answered (at most $DRAIN). Seeds: $(seeds_run); in each
seed the (system, scenario) pairs run in a seeded shuffled order. The binaries were built from $BUILT_FROM
($BUILT_AT).

Systems:
EOF
  for system in $SYSTEMS; do describe_system "$system"; done
  cat <<EOF

The routers' files are \`router-*.yaml\` beside this report, the exact commands \`commands-flow.txt\`, the router's
own flow metrics at the end of each warmpath run \`metrics-*.txt\`.
Capacity: one closed-loop tenant with $((2 * SLOTS)) in flight against \`warmpath-noflow\`, once per seed
of the first part ($(capacity_seeds)), median $CAPACITY requests/s; the steady tenant runs at $STEADY_FRACTION × that ($STEADY_RATE
requests/s), the flood at $FLOOD_FACTOR × ($FLOOD_RATE requests/s, at most 2,048 of its requests unanswered at
once: arrivals beyond are skipped and counted). Backlogged tenants keep $BACKLOG requests in flight each.
EOF
} > "$RESULTS/preamble.md"
"$BIN/warmpath-bench" fairness-report --results "$RESULTS" --out "$RESULTS/REPORT.md" --preamble "$RESULTS/preamble.md"
echo "wrote $RESULTS/REPORT.md" >&2
