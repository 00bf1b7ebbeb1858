"""Every NVML error path of the collector: per field, per GPU, per session, absent NVML, hung calls."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from watchdog.collectors.base import CollectorRunner, NoData
from watchdog.collectors.nvml import COUNTERS_PART, NvmlCollector, NvmlUnavailable, import_pynvml
from watchdog.collectors.nvml import abi as F
from watchdog.collectors.nvml.fields import SCALAR_SLOTS
from watchdog.config.settings import NvmlSettings, section_settings
from watchdog.fakes.pynvml import FakeNvml
from watchdog.model import Sample, label_value, metric_name

from .test_nvml import select, value


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake() -> Iterator[FakeNvml]:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    yield nvml
    nvml.release()  # never leave a test thread hung in the fake



def nvml_settings(**overrides: object) -> NvmlSettings:
    return section_settings(NvmlSettings, "collectors.nvml", overrides)

def gpus_with(samples: list[Sample], name: str) -> set[str]:
    return {label_value(s.labels, "gpu") for s in select(samples, name)}


def test_not_supported_on_one_call_is_quietly_absent_and_not_asked_again(fake: FakeNvml) -> None:
    collector = NvmlCollector(fake)
    fake.fail("nvmlDeviceGetPowerUsage", F.NVML_ERROR_NOT_SUPPORTED, gpu=2)
    samples = collector.collect()
    assert gpus_with(samples, "watchdog_gpu_power_watts") == {str(g) for g in range(8)} - {"2"}
    assert value(samples, "watchdog_gpu_power_limit_watts", gpu="2") == 700.0
    assert not select(samples, "watchdog_gpu_nvml_errors_total")
    calls = fake.calls["nvmlDeviceGetPowerUsage"]
    collector.collect()
    assert fake.calls["nvmlDeviceGetPowerUsage"] == calls + 7  # GPU 2 is not asked again


def test_not_supported_field_is_absent_and_dropped_from_later_batches(fake: FakeNvml) -> None:
    collector = NvmlCollector(fake)
    fake.set_supported("recovery_action", False, gpu=0)
    samples = collector.collect()
    assert gpus_with(samples, "watchdog_gpu_recovery_action") == {str(g) for g in range(1, 8)}
    assert value(samples, "watchdog_gpu_ecc_mode_enabled", gpu="0") == 1.0
    planner = collector.reader._planners[0]
    assert planner.chosen[("recovery_action",)] is None
    assert (F.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 0) not in planner.requests(SCALAR_SLOTS)


def test_other_errors_are_counted_per_call_and_the_rest_of_the_gpu_goes_on(fake: FakeNvml) -> None:
    collector = NvmlCollector(fake)
    fake.fail("nvmlDeviceGetUtilizationRates", F.NVML_ERROR_UNKNOWN, gpu=6)
    collector.collect()
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_nvml_errors_total", gpu="6", call="nvmlDeviceGetUtilizationRates",
                 error="unknown") == 2.0
    assert "6" not in gpus_with(samples, "watchdog_gpu_utilization_ratio")
    assert value(samples, "watchdog_gpu_temperature_celsius", gpu="6") > 0
    assert value(samples, "watchdog_gpu_lost", gpu="6") == 0.0


@pytest.mark.parametrize(("code", "reset"),
                         [(F.NVML_ERROR_GPU_IS_LOST, 0.0), (F.NVML_ERROR_RESET_REQUIRED, 1.0)])
def test_gpu_lost_mid_collection_marks_only_that_gpu(fake: FakeNvml, code: int, reset: float) -> None:
    collector = NvmlCollector(fake)
    collector.collect()
    fake.fail("nvmlDeviceGetClockInfo", code, gpu=3)  # after utilization, memory, power were read
    samples = collector.collect()
    gpu3 = [s for s in samples if label_value(s.labels, "gpu") == "3"]
    assert {metric_name(s.labels) for s in gpu3} == {
        "watchdog_gpu_info", "watchdog_gpu_lost", "watchdog_gpu_reset_required", "watchdog_gpu_nvml_stalled"}
    assert value(gpu3, "watchdog_gpu_nvml_stalled") == 0.0
    assert value(gpu3, "watchdog_gpu_lost") == 1.0
    assert value(gpu3, "watchdog_gpu_reset_required") == reset
    assert label_value(gpu3[0].labels, "uuid") == fake.gpus[3].uuid  # identity survives the loss
    for gpu in ("0", "1", "2", "4", "5", "6", "7"):
        assert value(samples, "watchdog_gpu_lost", gpu=gpu) == 0.0
        assert value(samples, "watchdog_gpu_sm_clock_hertz", gpu=gpu) > 0


def test_gpu_lost_on_first_contact_still_reports_loss(fake: FakeNvml) -> None:
    fake.set(5, lost=True)
    samples = NvmlCollector(fake).collect()
    assert value(samples, "watchdog_gpu_lost", gpu="5") == 1.0
    assert len(gpus_with(samples, "watchdog_gpu_utilization_ratio")) == 7


def test_handle_lookup_answering_lost(fake: FakeNvml) -> None:
    fake.fail("nvmlDeviceGetHandleByIndex", F.NVML_ERROR_GPU_IS_LOST, gpu=1)
    samples = NvmlCollector(fake).collect()
    assert value(samples, "watchdog_gpu_lost", gpu="1") == 1.0
    assert value(samples, "watchdog_gpu_lost", gpu="0") == 0.0


def test_a_lost_field_value_marks_the_gpu_lost(fake: FakeNvml) -> None:
    collector = NvmlCollector(fake)
    original = fake.nvmlDeviceGetFieldValues

    def lost_entries(handle: Any, requests: Sequence[int | tuple[int, int]]) -> Any:
        values = original(handle, requests)
        if getattr(handle, "index", None) == 4:
            values[0].nvmlReturn = F.NVML_ERROR_GPU_IS_LOST
        return values

    fake.nvmlDeviceGetFieldValues = lost_entries  # type: ignore[method-assign,assignment]
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_lost", gpu="4") == 1.0
    assert value(samples, "watchdog_gpu_lost", gpu="3") == 0.0


def test_lost_gpu_comes_back_after_its_fault_window(fake: FakeNvml) -> None:
    collector = NvmlCollector(fake)
    fake.schedule([{"at_seconds": 5, "gpu": 2, "fault": "gpu_lost", "duration_seconds": 10}])
    assert value(collector.collect(), "watchdog_gpu_lost", gpu="2") == 0.0
    fake.set_time(6)
    assert value(collector.collect(), "watchdog_gpu_lost", gpu="2") == 1.0
    assert "fallen off the bus" in fake.drain_kmsg()[0]
    fake.set_time(20)
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_lost", gpu="2") == 0.0
    assert value(samples, "watchdog_gpu_power_watts", gpu="2") > 0


def test_one_bad_gpu_among_eight_does_not_lose_the_others(fake: FakeNvml) -> None:
    collector = NvmlCollector(fake)
    for call in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetFieldValues",
                 "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetName"):
        fake.fail(call, F.NVML_ERROR_UNKNOWN, gpu=7)
    samples = collector.collect()
    assert len(gpus_with(samples, "watchdog_gpu_utilization_ratio")) == 7
    assert len(gpus_with(samples, "watchdog_gpu_nvlink_up")) == 7
    assert value(samples, "watchdog_gpu_power_watts", gpu="7") > 0
    errors = {label_value(s.labels, "call")
              for s in select(samples, "watchdog_gpu_nvml_errors_total", gpu="7")}
    assert {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetFieldValues", "nvmlDeviceGetName"} <= errors


def test_field_values_unavailable_falls_back_to_dedicated_calls(fake: FakeNvml) -> None:
    via_fields = NvmlCollector(FakeNvml.from_profile("h100-sxm-8")).collect()
    fake.fail("nvmlDeviceGetFieldValues", F.NVML_ERROR_FUNCTION_NOT_FOUND)
    clock = Clock()
    collector = NvmlCollector(fake, counters_clock=clock)
    direct = collector.collect()
    names = ("watchdog_gpu_ecc_errors_total", "watchdog_gpu_remapped_rows", "watchdog_gpu_pcie_replays_total",
             "watchdog_gpu_energy_joules_total", "watchdog_gpu_nvlink_errors_total", "watchdog_gpu_nvlink_up")
    for name in names:
        assert len(select(direct, name)) == len(select(via_fields, name)) > 0, name
    fake.calls.clear()
    clock.now += 1  # within counters_interval_seconds (5): the counters are not read, nor reported
    again = collector.collect()
    assert fake.calls["nvmlDeviceGetFieldValues"] == 0  # learnt: not asked again this session
    assert fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == fake.calls["nvmlDeviceGetRemappedRows"] == 0
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 8  # read at every call
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 8 * 2  # uncorrectable, volatile and aggregate
    assert again.parts == {} and COUNTERS_PART in direct.parts
    for name in ("watchdog_gpu_remapped_rows", "watchdog_gpu_pcie_replays_total", "watchdog_gpu_nvlink_errors_total",
                 "watchdog_gpu_nvlink_up"):
        assert not select(again, name), name
    assert len(select(again, "watchdog_gpu_ecc_errors_total", type="uncorrected")) == 8 * 2
    assert len(select(again, "watchdog_gpu_energy_joules_total")) == 8
    fake.calls.clear()
    clock.now += 4  # the interval has passed
    collector.collect()
    assert fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == 8 * 18 * 3  # no crc_data on Hopper


def test_nvml_library_missing_is_no_data_with_backoff() -> None:
    clock = Clock()
    fake = FakeNvml.missing()
    collector = NvmlCollector(fake, clock=clock)
    with pytest.raises(NoData):
        collector.collect()
    with pytest.raises(NoData):
        collector.collect()
    assert fake.calls["nvmlInitWithFlags"] == 1  # within the backoff: not retried
    clock.now += 1.5
    with pytest.raises(NoData):
        collector.collect()
    assert fake.calls["nvmlInitWithFlags"] == 2
    clock.now += 1.5  # backoff doubled to 2 s
    with pytest.raises(NoData):
        collector.collect()
    assert fake.calls["nvmlInitWithFlags"] == 2


def test_pynvml_not_installed_is_no_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes ``import pynvml`` raise ImportError
    with pytest.raises(NoData):
        import_pynvml()
    with pytest.raises(NoData):
        NvmlCollector().collect()


def test_init_failing_for_another_reason_fails_the_collector(fake: FakeNvml) -> None:
    fake.fail("nvmlInitWithFlags", F.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(NvmlUnavailable, match="no_permission"):
        NvmlCollector(fake).collect()


def test_driver_unloaded_mid_run_breaks_the_session_then_recovers(fake: FakeNvml) -> None:
    clock = Clock()
    collector = NvmlCollector(fake, clock=clock)
    assert collector.collect()
    fake.unload_driver()
    with pytest.raises(NvmlUnavailable, match="uninitialized"):
        collector.collect()
    clock.now += 2
    with pytest.raises(NoData):  # nvmlInit: DRIVER_NOT_LOADED
        collector.collect()
    fake.load_driver()
    clock.now += 10
    samples = collector.collect()
    assert value(samples, "watchdog_gpu_lost", gpu="0") == 0.0
    assert fake.initialized


def test_close_releases_the_nvml_reference(fake: FakeNvml) -> None:
    collector = NvmlCollector(fake)
    collector.collect()
    assert fake.initialized
    collector.close()
    assert not fake.initialized


def test_a_hung_gpu_is_reported_stalled_and_the_others_go_on(fake: FakeNvml) -> None:
    # a 1 s per-GPU deadline: the healthy GPUs' fake reads take microseconds, but on a loaded CI machine
    # their threads can wait longer than the 0.2 s this test once used, and be reported stalled too
    collector = NvmlCollector(fake, nvml_settings(timeout_seconds=1.25))
    runner = CollectorRunner([collector])
    assert runner.run_once()[0].success
    fake.hang("nvmlDeviceGetPowerUsage", gpu=5)
    for _ in range(2):
        (result,) = runner.run_once()
        assert result.success
        samples = result.samples
        assert value(samples, "watchdog_gpu_nvml_stalled", gpu="5") == 1.0
        assert not [s for s in samples if label_value(s.labels, "gpu") == "5"
                    and metric_name(s.labels) not in ("watchdog_gpu_info", "watchdog_gpu_nvml_stalled")]
        info = select(samples, "watchdog_gpu_info", gpu="5")[0]
        assert label_value(info.labels, "uuid") == fake.gpus[5].uuid
        assert len(gpus_with(samples, "watchdog_gpu_power_watts")) == 7
        assert value(samples, "watchdog_gpu_nvml_stalled", gpu="4") == 0.0
    # 8 before the hang, 8 with the one that hangs, 7: the hung read is not started again
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 8 + 8 + 7
    fake.release()
    collector._inflight[5].result(timeout=10)  # the released read finishes (late, discarded)
    (result,) = runner.run_once()
    assert result.success and value(result.samples, "watchdog_gpu_power_watts", gpu="5") > 0
    assert value(result.samples, "watchdog_gpu_nvml_stalled", gpu="5") == 0.0
    runner.close()


def test_a_hang_outside_any_gpu_is_bounded_by_the_runner_and_isolated(fake: FakeNvml) -> None:
    healthy = FakeNvml.from_profile("l40s-pcie-4")
    hung = NvmlCollector(fake, nvml_settings(timeout_seconds=0.2), name="nvml-hung")
    runner = CollectorRunner([hung, NvmlCollector(healthy, nvml_settings(timeout_seconds=5), name="nvml-ok")])
    fake.hang("nvmlDeviceGetCount")
    errors = []
    for _ in range(3):
        results = {r.name: r for r in runner.run_once()}
        assert not results["nvml-hung"].success
        errors.append(results["nvml-hung"].error)
        assert results["nvml-ok"].success and results["nvml-ok"].samples
    assert errors == ["timeout", "previous call still running", "previous call still running"]
    fake.release()
    runner._inflight["nvml-hung"].future.exception(timeout=10)
    assert {r.name: r.success for r in runner.run_once()} == {"nvml-hung": True, "nvml-ok": True}
    runner.close()


def test_runner_reports_absent_nvml_as_quiet_success_and_stops_after_close() -> None:
    runner = CollectorRunner([NvmlCollector(FakeNvml.missing())])
    (result,) = runner.run_once()
    assert result.success and result.samples == [] and result.error == "no data"
    runner.close()
    (result,) = runner.run_once()
    assert not result.success and result.error == "runner closed"
