#!/usr/bin/env python3
"""The exposition parser of two or more checkouts in one process, warm, in alternating blocks.

    .venv/bin/python benchmarks/parse_ab.py --tree old=/path/to/checkout --tree this=. [--rounds 30]

Loads each checkout's ``watchdog/exposition.py`` by its path (it imports nothing of the agent but
``watchdog.model``, which is this process's), requires every one to yield the same samples for the
payload, then times ``parse_exposition(..., drop_created=True, cache=...)`` over four versions of the
payload whose values differ (as successive scrapes do), each checkout with its own warm cache, blocks of
``--calls`` parses alternating for ``--rounds`` rounds. Prints the median and the minimum CPU time per
parse (``time.thread_time``) and each checkout's ratio to the first: in one process the machine's load
falls on every checkout alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_PAYLOAD = ROOT / "tests" / "fixtures" / "engines" / "vllm-v1-full.txt"


def load(tree: Path, name: str) -> ModuleType:
    """``tree``'s exposition module, under a name of its own."""
    spec = importlib.util.spec_from_file_location(name, tree / "watchdog" / "exposition.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    """Time the checkouts' parsers in turns and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--payload", type=Path, default=DEFAULT_PAYLOAD)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    text = args.payload.read_text(encoding="utf-8")
    pages = [text.replace(" 0.0\n", f" {step}.5\n") for step in range(4)]
    modules = {name: load(Path(path).resolve(), f"exposition_{i}")
               for i, (name, _, path) in enumerate(t.partition("=") for t in args.tree)}
    expected = None
    for name, module in modules.items():
        got = [list(module.parse_exposition(page, drop_created=True, cache={})) for page in pages]
        if expected is not None and got != expected:
            raise SystemExit(f"{name} parses the payload differently")
        expected = got
    caches: dict[str, dict[str, object]] = {name: {} for name in modules}
    times: dict[str, list[float]] = {name: [] for name in modules}
    for round_no in range(args.rounds + 1):
        for name, module in modules.items():
            cache = caches[name]
            start = time.thread_time()
            for call in range(args.calls):
                for _ in module.parse_exposition(pages[call % 4], drop_created=True, cache=cache):
                    pass
            if round_no:  # round 0 warms the caches up
                times[name].append((time.thread_time() - start) / args.calls)
    first = next(iter(modules))
    base = statistics.median(times[first])
    print(f"{args.payload.name}: warm parse, {args.rounds} rounds of {args.calls}, ms of CPU per parse")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<10} median {median * 1e3:.3f}  min {min(values) * 1e3:.3f}   {base / median:.2f}x vs {first}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
