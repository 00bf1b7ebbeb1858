"""Running the agent as a long-lived process: exporter, scheduler, signals, shutdown.

Contract: :func:`serve` starts the exporter and the tick scheduler, handles SIGHUP (reload), SIGTERM and
SIGINT (finish the current tick, flush state and the outbox, return 0), and returns when stopped or
after ``duration_seconds``. Hooks let systemd integration (sd_notify) plug in without this module
knowing about it.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.registry import CollectorRegistry

from watchdog.agent import Agent
from watchdog.exporter.collector import StoreCollector
from watchdog.exporter.server import ExporterServer
from watchdog.scheduler import TickScheduler

log = logging.getLogger(__name__)


@dataclass
class Hooks:
    """Callbacks around the daemon's life: ready (after the first tick), reloading/reloaded, stopping."""

    on_ready: list[Callable[[], object]] = field(default_factory=list)
    on_reloading: list[Callable[[], object]] = field(default_factory=list)
    on_reload: list[Callable[[bool], object]] = field(default_factory=list)
    on_stopping: list[Callable[[], object]] = field(default_factory=list)


def build_exporter(agent: Agent, listen: str) -> ExporterServer:
    """An exporter serving the agent's store and self-metrics on ``listen``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(agent.store, clock=agent.clock))
    return ExporterServer(registry, listen, ready=lambda: agent.ready)


def serve(agent: Agent, listen: str, duration_seconds: float | None = None,
          hooks: Hooks | None = None, install_signals: bool = True) -> int:
    """Run until a stop signal or ``duration_seconds``; returns the exit code."""
    hooks = hooks or Hooks()
    stop = threading.Event()
    reload_requested = threading.Event()
    exporter = build_exporter(agent, listen)
    exporter.start()
    log.info("exporter listening", extra={"address": f"{exporter.host}:{exporter.port}"})
    first_tick = threading.Event()
    agent.after_tick.append(first_tick.set)

    if install_signals:
        signal.signal(signal.SIGHUP, lambda *_: reload_requested.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())

    scheduler = TickScheduler(agent, float(agent.config["tick_interval_seconds"]))
    scheduler.start()
    deadline = time.monotonic() + duration_seconds if duration_seconds else None
    ready_sent = False
    try:
        while not stop.is_set():
            if not ready_sent and first_tick.is_set():
                ready_sent = True
                for hook in hooks.on_ready:
                    hook()
            if reload_requested.is_set():
                reload_requested.clear()
                for reloading_hook in hooks.on_reloading:
                    reloading_hook()
                ok = agent.reload()
                for reload_hook in hooks.on_reload:
                    reload_hook(ok)
            if deadline is not None and time.monotonic() >= deadline:
                break
            stop.wait(0.2)
    finally:
        for stop_hook in hooks.on_stopping:
            stop_hook()
        log.info("stopping: finishing the current tick and flushing state")
        scheduler.stop(wait=True)
        agent.close()
        exporter.stop()
    return 0


def install_default_signals() -> dict[int, Any]:
    """Current handlers of the signals :func:`serve` installs (to restore them in tests)."""
    return {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
