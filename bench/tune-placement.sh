#!/usr/bin/env bash
# bench/tune-placement.sh — warmpath's default policy under variants of its `scheduling:` settings,
# on the workloads where placement decides what is cached (issue 32): the Mooncake conversation
# trace where the fleet's cache binds and where it fits (bench/trace.sh's suites), multi-turn chat
# and agents at 32 in flight, and shared prefixes at 1.5x the fleet's cache with Zipf 1 (at the
# default 100 µs and at 300 µs of prefill per token). A tuning sweep: tuning seeds only, warmpath
# alone, no peer (the scored comparison beside the peers is bench/routing.sh and bench/trace.sh,
# on seeds no tuning saw).
#
# VARIANTS: `name=lines` separated by `;`, each `lines` what goes under the router's
# `scheduling:` section (compare.sh's SCHEDULING_EXTRA), e.g.
#   VARIANTS="default=;factor-4=  placement: {leave_factor: 4}"
# One folder per variant under RESULTS, with a report per part: NAME/trace (both trace suites),
# NAME/sim (multi-turn, agent), NAME/binding (sim-1.5x-zipf1 and, with SLOW=1, sim-prefill-300us).
# PARTS picks parts (default "trace sim binding"). Seeds: TRACE_SEEDS (default 1-4), OTHER_SEEDS
# (1-2), BINDING_SEEDS (1-2). BIN_DIR as bench/routing.sh. bench/leave-factor.sh is this sweep
# over `placement.leave_factor` on the trace where the cache fits, multi-turn and agents.
set -euo pipefail
cd "$(dirname "$0")/.."
VARIANTS=${VARIANTS:-"default="}
PARTS=${PARTS:-"trace sim binding"}
TRACE_SUITES=${TRACE_SUITES:-"binding fits"}
TRACE_SEEDS=${TRACE_SEEDS:-"1 2 3 4"}
OTHER_SEEDS=${OTHER_SEEDS:-"1 2"}
BINDING_SEEDS=${BINDING_SEEDS:-"1 2"}
RESULTS=${RESULTS:-bench/results-diagnosis/placement}
for s in $TRACE_SEEDS $OTHER_SEEDS $BINDING_SEEDS; do
  if [ "$s" -gt 10 ]; then echo "bench/tune-placement.sh: seed $s is a scored seed (tuning uses 1-10)" >&2; exit 2; fi
done
# shellcheck source=bench/lib.sh
source bench/lib.sh
committed_binaries bench/tune-placement.sh
export BIN_DIR SKIP_DATAPATH=1 SKIP_REPORT=1 RATES=" " IDLE_SYSTEMS="" SWEEP_SYSTEMS=" "
has() { case " $PARTS " in *" $1 "*) true ;; *) false ;; esac; }

IFS=';' read -r -a variants <<<"$VARIANTS"
for v in "${variants[@]}"; do
  name=${v%%=*}
  extra=${v#*=}
  out="$RESULTS/$name"
  echo "== variant $name: ${extra:-(the defaults)}" >&2
  if has trace; then
    env SCHEDULING_EXTRA="$extra" SEEDS="$TRACE_SEEDS" SUITES="$TRACE_SUITES" \
      TRACE_SYSTEMS="warmpath-prefix" RESULTS="$out/trace" bash bench/trace.sh
  fi
  if has sim; then
    env SCHEDULING_EXTRA="$extra" SEEDS="$OTHER_SEEDS" SUITE=sim SYSTEMS="" BINDING_SYSTEMS="" \
      OTHER_SYSTEMS="warmpath-prefix" OTHER_WORKLOADS="multi-turn agent" OTHER_REQUESTS=400 \
      OTHER_WARMUP=80 RESULTS="$out/sim" bash bench/compare.sh
    "$BIN_DIR/warmpath-bench" report --results "$out/sim" --out "$out/sim/REPORT.md"
  fi
  if has binding; then
    suites=("sim-1.5x-zipf1:100:800:150")
    [ -n "${SLOW:-}" ] && suites+=("sim-prefill-300us:300:600:100")
    for s in "${suites[@]}"; do
      IFS=: read -r suite us requests warmup <<<"$s"
      env SCHEDULING_EXTRA="$extra" SEEDS="$BINDING_SEEDS" SUITE="$suite" PREFILL_US="$us" \
        REQUESTS="$requests" WARMUP="$warmup" BINDING_WORKING_SET=1.5 BINDING_ZIPF=1.0 SYSTEMS="" \
        OTHER_SYSTEMS="" OTHER_WORKLOADS="" BINDING_SYSTEMS="warmpath-prefix" \
        RESULTS="$out/binding" bash bench/compare.sh
    done
    "$BIN_DIR/warmpath-bench" report --results "$out/binding" --out "$out/binding/REPORT.md"
  fi
done
echo "bench/tune-placement.sh: reports in $RESULTS/*/{trace,sim,binding}/REPORT.md" >&2
