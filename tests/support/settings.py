"""Typed settings for tests: a config document (dict or YAML text) through the real loader and schema."""

from __future__ import annotations

from typing import Any

import yaml

from watchdog.config import load_config_text
from watchdog.config.settings import Settings, settings_from_config


def settings_of(document: dict[str, Any] | str) -> Settings:
    """The settings of a config document, validated and defaulted by the real schema."""
    text = document if isinstance(document, str) else yaml.safe_dump(document)
    return settings_from_config(load_config_text(text, "<test config>"))
