#!/usr/bin/env bash
# bench/pd.sh — does splitting prefill from decode pay, and where does it lose?
#
# One simulated fleet of REPLICAS replicas (warmpath-sim, the costs of bench/compare.sh: prefill
# PREFILL_US µs per uncached token, a 5 ms decode step, 0.2 ms per KV block pulled), served
#   unified              warmpath `prefix` over all replicas (role both)
#   pd-nixl-T            warmpath, half the replicas a prefill pool and half a decode pool,
#                        vLLM's NIXL protocol, split from T uncached tokens (THRESHOLDS)
#   pd-sglang            warmpath, the same pools, SGLang's bootstrap protocol
#   smg-pd               SMG 1.13 (the Shepherd Model Gateway, ../shared/peers/smg.sh) in its PD mode
#                        (--pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL, cache_aware
#                        for both legs; it sends both legs at once with SGLang's bootstrap fields,
#                        its connector mode `passthrough`)
#   smg-unified          SMG, cache_aware over all replicas
#   sglang-pd, sglang-unified  (when named) the same on the older sglang-router 0.3.2
# on three workloads, open loop at RATE requests/s (fixed request counts, a warm-up left out):
#   long-prompts         no sharing, PROMPT_TOKENS-token prompts, 16 tokens out: prefill-heavy
#   medium-prompts       no sharing, 384-token prompts, 64 tokens out: where a split may not pay
#                        (pd-nixl-256 splits them, pd-nixl-1024 does not)
#   mixed                long documents with short questions (the long-doc workload), 64 out:
#                        a document's first request is split, its questions are cached
# TTFT, inter-token latency p50/p99 and throughput per system, SEEDS seeds each, systems in a
# seeded shuffled order, into RESULTS (suite `pd`); SMG's version and its rows' flags go to
# RESULTS/commands-pd.txt. About 25 minutes on two cores with 5 seeds.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results}
REPORT=${REPORT:-BENCHMARKS.md}
SEEDS=${SEEDS:-"11 12 13 14 15"}
REPLICAS=${REPLICAS:-8}
KV_BLOCKS=${KV_BLOCKS:-512}
PREFILL_US=${PREFILL_US:-100}
RATE=${RATE:-12}
REQUESTS=${REQUESTS:-160}
WARMUP=${WARMUP:-30}
PROMPT_TOKENS=${PROMPT_TOKENS:-2048}
THRESHOLDS=${THRESHOLDS:-"256 1024"}
SYSTEMS=${SYSTEMS:-"unified pd-sglang smg-pd smg-unified"}
WORKLOADS=${WORKLOADS:-"long-prompts medium-prompts mixed"}
SIM_PORT=${SIM_PORT:-18501}
BOOTSTRAP_PORT=${BOOTSTRAP_PORT:-19501}
FRONT_PORT=${FRONT_PORT:-18580}
ADMIN_PORT=${ADMIN_PORT:-18590}
SGLANG_DIR=${SGLANG_DIR:-/work/peers/sglang}
BIN=${BIN_DIR:-target/release}
for t in $THRESHOLDS; do SYSTEMS="$SYSTEMS pd-nixl-$t"; done

[ -n "${BIN_DIR:-}" ] || cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench
mkdir -p "$RESULTS"
rm -f "$RESULTS"/pd-*.json "$RESULTS"/commands-pd.txt
# shellcheck source=bench/lib.sh
. bench/lib.sh

HALF=$((REPLICAS / 2))
url() { echo "http://127.0.0.1:$((SIM_PORT + $1))"; }
SIM_PID="" FRONT_PID=""
stop() { for p in $FRONT_PID $SIM_PID; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; FRONT_PID="" SIM_PID=""; }

# The router's file for a system: one pool of every replica, or prefill and decode pools.
router_yaml() { # system
  echo "listen: 127.0.0.1:$FRONT_PORT"
  echo "admin: 127.0.0.1:$ADMIN_PORT"
  echo "pools:"
  if [ "$1" = unified ]; then
    echo "  - name: all"
    echo "    models: [tiny]"
    echo "    replicas:"
    for i in $(seq 0 $((REPLICAS - 1))); do echo "      - { name: r$i, url: \"$(url "$i")\" }"; done
    return
  fi
  echo "  - name: pre"
  echo "    role: prefill"
  echo "    models: [tiny]"
  echo "    replicas:"
  for i in $(seq 0 $((HALF - 1))); do
    echo "      - { name: p$i, url: \"$(url "$i")\", bootstrap_port: $((BOOTSTRAP_PORT + i)) }"
  done
  echo "  - name: dec"
  echo "    role: decode"
  echo "    models: [tiny]"
  echo "    replicas:"
  for i in $(seq "$HALF" $((REPLICAS - 1))); do echo "      - { name: d$i, url: \"$(url "$i")\" }"; done
  echo "pd:"
  case $1 in
    pd-sglang) echo "  connector: sglang"; echo "  threshold_tokens: 256" ;;
    pd-nixl-*) echo "  connector: nixl"; echo "  threshold_tokens: ${1#pd-nixl-}" ;;
  esac
}

start() { # system
  stop
  "$BIN/warmpath-sim" --listen "127.0.0.1:$SIM_PORT" --replicas "$REPLICAS" --kv-blocks "$KV_BLOCKS" \
    --prefill-us-per-token "$PREFILL_US" --max-model-len 8192 --bootstrap-port "$BOOTSTRAP_PORT" \
    >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!; PIDS+=("$SIM_PID")
  for i in $(seq 0 $((REPLICAS - 1))); do wait_http "$(url "$i")/health" 20; done
  case $1 in
    unified|pd-*)
      router_yaml "$1" > "$WORK/router.yaml"
      "$BIN/warmpath-router" --config "$WORK/router.yaml" >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 20
      ;;
    smg-pd)
      local args=()
      for i in $(seq 0 $((HALF - 1))); do args+=(--prefill "$(url "$i")" "$((BOOTSTRAP_PORT + i))"); done
      for i in $(seq "$HALF" $((REPLICAS - 1))); do args+=(--decode "$(url "$i")"); done
      bash "$PEERS/smg.sh" serve "$SMG_DIR" "$FRONT_PORT" cache_aware -- --pd-disaggregation "${args[@]}" \
        >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
    smg-unified)
      local urls=()
      for i in $(seq 0 $((REPLICAS - 1))); do urls+=("$(url "$i")"); done
      smg_start smg-cache-aware "$FRONT_PORT" "$WORK/front.log" "${urls[@]}"
      FRONT_PID=$SMG_PID
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
    sglang-pd)
      local args=()
      for i in $(seq 0 $((HALF - 1))); do args+=(--prefill "$(url "$i")" "$((BOOTSTRAP_PORT + i))"); done
      for i in $(seq "$HALF" $((REPLICAS - 1))); do args+=(--decode "$(url "$i")"); done
      "$SGLANG_DIR/venv/bin/python" -m sglang_router.launch_router --host 127.0.0.1 --port "$FRONT_PORT" \
        --prometheus-port $((FRONT_PORT + 1000)) --log-level warn --pd-disaggregation "${args[@]}" \
        --policy cache_aware >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
    sglang-unified)
      local urls=()
      for i in $(seq 0 $((REPLICAS - 1))); do urls+=("$(url "$i")"); done
      "$SGLANG_DIR/venv/bin/python" -m sglang_router.launch_router --host 127.0.0.1 --port "$FRONT_PORT" \
        --prometheus-port $((FRONT_PORT + 1000)) --log-level warn --policy cache_aware \
        --worker-urls "${urls[@]}" >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
  esac
}

workload_args() { # workload
  case $1 in
    long-prompts) echo "--workload no-sharing --prompt-tokens $PROMPT_TOKENS --output-tokens 16" ;;
    medium-prompts) echo "--workload no-sharing --prompt-tokens 384 --output-tokens 64" ;;
    mixed) echo "--workload long-doc --output-tokens 64" ;;
  esac
}

METRICS=()
for i in $(seq 0 $((REPLICAS - 1))); do METRICS+=(--metrics-url "$(url "$i")/metrics"); done
case " $SYSTEMS " in
  *" smg-"*)
    if smg_ready; then
      {
        echo "# smg $(smg_version) (PyPI smg, $SMG_DIR/venv/bin/smg)"
        echo "# smg-pd: smg launch --policy cache_aware --backend vllm --log-level warn --pd-disaggregation --prefill URL BOOTSTRAP_PORT ($HALF) --decode URL ($((REPLICAS - HALF)))"
        echo "# smg-unified: smg launch --policy cache_aware --backend vllm --log-level warn --worker-urls URL ($REPLICAS)"
      } >> "$RESULTS/commands-pd.txt"
    fi
    ;;
esac
for seed in $SEEDS; do
  for system in $(printf '%s\n' $SYSTEMS | shuf --random-source=<(yes "$seed")); do
    case $system in smg-*) smg_ready || { echo "!!!!! SKIPPING $system: no SMG under $SMG_DIR !!!!!" >&2; continue; } ;; esac
    case $system in sglang-*) [ -x "$SGLANG_DIR/venv/bin/python" ] || { echo "!!!!! SKIPPING $system: no $SGLANG_DIR/venv !!!!!" >&2; continue; } ;; esac
    for w in $WORKLOADS; do
      echo "== $system: $w (seed $seed)" >&2
      if ! start "$system"; then
        echo "!!!!! $system did not start; its log:" >&2; tail -20 "$WORK/front.log" >&2; continue
      fi
      # shellcheck disable=SC2046,SC2207
      cmd=("$BIN/warmpath-bench" run --url "http://127.0.0.1:$FRONT_PORT" --suite pd --label "$system"
        --seed "$seed" --fleet-replicas "$REPLICAS" --fleet-kv-blocks "$KV_BLOCKS" "${METRICS[@]}"
        $(workload_args "$w") --mode open --rate "$RATE" --requests "$REQUESTS" --warmup "$WARMUP"
        --timeout 60s --out "$RESULTS/pd-$system-$w-s$seed.json")
      echo "${cmd[*]}" | sed "s#$BIN/##" >> "$RESULTS/commands-pd.txt"
      "${cmd[@]}" || echo "!!!!! $system $w failed" >&2
    done
  done
done
stop
if [ -z "${SKIP_REPORT:-}" ]; then
  "$BIN/warmpath-bench" report --results "$RESULTS" --out "$REPORT"
fi
