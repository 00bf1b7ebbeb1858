"""A recorded NVML scenario: what the NVML collector stores, tick by tick, on two fake H100s.

    .venv/bin/python tests/support/nvml_golden.py [--write]

``run_scenario()`` drives a fake NVML (h100-sxm-8 cut to two GPUs with two NVLinks each) through 20
simulated 1 s ticks of the agent's collection path (``CollectorRunner.run_once`` then ``ingest_results``
into a ``Store``, the collector's counters paced by the simulated clock): loads that move every tick,
compute processes that come and go, NVLink counters and a link going down, a call failing with an
unexpected error for three ticks, a clock slowdown, GPU 1 falling off the bus at t=9 and coming back at
t=14, a reset-required window on GPU 0 and a pending row remap. It returns every ``watchdog_gpu_*``
series the store holds at the end, with its value at each tick (``None``: no point at that tick;
``"stale"``: the staleness marker). ``tests/fixtures/nvml/store_golden.json`` is this output as recorded
from the collector before issue 16's fifth pass (9a6741a); ``tests/collectors/test_nvml_golden.py``
requires the current collector to store exactly the same. ``--write`` rewrites the fixture from the code
at hand (only when a change of behaviour is intended: say so in the commit).

Standalone (imports only ``watchdog``), so that it can run against another checkout through
``PYTHONPATH``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "nvml" / "store_golden.json"
TICKS = 20
START_MS = 1_800_000_000_000
Cell = float | str | None


def _fake() -> Any:
    from watchdog.fakes.pynvml import FakeNvml, load_profile

    profile = load_profile("h100-sxm-8")
    profile["gpus"] = profile["gpus"][:2]
    profile["gpu"] = {**profile["gpu"], "nvlinks": 2}
    fake = FakeNvml(profile)
    fake.schedule([
        {"at_seconds": 6, "gpu": 0, "fault": "hw_slowdown", "duration_seconds": 3},
        {"at_seconds": 9, "gpu": 1, "fault": "gpu_lost", "duration_seconds": 5},
        {"at_seconds": 12, "gpu": 0, "fault": "ecc_uncorrectable", "params": {"count": 2}},
        {"at_seconds": 16, "gpu": 0, "fault": "reset_required", "duration_seconds": 2},
        {"at_seconds": 17, "gpu": 1, "fault": "row_remap_pending", "duration_seconds": 10},
    ])
    return fake


def _events(fake: Any, t: int) -> None:
    """What changes on the node at tick ``t`` besides the scheduled faults."""
    from watchdog.fakes.pynvml import NVML_ERROR_UNKNOWN

    for gpu in range(2):
        fake.set_load(gpu, 50.0 + 40.0 * math.sin(t / 3.0 + gpu))
    if t == 3:
        fake.set_processes(0, [(1234, 2_000_000_000), (1300, 1_000_000_000)])
    if t == 8:
        fake.set_processes(0, [(1234, 3_000_000_000)])
    if t == 4:
        fake.fail("nvmlDeviceGetPowerUsage", NVML_ERROR_UNKNOWN, gpu=0)
    if t == 7:
        fake.clear_failures()
    if t == 5:
        fake.set_nvlink(0, 1, replay=2, crc_flit=7)
    if t == 11:
        fake.set_nvlink(0, 0, up=False)
    if t == 13:
        fake.set_nvlink(0, 1, recovery=1)


def run_scenario() -> dict[str, list[Cell]]:
    """Series text -> its value at each of the :data:`TICKS` ticks (see the module docstring)."""
    from watchdog.collectors.base import CollectorRunner, ingest_results
    from watchdog.collectors.nvml import NvmlCollector
    from watchdog.config.settings import NvmlSettings, section_settings
    from watchdog.model import format_labels, is_stale, metric_name
    from watchdog.store import Store

    fake = _fake()
    clock = [0.0]
    # a generous deadline: a GPU read reported stalled on a loaded machine would change what is stored
    settings = section_settings(NvmlSettings, "collectors.nvml", {"timeout_seconds": 30})
    collector = NvmlCollector(fake, settings, counters_clock=lambda: clock[0])
    runner = CollectorRunner([collector])
    store = Store(retention_ms=3_600_000)
    try:
        for t in range(1, TICKS + 1):
            clock[0] = float(t)
            fake.set_time(float(t))
            _events(fake, t)
            ingest_results(store, runner.run_once(now=float(t)), START_MS + t * 1000)
    finally:
        runner.close()
        collector.close()
    out: dict[str, list[Cell]] = {}
    for series in store.all_series():
        if not metric_name(series.labels).startswith("watchdog_gpu_"):
            continue
        cells: list[Cell] = [None] * TICKS
        for t_ms, value in zip(series.timestamps, series.values, strict=True):
            cells[(t_ms - START_MS) // 1000 - 1] = "stale" if is_stale(value) else value
        out[format_labels(series.labels)] = cells
    return dict(sorted(out.items()))


def dumps(scenario: dict[str, list[Cell]]) -> str:
    """The fixture's text: one series a line, so that a difference shows as a line."""
    lines = [f"  {json.dumps(key)}: {json.dumps(cells)}" for key, cells in scenario.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(argv: list[str]) -> int:
    scenario = run_scenario()
    if "--write" in argv:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(dumps(scenario))
        print(f"wrote {len(scenario)} series to {FIXTURE}")
    else:
        sys.stdout.write(dumps(scenario))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
