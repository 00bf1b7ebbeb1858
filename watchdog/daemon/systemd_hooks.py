"""Daemon hooks that speak sd_notify: READY after the first tick, WATCHDOG after every tick,
RELOADING/READY around a reload, STOPPING on shutdown, and a STATUS line. No-ops outside systemd."""

from __future__ import annotations

from typing import Any

from watchdog.daemon import sdnotify
from watchdog.daemon.serve import Hooks


def _status(agent: Any) -> str:
    firing = len(agent.firing())
    return (f"tick {agent.stats.ticks_total}, {len(agent.store)} series, {firing} alert"
            f"{'s' if firing != 1 else ''} firing")


def systemd_hooks(agent: Any) -> Hooks:
    """Hooks for :func:`watchdog.daemon.serve`; also appends the WATCHDOG ping to the agent's tick."""
    if sdnotify.watchdog_interval_seconds() is not None:
        agent.after_tick.append(sdnotify.watchdog_ping)
    hooks = Hooks()
    hooks.on_ready.append(lambda: sdnotify.ready(_status(agent)))
    hooks.on_reloading.append(sdnotify.reloading)
    hooks.on_reload.append(lambda ok: sdnotify.notify(
        "READY=1\nSTATUS=" + ("reloaded; " if ok else "reload FAILED, previous config kept; ") + _status(agent)))
    hooks.on_stopping.append(sdnotify.stopping)
    return hooks
