#!/usr/bin/env bash
# bench/full.sh — the whole report from one commit (`make bench-full`; about 125 minutes on two
# cores, 11 GB of memory for the real engines).
#
# One build of the tree as committed (a dirty tree is refused unless ALLOW_DIRTY=1: results are
# stamped with the commit, and a report must say what one version of the code does), then:
#   1. bench/tune-smg.sh        SMG's (the Shepherd Model Gateway 1.13) balance thresholds, tuned on
#                               seeds 1-2 (tuning seeds; disjoint from the scored 11-15)
#   2. bench/compare.sh         the main comparison on seeds 11-15: every system, the open-loop
#                               sweep, the section where the cache binds, the other workloads,
#                               the idle plumbing, the data-path suite
#   3. bench/sensitivity.sh     the binding workload under other hardware assumptions, and a
#                               mixed fleet
#   4. bench/real-vllm.sh       three real vLLM engines (skipped, loudly, without vLLM)
#   5. bench/independent.sh     warmpath-bench's figures against guidellm's on the same prompts
#   6. bench/pd.sh              the prefill/decode split against unified serving and SMG's PD mode
#   7. bench/flow.sh            per-tenant fairness under overload (issue 13) against plain
#                               request-count fairness, no flow control and SMG's queue
# and one report (BENCHMARKS.md) over all of it (the P/D and flow reports appended as they are). Warmpath's defaults were chosen on seeds 1-2
# and on the default-sized workloads; seeds 11-15 are never used for tuning.
#
# PARTS (default: all seven) runs a subset; the results folder keeps what earlier parts of the
# same commit wrote. A run of all seven starts from an empty results folder.
set -euo pipefail
cd "$(dirname "$0")/.."

export RESULTS=${RESULTS:-bench/results}
REPORT=${REPORT:-BENCHMARKS.md}
PARTS=${PARTS:-"tune main sensitivity vllm independent pd flow"}
SCORE_SEEDS=${SCORE_SEEDS:-"11 12 13 14 15"}

if [ -z "${ALLOW_DIRTY:-}" ] && ! git diff --quiet HEAD -- . 2>/dev/null; then
  echo "bench/full.sh: the tree has uncommitted changes; commit them (or ALLOW_DIRTY=1)" >&2
  exit 2
fi
if [ -z "${BIN_DIR:-}" ]; then
  cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench
  export BIN_DIR=target/release
fi
export SKIP_REPORT=1
mkdir -p "$RESULTS"
if [ "$PARTS" = "tune main sensitivity vllm independent pd flow" ]; then
  rm -f "$RESULTS"/*.json "$RESULTS"/*.png "$RESULTS"/*.md "$RESULTS"/*.txt "$RESULTS"/*.yaml "$RESULTS"/smg-tuned-args "$RESULTS"/sglang-tuned-args
fi
started=$SECONDS

has() { case " $PARTS " in *" $1 "*) true ;; *) false ;; esac; }

if has tune; then
  bash bench/tune-smg.sh
fi
# The chosen thresholds, for every script below that runs smg-cache-aware-tuned.
SMG_TUNED_ARGS=$(cat "$RESULTS/smg-tuned-args" 2>/dev/null || echo "--balance-abs-threshold 4 --balance-rel-threshold 1.25")
export SMG_TUNED_ARGS
if has main; then
  SEEDS=$SCORE_SEEDS REQUESTS=800 WARMUP=150 OTHER_REQUESTS=400 OTHER_WARMUP=80 \
    RATES="40 120" \
    SYSTEMS="warmpath-round-robin warmpath-least-load warmpath-prefix warmpath-predicted-ttft warmpath-consistent-hash warmpath-llm-d warmpath-dynamo smg-round-robin smg-prefix-hash smg-cache-aware smg-cache-aware-tuned smg-power-of-two" \
    SWEEP_SYSTEMS="warmpath-prefix warmpath-predicted-ttft smg-cache-aware smg-cache-aware-tuned" \
    BINDING_SYSTEMS="warmpath-prefix warmpath-predicted-ttft warmpath-consistent-hash warmpath-llm-d warmpath-dynamo smg-cache-aware smg-cache-aware-tuned smg-prefix-hash" \
    OTHER_SYSTEMS="warmpath-prefix warmpath-predicted-ttft smg-cache-aware smg-cache-aware-tuned smg-prefix-hash" \
    IDLE_SYSTEMS="warmpath-prefix smg-round-robin smg-cache-aware" IDLE_REQUESTS=100 \
    bash bench/compare.sh
fi
if has sensitivity; then
  SEEDS=$SCORE_SEEDS bash bench/sensitivity.sh
fi
if has vllm; then
  SEEDS=$SCORE_SEEDS bash bench/real-vllm.sh
fi
if has independent; then
  bash bench/independent.sh
fi
if has pd; then
  SEEDS=$SCORE_SEEDS bash bench/pd.sh
fi
if has flow; then
  SEEDS="11 12 13" bash bench/flow.sh
fi

echo "warmpath-bench report --results $RESULTS --out $REPORT" >> "$RESULTS/commands.txt"
"$BIN_DIR/warmpath-bench" report --results "$RESULTS" --out "$REPORT"
# The P/D and flow-control reports have their own generators: appended as they are.
for part in pd flow; do
  if has $part && [ -f "bench/results-$part/REPORT.md" ]; then
    { echo; sed 's/^# /## /' "bench/results-$part/REPORT.md"; } >> "$REPORT"
  fi
done
echo "bench/full.sh: wrote $REPORT in $(((SECONDS - started) / 60)) minutes" >&2
