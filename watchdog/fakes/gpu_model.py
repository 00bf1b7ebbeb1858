"""The simulated GPUs behind the fake pynvml: profiles, per-GPU state, scripted faults, kernel-log lines.

Pure model, no pynvml shapes: :mod:`watchdog.fakes.pynvml` wraps it in the real API. The effective view of
a GPU (:func:`effective_view`) is derived from its state, the active window faults and simulated time:
an idle GPU (utilization under :data:`IDLE_UTILIZATION`) drops its PCIe link to Gen1 and its SM clock to
the idle clock and reports ``gpu_idle``; power and temperature follow utilization unless pinned.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

IDLE_UTILIZATION = 5.0  # below this a GPU is idle: PCIe Gen1, idle clock, gpu_idle clock event
_PROFILE_DIR = "watchdog.fakes.profiles"
_UUID_NAMESPACE = uuid_module.UUID("6f1c2a10-5a3e-4c49-9a36-1b7f0e2d9c41")


@dataclass
class LinkState:
    """One NVLink: up/down and its data-link error counters."""

    up: bool = True
    replay: int = 0
    recovery: int = 0
    crc_flit: int = 0
    crc_data: int = 0


@dataclass
class GpuState:
    """Everything the fake knows about one GPU. ``None`` means "derive from utilization"."""

    index: int
    name: str
    uuid: str
    serial: str
    pci_bus_id: str
    memory_total_bytes: int
    memory_reserved_bytes: int
    power_limit_watts: float
    power_idle_watts: float
    sm_clock_max_mhz: int
    sm_clock_idle_mhz: int
    memory_clock_max_mhz: int
    temperature_idle_celsius: float
    temperature_load_celsius: float
    memory_temperature_offset_celsius: float
    thresholds_celsius: dict[str, int]
    pcie_max_generation: int
    pcie_gpu_max_generation: int
    pcie_max_width: int
    supports: dict[str, bool]
    ecc_enabled: bool = True
    persistence_mode: bool = True
    utilization_gpu: float = 0.0
    utilization_memory: float = 0.0
    memory_used_bytes: int = 0
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    power_watts: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    clock_event_reasons: int | None = None
    pcie_generation: int | None = None  # pinned current generation (else: idle → 1, load → trained)
    pcie_width: int | None = None
    pcie_trained_generation: int | None = None  # what the link trains to under load (downtraining)
    pcie_trained_width: int | None = None
    pcie_replays: int = 0
    energy_mj: float = 0.0
    nvlinks: list[LinkState] = field(default_factory=list)
    #: (corrected|uncorrected, volatile|aggregate) → count
    ecc: dict[tuple[str, str], int] = field(default_factory=dict)
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    recovery_action: int = 0  # NVML_GPU_RECOVERY_ACTION_NONE
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    lost: bool = False
    reset_required: bool = False


#: Names accepted by :meth:`FakeNvml.set` (the GpuState fields one may change directly).
SETTABLE = frozenset({
    "utilization_gpu", "utilization_memory", "memory_used_bytes", "temperature_celsius",
    "memory_temperature_celsius", "power_watts", "power_limit_watts", "sm_clock_mhz", "memory_clock_mhz",
    "clock_event_reasons", "pcie_generation", "pcie_width", "pcie_trained_generation", "pcie_trained_width",
    "pcie_replays", "ecc_enabled", "persistence_mode", "remapped_correctable", "remapped_uncorrectable",
    "remap_pending", "remap_failed", "recovery_action", "lost", "reset_required", "name", "serial",
})

#: Clock event reason → bit (NVML's ``nvmlClocksEventReason*``).
REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x001,
    "applications_clocks_setting": 0x002,
    "sw_power_cap": 0x004,
    "hw_slowdown": 0x008,
    "sync_boost": 0x010,
    "sw_thermal": 0x020,
    "hw_thermal": 0x040,
    "hw_power_brake": 0x080,
    "display_clock_setting": 0x100,
}
#: The reasons every simulated GPU can report.
SUPPORTED_REASONS = 0x1FF


def reasons_mask(reasons: int | Iterable[str]) -> int:
    """A clock-event bitmask from a mask or reason names (``["hw_slowdown", "sw_thermal"]``)."""
    if isinstance(reasons, int):
        return reasons
    mask = 0
    for name in reasons:
        if name not in REASON_BITS:
            raise ValueError(f"unknown clock event reason {name!r}; known: {sorted(REASON_BITS)}")
        mask |= REASON_BITS[name]
    return mask


# --- XID kernel-log lines ---------------------------------------------------------------------------
XID_MESSAGES: dict[int, str] = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_b0000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    43: "Ch 00000010",
    45: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, "
        "subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap a row.",
    74: "NVLink: fatal error detected on link 4(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).",
    120: "GSP task exception",
}
_XID_WITHOUT_PROCESS = frozenset({48, 63, 64, 74, 79, 92, 119, 120})


def kmsg_pci_id(pci_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` → the kernel log's ``0000:18:00`` (4-digit domain, no function)."""
    domain, bus, rest = pci_bus_id.split(":")
    device = rest.split(".")[0]
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}"


def xid_kmsg_line(pci_bus_id: str, xid: int, pid: int | None = None, process: str | None = None,
                  message: str | None = None) -> str:
    """The ``NVRM: Xid`` kernel-log text an XID on this GPU produces (no kernel prefix).

    ``NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.``
    """
    text = message if message is not None else XID_MESSAGES.get(xid, "Unspecified error")
    if pid is None and process is None and xid in _XID_WITHOUT_PROCESS:
        who = "pid='<unknown>', name=<unknown>, "
    else:
        who = f"pid={pid if pid is not None else '<unknown>'}, name={process or '<unknown>'}, "
    return f"NVRM: Xid (PCI:{kmsg_pci_id(pci_bus_id)}): {xid}, {who}{text}"


# --- scripted faults --------------------------------------------------------------------------------
FAULT_KINDS = frozenset({
    "xid", "gpu_lost", "reset_required", "pcie_downtrain", "nvlink_down", "nvlink_crc_burst",
    "ecc_uncorrectable", "row_remap_pending", "hw_slowdown", "thermal_throttle", "straggler", "clear",
})
#: Faults that happen once (counters jump, log lines appear, ``clear`` ends the GPU's window faults);
#: the others hold for ``duration_seconds``.
ONE_SHOT_FAULTS = frozenset({"xid", "nvlink_crc_burst", "ecc_uncorrectable", "clear"})


@dataclass
class Fault:
    """One scripted fault: ``fault`` on ``gpu`` at ``at_seconds`` of simulated time.

    Window faults hold from ``at_seconds`` for ``duration_seconds`` (``None``: until the end); one-shot
    faults (:data:`ONE_SHOT_FAULTS`) apply once when simulated time reaches ``at_seconds``.
    """

    at_seconds: float
    gpu: int
    fault: str
    params: dict[str, Any] = field(default_factory=dict)
    duration_seconds: float | None = None
    applied: bool = False

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Fault:
        """A fault from its scenario form ``{at_seconds, gpu, fault, params?, duration_seconds?}``."""
        kind = str(raw["fault"])
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {sorted(FAULT_KINDS)}")
        duration = raw.get("duration_seconds")
        return cls(float(raw["at_seconds"]), int(raw["gpu"]), kind, dict(raw.get("params") or {}),
                   None if duration is None else float(duration))

    def active(self, now: float) -> bool:
        """Whether a window fault holds at simulated time ``now``."""
        if now < self.at_seconds:
            return False
        return self.duration_seconds is None or now < self.at_seconds + self.duration_seconds


# --- profiles ---------------------------------------------------------------------------------------
def profile_names() -> list[str]:
    """Names of the bundled GPU profiles."""
    folder = resources.files(_PROFILE_DIR)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str | Path) -> dict[str, Any]:
    """A profile's YAML as a dict: a bundled name (``h100-sxm-8``) or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text = path.read_text(encoding="utf-8")
    else:
        entry = resources.files(_PROFILE_DIR) / f"{name_or_path}.yaml"
        if not entry.is_file():
            raise ValueError(f"unknown GPU profile {str(name_or_path)!r}; bundled: {profile_names()}")
        text = entry.read_text(encoding="utf-8")
    profile = yaml.safe_load(text)
    if not isinstance(profile, dict) or "gpu" not in profile or "gpus" not in profile:
        raise ValueError(f"GPU profile {str(name_or_path)!r} needs 'gpu' and 'gpus'")
    return profile


def gpu_from_profile(profile: Mapping[str, Any], index: int) -> GpuState:
    """The simulated state of GPU ``index`` of a profile: ``gpu`` defaults overlaid with ``gpus[index]``."""
    spec = {**profile["gpu"], **profile["gpus"][index]}
    pcie = spec.get("pcie", {})
    uuid = spec.get("uuid") or "GPU-" + str(uuid_module.uuid5(_UUID_NAMESPACE, f"{profile['name']}/{index}"))
    nvlinks = int(spec.get("nvlinks", 0))
    return GpuState(
        index=index,
        name=str(spec["name"]),
        uuid=str(uuid),
        serial=str(spec.get("serial", "")),
        pci_bus_id=str(spec["pci_bus_id"]),
        memory_total_bytes=int(spec["memory_total_bytes"]),
        memory_reserved_bytes=int(spec.get("memory_reserved_bytes", 0)),
        power_limit_watts=float(spec["power_limit_watts"]),
        power_idle_watts=float(spec["power_idle_watts"]),
        sm_clock_max_mhz=int(spec["sm_clock_max_mhz"]),
        sm_clock_idle_mhz=int(spec["sm_clock_idle_mhz"]),
        memory_clock_max_mhz=int(spec["memory_clock_max_mhz"]),
        temperature_idle_celsius=float(spec["temperature_idle_celsius"]),
        temperature_load_celsius=float(spec["temperature_load_celsius"]),
        memory_temperature_offset_celsius=float(spec.get("memory_temperature_offset_celsius", 0)),
        thresholds_celsius={str(k): int(v) for k, v in spec.get("thresholds_celsius", {}).items()},
        pcie_max_generation=int(pcie.get("max_generation", 4)),
        pcie_gpu_max_generation=int(pcie.get("gpu_max_generation", pcie.get("max_generation", 4))),
        pcie_max_width=int(pcie.get("max_width", 16)),
        supports={str(k): bool(v) for k, v in spec.get("supports", {}).items()},
        ecc_enabled=bool(spec.get("ecc_enabled", True)),
        persistence_mode=bool(spec.get("persistence_mode", True)),
        nvlinks=[LinkState() for _ in range(nvlinks)],
        ecc={(t, s): 0 for t in ("corrected", "uncorrected") for s in ("volatile", "aggregate")},
    )


# --- the effective view and fault application ---------------------------------------------------------
@dataclass(frozen=True)
class GpuView:
    """One GPU as NVML reports it at one instant (after derivation, pins and active faults)."""

    power_watts: float
    temperature: float
    memory_temperature: float
    sm_clock: int
    memory_clock: int
    reasons: int
    pcie_generation: int
    pcie_width: int
    utilization_gpu: float
    utilization_memory: float
    lost: bool
    reset_required: bool
    links_down: frozenset[int]
    remap_pending: bool
    remap_failed: bool


def effective_view(state: GpuState, faults: Iterable[Fault], now: float) -> GpuView:
    """The GPU as NVML would report it at ``now``: values derived from utilization unless pinned, then
    modified by the window faults active at ``now``."""
    util, mem_util = state.utilization_gpu, state.utilization_memory
    lost, reset_required = state.lost, state.reset_required
    links_down: set[int] = {i for i, link in enumerate(state.nvlinks) if not link.up}
    remap_pending, remap_failed = state.remap_pending, state.remap_failed
    trained_gen = state.pcie_trained_generation or state.pcie_max_generation
    trained_width = state.pcie_trained_width or state.pcie_max_width
    clock_factor = 1.0
    extra_reasons = 0
    temperature_floor: float | None = None
    for fault in faults:
        if fault.fault in ONE_SHOT_FAULTS or not fault.active(now):
            continue
        p = fault.params
        if fault.fault == "straggler":
            peers = p.get("peers")
            if fault.gpu == state.index:
                util = float(p.get("utilization", 100.0))
                mem_util = float(p.get("memory_utilization", 35.0))
            elif peers is None or state.index in peers:
                util, mem_util = float(p.get("peer_utilization", 0.0)), 0.0
            continue
        if fault.gpu != state.index:
            continue
        if fault.fault == "gpu_lost":
            lost = True
        elif fault.fault == "reset_required":
            reset_required = True
        elif fault.fault == "pcie_downtrain":
            trained_gen = int(p.get("generation", max(1, trained_gen - 2)))
            trained_width = int(p.get("width", trained_width))
        elif fault.fault == "nvlink_down":
            links_down.update(int(x) for x in p.get("links", [p.get("link", 0)]))
        elif fault.fault == "row_remap_pending":
            remap_pending = True
            remap_failed = remap_failed or bool(p.get("failed", False))
        elif fault.fault == "hw_slowdown":
            clock_factor = min(clock_factor, float(p.get("clock_factor", 0.5)))
            extra_reasons |= REASON_BITS["hw_slowdown"]
            if p.get("power_brake"):
                extra_reasons |= REASON_BITS["hw_power_brake"]
        elif fault.fault == "thermal_throttle":
            clock_factor = min(clock_factor, float(p.get("clock_factor", 0.7)))
            extra_reasons |= REASON_BITS["sw_thermal"] | REASON_BITS["hw_thermal"]
            slowdown = state.thresholds_celsius.get("slowdown", 89)
            temperature_floor = float(p.get("temperature", slowdown + 1))
    busy = util >= IDLE_UTILIZATION
    load = max(0.0, min(util, 100.0)) / 100.0
    if state.power_watts is not None:
        power = state.power_watts
    else:
        power = state.power_idle_watts + load * 0.92 * (state.power_limit_watts - state.power_idle_watts)
    if state.temperature_celsius is not None:
        temperature = state.temperature_celsius
    else:
        span = state.temperature_load_celsius - state.temperature_idle_celsius
        temperature = state.temperature_idle_celsius + load * span
    if temperature_floor is not None:
        temperature = max(temperature, temperature_floor)
    if state.memory_temperature_celsius is not None:
        memory_temperature = state.memory_temperature_celsius
    else:
        memory_temperature = temperature + state.memory_temperature_offset_celsius
    if state.sm_clock_mhz is not None:
        sm_clock = int(state.sm_clock_mhz * clock_factor)
    else:
        sm_clock = int(state.sm_clock_max_mhz * clock_factor) if busy else state.sm_clock_idle_mhz
    memory_clock = state.memory_clock_max_mhz if state.memory_clock_mhz is None else state.memory_clock_mhz
    if state.clock_event_reasons is not None:
        reasons = state.clock_event_reasons
    else:
        reasons = 0 if busy else REASON_BITS["gpu_idle"]
        if power >= 0.98 * state.power_limit_watts:
            reasons |= REASON_BITS["sw_power_cap"]
    reasons |= extra_reasons
    idle_generation = trained_gen if busy else 1  # idle GPUs drop to Gen1 to save power
    pcie_gen = idle_generation if state.pcie_generation is None else state.pcie_generation
    pcie_width = state.pcie_width if state.pcie_width is not None else trained_width
    return GpuView(power, temperature, memory_temperature, sm_clock, memory_clock, reasons, pcie_gen,
                   pcie_width, util, mem_util, lost, reset_required, frozenset(links_down), remap_pending,
                   remap_failed)


def apply_due_faults(gpus: list[GpuState], faults: Iterable[Fault], now: float) -> list[str]:
    """Apply the one-shot effects of every fault due by ``now`` (once each); returns the kernel-log
    lines they produce, oldest first."""
    lines: list[str] = []
    faults = list(faults)
    for fault in sorted(faults, key=lambda f: f.at_seconds):
        if fault.applied or fault.at_seconds > now:
            continue
        fault.applied = True
        state = gpus[fault.gpu]
        p = fault.params
        if fault.fault == "clear":
            for other in faults:
                if (other.gpu == fault.gpu and other.fault not in ONE_SHOT_FAULTS
                        and other.active(fault.at_seconds)):
                    other.duration_seconds = fault.at_seconds - other.at_seconds
        elif fault.fault == "xid":
            lines.append(xid_kmsg_line(state.pci_bus_id, int(p.get("xid", 79)), p.get("pid"),
                                       p.get("process"), p.get("message")))
        elif fault.fault == "gpu_lost" and p.get("emit_xid", True):
            lines.append(xid_kmsg_line(state.pci_bus_id, 79))
        elif fault.fault == "nvlink_crc_burst":
            link = state.nvlinks[int(p.get("link", 0))]
            count = int(p.get("count", 100))
            kind = str(p.get("type", "crc_flit"))
            setattr(link, kind, getattr(link, kind) + count)
            link.replay += int(p.get("replays", count // 10))
        elif fault.fault == "ecc_uncorrectable":
            count = int(p.get("count", 1))
            for scope in ("volatile", "aggregate"):
                state.ecc[("uncorrected", scope)] += count
            lines.append(xid_kmsg_line(state.pci_bus_id, 48))
            if p.get("remap", state.supports.get("remapped_rows", True)):
                state.remapped_uncorrectable += count
                state.remap_pending = True
                lines.append(xid_kmsg_line(state.pci_bus_id, 63))
        elif fault.fault == "row_remap_pending" and p.get("emit_xid", True):
            lines.append(xid_kmsg_line(state.pci_bus_id, 64 if p.get("failed") else 63))
    return lines
