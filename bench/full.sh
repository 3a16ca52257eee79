#!/usr/bin/env bash
# bench/full.sh — the whole report from one commit (`make bench-full`), in parts of at most about
# an hour each on two cores (11 GB of memory for the real engines), all from one build.
#
# One build of the tree as committed (a dirty tree is refused unless ALLOW_DIRTY=1: results are
# stamped with the commit, and a report must say what one version of the code does), then the
# PARTS (default: all, in this order; a part keeps what earlier parts of the same commit wrote):
#   tune         bench/tune-smg.sh: SMG's (the Shepherd Model Gateway 1.13) balance thresholds,
#                tuned on seeds 1-2 (tuning seeds; disjoint from the scored ones)
#   routing      bench/routing.sh: warmpath's default beside SMG 1.13 (tuned) and llm-d's EPP on
#                every simulated workload of the routing table (fits, 1.5x/3x at Zipf 1 and 0.6,
#                long documents, multi-turn, agent, slow prefill); bench/results-routing; its
#                suites are each under an hour (about four hours together)
#   trace        bench/trace.sh: the Mooncake conversation trace; bench/results-trace
#   main         bench/compare.sh: the wider table (every policy, the peers' algorithms on
#                warmpath's data path, SMG's other policies, llm-d when EPP_BIN is set), the
#                open-loop sweep, the idle plumbing, the data-path suite; in two halves of the
#                scored seeds of about an hour each
#   sensitivity  bench/sensitivity.sh: the binding workload under other hardware assumptions,
#                and a mixed fleet
#   vllm         bench/real-vllm.sh: three real vLLM engines beside SMG 1.13 and llm-d's EPP (its
#                shipped profile and its precise scorer from KV events); bench/results-vllm
#                (skipped, loudly, without vLLM)
#   independent  bench/independent.sh: warmpath-bench's figures against guidellm's
#   pd           bench/pd.sh: the prefill/decode split against unified serving and SMG's PD mode
#   flow         bench/flow.sh: per-tenant fairness under overload
# and one report (BENCHMARKS.md) over the main folder (the routing, trace, real-engine, P/D and
# flow reports appended as they are), and the README's generated block from the committed
# results its marker names.
# Scored seeds: SCORE_SEEDS (default 31-40); warmpath's defaults were chosen on tuning seeds 1-10
# and frozen before the scored seeds ran (bench/README.md, "Seeds").
set -euo pipefail
cd "$(dirname "$0")/.."

export RESULTS=${RESULTS:-bench/results}
REPORT=${REPORT:-BENCHMARKS.md}
ALL_PARTS="tune routing trace main sensitivity vllm independent pd flow"
PARTS=${PARTS:-$ALL_PARTS}
SCORE_SEEDS=${SCORE_SEEDS:-"31 32 33 34 35 36 37 38 39 40"}

# shellcheck source=bench/lib.sh
source bench/lib.sh
committed_binaries bench/full.sh
export SKIP_REPORT=1
# llm-d's EPP: EPP_BIN, or built here by bench/llm-d-build.sh from LLMD_SNAPSHOT (a git directory
# of llm-d/llm-d-router holding the pinned commit, e.g. what `fetch github:llm-d/llm-d-router`
# returns) into EPP_OUT (default /work/peers/bin/epp).
if [ -z "${EPP_BIN:-}" ] && [ -n "${LLMD_SNAPSHOT:-}" ]; then
  EPP_BIN=${EPP_OUT:-/work/peers/bin/epp}
  bash bench/llm-d-build.sh "$LLMD_SNAPSHOT" "$EPP_BIN"
  export EPP_BIN
fi
mkdir -p "$RESULTS"
if [ "$PARTS" = "$ALL_PARTS" ]; then
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
if has routing; then
  SEEDS=$SCORE_SEEDS RESULTS=bench/results-routing bash bench/routing.sh
fi
if has trace; then
  # Its own folder, as routing's: RESULTS (exported above for the main part) must not carry it
  # into bench/results.
  SEEDS=$SCORE_SEEDS RESULTS=bench/results-trace bash bench/trace.sh
fi
# llm-d's EPP beside the others wherever it is built (bench/llm-d.sh).
LLMD=""
[ -x "${EPP_BIN:-}" ] && LLMD=" llm-d"
if has main; then
  # Two halves of the scored seeds (each about an hour on two cores), the second adding to the
  # first; the data-path suite runs once, with the second. Multi-turn, agents and long documents
  # run in the routing part, beside the peers; here the wider table adds the other two workloads.
  read -r -a seeds <<<"$SCORE_SEEDS"
  half=$(((${#seeds[@]} + 1) / 2))
  for part in 1 2; do
    if [ $part = 1 ]; then part_seeds=${seeds[*]:0:$half}; keep=""; skip_dp=1
    else part_seeds=${seeds[*]:$half}; keep=1; skip_dp=""; fi
    [ -n "$part_seeds" ] || continue
    SEEDS=$part_seeds KEEP_RESULTS=$keep SKIP_DATAPATH=$skip_dp \
      REQUESTS=800 WARMUP=150 OTHER_REQUESTS=400 OTHER_WARMUP=80 RATES="40 120" \
      SYSTEMS="warmpath-round-robin warmpath-least-load warmpath-prefix warmpath-predicted-ttft warmpath-consistent-hash warmpath-llm-d warmpath-dynamo smg-round-robin smg-prefix-hash smg-cache-aware smg-cache-aware-tuned smg-power-of-two$LLMD" \
      SWEEP_SYSTEMS="warmpath-prefix warmpath-predicted-ttft smg-cache-aware smg-cache-aware-tuned" \
      BINDING_SYSTEMS="warmpath-prefix warmpath-predicted-ttft warmpath-consistent-hash warmpath-llm-d warmpath-dynamo smg-cache-aware smg-cache-aware-tuned smg-prefix-hash$LLMD" \
      OTHER_WORKLOADS="no-sharing noisy-neighbour" \
      OTHER_SYSTEMS="warmpath-prefix warmpath-predicted-ttft smg-cache-aware smg-cache-aware-tuned smg-prefix-hash$LLMD" \
      IDLE_SYSTEMS="warmpath-prefix smg-round-robin smg-cache-aware" IDLE_REQUESTS=100 \
      bash bench/compare.sh
  done
fi
if has sensitivity; then
  SEEDS=$SCORE_SEEDS bash bench/sensitivity.sh
fi
if has vllm; then
  SKIP_REPORT='' SEEDS=$SCORE_SEEDS RESULTS=bench/results-vllm REPORT=bench/results-vllm/REPORT.md \
    bash bench/real-vllm.sh
fi
if has independent; then
  bash bench/independent.sh
fi
if has pd; then
  SKIP_REPORT='' SEEDS=$SCORE_SEEDS RESULTS=bench/results-pd REPORT=bench/results-pd/REPORT.md \
    bash bench/pd.sh
fi
if has flow; then
  SEEDS=$SCORE_SEEDS RESULTS=bench/results-flow bash bench/flow.sh
fi

echo "warmpath-bench report --results $RESULTS --out $REPORT" >> "$RESULTS/commands.txt"
"$BIN_DIR/warmpath-bench" report --results "$RESULTS" --out "$REPORT"
# The routing table, the trace, the real engines, P/D and flow control have reports of their
# own (each from its folder): appended as they are, so BENCHMARKS.md holds every table.
for part in routing trace vllm pd flow; do
  if [ -f "bench/results-$part/REPORT.md" ]; then
    { echo; sed 's/^# /## /' "bench/results-$part/REPORT.md"; } >> "$REPORT"
  fi
done
echo "bench/full.sh: wrote $REPORT in $(((SECONDS - started) / 60)) minutes" >&2
# The README's benchmark block, from the committed results its marker names.
"$BIN_DIR/warmpath-bench" headline --readme README.md
