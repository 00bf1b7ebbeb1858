#!/usr/bin/env python3
"""Range and histogram functions of this checkout against another's, interleaved in one process.

    .venv/bin/python benchmarks/functions_ab.py --tree /path/to/other/checkout [--points 60] [--series 8]

Both checkouts' ``watchdog/promql/functions.py`` are loaded side by side and timed in blocks that
alternate between them:

- ``deriv``/``predict_linear``'s regression: ``--series`` series over one window of ``--points``
  timestamps 5 s apart (a rule's output over 8 engines: the series one rule writes share their
  timestamps), 300 regressions each;
- ``histogram_quantile``'s bucket preparation: ``--series`` histograms of vLLM's 20 TTFT buckets, the
  same label sets with new counts at each evaluation, as a rule sees them (through the checkout's
  per-node layout where it has one, else ``histogram_buckets``).

At the daemon's cyclic-collector thresholds. Prints microseconds per call and the ratios, and fails if
any result differs in a bit.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from watchdog.infra.heap import quiet_cyclic_gc  # noqa: E402
from watchdog.model import make_labels  # noqa: E402
from watchdog.promql import functions as this_functions  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="the other checkout")
    parser.add_argument("--points", type=int, default=60)
    parser.add_argument("--series", type=int, default=8)
    args = parser.parse_args()
    quiet_cyclic_gc()  # the daemon's cyclic-collector thresholds
    spec = importlib.util.spec_from_file_location("other_functions", Path(args.tree) / "watchdog/promql/functions.py")
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    sys.modules["other_functions"] = other  # dataclasses look their module up
    spec.loader.exec_module(other)
    rng = random.Random(3)
    ts = [1_800_000_000_000 + 5000 * i for i in range(args.points)]
    series = [[rng.uniform(0, 50) for _ in ts] for _ in range(args.series)]
    modules = {"other": other, "this": this_functions}
    regress = {name: module._linear_regression for name, module in modules.items()}
    spent = _interleaved(regress, lambda fn: [fn(ts, vs, ts[0]) for vs in series])
    _report(f"{args.points}-point regression", spent, 10 * 30 * args.series)
    les = ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
           "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"]
    keys = [make_labels({"job": f"vllm-{e}", "instance": f"127.0.0.1:{9000 + e}", "le": le})
            for e in range(args.series) for le in les]
    vectors = [[(labels, float(rng.randrange(1000))) for labels in keys] for _ in range(30)]
    buckets = {name: (module.BucketLayout().buckets if hasattr(module, "BucketLayout") else module.histogram_buckets)
               for name, module in modules.items()}
    spent = _interleaved(buckets, lambda fn: [fn(vector) for vector in vectors])
    _report(f"bucket preparation of {args.series} histograms", spent, 10 * 30 * 30)
    return 0


def _bits(result: Any) -> Any:
    """``result`` with every float replaced by its bytes (NaN compares equal to itself)."""
    if isinstance(result, float):
        return struct.pack("<d", result)
    if isinstance(result, (list, tuple)):
        return [_bits(item) for item in result]
    return result


def _interleaved(fns: dict[str, Callable[[Any], Any]], work: Callable[[Callable[..., Any]], Any]) -> dict[str, float]:
    """Seconds each function spent on 10 blocks of 30 ``work(fn)`` calls, the order alternating by block;
    raises if two functions' results differ in a bit."""
    spent = dict.fromkeys(fns, 0.0)
    for block in range(10):
        results = {}
        for name in sorted(fns, reverse=bool(block % 2)):
            started = time.perf_counter()
            for _ in range(30):
                result = work(fns[name])
            spent[name] += time.perf_counter() - started
            results[name] = result  # the last one only: holding all would time the garbage collector
        first, *rest = [_bits(result) for result in results.values()]
        if any(other != first for other in rest):
            raise SystemExit("results differ")
    return spent


def _report(what: str, spent: dict[str, float], calls: int) -> None:
    for name, seconds in spent.items():
        print(f"{name:6s} {seconds / calls * 1e6:7.1f} us per {what}")
    print(f"other/this {spent['other'] / spent['this']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
