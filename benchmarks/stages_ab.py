#!/usr/bin/env python3
"""The tick's stages, checkout against checkout: ``steady.py --stages`` of each tree in turn, medians.

    .venv/bin/python benchmarks/stages_ab.py --tree before=/path/to/checkout --tree after=. \\
        [--size 1x1] [--runs 5] [--retention 300] [--rounds 10]

Runs ``benchmarks/steady.py --stages`` of each ``--tree`` (its own code, this interpreter) as a child
process, the trees alternating, ``--runs`` times each; every run fills ``--retention`` seconds of ticks
and then times ``--rounds`` × 20 ticks in the default (issue-16) mode. Prints, per tree, the median over
the runs of the agent's CPU per tick, the tick thread's, each stage's (the tick thread's CPU inside it,
``Agent.stats.stage_cpu_seconds``) and "outside stages" (the tick thread less its stages: storing the
collections, ``_note_results``, the loop's own glue), and the ratio of the first tree to each other.
Alternating runs spreads the machine's load over the trees alike; read the ratios.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

NESTED = {"self_samples"}  # timed inside another stage (self_metrics): not added to the stages' sum
LINE = re.compile(r"^\s+(\S+)\s+([\d.]+) ms/tick")
HEAD = re.compile(r"([\d.]+) ms CPU per tick: tick thread ([\d.]+)")


def run(tree: Path, size: str, retention: int, rounds: int) -> dict[str, float]:
    """One ``steady.py --stages`` run of ``tree``: ms per tick by row."""
    out = subprocess.run([sys.executable, str(tree / "benchmarks" / "steady.py"), "--sizes", size,
                          "--retention", str(retention), "--rounds", str(rounds), "--stages"],
                         cwd=tree, capture_output=True, text=True, check=True, timeout=1800).stdout
    rows: dict[str, float] = {}
    for line in out.splitlines():
        head = HEAD.search(line)
        if head:
            rows["agent (all threads)"], rows["tick thread"] = float(head[1]), float(head[2])
        elif match := LINE.match(line):
            rows[match[1]] = float(match[2])
    staged = sum(value for name, value in rows.items()
                 if name not in NESTED and name not in ("agent (all threads)", "tick thread"))
    rows["outside stages"] = rows["tick thread"] - staged
    return rows


def main() -> int:
    """Alternate the trees' runs; print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH (two or more)")
    parser.add_argument("--size", default="1x1", help="GPUsxengines")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--retention", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10, help="× 20 ticks timed per run")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree)]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for i in range(args.runs):
        for name, path in trees if i % 2 == 0 else reversed(trees):
            runs[name].append(run(path, args.size, args.retention, args.rounds))
    rows = sorted({row for result in runs.values() for one in result for row in one},
                  key=lambda row: -statistics.median(one.get(row, 0.0) for one in runs[trees[0][0]]))
    names = [name for name, _ in trees]
    print(f"{args.size}, {args.runs} runs per tree, medians, ms of CPU per tick")
    print(f"{'':<22}" + "".join(f"{name:>12}" for name in names)
          + "".join(f"{names[0] + '/' + name:>16}" for name in names[1:]))
    for row in rows:
        medians = [statistics.median(one.get(row, 0.0) for one in runs[name]) for name in names]
        ratios = [f"{medians[0] / m:.2f}x" if m else "-" for m in medians[1:]]
        print(f"{row:<22}" + "".join(f"{m:12.3f}" for m in medians) + "".join(f"{r:>16}" for r in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
