"""The agent's tick: stages isolated, state persisted across a restart, reload keeps the last good set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from watchdog.agent import Agent
from watchdog.collectors.base import Collector, CollectorContext
from watchdog.config import load_settings
from watchdog.demo.progress import FiredHistory
from watchdog.fakes.pynvml import FakeNvml
from watchdog.model import AlertState, Sample, metric, metric_name

RULE = """
groups:
  - name: test
    rules:
      - record: gpu:hot:count
        expr: count(watchdog_gpu_temperature_celsius > 80)
      - alert: GpuHotForTest
        expr: watchdog_gpu_temperature_celsius > 80
        labels: {severity: warning}
        annotations: {summary: hot, description: hot, runbook: gpu-thermal-margin}
"""


def _agent(tmp_path: Path, clock: list[float], nvml: FakeNvml | None = None) -> Agent:
    rules = tmp_path / "rules.yaml"
    if not rules.exists():
        rules.write_text(RULE)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [str(rules)]},
        "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}}}))
    settings = load_settings(config_path)
    nvml = nvml or FakeNvml.from_profile("h100-sxm-8")
    return Agent(settings, config_path=config_path, clock=lambda: clock[0], context=CollectorContext(nvml=nvml))


def _names(agent: Agent) -> set[str]:
    return {metric_name(s.labels) for s in agent.store.all_series()}


def test_a_failing_stage_is_counted_and_the_tick_goes_on(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent = _agent(tmp_path, clock)

    def broken(t_ms: int) -> Any:
        raise RuntimeError("rule engine exploded")

    agent.rule_engine.evaluate = broken  # type: ignore[method-assign]
    alerts = agent.tick()
    assert alerts == []
    assert agent.stats.stage_failures == {"rules": 1}
    assert "watchdog_gpu_temperature_celsius" in _names(agent)  # collection still landed
    assert "watchdog_tick_stage_failures_total" in _names(agent)
    agent.close()


def test_firing_alert_survives_a_restart_with_its_fired_at(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.set(2, temperature_celsius=85)
    agent = _agent(tmp_path, clock, nvml)
    (alert,) = [a for a in agent.tick() if a.name == "GpuHotForTest"]
    assert alert.state is AlertState.FIRING
    runbook_md = Path(__file__).resolve().parents[2] / "runbooks" / "gpu-thermal-margin.md"
    assert alert.annotations["runbook_url"] == runbook_md.as_uri()  # kube-prometheus convention
    fired_at = alert.fired_at_ms
    agent.close()
    clock[0] += 30
    restarted = _agent(tmp_path, clock, nvml)
    (again,) = [a for a in restarted.tick() if a.name == "GpuHotForTest"]
    assert again.state is AlertState.FIRING and again.fired_at_ms == fired_at
    restarted.close()


def test_reload_with_a_broken_rule_file_keeps_the_last_good_rules(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent = _agent(tmp_path, clock)
    agent.tick()
    (tmp_path / "rules.yaml").write_text("groups:\n  - name: test\n    rules:\n      - record: x\n        expr: sum(\n")
    assert agent.reload() is False
    assert agent.stats.reload_success is False
    clock[0] += 1
    agent.tick()
    assert [g.name for g in agent.rule_engine.ruleset.groups] == ["test"]
    (tmp_path / "rules.yaml").write_text(RULE.replace("> 80", "> 10"))
    assert agent.reload() is True
    clock[0] += 1
    agent.tick()
    hot = [s for s in agent.store.select([("__name__", "=", "gpu:hot:count")])]
    assert hot and hot[0].latest() is not None and hot[0].latest()[1] == 8  # type: ignore[index]
    agent.close()


def test_a_host_without_the_nvidia_driver_is_quiet_no_data(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent = _agent(tmp_path, clock, FakeNvml.missing())
    agent.tick()
    success = {dict(s.labels)["collector"]: s.latest()[1]  # type: ignore[index]
               for s in agent.store.select([("__name__", "=", "watchdog_collector_success")])}
    assert success["nvml"] == 1.0
    assert not any(name.startswith("watchdog_gpu_") for name in _names(agent))
    assert "watchdog_ticks_total" in _names(agent)
    agent.close()


def test_health_is_not_ok_when_nothing_is_watched(tmp_path: Path) -> None:
    """No rules: watching() is False (so /-/ready answers 503) and watchdog_health says critical."""
    from watchdog.model import label_value

    clock = [1_800_000_000.0]
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    agent = _agent(tmp_path, clock)
    agent.tick()
    assert not agent.watching()
    health = {metric_name(labels) + label_value(labels, "check"): value
              for labels, _, value in agent.store.latest_values(int(clock[0] * 1000), 60_000)
              if metric_name(labels).startswith("watchdog_health")}
    assert health == {"watchdog_health": 2.0, "watchdog_health_problemrules": 1.0}
    agent.close()
    (tmp_path / "rules.yaml").write_text(RULE)
    healthy = _agent(tmp_path, clock)
    healthy.tick()
    assert healthy.watching() and healthy.health == []
    healthy.close()


def test_health_is_stored_every_tick_and_component_metrics_every_few_ticks_and_after_a_reload(
        tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent = _agent(tmp_path, clock)

    def newest(name: str) -> float:
        series = [s for s in agent.store.all_series() if metric_name(s.labels) == name]
        point = series[0].latest()
        assert point is not None
        return point[0] / 1000

    agent.tick()  # the first tick stores both
    assert newest("watchdog_health") == newest("watchdog_runbook_info") == clock[0]
    first = clock[0]
    clock[0] += 1
    agent.tick()
    assert newest("watchdog_health") == clock[0]
    assert newest("watchdog_rule_group_evaluations_total") == newest("watchdog_runbook_info") == first
    assert agent.reload()
    clock[0] += 1
    agent.tick()  # the tick after a reload stores them again (a new rule set, a new runbook catalogue)
    assert newest("watchdog_rule_group_evaluations_total") == newest("watchdog_health") == clock[0]
    agent.close()


class Flaky(Collector):
    """A collector that fails while ``broken``."""

    name = "flaky"
    timeout_seconds = 2.0
    broken = False

    def collect(self) -> list[Sample]:
        if self.broken:
            raise OSError("flaky is down")
        return [Sample(metric("flaky_up"), 1.0)]


def test_health_problems_and_gpu_flags_follow_the_tick_that_reports_them(tmp_path: Path) -> None:
    """What the tick keeps from one tick to the next (the health series, the TP-group read) never holds
    back a change: a failing collector is a problem, and ``watchdog_health`` says so, in the tick it
    fails and not after it recovers; a lost GPU is flagged in the tick NVML reports it; a reload to a rule
    set without alerting rules is a problem in the next tick."""
    from watchdog.agent import build_runner
    from watchdog.model import label_value

    clock = [1_800_000_000.0]
    nvml = FakeNvml.from_profile("h100-sxm-8")
    agent = _agent(tmp_path, clock, nvml)
    flaky = Flaky()
    agent.collectors.append(flaky)
    agent.runner = build_runner(agent.settings, agent.collectors)

    def tick() -> dict[str, float]:
        clock[0] += 1
        agent.tick()
        return {metric_name(labels) + label_value(labels, "check") + label_value(labels, "gpu"): value
                for labels, _, value in agent.store.latest_values(int(clock[0] * 1000), 500)
                if metric_name(labels).startswith(("watchdog_health", "watchdog_gpu_recovery_required"))}

    for broken in (False, False, True, True, False, True, False):
        flaky.broken = broken
        exported = tick()
        assert [p.check for p in agent.health] == (["flaky"] if broken else [])
        assert exported == ({"watchdog_health": 1.0, "watchdog_health_problemflaky": 1.0} if broken
                            else {"watchdog_health": 0.0})
    nvml.schedule([{"at_seconds": nvml.now, "gpu": 6, "fault": "gpu_lost", "duration_seconds": 60}])
    nvml.advance(0)
    exported = tick()
    assert [f.gpu for f in agent.gpu_flags.flags()] == ["6"]
    assert exported["watchdog_gpu_recovery_required6"] == 1.0
    (tmp_path / "rules.yaml").write_text(RULE.split("      - alert:")[0])  # the recording rule alone
    assert agent.reload()
    exported = tick()
    assert [(p.check, p.severity.word) for p in agent.health] == [("rules", "warning")]
    assert exported["watchdog_health_problemrules"] == 1.0
    agent.close()


def test_the_demo_history_holds_each_alert_once_from_its_first_firing(tmp_path: Path) -> None:
    clock, nvml = [1_800_000_000.0], FakeNvml.from_profile("h100-sxm-8")
    agent = _agent(tmp_path, clock, nvml)
    history = FiredHistory()
    agent.after_tick.append(lambda: history.note(agent.alerts))
    for hot in (2, 2, 5, 5, 2):  # GPU 2 stays hot: one alert firing in four ticks
        nvml.set(hot, temperature_celsius=85)
        clock[0] += 1
        agent.tick()
    assert [(a.name, a.labels["gpu"], a.fired_at_ms) for a in history.alerts] == [
        ("GpuHotForTest", "2", 1_800_000_001_000), ("GpuHotForTest", "5", 1_800_000_003_000)]
    agent.close()
