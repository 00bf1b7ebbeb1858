"""The agent computes verdicts every tick: the whole pipeline on simulated time, the fake NVML and two
engine simulator processes over loopback HTTP. A GPU lost from one engine's TP group drains that engine
(at once, with reason ``gpu_lost``) while the other keeps serving; an operator's drain (written to the
agent's state database as ``engine drain`` does) takes effect at the next tick and expires by itself; the
verdict series reach the real exporter."""

from __future__ import annotations

import logging
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.daemon.serve import build_exporter
from watchdog.demo.gpu_driver import GpuSimulator
from watchdog.demo.runner import demo_config, start_engines, stop_engines
from watchdog.demo.scenario import load_scenario
from watchdog.serving.model import EngineVerdict, ManualState, Verdict

SIM_START = 1_800_000_000.0
TICKS = 30
LOST_AT = 20
DRAIN_AT, DRAIN_UNTIL = 5, 12
FILL_AT = 15
SCENARIO = {
    "name": "serving-verdicts",
    "description": "Three engines; GPU 1 of the first falls off the bus, the third fills its KV pool.",
    "profile": "h100-sxm-8",
    "interval": "1s",
    "duration": f"{TICKS}s",
    "engines": [
        {"job": "vllm-a", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": [0, 1], "knobs": {"kv_usage": "0.3"}},
        {"job": "vllm-b", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": [2, 3], "knobs": {"kv_usage": "0.3"}},
        {"job": "vllm-c", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": [4, 5],
         "knobs": {"kv_usage": f"0.3x{FILL_AT - 1} 0.95"}},
    ],
    "faults": [{"at": f"{LOST_AT}s", "gpu": 1, "fault": "gpu_lost"}],
}


@dataclass
class Run:
    history: list[dict[str, EngineVerdict]]
    metrics: str
    logs: list[logging.LogRecord]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    base = tmp_path_factory.mktemp("serving")
    (base / "scenario.yaml").write_text(yaml.safe_dump(SCENARIO))
    (base / "kmsg.log").touch()
    clock_file = base / "clock"
    now = [SIM_START]
    clock_file.write_text(repr(now[0]))
    scenario = load_scenario(str(base / "scenario.yaml"))
    engines = start_engines(scenario, SIM_START, clock_file=clock_file)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    agent_log = logging.getLogger("watchdog.agent")
    level = agent_log.level
    agent_log.addHandler(handler)
    agent_log.setLevel(logging.INFO)
    agent = exporter = None
    try:
        gpus = GpuSimulator(scenario, base / "kmsg.log", SIM_START,
                            engine_pids={e.job: e.process.pid for e in engines})
        agent = Agent(demo_config(scenario, engines, base, "127.0.0.1:0"), clock=lambda: now[0],
                      background_scrapes=False, context=CollectorContext(nvml=gpus.nvml))
        agent.before_tick.append(gpus.advance)
        history = []
        for step in range(TICKS):
            now[0] = SIM_START + step
            clock_file.write_text(repr(now[0]))
            if step == DRAIN_AT:
                agent.manual_states.set(ManualState("vllm-b", Verdict.DRAIN, "kernel upgrade", "alice",
                                                    now[0], SIM_START + DRAIN_UNTIL))
            agent.tick()
            history.append({v.job: v for v in agent.serving.verdicts()})
        exporter = build_exporter(agent, "127.0.0.1:0")
        exporter.start()
        with urllib.request.urlopen(exporter.url + "/metrics", timeout=10) as response:
            metrics = response.read().decode()
        yield Run(history, metrics, records)
    finally:
        agent_log.removeHandler(handler)
        agent_log.setLevel(level)
        if exporter is not None:
            exporter.stop()
        if agent is not None:
            agent.close(timeout_seconds=2)
        stop_engines(engines)


def test_engines_are_admitted_before_the_fault(run: Run) -> None:
    before = run.history[LOST_AT - 2]
    assert before["vllm-a"].verdict is Verdict.ADMIT, before["vllm-a"]
    assert before["vllm-a"].scores.kv_free_ratio == pytest.approx(0.7)
    assert before["vllm-a"].instance.startswith("127.0.0.1:")


def test_a_lost_gpu_drains_its_engine_at_once_and_only_it(run: Run) -> None:
    first_drained = next(i for i, tick in enumerate(run.history) if tick["vllm-a"].verdict is Verdict.DRAIN)
    assert LOST_AT <= first_drained <= LOST_AT + 1
    after = run.history[-1]
    assert after["vllm-a"].verdict is Verdict.DRAIN and after["vllm-a"].weight_percent == 0
    assert "gpu_lost" in {r.code for r in after["vllm-a"].reasons}
    assert after["vllm-b"].verdict is Verdict.ADMIT


def test_a_full_kv_pool_sheds_after_n_of_m_scrapes(run: Run) -> None:
    verdicts = [tick["vllm-c"].verdict for tick in run.history]
    assert verdicts[FILL_AT - 1] is Verdict.ADMIT
    first_shed = verdicts.index(Verdict.SHED)
    # 3 of the last 5 scrapes (one a tick here, unless a loaded machine defers one) must say so: never the
    # first full reading, and soon after
    assert FILL_AT + 1 <= first_shed <= FILL_AT + 8, verdicts
    assert all(v is Verdict.SHED for v in verdicts[first_shed:])
    held = next(tick["vllm-c"] for tick in run.history if tick["vllm-c"].proposed is Verdict.SHED)
    assert (held.verdict, held.reasons[-1].code) == (Verdict.ADMIT, "hysteresis")
    shed = run.history[-1]["vllm-c"]
    assert shed.reasons[0].code == "kv_free_low" and shed.reasons[0].detail == "free KV 5 %, shed until above 15 %"
    assert shed.scores.kv_free_ratio == pytest.approx(0.05)


def test_manual_drain_applies_at_the_next_tick_and_expires(run: Run) -> None:
    during = run.history[DRAIN_AT]["vllm-b"]
    assert during.verdict is Verdict.DRAIN and during.manual is not None
    assert during.reasons[0].code == "manual" and "alice" in during.reasons[0].detail
    assert run.history[DRAIN_UNTIL]["vllm-b"].verdict is Verdict.ADMIT
    assert run.history[DRAIN_UNTIL]["vllm-b"].manual is None
    expired = [r for r in run.logs if r.getMessage() == "manual serving state expired"]
    assert [getattr(r, "job", None) for r in expired] == ["vllm-b"]


def test_verdict_series_reach_the_exporter(run: Run) -> None:
    def value(pattern: str) -> float:
        match = re.search("^" + pattern + r"\S* (\S+)$", run.metrics, re.MULTILINE)
        assert match, pattern
        return float(match.group(1))

    assert value(r'watchdog_engine_verdict\{[^}]*job="vllm-a"[^}]*verdict="drain"') == 1.0
    assert value(r'watchdog_engine_verdict\{[^}]*job="vllm-a"[^}]*verdict="admit"') == 0.0
    assert value(r'watchdog_engine_verdict_weight_ratio\{[^}]*job="vllm-a"') == 0.0
    assert value(r'watchdog_engine_verdict_weight_ratio\{[^}]*job="vllm-b"') == 1.0
    assert value(r'watchdog_engine_verdict_reason\{[^}]*job="vllm-a"[^}]*reason="gpu_lost"') == 1.0
    assert value(r'watchdog_engine_manual_state\{[^}]*job="vllm-b"[^}]*verdict="drain"') == 0.0
    assert value(r"watchdog_engine_short_prompt_max_tokens") == 1000.0
    assert value(r"watchdog_engine_verdicts_trusted") == 1.0
