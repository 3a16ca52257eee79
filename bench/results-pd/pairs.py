#!/usr/bin/env python3
"""Paired per-seed ratios of this folder's P/D runs (bench/README.md's rule: system / other on the
same seed, their median with a bootstrap 95 % interval over the seeds, 2,000 resamples; a win or a
loss only when the interval clears 1). `python3 bench/results-pd/pairs.py` prints the table that
notes.md quotes; lower TTFT and ITL are better."""
import collections
import glob
import json
import os
import random
import statistics as st

HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = [("unified", "smg-unified"), ("pd-sglang", "smg-pd"),
         ("pd-nixl-1024", "unified"), ("pd-nixl-256", "unified")]
runs = collections.defaultdict(dict)
for f in glob.glob(os.path.join(HERE, "pd-*.json")):
    j = json.load(open(f))
    label, seed = j["config"]["label"], j["config"]["seed"]
    workload = os.path.basename(f)[len("pd-" + label) + 1:].rsplit("-s", 1)[0]
    lat = j["latency_ms"]
    runs[(workload, label)][seed] = (lat["ttft"]["p90"], lat["itl"]["p99"])


def interval(ratios):
    rng = random.Random(7)
    meds = sorted(st.median(rng.choice(ratios) for _ in ratios) for _ in range(2000))
    return st.median(ratios), meds[50], meds[1949]


print("| workload | system ÷ other | seeds | TTFT p90 | ITL p99 |")
print("|---|---|---:|---|---|")
for workload in ["long-prompts", "medium-prompts", "mixed"]:
    for a, b in PAIRS:
        A, B = runs[(workload, a)], runs[(workload, b)]
        seeds = sorted(set(A) & set(B))
        cells = []
        for k in (0, 1):
            m, lo, hi = interval([A[s][k] / B[s][k] for s in seeds])
            verdict = "win" if hi < 1 else ("**loss**" if lo > 1 else "tie")
            cells.append(f"{m:.2f} [{lo:.2f}, {hi:.2f}] {verdict}")
        print(f"| {workload} | {a} ÷ {b} | {len(seeds)} | {cells[0]} | {cells[1]} |")
