#!/usr/bin/env python3
"""The counter index's windows (``rate``/``increase`` over a range selector), this checkout's against
another's, interleaved in one process over one store.

    .venv/bin/python benchmarks/counter_windows.py --tree /path/to/other/checkout [--series 1000] [--rounds 60]

``--series`` counters (a third of them move at each scrape, one in 2 000 resets) are scraped every 5 s
into one store; after 80 scrapes, each round appends one more scrape and reads every series' 1 m and 5 m
windows through each checkout's ``CounterIndex`` (the other checkout's ``watchdog/promql/cache.py``
loaded beside this one's, order alternating by round). Both must give the same windows; it prints
microseconds per series-window and the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from watchdog.model import Sample, make_labels  # noqa: E402
from watchdog.promql import cache as this_cache  # noqa: E402
from watchdog.store import Store  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="the other checkout")
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("other_cache", Path(args.tree) / "watchdog/promql/cache.py")
    assert spec is not None and spec.loader is not None
    other_cache = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other_cache)
    rng = random.Random(1)
    store = Store(retention_ms=900_000)
    labels = [make_labels({"__name__": "x_bucket", "le": str(i % 30), "job": f"j{i // 30}"})
              for i in range(args.series)]
    values = [0.0] * args.series
    t = 1_800_000_000_000

    def scrape() -> None:
        nonlocal t
        t += 5000
        for i in range(args.series):
            if rng.random() < 1 / 3:
                values[i] += 1.0
            if rng.random() < 0.0005:
                values[i] = 0.0
        store.ingest("s", [Sample(lbl, v) for lbl, v in zip(labels, values, strict=True)], t)

    for _ in range(80):
        scrape()
    series = [s for s in store.kept_series() if s.labels in set(labels)]
    indexes = {"other": other_cache.CounterIndex(), "this": this_cache.CounterIndex()}
    spent = dict.fromkeys(indexes, 0.0)
    for round_ in range(args.rounds):
        scrape()
        results = {}
        for name in sorted(indexes, reverse=bool(round_ % 2)):
            window = indexes[name].window
            started = time.perf_counter()
            results[name] = [window(s, t - range_ms + 1, t, True) for range_ms in (60_000, 300_000) for s in series]
            spent[name] += time.perf_counter() - started
        assert results["other"] == results["this"]
    reads = args.rounds * 2 * len(series)
    for name, seconds in spent.items():
        print(f"{name:6s} {seconds / reads * 1e6:6.3f} us per series-window")
    print(f"other/this {spent['other'] / spent['this']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
