#!/usr/bin/env bash
# bench/trace.sh — a recorded production trace replayed through warmpath and the peers.
#
# The Mooncake FAST'25 conversation trace (12,031 requests from one hour of Kimi's service: arrival
# times, prompt and output lengths, and the ids of each prompt's 512-token blocks, equal ids being
# equal blocks) is replayed by `warmpath-bench run --workload trace --mode trace` on the simulated
# fleet of bench/compare.sh: each seed replays its own window of TRACE_REQUESTS consecutive
# requests at the trace's times divided by TRACE_TIME_SCALE, every 512-token block made one
# 16-token KV block (lengths scale with it: what is kept and what changes is in
# bench/README.md, "Traces"). Two fleet sizes: KV_BLOCKS_BINDING per replica, where the fleet's
# cache is too small for the window's reuse (LRU with perfect placement well under Belady), and
# KV_BLOCKS_FITS, where it holds it.
#
# The trace is data, not in this repository: fetch github:kvcache-ai/Mooncake and copy
# FAST25-release/traces/conversation_trace.jsonl out of the snapshot; TRACE_FILE names it.
#
# Seeds: SEEDS (default 21-30, the scored seeds; tuning uses 1-10, see bench/README.md).
# Systems: TRACE_SYSTEMS (default warmpath's default policy and round robin, SMG 1.13 cache_aware
# and round_robin, and llm-d's EPP when EPP_BIN is set). Results: RESULTS (default
# bench/results-trace), the report REPORT (default RESULTS/REPORT.md).
set -euo pipefail
cd "$(dirname "$0")/.."

TRACE_FILE=${TRACE_FILE:-/work/peers/traces/conversation_trace.jsonl}
[ -f "$TRACE_FILE" ] || { echo "TRACE_FILE=$TRACE_FILE is missing (see the header of $0)" >&2; exit 2; }
RESULTS=${RESULTS:-bench/results-trace}
REPORT=${REPORT:-$RESULTS/REPORT.md}
SEEDS=${SEEDS:-"21 22 23 24 25 26 27 28 29 30"}
KV_BLOCKS_BINDING=${KV_BLOCKS_BINDING:-1024}
KV_BLOCKS_FITS=${KV_BLOCKS_FITS:-4096}
SUITES=${SUITES:-"binding fits"}
# The trace's window, warm-up and speed: compare.sh's TRACE_* knobs and defaults (inherited).
DEFAULT_SYSTEMS="warmpath-prefix warmpath-round-robin smg-cache-aware smg-round-robin"
[ -n "${EPP_BIN:-}" ] && DEFAULT_SYSTEMS="$DEFAULT_SYSTEMS llm-d"
TRACE_SYSTEMS=${TRACE_SYSTEMS:-$DEFAULT_SYSTEMS}

mkdir -p "$RESULTS"
rm -f "$RESULTS"/machine.txt "$RESULTS"/commands*.txt
built=""
for suite in $SUITES; do
  case $suite in
    binding) kv=$KV_BLOCKS_BINDING ;;
    fits) kv=$KV_BLOCKS_FITS ;;
    *) echo "unknown suite $suite (binding | fits)" >&2; exit 2 ;;
  esac
  # The first suite builds the binaries (unless BIN_DIR names them); the others reuse them
  # (same commit, same build).
  env SUITE="trace-$suite" KV_BLOCKS="$kv" SEEDS="$SEEDS" RESULTS="$RESULTS" SKIP_REPORT=1 \
    SKIP_DATAPATH=1 SYSTEMS="" OTHER_SYSTEMS="" BINDING_SYSTEMS="" IDLE_SYSTEMS="" \
    TRACE_SYSTEMS="$TRACE_SYSTEMS" TRACE_FILE="$TRACE_FILE" ${built:+BIN_DIR=${BIN_DIR:-target/release}} \
    bash bench/compare.sh
  built=1
done
"${BIN_DIR:-target/release}/warmpath-bench" report --results "$RESULTS" --out "$REPORT"
echo "wrote $REPORT" >&2
