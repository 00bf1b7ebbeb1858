"""The fake pynvml on its own: profiles, the control API, simulated time and scripted faults."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml

from watchdog.fakes import pynvml as fake_module
from watchdog.fakes.gpu_model import effective_view, reasons_mask
from watchdog.fakes.pynvml import FakeNvml, Fault, load_profile, profile_names, xid_kmsg_line

EXPECTED = {  # profile: (GPUs, NVLinks per GPU, name, PCIe max generation)
    "h100-sxm-8": (8, 18, "NVIDIA H100 80GB HBM3", 5),
    "h200-sxm-8": (8, 18, "NVIDIA H200", 5),
    "a100-sxm-8": (8, 12, "NVIDIA A100-SXM4-80GB", 4),
    "l40s-pcie-4": (4, 0, "NVIDIA L40S", 4),
}


def started(profile: str = "h100-sxm-8") -> FakeNvml:
    fake = FakeNvml.from_profile(profile)
    fake.nvmlInit()
    return fake


def test_bundled_profiles() -> None:
    assert set(EXPECTED) <= set(profile_names())


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_profile_shapes(profile: str) -> None:
    gpus, links, name, gen = EXPECTED[profile]
    fake = started(profile)
    assert fake.nvmlDeviceGetCount() == gpus
    uuids, buses = set(), set()
    for index in range(gpus):
        handle = fake.nvmlDeviceGetHandleByIndex(index)
        assert fake.nvmlDeviceGetName(handle) == name
        assert fake.nvmlDeviceGetMaxPcieLinkGeneration(handle) == gen
        assert fake.nvmlDeviceGetMaxPcieLinkWidth(handle) == 16
        uuid = fake.nvmlDeviceGetUUID(handle)
        assert uuid.startswith("GPU-") and len(uuid) == 40
        uuids.add(uuid)
        bus = fake.nvmlDeviceGetPciInfo(handle).busId
        assert isinstance(bus, bytes) and len(bus) == 16  # b"00000000:18:00.0", as pynvml returns it
        buses.add(bus)
        if links:
            assert fake.nvmlDeviceGetNvLinkState(handle, links - 1) == fake.NVML_FEATURE_ENABLED
            with pytest.raises(fake.NVMLError_InvalidArgument):
                fake.nvmlDeviceGetNvLinkState(handle, links)
        else:
            with pytest.raises(fake.NVMLError_NotSupported):
                fake.nvmlDeviceGetNvLinkState(handle, 0)
    assert len(uuids) == len(buses) == gpus
    again = FakeNvml.from_profile(profile)  # deterministic identities
    again.nvmlInit()
    assert again.nvmlDeviceGetUUID(again.nvmlDeviceGetHandleByIndex(0)) in uuids


def test_unknown_profile_and_profile_from_a_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown GPU profile"):
        load_profile("b300-nvl-72")
    profile = load_profile("l40s-pcie-4")
    profile["name"] = "two-l40s"
    profile["gpus"] = profile["gpus"][:2]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(profile), encoding="utf-8")
    fake = FakeNvml.from_profile(path)
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 2


def test_calls_need_init_and_init_is_reference_counted() -> None:
    fake = FakeNvml.from_profile("h100-sxm-8")
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    fake.nvmlInit()
    fake.nvmlShutdown()
    assert fake.nvmlDeviceGetCount() == 8
    fake.nvmlShutdown()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_missing_library_and_unloaded_driver() -> None:
    missing = FakeNvml.missing()
    with pytest.raises(fake_module.NVMLError_LibraryNotFound):
        missing.nvmlInit()
    fake = started()
    fake.unload_driver()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    with pytest.raises(fake.NVMLError_DriverNotLoaded):
        fake.nvmlInit()
    fake.load_driver()
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 8


def test_errors_are_constructed_like_pynvmls() -> None:
    error = fake_module.NVMLError(fake_module.NVML_ERROR_GPU_IS_LOST)
    assert type(error).__name__ == "NVMLError_GpuIsLost" and str(error) == "GPU is lost"
    assert error == fake_module.NVMLError_GpuIsLost()  # type: ignore[call-arg]
    assert fake_module.NVMLError(12345).value == 12345  # unknown codes stay plain NVMLError
    assert type(fake_module.NVMLError(12345)) is fake_module.NVMLError


def test_idle_and_loaded_gpu_behave_like_real_ones() -> None:
    fake = started()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 1
    assert fake.nvmlDeviceGetClockInfo(handle, fake.NVML_CLOCK_SM) == 345
    assert fake.nvmlDeviceGetCurrentClocksEventReasons(handle) & fake.nvmlClocksEventReasonGpuIdle
    assert fake.nvmlDeviceGetPowerUsage(handle) == 72_000
    fake.set_load(0, 100)
    assert fake.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 5
    assert fake.nvmlDeviceGetClockInfo(handle, fake.NVML_CLOCK_SM) == 1980
    assert fake.nvmlDeviceGetCurrentClocksEventReasons(handle) == 0
    assert 600_000 < fake.nvmlDeviceGetPowerUsage(handle) < 700_000
    assert fake.nvmlDeviceGetTemperature(handle, fake.NVML_TEMPERATURE_GPU) == 67
    util = fake.nvmlDeviceGetUtilizationRates(handle)
    assert (util.gpu, util.memory) == (100, 60)


def test_set_pins_values_and_rejects_unknown_names() -> None:
    fake = started()
    handle = fake.nvmlDeviceGetHandleByIndex(1)
    fake.set(1, power_watts=700, clock_event_reasons=["sw_power_cap"], pcie_generation=2)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 700_000
    assert fake.nvmlDeviceGetCurrentClocksEventReasons(handle) == fake.nvmlClocksEventReasonSwPowerCap
    assert fake.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 2
    fake.set(1, power_watts=None)  # back to derived
    assert fake.nvmlDeviceGetPowerUsage(handle) == 72_000
    fake.set(1, ecc={("corrected", "volatile"): 12})
    assert fake.nvmlDeviceGetTotalEccErrors(handle, fake.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                            fake.NVML_VOLATILE_ECC) == 12
    with pytest.raises(ValueError, match="cannot set"):
        fake.set(1, utilisation=3)
    with pytest.raises(ValueError, match="unknown clock event reason"):
        reasons_mask(["too_hot"])


def test_memory_info_v1_and_v2() -> None:
    fake = started()
    fake.set_processes(0, [(10, 3 * 2**30), (11, 2**30)])
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    v2 = fake.nvmlDeviceGetMemoryInfo(handle, fake.nvmlMemory_v2)
    assert v2.used == 4 * 2**30 and v2.total == v2.used + v2.free + v2.reserved
    v1 = fake.nvmlDeviceGetMemoryInfo(handle)
    assert v1.used == v2.used + v2.reserved and v1.total == v1.used + v1.free


def test_field_values_carry_a_return_code_per_entry() -> None:
    fake = started("l40s-pcie-4")
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    entries = fake.nvmlDeviceGetFieldValues(handle, [fake.NVML_FI_DEV_ECC_CURRENT,
                                                     (fake.NVML_FI_DEV_NVLINK_GET_STATE, 0),
                                                     fake.NVML_FI_DEV_MEMORY_TEMP])
    unsupported = fake.NVML_ERROR_NOT_SUPPORTED
    assert [e.nvmlReturn for e in entries] == [fake.NVML_SUCCESS, unsupported, unsupported]
    assert entries[0].value.uiVal == 1 and entries[1].scopeId == 0


def test_energy_integrates_power_over_simulated_time() -> None:
    fake = started()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.set(0, power_watts=500)
    fake.advance(4)
    fake.set(0, power_watts=100)
    fake.advance(1)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == 2_100_000  # mJ
    with pytest.raises(ValueError, match="cannot go back"):
        fake.set_time(1)


def test_scripted_timeline() -> None:
    fake = started()
    fake.schedule([
        {"at_seconds": 5, "gpu": 3, "fault": "gpu_lost", "duration_seconds": 10},
        {"at_seconds": 7, "gpu": 1, "fault": "xid", "params": {"xid": 13, "pid": 4242, "process": "python3"}},
        {"at_seconds": 8, "gpu": 2, "fault": "reset_required"},
        {"at_seconds": 9, "gpu": 0, "fault": "row_remap_pending", "params": {"failed": True}},
    ])
    h3, h2, h0 = (fake.nvmlDeviceGetHandleByIndex(i) for i in (3, 2, 0))
    assert fake.nvmlDeviceGetPowerUsage(h3) > 0
    fake.advance(6)
    with pytest.raises(fake.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(h3)
    assert fake.drain_kmsg() == ["NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
                                 "GPU has fallen off the bus."]
    fake.advance(4)
    with pytest.raises(fake.NVMLError_ResetRequired):
        fake.nvmlDeviceGetUUID(h2)
    assert fake.nvmlDeviceGetRemappedRows(h0) == (0, 0, 1, 1)
    lines = fake.drain_kmsg()
    assert lines[0] == ("NVRM: Xid (PCI:0000:2a:00): 13, pid=4242, name=python3, "
                        "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address")
    assert "): 64, " in lines[1]
    assert fake.drain_kmsg() == []
    fake.set_time(15)
    assert fake.nvmlDeviceGetPowerUsage(h3) > 0  # the loss window is over


def test_clear_ends_window_faults_of_its_gpu() -> None:
    fake = started()
    fake.schedule([
        {"at_seconds": 1, "gpu": 0, "fault": "hw_slowdown"},
        {"at_seconds": 1, "gpu": 0, "fault": "nvlink_down", "params": {"links": [1, 2]}},
        {"at_seconds": 1, "gpu": 1, "fault": "gpu_lost"},
        {"at_seconds": 5, "gpu": 0, "fault": "clear"},
    ])
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    fake.set_time(2)
    assert fake.nvmlDeviceGetCurrentClocksEventReasons(h0) & fake.nvmlClocksEventReasonHwSlowdown
    assert fake.nvmlDeviceGetNvLinkState(h0, 2) == fake.NVML_FEATURE_DISABLED
    fake.set_time(6)
    assert not fake.nvmlDeviceGetCurrentClocksEventReasons(h0) & fake.nvmlClocksEventReasonHwSlowdown
    assert fake.nvmlDeviceGetNvLinkState(h0, 2) == fake.NVML_FEATURE_ENABLED
    with pytest.raises(fake.NVMLError_GpuIsLost):  # another GPU's fault is untouched
        fake.nvmlDeviceGetUUID(h1)
    fake.clear_faults()
    assert fake.nvmlDeviceGetUUID(h1) == fake.gpus[1].uuid


def test_faults_are_validated() -> None:
    fake = started("l40s-pcie-4")
    with pytest.raises(ValueError, match="unknown fault"):
        fake.schedule([{"at_seconds": 1, "gpu": 0, "fault": "meltdown"}])
    with pytest.raises(ValueError, match="names GPU 4"):
        fake.schedule([Fault(1, 4, "gpu_lost")])


def test_straggler_pins_one_rank_busy_and_its_peers_idle() -> None:
    fake = started()
    for gpu in range(8):
        fake.set_load(gpu, 60)
    fake.schedule([{"at_seconds": 0, "gpu": 6, "fault": "straggler", "params": {"peers": [4, 5, 7]}}])
    views = [effective_view(state, fake.faults, fake.now) for state in fake.gpus]
    assert views[6].utilization_gpu == 100.0
    assert [views[i].utilization_gpu for i in (4, 5, 7)] == [0.0, 0.0, 0.0]
    assert views[0].utilization_gpu == 60.0
    assert views[5].pcie_generation == 1  # an idle peer downshifts too


def test_injected_failures_and_hangs() -> None:
    fake = started()
    handle = fake.nvmlDeviceGetHandleByIndex(2)
    fake.fail("nvmlDeviceGetSerial", fake.NVML_ERROR_NO_PERMISSION, gpu=2)
    with pytest.raises(fake.NVMLError_NoPermission):
        fake.nvmlDeviceGetSerial(handle)
    assert fake.nvmlDeviceGetSerial(fake.nvmlDeviceGetHandleByIndex(1))
    fake.clear_failures()
    assert fake.nvmlDeviceGetSerial(handle)
    fake.hang("nvmlDeviceGetUUID")
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(fake.nvmlDeviceGetUUID(handle)), daemon=True)
    worker.start()
    worker.join(0.1)
    assert worker.is_alive() and not result
    fake.release()
    worker.join(10)
    assert result == [fake.gpus[2].uuid]


def test_xid_line_format() -> None:
    assert xid_kmsg_line("00000000:DB:00.0", 79) == (
        "NVRM: Xid (PCI:0000:db:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
    line = xid_kmsg_line("00000001:18:00.0", 31, 77, "vllm")
    assert line.startswith("NVRM: Xid (PCI:0001:18:00): 31, pid=77, name=vllm, Ch 00000008, intr 10000000.")
    assert started().xid_line(0, 94, message="Contained: SM") == (
        "NVRM: Xid (PCI:0000:18:00): 94, pid=<unknown>, name=<unknown>, Contained: SM")
