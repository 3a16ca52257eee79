"""Per-seed paired ratios of the main replicas run against SMG on its defaults (notes.md).

python3 bench/results-replicas/smg-defaults/pairs.py bench/results-replicas bench/results-replicas/smg-defaults BIN_DIR/warmpath-bench
"""
import json, subprocess, statistics, sys
main, supp, bench = sys.argv[1], sys.argv[2], sys.argv[3]
seeds = range(31, 41)
def load(d, name, s):
    r = json.load(open(f"{d}/{name}-s{s}.json"))
    return {"hit": r["cache"]["hit_rate"], "rps": r["throughput"]["requests_per_s"], "p90": r["latency_ms"]["ttft"]["p90"]}
def interval(vals):
    return json.loads(subprocess.check_output([bench, "interval"] + [str(v) for v in vals]))
print("| system | hit rate | req/s | TTFT p90 ms |\n|---|---|---|---|")
for name, d in [("smg-1 (defaults)", supp), ("smg-4 (defaults)", supp)]:
    n = name.split()[0]
    rows = [load(d, n, s) for s in seeds]
    print(f"| {name} | {statistics.median(r['hit'] for r in rows):.3f} | {statistics.median(r['rps'] for r in rows):.1f} | {statistics.median(r['p90'] for r in rows):.1f} |")
print()
print("| ratio, per seed: median [95 % interval] | hit rate | req/s | TTFT p90 |\n|---|---|---|---|")
for a, b in [("precise-1", "smg-1"), ("approx-1", "smg-1"), ("precise-4", "smg-4"), ("peered-4", "smg-4"), ("peered-approx-4", "smg-4")]:
    cells = []
    for k in ("hit", "rps", "p90"):
        v = [load(main, a, s)[k] / load(supp, b, s)[k] for s in seeds]
        j = interval(v)
        cells.append(f"{j['median']:.3f} [{j['interval'][0]:.3f}, {j['interval'][1]:.3f}]")
    print(f"| {a} / {b} (defaults) | " + " | ".join(cells) + " |")
