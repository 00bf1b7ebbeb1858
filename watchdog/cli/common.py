"""Helpers every subcommand with a ``--config`` shares."""

from __future__ import annotations

from typing import Any


def config_path(arg: str | None) -> str | None:
    """``--config``, else ``/etc/inference-watchdog/config.yaml`` when it exists, else None (defaults)."""
    from watchdog.config.loader import DEFAULT_CONFIG_PATH

    return arg or (str(DEFAULT_CONFIG_PATH) if DEFAULT_CONFIG_PATH.exists() else None)


def load_node_config(arg: str | None) -> dict[str, Any]:
    """The config ``run`` would use (see :func:`config_path`); raises ConfigError."""
    from watchdog.config import load_config

    return load_config(config_path(arg))
