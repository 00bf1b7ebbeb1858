#!/usr/bin/env python3
"""CPU of the engine scrapes and of the engine process collector, checkouts side by side.

Guards the engine scrape's and the process collector's share of the CPU target.

    .venv/bin/python benchmarks/collector_cost.py [--engines 8] [--gpus 8] [--rounds 9] [--calls 10]
        [--tree NAME=PATH ...]

One simulated node (``simnode.py``: vLLM V1 endpoints whose values move, on loopback, in their own
process) serves every checkout. Each checkout runs in its own child process with its own code: one
engine collector per endpoint (``kind: vllm``, default settings otherwise) and the engine process
collector over real ``psutil`` and ``/proc`` (every engine's root is the simulator's process, found by
its port) with the harness's fake NVML (``simnode.fake_nvml``) (``--gpus`` busy H100s) and a state database of its own.
The children take turns: in each round each child, in turn, scrapes every endpoint ``--calls`` times
and then collects the process trees ``--calls`` times, timing each call with its thread's CPU clock
(``time.thread_time``: what the collector's worker thread pays, the kernel's share of the sockets
included). Printed: the median over rounds of the CPU per endpoint scrape and per process collection,
per checkout, and each checkout's ratio to the first. After a warm-up round, the parsers' caches and the
process collector's roots and trees are those of the steady state; the process collector's tree is
walked again every 30 s, so its figure includes a walk only when a round spans one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from simnode import ROOT, env_for, print_medians, start_child, start_simulator, stop, take_turns  # noqa: E402

CHILD = r"""
import json, sys, time
from watchdog.collectors.base import CollectorContext
from watchdog.collectors.engines import engine_collectors
from watchdog.collectors.processes import process_collectors
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from simnode import fake_nvml

ports, gpus, state_dir = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
doc = {"state_dir": state_dir,
       "engines": [{"job": f"vllm-{i}", "url": f"http://127.0.0.1:{p}/metrics", "kind": "vllm"}
                   for i, p in enumerate(ports)]}
settings = settings_from_config(load_config_text(json.dumps(doc), "<bench>"))
context = CollectorContext(nvml=fake_nvml(gpus))
engines = engine_collectors(settings, context)
(processes,) = process_collectors(settings, context)
print("ready", __import__("watchdog").__file__, flush=True)
for line in sys.stdin:
    calls = int(line)
    scrape = []
    for _ in range(calls):
        for collector in engines:
            start = time.thread_time()
            collector.collect()
            scrape.append(time.thread_time() - start)
            assert not collector.last_error, collector.last_error  # a failed scrape is not measured
    process = []
    for _ in range(calls):
        start = time.thread_time()
        processes.collect()
        process.append(time.thread_time() - start)
    print(json.dumps({"scrape": sum(scrape) / len(scrape), "process": sum(process) / len(process)}),
          flush=True)
"""


def main() -> int:
    """Run the children in turns and print the medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=10, help="scrapes of each endpoint and process "
                                                             "collections per child and round")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a checkout to measure (repeatable; default: this one as 'this')")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, _, path in (t.partition("=") for t in args.tree)]
    trees = trees or [("this", ROOT)]
    sim, _, ports = start_simulator(args.gpus, args.engines)
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, tree in trees:
                env = env_for(tree)
                env["PYTHONPATH"] += f":{tree / 'benchmarks'}"
                state = Path(tmp) / name
                state.mkdir()
                children[name] = start_child(name, tree, CHILD, [json.dumps(ports), str(args.gpus), str(state)],
                                             env, state)
            figures = take_turns(children, args.rounds, args.calls, ("scrape", "process"))
    finally:
        stop(children, sim)
    print(f"{args.gpus} GPUs x {args.engines} engines, {args.rounds} rounds of {args.calls} calls, "
          "median ms of CPU per call (min-max over rounds)")
    print_medians(figures, (("scrape", "one endpoint scrape"), ("process", "one process collection")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
