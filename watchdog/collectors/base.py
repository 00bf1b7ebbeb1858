"""The collector contract, the typed context factories receive, and the isolating runner.

A collector is anything with a ``name`` and ``collect() -> Iterable[Sample]`` (see :class:`Collector`).
Each collector module has a factory ``(settings, context) -> list of collectors`` listed by name in
:mod:`watchdog.collectors.registry`; the factory reads its own section of the typed settings, so that one
section can yield several instances (one per engine endpoint) or none (disabled).

The runner calls each collector in a worker thread with a deadline. A collector that raises, or does not
finish by its deadline, yields ``watchdog_collector_success{collector} 0`` and its previous series go
stale; the others are unaffected. :class:`NoData` ("no such hardware here") is quiet: success 1, no
series. A hung collector keeps its worker thread; the runner does not start a second call of that
collector until the first returns ("previous call still running", success 0), so a hang cannot pile up
threads. Calls run on daemon threads (one per call, not a pool): hung collectors cannot starve the
others, and a call wedged in a driver cannot keep the process from exiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from watchdog.infra.state import StateDB
from watchdog.model import Sample, metric
from watchdog.store import Store

log = logging.getLogger(__name__)


class NoData(Exception):
    """Raised by a collector when its subject is absent here (no driver, no kmsg): quiet, not a failure."""


class Collector(Protocol):
    """One source of samples. ``name`` is the same in config, logs and self-metrics."""

    name: str
    timeout_seconds: float

    def collect(self) -> Iterable[Sample]:
        """Read the subject once and return its samples (no timestamps: the runner stamps them)."""
        ...


@dataclass(frozen=True)
class CollectorContext:
    """What factories may need beyond their settings section: shared state and injected I/O.

    Every field is optional; None means "the real thing": the state database in ``state_dir``, the
    wall clock, the real ``pynvml`` (imported on first use), the real ``psutil``, ``processes.sysfs_root``
    and the kernel's boot id. The agent fills in its own database and clock with :func:`dataclasses.replace`
    (a context handed in is never mutated); tests and the demo inject fakes here.
    """

    state_db: StateDB | None = None
    clock: Callable[[], float] | None = None
    nvml: Any = None  # a pynvml-compatible module (the real one, or watchdog.fakes.pynvml for demo/tests)
    psutil: Any = None  # a psutil-compatible module
    sysfs_root: str | None = None  # replaces processes.sysfs_root (tests point it at a fixture tree)
    boot_id: str | None = None  # replaces the kernel's boot id (tests)

    def db_for(self, state_dir: str) -> StateDB:
        """The shared state database, else one opened in ``state_dir``."""
        return self.state_db if self.state_db is not None else StateDB.in_dir(state_dir)


@dataclass(frozen=True)
class CollectResult:
    """The outcome of one collector in one tick."""

    name: str
    samples: list[Sample]
    success: bool
    duration_seconds: float
    error: str = ""


class CollectorRunner:
    """Runs collectors concurrently, each bounded by its own timeout. See the module docstring."""

    def __init__(self, collectors: list[Collector]) -> None:
        """Every call gets its own daemon thread (see the module docstring)."""
        self.collectors = collectors
        self._closed = False
        self._inflight: dict[str, Future[list[Sample]]] = {}

    def run_once(self) -> list[CollectResult]:
        """Collect from every collector once; never raises for a collector's fault."""
        started: dict[str, tuple[Future[list[Sample]], float]] = {}
        results: list[CollectResult] = []
        for collector in self.collectors:
            previous = self._inflight.get(collector.name)
            if previous is not None and not previous.done():
                results.append(CollectResult(collector.name, [], False, 0.0, "previous call still running"))
                continue
            if self._closed:
                results.append(CollectResult(collector.name, [], False, 0.0, "runner closed"))
                continue
            future = _start(collector)
            self._inflight[collector.name] = future
            started[collector.name] = (future, time.monotonic())
        for collector in self.collectors:
            if collector.name not in started:
                continue
            future, t0 = started[collector.name]
            remaining = max(0.0, collector.timeout_seconds - (time.monotonic() - t0))
            try:
                samples = future.result(timeout=remaining)
                results.append(CollectResult(collector.name, samples, True, time.monotonic() - t0))
            except FutureTimeout:
                log.warning("collector timed out", extra={"collector": collector.name,
                                                          "timeout_seconds": collector.timeout_seconds})
                results.append(CollectResult(collector.name, [], False, time.monotonic() - t0, "timeout"))
            except NoData:
                results.append(CollectResult(collector.name, [], True, time.monotonic() - t0, "no data"))
            except Exception as exc:  # the boundary that owns a collector: isolate and report
                log.warning("collector failed", extra={"collector": collector.name, "error": repr(exc)})
                results.append(CollectResult(collector.name, [], False, time.monotonic() - t0, repr(exc)))
        return results

    def close(self) -> None:
        """Stop starting calls; calls still running (hung ones too) are abandoned on their daemon threads."""
        self._closed = True


T = TypeVar("T")


def start_daemon(fn: Callable[[], T], name: str) -> Future[T]:
    """Run ``fn`` on a new daemon thread; its result or exception lands in the returned future.

    For calls that may never return (a wedged driver): nobody joins the thread, and it cannot keep the
    process from exiting.
    """
    future: Future[T] = Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the waiter, which classifies and reports it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _start(collector: Collector) -> Future[list[Sample]]:
    return start_daemon(lambda: list(collector.collect()), f"collector-{collector.name}")


def self_metrics(results: Iterable[CollectResult]) -> list[Sample]:
    """``watchdog_collector_success`` and ``watchdog_collector_duration_seconds`` per collector."""
    out: list[Sample] = []
    for r in results:
        success = 1.0 if r.success else 0.0
        out.append(Sample(metric("watchdog_collector_success", collector=r.name), success))
        duration = r.duration_seconds
        out.append(Sample(metric("watchdog_collector_duration_seconds", collector=r.name), duration))
    return out


def ingest_results(store: Store, results: Iterable[CollectResult], now_ms: int) -> None:
    """Store one round of collection: each collector's samples under its own source (so its vanished
    series go stale), then the collectors' success and duration self-metrics."""
    results = list(results)
    for result in results:
        store.ingest(f"collector:{result.name}", result.samples, now_ms)
    store.ingest("self:collectors", self_metrics(results), now_ms)
