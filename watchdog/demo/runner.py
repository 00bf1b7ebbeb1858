"""``inference-watchdog demo``: the real pipeline against simulated GPUs and engines.

What runs is the production agent (collectors, store, rules, lifecycle, runbooks in suggest mode,
notifiers, exporter); only the hardware is simulated:
- each scenario engine is a separate process (:mod:`watchdog.demo.engine_sim`) serving vLLM or SGLang
  `/metrics` on a loopback port, so the engine collector scrapes real HTTP and the process collector sees
  a real process tree;
- the GPUs are the fake ``pynvml`` loaded with the scenario's profile, driven each tick by
  :class:`watchdog.demo.gpu_sim.GpuSimulator` (knobs and faults), which also appends the kernel-log lines
  a fault prints to a file the kernel-log collector follows.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from watchdog.collectors.base import CollectorContext
from watchdog.config import load_config_text
from watchdog.config.settings import Settings, settings_from_config
from watchdog.demo.progress import DemoProgress, FiredHistory
from watchdog.demo.scenario import Scenario
from watchdog.infra.paths import asset_dir
from watchdog.model import AlertState

log = logging.getLogger("watchdog.demo")


@dataclass
class EngineProcess:
    """A running engine simulator."""

    job: str
    port: int
    process: subprocess.Popen[str]


def start_engines(scenario: Scenario, start: float, clock_file: Path | None = None) -> list[EngineProcess]:
    """Start one simulator process per scenario engine and wait until each listens.

    With ``clock_file`` the simulators read simulated time from that file (the harness's fast-forward).
    """
    started: list[EngineProcess] = []
    for spec in scenario.engines:
        extra = ["--clock-file", str(clock_file)] if clock_file else []
        proc = subprocess.Popen(
            [sys.executable, "-m", "watchdog.demo.engine_sim", "--scenario", scenario.source,
             "--job", spec.job, "--start", repr(start), *extra,
             *(["--", *spec.engine_args] if spec.engine_args else [])],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("PORT "):
            proc.kill()
            stop_engines(started)
            raise RuntimeError(f"engine simulator for {spec.job} did not start: {line!r}")
        started.append(EngineProcess(spec.job, int(line.split()[1]), proc))
    return started


def stop_engines(engines: list[EngineProcess]) -> None:
    """Terminate simulator processes (kill after 3 s)."""
    for engine in engines:
        engine.process.terminate()
    for engine in engines:
        try:
            engine.process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            engine.process.kill()


def demo_config(scenario: Scenario, engines: list[EngineProcess], workdir: Path, listen: str,
                alertmanager_urls: list[str] | None = None, host_collector: bool = False,
                extra: Mapping[str, Any] | None = None) -> Settings:
    """The agent config of a demo run: loopback engines, fake NVML, a kmsg file, suggest-only runbooks,
    diagnostics that say what they would run (never run against the machine hosting the simulation);
    ``extra`` is merged into the document, section by section (tests adjust single keys).

    The host collector is off unless ``host_collector``: this machine's real CPU and memory are not the
    simulated node's, and a busy demo machine must not change what a scenario fires."""
    rules_dir = asset_dir("rules")
    kinds = {spec.job: spec.kind for spec in scenario.engines}
    runbooks_dir = asset_dir("runbooks")
    doc: dict[str, Any] = {
        "node": "demo-node",
        "tick_interval_seconds": 1,
        # Scenarios compress minutes of an incident into seconds of simulated engines: scrape them every
        # tick (a node's default is engine_scrape_interval_seconds 5).
        "engine_scrape_interval_seconds": 1,
        "state_dir": str(workdir / "state"),
        "listen": listen,
        "rules": {"paths": [str(rules_dir / "*.yaml")] if rules_dir else []},
        "engines": [
            {"job": e.job, "url": f"http://127.0.0.1:{e.port}/metrics", "kind": kinds[e.job],
             "unit": f"{e.job}.service", "process": {"port": e.port}}
            for e in engines
        ],
        "kmsg": {"source": str(workdir / "kmsg.log")},
        "collectors": {"host": {"enabled": host_collector}},
        # Chat-style SLOs on vLLM V1 bucket boundaries: TTFT 1 s, TPOT 50 ms, 99 % of requests.
        "slo": {"objective": 0.99, "ttft_seconds": 1.0, "tpot_seconds": 0.05},
        # Suggest only; the gateway endpoints exist only as what a suggestion would call.
        "remediation": {"mode": "suggest", "diagnostics": {"simulated": True}, "vars": {
            "gateway_shed_url": "http://127.0.0.1:9000/admin/shed",
            "gateway_drain_url": "http://127.0.0.1:9000/admin/drain",
            "gateway_limits_url": "http://127.0.0.1:9000/admin/limits",
            "gateway_routing_url": "http://127.0.0.1:9000/admin/routing",
            "autoscaler_url": "http://127.0.0.1:9001/scale",
            "reduced_power_limit_watts": "550"}},
        "notifiers": {"log": {"enabled": True},
                      "alertmanager": {"urls": list(alertmanager_urls or []), "resend_interval_seconds": 15}},
    }
    if runbooks_dir:
        doc["runbooks"] = {"paths": [str(runbooks_dir)]}
    _merge(doc, extra or {})
    return settings_from_config(load_config_text(yaml.safe_dump(doc), "<demo config>"))


def _merge(doc: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Merge ``extra`` into ``doc`` section by section (tests adjust one key of the demo config)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(doc.get(key), dict):
            _merge(doc[key], value)
        else:
            doc[key] = value


def _report(progress: DemoProgress, history: FiredHistory, agent: Any) -> None:
    """Print the progress lines of the tick that just ended (after_tick hook)."""
    history.note(agent.alerts)
    firing = {a.name for a in history.alerts}
    pending = {a.name for a in agent.alerts if a.state is AlertState.PENDING}
    for line in progress.update(agent.clock(), firing, pending):
        print(line, file=sys.stderr, flush=True)


def run_demo(scenario: Scenario, listen: str, duration_seconds: float | None,
             alertmanager_urls: list[str] | None = None, log_format: str = "auto") -> int:
    """Run the scenario for ``duration_seconds`` (default: the scenario's); returns the exit code."""
    from watchdog.agent import Agent
    from watchdog.config.settings import with_log_format
    from watchdog.daemon.serve import serve
    from watchdog.demo.gpu_driver import GpuSimulator

    duration = duration_seconds if duration_seconds is not None else scenario.duration_seconds
    with tempfile.TemporaryDirectory(prefix="inference-watchdog-demo-") as tmp:
        workdir = Path(tmp)
        (workdir / "kmsg.log").touch()
        start = time.time()
        engines = start_engines(scenario, start)
        try:
            gpus = GpuSimulator(scenario, workdir / "kmsg.log", start,
                                engine_pids={e.job: e.process.pid for e in engines})
            config = demo_config(scenario, engines, workdir, listen, alertmanager_urls)
            config = with_log_format(config, log_format)
            agent = Agent(config, context=CollectorContext(nvml=gpus.nvml))
            agent.before_tick.append(gpus.advance)
            log.info("demo started", extra={
                "scenario": scenario.name, "listen": listen, "duration_seconds": duration,
                "engines": {e.job: f"http://127.0.0.1:{e.port}/metrics" for e in engines}})
            print(f"scenario {scenario.name}: {scenario.description}", file=sys.stderr, flush=True)
            for engine in engines:  # the ports are ephemeral: say where each simulated engine listens
                print(f"engine {engine.job}: http://127.0.0.1:{engine.port} (OpenAI API /v1/completions and "
                      f"/v1/chat/completions; metrics at /metrics)", file=sys.stderr, flush=True)
            progress = DemoProgress(scenario.expect_alerts, scenario.expect_within_seconds, start,
                                    also=scenario.also_alerts)
            print(progress.opening(), file=sys.stderr, flush=True)
            history = FiredHistory()
            agent.after_tick.append(lambda: _report(progress, history, agent))
            code = serve(agent, listen, duration_seconds=duration)
            print(progress.summary(), file=sys.stderr)
            return code
        finally:
            stop_engines(engines)
