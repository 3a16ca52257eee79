#!/usr/bin/env bash
# bench/llm-d.sh — llm-d's endpoint picker (EPP) in front of engines, with no cluster: the EPP
# with file discovery over the engines, and warmpath-extproc-gateway (bench/extproc-gateway)
# speaking ext_proc to it as Envoy would, serving clients on one port.
#
# The EPP is NOT built here: bench/llm-d-build.sh builds it from a snapshot of the pinned
# llm-d-router commit; give its path in EPP_BIN.
#
# Run:     EPP_BIN=/path/to/epp bench/llm-d.sh serve PORT URL...
#          (in the foreground until SIGTERM/SIGINT; prints "llm-d ready on PORT" once a request
#          has gone through the gateway and the EPP to an engine; stops both on exit)
# Source:  . bench/llm-d.sh; llmd_start PORT URL...; ...; llmd_stop
#
# Knobs (environment):
#   EPP_BIN       the EPP binary (required)
#   GATEWAY_BIN   the gateway (default target/release/warmpath-extproc-gateway)
#   LLMD_CONFIG   default (the shipped profile: queue 2, kv-cache-utilization 2, prefix-cache 3)
#                 | precise (prefix scorer fed by vLLM KV events; real vLLM only) | a YAML path;
#                 the files are bench/llm-d/*.yaml, with @PLACEHOLDERS@ filled in here
#   EPP_PORT      the EPP's ext_proc gRPC port (default PORT+2000); health is EPP_PORT+1,
#                 its Prometheus metrics EPP_PORT+2
#   LLMD_MODEL, LLMD_TOKENIZER_URL, LLMD_KV_EVENTS_ENDPOINT   for `precise` (defaults: tiny,
#                 the first engine, tcp://127.0.0.1:5557)
#   LLMD_LOG_DIR  where epp.log and gateway.log go (default: the scratch folder, removed on stop)
#   LLMD_READY_TIMEOUT  seconds to wait for the chain to answer (default 60)

LLMD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLMD_PIDS=()
LLMD_WORK=""

llmd_stop() {
  local p
  for p in "${LLMD_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${LLMD_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  LLMD_PIDS=()
  if [ -n "$LLMD_WORK" ] && [ -z "${LLMD_LOG_DIR:-}" ]; then rm -rf "$LLMD_WORK"; fi
  LLMD_WORK=""
}

# Writes the file-discovery endpoints file for URL... (http://IPv4:PORT each) to stdout.
llmd_endpoints() {
  local i=0 u hostport host port
  echo "endpoints:"
  for u in "$@"; do
    hostport=${u#*://}; hostport=${hostport%%/*}
    host=${hostport%:*}; port=${hostport##*:}
    [ "$host" = localhost ] && host=127.0.0.1
    if ! [[ $host =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ && $port =~ ^[0-9]+$ ]]; then
      echo "llm-d.sh: $u: file discovery takes http://IPv4:PORT only" >&2
      return 1
    fi
    printf '  - name: engine-%d\n    address: "%s"\n    port: "%s"\n' "$i" "$host" "$port"
    i=$((i + 1))
  done
}

llmd_wait_ready() { # url seconds pid...
  local url=$1 deadline=$((SECONDS + $2)) p; shift 2
  until curl -fsS -o /dev/null "$url" 2>/dev/null; do
    for p in "$@"; do
      if ! kill -0 "$p" 2>/dev/null; then echo "llm-d.sh: a process exited while starting" >&2; return 1; fi
    done
    if [ $SECONDS -ge $deadline ]; then echo "llm-d.sh: timed out waiting for $url" >&2; return 1; fi
    sleep 0.3
  done
}

# Starts the EPP and the gateway on PORT in front of URL...; returns once a request went through.
llmd_start() { # PORT URL...
  local port=$1; shift
  if [ -z "${EPP_BIN:-}" ] || [ ! -x "$EPP_BIN" ]; then
    echo "llm-d.sh: set EPP_BIN to the llm-d EPP binary (bash bench/llm-d-build.sh GIT_DIR builds it from the pinned commit)" >&2
    return 2
  fi
  local gateway=${GATEWAY_BIN:-$LLMD_ROOT/target/release/warmpath-extproc-gateway}
  if [ ! -x "$gateway" ]; then
    echo "llm-d.sh: no gateway at $gateway (cargo build --release -p warmpath-extproc-gateway)" >&2
    return 2
  fi
  [ $# -gt 0 ] || { echo "llm-d.sh: no engine URLs" >&2; return 2; }
  local epp_port=${EPP_PORT:-$((port + 2000))}
  local config=${LLMD_CONFIG:-default}
  case $config in
    default|precise) config=$LLMD_ROOT/bench/llm-d/$config.yaml ;;
  esac
  [ -f "$config" ] || { echo "llm-d.sh: no configuration $config" >&2; return 2; }

  LLMD_WORK=${LLMD_LOG_DIR:-$(mktemp -d)}
  mkdir -p "$LLMD_WORK"
  llmd_endpoints "$@" > "$LLMD_WORK/endpoints.yaml" || return 2
  local first=${1%/}
  sed -e "s#@ENDPOINTS_FILE@#$LLMD_WORK/endpoints.yaml#g" \
      -e "s#@MODEL@#${LLMD_MODEL:-tiny}#g" \
      -e "s#@TOKENIZER_URL@#${LLMD_TOKENIZER_URL:-$first}#g" \
      -e "s#@KV_EVENTS_ENDPOINT@#${LLMD_KV_EVENTS_ENDPOINT:-tcp://127.0.0.1:5557}#g" \
      "$config" > "$LLMD_WORK/epp-config.yaml"

  # The flags the shared peers README and llm-d's chart pass (JSON logs at info, no tracing,
  # metrics without auth), with plain-text gRPC since the gateway is on loopback.
  "$EPP_BIN" --grpc-port "$epp_port" --grpc-health-port $((epp_port + 1)) \
    --metrics-port $((epp_port + 2)) --secure-serving=false --pool-name warmpath-bench \
    --pool-namespace bench --config-file "$LLMD_WORK/epp-config.yaml" --zap-encoder json \
    --tracing=false --metrics-endpoint-auth=false >"$LLMD_WORK/epp.log" 2>&1 &
  LLMD_PIDS+=($!)
  RUST_LOG=${RUST_LOG:-warn} "$gateway" --listen "127.0.0.1:$port" --epp "127.0.0.1:$epp_port" \
    >"$LLMD_WORK/gateway.log" 2>&1 &
  LLMD_PIDS+=($!)
  # Ready when a request crosses the whole chain: a GET carries no body, so the EPP sends it to
  # an endpoint of its choosing (its random fallback) and the engine answers.
  if ! llmd_wait_ready "http://127.0.0.1:$port/v1/models" "${LLMD_READY_TIMEOUT:-60}" "${LLMD_PIDS[@]}"; then
    echo "--- epp.log (tail)" >&2; tail -n 20 "$LLMD_WORK/epp.log" >&2
    echo "--- gateway.log (tail)" >&2; tail -n 20 "$LLMD_WORK/gateway.log" >&2
    llmd_stop
    return 1
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  if [ "${1:-}" != serve ] || [ $# -lt 3 ]; then
    sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
  fi
  shift
  trap llmd_stop EXIT
  trap 'exit 0' TERM INT
  llmd_start "$@"
  echo "llm-d ready on $1 (EPP ext_proc on ${EPP_PORT:-$(($1 + 2000))}, logs in $LLMD_WORK)"
  # `wait` returns when a trapped signal arrives, so the EXIT trap stops both promptly.
  wait
fi
