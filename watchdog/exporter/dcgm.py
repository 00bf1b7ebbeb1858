"""dcgm-exporter compatibility: the GPU fields of its default counters, under its names and labels.

Contract (``exporter.dcgm_compatible``, off by default; docs/dcgm-migration.md has the table):
- At each scrape, :class:`DcgmProvider` reads the newest fresh point of the agent's own GPU series in the
  store and writes each as the ``DCGM_FI_*`` field dcgm-exporter serves for it, converted to that
  field's unit (MHz, MiB, percent, mJ). A field whose source series is absent for a GPU is absent for it.
- Labels are dcgm-exporter's: ``gpu`` (index), ``UUID``, ``device`` (``nvidia<index>``), ``modelName``,
  ``Hostname`` (the node), ``pci_bus_id`` and ``DCGM_FI_DRIVER_VERSION`` (from ``watchdog_gpu_info``), and
  ``namespace``, ``pod``, ``container`` of the containers holding the GPU when the pod directory knows
  them (shared GPUs: joined with ``,``, as on the agent's own series).
- ``DCGM_FI_DEV_XID_ERRORS`` is, as in dcgm-exporter, the code of the last Xid seen on the GPU since it
  started watching (0: none): the ``xid`` of the Xid counter that last appeared or grew between two
  scrapes (the counters found at the first scrape are history, as DCGM starts at 0 too). Only the
  newest point of each series is read: the store's history is not decoded from the exporter's thread.
- Every field is typed ``gauge`` on the page: the text format prometheus-client writes requires a
  counter's samples to end in ``_total``, which dcgm-exporter's names do not; PromQL (``rate``,
  ``increase``) does not read the type, so queries written for dcgm-exporter work unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from watchdog.model import Labels, Sample, is_stale, make_labels
from watchdog.pods.directory import PodDirectory
from watchdog.store import Store

MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class DcgmField:
    """One DCGM field: its name, the agent series it comes from (with label matchers), how the value
    converts, and whether several matching series are summed (NVLink counters over links)."""

    name: str
    source: str
    matchers: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0
    sum_series: bool = False


FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "watchdog_gpu_sm_clock_hertz", scale=1e-6),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "watchdog_gpu_memory_clock_hertz", scale=1e-6),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "watchdog_gpu_temperature_celsius"),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "watchdog_gpu_memory_temperature_celsius"),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "watchdog_gpu_power_watts"),
    DcgmField("DCGM_FI_DEV_POWER_MGMT_LIMIT", "watchdog_gpu_power_limit_watts"),
    DcgmField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "watchdog_gpu_energy_joules_total", scale=1000.0),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "watchdog_gpu_utilization_ratio", scale=100.0),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "watchdog_gpu_memory_utilization_ratio", scale=100.0),
    DcgmField("DCGM_FI_DEV_FB_USED", "watchdog_gpu_memory_used_bytes", scale=1 / MIB),
    DcgmField("DCGM_FI_DEV_FB_TOTAL", "watchdog_gpu_memory_total_bytes", scale=1 / MIB),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "watchdog_gpu_pcie_replays_total"),
    DcgmField("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "watchdog_gpu_ecc_errors_total",
              (("type", "corrected"), ("scope", "volatile"))),
    DcgmField("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "watchdog_gpu_ecc_errors_total",
              (("type", "uncorrected"), ("scope", "volatile"))),
    DcgmField("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "watchdog_gpu_ecc_errors_total",
              (("type", "corrected"), ("scope", "aggregate"))),
    DcgmField("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "watchdog_gpu_ecc_errors_total",
              (("type", "uncorrected"), ("scope", "aggregate"))),
    DcgmField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "watchdog_gpu_remapped_rows", (("kind", "correctable"),)),
    DcgmField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "watchdog_gpu_remapped_rows",
              (("kind", "uncorrectable"),)),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_FAILURE", "watchdog_gpu_row_remap_failed"),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_PENDING", "watchdog_gpu_row_remap_pending"),
    DcgmField("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "watchdog_gpu_nvlink_errors_total",
              (("type", "crc_flit"),), sum_series=True),
    DcgmField("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "watchdog_gpu_nvlink_errors_total",
              (("type", "crc_data"),), sum_series=True),
    DcgmField("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "watchdog_gpu_nvlink_errors_total",
              (("type", "replay"),), sum_series=True),
    DcgmField("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "watchdog_gpu_nvlink_errors_total",
              (("type", "recovery"),), sum_series=True),
)
"""Every field served, in page order (FB_FREE and XID_ERRORS are derived: see :meth:`DcgmProvider.samples`)."""

DERIVED = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_XID_ERRORS")
"""Fields computed from more than one series: FB_FREE (total - used - reserved) and XID_ERRORS."""

_SOURCES = sorted({f.source for f in FIELDS} | {"watchdog_gpu_info", "watchdog_gpu_memory_reserved_bytes",
                                                "watchdog_gpu_xid_errors_total"})


def dcgm_field_names() -> list[str]:
    """Every ``DCGM_FI_*`` name the provider may serve."""
    return sorted([f.name for f in FIELDS] + list(DERIVED))


def _fresh(value: float) -> bool:
    return not is_stale(value)


class DcgmProvider:
    """A sample provider for :class:`~watchdog.exporter.collector.StoreCollector` (module docstring)."""

    def __init__(self, store: Store, node: str, clock: Callable[[], float], pods: PodDirectory | None = None,
                 pod_labels: Callable[[], bool] = lambda: True, lookback_ms: int = 300_000) -> None:
        """``pods`` labels each GPU's fields with its containers while ``pod_labels()`` is true."""
        self.store = store
        self.pod_labels = pod_labels
        self.node = node
        self.clock = clock
        self.pods = pods
        self.lookback_ms = lookback_ms
        self._lock = threading.Lock()  # scrapes may overlap: the Xid state is read and written under it
        self._xid_seen_scrape = False
        self._xid_counts: dict[tuple[str, str, str], float] = {}  # (gpu, uuid, xid) -> count at the last scrape
        self._xid_last: dict[tuple[str, str], tuple[int, float]] = {}  # (gpu, uuid) -> (scrape ms, code)

    def _latest(self, now_ms: int) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Source name -> (labels, newest value) of its fresh series."""
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        cutoff = now_ms - self.lookback_ms
        for name in _SOURCES:
            for series in self.store.select([("__name__", "=", name)]):
                point = series.latest()
                if point is None or point[0] < cutoff or not _fresh(point[1]):
                    continue
                out.setdefault(name, []).append((dict(series.labels), point[1]))
        return out

    def samples(self) -> list[Sample]:
        """This scrape's ``DCGM_FI_*`` samples."""
        with self._lock:
            return self._samples()

    def _samples(self) -> list[Sample]:
        now_ms = int(self.clock() * 1000)
        latest = self._latest(now_ms)
        info = {labels.get("uuid", ""): labels for labels, _ in latest.get("watchdog_gpu_info", [])}
        values: dict[tuple[str, str, str], float] = {}  # (field, gpu, uuid) -> value
        for spec in FIELDS:
            for labels, value in latest.get(spec.source, []):
                if any(labels.get(k) != v for k, v in spec.matchers):
                    continue
                key = (spec.name, labels.get("gpu", ""), labels.get("uuid", ""))
                scaled = value * spec.scale
                values[key] = values.get(key, 0.0) + scaled if spec.sum_series else scaled
        used = {(g, u): v for (n, g, u), v in values.items() if n == "DCGM_FI_DEV_FB_USED"}
        total = {(g, u): v for (n, g, u), v in values.items() if n == "DCGM_FI_DEV_FB_TOTAL"}
        reserved = {(labels.get("gpu", ""), labels.get("uuid", "")): value / MIB
                    for labels, value in latest.get("watchdog_gpu_memory_reserved_bytes", [])}
        for gpu_key, total_mib in total.items():
            if gpu_key in used:
                free = total_mib - used[gpu_key] - reserved.get(gpu_key, 0.0)
                values[("DCGM_FI_DEV_FB_FREE", gpu_key[0], gpu_key[1])] = max(free, 0.0)
        gpus = {(labels.get("gpu", ""), uuid) for uuid, labels in info.items()}
        for gpu_key, code in self._last_xid(latest.get("watchdog_gpu_xid_errors_total", []), gpus, now_ms).items():
            values[("DCGM_FI_DEV_XID_ERRORS", gpu_key[0], gpu_key[1])] = code
        return [Sample(self._labels(name, gpu, uuid, info.get(uuid, {})), value)
                for (name, gpu, uuid), value in sorted(values.items())]

    def _last_xid(self, series: Iterable[tuple[dict[str, str], float]],
                  gpus: Iterable[tuple[str, str]], now_ms: int) -> dict[tuple[str, str], float]:
        """(gpu, uuid) -> the code of the Xid whose counter last changed while this provider watched (0 for
        a GPU with none). A counter first seen at the first scrape is the baseline; one that appears or
        grows later is a new Xid, stamped with that scrape's time (two in one scrape: the higher code)."""
        first = not self._xid_seen_scrape
        self._xid_seen_scrape = True
        for labels, value in series:
            try:
                code = float(labels.get("xid", ""))
            except ValueError:
                continue
            gpu_key = (labels.get("gpu", ""), labels.get("uuid", ""))
            key = (*gpu_key, labels.get("xid", ""))
            before = self._xid_counts.get(key)
            self._xid_counts[key] = value
            if first or (before is not None and value <= before):
                continue
            last = self._xid_last.get(gpu_key)
            if last is None or (now_ms, code) > last:
                self._xid_last[gpu_key] = (now_ms, code)
        return {key: self._xid_last.get(key, (0, 0.0))[1] for key in gpus}

    def _labels(self, name: str, gpu: str, uuid: str, info: Mapping[str, str]) -> Labels:
        labels = {"__name__": name, "gpu": gpu, "UUID": uuid, "device": f"nvidia{gpu}" if gpu else "",
                  "modelName": info.get("name", ""), "Hostname": self.node, "pci_bus_id": info.get("pci_bus_id", ""),
                  "DCGM_FI_DRIVER_VERSION": info.get("driver_version", "")}
        if self.pods is not None and self.pod_labels():
            labels.update(self.pods.labels_for({"uuid": uuid}))
        return make_labels(labels)
