#!/usr/bin/env bash
# bench/sessions.sh — session affinity on an agent workload whose sessions rewrite their context
# (issue 15), and `predicted_ttft` on multi-turn chat.
#
# Runs bench/replicas.sh (its fleet, nginx front, restarts and report) twice:
# 1. RESULTS=bench/results-sessions: the agent workload with context rewrites (every
#    INSERT_EVERY-th step a tool call and result spliced into the middle of the history, every
#    COMPACT_EVERY-th step the history compacted into a SUMMARY_TOKENS summary and the latest
#    exchange), STEPS steps per session, working set WORKING_SET × the fleet's cache; through
#    warmpath by prefix only (approx-1, approx-N, and precise-N fed by KV events), by prefix plus
#    sessions (sessions-1, sessions-N with the client echoing the session token, sessionmap-N
#    without the echo), and SMG 1.13 (the Shepherd Model Gateway) by prefix (smg-1, smg-N:
#    cache_aware with the tuned thresholds) and by routing key (smg-key-1, smg-key-N: `manual`);
#    SMG's version and each row's flags are in the results' commands.txt.
# 2. RESULTS=bench/results-predicted: the multi-turn workload at compare.sh's defaults (8
#    replicas, half the fleet's cache) through warmpath `prefix` (approx-1) and `predicted_ttft`
#    (predicted-1), one router each.
# Knobs: PARTS ("sessions predicted"), SEEDS, ROUTERS, STEPS, INSERT_EVERY, COMPACT_EVERY,
# SUMMARY_TOKENS, WORKING_SET, SESSION_SYSTEMS, PREDICTED_SYSTEMS, BIN_DIR, BINARIES_FROM, and
# bench/replicas.sh's own. About 25 minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

PARTS=${PARTS:-"sessions predicted"}
ROUTERS=${ROUTERS:-4}
export ROUTERS
N=$ROUTERS
STEPS=${STEPS:-12}
INSERT_EVERY=${INSERT_EVERY:-3}
COMPACT_EVERY=${COMPACT_EVERY:-5}
SUMMARY_TOKENS=${SUMMARY_TOKENS:-256}
SESSION_SYSTEMS=${SESSION_SYSTEMS:-"approx-1 sessions-1 approx-$N sessions-$N sessionmap-$N precise-$N smg-1 smg-$N smg-key-1 smg-key-$N"}
PREDICTED_SYSTEMS=${PREDICTED_SYSTEMS:-"approx-1 predicted-1"}

for part in $PARTS; do
  case $part in
    sessions)
      RESULTS=bench/results-sessions SYSTEMS=$SESSION_SYSTEMS \
        WORKING_SET=${WORKING_SET:-1.0} WORKLOAD=agent \
        WORKLOAD_ARGS="--steps $STEPS --insert-every $INSERT_EVERY --compact-every $COMPACT_EVERY --summary-tokens $SUMMARY_TOKENS" \
        REPORT_TITLE="Sessions: an agent workload that rewrites its context, with 1 and $ROUTERS routers (issue 15)" \
        bash bench/replicas.sh
      ;;
    predicted)
      RESULTS=bench/results-predicted SYSTEMS=$PREDICTED_SYSTEMS ROUTERS=1 REPLICAS=8 \
        WORKING_SET=0.5 WORKLOAD=multi-turn WORKLOAD_ARGS=" " REQUESTS=${PREDICTED_REQUESTS:-1600} WARMUP=80 \
        REPORT_TITLE="predicted_ttft against prefix on multi-turn chat, one router, 8 replicas (issue 15)" \
        bash bench/replicas.sh
      ;;
    *) echo "bench/sessions.sh: unknown part $part" >&2; exit 1 ;;
  esac
done
