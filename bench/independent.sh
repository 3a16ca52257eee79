#!/usr/bin/env bash
# bench/independent.sh — do our numbers agree with a tool we did not write?
#
# Exports the shared-prefix workload's prompts (`warmpath-bench export`) and sends the same
# prompts through warmpath-router (policy prefix) in front of a fresh simulator fleet, once with
# warmpath-bench and once with guidellm (PyPI, vLLM project), at the same concurrency and
# request count. guidellm's backend check (GET /health on the target) is turned off: the router
# serves health on its admin port. Writes bench/results/independent-*.json and the comparison table
# bench/results/independent.md, which the report includes.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-bench/results}
VENV=${VENV:-bench/.peers/guidellm}
GUIDELLM_VERSION=${GUIDELLM_VERSION:-0.8.1}
REQUESTS=${REQUESTS:-400}
CONCURRENCY=${CONCURRENCY:-"4 16"}
REPLICAS=${REPLICAS:-8}
KV_BLOCKS=${KV_BLOCKS:-512}
PREFILL_US=${PREFILL_US:-100}
SIM_PORT=${SIM_PORT:-18301}
FRONT_PORT=${FRONT_PORT:-18380}
ADMIN_PORT=${ADMIN_PORT:-18390}
POLICY=${POLICY:-prefix}
BIN=${BIN_DIR:-target/release}

if [ ! -x "$VENV/bin/guidellm" ]; then
  echo "installing guidellm $GUIDELLM_VERSION into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "guidellm==$GUIDELLM_VERSION"
fi
[ -n "${BIN_DIR:-}" ] || cargo build --release -j 2 -p warmpath-sim -p warmpath-router -p warmpath-bench
mkdir -p "$RESULTS"
rm -f "$RESULTS"/commands-independent.txt "$RESULTS"/independent-* "$RESULTS"/independent.md
# shellcheck source=bench/lib.sh
. bench/lib.sh
SIM_PID="" ROUTER_PID=""
fresh_fleet() {
  for p in $ROUTER_PID $SIM_PID; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  "$BIN/warmpath-sim" --listen "127.0.0.1:$SIM_PORT" --replicas "$REPLICAS" --kv-blocks "$KV_BLOCKS" \
    --prefill-us-per-token "$PREFILL_US" >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!; PIDS+=("$SIM_PID")
  for i in $(seq 0 $((REPLICAS - 1))); do wait_http "http://127.0.0.1:$((SIM_PORT + i))/health" 20; done
  {
    echo "listen: 127.0.0.1:$FRONT_PORT"
    echo "admin: 127.0.0.1:$ADMIN_PORT"
    echo "pools:"
    echo "  - name: tiny"
    echo "    models: [tiny]"
    echo "    replicas:"
    for i in $(seq 0 $((REPLICAS - 1))); do echo "      - { name: sim-$i, url: \"http://127.0.0.1:$((SIM_PORT + i))\" }"; done
    echo "scheduling:"
    echo "  policy: $POLICY"
  } > "$WORK/router.yaml"
  "$BIN/warmpath-router" --config "$WORK/router.yaml" >"$WORK/router.log" 2>&1 &
  ROUTER_PID=$!; PIDS+=("$ROUTER_PID")
  wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 20
}
FLEET=(--fleet-replicas "$REPLICAS" --fleet-kv-blocks "$KV_BLOCKS")
METRICS=()
for i in $(seq 0 $((REPLICAS - 1))); do METRICS+=(--metrics-url "http://127.0.0.1:$((SIM_PORT + i))/metrics"); done

"$BIN/warmpath-bench" export --workload shared-prefix "${FLEET[@]}" --requests "$REQUESTS" --seed 1 --out "$WORK/prompts.jsonl"

hits() { # prints "hits queries" summed over the fleet's replicas
  for i in $(seq 0 $((REPLICAS - 1))); do curl -fsS "http://127.0.0.1:$((SIM_PORT + i))/metrics"; done | python3 -c '
import sys
h = q = 0.0
for line in sys.stdin:
    if line.startswith("vllm:prefix_cache_hits_total"): h += float(line.split()[-1])
    if line.startswith("vllm:prefix_cache_queries_total"): q += float(line.split()[-1])
print(h, q)'
}

: > "$WORK/rows.txt"
for conc in $CONCURRENCY; do
  fresh_fleet
  cmd=("$BIN/warmpath-bench" run --url "http://127.0.0.1:$FRONT_PORT" --suite independent --label "warmpath-bench-c$conc"
    --workload shared-prefix "${FLEET[@]}" --seed 1 --mode closed --concurrency "$conc" --requests "$REQUESTS"
    "${METRICS[@]}" --out "$RESULTS/independent-warmpath-bench-c$conc.json")
  echo "${cmd[*]}" | sed "s#$BIN/##" >> "$RESULTS/commands-independent.txt"
  "${cmd[@]}"

  fresh_fleet
  before=$(hits)
  gcmd=("$VENV/bin/guidellm" run --backend "kind=openai_http,target=http://127.0.0.1:$FRONT_PORT,model=tiny,validate_backend=false"
    --profile "kind=concurrent,streams=$conc" --data "kind=json_file,path=$WORK/prompts.jsonl"
    --constraint "kind=max_requests,count=$REQUESTS" --output "kind=json,path=$WORK/guidellm-c$conc.json"
    --disable-console-interactive)
  echo "${gcmd[*]}" | sed "s#$WORK/##g; s#$VENV/bin/##" >> "$RESULTS/commands-independent.txt"
  "${gcmd[@]}" > "$WORK/guidellm.out" 2>&1 || { tail -40 "$WORK/guidellm.out" >&2; exit 1; }
  after=$(hits)
  echo "$conc $RESULTS/independent-warmpath-bench-c$conc.json $WORK/guidellm-c$conc.json $before $after" >> "$WORK/rows.txt"
done
echo "(prompts: warmpath-bench export --workload shared-prefix ${FLEET[*]} --requests $REQUESTS --seed 1 --out prompts.jsonl)" >> "$RESULTS/commands-independent.txt"

python3 - "$WORK/rows.txt" "$REQUESTS" "$POLICY" "$GUIDELLM_VERSION" > "$RESULTS/independent.md" <<'PY'
import json, sys
rows_file, reqs, policy, version = sys.argv[1:5]
print("## Independent check: warmpath-bench against guidellm\n")
print(f"The same {reqs} shared-prefix prompts (exported with `warmpath-bench export`), through "
      f"warmpath-router (`policy: {policy}`) in front of a fresh simulator fleet each time, measured "
      f"once by warmpath-bench and once by guidellm {version} (PyPI; the vLLM project's tool), at each "
      f"concurrency. The fleet hit rate is read from the replicas' counters around each run.\n")
print("| in flight | metric | warmpath-bench | guidellm | ratio |\n|---:|---|---:|---:|---:|")
disagree = []
ttft_gaps = []
for line in open(rows_file):
    conc, ours_path, g_path, hb, qb, ha, qa = line.split()
    ours = json.load(open(ours_path))
    m = json.load(open(g_path))["benchmarks"][0]["metrics"]
    def dist(name, key):
        d = m[name]["successful"]
        return d.get(key) if key in ("mean", "median") else d["percentiles"].get(key)
    g_hit = (float(ha) - float(hb)) / max(float(qa) - float(qb), 1.0)
    rows = [
        ("requests/s", ours["throughput"]["requests_per_s"], m["requests_per_second"]["successful"]["mean"]),
        ("output tokens/s", ours["throughput"]["output_tokens_per_s"], m["output_tokens_per_second"]["successful"]["mean"]),
        ("TTFT p50 (ms)", ours["latency_ms"]["ttft"]["p50"], dist("time_to_first_token_ms", "p50")),
        ("TTFT p90 (ms)", ours["latency_ms"]["ttft"]["p90"], dist("time_to_first_token_ms", "p90")),
        ("TTFT p99 (ms)", ours["latency_ms"]["ttft"]["p99"], dist("time_to_first_token_ms", "p99")),
        ("ITL p50 (ms)", ours["latency_ms"]["itl"]["p50"], dist("inter_token_latency_ms", "p50")),
        ("E2E p50 (ms)", ours["latency_ms"]["e2e"]["p50"], 1000 * dist("request_latency", "p50")),
        ("fleet hit rate", (ours.get("cache") or {}).get("hit_rate"), g_hit),
    ]
    for name, a, b in rows:
        ratio = f"{a / b:.2f}" if a and b else "–"
        fmt = (lambda x: f"{x:.3f}") if "hit" in name else (lambda x: f"{x:.1f}")
        print(f"| {conc} | {name} | {fmt(a) if a is not None else '–'} | {fmt(b) if b is not None else '–'} | {ratio} |")
        if a and b and abs(a / b - 1) > 0.10:
            disagree.append(f"- {conc} in flight, {name}: warmpath-bench {fmt(a)}, guidellm {fmt(b)} "
                            f"({a / b:.2f}×, a difference of {fmt(a - b)})")
        if a and b and name.startswith("TTFT"):
            ttft_gaps.append((conc, name, b - a))
print("\n### Where they disagree\n")
if disagree:
    print("Figures more than 10 % apart:\n")
    print("\n".join(disagree))
else:
    print("No figure is more than 10 % apart.")
if ttft_gaps:
    gaps = ", ".join(f"{n.split()[1]} at {c}: {g:+.1f} ms" for c, n, g in ttft_gaps)
    print(f"\nguidellm's TTFT minus warmpath-bench's, by percentile and concurrency: {gaps}. "
          "Where the gap is a few milliseconds at every percentile, a large share of a low p50 and "
          "a negligible one of a p99 hundreds of milliseconds long, it is an additive per-request "
          "offset, not a different measurement of the server: warmpath-bench starts its clock just "
          "before it writes the request and stops at the first chunk carrying text, on a Rust client "
          "whose per-request work is microseconds; guidellm's clock brackets its Python worker's "
          "own work as well (building and sending the request through httpx, parsing each streamed "
          "event, its asyncio loop shared with the other requests in flight on a core the router and "
          "the simulator also use), and that work grows with the concurrency. A gap that grows "
          "with the percentile instead would mean the tools see different servers: that is what "
          "to look for here.\n")
print("\nguidellm's ITL excludes the first token and is averaged per request; warmpath-bench's is the "
      "distribution of every gap between streamed chunks. guidellm's requests/s is over its own "
      "measurement window; ours is from first send to last completion. Both tools, the router and the "
      "eight simulated replicas share the machine's two cores: a Python client that needs more CPU per "
      "request than the Rust one slows the run it measures.\n")
PY
cat "$RESULTS/independent.md"
