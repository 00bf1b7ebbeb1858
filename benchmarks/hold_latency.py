#!/usr/bin/env python3
"""Fault -> firing time of held GPU alerts, checkouts side by side: what group intervals cost in latency.

    .venv/bin/python benchmarks/hold_latency.py [--tree main=/path/to/old/checkout --tree this=.]
        [--offsets 0.5,1.5,2.5,3.5,4.5]

Each checkout runs in its own child process (its own ``.venv`` when it has one): the real agent over
its own ``rules/gpu.yaml``, the fake NVML (h100-sxm-8, every GPU busy), simulated 1 s ticks whose
times jitter by 1-30 ms as wall-clock ticks do. At 100 s plus each offset (the offsets cover the phase
of a 5 s group interval) NVLink 4 of GPU 1 goes down (GpuNvlinkDown, ``for: 30s``), GPU 6 runs hot
(GpuThermalMarginLow, ``for: 30s``) and GPU 3 counts two uncorrectable ECC errors (GpuEccUncorrectable,
no hold); the table is the seconds from the fault to the first tick where each alert fires.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
FAULT_AT_S = 100.0
TICKS = 160
FAULTS = [
    {"gpu": 1, "fault": "nvlink_down", "params": {"link": 4}},
    {"gpu": 6, "fault": "thermal_throttle"},
    {"gpu": 3, "fault": "ecc_uncorrectable", "params": {"count": 2}},
]
ALERTS = ("GpuNvlinkDown", "GpuThermalMarginLow", "GpuEccUncorrectable")


def child(tree: Path, offset: float) -> dict[str, float]:
    """Seconds from the fault to the first firing tick, per alert, in ``tree``'s code."""
    sys.path.insert(0, str(tree))
    import yaml

    from watchdog.agent import Agent
    from watchdog.collectors.base import CollectorContext
    from watchdog.config import load_settings
    from watchdog.fakes.pynvml import FakeNvml

    logging.disable(logging.WARNING)
    workdir = Path(tempfile.mkdtemp())
    config = workdir / "config.yaml"
    config.write_text(yaml.safe_dump({
        "state_dir": str(workdir / "state"), "rules": {"paths": [str(tree / "rules" / "gpu.yaml")]},
        "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}}}))
    start = 1_800_000_000.0
    now = [start]
    fake = FakeNvml.from_profile("h100-sxm-8")
    for gpu in range(len(fake.gpus)):
        fake.set_load(gpu, 70)
    agent = Agent(load_settings(config), config_path=config, clock=lambda: now[0],
                  context=CollectorContext(nvml=fake))
    fault_at = FAULT_AT_S + offset
    fake.schedule([{"at_seconds": fault_at, **fault} for fault in FAULTS])
    jitter = random.Random(int(offset * 1000))
    fired: dict[str, float] = {}
    for tick in range(TICKS):
        now[0] = start + tick + jitter.uniform(0.001, 0.030)
        fake.set_time(now[0] - start)
        for alert in agent.tick():
            if alert.state.value == "firing" and alert.name not in fired:
                fired[alert.name] = now[0] - start - fault_at
    return fired


def main() -> int:
    """Run every checkout at every offset and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a checkout (repeatable)")
    parser.add_argument("--offsets", default="0.5,1.5,2.5,3.5,4.5", help="fault times past 100 s, seconds")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), float(args.child[1]))))
        return 0
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree or ["this=."])]
    offsets = [float(x) for x in args.offsets.split(",")]
    print(f"{'tree':<8} {'offset s':>8} " + " ".join(f"{name:>20}" for name in ALERTS))
    worst: dict[str, dict[str, float]] = {}
    for name, tree in trees:
        python = tree / ".venv" / "bin" / "python"
        for offset in offsets:
            out = subprocess.run([str(python if python.exists() else sys.executable), str(HERE), "--child",
                                  str(tree), str(offset)], check=True, capture_output=True, text=True).stdout
            fired = json.loads(out.strip().splitlines()[-1])
            for alert in ALERTS:
                worst.setdefault(name, {})[alert] = max(worst.get(name, {}).get(alert, 0.0),
                                                        fired.get(alert, float("inf")))
            print(f"{name:<8} {offset:>8.1f} " + " ".join(f"{fired.get(a, float('inf')):>20.2f}" for a in ALERTS))
    for name, per_alert in worst.items():
        print(f"{name:<8} {'worst':>8} " + " ".join(f"{per_alert[a]:>20.2f}" for a in ALERTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
