#!/usr/bin/env bash
# bench/routing.sh — warmpath's default policy beside the real peers on every simulated workload
# of the routing table (issue 32's list), one suite at a time, each under an hour on two cores.
#
# Every suite runs bench/compare.sh on the simulated fleet (8 replicas × KV_BLOCKS blocks of 16
# tokens, prefill PREFILL_US µs per uncached token), fixed request counts with a warm-up left out,
# the systems in a seeded shuffled order per seed, the fleet and the router or gateway restarted
# before every run. Suites (SUITES picks some; each replaces only its own results in RESULTS):
#   sim                      shared prefixes that fit the fleet's cache; long documents;
#                            multi-turn chat; agent loops                       (~45 min)
#   sim-1.5x-zipf1           shared prefixes at 1.5× the fleet's cache, Zipf 1   (~25 min)
#   sim-3x-zipf1             3× the fleet's cache, Zipf 1                        (~40 min)
#   sim-1.5x-zipf0.6         1.5×, Zipf 0.6                                      (~25 min)
#   sim-3x-zipf0.6           3×, Zipf 0.6                                        (~40 min)
#   sim-prefill-300us        the 1.5×/Zipf-1 workload at 300 µs per token (an L4-class GPU or
#                            one TPU v5e chip; bench/sensitivity.sh says why)    (~45 min)
# (the Mooncake conversation trace is bench/trace.sh's). Times are for the three default systems
# and ten seeds.
#
# Systems (ROUTING_SYSTEMS): warmpath's default policy (`warmpath-prefix`), SMG 1.13's cache_aware with
# the balance thresholds bench/tune-smg.sh chose on tuning seeds (`smg-cache-aware-tuned`,
# SMG_TUNED_ARGS; SMG's own defaults are one point of that grid, so tuned is never worse on the
# tuning seeds) and llm-d's EPP with its shipped profile behind the bench's ext_proc gateway
# (`llm-d`, EPP_BIN: bench/llm-d.sh builds it from the pinned commit). BASELINE_ROUTER adds an
# earlier warmpath build as `baseline-prefix` (name it in ROUTING_SYSTEMS).
#
# Seeds: SEEDS, default 31-40: scored seeds that no default was tuned on (tuning uses 1-10; the
# defaults scored here were frozen before these seeds were run; 21-30 scored the previous ones,
# see bench/README.md). The report combines them by the one rule of bench/README.md.
#
# Results: RESULTS (default bench/results-routing), REPORT.md there (`warmpath-bench report`),
# every command in commands.txt, the machine and each peer's flags in machine.txt. Binaries:
# BIN_DIR, or a release build of the committed tree (a dirty tree is refused unless
# ALLOW_DIRTY=1; every figure is stamped with the commit and says when its tree was dirty).
set -euo pipefail
cd "$(dirname "$0")/.."

export RESULTS=${RESULTS:-bench/results-routing}
SUITES=${SUITES:-"sim sim-1.5x-zipf1 sim-3x-zipf1 sim-1.5x-zipf0.6 sim-3x-zipf0.6 sim-prefill-300us"}
ROUTING_SYSTEMS=${ROUTING_SYSTEMS:-"warmpath-prefix smg-cache-aware-tuned llm-d"}
export SEEDS=${SEEDS:-"31 32 33 34 35 36 37 38 39 40"}
for s in $SEEDS; do
  if [ "$s" -le 10 ]; then echo "bench/routing.sh: seed $s is a tuning seed (1-10)" >&2; exit 2; fi
done
# shellcheck source=bench/lib.sh
source bench/lib.sh
committed_binaries bench/routing.sh
case " $ROUTING_SYSTEMS " in
  *" llm-d "*) [ -x "${EPP_BIN:-}" ] || { echo "bench/routing.sh: llm-d needs EPP_BIN (bash bench/llm-d.sh)" >&2; exit 2; } ;;
esac
SMG_TUNED_ARGS=${SMG_TUNED_ARGS:-$(cat bench/results/smg-tuned-args 2>/dev/null || echo "--balance-abs-threshold 4 --balance-rel-threshold 1.25")}
export SMG_TUNED_ARGS SKIP_DATAPATH=1 SKIP_REPORT=1 RATES=" " IDLE_SYSTEMS="" SWEEP_SYSTEMS=" "
export REQUESTS=${REQUESTS:-800} WARMUP=${WARMUP:-150} OTHER_REQUESTS=${OTHER_REQUESTS:-400} OTHER_WARMUP=${OTHER_WARMUP:-80}
mkdir -p "$RESULTS"
started=$SECONDS

has() { case " $SUITES " in *" $1 "*) true ;; *) false ;; esac; }
binding() { # suite working-set zipf [extra env...]
  local suite=$1 ws=$2 zipf=$3; shift 3
  has "$suite" || return 0
  echo "== bench/routing.sh: $suite (working set ${ws}x, Zipf $zipf)" >&2
  env "$@" SUITE="$suite" BINDING_WORKING_SET="$ws" BINDING_ZIPF="$zipf" SYSTEMS="" OTHER_SYSTEMS="" \
    OTHER_WORKLOADS="" BINDING_SYSTEMS="$ROUTING_SYSTEMS" bash bench/compare.sh
}

# compare.sh's own suite (`sim`) empties the folder of its own results first, so it runs first.
if has sim; then
  echo "== bench/routing.sh: sim (fits; long documents, multi-turn, agent)" >&2
  SUITE=sim SYSTEMS="$ROUTING_SYSTEMS" BINDING_SYSTEMS="" OTHER_SYSTEMS="$ROUTING_SYSTEMS" \
    OTHER_WORKLOADS="long-doc multi-turn agent" bash bench/compare.sh
fi
binding sim-1.5x-zipf1 1.5 1.0
binding sim-3x-zipf1 3 1.0
binding sim-1.5x-zipf0.6 1.5 0.6
binding sim-3x-zipf0.6 3 0.6
binding sim-prefill-300us 1.5 1.0 PREFILL_US=300 REQUESTS=600 WARMUP=100

echo "warmpath-bench report --results $RESULTS --out $RESULTS/REPORT.md" >> "$RESULTS/commands.txt"
"$BIN_DIR/warmpath-bench" report --results "$RESULTS" --out "$RESULTS/REPORT.md"
echo "bench/routing.sh: $SUITES in $(((SECONDS - started) / 60)) minutes; $RESULTS/REPORT.md" >&2
