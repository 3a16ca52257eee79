#!/usr/bin/env bash
# bench/leave-factor.sh — warmpath's default policy at several `scheduling.placement.leave_factor`
# values, on the workloads that pull the factor in opposite directions: the Mooncake
# conversation trace where the fleet's cache fits (light, bursty load: a higher factor keeps
# requests on their warm replica behind a long prefill, for hit rate) and multi-turn chat and
# agents at 32 in flight (a lower factor spreads conversations off the replicas holding a shared
# system prompt). A tuning sweep: tuning seeds only (default 1-4 for the trace, 1-2 for the
# others), no peer, one folder per factor under RESULTS, each factor's reports in
# RESULTS/factor-F/{trace,sim}/REPORT.md.
#
# FACTORS (default "2 4 .inf"), TRACE_FILE (see bench/trace.sh), BIN_DIR (default a release
# build of the committed tree, as bench/routing.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
FACTORS=${FACTORS:-"2 4 .inf"}
TRACE_SEEDS=${TRACE_SEEDS:-"1 2 3 4"}
OTHER_SEEDS=${OTHER_SEEDS:-"1 2"}
RESULTS=${RESULTS:-bench/results-diagnosis/leave-factor}
for s in $TRACE_SEEDS $OTHER_SEEDS; do
  if [ "$s" -gt 10 ]; then echo "bench/leave-factor.sh: seed $s is a scored seed (tuning uses 1-10)" >&2; exit 2; fi
done
# shellcheck source=bench/lib.sh
source bench/lib.sh
committed_binaries bench/leave-factor.sh
export BIN_DIR SKIP_DATAPATH=1 SKIP_REPORT=1 RATES=" " IDLE_SYSTEMS="" SWEEP_SYSTEMS=" "
for f in $FACTORS; do
  out="$RESULTS/factor-${f#.}"
  extra=$(printf '  placement:\n    leave_factor: %s' "$f")
  echo "== leave_factor $f" >&2
  env SCHEDULING_EXTRA="$extra" SEEDS="$TRACE_SEEDS" SUITES=fits TRACE_SYSTEMS="warmpath-prefix" \
    RESULTS="$out/trace" bash bench/trace.sh
  env SCHEDULING_EXTRA="$extra" SEEDS="$OTHER_SEEDS" SUITE=sim SYSTEMS="" BINDING_SYSTEMS="" \
    OTHER_SYSTEMS="warmpath-prefix" OTHER_WORKLOADS="multi-turn agent" OTHER_REQUESTS=400 \
    OTHER_WARMUP=80 RESULTS="$out/sim" bash bench/compare.sh
  "$BIN_DIR/warmpath-bench" report --results "$out/sim" --out "$out/sim/REPORT.md"
done
echo "bench/leave-factor.sh: reports in $RESULTS/factor-*/{trace,sim}/REPORT.md" >&2
