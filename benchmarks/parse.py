#!/usr/bin/env python3
"""Parse cost of a realistic vLLM /metrics payload: watchdog.exposition vs prometheus_client.parser.

Guards the parse target: the engine collector's path at least 10x faster than prometheus_client.

    .venv/bin/python benchmarks/parse.py [--payload FILE] [--repeat N]

Prints, side by side in one run, the median time per parse of:
- ``prometheus_client.parser.text_string_to_metric_families`` (fully consumed),
- ``watchdog.exposition.parse_exposition`` cold (series cache cleared before every parse),
- ``watchdog.exposition.parse_exposition`` warm (the steady state of a scrape every tick),
- the engine collector's whole per-tick path after the HTTP read (parse, drop ``_created``, target
  labels, derived config series),
and the ratios against prometheus_client. Timings are CPU-bound and single-threaded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from watchdog.collectors.engines import ScrapeCaches, parse_payload  # noqa: E402
from watchdog.engines.config_series import config_series  # noqa: E402
from watchdog.exposition import clear_cache, parse_exposition  # noqa: E402

DEFAULT_PAYLOAD = ROOT / "tests" / "fixtures" / "engines" / "vllm-v1-full.txt"
TARGETS = {"job": "vllm", "instance": "127.0.0.1:8000"}


def median_seconds(fn: Callable[[], object], repeat: int, setup: Callable[[], None] | None = None) -> float:
    """Median wall time of ``fn`` over ``repeat`` runs (after two warm-up runs)."""
    times: list[float] = []
    for i in range(repeat + 2):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        if i >= 2:
            times.append(elapsed)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payload", type=Path, default=DEFAULT_PAYLOAD)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    text = args.payload.read_text(encoding="utf-8")
    samples = sum(1 for _ in parse_exposition(text))
    lines = text.count("\n")

    def client() -> int:
        return sum(len(family.samples) for family in text_string_to_metric_families(text))

    def ours() -> int:
        return sum(1 for _ in parse_exposition(text))

    caches = ScrapeCaches()

    def collector_path() -> int:
        parsed = parse_payload(text, TARGETS, caches)
        return len(parsed) + len(config_series(parsed, TARGETS))

    rows = [
        ("prometheus_client.parser", median_seconds(client, args.repeat)),
        ("exposition cold (no cache)", median_seconds(ours, args.repeat, setup=clear_cache)),
        ("exposition warm (cached)", median_seconds(ours, args.repeat)),
        ("collector path, warm", median_seconds(collector_path, args.repeat)),
    ]
    baseline = rows[0][1]
    print(f"payload: {args.payload.name}: {len(text)} bytes, {lines} lines, {samples} samples; "
          f"median of {args.repeat} runs")
    print(f"{'parser':32} {'ms/parse':>10} {'us/sample':>10} {'speed-up':>9}")
    for name, seconds in rows:
        print(f"{name:32} {seconds * 1e3:10.3f} {seconds / samples * 1e6:10.2f} {baseline / seconds:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
