"""scripts/gpu-smoke: JSON of one real-collector run, with the fake here and real NVML where present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-smoke"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_smoke_with_the_fake_prints_series_and_call_timings() -> None:
    done = run("--fake", "a100-sxm-8", "--compact")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["library"] == "fake:a100-sxm-8" and report["driver_version"] == "535.183.01"
    assert report["gpus"] == 8 and report["gpus_lost"] == []
    first, steady = report["passes"]
    assert (first["pass"], steady["pass"]) == ("first", "steady")
    groups = {"identity", "utilization", "memory", "thermal", "power", "clocks", "fields"}
    assert groups <= set(steady["ms_per_group"])
    assert steady["calls_total"] < first["calls_total"]  # static attributes are read once
    assert report["series"]["watchdog_gpu_nvlink_up"] == 8 * 12
    assert report["series"]["watchdog_gpu_info"] == 8
    sample = next(s for s in report["samples"] if s["name"] == "watchdog_gpu_power_limit_watts")
    assert sample["value"] == 400.0 and set(sample["labels"]) == {"gpu", "uuid"}


def test_smoke_with_an_unknown_profile_says_so() -> None:
    done = run("--fake", "z9000-sxm-1")
    assert done.returncode == 2 and "unknown GPU profile" in done.stderr and "h100-sxm-8" in done.stderr


def test_smoke_without_nvml_exits_2_with_a_message() -> None:
    done = run("--compact")
    if done.returncode == 0:  # a GPU host: the real run must have found GPUs
        assert json.loads(done.stdout)["gpus"] >= 1
        return
    assert done.returncode == 2
    assert done.stdout == ""
    assert "gpu-smoke: " in done.stderr and "NVML" in done.stderr
