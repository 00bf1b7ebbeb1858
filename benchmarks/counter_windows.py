#!/usr/bin/env python3
"""Counter functions (``rate``/``increase`` over range selectors, through the rule engine's counter
index) of this checkout against other checkouts, in alternating child processes over the same data.

    .venv/bin/python benchmarks/counter_windows.py --tree other=/path/to/checkout [--series 1000] [--rounds 6]

Each child builds the same store (``--series`` counters scraped every 5 s, a third of them moving at
each scrape, one in 2 000 resetting; 80 scrapes), then for 40 more scrapes evaluates
``rate(x_bucket[1m])`` and ``increase(x_bucket[5m])`` after each, as the rule engine does (one
``EvalCache`` per pass, one counter index kept across passes), and prints the CPU time per
series-window and a digest of every result. The checkouts run one after another, ``--rounds`` times,
order alternating; it prints each one's median and the ratios, and fails if the results differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, random, struct, sys, time
from watchdog.model import Sample, make_labels
from watchdog.promql import evaluate, parse_query
from watchdog.promql.cache import CounterIndex, EvalCache
from watchdog.store import Store
series = int(sys.argv[1])
rng = random.Random(1)
store = Store(retention_ms=900_000)
labels = [make_labels({"__name__": "x_bucket", "le": str(i % 30), "job": f"j{i // 30}"}) for i in range(series)]
values = [0.0] * series
t = 1_800_000_000_000
def scrape():
    global t
    t += 5000
    for i in range(series):
        if rng.random() < 1 / 3:
            values[i] += 1.0
        if rng.random() < 0.0005:
            values[i] = 0.0
    store.ingest("s", [Sample(lbl, v) for lbl, v in zip(labels, values)], t)
for _ in range(80):
    scrape()
queries = [parse_query("rate(x_bucket[1m])"), parse_query("increase(x_bucket[5m])")]
counters = CounterIndex()
digest = hashlib.sha256()
spent = 0.0
for _ in range(40):
    scrape()
    cache = EvalCache(None, counters)
    started = time.process_time()
    results = [evaluate(query, store, t, cache=cache) for query in queries]
    spent += time.process_time() - started
    for result in results:
        for sample in result:
            digest.update(repr(sample.labels).encode())
            digest.update(struct.pack("<d", sample.value))
print(json.dumps({"us": spent / (40 * 2 * series) * 1e6, "digest": digest.hexdigest()}))
"""


def run(tree: Path, series: int) -> dict[str, float | str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(series)], env=env, cwd=tree, check=True,
                         capture_output=True, text=True).stdout
    result: dict[str, float | str] = json.loads(out)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of another checkout (repeatable)")
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    trees = [("this", ROOT)] + [(spec.split("=", 1)[0], Path(spec.split("=", 1)[1])) for spec in args.tree]
    times: dict[str, list[float]] = {name: [] for name, _ in trees}
    digests: set[str] = set()
    for round_ in range(args.rounds):
        for name, tree in (trees if round_ % 2 == 0 else trees[::-1]):
            result = run(tree, args.series)
            times[name].append(float(result["us"]))
            digests.add(str(result["digest"]))
    if len(digests) != 1:
        print("results differ between checkouts", file=sys.stderr)
        return 1
    mine = statistics.median(times["this"])
    for name, values in times.items():
        print(f"{name:8s} {statistics.median(values):6.3f} us per series-window (median of {len(values)}), "
              f"{statistics.median(values) / mine:.2f}x this")
    return 0


if __name__ == "__main__":
    sys.exit(main())
