"""The per-GPU reads: what one call reads of one GPU, and what the collector knows of each GPU.

- :meth:`GpuReader.read` reads one GPU whole on the calling thread (the collector runs each GPU's read on
  that GPU's own thread): identity and static attributes (re-read every ``static_refresh_seconds``),
  the values read at every call and, when ``counters_due`` (or the GPU has none yet), its counters and
  the series of its static attributes.
- A GPU that answers ``GPU_IS_LOST``/``RESET_REQUIRED`` on any call reports ``watchdog_gpu_lost 1`` (and
  its ``watchdog_gpu_info``) only; everything learnt about it is forgotten, to be learnt again when it
  is back (a reset may change what it supports). Its identity outlives the loss.
- Values come through the field plan (:mod:`~watchdog.collectors.nvml.fields`); a driver without field
  values, or without the per-link NVLink fields, is read through the dedicated calls instead.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watchdog.collectors.nvml import abi as A
from watchdog.collectors.nvml import fields as F
from watchdog.collectors.nvml.labels import GpuLabels, SampleSink, info_labels
from watchdog.collectors.nvml.session import CallStats, GpuCalls, GpuGone, NvmlSession, device_handle
from watchdog.model import Labels, Sample, metric

log = logging.getLogger(__name__)

Identity = tuple[str, str, str, str]  # name, uuid, serial, PCI bus id
NO_IDENTITY: Identity = ("", "", "", "")


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


class GpuReader:
    """Reads one GPU per :meth:`read` (the collector reads its GPUs in parallel, each on its own thread)
    and keeps what is known of each. See the module docstring."""

    def __init__(self, session: NvmlSession, *, clock: Callable[[], float], nvlink: bool, processes: bool,
                 static_refresh_seconds: float) -> None:
        self.session = session
        self.nvlink = nvlink
        self.processes = processes
        self.static_refresh_seconds = static_refresh_seconds
        self.counters_due = True
        """Whether this call reads every GPU's counters (set by the collector before its reads)."""
        self._clock = clock
        self._static: dict[int, StaticInfo] = {}
        self._identity: dict[int, Identity] = {}  # outlives a loss
        self._unsupported: dict[int, set[tuple[Any, ...]]] = defaultdict(set)
        self._planners: dict[int, F.FieldPlanner] = defaultdict(F.FieldPlanner)
        self._counters: dict[int, list[Sample]] = {}  # GPU -> its counters as last read
        self._gone: dict[int, int] = {}  # GPU -> the code that said it is lost
        self._labels: dict[int, GpuLabels] = {}
        self._info_labels: dict[int, tuple[tuple[Identity, str], Labels]] = {}
        self._errors: Counter[tuple[int, str, str]] = Counter()
        self._errors_lock = threading.Lock()

    def forget(self) -> None:
        """NVML was initialised again: what was learnt of the GPUs no longer holds (their identity does)."""
        self._static.clear()
        self._unsupported.clear()
        self._planners.clear()
        self._counters.clear()

    def read(self, nvml: Any, index: int) -> GpuRead:
        """One GPU's samples; raises :class:`~watchdog.collectors.nvml.session.SessionBroken`."""
        stats = CallStats()
        calls = GpuCalls(nvml, index, self._unsupported[index], self._errors, self._errors_lock, stats)
        try:
            device = device_handle(calls, index)
            if device is None:
                return GpuRead([], stats)
            info = self._static_info(calls, device, index)
            sink = SampleSink(index, self._gpu_labels(index, info.uuid))
            fresh = self._read_dynamic(calls, device, info, sink)
        except GpuGone as gone:
            return GpuRead(self._gone_samples(index, gone.code), stats)
        if index in self._gone:
            log.warning("GPU is back", extra={"gpu": index})
            del self._gone[index]
        sink.add("watchdog_gpu_lost", 0.0)
        sink.add("watchdog_gpu_reset_required", 0.0)
        sink.add("watchdog_gpu_nvml_stalled", 0.0)
        return GpuRead(self.info_samples(index) + sink.samples, stats, self._counters.get(index), fresh)

    def stalled_samples(self, index: int) -> list[Sample]:
        """A GPU whose read did not return in time: its identity and the stall, nothing else."""
        sink = SampleSink(index, GpuLabels(self._identity.get(index, NO_IDENTITY)[1]))
        sink.add("watchdog_gpu_nvml_stalled", 1.0)
        return self.info_samples(index) + sink.samples

    def error_samples(self) -> list[Sample]:
        """``watchdog_gpu_nvml_errors_total`` per GPU, call and error, since the collector started."""
        out: list[Sample] = []
        with self._errors_lock:
            errors = sorted(self._errors.items())
        for (index, call, error), n in errors:
            uuid = self._identity.get(index, NO_IDENTITY)[1]
            out.append(Sample(metric("watchdog_gpu_nvml_errors_total", gpu=str(index), uuid=uuid,
                                     call=call, error=error), float(n)))
        return out

    def info_samples(self, index: int) -> list[Sample]:
        """``watchdog_gpu_info`` of GPU ``index`` (none before its identity was read)."""
        identity = self._identity.get(index)
        if identity is None:
            return []
        key = (identity, self.session.driver_version)
        known = self._info_labels.get(index)
        if known is None or known[0] != key:
            known = self._info_labels[index] = (key, info_labels(index, identity, self.session.driver_version))
        return [Sample(known[1], 1.0)]

    def _gpu_labels(self, index: int, uuid: str) -> GpuLabels:
        """This GPU's label sets, new whenever the GPU at ``index`` has another uuid."""
        known = self._labels.get(index)
        if known is None or known.uuid != uuid:
            known = self._labels[index] = GpuLabels(uuid)
        return known

    def _gone_samples(self, index: int, code: int) -> list[Sample]:
        if self._gone.get(index) != code:
            log.warning("GPU lost", extra={"gpu": index, "error": A.error_name(code)})
        self._gone[index] = code
        self._static.pop(index, None)
        self._unsupported.pop(index, None)
        self._planners.pop(index, None)
        self._counters.pop(index, None)
        sink = SampleSink(index, GpuLabels(self._identity.get(index, NO_IDENTITY)[1]))
        sink.add("watchdog_gpu_lost", 1.0)
        sink.add("watchdog_gpu_reset_required", 1.0 if code == A.NVML_ERROR_RESET_REQUIRED else 0.0)
        sink.add("watchdog_gpu_nvml_stalled", 0.0)
        return self.info_samples(index) + sink.samples

    # ---- static attributes ---------------------------------------------------------------------
    def _static_info(self, calls: GpuCalls, handle: Any, index: int) -> StaticInfo:
        now = self._clock()
        cached = self._static.get(index)
        if cached is not None and now - cached.read_at < self.static_refresh_seconds:
            return cached
        g = "identity"
        pci = calls.call(g, "nvmlDeviceGetPciInfo", handle)
        info = StaticInfo(
            name=A.text(calls.call(g, "nvmlDeviceGetName", handle) or ""),
            uuid=A.text(calls.call(g, "nvmlDeviceGetUUID", handle) or ""),
            serial=A.text(calls.call(g, "nvmlDeviceGetSerial", handle) or ""),
            pci_bus_id=A.text(pci.busId) if pci is not None else "",
            thresholds={},
            sm_clock_max_hz=None, memory_clock_max_hz=None,
            pcie_max_generation=calls.call("pcie", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_gpu_max_generation=calls.call("pcie", "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
            pcie_max_width=calls.call("pcie", "nvmlDeviceGetMaxPcieLinkWidth", handle),
            supported_reasons=None,
            link_count=0,
            read_at=now,
        )
        for kind, threshold in A.TEMPERATURE_THRESHOLDS.items():
            value = calls.call("thermal", "nvmlDeviceGetTemperatureThreshold", handle, threshold)
            if value is not None:
                info.thresholds[kind] = float(value)
        sm_max = calls.call("clocks", "nvmlDeviceGetMaxClockInfo", handle, A.NVML_CLOCK_SM)
        mem_max = calls.call("clocks", "nvmlDeviceGetMaxClockInfo", handle, A.NVML_CLOCK_MEM)
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
        answers = F.field_answers(calls, handle, planner.requests(slots))
        if answers is not None:
            values, _ = planner.resolve(slots, answers)
            if ("nvlink_count",) in values:
                return int(values[("nvlink_count",)])
        links = 0
        for link in range(A.LEGACY_MAX_LINKS):
            if calls.call("nvlink", "nvmlDeviceGetNvLinkState", handle, link) is None:
                break
            links += 1
        return links

    # ---- values read at every call, and the counters ---------------------------------------------
    def _read_dynamic(self, calls: GpuCalls, handle: Any, info: StaticInfo, sink: SampleSink) -> bool:
        """The values read at every call into ``sink``; when this call reads the counters (every GPU's are
        due, or this GPU has none yet), the counters and the static attributes' series too, kept as this
        GPU's counters in ``_counters``. Returns whether it read the counters."""
        slow = (SampleSink(calls.index, sink.labels) if self.counters_due or calls.index not in self._counters
                else None)
        util = calls.call("utilization", "nvmlDeviceGetUtilizationRates", handle)
        if util is not None:
            sink.add("watchdog_gpu_utilization_ratio", util.gpu / 100.0)
            sink.add("watchdog_gpu_memory_utilization_ratio", util.memory / 100.0)
        self._read_memory(calls, handle, sink)
        temperature = calls.call("thermal", "nvmlDeviceGetTemperatureV", handle, A.NVML_TEMPERATURE_GPU)
        if temperature is None:
            temperature = calls.call("thermal", "nvmlDeviceGetTemperature", handle, A.NVML_TEMPERATURE_GPU)
        sink.add("watchdog_gpu_temperature_celsius", temperature)
        power = calls.call("power", "nvmlDeviceGetPowerUsage", handle)
        sink.add("watchdog_gpu_power_watts", None if power is None else power / 1000.0)
        limit = calls.call("power", "nvmlDeviceGetEnforcedPowerLimit", handle)
        sink.add("watchdog_gpu_power_limit_watts", None if limit is None else limit / 1000.0)
        sm = calls.call("clocks", "nvmlDeviceGetClockInfo", handle, A.NVML_CLOCK_SM)
        sink.add("watchdog_gpu_sm_clock_hertz", None if sm is None else sm * 1e6)
        mem = calls.call("clocks", "nvmlDeviceGetClockInfo", handle, A.NVML_CLOCK_MEM)
        sink.add("watchdog_gpu_memory_clock_hertz", None if mem is None else mem * 1e6)
        reasons = calls.call("clock_events", "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:
            reasons = calls.call("clock_events", "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        if reasons is not None:
            sink.add_flags("watchdog_gpu_clock_event_active", "reason",
                           A.clock_event_flags(int(reasons), info.supported_reasons))
        g = "pcie"
        sink.add("watchdog_gpu_pcie_link_generation",
                 calls.call(g, "nvmlDeviceGetCurrPcieLinkGeneration", handle), kind="current")
        sink.add("watchdog_gpu_pcie_link_width", calls.call(g, "nvmlDeviceGetCurrPcieLinkWidth", handle),
                 kind="current")
        persistence = calls.call("identity", "nvmlDeviceGetPersistenceMode", handle)
        sink.add("watchdog_gpu_persistence_mode_enabled",
                 None if persistence is None else float(persistence == A.NVML_FEATURE_ENABLED))
        self._read_fields(calls, handle, info, sink, slow)
        if self.processes:
            self._read_processes(calls, handle, sink)
        if slow is None:
            return False
        self._static_samples(info, slow)
        self._counters[calls.index] = slow.samples
        return True

    def _read_memory(self, calls: GpuCalls, handle: Any, sink: SampleSink) -> None:
        memory = calls.call("memory", "nvmlDeviceGetMemoryInfo", handle, A.NVML_MEMORY_V2)
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

    def _read_fields(self, calls: GpuCalls, handle: Any, info: StaticInfo, sink: SampleSink,
                     counters: SampleSink | None) -> None:
        """The field-slot values: those read at every call into ``sink``; with ``counters``, the counters
        too, into it."""
        full = counters is not None
        slots = self._slots(info.link_count) if full else F.FAST_SCALAR_SLOTS
        values: dict[F.SlotKey, float] | None = None
        if F.FIELD_VALUES_MEMO not in calls.unsupported:
            planner = self._planners[calls.index]
            answers = F.field_answers(calls, handle, planner.requests(slots))
            if answers is not None:
                values, failed = planner.resolve(slots, answers)
                for fid, scope in failed:
                    calls.count_error(f"nvmlDeviceGetFieldValues[{fid}]", answers[(fid, scope)][0])
                if full:
                    self._legacy_nvlink(calls, handle, info, values, planner)
        if values is None:
            values = self._direct_values(calls, handle, info, full)
        for key, value in values.items():
            (sink if counters is None or key in F.FAST_KEYS else counters).add_field(key, value)

    def _slots(self, link_count: int) -> tuple[F.FieldSlot, ...]:
        """Every field slot, the counters' included."""
        return F.all_slots(link_count) if self.nvlink else F.SCALAR_SLOTS

    def _legacy_nvlink(self, calls: GpuCalls, handle: Any, info: StaticInfo,
                       values: dict[F.SlotKey, float], planner: F.FieldPlanner | None) -> None:
        """Per-link calls for NVLink values that no field can answer (drivers before the scoped fields);
        with ``planner`` None, for every NVLink value (drivers without field values)."""
        if not self.nvlink:
            return
        keys = F.legacy_nvlink_keys(info.link_count)
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

    def _direct_values(self, calls: GpuCalls, handle: Any, info: StaticInfo,
                       counters: bool) -> dict[F.SlotKey, float]:
        """The field-slot values through the dedicated calls, for drivers without field values (the
        counters only when ``counters``)."""
        values: dict[F.SlotKey, float] = {}

        def put(key: F.SlotKey, value: Any) -> None:
            if value is not None:
                values[key] = float(value)

        put(("energy_mj",), calls.call("power", "nvmlDeviceGetTotalEnergyConsumption", handle))
        for kind, error_type in (("corrected", A.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                                 ("uncorrected", A.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            if kind == "corrected" and not counters:
                continue
            for scope, counter in (("volatile", A.NVML_VOLATILE_ECC), ("aggregate", A.NVML_AGGREGATE_ECC)):
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


