"""The collectors' worker threads: one persistent thread per collector (and per GPU), not one per call."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import pytest

from watchdog.collectors.base import CollectorRunner, Worker
from watchdog.collectors.nvml import CallStats, GpuRead, GpuReadCall, ReadBatch
from watchdog.model import Sample, metric


def test_a_worker_runs_its_calls_on_one_thread_and_hands_back_results_and_errors() -> None:
    worker = Worker("w")
    first = worker.submit(threading.get_ident).result(timeout=5)
    assert worker.submit(threading.get_ident).result(timeout=5) == first != threading.get_ident()
    failed = worker.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=5)
    worker.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        worker.submit(lambda: None)


def test_a_hung_call_holds_its_worker_and_a_second_call_is_refused_not_queued() -> None:
    release = threading.Event()
    worker = Worker("hung")
    hung = worker.submit(lambda: release.wait(5))
    with pytest.raises(RuntimeError, match="previous call still running"):
        worker.submit(lambda: None)
    release.set()
    assert hung.result(timeout=5) is True
    assert worker.submit(lambda: 2).result(timeout=5) == 2
    worker.stop()


def test_an_idle_worker_ends_its_thread_and_starts_another_on_the_next_call() -> None:
    worker = Worker("idle", idle_seconds=0.05)
    first = worker.submit(threading.get_ident).result(timeout=5)
    deadline = time.monotonic() + 5
    while any(t.ident == first for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(t.ident != first for t in threading.enumerate())  # no thread left behind
    assert worker.submit(lambda: 3).result(timeout=5) == 3


class Counting:
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
    host.interval_seconds = 5.0  # type: ignore[attr-defined]
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


def test_a_posted_call_runs_on_the_worker_thread_and_one_that_raises_leaves_the_thread_working() -> None:
    worker = Worker("posted")
    seen: list[int] = []
    done = threading.Event()
    def broken() -> None:
        raise ZeroDivisionError

    worker.post(broken)  # breaks post's contract: logged, the thread goes on

    def record() -> None:
        seen.append(threading.get_ident())
        done.set()

    worker.post(record)
    assert done.wait(5) and seen[0] != threading.get_ident()
    assert worker.submit(threading.get_ident).result(timeout=5) == seen[0]  # the same thread
    worker.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        worker.post(lambda: None)


def test_a_read_batch_wakes_its_waiter_once_every_read_has_returned_and_not_before() -> None:
    batch = ReadBatch(2)
    release = threading.Event()
    quick = GpuReadCall(lambda: GpuRead([], CallStats()), batch)
    slow = GpuReadCall(lambda: (release.wait(5), GpuRead([], CallStats()))[1], batch)
    quick.run()  # the first read returns before the second starts: the batch still waits for it
    assert quick.done() and not slow.done()
    threading.Thread(target=slow.run, daemon=True).start()
    started = time.monotonic()
    batch.wait(0.2)
    assert time.monotonic() - started >= 0.15 and not slow.done()  # the deadline, not the first read
    with pytest.raises(TimeoutError):
        slow.result(timeout=0.01)
    release.set()
    assert slow.result(timeout=5).samples == [] and slow.done()
    def failing() -> GpuRead:
        raise ZeroDivisionError

    failed = GpuReadCall(failing, ReadBatch(1))
    failed.run()
    assert failed.done() and isinstance(failed.error, ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=0)
    ReadBatch(0).wait(5)  # nothing started: returns at once
