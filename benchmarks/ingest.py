#!/usr/bin/env python3
"""Store ingest: CPU per stored sample of a steady collection, for checkouts side by side.

    .venv/bin/python benchmarks/ingest.py [--series 1000] [--ticks 300] [--rounds 5]
                                          [--tree NAME=PATH]...

One child process per checkout and round (default: this tree), the checkouts alternated round by round
so that each sees the same machine load. Each child builds a ``Store`` with the agent's default
retention, then ingests ``--ticks`` collections of one source holding ``--series`` series at 1 s steps
(NVML-like label sets, values that move every tick and fit float32, as most GPU and engine values do),
and prints the CPU microseconds per sample, building the ``Sample`` objects included. Printed: each
checkout's median over the rounds and the ratio of the first checkout to the others.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from watchdog.model import Sample, metric
from watchdog.store import Store

series, ticks = int(sys.argv[2]), int(sys.argv[3])
store = Store()
labels = [metric("watchdog_gpu_field_value", gpu=str(i % 8), uuid=f"GPU-{i % 8}", field=str(i)) for i in range(series)]
base = [float(i % 97) for i in range(series)]
t_ms = 1_800_000_000_000
for warm in range(20):
    t_ms += 1000
    store.ingest("collector:nvml", [Sample(l, v) for l, v in zip(labels, base)], t_ms)
started = time.process_time()
for tick in range(ticks):
    t_ms += 1000
    store.ingest("collector:nvml", [Sample(l, v + tick % 5) for l, v in zip(labels, base)], t_ms)
print((time.process_time() - started) / ticks / series * 1e6)
"""


def main() -> int:
    """Run every checkout's children, alternating, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a checkout (repeatable)")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree or ["this=."])]
    figures: dict[str, list[float]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, tree in trees:
            out = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(args.series), str(args.ticks)],
                                 check=True, capture_output=True, text=True).stdout
            figures[name].append(float(out))
    medians = {name: statistics.median(values) for name, values in figures.items()}
    first = trees[0][0]
    print(f"store ingest, {args.series} series x {args.ticks} collections, median of {args.rounds} rounds")
    for name, median in medians.items():
        ratio = f"  {first}/{name} {medians[first] / median:.2f}x" if name != first else ""
        print(f"  {name:<10} {median:6.2f} us per sample{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
