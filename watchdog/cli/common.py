"""Helpers every subcommand with a ``--config`` shares."""

from __future__ import annotations

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

