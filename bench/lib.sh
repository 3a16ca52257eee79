# shellcheck shell=bash
# bench/lib.sh — what the benchmark scripts share (sourced, not run): a scratch folder, the
# processes they start (stopped when the script exits, however it exits), and a wait for an
# HTTP endpoint to come up.

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# Warns about listening ports inside the kernel's ephemeral range: any outgoing connection (the
# load generator's, a gateway's to its engines) may hold one as its local port for a moment, and a
# front started then cannot bind it (three of 150 starts failed so with ports 381xx).
warn_ephemeral_ports() { # port...
  local lo hi p
  read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
  for p in "$@"; do
    if [ "$p" -ge "$lo" ] && [ "$p" -le "$hi" ]; then
      echo "warning: port $p is in the ephemeral range $lo-$hi; a start may fail to bind it (pick ports below $lo)" >&2
    fi
  done
}

# Waits until nothing listens on the local TCP PORTs (a front just stopped may hold its port for a
# moment; the next one would fail to bind it).
wait_ports_free() { # seconds port...
  local deadline=$((SECONDS + $1)) p; shift
  for p in "$@"; do
    while ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; do
      if [ $SECONDS -ge $deadline ]; then echo "port $p is still in use" >&2; return 1; fi
      sleep 0.2
    done
  done
}

wait_http() { # URL seconds
  local url=$1 deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$url" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then echo "timed out waiting for $url" >&2; return 1; fi
    sleep 0.2
  done
}

# SMG, the Shepherd Model Gateway (PyPI `smg`, 1.13.0: the successor of SGLang's `sglang-router`),
# the peer gateway every script measures against. Rows are named smg-POLICY:
#   smg-cache-aware         cache_aware on its defaults (radix trees over request text; balance
#                           abs 64 / rel 1.5, cache threshold 0.3, worker overload protection and
#                           warm-up of thin workers on, as shipped)
#   smg-cache-aware-tuned   cache_aware with SMG_TUNED_ARGS (balance thresholds sized for the
#                           fleet by bench/tune-smg.sh on tuning seeds only)
#   smg-prefix-hash, smg-round-robin, smg-power-of-two, smg-least-load, smg-random
# installed and served by ../shared/peers/smg.sh (installed into SMG_DIR when missing). The older
# sglang-router 0.3.2 stays available as sglang-* rows, only when SYSTEMS names them.
SMG_DIR=${SMG_DIR:-/work/peers/smg}
PEERS=${PEERS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/peers}
SMG_TUNED_ARGS=${SMG_TUNED_ARGS:-"--balance-abs-threshold 4 --balance-rel-threshold 1.25"}

# Installs SMG from PyPI through the shared script when it is not there yet; false if that fails.
smg_ready() {
  [ -x "$SMG_DIR/venv/bin/smg" ] && return 0
  [ -f "$PEERS/smg.sh" ] || { echo "!!!!! no $PEERS/smg.sh !!!!!" >&2; return 1; }
  echo "installing SMG into $SMG_DIR (bash $PEERS/smg.sh install $SMG_DIR)" >&2
  bash "$PEERS/smg.sh" install "$SMG_DIR" >&2 && [ -x "$SMG_DIR/venv/bin/smg" ]
}
smg_version() { "$SMG_DIR/venv/bin/smg" --version 2>/dev/null | awk '{print $NF}' || echo absent; }

# The policy and extra flags of an smg-* row: "POLICY [FLAGS...]" (word-split by the caller).
smg_row() { # label
  local label=$1
  case $label in
    smg-cache-aware-tuned) echo "cache_aware $SMG_TUNED_ARGS" ;;
    smg-*) local p=${label#smg-}; echo "${p//-/_}" ;;
    *) echo "smg_row: $label is not an smg-* row" >&2; return 1 ;;
  esac
}

# What an smg-* row runs, as one line for machine.txt (the flags ../shared/peers/smg.sh adds
# itself included; listen and worker addresses left out).
smg_row_text() { # label [extra flags...]
  local label=$1; shift
  local row; row=$(smg_row "$label")
  # shellcheck disable=SC2086
  set -- $row "$@"
  local policy=$1; shift
  echo "$label: smg $(smg_version): smg launch --policy $policy --backend vllm --log-level warn${*:+ $*}"
}

# Starts an smg-* row on PORT in front of URLs (its log in LOG); prints nothing, sets SMG_PID.
# Extra flags after `--` are appended to the row's own.
smg_start() { # label port log url... [-- flags...]
  local label=$1 port=$2 log=$3; shift 3
  local urls=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do urls+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  local row; row=$(smg_row "$label")
  # shellcheck disable=SC2086
  set -- $row -- "$@"
  local policy=$1; shift
  local flags=(); while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
  bash "$PEERS/smg.sh" serve "$SMG_DIR" "$port" "$policy" "${urls[@]}" -- "${flags[@]}" "$@" >"$log" 2>&1 &
  SMG_PID=$!; PIDS+=("$SMG_PID")
}

# True when the tree's code differs from HEAD. Results (bench/results*/, committed for the
# record) are not the code under test, as in every result's provenance: a run split into parts
# goes on from the same commit, and a run beside earlier results is not called dirty.
code_uncommitted() {
  ! git diff --quiet HEAD -- . ':(exclude,glob)bench/results*/**' 2>/dev/null
}

# HEAD's short hash (LEN digits, default 7), then SUFFIX when the code has uncommitted changes.
commit_said() { # suffix [len]
  echo "$(git rev-parse --short="${2:-7}" HEAD 2>/dev/null || echo unknown)$(code_uncommitted && echo "$1")"
}

# The binaries a one-commit script runs: BIN_DIR's when it names prebuilt ones, otherwise a
# release build of the tree, which must be committed (results are stamped with the commit; a
# dirty tree is refused unless ALLOW_DIRTY=1). Exports BIN_DIR.
committed_binaries() { # script-name
  if [ -z "${ALLOW_DIRTY:-}" ] && code_uncommitted; then
    echo "$1: the tree has uncommitted changes; commit them (or ALLOW_DIRTY=1)" >&2
    exit 2
  fi
  if [ -z "${BIN_DIR:-}" ]; then
    cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench -p warmpath-extproc-gateway
    export BIN_DIR=target/release
  fi
}
