"""The host collector: PSI parsing from literals, and real psutil reads with a fixture procfs."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tests.support.settings import settings_of
from watchdog.collectors.base import CollectorContext
from watchdog.collectors.host import (
    HOST_SERIES,
    HostCollector,
    cpu_samples,
    host_collectors,
    parse_pressure,
    pressure_samples,
)
from watchdog.config.settings import HostSettings, section_settings
from watchdog.model import Sample, label_value, metric_name

MEMORY_PSI = """some avg10=1.53 avg60=0.87 avg300=0.21 total=35813456
full avg10=0.40 avg60=0.12 avg300=0.03 total=9123001
"""
CPU_PSI_OLD_KERNEL = "some avg10=12.50 avg60=8.00 avg300=2.25 total=987654321\n"



def host_settings(**overrides: object) -> HostSettings:
    return section_settings(HostSettings, "collectors.host", overrides)

def values(samples: list[Sample], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple((k, v) for k, v in s.labels if k != "__name__"): s.value
            for s in samples if metric_name(s.labels) == name}


def test_parse_pressure_literal() -> None:
    parsed = parse_pressure(MEMORY_PSI)
    assert parsed["some"] == {"avg10": 1.53, "avg60": 0.87, "avg300": 0.21, "total": 35813456.0}
    assert parsed["full"]["total"] == 9123001.0
    assert parse_pressure(CPU_PSI_OLD_KERNEL).keys() == {"some"}


def test_parse_pressure_skips_malformed_lines() -> None:
    text = "some avg10=x avg60=1.0 total\nweird avg10=1\nfull\n\nfull avg10=2.0\n"
    assert parse_pressure(text) == {"some": {"avg60": 1.0}, "full": {"avg10": 2.0}}


def test_pressure_samples_are_seconds_and_ratios() -> None:
    samples = pressure_samples("memory", parse_pressure(MEMORY_PSI))
    stalled = values(samples, "watchdog_host_pressure_stalled_seconds_total")
    assert stalled[(("kind", "some"), ("resource", "memory"))] == pytest.approx(35.813456)
    assert stalled[(("kind", "full"), ("resource", "memory"))] == pytest.approx(9.123001)
    ratios = values(samples, "watchdog_host_pressure_ratio")
    assert ratios[(("kind", "some"), ("resource", "memory"), ("window", "10s"))] == pytest.approx(0.0153)
    assert ratios[(("kind", "full"), ("resource", "memory"), ("window", "300s"))] == pytest.approx(0.0003)
    assert len(ratios) == 6


def test_cpu_samples_per_core_and_total() -> None:
    times = psutil.cpu_times(percpu=True)
    samples = cpu_samples(times, ("user", "steal", "no_such_mode"), per_cpu=True)
    assert len(samples) == 2 * len(times)
    assert {label_value(s.labels, "mode") for s in samples} == {"user", "steal"}
    total = cpu_samples([psutil.cpu_times()], ("idle",), per_cpu=False)
    assert [label_value(s.labels, "cpu") for s in total] == ["all"]


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    pressure = tmp_path / "pressure"
    pressure.mkdir()
    (pressure / "memory").write_text(MEMORY_PSI, encoding="ascii")
    (pressure / "cpu").write_text(CPU_PSI_OLD_KERNEL, encoding="ascii")
    return tmp_path  # no io file: that resource is skipped


def test_collect_reads_psutil_and_pressure(proc: Path) -> None:
    samples = HostCollector(host_settings(proc_path=str(proc))).collect()
    names = {metric_name(s.labels) for s in samples}
    assert names <= set(HOST_SERIES)
    assert names == set(HOST_SERIES)  # this fixture provides PSI, so every series appears
    cpus = {label_value(s.labels, "cpu") for s in samples
            if metric_name(s.labels) == "watchdog_host_cpu_seconds_total"}
    assert cpus == {str(i) for i in range(len(psutil.cpu_times(percpu=True)))}
    steal = values(samples, "watchdog_host_cpu_seconds_total")[(("cpu", "0"), ("mode", "steal"))]
    assert steal >= 0
    resources = {label_value(s.labels, "resource") for s in samples
                 if metric_name(s.labels) == "watchdog_host_pressure_ratio"}
    assert resources == {"cpu", "memory"}
    memory = values(samples, "watchdog_host_memory_total_bytes")[()]
    assert memory == psutil.virtual_memory().total
    for sample in samples:
        extra = {k for k, _ in sample.labels} - {"__name__"}
        assert extra == set(HOST_SERIES[metric_name(sample.labels)].labels)


def test_no_pressure_files_means_no_pressure_series(tmp_path: Path) -> None:
    settings = host_settings(proc_path=str(tmp_path), per_cpu=False, cpu_modes=["idle", "steal"])
    samples = HostCollector(settings).collect()
    names = {metric_name(s.labels) for s in samples}
    assert "watchdog_host_pressure_ratio" not in names
    assert "watchdog_host_load1" in names and "watchdog_host_swap_total_bytes" in names
    assert len(values(samples, "watchdog_host_cpu_seconds_total")) == 2


def test_factory_reads_its_section(proc: Path) -> None:
    config = settings_of(f"collectors: {{host: {{per_cpu: false, proc_path: '{proc}', cpu_modes: [steal]}}}}")
    (collector,) = host_collectors(config, CollectorContext())
    assert isinstance(collector, HostCollector) and collector.name == "host"
    samples = collector.collect()
    assert list(values(samples, "watchdog_host_cpu_seconds_total")) == [(("cpu", "all"), ("mode", "steal"))]
    disabled = settings_of("collectors: {host: {enabled: false}}")
    assert host_collectors(disabled, CollectorContext()) == []
