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
# build of the committed tree, as bench/routing.sh). bench/tune-placement.sh runs it, with one
# variant per factor.
set -euo pipefail
cd "$(dirname "$0")/.."
variants=()
for f in ${FACTORS:-"2 4 .inf"}; do
  variants+=("factor-${f#.}=  placement: {leave_factor: $f}")
done
VARIANTS=$(IFS=';'; echo "${variants[*]}") PARTS="trace sim" TRACE_SUITES=fits \
  RESULTS=${RESULTS:-bench/results-diagnosis/leave-factor} exec bash bench/tune-placement.sh
