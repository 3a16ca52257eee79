#!/usr/bin/env bash
# bench/real-vllm.sh — does the hit-rate ordering of the policies hold on a real engine?
#
# Starts three real vLLM CPU engines (../shared/peers/vllm-cpu.sh, the tiny random-weight model)
# with a small KV cache (--num-gpu-blocks-override, 128-token blocks on CPU), and runs the same
# seeded shared-prefix workload through each warmpath policy and SMG 1.13 (the Shepherd Model
# Gateway: cache_aware on its defaults and tuned, prefix_hash, round_robin) and, when EPP_BIN
# names it, llm-d's EPP (its shipped profile, and its precise prefix scorer from KV events). Between
# systems the engines' prefix caches are emptied (POST /reset_prefix_cache, served because the
# engines run with VLLM_SERVER_DEV_MODE=1) and the router or gateway is restarted, so every
# system starts cold. The engines publish their KV events (tcp://*:KV_PORT0+i); the system
# `warmpath-precise` is the `prefix` policy routing from them, with the model's tokenizer and
# chat template in the router (its caches are emptied once more after it has subscribed, so
# that the engines' `AllBlocksCleared` makes its view complete). Every system runs once per seed (SEEDS, in a seeded shuffled order), at
# the default size (the prefix working set about half the fleet's cache) and where the cache
# binds (BINDING_GROUPS system prompts, about 1.5× the fleet's cache, Zipf 1 popularity).
# Results go to bench/results/vllm-cpu-*.json (suite `vllm-cpu`); the report is regenerated
# unless SKIP_REPORT=1. BIN_DIR: binaries built elsewhere, measured as they are. ROUTER_EXTRA:
# YAML appended to warmpath's configuration (e.g. a `scrape:` block); a system named
# warmpath-POLICY-alt runs POLICY with ALT_ROUTER_EXTRA instead, for an A/B in one run.
#
# About 11 GB of memory and 2-4 minutes to start the engines on 2 cores.
#
# No `smg-cache-aware-events` row: SMG 1.13's event-driven KV index (`--kv-index positional|chain`,
# `--block-size`, `--selection-accounting-ttl-ms`) is fed only by its own engine connections: the
# gRPC `SubscribeKvEvents` stream of a `grpc://` worker (vLLM's `vllm.entrypoints.grpc_server` with
# SMG's servicer, launched by `smg serve --connection-mode grpc`) or the handshake of an `ipc://`
# worker (a headless vLLM EngineCore dialling SMG's ZMQ sockets, `--connection-mode zmq`). For an
# OpenAI-HTTP worker, which these engines are, `smg launch --help` lists no flag that names a KV
# event endpoint (its only KV-event knobs are the index kind, the block size, the liveness bounds
# `--worker-stale-secs` and the Kubernetes annotations `--kv-connector-annotation`
# `--kv-engine-id-annotation`), so over HTTP cache_aware always routes from its radix trees of
# request text. Following vLLM's ZMQ publisher would need SMG to front the engine core itself.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results}
REPORT=${REPORT:-BENCHMARKS.md}
VLLM_DIR=${VLLM_DIR:-/work/peers/vllm}
SGLANG_DIR=${SGLANG_DIR:-/work/peers/sglang}
PEERS=${PEERS:-$(cd .. && pwd)/shared/peers}
ENGINES=${ENGINES:-3}
BLOCKS=${BLOCKS:-64}
PORT0=${PORT0:-18201}
FRONT_PORT=${FRONT_PORT:-18280}
ADMIN_PORT=${ADMIN_PORT:-18290}
REQUESTS=${REQUESTS:-200}
WARMUP=${WARMUP:-30}
CONCURRENCY=${CONCURRENCY:-4}
SEEDS=${SEEDS:-"11 12 13 14 15"}
DEFAULT_SYSTEMS="warmpath-round-robin warmpath-prefix warmpath-precise warmpath-predicted-ttft warmpath-consistent-hash warmpath-llm-d smg-cache-aware smg-cache-aware-tuned smg-prefix-hash smg-round-robin"
# llm-d's EPP (EPP_BIN, built by bench/llm-d-build.sh) behind
# warmpath-extproc-gateway: `llm-d` on its shipped profile (its approximate prefix scorer),
# `llm-d-precise` with its prefix scorer fed by the engines' KV events (bench/llm-d/precise.yaml;
# the events reach it through bench/kv-relay.py, since the engines bind their publishers for
# warmpath and llm-d's global socket wants them to connect).
[ -n "${EPP_BIN:-}" ] && DEFAULT_SYSTEMS="$DEFAULT_SYSTEMS llm-d llm-d-precise"
SYSTEMS=${SYSTEMS:-$DEFAULT_SYSTEMS}
# smg-cache-aware-tuned: SMG_TUNED_ARGS (bench/full.sh passes the pair bench/tune-smg.sh chose on the
# simulated fleet's tuning seeds; nothing is tuned on these engines).
SMG_TUNED_ARGS=${SMG_TUNED_ARGS:-$(cat "$RESULTS/smg-tuned-args" 2>/dev/null || echo "--balance-abs-threshold 4 --balance-rel-threshold 1.25")}
KV_PORT0=${KV_PORT0:-18251}
# Where llm-d's EPP binds its KV-event socket (llm-d-precise), fed by bench/kv-relay.py.
LLMD_KV_PORT=${LLMD_KV_PORT:-$((KV_PORT0 + 40))}
# Sized for this fleet in the engine's own tokens: the tiny model's BPE cuts each 4-byte word
# into about BYTES_PER_TOKEN bytes per token (measured below with /tokenize), so the prefix
# working set (groups × system prompt) is about half the fleet's 3 × 64 × 128 tokens.
GROUPS_=${GROUPS_:-12}
SYSTEM_WORDS=${SYSTEM_WORDS:-400}
# Three times the groups: about 1.5× the fleet's cache.
BINDING_GROUPS=${BINDING_GROUPS:-36}
BIN=${BIN_DIR:-target/release}

if [ ! -x "$VLLM_DIR/venv/bin/python" ]; then
  echo "!!!!! SKIPPING the real-engine run: no vLLM under $VLLM_DIR (bash $PEERS/vllm-cpu.sh install $VLLM_DIR) !!!!!" >&2
  exit 0
fi
[ -n "${BIN_DIR:-}" ] || cargo build --release -j 2 -p warmpath-router -p warmpath-bench
mkdir -p "$RESULTS"
rm -f "$RESULTS"/vllm-cpu-*.json "$RESULTS"/commands-vllm-cpu.txt

# shellcheck source=bench/lib.sh
. bench/lib.sh


URLS=()
for i in $(seq 0 $((ENGINES - 1))); do
  port=$((PORT0 + i))
  URLS+=("http://127.0.0.1:$port")
  # --enable-scale-out serves vLLM's render (tokenize) endpoints, which llm-d's token-producer
  # calls: without it every llm-d-precise request fails to tokenize (403) and the EPP routes as
  # if it knew no cache. The topic names the engine as llm-d's KV-event pool reads it (kv@ADDRESS:PORT@MODEL);
  # warmpath subscribes to every topic.
  kv_config="{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$((KV_PORT0 + i))\", \"topic\": \"kv@127.0.0.1:$port@tiny\"}"
  VLLM_SERVER_DEV_MODE=1 bash "$PEERS/vllm-cpu.sh" serve "$VLLM_DIR" "$port" \
    --num-gpu-blocks-override "$BLOCKS" --enable-scale-out --kv-events-config "$kv_config" >"$WORK/vllm-$i.log" 2>&1 &
  PIDS+=($!)
done
for u in "${URLS[@]}"; do
  wait_http "$u/health" 600 || { tail -20 "$WORK"/vllm-*.log >&2; exit 1; }
done
echo "engines up: ${URLS[*]}" >&2
case " $SYSTEMS " in
  *" llm-d-precise "*)
    KV_ENDPOINTS=()
    for i in $(seq 0 $((ENGINES - 1))); do KV_ENDPOINTS+=("tcp://127.0.0.1:$((KV_PORT0 + i))"); done
    "$VLLM_DIR/venv/bin/python" bench/kv-relay.py "tcp://127.0.0.1:$LLMD_KV_PORT" "${KV_ENDPOINTS[@]}" \
      >"$WORK/kv-relay.log" 2>&1 &
    PIDS+=($!)
    ;;
esac

# Bytes per engine token for this workload's text, from the engine's own tokenizer.
sample=$(python3 - <<'PY'
import json, random, re
# The workload's own vocabulary (bench/src/text.rs).
src = open("bench/src/text.rs").read()
words = re.findall(r'"([a-z]{3})"', src[src.index("const WORDS"):])
random.seed(1)
print(json.dumps({"model": "tiny", "prompt": "".join(" " + random.choice(words) for _ in range(200))}))
PY
)
ntok=$(curl -fsS "${URLS[0]}/tokenize" -H 'content-type: application/json' -d "$sample" | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])')
BYTES_PER_TOKEN=$(python3 -c "print(round(800 / $ntok, 2))")
echo "engine tokenizer: $ntok tokens for 800 bytes of workload text ($BYTES_PER_TOKEN bytes per token)" >&2

METRICS=()
for u in "${URLS[@]}"; do METRICS+=(--metrics-url "$u/metrics"); done
{
  echo "# real-engine run: $ENGINES × vLLM CPU (tiny random-weight Llama), --num-gpu-blocks-override $BLOCKS, 128-token blocks; engine tokenizer $BYTES_PER_TOKEN bytes per token on this text"
  for label in $SYSTEMS; do
    case $label in
      smg-*) smg_ready && echo "# row $(smg_row_text "$label")" ;;
      llm-d) echo "# row llm-d: llm-d's EPP ($EPP_BIN, llm-d-router ebab687) on bench/llm-d/default.yaml behind warmpath-extproc-gateway" ;;
      llm-d-precise) echo "# row llm-d-precise: llm-d's EPP ($EPP_BIN, llm-d-router ebab687) on bench/llm-d/precise.yaml (KV events through bench/kv-relay.py) behind warmpath-extproc-gateway" ;;
    esac
  done
} >> "$RESULTS/commands-vllm-cpu.txt"

FRONT_PID=""
stop_front() {
  if [ -n "$FRONT_PID" ]; then kill "$FRONT_PID" 2>/dev/null || true; wait "$FRONT_PID" 2>/dev/null || true; FRONT_PID=""; fi
}
run_point() { # label seed section groups zipf
  local label=$1 seed=$2 section=$3 groups=$4 zipf=$5
  for u in "${URLS[@]}"; do curl -fsS -X POST "$u/reset_prefix_cache" >/dev/null; done
  stop_front
  case $label in
    warmpath-*)
      local policy=${label#warmpath-} extra=${ROUTER_EXTRA:-}
      if [ "${policy%-alt}" != "$policy" ]; then policy=${policy%-alt}; extra=${ALT_ROUTER_EXTRA:-}; fi
      policy=${policy//-/_}
      local kv=""
      if [ "$policy" = precise ]; then
        policy=prefix
        kv="    kv_events: { tokenizer: \"$VLLM_DIR/tiny/tokenizer.json\", chat_template: \"$VLLM_DIR/tiny/tokenizer_config.json\" }"
      fi
      local cfg="$WORK/router.yaml"
      {
        echo "listen: 127.0.0.1:$FRONT_PORT"
        echo "admin: 127.0.0.1:$ADMIN_PORT"
        echo "pools:"
        echo "  - name: tiny"
        echo "    models: [tiny]"
        [ -z "$kv" ] || echo "$kv"
        echo "    replicas:"
        local i=0
        for u in "${URLS[@]}"; do
          echo "      - { name: vllm-$i, url: \"$u\", kv_events_endpoint: \"tcp://127.0.0.1:$((KV_PORT0 + i))\" }"
          i=$((i + 1))
        done
        echo "scheduling:"
        echo "  policy: $policy"
        [ -z "$extra" ] || printf '%s\n' "$extra"
      } > "$cfg"
      [ -z "$kv" ] || cp "$cfg" "$RESULTS/vllm-cpu-router-precise.yaml"
      "$BIN/warmpath-router" --config "$cfg" >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 30
      if [ -n "$kv" ]; then
        # Subscribed now (ZMQ joins take a moment): the engines' AllBlocksCleared starts the
        # router's view complete.
        sleep 2
        for u in "${URLS[@]}"; do curl -fsS -X POST "$u/reset_prefix_cache" >/dev/null; done
      fi
      ;;
    smg-*)
      smg_ready || { echo "!!!!! SKIPPING $label: SMG is not installed under $SMG_DIR !!!!!" >&2; return 0; }
      smg_start "$label" "$FRONT_PORT" "$WORK/front.log" "${URLS[@]}"
      FRONT_PID=$SMG_PID
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
    llm-d|llm-d-precise)
      [ -x "${EPP_BIN:-}" ] || { echo "!!!!! SKIPPING $label: EPP_BIN does not name llm-d's EPP !!!!!" >&2; return 0; }
      local llmd_config=default
      [ "$label" = llm-d ] || llmd_config=precise
      LLMD_CONFIG=$llmd_config GATEWAY_BIN=${GATEWAY_BIN:-$BIN/warmpath-extproc-gateway} \
        LLMD_MODEL=tiny LLMD_TOKENIZER_URL="${URLS[0]}" \
        LLMD_KV_EVENTS_ENDPOINT="tcp://127.0.0.1:$LLMD_KV_PORT" LLMD_LOG_DIR="$WORK/llm-d" \
        bash bench/llm-d.sh serve "$FRONT_PORT" "${URLS[@]}" >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/v1/models" 90
      if [ "$llmd_config" = precise ]; then
        # As for warmpath-precise: once its socket is joined, the engines' AllBlocksCleared
        # starts the EPP's view complete.
        sleep 2
        for u in "${URLS[@]}"; do curl -fsS -X POST "$u/reset_prefix_cache" >/dev/null; done
      fi
      ;;
    sglang-*)
      [ -x "$SGLANG_DIR/venv/bin/python" ] || { echo "!!!!! SKIPPING $label: no sglang-router under $SGLANG_DIR !!!!!" >&2; return 0; }
      local policy=${label#sglang-}; policy=${policy//-/_}
      bash "$PEERS/sglang-router.sh" serve "$SGLANG_DIR" "$FRONT_PORT" "$policy" "${URLS[@]}" >"$WORK/front.log" 2>&1 &
      FRONT_PID=$!; PIDS+=("$FRONT_PID")
      wait_http "http://127.0.0.1:$FRONT_PORT/health" 60
      ;;
  esac
  local cmd=("$BIN/warmpath-bench" run --url "http://127.0.0.1:$FRONT_PORT" --suite vllm-cpu --label "$label"
    --workload shared-prefix --fleet-replicas "$ENGINES" --fleet-kv-blocks "$BLOCKS" --fleet-block-size 128
    --groups "$groups" --zipf "$zipf" --system-tokens "$SYSTEM_WORDS" --question-tokens 32 --output-tokens 16
    --mode closed --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup "$WARMUP" --seed "$seed" --timeout 120s
    --oracle-bytes-per-token "$BYTES_PER_TOKEN" "${METRICS[@]}" --out "$RESULTS/vllm-cpu-$section$label-s$seed.json")
  echo "${cmd[*]}" | sed "s#$BIN/##" >> "$RESULTS/commands-vllm-cpu.txt"
  "${cmd[@]}"
  case $label in
    warmpath-*)
      # How often the router read each engine's metrics (scrape.engine_share stretches it).
      curl -fsS "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^warmpath_replica_scrape_interval_seconds' \
        | sed "s/^/$section$label s$seed /" >> "$RESULTS/vllm-cpu-scrape-intervals.txt" || true
      ;;
  esac
  if [ "$label" = warmpath-precise ]; then
    curl -fsS "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^warmpath_kv_events' \
      > "$RESULTS/vllm-cpu-${section}metrics-precise-s$seed.txt" || true
  fi
}

for seed in $SEEDS; do
  for label in $(printf '%s\n' $SYSTEMS | shuf --random-source=<(yes "$seed")); do
    run_point "$label" "$seed" "" "$GROUPS_" 0
    run_point "$label" "$seed" binding- "$BINDING_GROUPS" 1
  done
done
stop_front

if [ -z "${SKIP_REPORT:-}" ]; then
  "$BIN/warmpath-bench" report --results "$RESULTS" --out "$REPORT"
  echo "wrote $REPORT and $RESULTS/vllm-cpu-*.json" >&2
fi
