"""The tick scheduler: one tick at a time; a tick due while the previous one runs is counted, not queued."""

from __future__ import annotations

import threading
import time

from tests.support.polling import wait_until
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
    """Real threads and the real clock: waits on progress, not on a fixed sleep, so a loaded machine only
    makes it take longer (each 0.5 s tick on a 0.1 s schedule overruns at least 4 times)."""
    agent = SlowAgent(tick_seconds=0.5)
    scheduler = TickScheduler(agent, interval_seconds=0.1)
    scheduler.start()
    wait_until(lambda: agent.ticks >= 2, timeout=30, what="two ticks")
    scheduler.stop(wait=True)
    assert agent.max_concurrent == 1
    assert agent.overruns >= 4 * 2


class SimulatedClock:
    """Monotonic time that moves only when the scheduler waits or a tick takes time: no load can skew it."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        self.now += seconds
        return stop.is_set()


class SimulatedAgent:
    """Ticks that take ``tick_seconds`` of simulated time; stops the scheduler after ``ticks`` ticks."""

    def __init__(self, clock: SimulatedClock, tick_seconds: float, ticks: int) -> None:
        self.clock = clock
        self.tick_seconds = tick_seconds
        self.ticks = ticks
        self.started: list[float] = []
        self.overruns = 0
        self.scheduler: TickScheduler | None = None
        self.last_tick = threading.Event()

    def tick(self) -> None:
        self.started.append(self.clock.now)
        self.clock.now += self.tick_seconds
        if len(self.started) == self.ticks and self.scheduler is not None:
            self.scheduler.stop(wait=False)  # from the tick thread: the loop ends after this tick
            self.last_tick.set()

    def note_overrun(self) -> None:
        self.overruns += 1


def run_simulated(tick_seconds: float, interval_seconds: float, ticks: int) -> SimulatedAgent:
    clock = SimulatedClock()
    agent = SimulatedAgent(clock, tick_seconds, ticks)
    agent.scheduler = TickScheduler(agent, interval_seconds, monotonic=clock.monotonic, wait=clock.wait)
    agent.scheduler.start()
    assert agent.last_tick.wait(timeout=30)
    agent.scheduler.stop(wait=True)  # joins the loop (the agent stopped it): the last overruns are counted
    return agent


def test_fast_ticks_run_on_schedule_without_overruns() -> None:
    agent = run_simulated(tick_seconds=0.0, interval_seconds=0.25, ticks=8)
    assert agent.started == [0.25 * n for n in range(8)]
    assert agent.overruns == 0


def test_a_tick_longer_than_the_interval_skips_the_missed_slots_and_counts_them() -> None:
    agent = run_simulated(tick_seconds=0.875, interval_seconds=0.25, ticks=4)
    assert agent.started == [0.0, 1.0, 2.0, 3.0]  # the next free slot, never a burst of catch-up ticks
    assert agent.overruns == 3 * 4  # 0.25, 0.5 and 0.75 came due during each tick
