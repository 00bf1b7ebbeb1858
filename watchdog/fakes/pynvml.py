"""A fake ``pynvml`` (nvidia-ml-py) for tests and the demo: simulated GPUs from a profile file.

:class:`FakeNvml` is module-like: its attributes are the real pynvml names — functions
(``nvmlInit``, ``nvmlDeviceGetUtilizationRates``, ``nvmlDeviceGetFieldValues``, ...), structures
(``c_nvmlMemory_v2_t``, ``c_nvmlFieldValue_t`` ...), constants with the real values and the real
``NVMLError`` hierarchy (``NVMLError(3)`` returns an ``NVMLError_NotSupported``). Pass an instance
wherever the real module would go (``CollectorContext(nvml=FakeNvml.from_profile("h100-sxm-8"))``).

State comes from a GPU profile (``watchdog/fakes/profiles/<name>.yaml``) and is changed through a small
control API (see ``docs/nvml.md``):

- ``set(gpu, **values)`` / ``set_load(gpu, utilization)`` / ``set_nvlink(gpu, link, ...)`` /
  ``set_processes(gpu, [(pid, bytes)])`` change the simulated hardware now;
- ``schedule(faults)`` + ``advance(seconds)`` / ``set_time(t)`` play scripted faults over simulated time
  (``xid``, ``gpu_lost``, ``reset_required``, ``pcie_downtrain``, ``nvlink_down``, ``nvlink_crc_burst``,
  ``ecc_uncorrectable``, ``row_remap_pending``, ``hw_slowdown``, ``thermal_throttle``, ``straggler``);
- ``fail(call, code, gpu)`` / ``hang(call, gpu)`` / ``release()`` inject NVML errors and hung calls;
- ``unload_driver()`` / ``load_driver()`` and ``FakeNvml.missing()`` simulate a host without NVML;
- change the simulated GPUs only through these calls (not by assigning to ``gpus[i]``): each GPU's view (its
  values after derivation and faults) is derived once and kept until the next control call or time step, as
  a driver answers queries from state it already holds;
- ``drain_kmsg()`` returns the kernel-log lines (``NVRM: Xid ...``) the simulated faults produced, for a
  simulated kmsg file; :func:`xid_kmsg_line` builds one such line.

Behaviour modelled on real GPUs: an idle GPU (utilization under 5 %) drops its PCIe link to Gen1 and
its SM clock to the idle clock and reports the ``gpu_idle`` clock event; power and temperature follow
utilization unless set explicitly; energy integrates power over simulated time.
"""

from __future__ import annotations

import ctypes
import string
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from watchdog.fakes.gpu_model import (
    FAULT_KINDS,
    SETTABLE,
    SUPPORTED_REASONS,
    Fault,
    GpuState,
    GpuView,
    LinkState,
    apply_due_faults,
    effective_view,
    gpu_from_profile,
    load_profile,
    profile_names,
    reasons_mask,
    xid_kmsg_line,
)

__all__ = ["FAULT_KINDS", "FakeNvml", "Fault", "NVMLError", "load_profile", "profile_names", "xid_kmsg_line"]

# --- constants: same names and values as nvidia-ml-py ----------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_NVLINK_ERROR_DL_ECC_DATA = 4
NVML_NVLINK_STATE_INACTIVE = 0x0
NVML_NVLINK_STATE_ACTIVE = 0x1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
NVML_GPU_RECOVERY_ACTION_NONE = 0
NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1
NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2
NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3
NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
nvmlMemory_v2 = 0x02000028

nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksEventReasonNone = 0x0000000000000000
nvmlClocksThrottleReasonGpuIdle = nvmlClocksEventReasonGpuIdle
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
nvmlClocksThrottleReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown
nvmlClocksThrottleReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
nvmlClocksThrottleReasonHwThermalSlowdown = nvmlClocksEventReasonHwThermalSlowdown
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = nvmlClocksEventReasonHwPowerBrakeSlowdown
nvmlClocksThrottleReasonBoardLimit = 0x0000000000000200
nvmlClocksThrottleReasonReliability = 0x0000000000000400
nvmlClocksThrottleReasonNone = 0x0000000000000000

NVML_FI_DEV_ECC_CURRENT = 1
NVML_FI_DEV_ECC_PENDING = 2
NVML_FI_DEV_ECC_SBE_VOL_TOTAL = 3
NVML_FI_DEV_ECC_DBE_VOL_TOTAL = 4
NVML_FI_DEV_ECC_SBE_AGG_TOTAL = 5
NVML_FI_DEV_ECC_DBE_AGG_TOTAL = 6
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_PCIE_REPLAY_COUNTER = 94
NVML_FI_DEV_REMAPPED_COR = 142
NVML_FI_DEV_REMAPPED_UNC = 143
NVML_FI_DEV_REMAPPED_PENDING = 144
NVML_FI_DEV_REMAPPED_FAILURE = 145
NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY = 161
NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY = 162
NVML_FI_DEV_NVLINK_ERROR_DL_CRC = 163
NVML_FI_DEV_NVLINK_GET_STATE = 165
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
# The per-link ("_L<n>") families: L0..L5 and L6..L11 have separate id ranges.
_LEGACY_LINK_FAMILIES: dict[str, tuple[int, int]] = {
    "CRC_FLIT": (32, 96),
    "CRC_DATA": (39, 102),
    "REPLAY": (46, 108),
    "RECOVERY": (53, 114),
}
for _family, (_l0, _l6) in _LEGACY_LINK_FAMILIES.items():
    for _link in range(12):
        _fid = _l0 + _link if _link < 6 else _l6 + _link - 6
        globals()[f"NVML_FI_DEV_NVLINK_{_family}_ERROR_COUNT_L{_link}"] = _fid
    globals()[f"NVML_FI_DEV_NVLINK_{_family}_ERROR_COUNT_TOTAL"] = _l0 + 6


# --- the NVMLError hierarchy, built the way pynvml builds it -----------------------------------------
class NVMLLibraryMismatchError(Exception):
    """Raised by pynvml's unversioned wrappers when the driver lacks the versioned function."""


class NVMLError(Exception):
    """An NVML return code as an exception; ``NVMLError(code)`` returns the code's subclass."""

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        """An instance of the subclass registered for ``value`` (or ``cls``), carrying the code."""
        typ = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (NVMLError, (self.value,))


_ERROR_STRINGS: dict[int, str] = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


def _error_class_name(constant: str) -> str:
    """``NVML_ERROR_GPU_IS_LOST`` → ``NVMLError_GpuIsLost`` (pynvml's rule)."""
    return "NVMLError_" + string.capwords(constant.replace("NVML_ERROR_", ""), "_").replace("_", "")


def _build_error_classes() -> dict[str, type[NVMLError]]:
    classes: dict[str, type[NVMLError]] = {}
    for constant, code in sorted(globals().items()):
        if not constant.startswith("NVML_ERROR_"):
            continue

        def new(cls: type[NVMLError], *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        cls = type(_error_class_name(constant), (NVMLError,), {"__new__": new, "__module__": __name__})
        NVMLError._valClassMapping[code] = cls
        classes[cls.__name__] = cls
    return classes


ERROR_CLASSES = _build_error_classes()
globals().update(ERROR_CLASSES)
if TYPE_CHECKING:  # the classes above, by name, for type checkers (the full set is in ERROR_CLASSES)
    NVMLError_Uninitialized: type[NVMLError]
    NVMLError_InvalidArgument: type[NVMLError]
    NVMLError_NotSupported: type[NVMLError]
    NVMLError_NoPermission: type[NVMLError]
    NVMLError_DriverNotLoaded: type[NVMLError]
    NVMLError_LibraryNotFound: type[NVMLError]
    NVMLError_FunctionNotFound: type[NVMLError]
    NVMLError_GpuIsLost: type[NVMLError]
    NVMLError_ResetRequired: type[NVMLError]
    NVMLError_Unknown: type[NVMLError]


# --- structures: same field names and C types as pynvml's ------------------------------------------
class c_nvmlMemory_t(ctypes.Structure):
    _fields_: ClassVar = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                          ("used", ctypes.c_ulonglong)]


class c_nvmlMemory_v2_t(ctypes.Structure):
    _fields_: ClassVar = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                          ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                          ("used", ctypes.c_ulonglong)]


class c_nvmlUtilization_t(ctypes.Structure):
    _fields_: ClassVar = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class c_nvmlValue_t(ctypes.Union):
    _fields_: ClassVar = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                          ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong),
                          ("siVal", ctypes.c_int), ("usVal", ctypes.c_ushort)]


class c_nvmlFieldValue_t(ctypes.Structure):
    _fields_: ClassVar = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32),
                          ("timestamp", ctypes.c_int64), ("latencyUsec", ctypes.c_int64),
                          ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                          ("value", c_nvmlValue_t)]


class nvmlPciInfo_t(ctypes.Structure):
    _fields_: ClassVar = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                          ("bus", ctypes.c_uint), ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint),
                          ("pciSubSystemId", ctypes.c_uint), ("busId", ctypes.c_char * 32)]


class c_nvmlDevice_t:
    """A device handle (the real one is an opaque pointer); carries the GPU index."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


class nvmlFriendlyObject:
    """What pynvml returns for process lists: an object with the struct's fields as attributes."""

    def __init__(self, dictionary: Mapping[str, Any]) -> None:
        for key, value in dictionary.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return str(self.__dict__)


# --- the fake module --------------------------------------------------------------------------------
_LOCK_FREE_CALLS = frozenset({"nvmlInit", "nvmlInitWithFlags", "nvmlShutdown"})


class FakeNvml:
    """A module-like fake of pynvml over simulated GPUs. See the module docstring and docs/nvml.md."""

    def __init__(self, profile: Mapping[str, Any], *, library_missing: bool = False) -> None:
        self.profile = dict(profile)
        self.profile_name = str(profile.get("name", "custom"))
        self.driver_version = str(profile.get("driver_version", "550.90.07"))
        self.cuda_driver_version = int(profile.get("cuda_driver_version", 12040))
        self.gpus: list[GpuState] = [gpu_from_profile(profile, i) for i in range(len(profile["gpus"]))]
        self.now = 0.0
        self.faults: list[Fault] = []
        self.calls: Counter[str] = Counter()
        self._library_missing = library_missing
        self._driver_loaded = True
        self._init_count = 0
        self._failures: dict[tuple[str, int | None], int] = {}
        self._hangs: set[tuple[str, int | None]] = set()
        self._release = threading.Event()
        self._kmsg: list[str] = []
        self._lock = threading.RLock()
        # GPU index -> its view at ``now`` (a real driver does not re-derive the whole GPU for each query):
        # emptied by every control call and time step (see :meth:`_changed`)
        self._views: dict[int, GpuView] = {}

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_profile(cls, name_or_path: str | Path) -> FakeNvml:
        """A fake over the GPUs of a bundled profile name or a profile YAML path."""
        return cls(load_profile(name_or_path))

    @classmethod
    def missing(cls) -> FakeNvml:
        """A fake of a host without the NVIDIA driver: ``nvmlInit`` raises LIBRARY_NOT_FOUND."""
        return cls({"name": "none", "gpu": {}, "gpus": []}, library_missing=True)

    def __getattr__(self, name: str) -> Any:
        """Module constants and error classes (``NVML_FI_DEV_*``, ``NVMLError_GpuIsLost`` ...)."""
        value = globals().get(name)
        if value is None or not name.startswith(("NVML", "nvml", "c_nvml")):
            raise AttributeError(name)
        return value

    # ---- control API ----------------------------------------------------------------------------
    def set(self, gpu: int, **values: Any) -> None:
        """Set simulated values of one GPU now (names: :data:`SETTABLE`; ``None`` re-derives).

        ``clock_event_reasons`` takes a mask or a list of reason names; ``processes`` a list of
        ``(pid, used_bytes)``; ``ecc`` a dict ``{(type, scope): count}``.
        """
        with self._lock:
            self._changed()
            state = self.gpus[gpu]
            for key, value in values.items():
                if key == "clock_event_reasons" and value is not None:
                    value = reasons_mask(value)
                if key == "processes":
                    self.set_processes(gpu, value)
                elif key == "ecc":
                    state.ecc.update({(str(t), str(s)): int(n) for (t, s), n in value.items()})
                elif key in SETTABLE:
                    setattr(state, key, value)
                else:
                    raise ValueError(f"cannot set {key!r}; settable: {sorted(SETTABLE)}")

    def set_load(self, gpu: int, utilization: float, memory_utilization: float | None = None) -> None:
        """Make a GPU busy (0..100 %): power, temperature and clocks follow unless pinned by ``set``."""
        with self._lock:
            self._changed()
            state = self.gpus[gpu]
            state.utilization_gpu = float(utilization)
            state.utilization_memory = float(memory_utilization if memory_utilization is not None
                                             else utilization * 0.6)

    def set_nvlink(self, gpu: int, link: int, *, up: bool | None = None, **errors: int) -> None:
        """Set one NVLink's state and/or its counters ``replay``, ``recovery``, ``crc_flit``, ``crc_data``."""
        with self._lock:
            self._changed()
            state = self.gpus[gpu].nvlinks[link]
            if up is not None:
                state.up = up
            for key, value in errors.items():
                if key not in ("replay", "recovery", "crc_flit", "crc_data"):
                    raise ValueError(f"unknown NVLink counter {key!r}")
                setattr(state, key, int(value))

    def set_processes(self, gpu: int, processes: Sequence[tuple[int, int | None]]) -> None:
        """The compute processes on a GPU: ``[(pid, used_bytes)]``; memory used follows their sum."""
        with self._lock:
            self._changed()
            state = self.gpus[gpu]
            state.processes = [(int(pid), None if used is None else int(used)) for pid, used in processes]
            state.memory_used_bytes = sum(used or 0 for _, used in state.processes)

    def set_supported(self, feature: str, supported: bool, gpu: int | None = None) -> None:
        """Switch a profile ``supports`` flag (``memory_v2``, ``clock_events_api``, ``recovery_action``,
        ``nvlink_scoped_fields`` ...) for one GPU or all: an older driver or another board."""
        with self._lock:
            self._changed()
            for state in self.gpus if gpu is None else [self.gpus[gpu]]:
                state.supports[feature] = supported

    def schedule(self, faults: Iterable[Fault | Mapping[str, Any]]) -> None:
        """Add scripted faults (``Fault`` or ``{at_seconds, gpu, fault, params, duration_seconds}``)."""
        with self._lock:
            self._changed()
            for raw in faults:
                fault = raw if isinstance(raw, Fault) else Fault.from_dict(raw)
                if not 0 <= fault.gpu < len(self.gpus):
                    raise ValueError(f"fault {fault.fault!r} names GPU {fault.gpu}; "
                                     f"this fake has {len(self.gpus)}")
                self.faults.append(fault)
            self._apply_due_faults()
            self._changed()

    def advance(self, seconds: float) -> None:
        """Move simulated time forward: energy accumulates, due faults apply."""
        self.set_time(self.now + seconds)

    def set_time(self, t: float) -> None:
        """Set simulated time (seconds from the start; never backwards)."""
        with self._lock:
            self._changed()
            if t < self.now:
                raise ValueError(f"simulated time cannot go back ({t} < {self.now})")
            dt = t - self.now
            for state in self.gpus:
                if not state.lost:
                    state.energy_mj += self._view(state).power_watts * dt * 1000.0
            self.now = t
            self._apply_due_faults()
            self._changed()

    def clear_faults(self, gpu: int | None = None) -> None:
        """End now every window fault (lost, throttling, link down ...) of one GPU or all; counters keep
        their values and faults scheduled for later stay scheduled."""
        with self._lock:
            self._changed()
            for fault in self.faults:
                if (gpu is None or fault.gpu == gpu) and fault.active(self.now):
                    fault.duration_seconds = self.now - fault.at_seconds

    def fail(self, call: str, code: int, gpu: int | None = None) -> None:
        """Make ``call`` (a pynvml function name) raise ``NVMLError(code)``, for one GPU or all."""
        with self._lock:
            self._failures[(call, gpu)] = code

    def clear_failures(self) -> None:
        """Undo :meth:`fail` and :meth:`hang`."""
        with self._lock:
            self._failures.clear()
            self._hangs.clear()

    def hang(self, call: str, gpu: int | None = None) -> None:
        """Make ``call`` block (for one GPU or all) until :meth:`release`: a wedged driver."""
        with self._lock:
            self._release.clear()
            self._hangs.add((call, gpu))

    def release(self) -> None:
        """Let every hung call return (and stop hanging)."""
        with self._lock:
            self._hangs.clear()
            self._release.set()

    def unload_driver(self) -> None:
        """The driver goes away: calls raise UNINITIALIZED and ``nvmlInit`` DRIVER_NOT_LOADED."""
        with self._lock:
            self._driver_loaded = False
            self._init_count = 0

    def load_driver(self) -> None:
        """The driver is back: ``nvmlInit`` works again."""
        with self._lock:
            self._driver_loaded = True

    def drain_kmsg(self) -> list[str]:
        """Kernel-log lines produced by faults since the last call (oldest first)."""
        with self._lock:
            lines, self._kmsg = self._kmsg, []
            return lines

    def xid_line(self, gpu: int, xid: int, pid: int | None = None, process: str | None = None,
                 message: str | None = None) -> str:
        """The ``NVRM: Xid`` line for an XID on this fake's GPU ``gpu``."""
        return xid_kmsg_line(self.gpus[gpu].pci_bus_id, xid, pid, process, message)

    def _apply_due_faults(self) -> None:
        self._kmsg.extend(apply_due_faults(self.gpus, self.faults, self.now))

    def _view(self, state: GpuState) -> GpuView:
        view = self._views.get(state.index)
        if view is None:
            view = self._views[state.index] = effective_view(state, self.faults, self.now)
        return view

    def _changed(self) -> None:
        """The simulated hardware or time changed (under ``_lock``): views are derived anew."""
        self._views.clear()

    @property
    def initialized(self) -> bool:
        """Whether nvmlInit has been called more often than nvmlShutdown."""
        return self._init_count > 0

    # ---- call plumbing --------------------------------------------------------------------------
    def _enter(self, call: str, gpu: int | None = None) -> None:
        """Count the call, then apply injected hangs and failures and the library/driver state."""
        with self._lock:
            self.calls[call] += 1
            hang = (call, gpu) in self._hangs or (call, None) in self._hangs
            code = self._failures.get((call, gpu), self._failures.get((call, None)))
        if hang:
            self._release.wait()
        if code is not None:
            raise NVMLError(code)
        if call in _LOCK_FREE_CALLS:
            return
        if self._library_missing:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _device(self, call: str, handle: c_nvmlDevice_t) -> tuple[GpuState, GpuView]:
        """The GPU behind ``handle`` after the common checks (lost, reset required)."""
        index = handle.index
        self._enter(call, index)
        with self._lock:
            if not 0 <= index < len(self.gpus):
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            state = self.gpus[index]
            view = self._view(state)
            if view.lost:
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            if view.reset_required:
                raise NVMLError(NVML_ERROR_RESET_REQUIRED)
            return state, view

    @staticmethod
    def _require(state: GpuState, feature: str) -> None:
        if not state.supports.get(feature, True):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    # ---- library ---------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        """Initialise NVML (reference counted, as the real library)."""
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        """Initialise NVML with flags (ignored)."""
        self._enter("nvmlInitWithFlags")
        with self._lock:
            if self._library_missing:
                raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
            if not self._driver_loaded:
                raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
            self._init_count += 1

    def nvmlShutdown(self) -> None:
        """Release one reference taken by nvmlInit."""
        self._enter("nvmlShutdown")
        with self._lock:
            if self._init_count == 0:
                raise NVMLError(NVML_ERROR_UNINITIALIZED)
            self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        """The driver version string (``"570.133.20"``)."""
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """The CUDA driver API version as an int (``12080``)."""
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        """Number of GPUs (lost GPUs still count, as on real hosts)."""
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> c_nvmlDevice_t:
        """The handle of GPU ``index``."""
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return c_nvmlDevice_t(index)

    # ---- identity --------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: c_nvmlDevice_t) -> str:
        """Product name (``"NVIDIA H100 80GB HBM3"``)."""
        state, _ = self._device("nvmlDeviceGetName", handle)
        return state.name

    def nvmlDeviceGetUUID(self, handle: c_nvmlDevice_t) -> str:
        """``GPU-xxxxxxxx-xxxx-...``."""
        state, _ = self._device("nvmlDeviceGetUUID", handle)
        return state.uuid

    def nvmlDeviceGetSerial(self, handle: c_nvmlDevice_t) -> str:
        """Board serial number."""
        state, _ = self._device("nvmlDeviceGetSerial", handle)
        if not state.serial:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return state.serial

    def nvmlDeviceGetIndex(self, handle: c_nvmlDevice_t) -> int:
        """The NVML index of the device."""
        self._device("nvmlDeviceGetIndex", handle)
        return handle.index

    def nvmlDeviceGetPciInfo(self, handle: c_nvmlDevice_t) -> nvmlPciInfo_t:
        """PCI info; ``busId`` is bytes, ``b"00000000:18:00.0"``, as in pynvml."""
        state, _ = self._device("nvmlDeviceGetPciInfo", handle)
        domain, bus, rest = state.pci_bus_id.split(":")
        info = nvmlPciInfo_t()
        info.busId = state.pci_bus_id.encode()
        info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        info.pciDeviceId = 0x233010DE
        return info

    def nvmlDeviceGetPciInfo_v3(self, handle: c_nvmlDevice_t) -> nvmlPciInfo_t:
        """Same as :meth:`nvmlDeviceGetPciInfo`."""
        return self.nvmlDeviceGetPciInfo(handle)

    def nvmlDeviceGetPersistenceMode(self, handle: c_nvmlDevice_t) -> int:
        """NVML_FEATURE_ENABLED or NVML_FEATURE_DISABLED."""
        state, _ = self._device("nvmlDeviceGetPersistenceMode", handle)
        return NVML_FEATURE_ENABLED if state.persistence_mode else NVML_FEATURE_DISABLED

    # ---- utilization, memory ---------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: c_nvmlDevice_t) -> c_nvmlUtilization_t:
        """``.gpu`` and ``.memory`` in percent."""
        _, view = self._device("nvmlDeviceGetUtilizationRates", handle)
        util = c_nvmlUtilization_t()
        util.gpu = round(view.utilization_gpu)
        util.memory = round(view.utilization_memory)
        return util

    def nvmlDeviceGetMemoryInfo(self, handle: c_nvmlDevice_t, version: int | None = None) -> Any:
        """``c_nvmlMemory_t`` (total/free/used) or, with ``version=nvmlMemory_v2``, ``c_nvmlMemory_v2_t``."""
        state, _ = self._device("nvmlDeviceGetMemoryInfo", handle)
        used = min(state.memory_used_bytes, state.memory_total_bytes - state.memory_reserved_bytes)
        if not version:
            mem = c_nvmlMemory_t()
            mem.total, mem.used = state.memory_total_bytes, used + state.memory_reserved_bytes
            mem.free = state.memory_total_bytes - mem.used
            return mem
        if not state.supports.get("memory_v2", True):
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        if version != nvmlMemory_v2:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        mem2 = c_nvmlMemory_v2_t()
        mem2.version = version
        mem2.total, mem2.reserved, mem2.used = state.memory_total_bytes, state.memory_reserved_bytes, used
        mem2.free = state.memory_total_bytes - state.memory_reserved_bytes - used
        return mem2

    # ---- thermals, power -------------------------------------------------------------------------
    def nvmlDeviceGetTemperature(self, handle: c_nvmlDevice_t, sensor: int) -> int:
        """GPU core temperature in °C (``sensor`` = NVML_TEMPERATURE_GPU)."""
        _, view = self._device("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return round(view.temperature)

    def nvmlDeviceGetTemperatureV(self, handle: c_nvmlDevice_t, sensor: int, version: int = 0x100000C) -> int:
        """Versioned temperature read; same value as :meth:`nvmlDeviceGetTemperature`."""
        _, view = self._device("nvmlDeviceGetTemperatureV", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return round(view.temperature)

    def nvmlDeviceGetTemperatureThreshold(self, handle: c_nvmlDevice_t, threshold: int) -> int:
        """A temperature threshold in °C (NOT_SUPPORTED where the board has none)."""
        state, _ = self._device("nvmlDeviceGetTemperatureThreshold", handle)
        names = {NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "shutdown",
                 NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "slowdown",
                 NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "mem_max",
                 NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "gpu_max"}
        name = names.get(threshold)
        if name is None or name not in state.thresholds_celsius:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return state.thresholds_celsius[name]

    def nvmlDeviceGetPowerUsage(self, handle: c_nvmlDevice_t) -> int:
        """Power draw in milliwatts."""
        _, view = self._device("nvmlDeviceGetPowerUsage", handle)
        return round(view.power_watts * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: c_nvmlDevice_t) -> int:
        """Enforced power limit in milliwatts."""
        state, _ = self._device("nvmlDeviceGetEnforcedPowerLimit", handle)
        return round(state.power_limit_watts * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: c_nvmlDevice_t) -> int:
        """Energy since the driver loaded, in millijoules."""
        state, _ = self._device("nvmlDeviceGetTotalEnergyConsumption", handle)
        return int(state.energy_mj)

    # ---- clocks ----------------------------------------------------------------------------------
    def nvmlDeviceGetClockInfo(self, handle: c_nvmlDevice_t, type: int) -> int:
        """Current clock in MHz (NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_CLOCK_GRAPHICS)."""
        _, view = self._device("nvmlDeviceGetClockInfo", handle)
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return view.sm_clock
        if type == NVML_CLOCK_MEM:
            return view.memory_clock
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMaxClockInfo(self, handle: c_nvmlDevice_t, type: int) -> int:
        """Maximum clock in MHz."""
        state, _ = self._device("nvmlDeviceGetMaxClockInfo", handle)
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return state.sm_clock_max_mhz
        if type == NVML_CLOCK_MEM:
            return state.memory_clock_max_mhz
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: c_nvmlDevice_t) -> int:
        """Active clock event reasons (bitmask); FUNCTION_NOT_FOUND on drivers that predate it."""
        state, view = self._device("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if not state.supports.get("clock_events_api", True):
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return view.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: c_nvmlDevice_t) -> int:
        """The deprecated name of :meth:`nvmlDeviceGetCurrentClocksEventReasons` (every driver has it)."""
        _, view = self._device("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return view.reasons

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: c_nvmlDevice_t) -> int:
        """Clock event reasons this GPU can report (bitmask)."""
        state, _ = self._device("nvmlDeviceGetSupportedClocksEventReasons", handle)
        if not state.supports.get("clock_events_api", True):
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return SUPPORTED_REASONS

    def nvmlDeviceGetSupportedClocksThrottleReasons(self, handle: c_nvmlDevice_t) -> int:
        """The deprecated name of :meth:`nvmlDeviceGetSupportedClocksEventReasons`."""
        self._device("nvmlDeviceGetSupportedClocksThrottleReasons", handle)
        return SUPPORTED_REASONS

    # ---- PCIe ------------------------------------------------------------------------------------
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: c_nvmlDevice_t) -> int:
        """Current link generation: 1 while idle (power saving), the trained generation under load."""
        _, view = self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        return view.pcie_generation

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: c_nvmlDevice_t) -> int:
        """Maximum generation of the link (GPU and slot together)."""
        state, _ = self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        return state.pcie_max_generation

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: c_nvmlDevice_t) -> int:
        """Maximum generation the GPU supports."""
        state, _ = self._device("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle)
        return state.pcie_gpu_max_generation

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: c_nvmlDevice_t) -> int:
        """Current link width in lanes."""
        _, view = self._device("nvmlDeviceGetCurrPcieLinkWidth", handle)
        return view.pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: c_nvmlDevice_t) -> int:
        """Maximum link width in lanes."""
        state, _ = self._device("nvmlDeviceGetMaxPcieLinkWidth", handle)
        return state.pcie_max_width

    def nvmlDeviceGetPcieReplayCounter(self, handle: c_nvmlDevice_t) -> int:
        """PCIe replay counter."""
        state, _ = self._device("nvmlDeviceGetPcieReplayCounter", handle)
        return state.pcie_replays

    # ---- ECC, row remapping ----------------------------------------------------------------------
    def nvmlDeviceGetEccMode(self, handle: c_nvmlDevice_t) -> list[int]:
        """``[current, pending]`` ECC mode."""
        state, _ = self._device("nvmlDeviceGetEccMode", handle)
        mode = NVML_FEATURE_ENABLED if state.ecc_enabled else NVML_FEATURE_DISABLED
        return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(self, handle: c_nvmlDevice_t, errorType: int, counterType: int) -> int:
        """ECC error count for (corrected|uncorrected, volatile|aggregate)."""
        state, _ = self._device("nvmlDeviceGetTotalEccErrors", handle)
        if not state.ecc_enabled:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        kind = {NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
                NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected"}
        scope = {NVML_VOLATILE_ECC: "volatile", NVML_AGGREGATE_ECC: "aggregate"}
        if errorType not in kind or counterType not in scope:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return state.ecc[(kind[errorType], scope[counterType])]

    def nvmlDeviceGetRemappedRows(self, device: c_nvmlDevice_t) -> tuple[int, int, int, int]:
        """``(correctable, uncorrectable, pending, failure)``."""
        state, view = self._device("nvmlDeviceGetRemappedRows", device)
        self._require(state, "remapped_rows")
        return (state.remapped_correctable, state.remapped_uncorrectable, int(view.remap_pending),
                int(view.remap_failed))

    # ---- NVLink (legacy per-link calls) ------------------------------------------------------------
    def _link(self, call: str, device: c_nvmlDevice_t, link: int) -> tuple[LinkState, GpuView]:
        state, view = self._device(call, device)
        if not state.nvlinks:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(state.nvlinks):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return state.nvlinks[link], view

    def nvmlDeviceGetNvLinkState(self, device: c_nvmlDevice_t, link: int) -> int:
        """NVML_FEATURE_ENABLED when the link is active."""
        _, view = self._link("nvmlDeviceGetNvLinkState", device, link)
        return NVML_FEATURE_DISABLED if link in view.links_down else NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, device: c_nvmlDevice_t, link: int, counter: int) -> int:
        """One data-link error counter of one link."""
        link_state, _ = self._link("nvmlDeviceGetNvLinkErrorCounter", device, link)
        state = self.gpus[device.index]
        names = {NVML_NVLINK_ERROR_DL_REPLAY: "replay", NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
                 NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit", NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data"}
        if counter not in names:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if names[counter] == "crc_data" and not state.supports.get("nvlink_crc_data", True):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return int(getattr(link_state, names[counter]))

    # ---- processes ---------------------------------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses(self, handle: c_nvmlDevice_t) -> list[nvmlFriendlyObject]:
        """Compute processes: objects with ``pid``, ``usedGpuMemory`` (bytes or None), instance ids.
        Raises NVMLLibraryMismatchError (as pynvml does) where the driver lacks the _v3 call."""
        state, _ = self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        if not state.supports.get("processes_v3", True):
            raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not "
                                           "match the NVML lib version.")
        return self._processes(state)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: c_nvmlDevice_t) -> list[nvmlFriendlyObject]:
        """The _v2 process list (drivers before R510)."""
        state, _ = self._device("nvmlDeviceGetComputeRunningProcesses_v2", handle)
        return self._processes(state)

    @staticmethod
    def _processes(state: GpuState) -> list[nvmlFriendlyObject]:
        return [nvmlFriendlyObject({"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0xFFFFFFFF,
                                    "computeInstanceId": 0xFFFFFFFF}) for pid, used in state.processes]

    # ---- field values ------------------------------------------------------------------------------
    def nvmlDeviceGetFieldValues(self, handle: c_nvmlDevice_t,
                                 fieldIds: Sequence[int | tuple[int, int]]) -> Any:
        """An array of ``c_nvmlFieldValue_t``, one per requested id or ``(id, scopeId)``; each entry
        carries its own ``nvmlReturn`` (NOT_SUPPORTED for fields this GPU lacks)."""
        state, view = self._device("nvmlDeviceGetFieldValues", handle)
        values = (c_nvmlFieldValue_t * len(fieldIds))()
        scalars = self._scalar_fields(state, view)
        timestamp = int(self.now * 1_000_000)
        for i, requested in enumerate(fieldIds):
            fid, scope = requested if isinstance(requested, tuple) else (requested, 0)
            entry = values[i]
            entry.fieldId, entry.scopeId = fid, scope
            entry.timestamp = timestamp
            result = scalars[fid] if fid in scalars else self._link_field(state, view, fid, scope)
            if result is None:
                entry.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                continue
            value_type, value = result
            entry.nvmlReturn = NVML_SUCCESS
            entry.valueType = value_type
            if value_type == NVML_VALUE_TYPE_DOUBLE:
                entry.value.dVal = float(value)
            elif value_type == NVML_VALUE_TYPE_UNSIGNED_INT:
                entry.value.uiVal = int(value)
            else:
                entry.value.ullVal = int(value)
        return values

    @staticmethod
    def _scalar_fields(state: GpuState, view: GpuView) -> dict[int, tuple[int, float] | None]:
        """``fieldId → (valueType, value)`` of the per-GPU fields, None where this GPU lacks one."""
        uint, ull = NVML_VALUE_TYPE_UNSIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        supports = state.supports
        scalar: dict[int, tuple[int, float] | None] = {
            NVML_FI_DEV_MEMORY_TEMP: (uint, round(view.memory_temperature))
            if supports.get("memory_temperature", True) else None,
            NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: (ull, int(state.energy_mj)),
            NVML_FI_DEV_PCIE_REPLAY_COUNTER: (ull, state.pcie_replays),
            NVML_FI_DEV_ECC_CURRENT: (uint, int(state.ecc_enabled)),
            NVML_FI_DEV_ECC_PENDING: (uint, int(state.ecc_enabled)),
            NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (ull, state.ecc[("corrected", "volatile")]),
            NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (ull, state.ecc[("uncorrected", "volatile")]),
            NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (ull, state.ecc[("corrected", "aggregate")]),
            NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (ull, state.ecc[("uncorrected", "aggregate")]),
            NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: (uint, state.recovery_action)
            if supports.get("recovery_action", True) else None,
            NVML_FI_DEV_NVLINK_LINK_COUNT: (uint, len(state.nvlinks)) if state.nvlinks else None,
        }
        if not state.ecc_enabled:
            for fid_ecc in (NVML_FI_DEV_ECC_SBE_VOL_TOTAL, NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
                            NVML_FI_DEV_ECC_SBE_AGG_TOTAL, NVML_FI_DEV_ECC_DBE_AGG_TOTAL):
                scalar[fid_ecc] = None
        if supports.get("remapped_rows", True):
            scalar.update({
                NVML_FI_DEV_REMAPPED_COR: (uint, state.remapped_correctable),
                NVML_FI_DEV_REMAPPED_UNC: (uint, state.remapped_uncorrectable),
                NVML_FI_DEV_REMAPPED_PENDING: (uint, int(view.remap_pending)),
                NVML_FI_DEV_REMAPPED_FAILURE: (uint, int(view.remap_failed)),
            })
        return scalar

    @staticmethod
    def _link_field(state: GpuState, view: GpuView, fid: int, scope: int) -> tuple[int, float] | None:
        if not state.nvlinks:
            return None
        ull = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        scoped = {NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: "replay",
                  NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "recovery",
                  NVML_FI_DEV_NVLINK_ERROR_DL_CRC: "crc_flit"}
        if fid in scoped or fid == NVML_FI_DEV_NVLINK_GET_STATE:
            if not state.supports.get("nvlink_scoped_fields", True) or not 0 <= scope < len(state.nvlinks):
                return None
            if fid == NVML_FI_DEV_NVLINK_GET_STATE:
                down = scope in view.links_down
                return NVML_VALUE_TYPE_UNSIGNED_INT, (NVML_NVLINK_STATE_INACTIVE if down
                                                      else NVML_NVLINK_STATE_ACTIVE)
            return ull, getattr(state.nvlinks[scope], scoped[fid])
        for family, (l0, l6) in _LEGACY_LINK_FAMILIES.items():
            if l0 <= fid < l0 + 6:
                link = fid - l0
            elif l6 <= fid < l6 + 6:
                link = fid - l6 + 6
            else:
                continue
            if link >= len(state.nvlinks):
                return None
            kind = family.lower()
            if kind == "crc_data" and not state.supports.get("nvlink_crc_data", True):
                return None
            return ull, getattr(state.nvlinks[link], kind)
        return None

