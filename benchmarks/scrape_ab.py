#!/usr/bin/env python3
"""The two halves of an engine scrape, checkout against checkout: the HTTP exchange and the parse.

    .venv/bin/python benchmarks/scrape_ab.py --tree s23=/path/to/checkout --tree this=. [--rounds 21]
        [--calls 20]

One simulated node (``simnode.py``: a vLLM V1 endpoint whose values move) serves every checkout; the
parent first keeps four successive pages of it. Each checkout runs in its own child process with its
own code. In each round each child, in turn, times ``--calls`` calls of its ``engines.fetch`` against
the endpoint and ``--calls`` calls of its ``engines.parse_payload`` over the four pages in turn (with
the caches an endpoint keeps: the steady state of a scrape), each with its thread's CPU clock. Unlike
``collector_cost.py`` (whole scrapes), this separates what the socket exchange costs from what the
parse and the ``Sample`` objects cost. Printed: the median over rounds per call, per checkout, and
each checkout's ratio to the first. Round 0 warms up and is not counted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from simnode import ROOT, env_for, print_medians, start_child, start_simulator, stop, take_turns  # noqa: E402

CHILD = r"""
import json, sys, time
from watchdog.collectors.engines import ScrapeCaches, fetch, parse_payload

url, pages = sys.argv[1], [open(path, encoding="utf-8").read() for path in sys.argv[2:]]
targets = {"job": "vllm-0", "instance": url.split("/")[2]}
caches = ScrapeCaches()
print("ready", __import__("watchdog").__file__, flush=True)
for line in sys.stdin:
    calls = int(line)
    start = time.thread_time()
    for _ in range(calls):
        fetch(url, 5.0, 10_000_000)
    fetched = time.thread_time() - start
    start = time.thread_time()
    for i in range(calls):
        parse_payload(pages[i % len(pages)], targets, caches)
    parsed = time.thread_time() - start
    print(json.dumps({"fetch": fetched / calls, "parse": parsed / calls}), flush=True)
"""


def main() -> int:
    """Run the children in turns and print the medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=20, help="fetches and parses per child and round")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a checkout to measure (repeatable; default: this one as 'this')")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in args.tree)]
    trees = trees or [("this", ROOT)]
    sim, _, ports = start_simulator(1, 1)
    url = f"http://127.0.0.1:{ports[0]}/metrics"
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pages = []
            for i in range(4):
                path = Path(tmp) / f"page{i}.txt"
                with urllib.request.urlopen(url, timeout=10) as response:
                    path.write_bytes(response.read())
                pages.append(str(path))
            for name, tree in trees:
                children[name] = start_child(name, tree, CHILD, [url, *pages], env_for(tree), tmp)
            figures = take_turns(children, args.rounds, args.calls, ("fetch", "parse"))
    finally:
        stop(children, sim)
    print(f"{args.rounds} rounds of {args.calls} calls, median ms of CPU per call (min-max over rounds)")
    print_medians(figures, (("fetch", "HTTP exchange (fetch)"), ("parse", "parse_payload")), width=22)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
