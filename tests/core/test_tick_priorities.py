"""The tick's priorities: the fault path every tick and first, engine work at the engine scrape interval,
deferred when the tick runs out of time, overruns counted by stage."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from watchdog import agent as agent_module
from watchdog.agent import Agent, build_runner
from watchdog.agent.self_metrics import loop_samples
from watchdog.collectors.base import Collector, CollectorContext
from watchdog.config import load_settings
from watchdog.fakes.pynvml import FakeNvml
from watchdog.model import Sample, metric
from watchdog.rules.lanes import Lane

RULES = """
groups:
  - name: engine-canonical
    rules:
      - record: engine:requests_running
        expr: sum by (job) (vllm:num_requests_running)
  - name: gpu
    rules:
      - alert: GpuHotForTest
        expr: watchdog_gpu_temperature_celsius > 80
        labels: {severity: critical}
        annotations: {summary: hot, description: hot, runbook: gpu-thermal-margin}
"""


class FakeEngine(Collector):
    """A background collector like an engine scrape, counting its calls."""

    name = "engine:fake"
    timeout_seconds = 2.0
    background = True

    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> list[Sample]:
        self.calls += 1
        return [Sample(metric("vllm:num_requests_running", job="fake"), float(self.calls))]


class SlowCollector(Collector):
    """A fault-path collector that takes ``seconds``."""

    name = "slow"
    timeout_seconds = 5.0

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def collect(self) -> list[Sample]:
        time.sleep(self.seconds)
        return []


def _agent(tmp_path: Path, clock: list[float], *, tick: float = 1.0, extra: list[object] = ()) -> tuple[
        Agent, FakeEngine]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [str(rules)]}, "tick_interval_seconds": tick,
        "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}}}))
    settings = load_settings(config_path)
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.set(1, temperature_celsius=90)
    agent = Agent(settings, config_path=config_path, clock=lambda: clock[0], context=CollectorContext(nvml=nvml),
                  background_scrapes=False)
    engine = FakeEngine()
    agent.collectors = [*agent.collectors, *extra, engine]  # type: ignore[list-item]
    agent.runner = build_runner(settings, agent.collectors, background=False)
    return agent, engine


def _evaluations(agent: Agent) -> dict[str, int]:
    return {key: stats.evaluations_total for key, stats in agent.rule_engine.stats.items()}


def test_groups_are_split_into_the_fault_path_and_engine_work(tmp_path: Path) -> None:
    agent, _ = _agent(tmp_path, [1_800_000_000.0])
    assert agent.rule_engine.lanes() == {"engine-canonical": Lane.ENGINE, "gpu": Lane.FAULT}
    agent.close()


def test_engines_are_scraped_and_their_groups_evaluated_at_the_engine_interval(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent, engine = _agent(tmp_path, clock)
    for _ in range(10):
        alerts = agent.tick()
        assert any(a.name == "GpuHotForTest" for a in alerts)
        clock[0] += 1.0
    assert engine.calls == 2  # t = 0 s and 5 s (engine_scrape_interval_seconds defaults to 5)
    assert _evaluations(agent) == {"engine-canonical": 2, "gpu": 10}
    agent.close()


def test_engine_work_gives_way_when_the_fault_path_used_the_tick(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_800_000_000.0]
    agent, engine = _agent(tmp_path, clock)
    monkeypatch.setattr(agent_module, "ENGINE_START_FRACTION", 0.0)  # as if the fault path took the tick
    for _ in range(4):
        assert any(a.name == "GpuHotForTest" for a in agent.tick())  # the page still goes out
        clock[0] += 1.0
    assert engine.calls == 0
    assert agent.stats.deferred == {"engines": 4}
    monkeypatch.setattr(agent_module, "ENGINE_START_FRACTION", 0.5)
    agent.tick()
    assert engine.calls == 1
    assert _evaluations(agent)["engine-canonical"] == 1
    agent.close()


def test_an_overrun_is_counted_under_the_stage_that_ran_past_the_interval(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent, _ = _agent(tmp_path, clock, tick=0.05, extra=[SlowCollector(0.1)])
    agent.tick()
    assert agent.stats.overrun_stage == "fault"
    assert agent.stats.deferred.get("engines") == 1  # no time left for engine work
    agent.note_overrun()  # what the scheduler calls for the tick it skipped
    exported = {dict(s.labels).get("stage"): s.value for s in loop_samples(agent.stats, agent.store, agent.db, [])
                if dict(s.labels)["__name__"] == "watchdog_tick_overruns_total"}
    assert exported == {"fault": 1.0, "engines": 0.0, "finish": 0.0}
    agent.close()
