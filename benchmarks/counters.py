#!/usr/bin/env python3
"""CPU and stored points of the NVML collection with the counters stored when read, or at every tick.

    .venv/bin/python benchmarks/counters.py [--gpus 8] [--fill 300] [--rounds 4] [--block 25]

Two pipelines side by side in one process, each its own fake NVML (h100-sxm-8 cut to ``--gpus``, busy,
NVLink on), NVML collector (default settings: counters read every 5 s of tick time), collector runner
and store (retention ``--fill`` seconds), on simulated 1 s ticks: the agent's ``collect`` stage and the
ingest that follows it (``CollectorRunner.run_once`` then ``ingest_results``), nothing else.

- ``every-tick``: the counters, as last read, stored again at every tick in the collector's own collection
  (how the agent stored them before they became a part of their own; emulated here by re-emitting the
  collector's last counters, without the cost the old collector also paid to build those samples anew);
- ``when-read``: the default: the counters' part stored only at the ticks that read it.

Both fill ``--fill`` ticks (retention full), then blocks of ``--block`` ticks alternate between them for
``--rounds`` rounds. Prints CPU milliseconds per tick (``time.process_time``: the GPU reads run on worker
threads), samples ingested and points appended per tick, and the points held at the end, with ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tick import fake_nvml  # noqa: E402

from tests.support.counters import StoredEveryTick  # noqa: E402
from watchdog.collectors.base import CollectorRunner, ingest_results  # noqa: E402
from watchdog.collectors.nvml import NvmlCollector  # noqa: E402
from watchdog.fakes.pynvml import FakeNvml  # noqa: E402
from watchdog.store import Store  # noqa: E402

START = 1_800_000_000.0
MODES = ("every-tick", "when-read")


class Pipeline:
    """One fake node's NVML collection into its own store, on its own simulated clock."""

    def __init__(self, gpus: int, retention_s: int, every_tick: bool) -> None:
        self.now = START
        self.nvml: FakeNvml = fake_nvml(gpus)
        self.collector = NvmlCollector(self.nvml, counters_clock=lambda: self.now)
        self.store = Store(retention_ms=retention_s * 1000, max_points=retention_s + 60)
        self.runner = CollectorRunner([StoredEveryTick(self.collector) if every_tick else self.collector])
        self.samples = 0

    def tick(self) -> None:
        self.now += 1.0
        self.nvml.set_time(self.now - START)
        results = self.runner.run_once(now=self.now)
        for result in ingest_results(self.store, results, int(self.now * 1000)):
            self.samples += len(result.samples) + sum(len(part) for part in result.parts.values())
        if int(self.now) % 60 == 0:
            self.store.gc(int(self.now * 1000))

    def points(self) -> int:
        return sum(len(series) for series in self.store.all_series())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--fill", type=int, default=300, help="retention_seconds (ticks to fill)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--block", type=int, default=25, help="ticks per measured block (a multiple of 5)")
    args = parser.parse_args()
    pipes = {mode: Pipeline(args.gpus, args.fill, mode == "every-tick") for mode in MODES}
    for _ in range(args.fill):
        for pipe in pipes.values():
            pipe.tick()
    cpu = dict.fromkeys(MODES, 0.0)
    samples = dict.fromkeys(MODES, 0)
    for _ in range(args.rounds):
        for mode, pipe in pipes.items():
            before, started = pipe.samples, time.process_time()
            for _ in range(args.block):
                pipe.tick()
            cpu[mode] += time.process_time() - started
            samples[mode] += pipe.samples - before
    ticks = args.rounds * args.block
    print(f"{args.gpus} GPUs, retention {args.fill} s full; {args.rounds} rounds of {args.block}-tick blocks per mode")
    print(f"{'mode':<11} {'CPU ms/tick':>11} {'samples/tick':>12} {'points held':>11}")
    for mode, pipe in pipes.items():
        print(f"{mode:<11} {cpu[mode] / ticks * 1000:>11.2f} {samples[mode] / ticks:>12.1f} {pipe.points():>11}")
    before, after = pipes["every-tick"], pipes["when-read"]
    print(f"every-tick / when-read: CPU {cpu['every-tick'] / cpu['when-read']:.2f}x, samples "
          f"{samples['every-tick'] / samples['when-read']:.2f}x, points {before.points() / after.points():.2f}x")
    for pipe in pipes.values():
        pipe.runner.close()
        pipe.collector.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
