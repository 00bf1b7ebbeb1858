"""``python -m tests.promql.fuzz``: a differential fuzz run against promtool (see ``scripts/promql-fuzz``)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from tests.promql.fuzz.differ import Totals, Workspace, fuzz_alerts, fuzz_expressions
from tests.promql.fuzz.generate import Generator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="promql-fuzz", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--expressions", type=int, default=2000, help="expressions to compare")
    parser.add_argument("--alerts", type=int, default=200, help="alerting rules to compare")
    parser.add_argument("--per-batch", type=int, default=200, help="expressions per promtool run")
    parser.add_argument("--weird", type=float, default=0.05,
                        help="probability of edge-case literals (durations, numbers, regexes)")
    args = parser.parse_args(argv)
    gen = Generator(args.seed, args.weird)
    ws = Workspace()
    totals = Totals()
    started = time.monotonic()

    def log(text: str) -> None:
        print(text, flush=True)

    batches = max(1, args.expressions // args.per_batch) if args.expressions else 0
    alert_batch = 25
    alert_batches = -(-args.alerts // alert_batch) if args.alerts else 0
    # Interleave expressions and alert rules in rounds, with a progress line after each round, so that
    # a long run stopped early still reports both kinds.
    rounds = max(1, min(batches, 25))
    for index in range(rounds):
        share = batches * (index + 1) // rounds - batches * index // rounds
        alert_share = alert_batches * (index + 1) // rounds - alert_batches * index // rounds
        fuzz_expressions(gen, ws, share, args.per_batch, totals, log)
        fuzz_alerts(gen, ws, alert_share, alert_batch, totals, log)
        print(f"-- progress: {totals.expressions} expressions, {totals.alerts} alert rules, "
              f"{len(totals.found)} disagreements, {time.monotonic() - started:.0f}s", flush=True)
    classes = Counter(d.signature() for d in totals.found)
    print(f"\n== {totals.expressions} expressions, {totals.alerts} alert rules, "
          f"{len(totals.found)} disagreements in {len(classes)} shapes, {totals.unstable} unstable under "
          f"promtool itself, {time.monotonic() - started:.0f}s", flush=True)
    for shape, count in classes.most_common():
        print(f"{count:5d}  {shape}")
    return 1 if totals.found else 0


if __name__ == "__main__":
    sys.exit(main())
