"""The agent: one tick = collect → store → rules → alert lifecycle → runbooks → notify; plus reload.

Contract:
- :meth:`Agent.tick` never raises for a component's fault: each stage is the boundary that owns its
  unit, logs the failure and counts it (``watchdog_tick_stage_failures_total{stage}``), and the later
  stages still run on what is there.
- :meth:`Agent.reload` builds the new config, rule set and runbooks completely before swapping them in;
  a broken file leaves the running set untouched and ``watchdog_config_reload_success`` at 0.
- Time comes from the injected ``clock`` (seconds); the demo and tests pass their own.
"""

from __future__ import annotations

import functools
import importlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog import __version__
from watchdog.collectors.base import REGISTRY, Collector, CollectorContext, CollectorRunner, ingest_results
from watchdog.config import load_config
from watchdog.infra.state import StateDB
from watchdog.model import Sample, metric
from watchdog.notify.dispatcher import NotificationDispatcher
from watchdog.notify.state_store import AlertStateStore
from watchdog.rules.alert import Alert, AlertState
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_ruleset
from watchdog.runbooks.manager import RunbookManager
from watchdog.store import SeriesQuotas, Store

log = logging.getLogger(__name__)

# Collector modules register themselves on import; the agent imports every one that exists.
COLLECTOR_MODULES = ("nvml", "host", "engine", "kmsg", "processes")
GC_EVERY_TICKS = 30


def import_collector_modules() -> None:
    """Import the collector modules so their ``@register`` factories are in the registry."""
    for name in COLLECTOR_MODULES:
        importlib.import_module(f"watchdog.collectors.{name}")


def build_collectors(config: dict[str, Any], context: CollectorContext) -> list[Collector]:
    """Every collector the config enables, from the registry (each factory reads its own section)."""
    import_collector_modules()
    from watchdog.collectors.nvml import node_nvml

    node_nvml(config, context)  # before any factory: the kernel-log and process collectors map GPUs with it
    collectors: list[Collector] = []
    for _kind, factory in sorted(REGISTRY.items()):
        collectors.extend(factory(config, context))
    return collectors


def series_quotas(config: dict[str, Any]) -> SeriesQuotas:
    """The store's per-source quotas from the config (the reserve is at most half of ``max_series``)."""
    max_series = int(config["max_series"])
    return SeriesQuotas(per_source=int(config.get("max_series_per_source", 50_000)),
                        reserved=min(int(config.get("reserved_series", 20_000)), max_series // 2))


def build_runner(config: dict[str, Any], collectors: list[Collector], background: bool = True) -> CollectorRunner:
    """The runner the tick uses: background collectors (engine scrapes) may hold it half a tick at most
    (``background`` False: the tick waits for every scrape, for simulated time)."""
    wait = float(config["tick_interval_seconds"]) / 2 if background else None
    return CollectorRunner(collectors, background_wait_seconds=wait)


@dataclass
class TickStats:
    """Counters about the loop itself, exported as self-metrics."""

    ticks_total: int = 0
    overruns_total: int = 0
    last_duration_seconds: float = 0.0
    stage_failures: dict[str, int] = field(default_factory=dict)
    reload_success: bool = True
    last_reload_seconds: float = 0.0
    clock_steps_total: int = 0


class Agent:
    """The whole per-node pipeline. Construct, then call :meth:`tick` on a schedule (see scheduler)."""

    def __init__(
        self,
        config: dict[str, Any],
        *,
        config_path: str | Path | None = None,
        clock: Callable[[], float] = time.time,
        context: CollectorContext | None = None,
        db: StateDB | None = None,
        background_scrapes: bool = True,
    ) -> None:
        """``background_scrapes`` False makes each tick wait for every engine scrape (simulated time)."""
        self.config = config
        self.config_path = str(config_path) if config_path else None
        self.clock = clock
        self.node = config.get("node") or socket.gethostname()
        self.stats = TickStats(last_reload_seconds=clock())
        tick_s = float(config["tick_interval_seconds"])
        retention_s = float(config["retention_seconds"])
        self.store = Store(
            retention_ms=int(retention_s * 1000),
            max_points=int(retention_s / tick_s) + 60,
            max_series=int(config["max_series"]),
            quotas=series_quotas(config),
        )
        self.context = context or CollectorContext(config=config)
        self.context.config = config
        self.db = db if db is not None else StateDB.in_dir(config["state_dir"])
        self.context.extra.setdefault("state_db", self.db)
        self.context.extra.setdefault("clock", clock)
        self.alert_state = AlertStateStore(self.db)
        self.collectors = build_collectors(config, self.context)
        self.background_scrapes = background_scrapes
        self.runner = build_runner(config, self.collectors, background_scrapes)
        self._lock = threading.RLock()
        self.ready = False
        self.before_tick: list[Callable[[float], None]] = []
        self.after_tick: list[Callable[[], None]] = []
        self.history_fired: list[Alert] = []
        self.rule_engine = self._build_rule_engine(config, restored=self.alert_state.load_rule_state())
        self.runbooks = self._build_runbooks(config)
        self.dispatcher = NotificationDispatcher(config, self.db, self.node, clock=clock)
        self.dispatcher.attach_runbooks(self.runbooks)
        self._reconciled = False
        self.alerts: list[Alert] = []
        self._last_tick: tuple[int, float] | None = None  # (tick time ms, monotonic seconds)
        self._clock_stepped = False

    # -- construction -------------------------------------------------------------------------------

    def _build_rule_engine(self, config: dict[str, Any], restored: list[dict[str, Any]] | None) -> RuleEngine:
        ruleset = load_ruleset(config)
        if not ruleset.groups:
            log.warning("no rules loaded: nothing will alert (check rules.paths)",
                        extra={"rules_paths": (config.get("rules") or {}).get("paths")})
        return RuleEngine(ruleset, self.store, restored_state=restored)

    def _build_runbooks(self, config: dict[str, Any]) -> RunbookManager:
        return RunbookManager(config, self.db, self.store, clock=self.clock, config_path=self.config_path,
                              node=self.node)

    # -- the loop -----------------------------------------------------------------------------------

    def _stage(self, name: str, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run one stage; a failure is logged, counted and replaced by ``default``."""
        try:
            return fn()
        except Exception:  # the boundary that owns a stage
            log.exception("tick stage failed", extra={"stage": name})
            self.stats.stage_failures[name] = self.stats.stage_failures.get(name, 0) + 1
            return default

    def tick(self) -> list[Alert]:
        """One evaluation cycle at ``clock()``; returns the alerts the rule engine reports."""
        with self._lock:
            started = time.monotonic()
            now_ms = self.tick_time_ms(started)
            now = now_ms / 1000
            for before in self.before_tick:
                self._stage("before_tick", functools.partial(before, now))
            results = self._stage("collect", self.runner.run_once, [])
            ingest_results(self.store, results, now_ms)
            alerts: list[Alert] = self._stage("rules", lambda: self.rule_engine.evaluate(now_ms), [])
            if not self._reconciled:
                self._reconciled = True
                self._stage("reconcile", lambda: self.dispatcher.reconcile_on_start(alerts))
            events = self._stage("runbooks", lambda: self.runbooks.on_alerts(alerts, now_ms), [])
            self._stage("notify", lambda: self.dispatcher.handle(alerts, events, now_ms))
            if self._stage("persist", lambda: self._persist_alert_state(now_ms), False) is False:
                self.db.note_error("write")
            self.stats.ticks_total += 1
            if self.stats.ticks_total % GC_EVERY_TICKS == 0:
                self._stage("gc", lambda: self.store.gc(now_ms))
            self.stats.last_duration_seconds = time.monotonic() - started
            self._stage("self_metrics", lambda: self.store.ingest("self:agent", self.self_samples(), now_ms))
            known = {a.fingerprint for a in self.history_fired}
            self.history_fired.extend(a for a in alerts
                                      if a.state is AlertState.FIRING and a.fingerprint not in known)
            self.alerts = alerts
            self.ready = True
        for hook in self.after_tick:
            self._stage("after_tick", hook)
        return alerts

    def tick_time_ms(self, monotonic_now: float) -> int:
        """The tick's timestamp: the wall clock, unless it stepped back behind the previous tick; then
        the previous tick plus the monotonic time since, until the wall clock catches up. A backward step
        would otherwise drop every sample as out of order and let instant selectors see nothing (false
        resolves). Counted in ``watchdog_clock_steps_total``."""
        wall_ms = int(self.clock() * 1000)
        last = self._last_tick
        if last is None or wall_ms >= last[0]:
            if self._clock_stepped:
                log.info("wall clock caught up with the tick time", extra={"wall_ms": wall_ms})
                self._clock_stepped = False
            self._last_tick = (wall_ms, monotonic_now)
            return wall_ms
        tick_ms = max(last[0] + int((monotonic_now - last[1]) * 1000), last[0] + 1)
        if not self._clock_stepped:
            self._clock_stepped = True
            self.stats.clock_steps_total += 1
            log.warning("wall clock stepped backwards; tick time continues on the monotonic clock",
                        extra={"step_seconds": round((wall_ms - last[0]) / 1000, 3)})
        self._last_tick = (tick_ms, monotonic_now)
        return tick_ms

    def _persist_alert_state(self, now_ms: int) -> bool:
        self.alert_state.save_rule_state(self.rule_engine.export_state(), now_ms)
        return True

    def note_overrun(self) -> None:
        """Called by the scheduler when a tick was due while the previous one still ran."""
        self.stats.overruns_total += 1
        log.warning("tick overran its interval; next tick skipped",
                    extra={"tick_interval_seconds": self.config["tick_interval_seconds"],
                           "last_duration_seconds": round(self.stats.last_duration_seconds, 3)})

    def firing(self) -> list[Alert]:
        """Alerts currently firing."""
        return [a for a in self.alerts if a.state is AlertState.FIRING]

    # -- self-metrics -------------------------------------------------------------------------------

    def self_samples(self) -> list[Sample]:
        """The loop's own series plus those of rule engine, runbooks and notifiers."""
        s = self.stats
        out = [
            Sample(metric("watchdog_build_info", version=__version__, node=self.node), 1.0),
            Sample(metric("watchdog_ticks_total"), float(s.ticks_total)),
            Sample(metric("watchdog_tick_overruns_total"), float(s.overruns_total)),
            Sample(metric("watchdog_tick_duration_seconds"), s.last_duration_seconds),
            Sample(metric("watchdog_store_series"), float(len(self.store))),
            Sample(metric("watchdog_store_dropped_series_total"), float(self.store.dropped_series_total)),
            Sample(metric("watchdog_store_evicted_series_total"), float(self.store.evicted_series_total)),
            Sample(metric("watchdog_store_quota_rejections_total"), float(self.store.quota_rejections_total)),
            Sample(metric("watchdog_config_reload_success"), 1.0 if s.reload_success else 0.0),
            Sample(metric("watchdog_clock_steps_total", direction="backward"), float(s.clock_steps_total)),
            Sample(metric("watchdog_config_last_reload_timestamp_seconds"), s.last_reload_seconds),
        ]
        for kind in sorted({"corrupt", "write", *self.db.errors}):
            out.append(Sample(metric("watchdog_state_errors_total", kind=kind), float(self.db.errors[kind])))
        for stage, count in sorted(s.stage_failures.items()):
            out.append(Sample(metric("watchdog_tick_stage_failures_total", stage=stage), float(count)))
        for component in (self.rule_engine, self.runbooks, self.dispatcher):
            provider = getattr(component, "self_samples", None)
            if provider is not None:
                out.extend(self._stage("self_samples", provider, []))
        return out

    # -- reload and shutdown ------------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read config, rules and runbooks; swap only if all load. Returns success."""
        try:
            config = load_config(self.config_path) if self.config_path else self.config
            rule_engine = self._build_rule_engine(config, restored=self.rule_engine.export_state())
            runbooks = self._build_runbooks(config)
            self.context.config = config
            collectors = build_collectors(config, self.context)
        except Exception as exc:  # reload boundary: report, keep the last good set
            self.context.config = self.config
            where = {key: getattr(exc, key) for key in ("file", "line") if getattr(exc, key, None)}
            log.error("reload failed; keeping the running configuration", extra={"error": str(exc), **where})
            self.stats.reload_success = False
            return False
        with self._lock:
            self.config = config
            self.rule_engine.retire(int(self.clock() * 1000))
            self.rule_engine = rule_engine
            old_runbooks, self.runbooks = self.runbooks, runbooks
            old_runner = self.runner
            self.collectors = collectors
            self.runner = build_runner(config, collectors, self.background_scrapes)
            self.dispatcher.attach_runbooks(runbooks)
            self.stats.reload_success = True
            self.stats.last_reload_seconds = self.clock()
        old_runbooks.close()
        old_runner.close()
        log.info("reloaded configuration, rules and runbooks")
        return True

    def close(self, timeout_seconds: float = 10.0) -> None:
        """Flush alert state and the outbox, stop collectors' pool; safe to call twice."""
        with self._lock:
            self._stage("persist", lambda: self._persist_alert_state(int(self.clock() * 1000)))
            self._stage("notify_close", lambda: self.dispatcher.close(timeout_seconds))
            self._stage("runbooks_close", self.runbooks.close)
            self.runner.close()
