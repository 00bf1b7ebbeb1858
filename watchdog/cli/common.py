"""Helpers every subcommand with a ``--config`` shares."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.config.settings import Settings


def config_path(arg: str | None) -> str | None:
    """``--config``, else ``/etc/inference-watchdog/config.yaml`` when it exists, else None (defaults)."""
    from watchdog.config.loader import DEFAULT_CONFIG_PATH

    return arg or (str(DEFAULT_CONFIG_PATH) if DEFAULT_CONFIG_PATH.exists() else None)


def load_node_settings(arg: str | None) -> Settings:
    """The settings ``run`` would use (see :func:`config_path`); raises ConfigError."""
    from watchdog.config import load_settings

    return load_settings(config_path(arg))


def with_log_format(settings: Settings, log_format: str) -> Settings:
    """``settings`` with ``notifiers.log.format`` set by ``--log-format`` (unchanged for ``auto``)."""
    from watchdog.config.settings import LogFormat

    if log_format == "auto":
        return settings
    log = dataclasses.replace(settings.notifiers.log, format=LogFormat(log_format))
    return dataclasses.replace(settings, notifiers=dataclasses.replace(settings.notifiers, log=log))
