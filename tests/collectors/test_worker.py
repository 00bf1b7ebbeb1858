"""The threads for calls that may hang: one persistent thread per collector (and per GPU), not one per call."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import pytest

from watchdog.collectors.base import Collector, CollectorRunner
from watchdog.infra.workers import DaemonPool
from watchdog.model import Sample, metric


def test_a_pool_of_one_runs_its_calls_on_one_thread_and_hands_back_results_and_errors() -> None:
    worker = DaemonPool(1, "w")
    first = worker.submit(threading.get_ident).result(timeout=5)
    assert worker.submit(threading.get_ident).result(timeout=5) == first != threading.get_ident()
    failed = worker.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=5)
    worker.shutdown()
    assert worker.submit(lambda: None).cancelled()


def test_a_hung_call_holds_its_thread_and_a_second_call_waits_behind_it_on_no_new_thread() -> None:
    release = threading.Event()
    worker = DaemonPool(1, "hung")
    hung = worker.submit(lambda: release.wait(5))
    before = threading.active_count()
    second = worker.submit(threading.get_ident)
    assert not second.done() and threading.active_count() == before
    release.set()
    assert hung.result(timeout=5) is True
    assert second.result(timeout=5) != threading.get_ident()
    worker.shutdown()


def test_an_idle_thread_ends_and_another_starts_on_the_next_call() -> None:
    worker = DaemonPool(1, "idle", idle_seconds=0.05)
    first = worker.submit(threading.get_ident).result(timeout=5)
    deadline = time.monotonic() + 5
    while any(t.ident == first for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(t.ident != first for t in threading.enumerate())  # no thread left behind
    assert worker.submit(lambda: 3).result(timeout=5) == 3


def test_an_idle_thread_takes_the_next_call_and_a_busy_pool_starts_another_up_to_its_limit() -> None:
    release = threading.Event()
    pool = DaemonPool(2, "two")
    idle = pool.submit(threading.get_ident).result(timeout=5)
    held = [pool.submit(release.wait, 5) for _ in range(3)]
    deadline = time.monotonic() + 5
    while sum(f.running() for f in held) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [f.running() for f in held] == [True, True, False]  # two threads, the third call queued
    assert idle in {t.ident for t in threading.enumerate()}
    release.set()
    assert all(f.result(timeout=5) for f in held)
    pool.shutdown(wait=True, timeout_s=5)
    deadline = time.monotonic() + 5
    while idle in {t.ident for t in threading.enumerate()} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert idle not in {t.ident for t in threading.enumerate()}  # shutdown ends the idle threads


class Counting(Collector):
    """A collector that records the thread of each call."""

    timeout_seconds = 2.0

    def __init__(self, name: str) -> None:
        self.name = name
        self.threads: list[int] = []

    def collect(self) -> Iterable[Sample]:
        self.threads.append(threading.get_ident())
        return [Sample(metric("x", collector=self.name), 1.0)]


def test_the_runner_reuses_one_thread_per_collector_across_rounds_and_close_ends_them() -> None:
    collectors = [Counting("a"), Counting("b")]
    runner = CollectorRunner(list(collectors))
    for _ in range(5):
        assert [r.success for r in runner.run_once()] == [True, True]
    a, b = (set(c.threads) for c in collectors)
    assert len(a) == len(b) == 1 and a != b
    runner.close()
    deadline = time.monotonic() + 5
    while {t.ident for t in threading.enumerate()} & (a | b) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not {t.ident for t in threading.enumerate()} & (a | b)


def test_a_collector_with_an_interval_is_called_when_that_much_tick_time_has_passed() -> None:
    host = Counting("host")
    host.interval_seconds = 5.0
    every_tick = Counting("nvml")
    runner = CollectorRunner([host, every_tick])
    called = []
    for now in [0.0, 1.0, 2.0, 4.9, 5.0, 6.0, 9.8, 10.0, 3.0]:  # 9.8: a jittery tick is not skipped
        names = [r.name for r in runner.run_once(now=now)]
        assert "nvml" in names
        if "host" in names:
            called.append(now)
    assert called == [0.0, 4.9, 9.8, 3.0]  # 4.9 and 9.8: within the slack; 3.0: the clock went back
    runner.close()
