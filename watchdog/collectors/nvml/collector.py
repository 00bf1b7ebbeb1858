"""One NVML collection: every GPU read on its own thread within the GPU deadline, the stalled ones
reported as such, the counters part reported when read or when the GPUs it covers change (see the
package docstring)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any

from watchdog.collectors.base import Collected, Collector, CollectorContext, not_yet_due
from watchdog.collectors.nvml import abi as A
from watchdog.collectors.nvml.reads import GpuRead, GpuReader
from watchdog.collectors.nvml.session import CallStats, NvmlSession, SessionBroken, import_pynvml
from watchdog.config.settings import NvmlSettings, Settings, section_settings
from watchdog.infra.workers import DaemonPool
from watchdog.model import Sample, metric

log = logging.getLogger(__name__)

#: The collector's part holding the counters (stored under ``collector:<name>:counters``).
COUNTERS_PART = "counters"


class NvmlCollector(Collector):
    """Reads every GPU through NVML once per :meth:`collect`. See the package docstring."""

    parts = (COUNTERS_PART,)

    def __init__(self, nvml: Any = None, settings: NvmlSettings | None = None, *, name: str = "nvml",
                 backoff_initial_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 counters_clock: Callable[[], float] | None = None,
                 import_module: Callable[[], Any] = import_pynvml) -> None:
        """``settings`` default to the schema's ``collectors.nvml`` defaults. ``clock`` (seconds) paces
        init backoff and static re-reads; ``counters_clock`` (default ``clock``; the agent passes its
        tick clock) paces the counter reads."""
        settings = settings or section_settings(NvmlSettings, "collectors.nvml")
        self.name = name
        self.timeout_seconds = settings.timeout_seconds
        self.gpu_deadline_seconds = 0.8 * self.timeout_seconds
        self.counters_interval_seconds = settings.counters_interval_seconds
        self.session = NvmlSession(nvml, name, clock=clock, backoff_initial_seconds=backoff_initial_seconds,
                                   backoff_max_seconds=settings.init_backoff_max_seconds,
                                   on_init=self._forget_gpus, import_module=import_module)
        self.reader = GpuReader(self.session, clock=clock, nvlink=settings.nvlink, processes=settings.processes,
                                static_refresh_seconds=settings.static_refresh_seconds)
        self._counters_clock = counters_clock or clock
        self._counters_read_at: float | None = None  # when every GPU's counters were last due
        self._counters_reported: tuple[int, ...] | None = None  # the GPUs of the last report (None: report)
        self._inflight: dict[int, Future[GpuRead]] = {}
        self._workers: dict[int, DaemonPool] = {}  # one thread per GPU
        self._stats_parts: list[CallStats] = []  # the last collection's: its own, then each GPU read's

    @property
    def last_stats(self) -> CallStats:
        """Time and number of NVML calls per call group in the last collection (merged when asked: only
        ``scripts/gpu-smoke`` reads them)."""
        merged = CallStats()
        for part in self._stats_parts:
            merged.merge(part)
        return merged

    @property
    def nvlink(self) -> bool:
        """Whether NVLink is read (``collectors.nvml.nvlink``)."""
        return self.reader.nvlink

    @property
    def driver_version(self) -> str:
        """The driver version NVML reported at the last successful init ("" before that)."""
        return self.session.driver_version

    def _forget_gpus(self) -> None:
        self.reader.forget()

    def close(self) -> None:
        """Shut NVML down if this collector initialised it; the GPUs' threads end after their reads."""
        for worker in self._workers.values():
            worker.shutdown()
        self._workers.clear()
        self.session.close()

    def collect(self) -> Collected:
        """One sample per series per GPU, the counters in their part when reported; see the module
        docstring for the error contract."""
        nvml = self.session.open()
        reported, self._counters_reported = self._counters_reported, None  # a call that raises reports next time
        now = self._counters_clock()
        read_at = self._counters_read_at
        self.reader.counters_due = read_at is None or not self._counters_fresh(read_at, now)
        if self.reader.counters_due:
            self._counters_read_at = now
        stats = CallStats()
        self._stats_parts = parts = [stats]
        try:
            started = time.perf_counter()
            count = int(nvml.nvmlDeviceGetCount())
            stats.seconds["count"] += time.perf_counter() - started
            stats.calls["count"] += 1
        except nvml.NVMLError as exc:
            code = A.error_code(exc)
            raise self.session.broke(code if code is not None else A.NVML_ERROR_UNKNOWN) from exc
        samples: list[Sample] = [Sample(metric("watchdog_gpu_nvml_devices"), float(count))]
        deadline = time.monotonic() + self.gpu_deadline_seconds
        stalled: list[int] = []
        to_read: list[int] = []
        for index in range(count):
            previous = self._inflight.get(index)
            if previous is not None and not previous.done():
                stalled.append(index)  # still hung since an earlier tick: do not pile up threads
            else:
                to_read.append(index)
        reads: dict[int, Future[GpuRead]] = {}
        for index in to_read:
            worker = self._workers.get(index)
            if worker is None:
                worker = self._workers[index] = DaemonPool(1, f"nvml-gpu{index}")
            self._inflight[index] = reads[index] = worker.submit(self.reader.read, nvml, index)
        wait(reads.values(), timeout=max(0.0, deadline - time.monotonic()))
        broken: SessionBroken | None = None
        counters: dict[int, list[Sample]] = {}
        fresh = False
        for index, future in reads.items():
            if not future.done():
                stalled.append(index)
                continue
            error = future.exception()
            if isinstance(error, SessionBroken):
                broken = error
                continue
            if error is not None:
                raise error
            read = future.result()
            samples.extend(read.samples)
            parts.append(read.stats)
            if read.counters is not None:
                counters[index] = read.counters
                fresh = fresh or read.fresh
        if broken is not None:
            raise self.session.broke(broken.code) from broken
        for index in sorted(stalled):
            log.warning("NVML read of a GPU stalled", extra={"gpu": index,
                                                             "deadline_seconds": self.gpu_deadline_seconds})
            samples.extend(self.reader.stalled_samples(index))
        samples.extend(self.reader.error_samples())
        shown = tuple(counters)
        self._counters_reported = shown
        if not fresh and shown == reported:
            return Collected(samples)
        return Collected(samples, {COUNTERS_PART: [s for gpu_counters in counters.values() for s in gpu_counters]})

    def _counters_fresh(self, read_at: float, now: float) -> bool:
        """Whether counters read at ``read_at`` are still to be reported as they are at ``now``."""
        every = self.counters_interval_seconds
        return every > 0 and not_yet_due(read_at, now, every)


def nvml_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """Factory for the config's ``collectors.nvml`` section: one collector, or none when disabled.

    NVML comes from ``context.nvml`` (the demo, ``gpu-smoke --fake`` and tests inject the fake there),
    else the real ``pynvml`` imported on first use.
    """
    section = settings.collectors.nvml
    if not section.enabled:
        return []
    return [NvmlCollector(context.nvml, section, counters_clock=context.clock)]
