"""dcgm-exporter compatibility: each DCGM field from the store's series, converted; the last Xid."""

from __future__ import annotations

import pytest

from watchdog.exporter.catalogue import load_catalogue
from watchdog.exporter.dcgm import FIELDS, DcgmField, DcgmProvider, dcgm_field_names
from watchdog.model import Sample, make_labels
from watchdog.pods.directory import PodDirectory
from watchdog.pods.podresources import PodRef
from watchdog.store import Store

T0 = 1_800_000_000_000
UUID = "GPU-aaaa"


def gpu(series: str, value: float, **labels: str) -> Sample:
    return Sample(make_labels({"__name__": series, "gpu": "0", "uuid": UUID, **labels}), value)


def values(provider: DcgmProvider) -> dict[str, float]:
    return {dict(s.labels)["__name__"]: s.value for s in provider.samples()}


def test_counters_and_flags_map_to_their_fields() -> None:
    store = Store()
    store.ingest("nvml", [
        gpu("watchdog_gpu_info", 1, name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:18:00.0", driver_version="550.1",
            serial="1"),
        gpu("watchdog_gpu_ecc_errors_total", 3, type="corrected", scope="volatile"),
        gpu("watchdog_gpu_ecc_errors_total", 9, type="corrected", scope="aggregate"),
        gpu("watchdog_gpu_ecc_errors_total", 1, type="uncorrected", scope="volatile"),
        gpu("watchdog_gpu_ecc_errors_total", 2, type="uncorrected", scope="aggregate"),
        gpu("watchdog_gpu_remapped_rows", 4, kind="correctable"),
        gpu("watchdog_gpu_remapped_rows", 1, kind="uncorrectable"),
        gpu("watchdog_gpu_row_remap_pending", 1), gpu("watchdog_gpu_row_remap_failed", 0),
        gpu("watchdog_gpu_nvlink_errors_total", 5, link="0", type="crc_flit"),
        gpu("watchdog_gpu_nvlink_errors_total", 6, link="1", type="crc_flit"),
        gpu("watchdog_gpu_nvlink_errors_total", 2, link="1", type="replay"),
        gpu("watchdog_gpu_energy_joules_total", 12.5),
        gpu("watchdog_gpu_memory_utilization_ratio", 0.25),
    ], T0)
    got = values(DcgmProvider(store, "node-1", lambda: T0 / 1000))
    assert got["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == 3 and got["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"] == 9
    assert got["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 1 and got["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"] == 2
    assert got["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 4 and got["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 1
    assert got["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 1 and got["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert got["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"] == 11  # summed over links, as DCGM's total
    assert got["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"] == 2
    assert "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL" not in got  # no source series: absent, not 0
    assert got["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 12500  # mJ
    assert got["DCGM_FI_DEV_MEM_COPY_UTIL"] == 25
    assert got["DCGM_FI_DEV_XID_ERRORS"] == 0


def test_xid_errors_is_the_last_xid_seen() -> None:
    store = Store()
    info = gpu("watchdog_gpu_info", 1, name="H100", pci_bus_id="0", driver_version="1", serial="1")
    now = [T0]
    provider = DcgmProvider(store, "n", lambda: now[0] / 1000)

    def scrape_after(*counts: tuple[str, float]) -> float:
        now[0] += 1000
        store.ingest("kmsg", [info, *(gpu("watchdog_gpu_xid_errors_total", n, xid=x) for x, n in counts)], now[0])
        return values(provider)["DCGM_FI_DEV_XID_ERRORS"]

    assert scrape_after(("13", 4)) == 0  # counters found at the first scrape are history (DCGM starts at 0)
    assert scrape_after(("13", 4), ("79", 1)) == 79  # a new Xid series: a new Xid
    assert scrape_after(("13", 5), ("79", 1)) == 13  # the 13 counter grew since
    assert scrape_after(("13", 5), ("79", 1)) == 13  # nothing new: still the last one
    assert scrape_after(("13", 6), ("79", 2)) == 79  # two in one scrape interval: the higher code


def test_stale_or_old_series_are_not_served_and_pods_label_the_gpu() -> None:
    store = Store()
    store.ingest("nvml", [gpu("watchdog_gpu_temperature_celsius", 50)], T0)
    pods = PodDirectory()
    pods.update({UUID: [PodRef("ns", "p", "c")]}, {})
    fresh = DcgmProvider(store, "n", lambda: T0 / 1000, pods).samples()
    assert [dict(s.labels)["pod"] for s in fresh] == ["p"]
    assert DcgmProvider(store, "n", lambda: T0 / 1000 + 600).samples() == []  # past the 5-minute lookback
    store.ingest("nvml", [], T0 + 1000)  # the GPU's series went stale
    assert DcgmProvider(store, "n", lambda: T0 / 1000 + 1).samples() == []


def test_every_field_is_catalogued_as_a_gauge() -> None:
    catalogue = load_catalogue()
    for name in dcgm_field_names():
        assert name in catalogue, name
        assert catalogue[name].type == "gauge" and set(catalogue[name].labels) >= {"gpu", "UUID", "Hostname"}
    assert len(dcgm_field_names()) == len(FIELDS) + 2


@pytest.mark.parametrize("spec", FIELDS, ids=lambda spec: spec.name)
def test_every_field_reads_a_catalogued_agent_series(spec: DcgmField) -> None:
    assert spec.source in load_catalogue()
