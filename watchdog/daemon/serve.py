"""Running the agent as a long-lived process: exporter, scheduler, signals, shutdown.

Contract: :func:`serve` starts the exporter and the tick scheduler, handles SIGHUP (reload), SIGTERM and
SIGINT (finish the current tick, flush state and the outbox, return 0), and returns when stopped or
after ``duration_seconds``. Hooks let systemd integration (sd_notify) plug in without this module
knowing about it.
"""

from __future__ import annotations

import errno
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from watchdog.agent import Agent
from watchdog.config.settings import Settings
from watchdog.daemon.scheduler import TickScheduler
from watchdog.exporter.access import ExporterConfigError
from watchdog.exporter.api import QueryAPI
from watchdog.exporter.server import ExporterServer, exporter_for_store, parse_listen, prepare_exporter
from watchdog.infra.heap import quiet_cyclic_gc
from watchdog.serving.agentcheck import AgentCheckServer
from watchdog.serving.model import VerdictSource

log = logging.getLogger("watchdog.daemon")  # the logger name in the daemon's log lines (operators filter on it)

IDLE_WAKE_SECONDS = 5.0
"""The main loop wakes for a signal, the first tick or the end of ``duration_seconds``, and at least this
often besides (a wake-up costs CPU: it does not poll)."""

EARLY_SIGHUP = threading.Event()
"""Set by a SIGHUP that arrived before :func:`serve` installed its handlers (a reload is then due)."""


def install_early_sighup() -> None:
    """Catch SIGHUP from the very start of ``run``: its default action would kill the process while the
    agent is still starting (systemd's ExecReload, a logrotate script). :func:`serve` turns it into a
    reload once it runs."""
    signal.signal(signal.SIGHUP, lambda *_: EARLY_SIGHUP.set())


@dataclass
class Hooks:
    """Callbacks around the daemon's life: ready (after the first tick), reloading/reloaded, stopping."""

    on_ready: list[Callable[[], object]] = field(default_factory=list)
    on_reloading: list[Callable[[], object]] = field(default_factory=list)
    on_reload: list[Callable[[bool], object]] = field(default_factory=list)
    on_stopping: list[Callable[[], object]] = field(default_factory=list)


def build_exporter(agent: Agent, listen: str) -> ExporterServer:
    """An exporter serving the agent's store and self-metrics on ``listen`` (TLS, auth and caps from the
    config's ``exporter`` section; raises ExporterConfigError when that section is unusable)."""
    exporter = exporter_for_store(agent.store, listen, ready=lambda: agent.ready and agent.watching(),
                                  section=agent.settings.exporter, clock=agent.clock,
                                  pods=agent.pods, pod_labels=lambda: agent.settings.pod_resources.pod_labels,
                                  node=agent.node)
    exporter.api = QueryAPI(agent.store, engine=lambda: agent.rule_engine, clock=agent.clock,
                            subquery_step_ms=round(agent.settings.tick_interval_seconds * 1000),
                            sample_limit=agent.settings.rules.max_samples,
                            suppression=lambda alerts, now_ms: agent.dispatcher.muting.suppression(alerts, now_ms))
    exporter.verdicts = lambda: verdict_source(agent)
    return exporter


def verdict_source(agent: Agent) -> VerdictSource:
    """The agent's serving verdicts (``agent.serving``); before its first tick they are empty and not
    trusted, and the interfaces fail open (docs/routing.md)."""
    return agent.serving


def start_agent_check(agent: Agent) -> AgentCheckServer | None:
    """The HAProxy agent-check server of ``serving.agent_check``, started; None when it is off or cannot
    listen (logged: the rest of the agent goes on, and HAProxy keeps its servers' state when it cannot
    reach the agent)."""
    section = agent.settings.serving.agent_check
    if not section.enabled:
        return None
    try:
        host, port = parse_listen(section.listen)
        server = AgentCheckServer(lambda: verdict_source(agent), host, port,
                                  max_connections=section.max_connections)
        server.start()
    except (OSError, ValueError) as exc:  # start-up boundary of the agent-check port: say why, go on
        log.error("cannot start the agent-check server", extra={"listen": section.listen, "error": str(exc)})
        return None
    log.info("agent-check listening", extra={"address": f"{server.host}:{server.port}"})
    return server


def reload_agent(agent: Agent, exporter: ExporterServer, scheduler: TickScheduler | None = None) -> bool:
    """SIGHUP: the agent's reload plus the exporter's certificates, password and caps and the tick interval,
    all or nothing: a broken exporter section keeps every running setting, the agent's too."""

    def prepare_exporter_reload(settings: Settings) -> Callable[[], None]:
        prepared = prepare_exporter(settings.exporter)  # raises ExporterConfigError naming the key
        return lambda: exporter.apply(prepared)

    def prepare_interval(settings: Settings) -> Callable[[], None]:
        return lambda: scheduler.set_interval(settings.tick_interval_seconds) if scheduler is not None else None

    return agent.reload(also=(prepare_exporter_reload, prepare_interval))


def serve(agent: Agent, listen: str, duration_seconds: float | None = None,
          hooks: Hooks | None = None, install_signals: bool = True) -> int:
    """Run until a stop signal or ``duration_seconds``; returns the exit code."""
    hooks = hooks or Hooks()
    quiet_cyclic_gc()
    stop = threading.Event()
    reload_requested = threading.Event()
    try:
        exporter = build_exporter(agent, listen)
        exporter.start()
    except (ExporterConfigError, OSError, ValueError) as exc:  # start-up boundary: say why, exit non-zero
        log.error("cannot start the exporter", extra={"listen": listen, "error": str(exc)})
        if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
            print(f"error: cannot listen on {listen}: the address is already in use (another agent or demo?); "
                  "choose another with --listen HOST:PORT, or set listen: in the config", file=sys.stderr)
        agent.close()
        return 2
    log.info("exporter listening", extra={"address": f"{exporter.host}:{exporter.port}", "url": exporter.url,
                                          "basic_auth": exporter.security.auth is not None})
    agent_check = start_agent_check(agent)
    first_tick = threading.Event()
    wake = threading.Event()  # set with every event below: the loop sleeps until one comes

    def note_tick() -> None:
        if not first_tick.is_set():
            first_tick.set()
            wake.set()

    def request(event: threading.Event) -> None:
        event.set()
        wake.set()

    agent.after_tick.append(note_tick)

    if install_signals:
        signal.signal(signal.SIGHUP, lambda *_: request(reload_requested))
        signal.signal(signal.SIGTERM, lambda *_: request(stop))
        signal.signal(signal.SIGINT, lambda *_: request(stop))
        if EARLY_SIGHUP.is_set():
            EARLY_SIGHUP.clear()
            reload_requested.set()

    scheduler = TickScheduler(agent, agent.settings.tick_interval_seconds)
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
                ok = reload_agent(agent, exporter, scheduler)
                for reload_hook in hooks.on_reload:
                    reload_hook(ok)
            if deadline is not None and time.monotonic() >= deadline:
                break
            # Cleared after the wait and before the checks above: an event that comes meanwhile is seen
            # by them or wakes the next wait at once.
            wake.wait(IDLE_WAKE_SECONDS if deadline is None else min(IDLE_WAKE_SECONDS, deadline - time.monotonic()))
            wake.clear()
    finally:
        for stop_hook in hooks.on_stopping:
            stop_hook()
        log.info("stopping: finishing the current tick and flushing state")
        scheduler.stop(wait=True)
        agent.close()
        if agent_check is not None:
            agent_check.stop()
        exporter.stop()
    return 0
