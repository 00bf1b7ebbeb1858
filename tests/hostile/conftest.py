"""Shared pieces of the hostile-input suite: an agent built like ``run`` builds it, on loopback only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.fakes.pynvml import FakeNvml

REPO = Path(__file__).resolve().parents[2]


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
