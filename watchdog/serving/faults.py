"""Which firing alerts and GPU series make an engine unsafe, slow, or not serving: a table, not branches.

Contract:
- :data:`ALERT_FAULTS` maps an alert (name, plus label values it must carry) to a :class:`Fault` class and
  reason code. Engine alerts (``job`` label) apply to that engine; GPU alerts (``gpu`` label) apply to
  every engine whose tensor-parallel group holds the GPU (``watchdog_engine_gpu_info``).
- :func:`engine_faults` is pure: from the firing alerts' labels, the lost / reset-flagged GPUs and each
  engine's GPUs it returns every engine's faults, each once per reason code, worst class first.
- :class:`FaultClass` says what a fault does to the verdict: ``fatal`` drains at once (no hysteresis, no
  drain guard: the engine cannot serve correctly, so keeping it in rotation only fails requests);
  ``guarded`` drains after hysteresis and only where the drain guard allows; ``degraded`` lowers the
  weight while the engine's latency objectives burn; ``down`` says the engine does not serve at all.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class FaultClass(str, enum.Enum):
    """What a fault does to an engine's verdict (see the module docstring)."""

    FATAL = "fatal"
    GUARDED = "guarded"
    DEGRADED = "degraded"
    DOWN = "down"


FAULT_ORDER = {FaultClass.FATAL: 0, FaultClass.DOWN: 1, FaultClass.GUARDED: 2, FaultClass.DEGRADED: 3}


@dataclass(frozen=True)
class Fault:
    """One cause, on one engine: a reason code of :mod:`watchdog.serving.reasons` and a short detail."""

    code: str
    fault_class: FaultClass
    detail: str


@dataclass(frozen=True)
class AlertFault:
    """One row of :data:`ALERT_FAULTS`: alert ``alertname`` with ``labels`` (all must match) → ``code``."""

    alertname: str
    code: str
    fault_class: FaultClass
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True for a firing alert this row describes."""
        return labels.get("alertname") == self.alertname and all(labels.get(k) == v for k, v in self.labels)


ALERT_FAULTS: tuple[AlertFault, ...] = (
    # The engine cannot serve correctly: take it out at once, whatever the drain guard says.
    AlertFault("GpuFallenOffBus", "gpu_lost", FaultClass.FATAL),
    AlertFault("GpuRecoveryRequired", "gpu_needs_reset", FaultClass.FATAL),
    AlertFault("GpuXidFatal", "xid_fatal", FaultClass.FATAL),
    AlertFault("EngineWedged", "engine_wedged", FaultClass.FATAL),
    AlertFault("TpCollectiveHang", "collective_hang", FaultClass.FATAL),
    AlertFault("EngineOutputChanged", "output_corrupt", FaultClass.FATAL, (("cause", "gpu_xid"),)),
    AlertFault("EngineNcclTimeout", "collective_hang", FaultClass.FATAL),
    AlertFault("EngineDown", "engine_restarting", FaultClass.FATAL, (("cause", "restarting"),)),
    # Unsafe, but the engine still answers: drain only where the remaining engines can take its load.
    AlertFault("EngineOutputChanged", "canary_failing", FaultClass.GUARDED, (("severity", "warning"),)),
    AlertFault("GpuEccUncorrectable", "ecc_uncorrectable", FaultClass.GUARDED),
    AlertFault("GpuRowRemapFailed", "row_remap_failed", FaultClass.GUARDED),
    # Degraded but alive: a lower weight while the engine's latency objectives burn, never a drain.
    AlertFault("GpuPcieLinkDegraded", "degraded_link", FaultClass.DEGRADED),
    AlertFault("GpuNvlinkDown", "degraded_link", FaultClass.DEGRADED),
    AlertFault("GpuHwSlowdown", "thermal_slowdown", FaultClass.DEGRADED),
    AlertFault("GpuThermalMarginLow", "thermal_slowdown", FaultClass.DEGRADED),
    AlertFault("TpStraggler", "tp_straggler", FaultClass.DEGRADED),
    AlertFault("EngineProbeSlowWhileIdle", "probe_slow", FaultClass.DEGRADED),
)
"""Every alert the verdict engine reads (rules/*.yaml), in precedence order within a class."""


def _alert_fault(labels: Mapping[str, str]) -> AlertFault | None:
    return next((row for row in ALERT_FAULTS if row.matches(labels)), None)


def _where(labels: Mapping[str, str]) -> str:
    if labels.get("gpu"):
        return f"GPU {labels['gpu']}"
    return labels.get("job", "")


def engine_faults(firing: Iterable[Mapping[str, str]], engine_gpus: Mapping[tuple[str, str], Iterable[str]],
                  lost_gpus: Iterable[str] = (), reset_gpus: Iterable[str] = ()) -> dict[str, tuple[Fault, ...]]:
    """Each engine job's faults from the labels of the firing alerts and the GPUs NVML reports lost
    (``watchdog_gpu_lost``) or flagged for a reset (``watchdog_gpu_recovery_required``), the alerts'
    own evidence read directly so a verdict does not wait for a rule. ``engine_gpus`` is
    ``(job, instance) -> GPU indexes``. Engines without a fault are absent."""
    by_gpu: dict[str, set[str]] = {}
    for (job, _instance), gpus in engine_gpus.items():
        for gpu in gpus:
            by_gpu.setdefault(str(gpu), set()).add(job)
    found: dict[str, dict[str, Fault]] = {}

    def add(job: str, fault: Fault) -> None:
        held = found.setdefault(job, {})
        if fault.code not in held or FAULT_ORDER[fault.fault_class] < FAULT_ORDER[held[fault.code].fault_class]:
            held[fault.code] = fault

    for labels in firing:
        row = _alert_fault(labels)
        if row is None:
            continue
        where = _where(labels)
        detail = f"{row.alertname} on {where}" if where else row.alertname
        if labels.get("gpu"):
            for job in by_gpu.get(labels["gpu"], ()):
                add(job, Fault(row.code, row.fault_class, detail))
        elif labels.get("job"):
            add(labels["job"], Fault(row.code, row.fault_class, detail))
    for gpu in lost_gpus:
        for job in by_gpu.get(str(gpu), ()):
            add(job, Fault("gpu_lost", FaultClass.FATAL, f"GPU {gpu} lost (NVML)"))
    for gpu in reset_gpus:
        for job in by_gpu.get(str(gpu), ()):
            add(job, Fault("gpu_needs_reset", FaultClass.FATAL, f"GPU {gpu} flagged for a reset"))
    return {job: tuple(sorted(held.values(), key=lambda f: (FAULT_ORDER[f.fault_class], f.code)))
            for job, held in found.items()}
