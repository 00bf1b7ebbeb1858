#!/usr/bin/env python3
"""The exporter's page: CPU per scrape at 8 GPUs x 8 engines with retention filling, checkouts side by side.

Guards the exporter's share of the CPU target: one page render per Prometheus scrape (15 s).

    .venv/bin/python benchmarks/exporter.py [--gpus 8] [--engines 8] [--fill 320] [--scrapes 20]
                                            [--rounds 3] [--tree NAME=PATH]...

One child process per checkout and round (default: this tree), the checkouts alternated round by round
so that each sees the same machine load. Each child builds the agent as ``simnode.simulated_agent`` does
(fake NVML, ``--engines`` endpoints of the simulated node serving the full vLLM V1 payload, the whole
default pack, default settings, simulated 1 s ticks) from its own checkout, runs ``--fill`` ticks, then
``--scrapes`` times: 15 ticks (Prometheus' scrape interval) and one ``render_metrics()`` of an exporter
built by ``exporter_for_store`` (not yet started), timed with ``time.process_time``; then gzip of the
last page at the server's level (and at levels 1 and 5); then the exporter is started, the process's CPU
measured over ``--idle`` seconds of serving nothing (no ticks: the agent's workers are idle too), and ``stop()`` timed.
Printed: each checkout's median render CPU, the page size and series, the gzip CPU, each other
checkout's render time as a multiple of the first's, the idle CPU and the time ``stop()`` took.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import gzip, json, sys, tempfile, time
from pathlib import Path
tree = sys.argv[1]
sys.path.insert(0, tree)
sys.path.insert(0, tree + "/benchmarks")
from simnode import simulated_agent, start_engines
from watchdog.exporter import server
from watchdog.exporter.server import exporter_for_store
GZIP_LEVEL = getattr(server, "GZIP_LEVEL", 5)

gpus, engines, fill, scrapes, idle = (int(a) for a in sys.argv[2:7])
proc, ports = start_engines(engines)
try:
    with tempfile.TemporaryDirectory() as tmp:
        agent, now = simulated_agent(gpus, ports, 900, Path(tmp))
        exporter = exporter_for_store(agent.store, "127.0.0.1:0", ready=lambda: True, clock=lambda: now[0])
        for _ in range(fill):
            now[0] += 1.0
            agent.tick()
        exporter.render_metrics()  # the first page builds the caches
        cpu = []
        for _ in range(scrapes):
            for _ in range(15):
                now[0] += 1.0
                agent.tick()
            t0 = time.process_time()
            page = exporter.render_metrics()
            cpu.append(time.process_time() - t0)
        gz, gz_bytes = {}, {}
        for level in (1, 5):
            t0 = time.process_time()
            for _ in range(5):
                gz_bytes[level] = len(gzip.compress(page, compresslevel=level))
            gz[level] = (time.process_time() - t0) / 5
        series = sum(1 for line in page.splitlines() if line and not line.startswith(b"#"))
        exporter.start()
        time.sleep(0.25)  # stop() then comes between two of a 0.5 s poll's wake-ups
        t0 = time.process_time()
        time.sleep(idle)
        idle_cpu = (time.process_time() - t0) / idle
        t0 = time.monotonic()
        exporter.stop()
        stop_s = time.monotonic() - t0
        print(json.dumps({"render": sorted(cpu)[len(cpu) // 2], "gzip": gz[GZIP_LEVEL], "gzip1": gz[1], "gzip5": gz[5],
                          "gz1_bytes": gz_bytes[1], "gz5_bytes": gz_bytes[5], "bytes": len(page), "series": series,
                          "idle": idle_cpu, "stop": stop_s}))
        agent.close(timeout_seconds=1)
finally:
    proc.kill()
    proc.wait()
"""


def main() -> int:
    """Run every checkout's children, alternating, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--fill", type=int, default=320)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=int, default=5, help="seconds of idle serving measured")
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a checkout (repeatable)")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree or ["this=."])]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, tree in trees:
            out = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(args.gpus), str(args.engines),
                                  str(args.fill), str(args.scrapes), str(args.idle)],
                                 check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
    medians = {name: statistics.median(run["render"] for run in values) for name, values in runs.items()}
    first = trees[0][0]
    print(f"exporter page at {args.gpus}x{args.engines} after {args.fill} ticks, one render every 15 ticks "
          f"({args.scrapes} scrapes), median of {args.rounds} rounds")
    for name, median in medians.items():
        last = runs[name][-1]
        ratio = f"  {name}/{first} {median / medians[first]:.2f}x" if name != first else ""
        gz = statistics.median(run["gzip"] for run in runs[name]) * 1000
        idle = statistics.median(run["idle"] for run in runs[name]) * 1000
        stop = statistics.median(run["stop"] for run in runs[name]) * 1000
        gz1 = statistics.median(run["gzip1"] for run in runs[name]) * 1000
        gz5 = statistics.median(run["gzip5"] for run in runs[name]) * 1000
        print(f"  {name:<10} gzip of its page: level 1 {gz1:.2f} ms ({last['gz1_bytes'] / 1000:.0f} KB), "
              f"level 5 {gz5:.2f} ms ({last['gz5_bytes'] / 1000:.0f} KB)")
        print(f"  {name:<10} {median * 1000:6.2f} ms per render ({last['bytes'] / 1000:.0f} KB, "
              f"{last['series']:.0f} series; gzip {gz:.2f} ms){ratio}; idle process {idle:.3f} ms/s "
              f"serving, stop() {stop:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
