"""Shared pieces of the hostile-input suite: an agent built like ``run`` builds it, on loopback only."""

from __future__ import annotations

import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.fakes.pynvml import FakeNvml

REPO = Path(__file__).resolve().parents[2]

HOT_RULE = """
groups:
  - name: hostile
    rules:
      - alert: GpuHot
        expr: watchdog_gpu_temperature_celsius > 80
        labels: {severity: warning}
        annotations: {summary: hot, description: hot, runbook: gpu-thermal-margin}
"""
"""One alert on an NVML gauge: fires as soon as a fake GPU runs hot."""


class QuietServer(ThreadingHTTPServer):
    """Clients that hang up early (deadlines) are the point of these tests: no tracebacks."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


def drip(wfile: BinaryIO, data: bytes, seconds_per_byte: float = 0.5) -> None:
    """Write ``data`` one byte at a time (a peer that never quite stops answering); stops if cut off."""
    try:
        for byte in data:
            wfile.write(bytes([byte]))
            wfile.flush()
            time.sleep(seconds_per_byte)
    except OSError:
        pass


def hostile_agent(tmp_path: Path, clock: list[float], overrides: dict[str, Any],
                  nvml: FakeNvml | None = None, rules: tuple[str, ...] = ("gpu.yaml", "serving.yaml")) -> Agent:
    """An agent over the shipped rule files with ``overrides`` merged into a quiet base config."""
    config_path = tmp_path / "config.yaml"
    base: dict[str, Any] = {
        "state_dir": str(tmp_path / "state"),
        "rules": {"paths": [str(REPO / "rules" / name) for name in rules]},
        "collectors": {"host": {"enabled": False}},
        "processes": {"enabled": False},
        "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}},
    }
    base.update(overrides)
    config_path.write_text(yaml.safe_dump(base))
    settings = settings_from_config(load_config_text(config_path.read_text(), str(config_path)))
    return Agent(settings, config_path=config_path, clock=lambda: clock[0],
                 context=CollectorContext(nvml=nvml or FakeNvml.from_profile("h100-sxm-8")))
