"""The fake pynvml and the collector against the real, installed pynvml (nvidia-ml-py).

What the collector calls must exist in real pynvml with a compatible signature; every constant the
collector or the fake uses must have real pynvml's value; the fake's errors and structures must be
shaped like the real ones. Finally the collector runs on the real module: on a host without the NVIDIA
driver that is "no data"; on a GPU host it reads real GPUs.
"""

from __future__ import annotations

import ctypes
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pynvml = pytest.importorskip("pynvml")

from watchdog.collectors import nvml as nvml_module  # noqa: E402
from watchdog.collectors.base import NoData  # noqa: E402
from watchdog.collectors.nvml import NvmlCollector  # noqa: E402
from watchdog.collectors.nvml import abi as F  # noqa: E402
from watchdog.fakes import pynvml as fake_module  # noqa: E402
from watchdog.fakes.pynvml import FakeNvml  # noqa: E402
from watchdog.model import metric_name  # noqa: E402

#: abi names that are ours, not pynvml's (with the pynvml name where one exists).
OUR_NAMES = {"NVML_MEMORY_V2": "nvmlMemory_v2"}


def called_functions() -> set[str]:
    """Every ``nvml*`` function the collector's modules name (as strings or attributes)."""
    source = "".join(p.read_text(encoding="utf-8") for p in Path(nvml_module.__file__).parent.glob("*.py"))
    names = set(re.findall(r'"(nvml[A-Z]\w+)"', source)) | set(re.findall(r"\bnvml\.(nvml[A-Z]\w+)", source))
    assert len(names) > 30
    return names


def parameters(fn: Callable[..., Any]) -> list[tuple[str, bool]]:
    """(name, has default) of each parameter, ``self`` excluded."""
    signature = inspect.signature(fn)  # follows functools.wraps
    return [(p.name, p.default is not inspect.Parameter.empty) for p in signature.parameters.values()
            if p.name != "self"]


@pytest.mark.parametrize("name", sorted(called_functions()))
def test_every_called_function_exists_in_real_pynvml_and_the_fake_alike(name: str) -> None:
    real = getattr(pynvml, name, None)
    assert callable(real), f"{name} is not in the installed pynvml"
    fake = getattr(FakeNvml.from_profile("h100-sxm-8"), name, None)
    assert callable(fake), f"{name} is missing from the fake"
    assert parameters(fake) == parameters(real), name


def test_collector_constants_equal_real_pynvml() -> None:
    checked = 0
    for name, ours in vars(F).items():
        if not (name.startswith("NVML_") and isinstance(ours, int)):
            continue
        real_name = OUR_NAMES.get(name, name)
        assert hasattr(pynvml, real_name), f"{name} is not a pynvml constant"
        assert getattr(pynvml, real_name) == ours, name
        checked += 1
    assert checked > 50


def test_legacy_per_link_field_ids_match_pynvml() -> None:
    for family, (l0, l6) in {"CRC_FLIT": (F.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0,
                                          F.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6),
                             "CRC_DATA": (F.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0,
                                          F.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6),
                             "REPLAY": (F.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0,
                                        F.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6),
                             "RECOVERY": (F.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0,
                                          F.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6)}.items():
        for link in range(12):
            real = getattr(pynvml, f"NVML_FI_DEV_NVLINK_{family}_ERROR_COUNT_L{link}")
            assert F.legacy_link_field(l0, l6, link) == real
        assert F.legacy_link_field(l0, l6, 12) is None


def test_clock_event_reason_bits_and_recovery_actions_match_pynvml() -> None:
    bits = {reason: bit for bit, reason in F.CLOCK_EVENT_REASONS.items()}
    assert bits["gpu_idle"] == pynvml.nvmlClocksEventReasonGpuIdle
    assert bits["sw_power_cap"] == pynvml.nvmlClocksEventReasonSwPowerCap
    assert bits["hw_slowdown"] == pynvml.nvmlClocksEventReasonHwSlowdown
    assert bits["sync_boost"] == pynvml.nvmlClocksEventReasonSyncBoost
    assert bits["sw_thermal"] == pynvml.nvmlClocksEventReasonSwThermalSlowdown
    assert bits["hw_thermal"] == pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert bits["hw_power_brake"] == pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    assert bits["display_clock_setting"] == pynvml.nvmlClocksEventReasonDisplayClockSetting
    assert bits["board_limit"] == pynvml.nvmlClocksThrottleReasonBoardLimit
    assert bits["reliability"] == pynvml.nvmlClocksThrottleReasonReliability
    assert F.RECOVERY_ACTIONS[pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET] == "gpu_reset"
    assert F.RECOVERY_ACTIONS[pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT] == "node_reboot"
    assert F.RECOVERY_ACTIONS[pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET] == "drain_and_reset"


def test_every_fake_constant_is_a_real_constant_with_the_same_value() -> None:
    checked = 0
    for name, value in vars(fake_module).items():
        if not name.startswith(("NVML_", "nvml")) or not isinstance(value, int) or isinstance(value, bool):
            continue
        assert hasattr(pynvml, name), f"the fake invents {name}"
        assert getattr(pynvml, name) == value, name
        checked += 1
    assert checked > 100


def test_the_fake_error_hierarchy_is_pynvmls() -> None:
    real_classes = {n: c for n, c in vars(pynvml).items() if n.startswith("NVMLError_")}
    assert len(real_classes) > 20
    for name, real_class in real_classes.items():
        fake_class = getattr(fake_module, name, None)
        assert fake_class is not None, name
        code = real_class.__new__(real_class).value
        error = fake_module.NVMLError(code)
        assert type(error) is fake_class and isinstance(error, fake_module.NVMLError)
        assert error.value == code
        if code in pynvml.NVMLError._errcode_to_string:
            assert str(error) == pynvml.NVMLError._errcode_to_string[code]
    # pynvml's subclasses take no argument: their code is built in
    not_supported = fake_module.NVMLError_NotSupported()  # type: ignore[call-arg]
    assert isinstance(not_supported, fake_module.NVMLError)
    assert not_supported.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert FakeNvml.from_profile("h100-sxm-8").NVMLError_GpuIsLost is fake_module.NVMLError_GpuIsLost


@pytest.mark.parametrize("name", ["c_nvmlMemory_t", "c_nvmlMemory_v2_t", "c_nvmlUtilization_t",
                                  "c_nvmlValue_t", "c_nvmlFieldValue_t", "nvmlPciInfo_t"])
def test_fake_structures_have_the_real_layout(name: str) -> None:
    real, fake = getattr(pynvml, name), getattr(fake_module, name)
    assert [f[0] for f in fake._fields_] == [f[0] for f in real._fields_]
    assert ctypes.sizeof(fake) == ctypes.sizeof(real)


def test_the_collector_on_real_pynvml() -> None:
    """No driver here: quiet "no data". On a GPU host: real series for every GPU."""
    collector = NvmlCollector(pynvml)
    try:
        samples = collector.collect()
    except NoData:
        return
    try:
        names = {metric_name(s.labels) for s in samples}
        assert {"watchdog_gpu_info", "watchdog_gpu_utilization_ratio", "watchdog_gpu_power_watts"} <= names
    finally:
        collector.close()
