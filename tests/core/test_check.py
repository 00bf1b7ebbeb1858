"""`inference-watchdog check`: one-shot collect + evaluate; Nagios exit codes 0 ok / 1 warning / 2 critical /
3 unknown; never "ok" while it watches nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.settings import settings_of
from tests.support.sysfs import make_sysfs
from watchdog.check import run_check
from watchdog.collectors.base import CollectorContext
from watchdog.config.settings import Settings
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.paths import asset_dir

RULES = str(asset_dir("rules") / "*.yaml")  # type: ignore[operator]


def _config(tmp_path: Path, **extra: Any) -> Settings:
    doc = {"state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]},
           "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False}, **extra}
    return settings_of(doc)


def _busy_fake() -> FakeNvml:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    for gpu in range(8):
        nvml.set_load(gpu, 90.0)
    return nvml


def test_healthy_gpus_are_ok(tmp_path: Path) -> None:
    config = _config(tmp_path)
    report = run_check(config, CollectorContext(nvml=_busy_fake()), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "ok", report.to_json()
    assert report.exit_code == 0
    assert {c.name for c in report.collectors} >= {"nvml"}


def test_a_hot_gpu_is_a_warning(tmp_path: Path) -> None:
    nvml = _busy_fake()
    nvml.set(3, temperature_celsius=86)
    config = _config(tmp_path)
    report = run_check(config, CollectorContext(nvml=nvml), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "warning", report.to_json()
    assert report.exit_code == 1
    hot = [a for a in report.alerts if a.name == "GpuThermalMarginLow"]
    assert hot and {a.labels["gpu"] for a in hot} == {"3"}
    assert {a.severity for a in report.alerts} == {"warning"}


def test_a_lost_gpu_is_critical(tmp_path: Path) -> None:
    nvml = _busy_fake()
    nvml.set(5, lost=True)
    config = _config(tmp_path)
    report = run_check(config, CollectorContext(nvml=nvml), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "critical"
    assert report.exit_code == 2
    assert any(a.name == "GpuFallenOffBus" and a.labels["gpu"] == "5" for a in report.alerts)


def test_cli_json_and_exit_code(tmp_path: Path) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]},
        "collectors": {"nvml": {"enabled": False}},  # the CLI has no fake GPUs: this machine's host only
        "kmsg": {"enabled": False},
    }))
    proc = subprocess.run([sys.executable, "-m", "watchdog", "check", "--config", str(config_path), "--json",
                           "--interval", "0.1"], capture_output=True, text=True, timeout=60, check=False)
    report = json.loads(proc.stdout)
    assert set(report) == {"status", "alerts", "collectors", "problems"}
    assert proc.returncode == {"ok": 0, "warning": 1, "critical": 2}[report["status"]]
    assert [c["name"] for c in report["collectors"] if c["success"]] == ["host"]



def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", "check", "--interval", "0", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_driver_installed_but_not_loaded_is_critical(tmp_path: Path) -> None:
    sysfs, modules, _ = make_sysfs(tmp_path, gpus=8, loaded=False, installed=True)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]}, "kmsg": {"enabled": False},
        "collectors": {"nvml": {"sysfs_root": str(sysfs), "modules_root": str(modules)}},
    }))
    proc = _cli("--config", str(config_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "CRITICAL gpu_driver: 8 NVIDIA GPU(s) on the PCI bus, but the nvidia kernel module is not loaded" \
        in proc.stdout
    assert "what to do: read `dmesg | grep -i nvidia`" in proc.stdout
    assert proc.stdout.rstrip().endswith("status: critical")


def test_no_rules_is_never_ok(tmp_path: Path) -> None:
    config = _config(tmp_path, rules={"paths": [str(tmp_path / "none-here-*.yaml")]})
    report = run_check(config, CollectorContext(nvml=_busy_fake()), interval_seconds=0,
                       sleep=lambda _: None)
    assert report.status == "critical"
    assert [p.check for p in report.problems] == ["rules"]


def test_a_config_error_is_unknown(tmp_path: Path) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text("tick_interval_seconds: -1\n")
    proc = _cli("--config", str(config_path))
    assert proc.returncode == 3
    assert proc.stderr.startswith(f"UNKNOWN: config error: {config_path}:1: tick_interval_seconds")


def test_a_check_writes_no_state(tmp_path: Path) -> None:
    config = settings_of({"state_dir": str(tmp_path / "state"), "rules": {"paths": [RULES]},
                          "processes": {"enabled": True}})
    run_check(config, CollectorContext(nvml=_busy_fake()), interval_seconds=0, sleep=lambda _: None)
    assert not (tmp_path / "state").exists()
