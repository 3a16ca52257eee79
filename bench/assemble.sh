#!/usr/bin/env bash
# bench/assemble.sh — BENCHMARKS.md from what is committed: the generated report over RESULTS
# (`warmpath-bench report`), which takes in every Markdown fragment there: findings.md,
# independent.md and apart.md, the hand-written reading of the runs made apart from the
# one-commit report (each section names its folder, its command and its commit).
# Run after adding results to RESULTS or editing apart.md; bench/full.sh writes the report its
# own way (the parts' REPORT.md appended as they are) when it reruns everything.
#
#   bash bench/assemble.sh            # with target/release/warmpath-bench, or BIN_DIR's
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results}
REPORT=${REPORT:-BENCHMARKS.md}
BIN=${BIN_DIR:-target/release}
if [ -z "${BIN_DIR:-}" ]; then
  cargo build --release -j 2 -p warmpath-bench
fi

"$BIN/warmpath-bench" report --results "$RESULTS" --out "$REPORT"
echo "bench/assemble.sh: wrote $REPORT" >&2
