"""The NVML session: init with backoff, shutdown, device handles, and the error contract of each call.

- :class:`NvmlSession` initialises NVML on first use. NVML absent (``pynvml`` not importable,
  LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED at init) raises :class:`NoData`; other init failures and a session
  that breaks raise :class:`NvmlUnavailable`; either way ``nvmlInit`` is retried with exponential backoff,
  not at every call.
- :class:`GpuCalls` makes one GPU's calls: ``NOT_SUPPORTED`` (or a function the driver lacks) answers None
  and is not asked again until NVML is initialised again; ``GPU_IS_LOST``/``RESET_REQUIRED`` raise
  :class:`GpuGone`; a broken session raises :class:`SessionBroken`; any other error is counted per GPU,
  call and error, and answers None.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from watchdog.collectors.base import NoData
from watchdog.collectors.nvml import abi as A

log = logging.getLogger(__name__)


class NvmlUnavailable(Exception):
    """NVML is present but cannot be used now (init failed, session broke): the collector fails."""


class GpuGone(Exception):
    """A call on one GPU answered GPU_IS_LOST or RESET_REQUIRED."""

    def __init__(self, code: int) -> None:
        super().__init__(A.error_name(code))
        self.code = code


class SessionBroken(Exception):
    """A call answered that the NVML session itself is unusable (UNINITIALIZED, driver gone)."""

    def __init__(self, code: int) -> None:
        super().__init__(A.error_name(code))
        self.code = code


def import_pynvml() -> Any:
    """The real ``pynvml`` module (nvidia-ml-py); :class:`NoData` when it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise NoData(f"pynvml is not importable: {exc}") from exc


@dataclass
class CallStats:
    """Time and number of NVML calls per call group, for one collection."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def merge(self, other: CallStats) -> None:
        """Add another GPU's figures to these."""
        for group, seconds in other.seconds.items():
            self.seconds[group] += seconds
        for group, calls in other.calls.items():
            self.calls[group] += calls


class GpuCalls:
    """NVML calls on one GPU: error classification, the NOT_SUPPORTED memo, timing per group."""

    def __init__(self, nvml: Any, index: int, unsupported: set[tuple[Any, ...]],
                 errors: Counter[tuple[int, str, str]], errors_lock: threading.Lock, stats: CallStats) -> None:
        """``unsupported``: this GPU's NOT_SUPPORTED memo; ``errors`` (under ``errors_lock``: GPUs are read
        in parallel): the failed calls per GPU, call and error; ``stats``: this read's timings."""
        self.nvml = nvml
        self.index = index
        self.unsupported = unsupported
        self.errors = errors
        self.errors_lock = errors_lock
        self.stats = stats
        self.mismatch: type[BaseException] | tuple[()] = getattr(nvml, "NVMLLibraryMismatchError", ())

    def call(self, group: str, name: str, *args: Any, memo: tuple[Any, ...] | None = None) -> Any | None:
        """``nvml.<name>(*args)``, or None when unsupported or failed; raises :class:`GpuGone` and
        :class:`SessionBroken`. An unsupported call is remembered under ``memo`` (default: the name and
        the arguments after the device handle) and not made again."""
        key = memo if memo is not None else (name, *args[1:])
        if key in self.unsupported:
            return None
        fn = getattr(self.nvml, name, None)
        if fn is None:
            self.unsupported.add(key)
            return None
        started = time.perf_counter()
        try:
            return fn(*args)
        except self.mismatch:
            # pynvml's unversioned wrappers on a driver without the versioned symbol
            self.unsupported.add(key)
            return None
        except self.nvml.NVMLError as exc:
            code = A.error_code(exc)
            if code in A.GPU_GONE_CODES:
                raise GpuGone(code or A.NVML_ERROR_GPU_IS_LOST) from exc
            if code in A.UNSUPPORTED_CODES:
                self.unsupported.add(key)
                return None
            if code in A.SESSION_BROKEN_CODES:
                raise SessionBroken(code or A.NVML_ERROR_UNINITIALIZED) from exc
            self.count_error(name, code)
            return None
        finally:
            self.stats.seconds[group] += time.perf_counter() - started
            self.stats.calls[group] += 1

    def count_error(self, call: str, code: int | None) -> None:
        """Count one failed call (``watchdog_gpu_nvml_errors_total``)."""
        with self.errors_lock:
            self.errors[(self.index, call, A.error_name(code))] += 1


def device_handle(calls: GpuCalls, index: int) -> Any | None:
    """The device handle of GPU ``index``, or None when NVML answered another error (counted); raises
    :class:`GpuGone` and :class:`SessionBroken` as :meth:`GpuCalls.call` does."""
    started = time.perf_counter()
    nvml = calls.nvml
    try:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        code = A.error_code(exc)
        if code in A.GPU_GONE_CODES:
            raise GpuGone(code or A.NVML_ERROR_GPU_IS_LOST) from exc
        if code in A.SESSION_BROKEN_CODES:
            raise SessionBroken(code or A.NVML_ERROR_UNINITIALIZED) from exc
        calls.count_error("nvmlDeviceGetHandleByIndex", code)
        return None
    finally:
        calls.stats.seconds["identity"] += time.perf_counter() - started
        calls.stats.calls["identity"] += 1


class NvmlSession:
    """One collector's NVML reference: :meth:`open` initialises it (with backoff), :meth:`broke` and
    :meth:`close` shut it down. ``on_init`` runs after each successful ``nvmlInit`` (what was learnt
    about the GPUs in an earlier session no longer holds)."""

    def __init__(self, nvml: Any, name: str, *, clock: Callable[[], float], backoff_initial_seconds: float,
                 backoff_max_seconds: float, on_init: Callable[[], None],
                 import_module: Callable[[], Any] = import_pynvml) -> None:
        """``nvml`` None: ``import_module()`` on first use."""
        self.name = name
        self.backoff_initial_seconds = backoff_initial_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.driver_version = ""
        """The driver version NVML reported at the last successful init ("" before that)."""
        self._nvml = nvml
        self._clock = clock
        self._on_init = on_init
        self._import_module = import_module
        self._up = False
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._last_failure: Exception | None = None

    def module(self) -> Any:
        """The pynvml-compatible module (imported on first use)."""
        if self._nvml is None:
            self._nvml = self._import_module()
        return self._nvml

    def open(self) -> Any:
        """The initialised NVML module, or raise :class:`NoData` / :class:`NvmlUnavailable` (with backoff)."""
        if self._up:
            return self.module()
        now = self._clock()
        if now < self._next_attempt and self._last_failure is not None:
            raise self._last_failure
        nvml = self.module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            code = A.error_code(exc)
            failure: Exception
            if code in A.NVML_ABSENT_CODES:
                failure = NoData(f"NVML absent: {exc}")
            else:
                failure = NvmlUnavailable(f"nvmlInit failed: {exc} ({A.error_name(code)})")
            self._fail(failure, now)
            raise failure from exc
        self._up = True
        self._backoff = 0.0
        self._last_failure = None
        self._on_init()
        self.driver_version = ""
        try:
            self.driver_version = A.text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as exc:
            log.warning("nvmlSystemGetDriverVersion failed", extra={"error": str(exc)})
        log.info("NVML initialised", extra={"driver_version": self.driver_version})
        return nvml

    def _fail(self, failure: Exception, now: float) -> None:
        if self._last_failure is None or type(self._last_failure) is not type(failure):
            log.warning("NVML unavailable", extra={"collector": self.name, "error": str(failure)})
        self._backoff = (min(self.backoff_max_seconds, self._backoff * 2) if self._backoff
                         else self.backoff_initial_seconds)
        self._next_attempt = now + self._backoff
        self._last_failure = failure

    def broke(self, code: int) -> NvmlUnavailable:
        """Shut the broken session down (a call answered ``code``); the next :meth:`open` is after the
        backoff. Returns the failure to raise."""
        nvml = self.module()
        self._up = False
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            log.debug("nvmlShutdown after a broken session failed", extra={"error": str(exc)})
        failure = NvmlUnavailable(f"NVML session broke: {A.error_name(code)}")
        self._fail(failure, self._clock())
        return failure

    def close(self) -> None:
        """Shut NVML down if this session initialised it."""
        if self._up and self._nvml is not None:
            self._up = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown failed", extra={"error": str(exc)})


def gpu_processes(nvml: Any) -> dict[int, list[tuple[int, int | None]]]:
    """Compute processes per GPU index: ``{0: [(pid, used_bytes or None)], ...}``.

    Takes and releases its own NVML reference (``nvmlInit``/``nvmlShutdown`` are reference counted),
    so it is safe next to a running :class:`NvmlCollector`. A GPU whose list cannot be read (lost,
    unsupported) maps to ``[]``. Raises ``nvml.NVMLError`` when NVML itself cannot be initialised.
    """
    mismatch: type[BaseException] | tuple[()] = getattr(nvml, "NVMLLibraryMismatchError", ())
    nvml.nvmlInit()
    try:
        out: dict[int, list[tuple[int, int | None]]] = {}
        for index in range(int(nvml.nvmlDeviceGetCount())):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                except mismatch:  # a driver before the _v3 call
                    procs = nvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)
            except nvml.NVMLError as exc:
                log.debug("compute processes unreadable", extra={"gpu": index, "error": str(exc)})
                out[index] = []
                continue
            out[index] = [(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                          for p in procs]
        return out
    finally:
        nvml.nvmlShutdown()
