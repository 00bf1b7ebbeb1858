"""The host collector: CPU time per core and mode (steal included), load, memory, swap and pressure.

Contract: Prometheus-style series without ``gpu`` labels (catalogue: :data:`HOST_SERIES`); CPU time is a
counter per ``cpu`` and ``mode`` (``rate()`` it for utilisation, ``mode="steal"`` for a noisy hypervisor
neighbour); pressure (PSI, ``/proc/pressure/{cpu,memory,io}``) is absent quietly where the kernel has
none. psutil and the procfs root are injected; parsing is pure (:func:`parse_pressure`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from watchdog.collectors.base import Collector, CollectorContext
from watchdog.collectors.nvml.catalogue import SeriesInfo
from watchdog.config.settings import HostSettings, Settings
from watchdog.model import Labels, Sample, metric

log = logging.getLogger(__name__)

PRESSURE_RESOURCES = ("cpu", "memory", "io")
PRESSURE_WINDOWS = {"avg10": "10s", "avg60": "60s", "avg300": "300s"}

#: Every series the host collector can emit (no ``gpu``/``uuid`` labels).
HOST_SERIES: dict[str, SeriesInfo] = {
    "watchdog_host_cpu_seconds_total": SeriesInfo(
        "counter", "CPU time spent per CPU and mode.", ("cpu", "mode")),
    "watchdog_host_cpus": SeriesInfo("gauge", "Logical CPUs."),
    "watchdog_host_load1": SeriesInfo("gauge", "1-minute load average."),
    "watchdog_host_load5": SeriesInfo("gauge", "5-minute load average."),
    "watchdog_host_load15": SeriesInfo("gauge", "15-minute load average."),
    "watchdog_host_memory_total_bytes": SeriesInfo("gauge", "Physical memory."),
    "watchdog_host_memory_available_bytes": SeriesInfo("gauge", "Memory available without swapping."),
    "watchdog_host_memory_used_bytes": SeriesInfo("gauge", "Memory in use (psutil's definition)."),
    "watchdog_host_swap_total_bytes": SeriesInfo("gauge", "Swap space."),
    "watchdog_host_swap_used_bytes": SeriesInfo("gauge", "Swap in use."),
    "watchdog_host_swap_in_bytes_total": SeriesInfo("counter", "Bytes swapped in from disk."),
    "watchdog_host_swap_out_bytes_total": SeriesInfo("counter", "Bytes swapped out to disk."),
    "watchdog_host_pressure_stalled_seconds_total": SeriesInfo(
        "counter", "PSI: time some (or all: kind=full) tasks stalled on the resource.", ("resource", "kind")),
    "watchdog_host_pressure_ratio": SeriesInfo(
        "gauge", "PSI: share of time stalled, kernel average over the window.",
        ("resource", "kind", "window")),
}


def parse_pressure(text: str) -> dict[str, dict[str, float]]:
    """``/proc/pressure/<resource>`` text → ``{"some": {"avg10": .., "avg60": .., "avg300": .., "total": ..},
    "full": {...}}`` (``total`` in microseconds, averages in percent). Malformed lines are skipped."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind not in ("some", "full"):
            continue
        values: dict[str, float] = {}
        for item in rest.split():
            key, sep, raw = item.partition("=")
            if not sep:
                continue
            try:
                values[key] = float(raw)
            except ValueError:
                continue
        if values:
            out[kind] = values
    return out


def pressure_samples(resource: str, parsed: dict[str, dict[str, float]]) -> list[Sample]:
    """Samples of one resource's parsed PSI."""
    out: list[Sample] = []
    for kind, values in parsed.items():
        if "total" in values:
            labels = metric("watchdog_host_pressure_stalled_seconds_total", resource=resource, kind=kind)
            out.append(Sample(labels, values["total"] / 1e6))
        for key, window in PRESSURE_WINDOWS.items():
            if key in values:
                out.append(Sample(metric("watchdog_host_pressure_ratio", resource=resource, kind=kind,
                                         window=window), values[key] / 100.0))
    return out


def cpu_samples(times: Sequence[Any], modes: Iterable[str], per_cpu: bool,
                labels_cache: dict[tuple[int, str], Labels] | None = None) -> list[Sample]:
    """``watchdog_host_cpu_seconds_total`` from psutil ``cpu_times`` tuples (one per CPU, or one total);
    ``labels_cache`` keeps each (CPU, mode)'s label set between calls (a GPU host has hundreds of CPUs)."""
    out: list[Sample] = []
    modes = tuple(modes)
    cache: dict[tuple[int, str], Labels] = {} if labels_cache is None else labels_cache
    for index, entry in enumerate(times):
        for mode in modes:
            value = getattr(entry, mode, None)
            if value is not None:
                labels = cache.get((index, mode))
                if labels is None:
                    cpu = str(index) if per_cpu else "all"
                    labels = cache[(index, mode)] = metric("watchdog_host_cpu_seconds_total", cpu=cpu, mode=mode)
                out.append(Sample(labels, float(value)))
    return out


class HostCollector(Collector):
    """psutil + procfs reads; see the module docstring."""

    def __init__(self, settings: HostSettings, *, name: str = "host",
                 psutil_module: ModuleType | Any = psutil) -> None:
        self.name = name
        self.timeout_seconds = settings.timeout_seconds
        self.interval_seconds = settings.interval_seconds  # the runner calls it this often (collectors.base)
        self.per_cpu = settings.per_cpu
        self.cpu_modes = settings.cpu_modes
        self.proc_path = Path(settings.proc_path)
        self.psutil = psutil_module
        self._cpu_labels: dict[tuple[int, str], Labels] = {}

    def collect(self) -> list[Sample]:
        """One sample per series; pressure only where the kernel exposes it."""
        ps = self.psutil
        times = ps.cpu_times(percpu=True) if self.per_cpu else [ps.cpu_times(percpu=False)]
        samples = cpu_samples(times, self.cpu_modes, self.per_cpu, self._cpu_labels)
        samples.append(Sample(metric("watchdog_host_cpus"), float(ps.cpu_count(logical=True) or len(times))))
        loads = ("watchdog_host_load1", "watchdog_host_load5", "watchdog_host_load15")
        for name, value in zip(loads, ps.getloadavg(), strict=True):
            samples.append(Sample(metric(name), float(value)))
        vm = ps.virtual_memory()
        samples += [
            Sample(metric("watchdog_host_memory_total_bytes"), float(vm.total)),
            Sample(metric("watchdog_host_memory_available_bytes"), float(vm.available)),
            Sample(metric("watchdog_host_memory_used_bytes"), float(vm.used)),
        ]
        swap = ps.swap_memory()
        samples += [
            Sample(metric("watchdog_host_swap_total_bytes"), float(swap.total)),
            Sample(metric("watchdog_host_swap_used_bytes"), float(swap.used)),
            Sample(metric("watchdog_host_swap_in_bytes_total"), float(swap.sin)),
            Sample(metric("watchdog_host_swap_out_bytes_total"), float(swap.sout)),
        ]
        for resource in PRESSURE_RESOURCES:
            text = self._read_pressure(resource)
            if text is not None:
                samples += pressure_samples(resource, parse_pressure(text))
        return samples

    def _read_pressure(self, resource: str) -> str | None:
        """The PSI file's text, or None when this kernel (or container) has none."""
        try:
            return (self.proc_path / "pressure" / resource).read_text(encoding="ascii")
        except FileNotFoundError:
            return None
        except OSError as exc:  # EOPNOTSUPP when PSI is compiled in but disabled (psi=0)
            log.debug("pressure unreadable", extra={"resource": resource, "error": str(exc)})
            return None


def host_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """Factory for the config's ``collectors.host`` section: one collector, or none when disabled."""
    del context
    section = settings.collectors.host
    return [HostCollector(section)] if section.enabled else []
