#!/usr/bin/env bash
# fuzz/replay.sh — build every cargo-fuzz target and run each once over its committed inputs
# (fuzz/seeds/TARGET: the seeds, and any input that once crashed it, kept there as a regression),
# without fuzzing: what CI runs (`make fuzz-replay`), so that the targets keep building against
# the code they test and no input that ever mattered panics again. fuzz/run.sh is the long run.
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install --locked cargo-fuzz`; CI installs
# it from crates.io). Debug builds (`--dev`): quicker to build, and their overflow checks are on.
set -euo pipefail
cd "$(dirname "$0")"

TARGETS=${TARGETS:-"request_parse config_parse kv_events_decode sse_usage"}
for t in $TARGETS; do
  cargo +nightly fuzz build --dev "$t"
done
# The binaries themselves, given the inputs as files (not a corpus directory, which `cargo fuzz
# run` would add): libFuzzer runs each file once and writes nothing.
bin_dir="target/$(rustc +nightly -vV | sed -n 's/^host: //p')/debug"
for t in $TARGETS; do
  inputs=$(find "seeds/$t" -type f | wc -l)
  [ "$inputs" -gt 0 ] || { echo "fuzz/replay.sh: no inputs in seeds/$t" >&2; exit 1; }
  echo "== $t: $inputs inputs" >&2
  find "seeds/$t" -type f -print0 | xargs -0 "$bin_dir/$t"
done
