"""Is NVIDIA hardware on this host, and is its driver loaded? Read from PCI sysfs and the module state.

Contract:

- :func:`probe_presence` is the read (an injectable sysfs root and modules root, so tests pass a fixture
  tree); :func:`presence_samples` turns the plain :class:`GpuPresence` into series. Nothing here needs
  NVML, so a host whose driver failed to load after a kernel update is told apart from a host without
  NVIDIA hardware: the first is critical, the second is quiet.
- A GPU is a PCI function with vendor ``0x10de`` and class ``0x0300xx`` (VGA) or ``0x0302xx`` (3D
  controller); NVSwitches (bridge class ``0x0680``) are not GPUs. The driver is *loaded* when
  ``<sysfs>/module/nvidia`` exists, and *installed* when ``<modules>/<release>/modules.dep`` names an
  ``nvidia.ko`` module (DKMS and distribution packages both register it there).
- Series (no ``gpu``/``uuid``: these are about the host): ``watchdog_gpu_pci_devices`` (NVIDIA GPUs on
  the PCI bus), ``watchdog_gpu_driver_loaded`` and ``watchdog_gpu_driver_installed`` (0/1), and
  ``watchdog_gpu_expected`` (``collectors.nvml.expected_gpus``, else the PCI count). The NVML collector
  adds ``watchdog_gpu_nvml_devices``; rules compare the two (GPUs vanish without an Xid).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from watchdog.collectors.base import Collector, CollectorContext
from watchdog.config.settings import Settings
from watchdog.model import Sample, metric

NVIDIA_VENDOR = "0x10de"
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")


class DriverState(Enum):
    """What the host says about the NVIDIA driver, independent of NVML."""

    NO_DEVICE = "no_device"  # no NVIDIA GPU on the PCI bus: nothing to watch, quietly
    NOT_INSTALLED = "not_installed"  # GPUs, but no nvidia kernel module for the running kernel
    NOT_LOADED = "not_loaded"  # GPUs and a module for this kernel, but it is not loaded
    LOADED = "loaded"


@dataclass(frozen=True)
class GpuPresence:
    """NVIDIA GPUs on the PCI bus and the state of their kernel driver."""

    pci_bus_ids: tuple[str, ...]
    driver_loaded: bool
    driver_installed: bool

    @property
    def state(self) -> DriverState:
        """The closed verdict the health check and rules act on."""
        if not self.pci_bus_ids:
            return DriverState.NO_DEVICE
        if self.driver_loaded:
            return DriverState.LOADED
        return DriverState.NOT_LOADED if self.driver_installed else DriverState.NOT_INSTALLED


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def probe_presence(sysfs_root: str | Path = "/sys", modules_root: str | Path = "/lib/modules",
                   kernel_release: str | None = None) -> GpuPresence:
    """Read PCI devices, the module state and the installed modules (missing files mean "absent")."""
    sysfs = Path(sysfs_root)
    devices = sysfs / "bus" / "pci" / "devices"
    gpus: list[str] = []
    try:
        entries = sorted(devices.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        if _read(entry / "vendor").lower() != NVIDIA_VENDOR:
            continue
        if _read(entry / "class").lower().startswith(GPU_CLASS_PREFIXES):
            gpus.append(entry.name.lower())
    loaded = (sysfs / "module" / "nvidia").is_dir()
    release = kernel_release or os.uname().release
    dep = _read(Path(modules_root) / release / "modules.dep")
    installed = loaded or any(line.split(":", 1)[0].rsplit("/", 1)[-1].startswith("nvidia.ko")
                              for line in dep.splitlines())
    return GpuPresence(tuple(gpus), loaded, installed)


def presence_samples(presence: GpuPresence, expected_gpus: int | None) -> list[Sample]:
    """The host-level GPU presence series (see the module docstring)."""
    expected = len(presence.pci_bus_ids) if expected_gpus is None else expected_gpus
    return [
        Sample(metric("watchdog_gpu_pci_devices"), float(len(presence.pci_bus_ids))),
        Sample(metric("watchdog_gpu_driver_loaded"), 1.0 if presence.driver_loaded else 0.0),
        Sample(metric("watchdog_gpu_driver_installed"), 1.0 if presence.driver_installed else 0.0),
        Sample(metric("watchdog_gpu_expected"), float(expected)),
    ]


class GpuPresenceCollector(Collector):
    """Probes PCI sysfs and the module state once per :meth:`collect`."""

    def __init__(self, *, sysfs_root: str = "/sys", modules_root: str = "/lib/modules",
                 expected_gpus: int | None = None, name: str = "gpu_presence",
                 timeout_seconds: float = 2.0) -> None:
        self.name = name
        self.timeout_seconds = timeout_seconds
        self.sysfs_root = sysfs_root
        self.modules_root = modules_root
        self.expected_gpus = expected_gpus

    def collect(self) -> list[Sample]:
        """The presence series; never raises for a missing file (absent means absent)."""
        return presence_samples(probe_presence(self.sysfs_root, self.modules_root), self.expected_gpus)


def gpu_presence_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """One presence collector over ``collectors.nvml`` (``expected_gpus``, ``sysfs_root``,
    ``modules_root``); none when NVML collection is disabled, or simulated (an injected NVML) without an
    explicit ``sysfs_root``: the PCI bus of the machine running a simulation says nothing about the
    simulated GPUs."""
    section = settings.collectors.nvml
    if not section.enabled or (context.nvml is not None and section.sysfs_root is None):
        return []
    return [GpuPresenceCollector(sysfs_root=section.sysfs_root or "/sys",
                                 modules_root=section.modules_root or "/lib/modules",
                                 expected_gpus=section.expected_gpus)]
