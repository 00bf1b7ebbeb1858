#!/usr/bin/env python3
"""``deriv``/``predict_linear``'s regression, this checkout's against another's, interleaved in one
process.

    .venv/bin/python benchmarks/regression.py --tree /path/to/other/checkout [--points 60] [--series 8]

``--series`` series over one window of ``--points`` timestamps 5 s apart (as a rule's output over 8
engines: the series one rule writes share their timestamps), regressed 300 times in blocks alternating
between the two checkouts' ``watchdog/promql/functions.py`` (the other one loaded beside this one).
Prints microseconds per regression and the ratio, and fails if any result differs in a bit.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from watchdog.promql import functions as this_functions  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="the other checkout")
    parser.add_argument("--points", type=int, default=60)
    parser.add_argument("--series", type=int, default=8)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("other_functions", Path(args.tree) / "watchdog/promql/functions.py")
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    sys.modules["other_functions"] = other  # dataclasses look their module up
    spec.loader.exec_module(other)
    rng = random.Random(3)
    ts = [1_800_000_000_000 + 5000 * i for i in range(args.points)]
    series = [[rng.uniform(0, 50) for _ in ts] for _ in range(args.series)]
    spent = {"other": 0.0, "this": 0.0}
    modules = {"other": other, "this": this_functions}
    for block in range(10):
        results = {}
        for name in sorted(modules, reverse=bool(block % 2)):
            regress = modules[name]._linear_regression
            started = time.perf_counter()
            results[name] = [regress(ts, vs, ts[0]) for _ in range(30) for vs in series]
            spent[name] += time.perf_counter() - started
        if [[struct.pack("<d", v) for v in r] for r in results["other"]] != [
                [struct.pack("<d", v) for v in r] for r in results["this"]]:
            print("results differ", file=sys.stderr)
            return 1
    count = 10 * 30 * args.series
    for name, seconds in spent.items():
        print(f"{name:6s} {seconds / count * 1e6:6.1f} us per {args.points}-point regression")
    print(f"other/this {spent['other'] / spent['this']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
