#!/usr/bin/env bash
# Data-path overhead, side by side in one go: one static nginx backend (127.0.0.1:9001) and,
# in front of it, nginx (one worker, :9002), warmpath-router with one thread (:9003) and with
# default threads (:9004), and SMG 1.13, the Shepherd Model Gateway (cache_aware, :9005; the
# older sglang-router 0.3.2 on :9007 too with WITH_SGLANG=1). wrk sends the same
# 2 KB /v1/completions POST to the backend directly and through each proxy.
#
#   bench/datapath.sh                    # DURATION=10s CONNS=32 ROUNDS=3 by default
#   DURATION=5s ROUNDS=1 bench/datapath.sh   # quicker
#   BASELINE_BIN=/tmp/old/warmpath-router bench/datapath.sh   # also an older router, side by side
#   ROUTER_BIN=/tmp/new/warmpath-router bench/datapath.sh     # measure a router built elsewhere
#
# The targets take turns, ROUNDS times, and each figure is the median over rounds: on a small
# shared machine a single run mostly measures who got the CPU.
#
# Prints a table (req/s, p50, p99, p99 added over direct, CPU per request, ratios) and writes
# bench/results/datapath.json (with SMG's version and flags). Peers: nginx and wrk from apt
# (nginx-light, wrk); SMG from SMG_DIR (default /work/peers/smg, installed there with
# ../shared/peers/smg.sh when absent; SKIP_SMG=1 leaves it out). The static backend answers
# /v1/models with its completion body, so SMG registers it as model `unknown`: SMG runs with
# `--model-alias tiny=unknown` to accept the bench's model name (a name lookup, no extra hop).
# sglang-router (WITH_SGLANG=1) from SGLANG_DIR (default /work/peers/sglang, then
# bench/.peers/sglang, installed there with ../shared/peers/sglang-router.sh when absent).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
ROUNDS=${ROUNDS:-3}
LAT_DURATION=${LAT_DURATION:-5s}
PEERS=${PEERS:-/work/shared/peers}
SKIP_SMG=${SKIP_SMG:-${SKIP_SGLANG:-0}}
WITH_SGLANG=${WITH_SGLANG:-0}
SMG_DIR=${SMG_DIR:-/work/peers/smg}
SMG_FLAGS=(--model-alias tiny=unknown)
OUT=${OUT:-$root/bench/results/datapath.json}

for tool in nginx wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "datapath: $tool is required (apt-get install -y nginx-light wrk curl python3)" >&2; exit 2; }
done

if [ "$SKIP_SMG" != 1 ] && ! [ -x "$SMG_DIR/venv/bin/smg" ]; then
  echo "datapath: installing SMG into $SMG_DIR" >&2
  bash "$PEERS/smg.sh" install "$SMG_DIR"
fi
if [ "$WITH_SGLANG" = 1 ]; then
  if [ -z "${SGLANG_DIR:-}" ]; then
    if [ -x /work/peers/sglang/venv/bin/python ]; then SGLANG_DIR=/work/peers/sglang
    else SGLANG_DIR=$root/bench/.peers/sglang; fi
  fi
  if ! "$SGLANG_DIR/venv/bin/python" -c 'import sglang_router' 2>/dev/null; then
    echo "datapath: installing sglang-router into $SGLANG_DIR" >&2
    bash "$PEERS/sglang-router.sh" install "$SGLANG_DIR"
  fi
fi

for port in 9001 9002 9003 9004 9005 9006 9007 9093 9094 9096 10005 10007; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "datapath: port $port is busy; stop whatever listens there first" >&2; exit 2
  fi
done

# The router is measured as it ships: the workspace's release profile (fat LTO, one codegen
# unit; the Dockerfile and `make demo` build the same). PROFILE=debug measures a debug build.
PROFILE=${PROFILE:-release}
if [ -n "${ROUTER_BIN:-}" ]; then
  router_bin=$ROUTER_BIN   # a router built elsewhere: measured as it is, nothing built
else
# The same package set as compare.sh builds, so that feature unification matches and the router
# it already built is reused instead of rebuilt.
if [ "$PROFILE" = release ]; then
  cargo build -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench --release >&2
else
  cargo build -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench --profile "$PROFILE" >&2
fi
router_bin=${CARGO_TARGET_DIR:-$root/target}/$PROFILE/warmpath-router
fi

work=$(mktemp -d)
pids=()
cleanup() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  nginx -c "$PEERS/nginx-proxy.conf" -s quit 2>/dev/null || true
  nginx -c "$PEERS/nginx-backend.conf" -s quit 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup INT TERM EXIT

wait_post() { # URL: wait up to 30 s for a POST to succeed
  for _ in $(seq 300); do
    curl -fs -o /dev/null -H 'content-type: application/json' \
      -d '{"model":"tiny","prompt":"hi","max_tokens":1}' "$1/v1/completions" && return 0
    sleep 0.1
  done
  echo "datapath: $1 did not come up" >&2; exit 1
}

nginx -c "$PEERS/nginx-backend.conf"
nginx -c "$PEERS/nginx-proxy.conf"

sed -e 's/127.0.0.1:9003/127.0.0.1:9004/; s/127.0.0.1:9093/127.0.0.1:9094/' \
  bench/datapath/router.yaml > "$work/router-default.yaml"
WARMPATH_LOG=warn "$router_bin" --config bench/datapath/router.yaml --threads 1 2>"$work/wp1.log" &
pids+=($!); wp1=$!
WARMPATH_LOG=warn "$router_bin" --config "$work/router-default.yaml" 2>"$work/wpn.log" &
pids+=($!); wpn=$!
base=
if [ -n "${BASELINE_BIN:-}" ]; then
  sed -e 's/127.0.0.1:9003/127.0.0.1:9006/; s/127.0.0.1:9093/127.0.0.1:9096/' \
    bench/datapath/router.yaml > "$work/router-baseline.yaml"
  WARMPATH_LOG=warn "$BASELINE_BIN" --config "$work/router-baseline.yaml" --threads 1 2>"$work/base.log" &
  pids+=($!); base=$!
fi
smg=
if [ "$SKIP_SMG" != 1 ]; then
  bash "$PEERS/smg.sh" serve "$SMG_DIR" 9005 cache_aware http://127.0.0.1:9001 -- "${SMG_FLAGS[@]}" \
    >"$work/smg.log" 2>&1 &
  pids+=($!); smg=$!
fi
sgl=
if [ "$WITH_SGLANG" = 1 ]; then
  bash "$PEERS/sglang-router.sh" serve "$SGLANG_DIR" 9007 cache_aware http://127.0.0.1:9001 \
    >"$work/sglang.log" 2>&1 &
  pids+=($!); sgl=$!
fi

wait_post http://127.0.0.1:9001
wait_post http://127.0.0.1:9002
wait_post http://127.0.0.1:9003
wait_post http://127.0.0.1:9004
[ -n "$smg" ] && wait_post http://127.0.0.1:9005
[ -n "$sgl" ] && wait_post http://127.0.0.1:9007
[ -n "$base" ] && wait_post http://127.0.0.1:9006

master_children() { pgrep -P "$(cat "$1")" | tr '\n' ' '; }
backend_pids=$(master_children /tmp/nginx.pid)
nginx_pids=$(master_children /tmp/nginx2.pid)
tree() { # PID...: the pids and all their descendants
  local p
  # shellcheck disable=SC2046
  for p in "$@"; do echo "$p"; tree $(pgrep -P "$p" || true); done
}
ticks() { # PID...: utime+stime of these processes, in clock ticks
  local t=0 p
  for p in $(tree "$@"); do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}

results="$work/results.txt"
: >"$results"
run() { # NAME PORT CONNS DURATION PIDS...
  local name=$1 port=$2 conns=$3 dur=$4; shift 4
  wrk -t1 -c"$conns" -d1s -s bench/datapath/post.lua "http://127.0.0.1:$port" >/dev/null # warm-up
  local before after line
  before=$(ticks "$@")
  line=$(wrk -t1 -c"$conns" -d"$dur" -s bench/datapath/post.lua "http://127.0.0.1:$port" | grep '^RESULT')
  after=$(ticks "$@")
  echo "$name conns=$conns $line cpu_ticks=$((after - before))" | tee -a "$results" >&2
}

targets=("direct 9001 $backend_pids" "nginx 9002 $nginx_pids" "warmpath-1thread 9003 $wp1"
         "warmpath-default 9004 $wpn")
[ -n "$smg" ] && targets+=("smg-cache_aware 9005 $smg")
[ -n "$sgl" ] && targets+=("sglang-cache_aware 9007 $sgl")
[ -n "$base" ] && targets+=("baseline-1thread 9006 $base")
for _ in $(seq "$ROUNDS"); do
  for t in "${targets[@]}"; do
    set -- $t; name=$1 port=$2; shift 2
    run "$name" "$port" "$CONNS" "$DURATION" "$@"
  done
done
# One connection: the per-request latency a proxy adds when nothing queues.
for t in "${targets[@]}"; do
  set -- $t; name=$1 port=$2; shift 2
  run "$name" "$port" 1 "$LAT_DURATION" "$@"
done

# Large prompts: CPU per request through the whole data path (read, parse, hash, route, proxy)
# at about 100k tokens (400 KB of prompt), the case where llm-d's ext-proc spends 0.5-1 core
# per request/s.
large="$work/large.txt"
for t in "${targets[@]}"; do
  set -- $t; name=$1 port=$2; shift 2
  case $name in direct|warmpath-1thread|nginx|baseline-1thread) ;; *) continue ;; esac
  before=$(ticks "$@")
  line=$(PROMPT_BYTES=400000 wrk -t1 -c4 -d"$LAT_DURATION" -s bench/datapath/post.lua "http://127.0.0.1:$port" | grep '^RESULT')
  after=$(ticks "$@")
  echo "$name conns=4 $line cpu_ticks=$((after - before))" | tee -a "$large" >&2
done

mkdir -p "$(dirname "$OUT")"
SMG_VERSION=$([ -n "$smg" ] && "$SMG_DIR/venv/bin/smg" --version | awk '{print $NF}' || true) \
SMG_ROW="smg launch --policy cache_aware --backend vllm --log-level warn ${SMG_FLAGS[*]}" \
PROFILE="$PROFILE" python3 - "$results" "$OUT" "$(getconf CLK_TCK)" "$CONNS" "$DURATION" "$large" <<'PY'
import json, sys, datetime, os
path, out, clk, conns, duration, large_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
import statistics
runs = {}
for line in open(path):
    parts = line.split()
    name, c = parts[0], int(parts[1].split("=")[1])
    kv = dict(p.split("=") for p in parts[3:])
    r = {k: float(v) for k, v in kv.items()}
    r["cpu_us_per_req"] = r["cpu_ticks"] / clk * 1e6 / max(r["requests"], 1)
    runs.setdefault(c, {}).setdefault(name, []).append(r)
# Median of every figure over the rounds.
rows = {c: {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in byname.items()}
        for c, byname in runs.items()}
rounds = max(len(rs) for rs in runs[conns].values())
load, single = rows[conns], rows.get(1, {})
d, d1 = load["direct"], single.get("direct")
summary = {}
print(f"\n{conns} connections, {duration} x {rounds} rounds (medians), 2 KB prompt, one static nginx backend (wrk -t1)")
print(f"{'target':<20}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'p99 added':>11}{'CPU us/req':>12}"
      f"{'vs nginx':>10}{'vs smg':>11}{'c=1 p50 +us':>13}{'c=1 p99 +us':>13}")
for name, r in load.items():
    s = {"rps": r["rps"], "p50_ms": r["p50_us"] / 1e3, "p99_ms": r["p99_us"] / 1e3,
         "p99_added_ms": (r["p99_us"] - d["p99_us"]) / 1e3, "cpu_us_per_req": r["cpu_us_per_req"],
         "errors": r["errors"] + r["non2xx"]}
    if "nginx" in load: s["throughput_vs_nginx"] = r["rps"] / load["nginx"]["rps"]
    if "smg-cache_aware" in load: s["throughput_vs_smg"] = r["rps"] / load["smg-cache_aware"]["rps"]
    if "sglang-cache_aware" in load: s["throughput_vs_sglang"] = r["rps"] / load["sglang-cache_aware"]["rps"]
    if name in single and d1:
        s["c1_p50_added_us"] = single[name]["p50_us"] - d1["p50_us"]
        s["c1_p99_added_us"] = single[name]["p99_us"] - d1["p99_us"]
        s["c1_rps"] = single[name]["rps"]
    summary[name] = s
    f = lambda k, fmt: (fmt % s[k]) if k in s else "-"
    print(f"{name:<20}{s['rps']:>10.0f}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}{s['p99_added_ms']:>11.2f}"
          f"{s['cpu_us_per_req']:>12.1f}{f('throughput_vs_nginx','%.2fx'):>10}{f('throughput_vs_smg','%.2fx'):>11}"
          f"{f('c1_p50_added_us','%.0f'):>13}{f('c1_p99_added_us','%.0f'):>13}")
large = {}
for line in open(large_path):
    parts = line.split()
    kv = {k: float(v) for k, v in (p.split("=") for p in parts[3:])}
    kv["cpu_us_per_req"] = kv["cpu_ticks"] / clk * 1e6 / max(kv["requests"], 1)
    large[parts[0]] = kv
if large:
    print("\n400 KB prompts (~100k tokens), 4 connections: CPU per request of each target")
    for name, r in large.items():
        print(f"{name:<20}{r['rps']:>10.0f} req/s{r['cpu_us_per_req']:>10.0f} us CPU/req  p50 {r['p50_us']/1e3:.2f} ms  errors {r['errors'] + r['non2xx']:.0f}")
doc = {"benchmark": "datapath", "date": datetime.datetime.utcnow().isoformat() + "Z",
       "router_profile": os.environ.get("PROFILE", "release"),
       "peers": {"smg": {"version": os.environ.get("SMG_VERSION") or None, "flags": os.environ.get("SMG_ROW")}},
       "host": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
       "wrk": {"threads": 1, "connections": conns, "duration": duration, "prompt_bytes": 2048},
       "rounds": rounds, "results": summary,
       "large_prompt_400kb": {n: {"rps": r["rps"], "cpu_us_per_req": r["cpu_us_per_req"], "p50_ms": r["p50_us"] / 1e3}
                              for n, r in large.items()}, "runs": {str(k): v for k, v in runs.items()}}
json.dump(doc, open(out, "w"), indent=2)
print(f"\nwrote {out}")
PY
