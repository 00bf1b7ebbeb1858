"""NVML counters in the store: stored when read (every ``counters_interval_seconds``), never stale between
reads, gone at once with their GPU, exported at every scrape, and the GPU rules over them alert exactly as
when the last read was stored again at every tick (how the agent stored them before)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tests.support.agents import make_agent
from tests.support.counters import StoredEveryTick
from watchdog.agent import Agent, build_runner
from watchdog.collectors.base import CollectorRunner, ingest_results
from watchdog.collectors.nvml import COUNTERS_PART, NvmlCollector
from watchdog.exporter.api import QueryAPI
from watchdog.exporter.collector import StoreCollector
from watchdog.fakes.pynvml import FakeNvml, load_profile
from watchdog.model import Labels, is_stale
from watchdog.store import Store

ROOT = Path(__file__).resolve().parents[2]
START = 1_800_000_000.0
COUNTER = {"__name__": "watchdog_gpu_nvlink_errors_total", "gpu": "1", "link": "3", "type": "replay"}
FAST = {"__name__": "watchdog_gpu_temperature_celsius", "gpu": "1"}


def only(values: Iterable[tuple[Labels, float]], labels: dict[str, str]) -> list[float]:
    """The values of the series whose labels include ``labels``."""
    return [value for have, value in values if labels.items() <= dict(have).items()]


def two_gpus() -> FakeNvml:
    """Two H100s with their 18 NVLinks each (a whole node's rules, a quarter of its cost)."""
    profile = load_profile("h100-sxm-8")
    profile["gpus"] = profile["gpus"][:2]
    return FakeNvml(profile)


def gpu_agent(tmp_path: Path, nvml: FakeNvml, now: list[float]) -> Agent:
    """An agent over the shipped GPU rules and ``nvml``, whose simulated time follows the agent's clock."""
    agent = make_agent(tmp_path, (ROOT / "rules" / "gpu.yaml").read_text(), lambda: now[0])
    agent.collectors = [NvmlCollector(nvml, counters_clock=lambda: now[0]) if c.name == "nvml" else c
                        for c in agent.collectors]
    agent.runner = build_runner(agent.settings, agent.collectors, background=False)
    agent.before_tick.append(lambda t: nvml.set_time(t - START))
    return agent


def query(api: QueryAPI, expr: str) -> list[str]:
    """The values ``/api/v1/query`` answers for ``expr`` now."""
    response = api.handle("GET", "/api/v1/query", urlencode({"query": expr}))
    assert response.code == 200, response.body
    return [sample["value"][1] for sample in json.loads(response.body)["data"]["result"]]


def test_counters_are_stored_when_read_never_stale_between_and_exported_at_every_scrape(tmp_path: Path) -> None:
    nvml = two_gpus()
    now = [START]
    agent = gpu_agent(tmp_path, nvml, now)
    exporter = StoreCollector(agent.store, clock=lambda: now[0])
    api = QueryAPI(agent.store, clock=lambda: now[0])
    selector = 'watchdog_gpu_nvlink_errors_total{gpu="1",link="3",type="replay"}'
    nvml.schedule([{"at_seconds": 12, "gpu": 1, "fault": "gpu_lost"}])
    for step in range(12):
        now[0] = START + step
        agent.tick()
        stored = [(labels, value) for labels, _, value in agent.store.latest_values(int(now[0] * 1000))]
        assert only(stored, COUNTER) == [0.0], step  # every tick: present, not stale
        assert only(exporter.samples(), COUNTER) == [0.0], step
        assert query(api, selector) == ["0"], step
    assert query(api, f"rate({selector}[10s])") == ["0"]  # a point every 5 s: two or more in 10 s
    (counter,) = agent.store.select([("__name__", "=", COUNTER["__name__"]), ("gpu", "=", "1"), ("link", "=", "3"),
                                    ("type", "=", "replay")])
    assert [t // 1000 - START for t in counter.timestamps] == [0, 5, 10]  # read at 0, 5 and 10 only
    (fast,) = agent.store.select([("__name__", "=", FAST["__name__"]), ("gpu", "=", "1")])
    assert len(fast.timestamps) == 12
    now[0] = START + 12  # GPU 1 falls off the bus between counter reads
    agent.tick()
    point = counter.latest()
    assert point is not None and point[0] == (START + 12) * 1000 and is_stale(point[1])  # gone at once
    assert only(exporter.samples(), COUNTER) == []
    assert agent.store.latest_values(int(now[0] * 1000))  # GPU 0's series carry on
    agent.close()


def test_a_failed_call_empties_the_parts_and_a_hung_one_holds_them() -> None:
    """Counters share the collector's fate: a failure marks them stale with its other series; a hang holds
    their last report, as it holds its other series."""
    nvml = two_gpus()
    store = Store()
    collector = NvmlCollector(nvml)
    runner = CollectorRunner([collector])
    (first,) = ingest_results(store, runner.run_once(now=0.0), 0)
    assert first.success and first.parts[COUNTERS_PART]
    assert store.latest_values(0, keep=lambda labels, source: source == "collector:nvml:counters")
    nvml.fail("nvmlDeviceGetCount", 999)  # NVML_ERROR_UNKNOWN: the session breaks, the call fails
    (failed,) = ingest_results(store, runner.run_once(now=1.0), 1000)
    assert not failed.success and failed.parts == {COUNTERS_PART: []}
    assert not store.latest_values(1000, keep=lambda labels, source: source == "collector:nvml:counters")
    hung = runner._hung(collector, 2.0, "timeout")
    assert hung.parts[COUNTERS_PART] == first.parts[COUNTERS_PART]
    runner.close()
    collector.close()


def run(agent: Agent, nvml: FakeNvml, now: list[float], seconds: int) -> list[set[tuple[Any, ...]]]:
    """Tick once a second; per tick, the alerts the agent reports (name, state, labels)."""
    out = []
    for step in range(seconds):
        now[0] = START + step
        if step >= 20:
            nvml.set(0, pcie_replays=3 * (step - 20))  # 180 a minute
        out.append({(a.labels["alertname"], a.state.value, *sorted(a.labels.items())) for a in agent.tick()})
    return out


def test_gpu_rules_alert_exactly_as_when_counters_were_stored_every_tick(tmp_path: Path) -> None:
    """Every held GPU alert over the counters (and over the static series stored with them: max PCIe link,
    thermal thresholds), tick for tick: pending, firing and resolved at the same ticks."""
    faults = [
        {"at_seconds": 20, "gpu": 0, "fault": "nvlink_down", "params": {"link": 4}, "duration_seconds": 80},
        {"at_seconds": 25, "gpu": 1, "fault": "row_remap_pending"},
        {"at_seconds": 30, "gpu": 0, "fault": "pcie_downtrain", "params": {"generation": 3, "width": 8}},
        {"at_seconds": 30, "gpu": 1, "fault": "thermal_throttle", "duration_seconds": 60},
        *({"at_seconds": t, "gpu": 1, "fault": "nvlink_crc_burst", "params": {"link": 7, "count": 600}}
          for t in range(20, 200, 10)),
    ]
    timelines = []
    for name, held in (("now", False), ("before", True)):
        nvml = two_gpus()
        for gpu in range(2):
            nvml.set_load(gpu, 90)
        nvml.schedule(faults)
        now = [START]
        (tmp_path / name).mkdir()
        agent = gpu_agent(tmp_path / name, nvml, now)
        if held:
            agent.collectors = [StoredEveryTick(c) if isinstance(c, NvmlCollector) else c
                                for c in agent.collectors]
            agent.runner = build_runner(agent.settings, agent.collectors, background=False)
        timelines.append(run(agent, nvml, now, 175))
        agent.close()
    now_timeline, before = timelines
    fired = {alert[0] for tick in now_timeline for alert in tick if alert[1] == "firing"}
    assert {"GpuNvlinkDown", "GpuRowRemapPending", "GpuNvlinkErrorsHigh", "GpuPcieReplaysHigh", "GpuPcieLinkDegraded",
            "GpuThermalMarginLow"} <= fired
    for step, (mine, theirs) in enumerate(zip(now_timeline, before, strict=True)):
        assert mine == theirs, step
