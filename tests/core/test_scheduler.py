"""The tick scheduler: one tick at a time; a tick due while the previous one runs is counted, not queued."""

from __future__ import annotations

import threading
import time

from watchdog.daemon.scheduler import TickScheduler


class SlowAgent:
    """Stands in for Agent: a tick that takes longer than the interval."""

    def __init__(self, tick_seconds: float) -> None:
        self.tick_seconds = tick_seconds
        self.ticks = 0
        self.overruns = 0
        self.running = 0
        self.max_concurrent = 0
        self._lock = threading.Lock()

    def tick(self) -> None:
        with self._lock:
            self.running += 1
            self.max_concurrent = max(self.max_concurrent, self.running)
        time.sleep(self.tick_seconds)
        with self._lock:
            self.running -= 1
            self.ticks += 1

    def note_overrun(self) -> None:
        self.overruns += 1


def test_overrunning_ticks_are_counted_and_never_overlap() -> None:
    agent = SlowAgent(tick_seconds=0.5)
    scheduler = TickScheduler(agent, interval_seconds=0.1)
    scheduler.start()
    time.sleep(1.6)
    scheduler.stop(wait=True)
    assert agent.ticks >= 2
    assert agent.max_concurrent == 1
    assert agent.overruns >= 3


def test_fast_ticks_run_on_schedule_without_overruns() -> None:
    agent = SlowAgent(tick_seconds=0.0)
    scheduler = TickScheduler(agent, interval_seconds=0.1)
    scheduler.start()
    time.sleep(0.75)
    scheduler.stop(wait=True)
    assert agent.ticks >= 5
    assert agent.overruns == 0
