"""The agent's health verdict: never "ok" while something it should watch is not watched."""

from __future__ import annotations

from watchdog.collectors.base import CollectResult
from watchdog.collectors.health import Problem, Severity, assess, health_samples, worst
from watchdog.model import METRIC_NAME, Sample, make_labels, metric


def _presence(gpus: int, loaded: bool, installed: bool, expected: int | None = None) -> CollectResult:
    values = {"watchdog_gpu_pci_devices": gpus, "watchdog_gpu_driver_loaded": int(loaded),
              "watchdog_gpu_driver_installed": int(installed),
              "watchdog_gpu_expected": gpus if expected is None else expected}
    return CollectResult("gpu_presence", [Sample(metric(k), float(v)) for k, v in values.items()], True, 0.01)


def _nvml(devices: int | None, error: str = "", success: bool = True) -> CollectResult:
    samples = [] if devices is None else [Sample(metric("watchdog_gpu_nvml_devices"), float(devices))]
    return CollectResult("nvml", samples, success, 0.01, error)


def _engine(up: bool) -> CollectResult:
    sample = Sample(make_labels({METRIC_NAME: "up", "job": "vllm", "instance": "127.0.0.1:8000"}), float(up))
    return CollectResult("engine:vllm", [sample], True, 0.01)


def _checks(problems: list[Problem]) -> dict[str, Severity]:
    return {p.check: p.severity for p in problems}


def test_a_healthy_gpu_node_has_no_problems() -> None:
    assert assess(10, 5, [_presence(8, True, True), _nvml(8), _engine(True)]) == []


def test_driver_installed_but_not_loaded_is_critical_not_no_hardware() -> None:
    problems = assess(10, 5, [_presence(8, False, True), _nvml(None, "no data"), _engine(True)])
    assert _checks(problems) == {"gpu_driver": Severity.CRITICAL}
    assert "not loaded" in problems[0].message and "modprobe nvidia" in problems[0].fix
    assert problems[0].unwatched


def test_no_driver_for_the_running_kernel_is_critical() -> None:
    problems = assess(10, 5, [_presence(2, False, False), _nvml(None, "no data"), _engine(True)])
    assert _checks(problems) == {"gpu_driver": Severity.CRITICAL}
    assert "no nvidia kernel module is installed" in problems[0].message


def test_no_nvidia_device_and_no_nvml_is_quiet_with_an_engine() -> None:
    assert assess(10, 5, [_presence(0, False, False), _nvml(None, "no data"), _engine(True)]) == []


def test_nothing_but_the_host_is_a_warning() -> None:
    host = CollectResult("host", [], True, 0.01)
    problems = assess(10, 5, [_presence(0, False, False), _nvml(None, "no data"), host])
    assert _checks(problems) == {"scope": Severity.WARNING}


def test_nvml_missing_on_a_gpu_host_is_critical() -> None:
    problems = assess(10, 5, [_presence(8, True, True), _nvml(None, "no data"), _engine(True)])
    assert _checks(problems) == {"nvml": Severity.CRITICAL}


def test_nvml_failing_is_critical() -> None:
    problems = assess(10, 5, [_presence(8, True, True), _nvml(None, "nvmlInit failed", False), _engine(True)])
    assert _checks(problems) == {"nvml": Severity.CRITICAL}


def test_fewer_gpus_than_expected_is_critical() -> None:
    problems = assess(10, 5, [_presence(8, True, True), _nvml(7), _engine(True)])
    assert _checks(problems) == {"gpu_count": Severity.CRITICAL}
    assert "7 GPU(s), 8 expected" in problems[0].message
    problems = assess(10, 5, [_presence(4, True, True, expected=8), _nvml(4), _engine(True)])
    assert _checks(problems) == {"gpu_count": Severity.CRITICAL}


def test_no_rules_and_an_unscrapable_engine_are_critical() -> None:
    problems = assess(0, 0, [_nvml(8), _engine(False)])
    assert _checks(problems) == {"rules": Severity.CRITICAL, "engine:vllm": Severity.CRITICAL}
    assert "127.0.0.1:8000" in problems[1].message
    assert all(p.unwatched for p in problems)


def test_an_engine_over_its_label_value_limit_is_a_warning_not_unscrapable() -> None:
    sample = Sample(make_labels({METRIC_NAME: "up", "job": "vllm", "instance": "127.0.0.1:8000"}), 1.0)
    reason = "label 'request_id' of vllm:x would take more than 500 distinct values (max_label_values_per_metric)"
    problems = assess(10, 5, [_nvml(8), CollectResult("engine:vllm", [sample], False, 0.01, reason)])
    assert _checks(problems) == {"engine:vllm": Severity.WARNING}
    assert "is scraped, but label 'request_id'" in problems[0].message and not problems[0].unwatched
    assert "cannot be scraped" not in problems[0].message


def test_only_recording_rules_is_a_warning() -> None:
    assert _checks(assess(3, 0, [_nvml(8), _engine(True)])) == {"rules": Severity.WARNING}


def test_no_collectors_is_critical() -> None:
    assert _checks(assess(3, 3, [])) == {"collectors": Severity.CRITICAL}


def test_another_failed_collector_is_a_warning() -> None:
    problems = assess(3, 3, [_nvml(8), _engine(True), CollectResult("host", [], False, 2.0, "timeout")])
    assert _checks(problems) == {"host": Severity.WARNING}
    assert worst(problems) is Severity.WARNING


def test_health_series() -> None:
    problems = assess(0, 0, [_nvml(8), _engine(False)])
    values = {(dict(s.labels)[METRIC_NAME], dict(s.labels).get("check", "")): s.value
              for s in health_samples(problems)}
    assert values == {("watchdog_health", ""): 2.0, ("watchdog_health_problem", "rules"): 1.0,
                      ("watchdog_health_problem", "engine:vllm"): 1.0}
    assert [s.value for s in health_samples([])] == [0.0]
