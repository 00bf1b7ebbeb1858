#!/usr/bin/env python3
"""CPU cost of the rule sample limit (``rules.max_samples``): the same queries with and without it.

    .venv/bin/python benchmarks/sample_limit.py [--rounds 7] [--repeat 20]

Evaluates four rule-like queries (a rate per job, a subquery, a set operation, a quantile over
buckets) over 64 series with 15 minutes of 1 s samples, alternating rounds without a limit and with
the default limit of 1,000,000, and prints the ratio (with / without) per round and its median. The
limit is counted at materialisation points (a node's output, a range selector's series, a subquery's
steps), so the ratio should stay within the noise of these shared machines (about ±10%).
"""

from __future__ import annotations

import argparse
import statistics
import time

from watchdog.model import Sample, metric
from watchdog.promql import EvalOptions, Query, evaluate, parse_query
from watchdog.store import Store

QUERIES = (
    "sum by (job) (rate(x[5m]))",
    "max_over_time(sum by (job) (x)[5m:5s])",
    "x > 5 and on(gpu) x < 1e9",
    "histogram_quantile(0.9, sum by (le) (rate(x[1m])))",
)
NOW_MS = 899_000


def _store() -> Store:
    store = Store(retention_ms=10**12, max_points=10**7)
    for t in range(0, NOW_MS + 1, 1000):
        store.ingest("x", [Sample(metric("x", gpu=str(i), job=str(i % 3), le=str(i % 4)), float(t))
                           for i in range(64)], t)
    return store


def _seconds(store: Store, queries: list[Query], limit: int | None, repeat: int) -> float:
    started = time.process_time()
    for _ in range(repeat):
        for query in queries:
            evaluate(query, store, NOW_MS, EvalOptions(sample_limit=limit))
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    store = _store()
    queries = [parse_query(q) for q in QUERIES]
    ratios = []
    for _ in range(args.rounds):
        without = _seconds(store, queries, None, args.repeat)
        with_limit = _seconds(store, queries, 1_000_000, args.repeat)
        ratios.append(with_limit / without)
    print("with / without the sample limit, per round:", " ".join(f"{r:.3f}" for r in ratios))
    print(f"median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
