"""The NVML collector: per-GPU health through a pynvml-compatible module (real or fake).

Contract:

- Series and labels are those of docs/nvml.md and :data:`watchdog.collectors.nvml_fields.NVML_SERIES`; every
  series carries ``gpu`` (NVML index) and ``uuid``; values are in base units.
- Errors are per call and per GPU. ``NOT_SUPPORTED`` (and a function or field the driver lacks) makes that
  series absent, quietly, and the call is not repeated until NVML is initialised again.
  ``GPU_IS_LOST`` / ``RESET_REQUIRED`` make ``watchdog_gpu_lost 1`` for that GPU (its other series are
  dropped) and the other GPUs go on. Any other NVML error on a call is counted in
  ``watchdog_gpu_nvml_errors_total{call,error}`` and that value is skipped.
- NVML absent (``pynvml`` not importable, LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED at init) raises
  :class:`NoData`: quiet, and ``nvmlInit`` is retried with exponential backoff, not every tick. Other init
  failures, and a session that breaks (UNINITIALIZED, driver reloaded), fail the collector with the same
  backoff before the next ``nvmlInit``.
- GPUs are read in parallel, each on its own daemon thread (a
  :class:`~watchdog.infra.workers.DaemonPool` of one per GPU, not a thread per read), and the collector
  waits for them together, at most
  ``gpu_deadline`` (0.8 × ``timeout_seconds``). A GPU whose read has not returned by then (NVML blocked
  on a sick GPU, e.g. GSP RPC timeouts) gets ``watchdog_gpu_nvml_stalled 1`` and its other series are
  skipped; the other GPUs are reported as usual, and the stalled read is not started again while it
  hangs. A call that hangs outside a GPU (``nvmlDeviceGetCount``) is bounded by the runner's timeout.
- Calls are batched: the ECC, row-remap, replay, energy, HBM-temperature, recovery-action and NVLink
  values of one GPU come from one ``nvmlDeviceGetFieldValues`` call (8 GPUs × 18 links: 8 calls), and
  static attributes (name, thresholds, max clocks, max PCIe link) are read once per ``static_refresh``.
- The counters (NVLink states and error counters, PCIe replays, ECC mode and corrected counts, remapped
  rows and their pending/failed flags: :data:`~watchdog.collectors.nvml_fields.COUNTER_SCALAR_SLOTS` and
  the NVLink slots) are read every ``counters_interval_seconds`` of tick time (``counters_clock``, the agent's
  clock), not every call, for every GPU at the same call; a GPU's first read after NVML (re)initialised or
  after it was lost, or after its static attributes were (re)read, reads its own at once. The counters
  and the series of the static attributes (temperature thresholds, max clocks, max PCIe link) are the
  collector's part :data:`COUNTERS_PART` (see :class:`~watchdog.collectors.base.Collected`), stored under
  ``collector:nvml:counters``: :meth:`collect` reports it only at a call that read counters or that
  changed which GPUs it covers (a GPU lost, stalled or back), holding every GPU read whole at that call
  (lost and stalled GPUs' are left out, so they go stale at once, as the rest of those GPUs' series do).
  Between reports the stored part stays as last read: not stale, no new point. Whether a GPU is lost
  (``GPU_IS_LOST``/``RESET_REQUIRED`` on any call), its recovery action, uncorrectable ECC counts,
  utilization, memory, temperatures, power, clocks, clock events and PCIe link are read and reported at
  every call.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

from watchdog.collectors import nvml_fields as F
from watchdog.collectors.base import Collected, Collector, CollectorContext, NoData, not_yet_due
from watchdog.config.settings import NvmlSettings, Settings, section_settings
from watchdog.infra.workers import DaemonPool
from watchdog.model import METRIC_NAME, Labels, Sample, make_labels, metric

log = logging.getLogger(__name__)
_perf_counter = time.perf_counter

#: ``Sample`` from a ``(labels, value)`` pair, in C (``Sample(labels, value)`` and ``Sample._make`` run Python code).
_sample: Callable[[tuple[Labels, float]], Sample] = functools.partial(tuple.__new__, Sample)

#: Memo key of the field-values call as a whole (a driver without it answers FUNCTION_NOT_FOUND).
FIELD_VALUES_MEMO: tuple[str, ...] = ("nvmlDeviceGetFieldValues",)

#: Field-slot keys read at every call; every other slot is a counter.
FAST_KEYS = frozenset(slot.key for slot in F.FAST_SCALAR_SLOTS)

#: The collector's part holding the counters (stored under ``collector:<name>:counters``).
COUNTERS_PART = "counters"


class NvmlUnavailable(Exception):
    """NVML is present but cannot be used now (init failed, session broke): the collector fails."""


class GpuGone(Exception):
    """A call on one GPU answered GPU_IS_LOST or RESET_REQUIRED."""

    def __init__(self, code: int) -> None:
        super().__init__(F.error_name(code))
        self.code = code


class SessionBroken(Exception):
    """A call answered that the NVML session itself is unusable (UNINITIALIZED, driver gone)."""

    def __init__(self, code: int) -> None:
        super().__init__(F.error_name(code))
        self.code = code


def import_pynvml() -> Any:
    """The real ``pynvml`` module (nvidia-ml-py); :class:`NoData` when it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise NoData(f"pynvml is not importable: {exc}") from exc


def _text(value: Any) -> str:
    """NVML strings arrive as str (pynvml on Python 3) or bytes (structure fields, old pynvml)."""
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value)


def _error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None


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
                 errors: Counter[tuple[int, str, str]], stats: CallStats,
                 errors_lock: threading.Lock | None = None,
                 mismatch: type[BaseException] | tuple[()] | None = None) -> None:
        """``mismatch``: the module's ``NVMLLibraryMismatchError`` (looked up when None; ``()`` if none)."""
        self.nvml = nvml
        self.index = index
        self.unsupported = unsupported
        self.errors = errors
        self.errors_lock = errors_lock or threading.Lock()
        self.stats = stats
        self._seconds, self._calls = stats.seconds, stats.calls
        self.mismatch: type[BaseException] | tuple[()] = (
            getattr(nvml, "NVMLLibraryMismatchError", ()) if mismatch is None else mismatch)

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
        started = _perf_counter()
        try:
            return fn(*args)
        except self.mismatch:
            # pynvml's unversioned wrappers on a driver without the versioned symbol
            self.unsupported.add(key)
            return None
        except self.nvml.NVMLError as exc:
            code = _error_code(exc)
            if code in F.GPU_GONE_CODES:
                raise GpuGone(code or F.NVML_ERROR_GPU_IS_LOST) from exc
            if code in F.UNSUPPORTED_CODES:
                self.unsupported.add(key)
                return None
            if code in F.SESSION_BROKEN_CODES:
                raise SessionBroken(code or F.NVML_ERROR_UNINITIALIZED) from exc
            self.count_error(name, code)
            return None
        finally:
            self._seconds[group] += _perf_counter() - started
            self._calls[group] += 1

    def count_error(self, call: str, code: int | None) -> None:
        """Count one failed call (``watchdog_gpu_nvml_errors_total``); GPUs are read in parallel."""
        with self.errors_lock:
            self.errors[(self.index, call, F.error_name(code))] += 1


@dataclass
class StaticInfo:
    """Per-GPU attributes that do not change while the driver is loaded (re-read now and then)."""

    name: str
    uuid: str
    serial: str
    pci_bus_id: str
    thresholds: dict[str, float]
    sm_clock_max_hz: float | None
    memory_clock_max_hz: float | None
    pcie_max_generation: int | None
    pcie_gpu_max_generation: int | None
    pcie_max_width: int | None
    supported_reasons: int | None
    link_count: int
    read_at: float


@dataclass
class GpuRead:
    """What one call read of one GPU."""

    samples: list[Sample]
    stats: CallStats
    counters: list[Sample] | None = None
    """The GPU's counters as last read, when this call read the GPU whole (not lost, not unreachable)."""
    fresh: bool = False
    """Whether this call read the counters."""


LabelCache = dict[Any, Labels]
SettledPairs = list[tuple[tuple[Any, ...], F.FieldRequest]]
#: Per settled plan (by identity): the plan, and per pair its request, series and whether it is read every call.
SettledCache = dict[int, tuple[SettledPairs, tuple[tuple[F.FieldRequest, "FieldSeries", bool], ...]]]
Convert = Callable[[float], float] | None  # None: the value as it is
FieldSeries = tuple[tuple[Labels, Convert], ...]
FieldCache = dict[tuple[Any, ...], FieldSeries]


def _is_code(code: int, value: float) -> float:
    return float(int(value) == code)


def field_series(key: tuple[Any, ...]) -> list[tuple[str, dict[str, str], Convert]]:
    """The series one field-slot value becomes: (name, labels beyond gpu/uuid, value conversion or None
    for the value as it is) each."""
    head = key[0]
    if head == "memory_temperature":
        return [("watchdog_gpu_memory_temperature_celsius", {}, None)]
    if head == "energy_mj":
        return [("watchdog_gpu_energy_joules_total", {}, lambda v: v / 1000.0)]
    if head == "pcie_replays":
        return [("watchdog_gpu_pcie_replays_total", {}, None)]
    if head == "ecc_mode":
        return [("watchdog_gpu_ecc_mode_enabled", {}, lambda v: float(v == F.NVML_FEATURE_ENABLED))]
    if head == "ecc":
        return [("watchdog_gpu_ecc_errors_total", {"type": key[1], "scope": key[2]}, None)]
    if head == "remapped":
        return [("watchdog_gpu_remapped_rows", {"kind": key[1]}, None)]
    if head == "remap_pending":
        return [("watchdog_gpu_row_remap_pending", {}, lambda v: float(v != 0))]
    if head == "remap_failed":
        return [("watchdog_gpu_row_remap_failed", {}, lambda v: float(v != 0))]
    if head == "recovery_action":
        return [("watchdog_gpu_recovery_action", {"action": action},
                 functools.partial(_is_code, code))
                for code, action in F.RECOVERY_ACTIONS.items()]
    if head == "nvlink" and key[2] == "state":
        # 1 = active (field and legacy call alike), 2 = sleep (idle power saving, still trained).
        return [("watchdog_gpu_nvlink_up", {"link": str(key[1])}, lambda v: float(int(v) in (1, 2)))]
    if head == "nvlink":
        return [("watchdog_gpu_nvlink_errors_total", {"link": str(key[1]), "type": key[2]}, None)]
    return []


class SampleSink:
    """Collects the samples of one GPU, adding ``gpu`` and ``uuid`` to each.

    ``cache``, ``fields`` and ``settled`` keep the label tuples of this GPU across ticks (the same ~130
    series every tick), so that a steady tick builds no new label sets; they must belong to this ``gpu``
    and ``uuid`` only.
    """

    def __init__(self, gpu: int, uuid: str, cache: LabelCache | None = None,
                 fields: FieldCache | None = None, settled: SettledCache | None = None) -> None:
        self.gpu = str(gpu)
        self.uuid = uuid
        self.cache: LabelCache = {} if cache is None else cache
        self.fields: FieldCache = {} if fields is None else fields
        self.settled: SettledCache = {} if settled is None else settled
        self.samples: list[Sample] = []

    def add(self, name: str, value: float | None, **labels: str) -> None:
        """Append one sample unless ``value`` is None (not read)."""
        if value is None:
            return
        key = (name, *labels.items()) if labels else name
        cached = self.cache.get(key)
        if cached is None:
            cached = self.cache[key] = metric(name, gpu=self.gpu, uuid=self.uuid, **labels)
        self.samples.append(_sample((cached, float(value))))

    def add_flags(self, name: str, label: str, flags: dict[str, float]) -> None:
        """Append one sample per ``flags`` item, ``label`` set to its key (the label sets of each distinct
        key sequence are kept with the field series)."""
        key = (name, label, *flags)
        series = self.fields.get(key)
        if series is None:
            series = self.fields[key] = tuple((metric(name, gpu=self.gpu, uuid=self.uuid, **{label: value}), None)
                                              for value in flags)
        self.samples.extend([_sample((labels, value))
                             for (labels, _), value in zip(series, flags.values(), strict=True)])

    def sibling(self) -> SampleSink:
        """An empty sink for the same GPU, sharing this one's label caches."""
        sink = SampleSink(0, self.uuid, self.cache, self.fields, self.settled)
        sink.gpu = self.gpu
        return sink

    def add_settled(self, pairs: SettledPairs, entries: Sequence[Any], counters: SampleSink | None) -> bool:
        """The samples of a settled field plan (:meth:`FieldPlanner.plan`) straight from the
        ``nvmlFieldValue_t`` entries answering its requests, in order: those of the values read at every
        call here, the counters' into ``counters`` (when given), in the plan's order, as :meth:`add_field`
        would append them one by one. Returns False, having appended nothing, unless every entry is a
        success for the request at its place (then the planner's bookkeeping decides)."""
        known = self.settled.get(id(pairs))
        if known is None or known[0] is not pairs:
            if len(self.settled) >= 8:  # a GPU has two or three plans; never grow without bound
                self.settled.clear()
            known = self.settled[id(pairs)] = (pairs, tuple(
                (request, self._series(key), key in FAST_KEYS) for key, request in pairs))
        plan = known[1]
        if len(plan) != len(entries):
            return False
        read: list[tuple[float, FieldSeries, bool]] = []
        decode = F.decode_field_value
        for (request, series, fast), entry in zip(plan, entries, strict=True):
            if entry.nvmlReturn != F.NVML_SUCCESS or entry.fieldId != request[0] or entry.scopeId != request[1]:
                return False
            read.append((decode(entry), series, fast))
        here = self.samples.append
        there = here if counters is None else counters.samples.append
        for value, series, fast in read:
            append = here if fast else there
            for labels, convert in series:
                append(_sample((labels, float(value if convert is None else convert(value)))))
        return True

    def _series(self, key: tuple[Any, ...]) -> FieldSeries:
        """The series of one field-slot value, with this GPU's labels (see :func:`field_series`)."""
        series = self.fields.get(key)
        if series is None:
            series = self.fields[key] = tuple(
                (metric(name, gpu=self.gpu, uuid=self.uuid, **labels), convert)
                for name, labels, convert in field_series(key))
        return series

    def add_field(self, key: tuple[Any, ...], value: float) -> None:
        """Append the samples of one field-slot value (see :func:`field_series`)."""
        series = self._series(key)
        append = self.samples.append
        for labels, convert in series:
            append(_sample((labels, float(value if convert is None else convert(value)))))


class FieldPlanner:
    """Which field requests to send for one GPU, learning from the answers.

    A slot whose candidates are all unsupported is dropped; a slot answered by one candidate keeps only
    that one. Pure bookkeeping; the caller makes the NVML calls. Once every slot of a plan has settled
    (the usual tick), the requests and the slot each answer belongs to are remembered for that slots
    tuple (pass the same objects each tick; a few are kept) until a choice changes, so a steady tick
    plans nothing anew.
    """

    def __init__(self) -> None:
        self.chosen: dict[tuple[Any, ...], F.FieldRequest | None] = {}
        self._version = 0  # bumped whenever a choice changes
        # per slots tuple (by identity: the every-call and the counters plan): (slots, version, plan)
        self._plans: dict[int, tuple[tuple[F.FieldSlot, ...], int, list[F.FieldRequest],
                                     list[tuple[tuple[Any, ...], F.FieldRequest]] | None]] = {}

    def _choose(self, key: tuple[Any, ...], request: F.FieldRequest | None) -> None:
        if key not in self.chosen or self.chosen[key] != request:
            self.chosen[key] = request
            self._version += 1

    def _planned(self, slots: Sequence[F.FieldSlot]) -> tuple[list[F.FieldRequest], SettledPairs | None]:
        """(requests, the (slot key, chosen request) pairs when every slot has settled, else None)."""
        plan = self._plans.get(id(slots))
        if plan is not None and plan[0] is slots and plan[1] == self._version:
            return plan[2], plan[3]
        out: dict[F.FieldRequest, None] = {}
        pairs: list[tuple[tuple[Any, ...], F.FieldRequest]] | None = []
        for slot in slots:
            if slot.key in self.chosen:
                choice = self.chosen[slot.key]
                if choice is not None:
                    out[choice] = None
                    if pairs is not None:
                        pairs.append((slot.key, choice))
            else:
                out.update(dict.fromkeys(slot.candidates))
                pairs = None
        requests = list(out)
        if isinstance(slots, tuple):
            if len(self._plans) >= 8:  # a GPU uses two or three slot tuples; never grow without bound
                self._plans.clear()
            self._plans[id(slots)] = (slots, self._version, requests, pairs)
        return requests, pairs

    def requests(self, slots: Sequence[F.FieldSlot]) -> list[F.FieldRequest]:
        """Unique requests, in slot order, for every slot still worth asking (do not modify the list)."""
        return self._planned(slots)[0]

    def plan(self, slots: Sequence[F.FieldSlot]) -> tuple[list[F.FieldRequest], SettledPairs | None]:
        """:meth:`requests`, and the (slot key, chosen request) pairs in slot order when every slot has
        settled (else None): the same list object while no choice changes (do not modify either)."""
        return self._planned(slots)

    def resolve(self, slots: Sequence[F.FieldSlot], answers: dict[F.FieldRequest, tuple[int, float]],
                ) -> tuple[dict[tuple[Any, ...], float], list[F.FieldRequest]]:
        """Values per slot key from ``answers`` (request → (nvmlReturn, value)), and the requests that
        failed with an unexpected error. Raises :class:`GpuGone` when any answer says so."""
        pairs = self._planned(slots)[1]
        if pairs is not None:  # every slot settled: the usual tick, every answer a success
            settled: dict[tuple[Any, ...], float] = {}
            for key, settled_request in pairs:
                answer = answers.get(settled_request)
                if answer is None or answer[0] != F.NVML_SUCCESS:
                    break  # anything else: the full bookkeeping below
                settled[key] = answer[1]
            else:
                return settled, []
        values: dict[tuple[Any, ...], float] = {}
        failed: list[F.FieldRequest] = []
        for slot in slots:
            if slot.key in self.chosen and self.chosen[slot.key] is None:
                continue
            candidates = [self.chosen[slot.key]] if slot.key in self.chosen else list(slot.candidates)
            unsupported = 0
            for request in candidates:
                assert request is not None
                if request not in answers:
                    continue
                ret, value = answers[request]
                if ret == F.NVML_SUCCESS:
                    values[slot.key] = value
                    self._choose(slot.key, request)
                    break
                if ret in F.GPU_GONE_CODES:
                    raise GpuGone(ret)
                if ret in F.UNSUPPORTED_CODES or ret == F.NVML_ERROR_INVALID_ARGUMENT:
                    unsupported += 1
                else:
                    failed.append(request)
            if slot.key not in values and unsupported == len(candidates):
                self._choose(slot.key, None)
        return values, failed

    def unanswerable(self, keys: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Those of ``keys`` no field can answer on this GPU (all candidates unsupported), in order."""
        return [key for key in keys if key in self.chosen and self.chosen[key] is None]


class NvmlCollector(Collector):
    """Reads every GPU through NVML once per :meth:`collect`. See the module docstring."""

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
        self.nvlink = settings.nvlink
        self.processes = settings.processes
        self.static_refresh_seconds = settings.static_refresh_seconds
        self.counters_interval_seconds = settings.counters_interval_seconds
        self.backoff_initial_seconds = backoff_initial_seconds
        self.backoff_max_seconds = settings.init_backoff_max_seconds
        self._nvml = nvml
        self._clock = clock
        self._counters_clock = counters_clock or clock
        self._import_module = import_module
        self._up = False
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._last_failure: Exception | None = None
        self._driver_version = ""
        self._static: dict[int, StaticInfo] = {}
        self._identity: dict[int, tuple[str, str, str, str]] = {}  # name, uuid, serial, pci: outlives loss
        self._unsupported: dict[int, set[tuple[Any, ...]]] = defaultdict(set)
        self._planners: dict[int, FieldPlanner] = defaultdict(FieldPlanner)
        self._slot_plans: dict[int, tuple[F.FieldSlot, ...]] = {}
        self._counters: dict[int, list[Sample]] = {}  # GPU -> its counters as last read
        self._counters_read_at: float | None = None  # when every GPU's counters were last due
        self._counters_due = True  # whether this call reads every GPU's counters
        self._counters_reported: tuple[int, ...] | None = None  # the GPUs of the last report (None: report)
        self._errors: Counter[tuple[int, str, str]] = Counter()
        self._errors_lock = threading.Lock()
        self._gone: dict[int, int] = {}
        self._inflight: dict[int, Future[GpuRead]] = {}
        self._workers: dict[int, DaemonPool] = {}  # one thread per GPU
        self._labels: dict[int, tuple[str, LabelCache, FieldCache, SettledCache]] = {}
        # GPU -> ((identity, driver version), its watchdog_gpu_info labels)
        self._info_labels: dict[int, tuple[tuple[tuple[str, str, str, str], str], Labels]] = {}
        self.gpu_deadline_seconds = 0.8 * self.timeout_seconds
        self._stats_parts: list[CallStats] = []  # the last collection's: its own, then each GPU read's
        self._mismatch: type[BaseException] | tuple[()] | None = None

    @property
    def last_stats(self) -> CallStats:
        """Time and number of NVML calls per call group in the last collection (merged when asked: only
        ``scripts/gpu-smoke`` reads them)."""
        merged = CallStats()
        for part in self._stats_parts:
            merged.merge(part)
        return merged

    @property
    def driver_version(self) -> str:
        """The driver version NVML reported at the last successful init ("" before that)."""
        return self._driver_version

    # ---- session -------------------------------------------------------------------------------
    def _module(self) -> Any:
        if self._nvml is None:
            self._nvml = self._import_module()
        return self._nvml

    def _open(self) -> Any:
        """The initialised NVML module, or raise NoData / NvmlUnavailable (with backoff)."""
        if self._up:
            return self._module()
        now = self._clock()
        if now < self._next_attempt and self._last_failure is not None:
            raise self._last_failure
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            code = _error_code(exc)
            failure: Exception
            if code in F.NVML_ABSENT_CODES:
                failure = NoData(f"NVML absent: {exc}")
            else:
                failure = NvmlUnavailable(f"nvmlInit failed: {exc} ({F.error_name(code)})")
            self._fail_session(failure, now)
            raise failure from exc
        self._up = True
        self._backoff = 0.0
        self._last_failure = None
        self._static.clear()
        self._unsupported.clear()
        self._planners.clear()
        self._counters.clear()
        self._driver_version = ""
        try:
            self._driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as exc:
            log.warning("nvmlSystemGetDriverVersion failed", extra={"error": str(exc)})
        log.info("NVML initialised", extra={"driver_version": self._driver_version})
        return nvml

    def _fail_session(self, failure: Exception, now: float) -> None:
        if self._last_failure is None or type(self._last_failure) is not type(failure):
            log.warning("NVML unavailable", extra={"collector": self.name, "error": str(failure)})
        self._backoff = (min(self.backoff_max_seconds, self._backoff * 2) if self._backoff
                         else self.backoff_initial_seconds)
        self._next_attempt = now + self._backoff
        self._last_failure = failure

    def _break_session(self, nvml: Any, code: int) -> NvmlUnavailable:
        """Shut the broken session down; the next attempt is after the backoff."""
        self._up = False
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            log.debug("nvmlShutdown after a broken session failed", extra={"error": str(exc)})
        failure = NvmlUnavailable(f"NVML session broke: {F.error_name(code)}")
        self._fail_session(failure, self._clock())
        return failure

    def close(self) -> None:
        """Shut NVML down if this collector initialised it; the GPUs' worker threads end after their reads."""
        for worker in self._workers.values():
            worker.shutdown()
        self._workers.clear()
        if self._up and self._nvml is not None:
            self._up = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown failed", extra={"error": str(exc)})

    # ---- collection ----------------------------------------------------------------------------
    def collect(self) -> Collected:
        """One sample per series per GPU, the counters in their part when reported; see the module
        docstring for the error contract."""
        nvml = self._open()
        reported, self._counters_reported = self._counters_reported, None  # a call that raises reports next time
        now = self._counters_clock()
        read_at = self._counters_read_at
        self._counters_due = read_at is None or not self._counters_fresh(read_at, now)
        if self._counters_due:
            self._counters_read_at = now
        stats = CallStats()
        self._stats_parts = parts = [stats]
        try:
            started = time.perf_counter()
            count = int(nvml.nvmlDeviceGetCount())
            stats.seconds["count"] += time.perf_counter() - started
            stats.calls["count"] += 1
        except nvml.NVMLError as exc:
            code = _error_code(exc)
            raise self._break_session(nvml, code if code is not None else F.NVML_ERROR_UNKNOWN) from exc
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
            self._inflight[index] = reads[index] = worker.submit(self._read_gpu, nvml, index)
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
            raise self._break_session(nvml, broken.code) from broken
        for index in sorted(stalled):
            samples.extend(self._stalled_samples(index))
        samples.extend(self._error_samples())
        shown = tuple(counters)
        self._counters_reported = shown
        if not fresh and shown == reported:
            return Collected(samples)
        return Collected(samples, {COUNTERS_PART: [s for gpu_counters in counters.values() for s in gpu_counters]})

    def _read_gpu(self, nvml: Any, index: int) -> GpuRead:
        return self._collect_gpu(nvml, index, CallStats())

    def _stalled_samples(self, index: int) -> list[Sample]:
        """A GPU whose read did not return in time: its identity and the stall, nothing else."""
        log.warning("NVML read of a GPU stalled", extra={"gpu": index,
                                                         "deadline_seconds": self.gpu_deadline_seconds})
        uuid = self._identity.get(index, ("", "", "", ""))[1]
        sink = SampleSink(index, uuid)
        sink.add("watchdog_gpu_nvml_stalled", 1.0)
        return self._info_samples(index) + sink.samples

    def _error_samples(self) -> list[Sample]:
        out: list[Sample] = []
        with self._errors_lock:
            errors = sorted(self._errors.items())
        for (index, call, error), n in errors:
            uuid = self._identity.get(index, ("", "", "", ""))[1]
            out.append(Sample(metric("watchdog_gpu_nvml_errors_total", gpu=str(index), uuid=uuid,
                                     call=call, error=error), float(n)))
        return out

    def _collect_gpu(self, nvml: Any, index: int, stats: CallStats) -> GpuRead:
        if self._mismatch is None:
            self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", ())
        calls = GpuCalls(nvml, index, self._unsupported[index], self._errors, stats, self._errors_lock,
                         self._mismatch)
        try:
            handle = self._handle(calls, index)
            if handle is None:
                return GpuRead([], stats)
            info = self._static_info(calls, handle, index)
            sink = SampleSink(index, info.uuid, *self._label_caches(index, info.uuid))
            fresh = self._read_dynamic(calls, handle, info, sink)
        except GpuGone as gone:
            return GpuRead(self._gone_samples(index, gone.code), stats)
        if index in self._gone:
            log.warning("GPU is back", extra={"gpu": index})
            del self._gone[index]
        sink.add("watchdog_gpu_lost", 0.0)
        sink.add("watchdog_gpu_reset_required", 0.0)
        sink.add("watchdog_gpu_nvml_stalled", 0.0)
        return GpuRead(self._info_samples(index) + sink.samples, stats, self._counters.get(index), fresh)

    def _handle(self, calls: GpuCalls, index: int) -> Any | None:
        started = time.perf_counter()
        nvml = calls.nvml
        try:
            return nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            code = _error_code(exc)
            if code in F.GPU_GONE_CODES:
                raise GpuGone(code or F.NVML_ERROR_GPU_IS_LOST) from exc
            if code in F.SESSION_BROKEN_CODES:
                raise SessionBroken(code or F.NVML_ERROR_UNINITIALIZED) from exc
            calls.count_error("nvmlDeviceGetHandleByIndex", code)
            return None
        finally:
            calls.stats.seconds["identity"] += time.perf_counter() - started
            calls.stats.calls["identity"] += 1

    def _label_caches(self, index: int, uuid: str) -> tuple[LabelCache, FieldCache, SettledCache]:
        """This GPU's label caches, new whenever the GPU at ``index`` has another uuid."""
        known = self._labels.get(index)
        if known is None or known[0] != uuid:
            known = self._labels[index] = (uuid, {}, {}, {})
        return known[1], known[2], known[3]

    def _gone_samples(self, index: int, code: int) -> list[Sample]:
        if self._gone.get(index) != code:
            log.warning("GPU lost", extra={"gpu": index, "error": F.error_name(code)})
        self._gone[index] = code
        # Re-learn everything about this GPU once it is back (a reset may change what it supports).
        self._static.pop(index, None)
        self._unsupported.pop(index, None)
        self._planners.pop(index, None)
        self._counters.pop(index, None)
        uuid = self._identity.get(index, ("", "", "", ""))[1]
        sink = SampleSink(index, uuid)
        sink.add("watchdog_gpu_lost", 1.0)
        sink.add("watchdog_gpu_reset_required", 1.0 if code == F.NVML_ERROR_RESET_REQUIRED else 0.0)
        sink.add("watchdog_gpu_nvml_stalled", 0.0)
        return self._info_samples(index) + sink.samples

    def _info_samples(self, index: int) -> list[Sample]:
        identity = self._identity.get(index)
        if identity is None:
            return []
        known = self._info_labels.get(index)
        if known is None or known[0] != (identity, self._driver_version):
            name, uuid, serial, pci = identity
            labels = make_labels({METRIC_NAME: "watchdog_gpu_info", "gpu": str(index), "uuid": uuid, "name": name,
                                  "pci_bus_id": pci, "driver_version": self._driver_version, "serial": serial})
            known = self._info_labels[index] = ((identity, self._driver_version), labels)
        return [_sample((known[1], 1.0))]

    # ---- static attributes ---------------------------------------------------------------------
    def _static_info(self, calls: GpuCalls, handle: Any, index: int) -> StaticInfo:
        now = self._clock()
        cached = self._static.get(index)
        if cached is not None and now - cached.read_at < self.static_refresh_seconds:
            return cached
        g = "identity"
        pci = calls.call(g, "nvmlDeviceGetPciInfo", handle)
        info = StaticInfo(
            name=_text(calls.call(g, "nvmlDeviceGetName", handle) or ""),
            uuid=_text(calls.call(g, "nvmlDeviceGetUUID", handle) or ""),
            serial=_text(calls.call(g, "nvmlDeviceGetSerial", handle) or ""),
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            thresholds={},
            sm_clock_max_hz=None, memory_clock_max_hz=None,
            pcie_max_generation=calls.call("pcie", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_gpu_max_generation=calls.call("pcie", "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
            pcie_max_width=calls.call("pcie", "nvmlDeviceGetMaxPcieLinkWidth", handle),
            supported_reasons=None,
            link_count=0,
            read_at=now,
        )
        for kind, threshold in F.TEMPERATURE_THRESHOLDS.items():
            value = calls.call("thermal", "nvmlDeviceGetTemperatureThreshold", handle, threshold)
            if value is not None:
                info.thresholds[kind] = float(value)
        sm_max = calls.call("clocks", "nvmlDeviceGetMaxClockInfo", handle, F.NVML_CLOCK_SM)
        mem_max = calls.call("clocks", "nvmlDeviceGetMaxClockInfo", handle, F.NVML_CLOCK_MEM)
        info.sm_clock_max_hz = None if sm_max is None else float(sm_max) * 1e6
        info.memory_clock_max_hz = None if mem_max is None else float(mem_max) * 1e6
        supported = calls.call("clock_events", "nvmlDeviceGetSupportedClocksEventReasons", handle)
        if supported is None:
            supported = calls.call("clock_events", "nvmlDeviceGetSupportedClocksThrottleReasons", handle)
        info.supported_reasons = None if supported is None else int(supported)
        if self.nvlink:
            info.link_count = self._link_count(calls, handle, index)
        self._static[index] = info
        self._identity[index] = (info.name, info.uuid, info.serial, info.pci_bus_id)
        self._counters.pop(index, None)  # its static series are reported with its counters: both at once
        return info

    def _link_count(self, calls: GpuCalls, handle: Any, index: int) -> int:
        """NVLinks of this GPU: the link-count field, else probe the legacy per-link state call."""
        planner = self._planners[index]
        slots = (F.LINK_COUNT_SLOT,)
        answers = self._field_answers(calls, handle, planner.requests(slots))
        if answers is not None:
            values, _ = planner.resolve(slots, answers)
            if ("nvlink_count",) in values:
                return int(values[("nvlink_count",)])
        links = 0
        for link in range(F.LEGACY_MAX_LINKS):
            if calls.call("nvlink", "nvmlDeviceGetNvLinkState", handle, link) is None:
                break
            links += 1
        return links

    # ---- dynamic values ------------------------------------------------------------------------
    def _read_dynamic(self, calls: GpuCalls, handle: Any, info: StaticInfo, sink: SampleSink) -> bool:
        """The values read at every call into ``sink``; when this call reads the counters (every GPU's are
        due, or this GPU has none yet), the counters and the static attributes' series too, kept as this
        GPU's slow samples in ``_counters``. Returns whether it read the counters."""
        slow = sink.sibling() if self._counters_due or calls.index not in self._counters else None
        util = calls.call("utilization", "nvmlDeviceGetUtilizationRates", handle)
        if util is not None:
            sink.add("watchdog_gpu_utilization_ratio", util.gpu / 100.0)
            sink.add("watchdog_gpu_memory_utilization_ratio", util.memory / 100.0)
        self._read_memory(calls, handle, sink)
        temperature = calls.call("thermal", "nvmlDeviceGetTemperatureV", handle, F.NVML_TEMPERATURE_GPU)
        if temperature is None:
            temperature = calls.call("thermal", "nvmlDeviceGetTemperature", handle, F.NVML_TEMPERATURE_GPU)
        sink.add("watchdog_gpu_temperature_celsius", temperature)
        power = calls.call("power", "nvmlDeviceGetPowerUsage", handle)
        sink.add("watchdog_gpu_power_watts", None if power is None else power / 1000.0)
        limit = calls.call("power", "nvmlDeviceGetEnforcedPowerLimit", handle)
        sink.add("watchdog_gpu_power_limit_watts", None if limit is None else limit / 1000.0)
        sm = calls.call("clocks", "nvmlDeviceGetClockInfo", handle, F.NVML_CLOCK_SM)
        sink.add("watchdog_gpu_sm_clock_hertz", None if sm is None else sm * 1e6)
        mem = calls.call("clocks", "nvmlDeviceGetClockInfo", handle, F.NVML_CLOCK_MEM)
        sink.add("watchdog_gpu_memory_clock_hertz", None if mem is None else mem * 1e6)
        reasons = calls.call("clock_events", "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:
            reasons = calls.call("clock_events", "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        if reasons is not None:
            sink.add_flags("watchdog_gpu_clock_event_active", "reason",
                           F.clock_event_flags(int(reasons), info.supported_reasons))
        g = "pcie"
        sink.add("watchdog_gpu_pcie_link_generation",
                 calls.call(g, "nvmlDeviceGetCurrPcieLinkGeneration", handle), kind="current")
        sink.add("watchdog_gpu_pcie_link_width", calls.call(g, "nvmlDeviceGetCurrPcieLinkWidth", handle),
                 kind="current")
        persistence = calls.call("identity", "nvmlDeviceGetPersistenceMode", handle)
        sink.add("watchdog_gpu_persistence_mode_enabled",
                 None if persistence is None else float(persistence == F.NVML_FEATURE_ENABLED))
        self._read_fields(calls, handle, info, sink, slow)
        if self.processes:
            self._read_processes(calls, handle, sink)
        if slow is None:
            return False
        self._static_samples(info, slow)
        self._counters[calls.index] = slow.samples
        return True

    def _read_memory(self, calls: GpuCalls, handle: Any, sink: SampleSink) -> None:
        memory = calls.call("memory", "nvmlDeviceGetMemoryInfo", handle, F.NVML_MEMORY_V2)
        if memory is not None:
            sink.add("watchdog_gpu_memory_reserved_bytes", memory.reserved)
        else:
            memory = calls.call("memory", "nvmlDeviceGetMemoryInfo", handle)
        if memory is not None:
            sink.add("watchdog_gpu_memory_used_bytes", memory.used)
            sink.add("watchdog_gpu_memory_total_bytes", memory.total)

    @staticmethod
    def _static_samples(info: StaticInfo, sink: SampleSink) -> None:
        """The series of the static attributes (thresholds, max clocks, max PCIe link): reported with the
        counters."""
        for kind, value in info.thresholds.items():
            sink.add("watchdog_gpu_temperature_threshold_celsius", value, kind=kind)
        sink.add("watchdog_gpu_sm_clock_max_hertz", info.sm_clock_max_hz)
        sink.add("watchdog_gpu_memory_clock_max_hertz", info.memory_clock_max_hz)
        sink.add("watchdog_gpu_pcie_link_generation", info.pcie_max_generation, kind="max")
        sink.add("watchdog_gpu_pcie_link_generation", info.pcie_gpu_max_generation, kind="gpu_max")
        sink.add("watchdog_gpu_pcie_link_width", info.pcie_max_width, kind="max")

    def _field_batches(self, calls: GpuCalls, handle: Any, requests: list[F.FieldRequest],
                       ) -> list[Any] | None:
        """The entries of each batched ``nvmlDeviceGetFieldValues`` call for ``requests`` (None for a batch
        whose call failed: counted as an error, its values skipped this tick); None when the call itself is
        unavailable (old driver)."""
        batches: list[Any] = []
        for batch in F.chunked(requests):
            entries = calls.call("fields", "nvmlDeviceGetFieldValues", handle, batch, memo=FIELD_VALUES_MEMO)
            if entries is None and FIELD_VALUES_MEMO in calls.unsupported:
                return None
            batches.append(entries)
        return batches

    @staticmethod
    def _answers(batches: list[Any]) -> dict[F.FieldRequest, tuple[int, float]]:
        """(nvmlReturn, value) per request answered in ``batches`` (see :meth:`_field_batches`)."""
        answers: dict[F.FieldRequest, tuple[int, float]] = {}
        decode = F.decode_field_value
        for entries in batches:
            for entry in entries or ():
                ret = int(entry.nvmlReturn)
                answers[(int(entry.fieldId), int(entry.scopeId))] = (ret, decode(entry) if ret == 0 else 0.0)
        return answers

    def _field_answers(self, calls: GpuCalls, handle: Any, requests: list[F.FieldRequest],
                       ) -> dict[F.FieldRequest, tuple[int, float]] | None:
        """Answers per request from batched ``nvmlDeviceGetFieldValues`` calls; None when the call
        itself is unavailable (old driver)."""
        batches = self._field_batches(calls, handle, requests)
        return None if batches is None else self._answers(batches)

    def _read_fields(self, calls: GpuCalls, handle: Any, info: StaticInfo, sink: SampleSink,
                     counters: SampleSink | None) -> None:
        """The field-slot values: those read at every call into ``sink``; with ``counters``, the counters
        too, into it."""
        full = counters is not None
        slots = self._slots(info.link_count) if full else F.FAST_SCALAR_SLOTS
        values: dict[tuple[Any, ...], float] = {}
        batches = None
        if FIELD_VALUES_MEMO not in calls.unsupported:
            planner = self._planners[calls.index]
            requests, pairs = planner.plan(slots)
            batches = self._field_batches(calls, handle, requests)
            if batches is not None:
                settled = pairs is not None and None not in batches and sink.add_settled(
                    pairs, batches[0] if len(batches) == 1 else [e for entries in batches for e in entries],
                    counters)
                if not settled:
                    answers = self._answers(batches)
                    values, failed = planner.resolve(slots, answers)
                    for fid, scope in failed:
                        calls.count_error(f"nvmlDeviceGetFieldValues[{fid}]", answers[(fid, scope)][0])
                if full:
                    self._legacy_nvlink(calls, handle, info, values, planner)
        if batches is None:
            values = self._direct_values(calls, handle, info, full)
        if counters is None:
            for key, value in values.items():
                sink.add_field(key, value)
            return
        for key, value in values.items():
            (sink if key in FAST_KEYS else counters).add_field(key, value)

    def _counters_fresh(self, read_at: float, now: float) -> bool:
        """Whether counters read at ``read_at`` are still to be reported as they are at ``now``."""
        every = self.counters_interval_seconds
        return every > 0 and not_yet_due(read_at, now, every)

    def _slots(self, link_count: int) -> tuple[F.FieldSlot, ...]:
        """Every field slot (the counters' included), one tuple per link count (the planner remembers its
        plan for each)."""
        if not self.nvlink:
            return F.SCALAR_SLOTS
        slots = self._slot_plans.get(link_count)
        if slots is None:
            slots = self._slot_plans[link_count] = F.SCALAR_SLOTS + F.all_nvlink_slots(link_count)
        return slots

    def _legacy_nvlink(self, calls: GpuCalls, handle: Any, info: StaticInfo,
                       values: dict[tuple[Any, ...], float], planner: FieldPlanner | None) -> None:
        """Per-link calls for NVLink values that no field can answer (drivers before the scoped fields);
        with ``planner`` None, for every NVLink value (drivers without field values)."""
        if not self.nvlink:
            return

        keys = self._legacy_keys(info.link_count)
        for key in keys if planner is None else planner.unanswerable(keys):
            if key in values:
                continue
            link, kind = key[1], key[2]
            if kind == "state":
                value = calls.call("nvlink", "nvmlDeviceGetNvLinkState", handle, link)
            else:
                value = calls.call("nvlink", "nvmlDeviceGetNvLinkErrorCounter", handle, link,
                                   F.NVLINK_LEGACY_COUNTERS[kind])
            if value is not None:
                values[key] = float(value)

    @staticmethod
    @functools.lru_cache(maxsize=8)
    def _legacy_keys(link_count: int) -> tuple[tuple[Any, ...], ...]:
        """The NVLink value keys of the per-link calls, in call order (per link: state, then counters)."""
        return tuple(("nvlink", link, kind) for link in range(link_count)
                     for kind in ("state", *F.NVLINK_LEGACY_COUNTERS))

    def _direct_values(self, calls: GpuCalls, handle: Any, info: StaticInfo,
                       counters: bool) -> dict[tuple[Any, ...], float]:
        """The field-slot values through the dedicated calls, for drivers without field values (the
        counters only when ``counters``)."""
        values: dict[tuple[Any, ...], float] = {}

        def put(key: tuple[Any, ...], value: Any) -> None:
            if value is not None:
                values[key] = float(value)

        put(("energy_mj",), calls.call("power", "nvmlDeviceGetTotalEnergyConsumption", handle))
        for kind, error_type in (("corrected", F.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                                 ("uncorrected", F.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            if kind == "corrected" and not counters:
                continue
            for scope, counter in (("volatile", F.NVML_VOLATILE_ECC), ("aggregate", F.NVML_AGGREGATE_ECC)):
                put(("ecc", kind, scope), calls.call("ecc", "nvmlDeviceGetTotalEccErrors", handle,
                                                     error_type, counter))
        if not counters:
            return values
        put(("pcie_replays",), calls.call("pcie", "nvmlDeviceGetPcieReplayCounter", handle))
        mode = calls.call("ecc", "nvmlDeviceGetEccMode", handle)
        if mode is not None:
            put(("ecc_mode",), mode[0])
        rows = calls.call("ecc", "nvmlDeviceGetRemappedRows", handle)
        if rows is not None:
            put(("remapped", "correctable"), rows[0])
            put(("remapped", "uncorrectable"), rows[1])
            put(("remap_pending",), rows[2])
            put(("remap_failed",), rows[3])
        if self.nvlink:
            self._legacy_nvlink(calls, handle, info, values, None)
        return values

    def _read_processes(self, calls: GpuCalls, handle: Any, sink: SampleSink) -> None:
        procs = calls.call("processes", "nvmlDeviceGetComputeRunningProcesses", handle)
        if procs is None and ("nvmlDeviceGetComputeRunningProcesses",) in calls.unsupported:
            procs = calls.call("processes", "nvmlDeviceGetComputeRunningProcesses_v2", handle)
        if procs is None:
            return
        sink.add("watchdog_gpu_processes", float(len(procs)))
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            sink.add("watchdog_gpu_process_memory_used_bytes", used, pid=str(proc.pid))


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


def nvml_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """Factory for the config's ``collectors.nvml`` section: one collector, or none when disabled.

    NVML comes from ``context.nvml`` (the demo, ``gpu-smoke --fake`` and tests inject the fake there),
    else the real ``pynvml`` imported on first use.
    """
    section = settings.collectors.nvml
    if not section.enabled:
        return []
    return [NvmlCollector(context.nvml, section, counters_clock=context.clock)]
