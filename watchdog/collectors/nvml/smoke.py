"""One run of the NVML collector outside the agent: ``gpu smoke`` (what it read, with the cost of each
NVML call group) and ``gpu status`` (every GPU in one table, like ``nvidia-smi``).

Contract: :func:`open_nvml` gives the real pynvml, or raises :class:`SmokeError` with
the message to print; :func:`read_twice` collects twice (the first pass also reads static attributes;
the second is the steady per-tick cost) and returns the steady samples with the counters as last read;
:func:`smoke_report` is the JSON document; :func:`gpu_rows` and :func:`status_table` turn samples into
one row per GPU. Pure apart from the collector calls.
"""

from __future__ import annotations

import importlib.metadata
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from watchdog.collectors.base import NoData
from watchdog.collectors.nvml.collector import COUNTERS_PART, NvmlCollector
from watchdog.collectors.nvml.session import CallStats, NvmlUnavailable, import_pynvml
from watchdog.config.settings import NvmlSettings, section_settings
from watchdog.model import Sample, metric_name


class SmokeError(Exception):
    """NVML cannot be used here (no library, no driver, unknown fake profile): the message says which."""


@dataclass(frozen=True)
class Reading:
    """What two passes of the collector read."""

    samples: list[Sample]
    passes: list[dict[str, Any]]
    driver_version: str


def open_nvml() -> Any:
    """The real pynvml; raises :class:`SmokeError` (the fake comes from ``watchdog.demo.gpu_driver``)."""
    try:
        return import_pynvml()
    except NoData as exc:
        raise SmokeError(f"no NVML here: {exc}") from exc


def stats_json(stats: CallStats) -> dict[str, Any]:
    """Time and number of NVML calls per call group."""
    groups = sorted(stats.seconds)
    return {
        "ms_per_group": {g: round(stats.seconds[g] * 1000, 3) for g in groups},
        "calls_per_group": {g: stats.calls[g] for g in groups},
        "ms_total": round(sum(stats.seconds.values()) * 1000, 3),
        "calls_total": sum(stats.calls.values()),
    }


def read_twice(nvml: Any, nvlink: bool = True, processes: bool = True) -> Reading:
    """Collect twice; raises :class:`SmokeError` when NVML is not usable."""
    collector = NvmlCollector(nvml, section_settings(NvmlSettings, "collectors.nvml",
                                                     {"nvlink": nvlink, "processes": processes}))
    passes: list[dict[str, Any]] = []
    samples: list[Sample] = []
    counters: list[Sample] = []
    try:
        for label in ("first", "steady"):
            started = time.perf_counter()
            collected = collector.collect()
            wall_ms = round((time.perf_counter() - started) * 1000, 3)
            counters = collected.parts.get(COUNTERS_PART, counters)
            samples = collected.samples + counters
            passes.append({"pass": label, "wall_ms": wall_ms, "samples": len(list(collected)),
                           **stats_json(collector.last_stats)})
        return Reading(samples, passes, collector.driver_version)
    except (NoData, NvmlUnavailable) as exc:
        raise SmokeError(f"NVML is not usable here: {exc}") from exc
    finally:
        collector.close()


def library_version(nvml: Any, fake: str | None) -> str:
    """``fake:PROFILE`` or the nvidia-ml-py version."""
    if fake:
        return f"fake:{fake}"
    try:
        return "nvidia-ml-py " + importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(nvml, "__file__", "pynvml"))


def sample_json(sample: Sample) -> dict[str, Any]:
    """One sample as ``{name, labels, value}``."""
    return {"name": metric_name(sample.labels), "labels": {k: v for k, v in sample.labels if k != "__name__"},
            "value": sample.value}


def smoke_report(reading: Reading, library: str) -> dict[str, Any]:
    """The ``gpu smoke`` document (docs/nvml.md)."""
    per_series: dict[str, int] = defaultdict(int)
    for sample in reading.samples:
        per_series[metric_name(sample.labels)] += 1
    gpus = sorted({dict(s.labels).get("gpu", "") for s in reading.samples} - {""}, key=int)
    lost = [dict(s.labels)["gpu"] for s in reading.samples
            if metric_name(s.labels) == "watchdog_gpu_lost" and s.value == 1.0]
    return {"library": library, "driver_version": reading.driver_version, "gpus": len(gpus), "gpus_lost": lost,
            "passes": reading.passes, "series": dict(sorted(per_series.items())),
            "samples": [sample_json(s) for s in reading.samples]}


def _per_gpu(samples: list[Sample]) -> dict[str, dict[str, list[tuple[dict[str, str], float]]]]:
    out: dict[str, dict[str, list[tuple[dict[str, str], float]]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        labels = dict(sample.labels)
        if "gpu" in labels:
            out[labels["gpu"]][metric_name(sample.labels)].append((labels, sample.value))
    return out


def _one(series: dict[str, list[tuple[dict[str, str], float]]], name: str, **match: str) -> float | None:
    for labels, value in series.get(name, []):
        if all(labels.get(k) == v for k, v in match.items()):
            return value
    return None


def gpu_rows(samples: list[Sample]) -> list[dict[str, Any]]:
    """One row per GPU, in index order: identity, PCIe link against its maximum, temperature and its
    margin to the first slowdown threshold, power, memory, ECC and row remapping, and flags."""
    rows = []
    for gpu, series in sorted(_per_gpu(samples).items(), key=lambda item: int(item[0])):
        info = series.get("watchdog_gpu_info", [({}, 0.0)])[0][0]
        temp = _one(series, "watchdog_gpu_temperature_celsius")
        thresholds = [v for labels, v in series.get("watchdog_gpu_temperature_threshold_celsius", [])
                      if labels.get("kind") in ("slowdown", "gpu_max")]
        flags = sorted(labels["reason"] for labels, v in series.get("watchdog_gpu_clock_event_active", [])
                       if v == 1.0 and labels.get("reason") not in ("gpu_idle", None))
        if _one(series, "watchdog_gpu_lost") == 1.0:
            flags.insert(0, "LOST")
        if _one(series, "watchdog_gpu_row_remap_pending") == 1.0:
            flags.append("remap_pending")
        if _one(series, "watchdog_gpu_row_remap_failed") == 1.0:
            flags.append("remap_failed")
        rows.append({
            "gpu": int(gpu), "name": info.get("name", ""), "uuid": info.get("uuid", ""),
            "pci_bus_id": info.get("pci_bus_id", ""),
            "pcie_gen": _one(series, "watchdog_gpu_pcie_link_generation", kind="current"),
            "pcie_gen_max": _one(series, "watchdog_gpu_pcie_link_generation", kind="max"),
            "pcie_width": _one(series, "watchdog_gpu_pcie_link_width", kind="current"),
            "pcie_width_max": _one(series, "watchdog_gpu_pcie_link_width", kind="max"),
            "temperature_celsius": temp,
            "slowdown_margin_celsius": min(thresholds) - temp if thresholds and temp is not None else None,
            "power_watts": _one(series, "watchdog_gpu_power_watts"),
            "power_limit_watts": _one(series, "watchdog_gpu_power_limit_watts"),
            "memory_used_bytes": _one(series, "watchdog_gpu_memory_used_bytes"),
            "memory_total_bytes": _one(series, "watchdog_gpu_memory_total_bytes"),
            "utilization_ratio": _one(series, "watchdog_gpu_utilization_ratio"),
            "ecc_uncorrected_volatile": _one(series, "watchdog_gpu_ecc_errors_total", type="uncorrected",
                                             scope="volatile"),
            "remapped_rows_uncorrectable": _one(series, "watchdog_gpu_remapped_rows", kind="uncorrectable"),
            "flags": flags,
        })
    return rows


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def status_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned table (one line per GPU), like ``nvidia-smi`` or ``dcgmi discovery -l``."""
    header = ("GPU", "NAME", "UUID", "PCI", "LINK (MAX)", "TEMP", "MARGIN", "POWER/LIMIT", "MEMORY",
              "UTIL", "ECC UNC", "REMAP", "FLAGS")
    lines = [header]
    for r in rows:
        link = (f"Gen{_num(r['pcie_gen'])} x{_num(r['pcie_width'])} "
                f"(Gen{_num(r['pcie_gen_max'])} x{_num(r['pcie_width_max'])})")
        used, total = r["memory_used_bytes"], r["memory_total_bytes"]
        memory = "-" if used is None or total is None else f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB"
        margin = r["slowdown_margin_celsius"]
        margin_text = "-" if margin is None else (f"{margin:.0f} °C" if margin >= 0 else f"{-margin:.0f} °C over")
        lines.append((str(r["gpu"]), r["name"] or "-", r["uuid"] or "-", r["pci_bus_id"] or "-", link,
                      _num(r["temperature_celsius"], "{:.0f} °C"), margin_text,
                      f"{_num(r['power_watts'])}/{_num(r['power_limit_watts'])} W", memory,
                      _num(None if r["utilization_ratio"] is None else r["utilization_ratio"] * 100, "{:.0f} %"),
                      _num(r["ecc_uncorrected_volatile"]), _num(r["remapped_rows_uncorrectable"]),
                      ",".join(r["flags"]) or "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines) + "\n"
