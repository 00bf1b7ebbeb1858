"""The agent's serving stage on a small real agent (fake NVML, an engine URL nothing listens on): an engine
that does not answer is ``down`` and leaves the verdicts trusted; an agent that cannot see its GPUs
(NVML failing) fails open; a reload keeps each engine's verdict state and applies new thresholds."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import yaml

from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_settings
from watchdog.fakes.pynvml import FakeNvml
from watchdog.serving.model import Verdict

NVML_ERROR_UNKNOWN = 999
TICK_S = 10
RULE = """
groups:
  - name: test
    rules:
      - alert: GpuHotForTest
        expr: watchdog_gpu_temperature_celsius > 80
        labels: {severity: warning}
        annotations: {summary: hot, description: hot, runbook: gpu-thermal-margin}
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _agent(tmp_path: Path, clock: list[float], nvml: FakeNvml | None = None, **extra: Any) -> Agent:
    (tmp_path / "rules.yaml").write_text(RULE)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [str(tmp_path / "rules.yaml")]},
        "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}},
        # Long ticks: engine work is deferred when the fault path takes half a tick, which a loaded test
        # machine can make it do with 1-second ticks.
        "tick_interval_seconds": TICK_S, "engine_scrape_interval_seconds": TICK_S,
        "engines": [{"job": "vllm-gone", "url": f"http://127.0.0.1:{_closed_port()}/metrics",
                     "scrape_timeout_seconds": 1}], **extra}))
    return Agent(load_settings(config_path), config_path=config_path, clock=lambda: clock[0],
                 context=CollectorContext(nvml=nvml or FakeNvml.from_profile("h100-sxm-8")), background_scrapes=False)


def test_an_engine_that_does_not_answer_is_down_and_the_verdicts_stay_trusted(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent = _agent(tmp_path, clock)
    agent.tick()
    clock[0] += TICK_S
    agent.tick()  # the health watch assesses the previous tick's engine scrape
    (v,) = agent.serving.verdicts()
    assert (v.job, v.verdict, v.weight_percent, v.reasons[0].code) == ("vllm-gone", Verdict.DOWN, 0, "not_answering")
    assert agent.watching() is False, agent.health  # the health watch counts the unscrapeable engine ...
    assert agent.serving.trusted() is True  # ... but it is that engine's verdict, not a blind agent
    agent.close()


def test_an_agent_whose_nvml_fails_fails_open(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.fail("nvmlDeviceGetCount", NVML_ERROR_UNKNOWN)
    agent = _agent(tmp_path, clock, nvml)
    agent.tick()
    (v,) = agent.serving.verdicts()
    assert (v.verdict, v.weight_percent, v.reasons[0].code) == (Verdict.UNKNOWN, 100, "agent_unhealthy")
    assert "NVML does not work" in v.reasons[0].detail
    assert agent.serving.trusted() is False
    agent.close()


def test_reload_keeps_the_verdict_state_and_applies_new_thresholds(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    agent = _agent(tmp_path, clock)
    agent.tick()
    serving = agent.serving
    since = serving.verdicts()[0].since_seconds
    config_path = tmp_path / "config.yaml"
    doc = yaml.safe_load(config_path.read_text())
    doc["serving"] = {"short_prompt_max_tokens": 512}
    config_path.write_text(yaml.safe_dump(doc))
    assert agent.reload() is True
    clock[0] += TICK_S
    agent.tick()
    assert agent.serving is serving and serving.settings.short_prompt_max_tokens == 512
    assert serving.verdicts()[0].since_seconds == since
    cut = [s for s in agent.store.select([("__name__", "=", "watchdog_engine_short_prompt_max_tokens")])]
    assert cut[0].latest() is not None and cut[0].latest()[1] == 512  # type: ignore[index]
    agent.close()
