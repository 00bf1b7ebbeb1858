"""Item 9: no false resolves. A hung NVML keeps firing alerts firing, a wall-clock step backwards
drops no samples and resolves nothing, and an early SIGHUP does not kill ``run``."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from tests.hostile.conftest import HOT_RULE, hostile_agent
from tests.support.polling import wait_until
from watchdog.daemon.scheduler import TickScheduler
from watchdog.daemon.serve import EARLY_SIGHUP, install_early_sighup
from watchdog.fakes.pynvml import FakeNvml
from watchdog.model import AlertState


def _hot_agent(tmp_path: Path, clock: list[float], nvml: FakeNvml,  # type: ignore[no-untyped-def]
               nvml_timeout: float = 5.0):
    """An agent with one rule on GPU temperature. The NVML deadline is generous unless a test hangs NVML
    on purpose: on a loaded machine the first collection alone can take longer than a tight one."""
    rules = tmp_path / "hot.yaml"
    rules.write_text(HOT_RULE)
    return hostile_agent(tmp_path, clock, {"rules": {"paths": [str(rules)]},
                                           "collectors": {"host": {"enabled": False},
                                                          "nvml": {"timeout_seconds": nvml_timeout}}}, nvml=nvml)


def _states(alerts: list) -> dict[str, AlertState]:  # type: ignore[type-arg]
    return {a.name: a.state for a in alerts}


def test_a_hung_nvml_keeps_a_firing_alert_firing(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.set(3, temperature_celsius=90)
    agent = _hot_agent(tmp_path, clock, nvml, nvml_timeout=1.0)
    try:
        assert _states(agent.tick()).get("GpuHot") is AlertState.FIRING
        nvml.hang("nvmlDeviceGetCount")
        nvml.hang("nvmlDeviceGetTemperature", gpu=3)
        for _ in range(3):
            clock[0] += 60
            assert _states(agent.tick()).get("GpuHot") is AlertState.FIRING
        (success,) = [s for s in agent.store.select([("__name__", "=", "watchdog_collector_success"),
                                                      ("collector", "=", "nvml")])]
        assert success.latest() is not None and success.latest()[1] == 0.0  # type: ignore[index]
    finally:
        nvml.release()
        agent.close()


def test_a_wall_clock_step_backwards_resolves_nothing_and_drops_no_samples(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.set(3, temperature_celsius=90)
    agent = _hot_agent(tmp_path, clock, nvml)
    try:
        for _ in range(3):
            assert _states(agent.tick()).get("GpuHot") is AlertState.FIRING
            clock[0] += 1
        clock[0] -= 3600  # NTP, or an operator's `date -s`
        (series,) = agent.store.select([("__name__", "=", "watchdog_gpu_temperature_celsius"), ("gpu", "=", "3")])
        before = len(series.timestamps)
        for _ in range(3):
            time.sleep(0.01)
            assert _states(agent.tick()).get("GpuHot") is AlertState.FIRING
            clock[0] += 1
        assert len(series.timestamps) == before + 3  # none dropped as out of order
        assert agent.stats.clock_steps_total == 1
    finally:
        agent.close()


class _Counting:
    def __init__(self) -> None:
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1

    def note_overrun(self) -> None:
        pass


def test_the_tick_loop_runs_on_the_monotonic_clock() -> None:
    agent = _Counting()
    scheduler = TickScheduler(agent, 0.05)  # a wall-clock step cannot reach time.monotonic
    scheduler.start()
    wait_until(lambda: agent.ticks >= 4, timeout=30, what="four ticks")  # 0.2 s unless the machine is loaded
    scheduler.stop()


def test_an_early_sighup_does_not_kill_and_becomes_a_reload() -> None:
    previous = signal.getsignal(signal.SIGHUP)
    try:
        install_early_sighup()
        EARLY_SIGHUP.clear()
        os.kill(os.getpid(), signal.SIGHUP)
        deadline = time.monotonic() + 2
        while not EARLY_SIGHUP.is_set() and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert EARLY_SIGHUP.is_set()
    finally:
        EARLY_SIGHUP.clear()
        signal.signal(signal.SIGHUP, previous)
