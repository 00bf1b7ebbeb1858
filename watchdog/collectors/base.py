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
threads. Each collector has its own daemon thread (a :class:`~watchdog.infra.workers.DaemonPool` of
one, kept while calls come: no thread per call): a hung collector holds only its own thread and cannot
starve the others, and a call wedged in a driver cannot keep the process from exiting.

A collector with ``interval_seconds`` > 0 (the host: CPU and memory for rules over minutes) is called
only when that much tick time has passed since its last call; in the rounds between, it yields no result
and its series stay as they are.

A collector may split what it reads into *parts* that change at their own pace (NVML's counters, read
every few seconds): it names them in ``parts`` and returns a :class:`Collected` whose ``parts`` carry the
parts read by that call. Each part is stored under its own source, ``collector:<name>:<part>``, only when
the call reports it: in the rounds between, the part's series stay as they are (not stale, no new point),
and a series that a reported part no longer contains goes stale. A failed call reports every declared part
empty (its series go stale with the rest); a hung call holds each part's last report with its samples.

A call that returns samples but reports a ``call_failure()`` (an engine's failed scrape: ``up 0`` is data)
is a failure with that reason; a result is never a success with an error. Durations are each
collector's own: from the moment its call began on its thread to the moment it returned.

A failed call yields the collector's ``failure_samples()`` when they are not None (an engine's
``up 0``), so a failure is data rather than an absent series. A collector without them that *hangs*
(timeout, previous call still running: NVML wedged in the driver) keeps reporting its last good
samples, with success 0: stale is not healthy, so a firing alert on its series stays firing rather
than resolving because the series went away. A call that fails with an answer (an exception) is not
held: its series go stale. A collector with ``background = True``
(engine scrapes) cannot stretch the tick: the runner waits for it at most ``background_wait_seconds``;
a call still within its deadline after that is left running and its result is taken by the first tick
after it completes (until then its previous series stay as they are). A collection refused by the
store's series quota (:class:`~watchdog.store.SeriesQuotaExceeded`) marks the collector failed with
that reason and stores its failure samples instead. A collection whose new series would exceed the
per-metric label-value limit (:class:`~watchdog.store.LabelValuesExceeded`: an engine inventing a label
value per request) is stored without those new series, and the collector is marked failed with the
reason (source, metric, label, limit); its other series, and every other source, carry on.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

from watchdog.infra.state import StateDB
from watchdog.infra.workers import DaemonPool
from watchdog.model import Sample, cached_metric
from watchdog.pods.directory import PodDirectory
from watchdog.store import COLLECTOR_SOURCE_PREFIX, LabelValuesExceeded, SeriesQuotaExceeded, Store

log = logging.getLogger(__name__)

DUE_SLACK_SECONDS = 0.25
"""An ``interval_seconds`` collector is due this much early (tick jitter must not skip a whole tick)."""


def not_yet_due(last: float, now: float, every: float) -> bool:
    """Whether work done at ``last`` (seconds of tick time) every ``every`` seconds is not due again at
    ``now``: due :data:`DUE_SLACK_SECONDS` early, and at once when the clock went back."""
    return last <= now < last + every - DUE_SLACK_SECONDS


class NoData(Exception):
    """Raised by a collector when its subject is absent here (no driver, no kmsg): quiet, not a failure."""


class Collector(ABC):
    """One source of samples. ``name`` is the same in config, logs and self-metrics; the options after
    ``timeout_seconds`` tell the runner how to call it (see the module docstring), each with its default."""

    name: str
    timeout_seconds: float
    background: bool = False
    """Whether the runner lets a call run on past the tick (engine scrapes)."""
    interval_seconds: float = 0.0
    """Above 0: called only when this many seconds of tick time have passed since its last call."""
    parts: tuple[str, ...] = ()
    """The parts it may report in a :class:`Collected`, each stored under its own source."""

    @abstractmethod
    def collect(self) -> Iterable[Sample]:
        """Read the subject once and return its samples (no timestamps: the runner stamps them); a
        collector with ``parts`` returns a :class:`Collected`."""

    def call_failure(self) -> str:
        """Why the last call failed though it returned samples ("" when it did not): an engine that
        refused, timed out or answered HTTP 503 still reports ``up 0`` as data, and its call is a failure
        with this reason (``watchdog_collector_success`` 0). Read by the runner after the call returned."""
        return ""

    def failure_samples(self) -> list[Sample] | None:
        """What a failed call still reports (an engine's ``up 0``); None (the default) reports nothing and
        makes a hung call hold the last good samples."""
        return None


@dataclass(frozen=True)
class Collected:
    """What a collector with parts returns from one call: its samples, and the parts this call read.

    Iterating it yields every sample, the parts' included (for callers that want the whole reading).
    """

    samples: list[Sample]
    parts: dict[str, list[Sample]] = field(default_factory=dict)
    """Part name -> its samples, for the parts read by this call only (see the module docstring)."""

    def __iter__(self) -> Iterator[Sample]:
        return chain(self.samples, *self.parts.values())


def collected(out: Iterable[Sample]) -> Collected:
    """A collector's return value as a :class:`Collected` (plain samples have no parts)."""
    return out if isinstance(out, Collected) else Collected(list(out))


def part_source(name: str, part: str) -> str:
    """The store source of part ``part`` of collector ``name``: ``collector:<name>:<part>``."""
    return f"{COLLECTOR_SOURCE_PREFIX}{name}:{part}"


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
    pods: PodDirectory | None = None  # the agent's pod mapping: the pod_resources collector fills it

    def db_for(self, state_dir: str) -> StateDB:
        """The shared state database, else one opened in ``state_dir``."""
        return self.state_db if self.state_db is not None else StateDB.in_dir(state_dir)


def one_shot_context(context: CollectorContext | None) -> CollectorContext:
    """``context`` with an in-memory state database when it has none: a one-shot read (``check``) keeps
    what collectors remember (cursors, restart counts, baselines) in memory, never on disk."""
    context = context or CollectorContext()
    return context if context.state_db is not None else replace(context, state_db=StateDB(":memory:"))


@dataclass(frozen=True)
class CollectResult:
    """The outcome of one collector in one tick."""

    name: str
    samples: list[Sample]
    success: bool
    duration_seconds: float
    error: str = ""
    fallback: list[Sample] = field(default_factory=list)
    """What to store instead of ``samples`` if the store refuses them (the collector's failure samples)."""
    parts: dict[str, list[Sample]] = field(default_factory=dict)
    """The parts to store this round, each under :func:`part_source`; a part absent here stays as it is."""
    note: str = ""
    """Why there is nothing to collect (the :class:`NoData` message: no driver, no readable kernel log)."""


def failure_samples(collector: Collector) -> list[Sample]:
    """The series a failed call of ``collector`` still reports (``up 0`` for an engine), else none."""
    return collector.failure_samples() or []


def emptied_parts(collector: Collector) -> dict[str, list[Sample]]:
    """Every part ``collector`` declares, empty: what a failed call reports (their series go stale)."""
    return {part: [] for part in collector.parts}


def _failed(collector: Collector, duration: float, error: str) -> CollectResult:
    return CollectResult(collector.name, failure_samples(collector), False, duration, error,
                         failure_samples(collector), emptied_parts(collector))


@dataclass
class _Call:
    future: Future[Collected]
    started: float
    taken: bool = False
    ran: list[float] = field(default_factory=list)  # [began, ended] of the collect() call, monotonic

    def duration(self) -> float:
        """Seconds the collector itself ran (not the time it waited behind other collectors)."""
        now = time.monotonic()
        began = self.ran[0] if self.ran else self.started
        ended = self.ran[1] if len(self.ran) > 1 else now
        return max(0.0, ended - began)


class CollectorRunner:
    """Runs collectors concurrently, each bounded by its own timeout. See the module docstring."""

    def __init__(self, collectors: list[Collector], background_wait_seconds: float | None = None,
                 honour_intervals: bool = True) -> None:
        """Each collector's calls run on its own worker thread (see the module docstring);
        ``background_wait_seconds`` None waits for background collectors like the others (up to their
        timeout); ``honour_intervals`` False calls every collector in every round (``interval_seconds``
        ignored: a one-off check's two rounds)."""
        self.collectors = collectors
        self.background_wait_seconds = background_wait_seconds
        self.honour_intervals = honour_intervals
        self._closed = False
        self._inflight: dict[str, _Call] = {}
        self._last_good: dict[str, list[Sample]] = {}
        self._last_parts: dict[str, dict[str, list[Sample]]] = {}  # each part's last report, per collector
        self._workers: dict[str, DaemonPool] = {}  # one thread per collector (see the module docstring)
        self._last_called: dict[str, float] = {}

    def run_once(self, background: bool | None = None, start: bool = True,
                 now: float | None = None) -> list[CollectResult]:
        """Collect from every collector once; never raises for a collector's fault.

        ``background`` True or False limits the round to the background collectors (engine scrapes) or
        to the others (the fault path); ``start`` False only takes what earlier calls have produced
        (completed, timed out) and starts no new call (a scrape that is not due this tick). ``now`` (tick
        time, seconds; default the monotonic clock) decides which ``interval_seconds`` collectors are due.
        """
        now = time.monotonic() if now is None else now
        started: list[tuple[Collector, _Call]] = []
        results: list[CollectResult] = []
        for collector in self.collectors:
            if background is not None and collector.background is not background:
                continue
            previous = self._inflight.get(collector.name)
            if previous is not None and not previous.taken:
                if previous.future.done():  # a background call that completed after its tick
                    previous.taken = True
                    results.append(self._outcome(collector, previous))
                    continue
                elapsed = time.monotonic() - previous.started
                if elapsed <= collector.timeout_seconds:
                    continue  # a background call still within its deadline: its series stay as they are
                previous.taken = True
                results.append(self._timed_out(collector, elapsed))
                continue
            if previous is not None and not previous.future.done():
                results.append(self._hung(collector, 0.0, "previous call still running"))
                continue
            if self._closed:
                results.append(CollectResult(collector.name, [], False, 0.0, "runner closed"))
                continue
            if not start or not self._due(collector, now):
                continue
            ran: list[float] = []
            call = _Call(self._start(collector, ran), time.monotonic(), ran=ran)
            self._inflight[collector.name] = call
            started.append((collector, call))
        for collector, call in started:
            limit = collector.timeout_seconds
            background = collector.background and self.background_wait_seconds is not None
            if background:
                limit = min(limit, float(self.background_wait_seconds or 0.0))
            try:
                call.future.result(timeout=max(0.0, limit - (time.monotonic() - call.started)))
            except FutureTimeout:
                if background and time.monotonic() - call.started <= collector.timeout_seconds:
                    continue  # taken by a later tick
                call.taken = True
                results.append(self._timed_out(collector, call.duration()))
                continue
            except Exception:  # classified by _outcome
                pass
            call.taken = True
            results.append(self._outcome(collector, call))
        return results

    def _due(self, collector: Collector, now: float) -> bool:
        """Whether a collector with ``interval_seconds`` is due at ``now`` (then its call is noted)."""
        every = collector.interval_seconds
        if every <= 0 or not self.honour_intervals:
            return True
        last = self._last_called.get(collector.name)
        if last is not None and not_yet_due(last, now, every):
            return False
        self._last_called[collector.name] = now
        return True

    def _timed_out(self, collector: Collector, elapsed: float) -> CollectResult:
        log.warning("collector timed out", extra={"collector": collector.name,
                                                  "timeout_seconds": collector.timeout_seconds})
        return self._hung(collector, elapsed, "timeout")

    def _hung(self, collector: Collector, elapsed: float, error: str) -> CollectResult:
        """A call that gave no answer: failure samples if the collector has them, else its last good ones."""
        if collector.failure_samples() is not None:
            return _failed(collector, elapsed, error)
        held = self._last_good.get(collector.name, [])
        return CollectResult(collector.name, held, False, elapsed,
                             f"{error} (last good series held)" if held else error,
                             parts=dict(self._last_parts.get(collector.name, {})))

    def _outcome(self, collector: Collector, call: _Call) -> CollectResult:
        """The result of a completed call."""
        duration = call.duration()
        try:
            out = call.future.result(timeout=0)
        except NoData as exc:
            return CollectResult(collector.name, [], True, duration, "no data", parts=emptied_parts(collector),
                                 note=str(exc))
        except Exception as exc:  # the boundary that owns a collector: isolate and report
            log.warning("collector failed", extra={"collector": collector.name, "error": repr(exc)})
            return _failed(collector, duration, repr(exc))
        self._last_good[collector.name] = out.samples
        if out.parts:
            self._last_parts.setdefault(collector.name, {}).update(out.parts)
        problem = collector.call_failure()
        return CollectResult(collector.name, out.samples, not problem, duration, problem,
                             fallback=failure_samples(collector), parts=out.parts)

    def _start(self, collector: Collector, ran: list[float]) -> Future[Collected]:
        worker = self._workers.get(collector.name)
        if worker is None:
            worker = self._workers[collector.name] = DaemonPool(1, f"collector-{collector.name}")

        def timed() -> Collected:
            ran.append(time.monotonic())
            try:
                return collected(collector.collect())
            finally:
                ran.append(time.monotonic())

        return worker.submit(timed)

    def close(self) -> None:
        """Stop starting calls; the workers end after their current call (hung ones are abandoned on their
        daemon threads)."""
        self._closed = True
        for worker in self._workers.values():
            worker.shutdown()


def self_metrics(results: Iterable[CollectResult]) -> list[Sample]:
    """``watchdog_collector_success`` and ``watchdog_collector_duration_seconds`` per collector."""
    out: list[Sample] = []
    for r in results:
        success = 1.0 if r.success else 0.0
        out.append(Sample(cached_metric("watchdog_collector_success", collector=r.name), success))
        duration = r.duration_seconds
        out.append(Sample(cached_metric("watchdog_collector_duration_seconds", collector=r.name), duration))
    return out


def ingest_results(store: Store, results: Iterable[CollectResult], now_ms: int,
                   self_source: str = "self:collectors") -> list[CollectResult]:
    """Store one round of collection: each collector's samples under its own source (so its vanished
    series go stale) and each part it reports under the part's source, then the collectors' success and
    duration self-metrics (under ``self_source``: a round of part of the collectors uses its own). A
    collection over its series quota is stored as its ``fallback`` (its parts emptied) and reported failed
    with the quota's reason; returns the results as stored."""
    stored: list[CollectResult] = []
    for result in results:
        sources = [(COLLECTOR_SOURCE_PREFIX + result.name, result.samples)]
        sources += [(part_source(result.name, part), samples) for part, samples in result.parts.items()]
        for source, samples in sources:
            try:
                store.ingest(source, samples, now_ms)
            except LabelValuesExceeded as exc:  # stored without the churning series
                log.warning("collector over its label-value limit",
                            extra={"collector": result.name, "error": exc.reason, "dropped": exc.dropped})
                result = replace(result, success=False, error=exc.reason)
            except SeriesQuotaExceeded as exc:
                log.warning("collector over its series quota", extra={"collector": result.name,
                                                                       "error": exc.reason})
                store.ingest(sources[0][0], result.fallback, now_ms, bypass_quota=True)
                for part, _ in sources[1:]:
                    store.ingest(part, (), now_ms, bypass_quota=True)
                result = CollectResult(result.name, result.fallback, False, result.duration_seconds, exc.reason,
                                       result.fallback)
                break
        stored.append(result)
    store.ingest(self_source, self_metrics(stored), now_ms)
    return stored
