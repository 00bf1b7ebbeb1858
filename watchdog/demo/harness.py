"""Fast-forward a scenario through the real agent, for tests and rule tuning.

Same pipeline as ``inference-watchdog demo`` (engine simulator processes, fake NVML, kernel-log file,
collectors, store, rules, lifecycle, runbooks in suggest mode, notifiers to the log), without the real
host's CPU/memory collector (a busy test machine must not change what a scenario fires), on simulated
time: the harness owns the clock, writes it to a file the engine simulators read, and ticks the agent
once per simulated second as fast as the CPU allows. No exporter, no scheduler.

Contract: :func:`run_scenario` returns when the simulated duration is over (or ``stop_when`` says so)
and reports the simulated second at which each alert first fired (and first went pending), and at which
each ``watch`` expression (PromQL over the agent's store, after the tick's rules) first returned a sample.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.collectors.base import CollectorContext
from watchdog.config.settings import Settings
from watchdog.demo.runner import demo_config, start_engines, stop_engines
from watchdog.demo.scenario import Scenario, load_scenario
from watchdog.model import Alert, AlertState
from watchdog.rules.queries import engine_gpus_in, instant_values

log = logging.getLogger("watchdog.demo.harness")
SIM_START = 1_800_000_000.0  # a fixed simulated epoch: runs are reproducible


@dataclass
class ScenarioResult:
    """When (simulated seconds after start) each alert first fired / went pending."""

    scenario: str
    seconds: float
    fired: dict[str, float] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)  # watch name -> first second it had a sample
    final_alerts: list[Alert] = field(default_factory=list)  # pending/firing/resolved at the last tick
    engine_gpus: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # TP groups of the last 15 min


def run_scenario(
    scenario: Scenario | str,
    duration_seconds: float | None = None,
    stop_when: Callable[[ScenarioResult], bool] | None = None,
    workdir: Path | None = None,
    watch: Mapping[str, str] | None = None,
    configure: Callable[[Settings], Settings] | None = None,
) -> ScenarioResult:
    """Run ``scenario`` (object, name or path) on simulated time; see the module docstring.

    ``configure`` may replace the agent's settings before it starts (a test adding a notifier).
    """
    from watchdog.agent import Agent
    from watchdog.demo.gpu_driver import GpuSimulator

    if isinstance(scenario, str):
        scenario = load_scenario(scenario)
    duration = duration_seconds if duration_seconds is not None else scenario.duration_seconds
    with tempfile.TemporaryDirectory(prefix="inference-watchdog-harness-") as tmp:
        base = workdir or Path(tmp)
        clock_file = base / "clock"
        now = [SIM_START]
        clock_file.write_text(repr(now[0]))
        (base / "kmsg.log").touch()
        engines = start_engines(scenario, SIM_START, clock_file=clock_file)
        result = ScenarioResult(scenario.name, 0.0)
        agent = None
        try:
            gpus = GpuSimulator(scenario, base / "kmsg.log", SIM_START,
                                engine_pids={e.job: e.process.pid for e in engines})
            config = demo_config(scenario, engines, base, "127.0.0.1:0", host_collector=False)
            if configure is not None:
                config = configure(config)
            agent = Agent(config, clock=lambda: now[0], background_scrapes=False,
                          context=CollectorContext(nvml=gpus.nvml))
            agent.before_tick.append(gpus.advance)
            steps = int(duration / scenario.interval_seconds)
            for step in range(steps + 1):
                now[0] = SIM_START + step * scenario.interval_seconds
                clock_file.write_text(repr(now[0]))
                alerts = agent.tick()
                elapsed = now[0] - SIM_START
                for alert in alerts:
                    if alert.state is AlertState.FIRING:
                        result.fired.setdefault(alert.name, elapsed)
                    if alert.state in (AlertState.PENDING, AlertState.FIRING):
                        result.pending.setdefault(alert.name, elapsed)
                for name, expr in (watch or {}).items():
                    if name not in result.seen and instant_values(expr, agent.store, int(now[0] * 1000)):
                        result.seen[name] = elapsed
                result.seconds = elapsed
                result.final_alerts = alerts
                if stop_when is not None and stop_when(result):
                    break
            result.engine_gpus = engine_gpus_in(agent.store, int(now[0] * 1000))
        finally:
            if agent is not None:
                agent.close(timeout_seconds=2)
            stop_engines(engines)
        return result


def main() -> int:
    """``python -m watchdog.demo.harness SCENARIO...``: print when each alert fired."""
    import sys

    for name in sys.argv[1:] or ["long-context-bomb"]:
        result = run_scenario(name)
        print(f"{result.scenario}: ran {result.seconds:.0f}s simulated")
        for alert, at in sorted(result.fired.items(), key=lambda kv: kv[1]):
            print(f"  fired {alert:<28} at {at:6.0f}s")
        for alert, at in sorted(result.pending.items(), key=lambda kv: kv[1]):
            if alert not in result.fired:
                print(f"  pending only {alert:<21} since {at:6.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
