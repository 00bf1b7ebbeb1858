"""Daemon hooks for running under systemd (filled in by the sd_notify integration)."""

from __future__ import annotations

from typing import Any

from watchdog.daemon import Hooks


def systemd_hooks(agent: Any) -> Hooks:
    """Hooks that report readiness, reloads and stopping to systemd; none yet outside systemd."""
    return Hooks()
