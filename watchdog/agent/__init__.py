"""The agent: one tick = collect → store → rules → alert lifecycle → runbooks → notify; plus reload.

Contract:
- :meth:`Agent.tick` never raises for a component's fault: each stage is the boundary that owns its
  unit, logs the failure and counts it (``watchdog_tick_stage_failures_total{stage}``), and the later
  stages still run on what is there.
- :meth:`Agent.reload` (SIGHUP) builds everything a new config file describes before changing anything
  (:mod:`watchdog.agent.reload`): settings, rule set, runbooks, collectors, notifiers, plus what the caller
  prepares (the daemon: the exporter's TLS/auth/caps and the tick interval). All of it is swapped in
  together; any error keeps every running setting and sets ``watchdog_config_reload_success`` to 0. The
  keys in :data:`RESTART_KEYS` keep their running value until a restart, and the reload log line names
  the ones that changed.
- After both rule lanes, the ``serving`` stage computes every engine's serving verdict
  (:mod:`watchdog.serving`), applies the operators' manual states from the state database (expiring and
  logging the ones past their time) and stores the verdict series; :attr:`Agent.serving` is the
  :class:`~watchdog.serving.model.VerdictSource` the load-balancer interfaces read. A reload keeps it.
- Time comes from the injected ``clock`` (seconds); the demo and tests pass their own. Tick times never
  go back (:mod:`watchdog.agent.clock`); the loop's series are in :mod:`watchdog.agent.self_metrics`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from watchdog.agent.build import build_rule_engine, build_runbooks, build_runner, build_store, series_quotas
from watchdog.agent.clock import TickClock
from watchdog.agent.reload import RESTART_KEYS, Preparer, prepare_reload
from watchdog.agent.self_metrics import (
    COMPONENT_METRICS_EVERY_TICKS,
    HealthWatch,
    TickStats,
    component_samples,
    loop_samples,
)
from watchdog.collectors.base import CollectorContext, CollectResult, ingest_results
from watchdog.collectors.engines import scrape_instance
from watchdog.collectors.gpu_flags import GpuFlagStore, read_boot_id
from watchdog.collectors.health import Problem
from watchdog.collectors.registry import build_collectors
from watchdog.config.settings import Settings
from watchdog.infra.heap import heap_trimmer
from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState, Sample
from watchdog.notify.decisions.incidents import incident_causes
from watchdog.notify.dispatcher import dispatcher_for
from watchdog.rules.lanes import Lane
from watchdog.rules.queries import engine_gpus_in
from watchdog.rules.state_store import RuleStateStore
from watchdog.runbooks.links import RunbookLinks
from watchdog.serving.engine import VerdictEngine
from watchdog.serving.manual import ManualStates
from watchdog.serving.readings import read_engines

__all__ = ["RESTART_KEYS", "TRIM_EVERY_TICKS", "Agent", "Preparer", "build_runner"]

log = logging.getLogger(__name__)

GC_EVERY_TICKS = 30
"""Every this many ticks the store drops points past retention and series left empty (``Store.gc``)."""
TRIM_EVERY_TICKS = 60
"""Every this many ticks, after the store's gc, freed heap goes back to the kernel (``infra/heap.py``)."""
ENGINE_START_FRACTION = 0.5
"""Engine work starts only while the fault path has used less than this part of the tick interval."""
ENGINE_DEADLINE_FRACTION = 0.8
"""Engine-lane rule groups stop (resuming next tick) once this part of the tick interval has passed."""


class Agent:
    """The whole per-node pipeline. Construct, then call :meth:`tick` on a schedule (see scheduler)."""

    def __init__(self, settings: Settings, *, config_path: str | Path | None = None,
                 clock: Callable[[], float] = time.time, context: CollectorContext | None = None,
                 db: StateDB | None = None, background_scrapes: bool = True) -> None:
        """``background_scrapes`` False makes each tick wait for every engine scrape (simulated time)."""
        self.settings = settings
        self.config_path = str(config_path) if config_path else None
        self.clock = clock
        self.node = settings.node or socket.gethostname()
        self.stats = TickStats(last_reload_seconds=clock())
        self.tick_clock = TickClock(clock, self.stats)
        self.store = build_store(settings)
        self.db = db if db is not None else StateDB.in_dir(settings.state_dir)
        given = context or CollectorContext()
        self.context = dataclasses.replace(given, state_db=given.state_db or self.db, clock=given.clock or clock)
        self.rule_state = RuleStateStore(self.db)
        self.gpu_flags = GpuFlagStore(self.db, self.context.boot_id or read_boot_id())
        self.gpu_flags.clear_rebooted(int(clock() * 1000))
        self.collectors = build_collectors(settings, self.context)
        self.background_scrapes = background_scrapes
        self.runner = build_runner(settings, self.collectors, background_scrapes)
        self._lock = threading.RLock()
        self.ready = False
        self.before_tick: list[Callable[[float], None]] = []
        self.after_tick: list[Callable[[], None]] = []
        self.trim_heap: Callable[[], bool] | None = heap_trimmer()
        """Called every :data:`TRIM_EVERY_TICKS` ticks; ``None`` without glibc (or to turn it off)."""
        self.rule_engine = build_rule_engine(settings, self.store, restored=self.rule_state.load())
        self.runbooks = build_runbooks(settings, self.db, self.store, clock, self.config_path, self.node)
        self.links = RunbookLinks(self.runbooks.catalogue, settings.runbooks.url_base)
        self.dispatcher = dispatcher_for(settings, self.db, self.node, clock=clock)
        self.dispatcher.attach_runbooks(self.runbooks)
        self._reconciled = False
        self.alerts: list[Alert] = []
        self.health: list[Problem] = []
        self.health_watch = HealthWatch()
        self._engines_scraped_ms: int | None = None  # tick time of the last engine scrape started
        self._engine_rules_ms: int | None = None  # tick time of the last engine-lane evaluation
        self._components_due = True  # component self-metrics at the next tick
        self.manual_states = ManualStates(self.db)
        self.serving = VerdictEngine(settings.serving, scrape_interval_seconds=settings.engine_scrape_interval_seconds,
                                     tick_interval_seconds=settings.tick_interval_seconds, clock=clock)
        """The serving verdicts (a :class:`~watchdog.serving.model.VerdictSource`) every interface reads."""

    def _stage(self, name: str, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run one stage; a failure is logged, counted and replaced by ``default``."""
        started = time.thread_time()
        try:
            return fn()
        except Exception:  # the boundary that owns a stage
            log.exception("tick stage failed", extra={"stage": name})
            self.stats.count(self.stats.stage_failures, name)
            return default
        finally:
            spent = self.stats.stage_cpu_seconds
            spent[name] = spent.get(name, 0.0) + time.thread_time() - started

    def tick(self) -> list[Alert]:
        """One evaluation cycle at ``clock()``; returns the alerts the rule engine reports.

        The fault path (every collector but the background ones, engine scrapes and process trees; the
        fault-lane rule groups, runbooks and the notifier) runs first, every tick. Engine work follows:
        background collectors when due (``engine_scrape_interval_seconds``), engine-lane groups when a
        new scrape arrived (or that interval passed), then the notifier again with their alerts. Engine
        work is what gives way when the tick runs out of time: it does not start once the fault path has
        used :data:`ENGINE_START_FRACTION` of the interval, and its groups stop (to resume next tick)
        past :data:`ENGINE_DEADLINE_FRACTION`. Ticks that ran past their interval are counted per stage.
        """
        with self._lock:
            started = time.monotonic()
            now_ms = self.tick_clock.time_ms(started)
            interval = self.settings.tick_interval_seconds
            self.stats.stage_cpu_seconds.clear()
            for before in self.before_tick:
                self._stage("before_tick", functools.partial(before, now_ms / 1000))
            results = self._stage("collect", lambda: self.runner.run_once(background=False, now=now_ms / 1000), [])
            self._ingest(results, now_ms, "self:collectors")
            self.health = self._stage("health", lambda: self.health_watch.assess(
                self.rule_engine.ruleset, (c.name for c in self.collectors)), self.health)
            self._stage("gpu_flags", lambda: self._flag_gpus(results, now_ms))
            alerts = self._deliver(self._stage("rules", lambda: self.rule_engine.evaluate(now_ms, Lane.FAULT), []),
                                   now_ms)
            checkpoints = [("fault", time.monotonic())]
            if checkpoints[0][1] - started < interval * ENGINE_START_FRACTION:
                alerts = self._engine_work(now_ms, started + interval * ENGINE_DEADLINE_FRACTION, alerts)
            else:
                self.stats.count(self.stats.deferred, "engines")
            checkpoints.append(("engines", time.monotonic()))
            self._stage("serving", functools.partial(self._serve, now_ms, alerts))
            if self._stage("persist", lambda: self._persist_alert_state(now_ms), False) is False:
                self.db.note_error("write")
            self.stats.ticks_total += 1
            if self.stats.ticks_total % GC_EVERY_TICKS == 0:
                self._stage("gc", lambda: self.store.gc(now_ms))
            if self.trim_heap is not None and self.stats.ticks_total % TRIM_EVERY_TICKS == 0:
                self._stage("trim_heap", self.trim_heap)
            self.stats.last_duration_seconds = time.monotonic() - started
            checkpoints.append(("finish", time.monotonic()))
            self.stats.overrun_stage = next((stage for stage, at in checkpoints if at - started > interval), None)
            self._stage("self_metrics", lambda: self._ingest_self_metrics(now_ms))
            self.alerts = alerts
            self.ready = True
        for hook in self.after_tick:
            self._stage("after_tick", hook)
        return alerts

    def _ingest(self, results: list[CollectResult], now_ms: int, source: str) -> None:
        """Store a round of collections (and keep each collector's latest result for the health watch)."""
        self.health_watch.note(ingest_results(self.store, results, now_ms, source))

    def _deliver(self, alerts: list[Alert], now_ms: int) -> list[Alert]:
        """Runbook links, runbooks, incident grouping and the notifier for ``alerts``; returns them linked."""
        alerts = self._stage("runbook_urls", lambda: self.links.link(alerts), alerts)
        if not self._reconciled:
            self._reconciled = True
            self._stage("reconcile", lambda: self.dispatcher.reconcile_on_start(alerts))
        events = self._stage("runbooks", lambda: self.runbooks.on_alerts(alerts, now_ms), [])
        causes = self._stage("incidents", lambda: incident_causes(
            alerts, functools.partial(engine_gpus_in, self.store, now_ms)), {})
        self._stage("notify", lambda: self.dispatcher.handle(alerts, events, now_ms, causes=causes))
        return alerts

    def _engine_work(self, now_ms: int, deadline: float, alerts: list[Alert]) -> list[Alert]:
        """Engine scrapes when due, engine-lane groups when new data arrived (or their interval passed,
        or a pass was cut short), then delivery of their alerts; returns the alerts."""
        every_ms = self.settings.engine_scrape_interval_seconds * 1000
        half_tick_ms = self.settings.tick_interval_seconds * 500
        scrape_due = self._engines_scraped_ms is None or now_ms - self._engines_scraped_ms >= every_ms - half_tick_ms
        results = self._stage("collect_engines", lambda: self.runner.run_once(background=True, start=scrape_due), [])
        if scrape_due:
            self._engines_scraped_ms = now_ms
        if results:
            self._ingest(results, now_ms, "self:collectors:engines")
        rules_due = (bool(results) or self.rule_engine.pending(Lane.ENGINE) or self._engine_rules_ms is None
                     or now_ms - self._engine_rules_ms >= every_ms - half_tick_ms)
        if not rules_due or Lane.ENGINE not in self.rule_engine.lanes().values():
            return alerts
        self._engine_rules_ms = now_ms
        alerts = self._stage("rules", lambda: self.rule_engine.evaluate(now_ms, Lane.ENGINE, deadline=deadline),
                             alerts)
        if self.rule_engine.pending(Lane.ENGINE):
            self.stats.count(self.stats.deferred, "engine_rules")
        return self._deliver(alerts, now_ms)

    def _serve(self, now_ms: int, alerts: list[Alert]) -> None:
        """This tick's serving verdicts, after both rule lanes: manual states (expired ones removed and
        logged), readings, the verdict engine; their series go to the store. A verdict change is logged."""
        now_s = now_ms / 1000
        for expired in self.manual_states.expire(now_s):
            log.info("manual serving state expired", extra={"job": expired.job, "verdict": expired.verdict.value,
                                                            "reason": expired.reason, "set_by": expired.set_by})
        engines = [(e.job, scrape_instance(e.url)) for e in self.settings.engines]
        firing = [{**a.labels, "alertname": a.name} for a in alerts if a.state is AlertState.FIRING]
        readings = read_engines(self.store, now_ms, engines, firing)
        unwatched = [p.message for p in self.health if p.unwatched and not p.check.startswith("engine:")]
        before = {v.job: v.verdict for v in self.serving.verdicts()}
        verdicts = self.serving.update(now_ms, readings, self.manual_states.active(now_s), not unwatched,
                                       "; ".join(unwatched))
        for v in verdicts:
            if before.get(v.job, v.verdict) is not v.verdict:
                log.info("engine verdict changed", extra={"job": v.job, "from": before[v.job].value,
                                                          "to": v.verdict.value, "weight_percent": v.weight_percent,
                                                          "reasons": [f"{r.code}: {r.detail}" for r in v.reasons]})
        self.store.ingest("self:serving", self.serving.samples(), now_ms)

    def _flag_gpus(self, results: list[CollectResult], now_ms: int) -> None:
        for flag in self.gpu_flags.observe((s for r in results if r.name == "nvml" for s in r.samples), now_ms):
            log.warning("GPU flagged until it is recovered", extra={"gpu": flag.gpu, "uuid": flag.uuid,
                                                                  "recovery": flag.recovery.value,
                                                                  "reason": flag.reason})
        self.store.ingest("self:gpu_flags", self.gpu_flags.samples(), now_ms)

    def _persist_alert_state(self, now_ms: int) -> bool:
        self.rule_state.save(self.rule_engine.export_state(), now_ms)
        return True

    def _ingest_self_metrics(self, now_ms: int) -> None:
        """The loop's series every tick; the components' every :data:`COMPONENT_METRICS_EVERY_TICKS` ticks
        (and on the first tick after start or a reload)."""
        self.store.ingest("self:agent", loop_samples(self.stats, self.store, self.db, self.health_watch.samples),
                          now_ms)
        if self._components_due or self.stats.ticks_total % COMPONENT_METRICS_EVERY_TICKS == 0:
            self._components_due = False
            self.store.ingest("self:agent:components", self._component_samples(), now_ms)

    def _component_samples(self) -> list[Sample]:
        providers = (self.rule_engine.self_samples, self.runbooks.self_samples, self.dispatcher.self_samples)
        return component_samples(self.node, self.links.info_samples,
                                 (functools.partial(self._stage, "self_samples", p, []) for p in providers))

    def note_overrun(self) -> None:
        """Called by the scheduler when a tick was due while the previous one still ran; counted under
        the stage the previous tick ran past its interval in (``finish`` when it ended just in time)."""
        stage = self.stats.overrun_stage or "finish"
        self.stats.count(self.stats.overruns, stage)
        log.warning("tick overran its interval; next tick skipped",
                    extra={"tick_interval_seconds": self.settings.tick_interval_seconds, "stage": stage,
                           "last_duration_seconds": round(self.stats.last_duration_seconds, 3)})

    def firing(self) -> list[Alert]:
        """Alerts currently firing."""
        return [a for a in self.alerts if a.state is AlertState.FIRING]

    def watching(self) -> bool:
        """False while something the agent should watch is not watched (see :mod:`watchdog.collectors.health`)."""
        return not any(p.unwatched for p in self.health)

    def reload(self, also: Sequence[Preparer] = ()) -> bool:
        """SIGHUP: re-read the config file and everything it names, then apply all of it or nothing (see
        the module docstring). ``also`` prepares the caller's own parts. Returns success."""
        try:
            prepared = prepare_reload(self, also)
        except Exception as exc:  # reload boundary: report, keep the last good set
            where = {key: getattr(exc, key) for key in ("file", "line") if getattr(exc, key, None)}
            log.error("reload failed; keeping the running configuration", extra={"error": str(exc), **where})
            self.stats.reload_success = False
            return False
        with self._lock:
            self.settings = prepared.settings
            self.store.quotas = series_quotas(prepared.settings)  # per-source and label-value limits
            self.rule_engine.retire(int(self.clock() * 1000))
            self.rule_engine = prepared.rule_engine
            old_runbooks, self.runbooks = self.runbooks, prepared.runbooks
            self.links = prepared.links
            old_runner = self.runner
            self.collectors = prepared.collectors
            self.runner = build_runner(self.settings, prepared.collectors, self.background_scrapes)
            for apply in prepared.apply_steps:
                apply()
            self.dispatcher.attach_runbooks(prepared.runbooks)
            self.serving.reconfigure(self.settings.serving,
                                     scrape_interval_seconds=self.settings.engine_scrape_interval_seconds,
                                     tick_interval_seconds=self.settings.tick_interval_seconds)
            self.stats.reload_success = True
            self.stats.last_reload_seconds = self.clock()
            self._components_due = True
        old_runbooks.close()
        old_runner.close()
        if prepared.needs_restart:
            log.warning("reloaded configuration; restart needed to apply: " + ", ".join(prepared.needs_restart),
                        extra={"changed": prepared.changed, "needs_restart": prepared.needs_restart})
        else:
            log.info("reloaded configuration, rules and runbooks", extra={"changed": prepared.changed})
        return True

    def close(self, timeout_seconds: float = 10.0) -> None:
        """Flush alert state and the outbox, stop collectors' pool; safe to call twice."""
        with self._lock:
            self._stage("persist", lambda: self._persist_alert_state(int(self.clock() * 1000)))
            self._stage("notify_close", lambda: self.dispatcher.close(timeout_seconds))
            self._stage("runbooks_close", self.runbooks.close)
            self.runner.close()
