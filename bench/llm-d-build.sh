#!/usr/bin/env bash
# bench/llm-d-build.sh — builds llm-d's endpoint picker (EPP) at the commit every llm-d row of
# the benchmarks ran, from a snapshot of github.com/llm-d/llm-d-router (the `fetch` tool's git
# directory, or any clone holding that commit). Nothing of llm-d is in this repository: the
# source is the snapshot's, its Go modules come from the Go module proxy (or the module cache).
#
#   bash bench/llm-d-build.sh GIT_DIR [OUT]     OUT defaults to /work/peers/bin/epp
#
# then give OUT to the bench scripts as EPP_BIN. LLMD_COMMIT overrides the pinned commit (a
# different commit is a different peer: say so beside its figures).
set -euo pipefail
LLMD_COMMIT=${LLMD_COMMIT:-ebab687927f5331c1b39defcb579a07951bce56c}
src=${1:?usage: $0 GIT_DIR [OUT]}
out=${2:-/work/peers/bin/epp}
command -v go >/dev/null || { echo "no Go toolchain on PATH" >&2; exit 2; }
git --git-dir "$src" cat-file -e "$LLMD_COMMIT^{commit}" 2>/dev/null \
  || { echo "$src does not hold llm-d-router commit $LLMD_COMMIT" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git --git-dir "$src" archive "$LLMD_COMMIT" | tar -x -C "$work"
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
(cd "$work" && nice go build -o "$out" ./cmd/epp)
echo "$LLMD_COMMIT" > "$out.commit"
echo "built $out from llm-d-router $LLMD_COMMIT" >&2
