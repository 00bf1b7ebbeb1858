"""The NVML collector against the fake pynvml: series, units, profiles, batching and scripted faults."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from tests.support.settings import settings_of
from watchdog.collectors.base import CollectorContext
from watchdog.collectors.nvml import COUNTERS_PART, NvmlCollector, gpu_processes, nvml_collectors
from watchdog.collectors.nvml import abi as F
from watchdog.collectors.nvml.catalogue import NVML_SERIES
from watchdog.config import ConfigError
from watchdog.fakes.pynvml import FakeNvml, profile_names
from watchdog.model import Sample, label_value, metric_name

DESIGN_PER_GPU = (
    "watchdog_gpu_info", "watchdog_gpu_utilization_ratio", "watchdog_gpu_memory_utilization_ratio",
    "watchdog_gpu_memory_used_bytes", "watchdog_gpu_memory_total_bytes", "watchdog_gpu_temperature_celsius",
    "watchdog_gpu_power_watts", "watchdog_gpu_power_limit_watts", "watchdog_gpu_sm_clock_hertz",
    "watchdog_gpu_sm_clock_max_hertz", "watchdog_gpu_clock_event_active", "watchdog_gpu_pcie_link_generation",
    "watchdog_gpu_pcie_link_width", "watchdog_gpu_pcie_replays_total", "watchdog_gpu_ecc_errors_total",
    "watchdog_gpu_lost",
)


def select(samples: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    """Samples of ``name`` whose labels include ``labels``."""
    return [s for s in samples if metric_name(s.labels) == name
            and all(label_value(s.labels, k) == v for k, v in labels.items())]


def value(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """The one value of ``name{labels}``; fails unless exactly one sample matches."""
    found = select(samples, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0].value


def collector_for(profile: str) -> tuple[FakeNvml, NvmlCollector]:
    """A fake NVML and a collector whose tick clock is the fake's simulated time (as in the agent, where
    the fake's time and the tick both follow the agent's clock)."""
    fake = FakeNvml.from_profile(profile)
    return fake, NvmlCollector(fake, counters_clock=lambda: fake.now)


@pytest.mark.parametrize("profile", profile_names())
def test_every_profile_yields_the_design_series_for_every_gpu(profile: str) -> None:
    fake, collector = collector_for(profile)
    samples = collector.collect()
    assert len(fake.gpus) >= 4
    for gpu, state in enumerate(fake.gpus):
        mine = [s for s in samples if label_value(s.labels, "gpu") == str(gpu)]
        names = {metric_name(s.labels) for s in mine}
        assert set(DESIGN_PER_GPU) <= names, set(DESIGN_PER_GPU) - names
        assert all(label_value(s.labels, "uuid") == state.uuid for s in mine)
        info = select(mine, "watchdog_gpu_info")[0].labels
        assert label_value(info, "name") == state.name
        assert label_value(info, "pci_bus_id") == state.pci_bus_id
        assert label_value(info, "driver_version") == fake.driver_version
        assert label_value(info, "serial") == state.serial
        assert value(mine, "watchdog_gpu_lost") == 0.0


@pytest.mark.parametrize("profile", profile_names())
def test_every_emitted_series_is_catalogued_with_its_labels(profile: str) -> None:
    fake, collector = collector_for(profile)
    fake.set_processes(0, [(4242, 1 << 30)])
    fake.fail("nvmlDeviceGetPowerUsage", F.NVML_ERROR_UNKNOWN, gpu=1)
    for sample in collector.collect():
        name = metric_name(sample.labels)
        if name == "watchdog_gpu_nvml_devices":  # about the host, not one GPU: no gpu/uuid
            assert sample.labels == (("__name__", name),) and sample.value == len(fake.gpus)
            continue
        assert name in NVML_SERIES, name
        extra = {k for k, _ in sample.labels} - {"__name__", "gpu", "uuid"}
        # info may drop empty labels (serial); every other series carries exactly its catalogued labels
        assert extra <= set(NVML_SERIES[name].labels), (name, extra)
        if name != "watchdog_gpu_info":
            assert extra == set(NVML_SERIES[name].labels), (name, extra)
        assert label_value(sample.labels, "gpu") != ""


def test_values_are_in_base_units() -> None:
    fake, collector = collector_for("h100-sxm-8")
    fake.set_load(0, 80)
    fake.set(0, power_watts=512.5, memory_used_bytes=40 * 2**30, temperature_celsius=61)
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_utilization_ratio", gpu="0") == pytest.approx(0.80)
    assert value(samples, "watchdog_gpu_memory_utilization_ratio", gpu="0") == pytest.approx(0.48)
    assert value(samples, "watchdog_gpu_power_watts", gpu="0") == pytest.approx(512.5)
    assert value(samples, "watchdog_gpu_power_limit_watts", gpu="0") == 700.0
    assert value(samples, "watchdog_gpu_temperature_celsius", gpu="0") == 61.0
    assert value(samples, "watchdog_gpu_memory_used_bytes", gpu="0") == 40 * 2**30
    assert value(samples, "watchdog_gpu_memory_total_bytes", gpu="0") == 81559 * 2**20
    assert value(samples, "watchdog_gpu_memory_reserved_bytes", gpu="0") == 522 * 2**20
    assert value(samples, "watchdog_gpu_sm_clock_hertz", gpu="0") == 1980e6
    assert value(samples, "watchdog_gpu_sm_clock_max_hertz", gpu="0") == 1980e6
    assert value(samples, "watchdog_gpu_memory_clock_max_hertz", gpu="0") == 2619e6
    assert value(samples, "watchdog_gpu_temperature_threshold_celsius", gpu="0", kind="slowdown") == 89.0
    assert value(samples, "watchdog_gpu_memory_temperature_celsius", gpu="0") == 61.0 + 7
    fake.advance(10)
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_energy_joules_total", gpu="0") == pytest.approx(5125.0)


def test_nvlink_series_per_profile() -> None:
    h100 = collector_for("h100-sxm-8")[1].collect()
    assert len(select(h100, "watchdog_gpu_nvlink_up", gpu="0")) == 18
    types = {label_value(s.labels, "type") for s in select(h100, "watchdog_gpu_nvlink_errors_total", gpu="0")}
    assert types == {"replay", "recovery", "crc_flit"}  # Hopper has no data-CRC counter
    a100 = collector_for("a100-sxm-8")[1].collect()
    assert len(select(a100, "watchdog_gpu_nvlink_up", gpu="7")) == 12
    assert len(select(a100, "watchdog_gpu_nvlink_errors_total", gpu="7", type="crc_data")) == 12
    l40s = collector_for("l40s-pcie-4")[1].collect()
    assert not select(l40s, "watchdog_gpu_nvlink_up") and not select(l40s, "watchdog_gpu_nvlink_errors_total")
    assert not select(l40s, "watchdog_gpu_memory_temperature_celsius")
    assert not select(l40s, "watchdog_gpu_remapped_rows") and not select(l40s, "watchdog_gpu_recovery_action")


def test_eight_gpus_with_eighteen_links_cost_one_field_call_each() -> None:
    fake, collector = collector_for("h100-sxm-8")
    collector.collect()
    fake.calls.clear()
    collector.collect()
    assert fake.calls["nvmlDeviceGetFieldValues"] == 8
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 0 and fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == 0
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 0 and fake.calls["nvmlDeviceGetRemappedRows"] == 0
    assert fake.calls["nvmlDeviceGetTemperatureThreshold"] == 0  # static: read once
    assert sum(fake.calls.values()) <= 1 + 8 * 15


def test_old_driver_nvlink_uses_the_per_link_fields_and_calls() -> None:
    fake, collector = collector_for("a100-sxm-8")
    fake.set_nvlink(2, 5, crc_data=7, crc_flit=3, replay=2, recovery=1)
    fake.set_nvlink(2, 11, up=False)
    samples = collector.collect()
    for kind, expected in (("crc_data", 7), ("crc_flit", 3), ("replay", 2), ("recovery", 1)):
        assert value(samples, "watchdog_gpu_nvlink_errors_total", gpu="2", link="5", type=kind) == expected
    assert value(samples, "watchdog_gpu_nvlink_up", gpu="2", link="11") == 0.0
    assert value(samples, "watchdog_gpu_nvlink_up", gpu="2", link="10") == 1.0


def test_clock_event_reasons_fall_back_to_the_throttle_call() -> None:
    fake, collector = collector_for("a100-sxm-8")  # R535: no ClocksEventReasons
    fake.set(3, clock_event_reasons=["sw_power_cap", "hw_slowdown"])
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_clock_event_active", gpu="3", reason="sw_power_cap") == 1.0
    assert value(samples, "watchdog_gpu_clock_event_active", gpu="3", reason="hw_slowdown") == 1.0
    assert value(samples, "watchdog_gpu_clock_event_active", gpu="3", reason="gpu_idle") == 0.0
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 8
    collector.collect()
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 8  # tried once per GPU, then remembered


def test_memory_and_temperature_fall_back_to_older_calls() -> None:
    fake, collector = collector_for("h100-sxm-8")
    fake.set_supported("memory_v2", False)
    fake.fail("nvmlDeviceGetTemperatureV", F.NVML_ERROR_FUNCTION_NOT_FOUND)
    fake.set(0, memory_used_bytes=10 * 2**30, temperature_celsius=55)
    samples = collector.collect()
    # v1 "used" includes the driver's reservation; there is no reserved series then
    assert value(samples, "watchdog_gpu_memory_used_bytes", gpu="0") == 10 * 2**30 + 522 * 2**20
    assert not select(samples, "watchdog_gpu_memory_reserved_bytes")
    assert value(samples, "watchdog_gpu_temperature_celsius", gpu="0") == 55.0


def test_idle_gpu_downshifts_pcie_and_downtraining_shows_only_under_load() -> None:
    fake, collector = collector_for("h100-sxm-8")
    fake.schedule([{"at_seconds": 0, "gpu": 4, "fault": "pcie_downtrain",
                    "params": {"generation": 3, "width": 8}}])
    samples = collector.collect()
    for gpu in ("0", "4"):  # idle: every GPU reads Gen1, which is not a fault
        assert value(samples, "watchdog_gpu_pcie_link_generation", gpu=gpu, kind="current") == 1.0
        assert value(samples, "watchdog_gpu_pcie_link_generation", gpu=gpu, kind="max") == 5.0
        assert value(samples, "watchdog_gpu_pcie_link_generation", gpu=gpu, kind="gpu_max") == 5.0
    assert value(samples, "watchdog_gpu_pcie_link_width", gpu="4", kind="max") == 16.0
    fake.set_load(0, 90)
    fake.set_load(4, 90)
    samples = collector.collect()  # the max link (static, with the counters) stays as stored
    assert value(samples, "watchdog_gpu_pcie_link_generation", gpu="0", kind="current") == 5.0
    assert value(samples, "watchdog_gpu_pcie_link_generation", gpu="4", kind="current") == 3.0
    assert value(samples, "watchdog_gpu_pcie_link_width", gpu="4", kind="current") == 8.0


def test_scripted_faults_reach_the_series() -> None:
    fake, collector = collector_for("h100-sxm-8")
    for gpu in range(8):
        fake.set_load(gpu, 70)
    fake.schedule([
        {"at_seconds": 10, "gpu": 1, "fault": "nvlink_down", "params": {"link": 4}, "duration_seconds": 20},
        {"at_seconds": 10, "gpu": 2, "fault": "nvlink_crc_burst", "params": {"link": 7, "count": 500}},
        {"at_seconds": 10, "gpu": 3, "fault": "ecc_uncorrectable", "params": {"count": 2}},
        {"at_seconds": 10, "gpu": 5, "fault": "hw_slowdown", "duration_seconds": 5},
        {"at_seconds": 10, "gpu": 6, "fault": "thermal_throttle"},
        {"at_seconds": 10, "gpu": 0, "fault": "straggler", "params": {"peers": [7]}},
    ])
    fake.set_time(12)
    s = collector.collect()
    assert value(s, "watchdog_gpu_nvlink_up", gpu="1", link="4") == 0.0
    assert value(s, "watchdog_gpu_nvlink_up", gpu="1", link="3") == 1.0
    assert value(s, "watchdog_gpu_nvlink_errors_total", gpu="2", link="7", type="crc_flit") == 500.0
    assert value(s, "watchdog_gpu_nvlink_errors_total", gpu="2", link="7", type="replay") == 50.0
    assert value(s, "watchdog_gpu_ecc_errors_total", gpu="3", type="uncorrected", scope="volatile") == 2.0
    assert value(s, "watchdog_gpu_ecc_errors_total", gpu="3", type="uncorrected", scope="aggregate") == 2.0
    assert value(s, "watchdog_gpu_remapped_rows", gpu="3", kind="uncorrectable") == 2.0
    assert value(s, "watchdog_gpu_row_remap_pending", gpu="3") == 1.0
    assert value(s, "watchdog_gpu_clock_event_active", gpu="5", reason="hw_slowdown") == 1.0
    assert value(s, "watchdog_gpu_sm_clock_hertz", gpu="5") == 990e6
    assert value(s, "watchdog_gpu_clock_event_active", gpu="6", reason="hw_thermal") == 1.0
    assert value(s, "watchdog_gpu_temperature_celsius", gpu="6") >= 90.0
    assert value(s, "watchdog_gpu_utilization_ratio", gpu="0") == 1.0
    assert value(s, "watchdog_gpu_utilization_ratio", gpu="7") == 0.0
    assert any("PCI:0000:5d:00): 48" in line for line in fake.drain_kmsg())
    fake.set_time(31)  # the link-down and slowdown windows have ended; counters keep their values
    s = collector.collect()
    assert value(s, "watchdog_gpu_nvlink_up", gpu="1", link="4") == 1.0
    assert value(s, "watchdog_gpu_clock_event_active", gpu="5", reason="hw_slowdown") == 0.0
    assert value(s, "watchdog_gpu_nvlink_errors_total", gpu="2", link="7", type="crc_flit") == 500.0


def test_recovery_action_is_a_state_set() -> None:
    fake, collector = collector_for("h100-sxm-8")
    fake.set(2, recovery_action=1)  # NVML_GPU_RECOVERY_ACTION_GPU_RESET
    samples = collector.collect()
    actions = {label_value(s.labels, "action"): s.value
               for s in select(samples, "watchdog_gpu_recovery_action", gpu="2")}
    assert actions["gpu_reset"] == 1.0 and sum(actions.values()) == 1.0
    assert set(actions) == set(F.RECOVERY_ACTIONS.values())


def test_compute_processes_and_the_gpu_processes_helper() -> None:
    fake, collector = collector_for("h100-sxm-8")
    fake.set_processes(0, [(1001, 70 * 2**30)])
    fake.set_processes(1, [(1001, 70 * 2**30), (2002, None)])
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_processes", gpu="1") == 2.0
    assert value(samples, "watchdog_gpu_process_memory_used_bytes", gpu="1", pid="1001") == 70 * 2**30
    assert not select(samples, "watchdog_gpu_process_memory_used_bytes", pid="2002")  # unknown usage
    assert value(samples, "watchdog_gpu_processes", gpu="2") == 0.0
    processes = gpu_processes(fake)
    assert processes[0] == [(1001, 70 * 2**30)]
    assert processes[1] == [(1001, 70 * 2**30), (2002, None)]
    assert processes[7] == []
    assert fake.initialized  # the collector's own reference is untouched by the helper's init/shutdown


def test_process_list_falls_back_to_v2_on_old_drivers() -> None:
    fake, collector = collector_for("a100-sxm-8")
    fake.set_supported("processes_v3", False)
    fake.set_processes(2, [(31337, 2**30)])
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_process_memory_used_bytes", gpu="2", pid="31337") == 2**30
    assert not select(samples, "watchdog_gpu_nvml_errors_total")
    assert gpu_processes(fake)[2] == [(31337, 2**30)]


def test_gpu_processes_survives_a_lost_gpu() -> None:
    fake = FakeNvml.from_profile("h100-sxm-8")
    fake.set_processes(0, [(7, 1)])
    fake.set(3, lost=True)
    processes = gpu_processes(fake)
    assert processes[0] == [(7, 1)] and processes[3] == []
    assert not fake.initialized


def test_factory_reads_its_section_and_uses_the_injected_nvml() -> None:
    config = settings_of("collectors: {nvml: {timeout_seconds: 3, nvlink: false}}")
    context = CollectorContext(nvml=FakeNvml.from_profile("l40s-pcie-4"))
    (collector,) = nvml_collectors(config, context)
    assert isinstance(collector, NvmlCollector) and collector.timeout_seconds == 3 and not collector.nvlink
    assert len({label_value(s.labels, "gpu") for s in collector.collect()} - {""}) == 4
    disabled = settings_of("collectors: {nvml: {enabled: false}}")
    assert nvml_collectors(disabled, context) == []


def test_the_fake_is_not_a_config_key() -> None:
    """Fakes stay out of production: only an injected context brings the fake NVML."""
    with pytest.raises(ConfigError, match="fake_profile"):
        settings_of("collectors: {nvml: {fake_profile: h100-sxm-8}}")


def test_counters_are_read_every_counters_interval_while_losses_show_at_every_call() -> None:
    """NVLink, corrected-ECC and row-remap counters are read every ``counters_interval_seconds`` (5) of tick
    time, every GPU's at the same call, and returned in their own part only by the calls that read them or
    that change which GPUs they cover; a lost GPU, uncorrectable ECC errors and the fast series show at the
    very next call."""
    fake, collector = collector_for("h100-sxm-8")

    def gpus(counters: list[Sample]) -> set[str]:
        return {label_value(s.labels, "gpu") for s in counters}

    first = collector.collect()  # t=0: everything read
    assert len(select(first.parts[COUNTERS_PART], "watchdog_gpu_nvlink_up")) == 8 * 18
    assert not select(first.samples, "watchdog_gpu_nvlink_up")  # counters only in their part
    assert value(first, "watchdog_gpu_ecc_errors_total", gpu="3", type="corrected", scope="volatile") == 0.0
    fake.schedule([
        {"at_seconds": 1, "gpu": 2, "fault": "nvlink_crc_burst", "params": {"link": 7, "count": 500}},
        {"at_seconds": 1, "gpu": 3, "fault": "ecc_uncorrectable", "params": {"count": 2}},
        {"at_seconds": 1, "gpu": 5, "fault": "thermal_throttle"},
        {"at_seconds": 2, "gpu": 6, "fault": "gpu_lost", "duration_seconds": 4},
    ])
    fake.set_time(1)
    fields = fake.calls["nvmlDeviceGetFieldValues"]
    s = collector.collect()
    assert fake.calls["nvmlDeviceGetFieldValues"] - fields == 8  # the every-call fields, one call per GPU
    assert s.parts == {}  # not read, not reported: the stored counters stay as read at 0
    assert not select(s, "watchdog_gpu_nvlink_up")
    assert value(s, "watchdog_gpu_ecc_errors_total", gpu="3", type="uncorrected", scope="volatile") == 2.0
    assert value(s, "watchdog_gpu_temperature_celsius", gpu="5") >= 90.0  # every call
    fake.set_time(2)
    s = collector.collect()
    assert value(s, "watchdog_gpu_lost", gpu="6") == 1.0  # the lost-GPU path does not wait for counters
    lost = s.parts[COUNTERS_PART]  # reported again at once without the lost GPU (its counters go stale)
    assert gpus(lost) == {str(gpu) for gpu in range(8)} - {"6"}
    assert value(lost, "watchdog_gpu_nvlink_errors_total", gpu="2", link="7", type="crc_flit") == 0.0  # as read
    fake.set_time(3)
    assert collector.collect().parts == {}
    fake.set_time(5)
    s = collector.collect()
    assert value(s, "watchdog_gpu_nvlink_errors_total", gpu="2", link="7", type="crc_flit") == 500.0
    assert value(s, "watchdog_gpu_remapped_rows", gpu="3", kind="uncorrectable") == 2.0
    assert gpus(s.parts[COUNTERS_PART]) == {str(gpu) for gpu in range(8)} - {"6"}
    fake.schedule([{"at_seconds": 5.5, "gpu": 2, "fault": "nvlink_crc_burst", "params": {"link": 7, "count": 1}}])
    fake.set_time(6)
    s = collector.collect()  # GPU 6 is back: its counters are read at once, reported with the others' as read
    assert gpus(s.parts[COUNTERS_PART]) == {str(gpu) for gpu in range(8)}
    assert value(s, "watchdog_gpu_nvlink_errors_total", gpu="2", link="7", type="crc_flit") == 500.0
    fake.set_time(7)
    assert collector.collect().parts == {}
    fake.set_time(10)  # every GPU's counters keep one phase: 0, 5, 10
    s = collector.collect()
    assert gpus(s.parts[COUNTERS_PART]) == {str(gpu) for gpu in range(8)}
    assert value(s, "watchdog_gpu_nvlink_errors_total", gpu="2", link="7", type="crc_flit") == 501.0
