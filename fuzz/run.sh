#!/usr/bin/env bash
# fuzz/run.sh — run every cargo-fuzz target for FUZZ_SECONDS each (default 600) and write what
# happened to fuzz/results/RESULTS.md: executions, corpus size, and any crash (its input is
# kept under fuzz/artifacts/TARGET/; a crash becomes a regression test in the crate it hit).
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Targets: TARGETS
# (default all four). Seeds come from fuzz/seeds/TARGET (committed: requests, the example
# configuration, KV-event messages captured from a real vLLM, an engine's SSE answer); the
# growing corpus stays in fuzz/corpus/TARGET (not committed). Long: not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")"

FUZZ_SECONDS=${FUZZ_SECONDS:-600}
TARGETS=${TARGETS:-"request_parse config_parse kv_events_decode sse_usage"}
RSS_MB=${RSS_MB:-2048}
mkdir -p results
out=results/RESULTS.md
# Read before the results file is rewritten (which is itself a change to the tree).
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
{
  echo "# Fuzzing results"
  echo
  echo "\`FUZZ_SECONDS=$FUZZ_SECONDS bash fuzz/run.sh\`, $(date -u +%FT%TZ), commit $commit, $(nproc) cores."
  echo
  echo "| target | seconds | executions | exec/s | corpus inputs | crashes |"
  echo "|---|---|---|---|---|---|"
} > "$out"
for t in $TARGETS; do cargo +nightly fuzz build -O "$t" >&2; done
status=0
for t in $TARGETS; do
  mkdir -p "corpus/$t" "artifacts/$t"
  log="results/$t.log"
  echo "== $t for ${FUZZ_SECONDS}s" >&2
  set +e
  cargo +nightly fuzz run -O "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$FUZZ_SECONDS" -rss_limit_mb="$RSS_MB" -timeout=10 -print_final_stats=1 \
    > "$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  corpus=$(find "corpus/$t" -type f | wc -l)
  crashes=$(find "artifacts/$t" -type f | wc -l)
  [ "$rc" = 0 ] || status=1
  echo "| $t | $FUZZ_SECONDS | ${runs:-?} | ${rate:-?} | $corpus | $crashes$([ "$rc" = 0 ] || echo " (exit $rc, see $t.log)") |" >> "$out"
done
cat "$out"
exit $status
