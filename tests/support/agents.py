"""A real agent for tests: fake GPU (8 x H100), host and kmsg collectors off, log notifier off."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_settings
from watchdog.fakes.pynvml import FakeNvml


def make_agent(tmp_path: Path, rules_text: str, clock: Callable[[], float],
               rules_section: Mapping[str, Any] | None = None) -> Agent:
    """An agent over ``rules_text`` (written to ``tmp_path/rules.yaml``) with state in ``tmp_path``;
    ``rules_section`` adds keys to the config's ``rules`` section."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(rules_text)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "rules": {"paths": [str(rules)], **(rules_section or {})},
        "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}}}))
    return Agent(load_settings(config_path), config_path=config_path, clock=clock,
                 context=CollectorContext(nvml=FakeNvml.from_profile("h100-sxm-8")))
