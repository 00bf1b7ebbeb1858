"""A real agent steering a real HAProxy, on the wall clock: two engine simulator processes, the fake NVML
of the demo (:class:`watchdog.demo.gpu_driver.GpuSimulator`), the agent with the demo's config and the
whole default rule pack ticking every second (``TickScheduler``), its exporter and agent-check port, and
HAProxy in front of the engines with an agent check per server. Used by the end-to-end balancer tests and
``benchmarks/balancer.py``.

Faults a caller injects: :meth:`Node.freeze` (SIGSTOP an engine: wedged), :meth:`Node.lose_gpu` (the
fake NVML reports the GPU lost from now on); a KV pool filling comes from the scenario's knobs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.haproxy import Engine, HAProxy
from tests.support.llm import FAST_KNOBS
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.daemon.scheduler import TickScheduler
from watchdog.daemon.serve import build_exporter, verdict_source
from watchdog.demo.gpu_driver import GpuSimulator
from watchdog.demo.runner import EngineProcess, demo_config, start_engines, stop_engines
from watchdog.demo.scenario import load_scenario
from watchdog.exporter.server import ExporterServer
from watchdog.serving.agentcheck import AgentCheckServer
from watchdog.serving.model import Verdict

JOBS = ("vllm-a", "vllm-b")


def scenario_doc(kv_usage_a: str = "0.3", duration: str = "900s") -> dict[str, Any]:
    """Two engines on two GPUs each (vllm-a on GPUs 0-1, vllm-b on 2-3), fast enough for a client load;
    ``kv_usage_a`` is vllm-a's KV usage timeline (promtool notation, one value per second)."""
    return {
        "name": "balancer", "description": "two engines behind HAProxy", "profile": "h100-sxm-8",
        "interval": "1s", "duration": duration,
        "engines": [
            {"job": "vllm-a", "model": "demo/model", "gpus": [0, 1], "knobs": {**FAST_KNOBS, "kv_usage": kv_usage_a}},
            {"job": "vllm-b", "model": "demo/model", "gpus": [2, 3], "knobs": dict(FAST_KNOBS)},
        ],
        "gpus": [], "faults": [], "expect": {"within": "30s", "alerts": []},
    }


@dataclass
class Node:
    """The running node; see the module docstring."""

    agent: Agent
    gpus: GpuSimulator
    engines: dict[str, EngineProcess]
    haproxy: HAProxy
    exporter: ExporterServer
    agent_check: AgentCheckServer
    start: float

    def verdict(self, job: str) -> Verdict | None:
        """The agent's newest verdict of ``job``."""
        source = verdict_source(self.agent)
        current = source.verdict(job) if source is not None else None
        return current.verdict if current is not None else None

    def freeze(self, job: str) -> None:
        """SIGSTOP the engine: it keeps its sockets but answers nothing (wedged)."""
        os.kill(self.engines[job].process.pid, signal.SIGSTOP)

    def thaw(self, job: str) -> None:
        """SIGCONT."""
        os.kill(self.engines[job].process.pid, signal.SIGCONT)

    def lose_gpu(self, gpu: int) -> None:
        """The fake NVML reports ``gpu`` lost (``GPU_IS_LOST``) from its next read on."""
        self.gpus.nvml.schedule([{"at_seconds": max(0.0, time.time() - self.start), "gpu": gpu,
                                  "fault": "gpu_lost", "params": {}}])

    def wait_verdict(self, job: str, wanted: set[Verdict], timeout: float) -> float:
        """Seconds until the agent's verdict of ``job`` is one of ``wanted`` (AssertionError past timeout)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.verdict(job) in wanted:
                return time.monotonic() - started
            time.sleep(0.05)
        source = verdict_source(self.agent)
        raise AssertionError(f"{job}: verdict {self.verdict(job)} not in {wanted} within {timeout} s: "
                             f"{source.verdict(job) if source else None}")


@contextlib.contextmanager
def node_behind_haproxy(workdir: Path, doc: dict[str, Any] | None = None, inter: str = "1s",
                        extra: dict[str, Any] | None = None, own_check: bool = False,
                        httpchk: bool = False) -> Iterator[Node]:
    """Start everything (engines, agent, its ticks, exporter, agent-check port, HAProxy); stop it all after.
    HAProxy runs no health check of its own unless ``own_check``: what it does is the agent's doing. With
    ``httpchk`` HAProxy reads the exporter's health endpoint instead of the agent-check port."""
    scenario_path = workdir / "scenario.yaml"
    scenario_path.write_text(yaml.safe_dump(doc or scenario_doc()))
    (workdir / "kmsg.log").touch()
    scenario = load_scenario(str(scenario_path))
    start = time.time()
    engines = start_engines(scenario, start)
    agent: Agent | None = None
    scheduler: TickScheduler | None = None
    exporter: ExporterServer | None = None
    agent_check: AgentCheckServer | None = None
    haproxy: HAProxy | None = None
    try:
        gpus = GpuSimulator(scenario, workdir / "kmsg.log", start,
                            engine_pids={e.job: e.process.pid for e in engines})
        agent = Agent(demo_config(scenario, engines, workdir, "127.0.0.1:0", extra=extra),
                      context=CollectorContext(nvml=gpus.nvml))
        agent.before_tick.append(gpus.advance)
        exporter = build_exporter(agent, "127.0.0.1:0")
        exporter.start()
        held = agent
        agent_check = AgentCheckServer(lambda: verdict_source(held), "127.0.0.1", 0)
        agent_check.start()
        scheduler = TickScheduler(agent, agent.settings.tick_interval_seconds)
        scheduler.start()
        haproxy = HAProxy(workdir, [Engine(e.job, e.port) for e in engines],
                          agent_check_port=None if httpchk else agent_check.port,
                          health_port=exporter.port if httpchk else None, inter=inter, own_check=own_check).start()
        yield Node(agent, gpus, {e.job: e for e in engines}, haproxy, exporter, agent_check, start)
    finally:
        for engine in engines:
            with contextlib.suppress(ProcessLookupError):
                os.kill(engine.process.pid, signal.SIGCONT)
        if haproxy is not None:
            haproxy.stop()
        if scheduler is not None:
            scheduler.stop(wait=True)
        if agent_check is not None:
            agent_check.stop()
        if exporter is not None:
            exporter.stop()
        if agent is not None:
            agent.close(timeout_seconds=2)
        stop_engines(engines)
