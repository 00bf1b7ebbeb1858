"""The agent: one tick = collect → store → rules → alert lifecycle → runbooks → notify; plus reload.

Contract:
- :meth:`Agent.tick` never raises for a component's fault: each stage is the boundary that owns its
  unit, logs the failure and counts it (``watchdog_tick_stage_failures_total{stage}``), and the later
  stages still run on what is there.
- :meth:`Agent.reload` (SIGHUP) builds everything a new config file describes before changing anything:
  settings, rule set, runbooks, collectors, notifiers, plus what the caller prepares (the daemon: the
  exporter's TLS/auth/caps and the tick interval). All of it is swapped in together; any error keeps
  every running setting and sets ``watchdog_config_reload_success`` to 0. The keys in
  :data:`RESTART_KEYS` keep their running value until a restart, and the reload log line names the
  ones that changed.
- Time comes from the injected ``clock`` (seconds); the demo and tests pass their own.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog import __version__
from watchdog.collectors.base import Collector, CollectorContext, CollectorRunner, CollectResult, ingest_results
from watchdog.collectors.gpu_flags import GpuFlagStore, read_boot_id
from watchdog.collectors.health import Problem, assess, health_samples
from watchdog.collectors.registry import build_collectors
from watchdog.config import load_settings
from watchdog.config.settings import Settings, settings_document
from watchdog.infra.heap import heap_trimmer
from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState, Sample, cached_metric, metric
from watchdog.notify.dispatcher import dispatcher_for
from watchdog.notify.incidents import incident_causes
from watchdog.rules.engine import RuleEngine
from watchdog.rules.lanes import Lane
from watchdog.rules.loader import RuleSet, load_ruleset
from watchdog.rules.queries import engine_gpus_in
from watchdog.rules.state_store import RuleStateStore
from watchdog.runbooks.catalogue import catalogue_from_settings
from watchdog.runbooks.links import RunbookLinks
from watchdog.runbooks.manager import RunbookManager
from watchdog.store import SeriesQuotas, Store

log = logging.getLogger(__name__)

GC_EVERY_TICKS = 30
TRIM_EVERY_TICKS = 60
"""Every this many ticks, after the store's gc, freed heap goes back to the kernel (``infra/heap.py``)."""
COMPONENT_METRICS_EVERY_TICKS = 5
"""The rule engine's, runbooks' and notifiers' self-metrics (and build and runbook info) are stored every
this many ticks (a scrape sees them at most this many seconds old); the loop's own and health every tick."""
TICK_STAGES = ("fault", "engines", "finish")
"""The parts of a tick overruns are counted by: the fault path, engine work, bookkeeping."""
DEFERRABLE_STAGES = ("engines", "engine_rules")
ENGINE_START_FRACTION = 0.5
"""Engine work starts only while the fault path has used less than this part of the tick interval."""
ENGINE_DEADLINE_FRACTION = 0.8
"""Engine-lane rule groups stop (resuming next tick) once this part of the tick interval has passed."""

# Settings a reload cannot apply: the node name (in labels already sent), the state database, the
# exporter's socket, and the store's ring sizes. They keep their running value until a restart.
RESTART_KEYS = ("node", "state_dir", "listen", "retention_seconds", "max_series", "reserved_series")

# What a reload caller prepares from the new settings: load and check (may raise), return the apply step.
Preparer = Callable[[Settings], Callable[[], None]]


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the settings that differ (down to leaf fields; lists of sections as a whole)."""
    if not (dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new)) or type(old) is not type(new):
        return [prefix] if old != new else []
    out: list[str] = []
    for f in dataclasses.fields(old):
        out.extend(changed_keys(getattr(old, f.name), getattr(new, f.name), f"{prefix}.{f.name}" if prefix
                                else f.name))
    return out


@dataclass
class PreparedReload:
    """Everything a new config describes, built and checked but not yet in use."""

    settings: Settings
    rule_engine: RuleEngine
    runbooks: RunbookManager
    collectors: list[Collector]
    apply_steps: list[Callable[[], None]]
    changed: list[str]
    needs_restart: list[str]

    def discard(self) -> None:
        """Release what was built (the runbook manager's worker pool)."""
        self.runbooks.close()


def series_quotas(settings: Settings) -> SeriesQuotas:
    """The store's per-source quotas (the reserve is at most half of ``max_series``)."""
    return SeriesQuotas(per_source=settings.max_series_per_source,
                        reserved=min(settings.reserved_series, settings.max_series // 2),
                        label_values=settings.max_label_values_per_metric)


def build_runner(settings: Settings, collectors: list[Collector], background: bool = True) -> CollectorRunner:
    """The runner the tick uses: background collectors (engine scrapes) may hold it half a tick at most
    (``background`` False: the tick waits for every scrape, for simulated time)."""
    wait = settings.tick_interval_seconds / 2 if background else None
    return CollectorRunner(collectors, background_wait_seconds=wait)


@dataclass
class TickStats:
    """Counters about the loop itself, exported as self-metrics."""

    ticks_total: int = 0
    overruns: dict[str, int] = field(default_factory=dict)
    """Ticks skipped because the previous one still ran, by the stage it ran past its interval in."""
    last_duration_seconds: float = 0.0
    stage_failures: dict[str, int] = field(default_factory=dict)
    reload_success: bool = True
    last_reload_seconds: float = 0.0
    clock_steps_total: int = 0
    overrun_stage: str | None = None
    """The stage the last tick ran past its interval in (fault, engines, finish; None: it did not)."""
    deferred: dict[str, int] = field(default_factory=dict)
    """Engine work put off to a later tick for lack of time (engines: the whole stage; engine_rules:
    the groups after the deadline)."""
    stage_cpu_seconds: dict[str, float] = field(default_factory=dict)
    """CPU seconds (this thread) each stage took in the last tick, summed over its runs (absent: not run)."""




class Agent:
    """The whole per-node pipeline. Construct, then call :meth:`tick` on a schedule (see scheduler)."""

    def __init__(
        self,
        settings: Settings,
        *,
        config_path: str | Path | None = None,
        clock: Callable[[], float] = time.time,
        context: CollectorContext | None = None,
        db: StateDB | None = None,
        background_scrapes: bool = True,
    ) -> None:
        """``background_scrapes`` False makes each tick wait for every engine scrape (simulated time)."""
        self.settings = settings
        self.config_path = str(config_path) if config_path else None
        self.clock = clock
        self.node = settings.node or socket.gethostname()
        self.stats = TickStats(last_reload_seconds=clock())
        tick_s = settings.tick_interval_seconds
        retention_s = settings.retention_seconds
        self.store = Store(
            retention_ms=int(retention_s * 1000),
            max_points=int(retention_s / tick_s) + 60,
            max_series=settings.max_series,
            quotas=series_quotas(settings),
        )
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
        self.history_fired: list[Alert] = []
        """Each alert that fired since the start, once (its first firing), in order; for the demo."""
        self._fired: set[str] = set()  # the fingerprints in history_fired
        self.trim_heap: Callable[[], bool] | None = heap_trimmer()
        """Called every :data:`TRIM_EVERY_TICKS` ticks; ``None`` without glibc (or to turn it off)."""
        self.rule_engine = self._build_rule_engine(settings, restored=self.rule_state.load())
        self.runbooks = self._build_runbooks(settings)
        self._runbook_links: RunbookLinks | None = None
        self.dispatcher = dispatcher_for(settings, self.db, self.node, clock=clock)
        self.dispatcher.attach_runbooks(self.runbooks)
        self._reconciled = False
        self.alerts: list[Alert] = []
        self.health: list[Problem] = []
        self._health_samples: list[Sample] | None = None  # health_samples(self.health), made when it changes
        self._rule_counts: tuple[RuleSet, int, int] | None = None  # (rule set, rules, alerting rules)
        self._last_tick: tuple[int, float] | None = None  # (tick time ms, monotonic seconds)
        self.incremental = True
        self._last_results: dict[str, CollectResult] = {}
        self._engines_scraped_ms: int | None = None  # tick time of the last engine scrape started
        self._engine_rules_ms: int | None = None  # tick time of the last engine-lane evaluation
        self._components_due = True  # component self-metrics at the next tick
        self._clock_stepped = False

    # -- construction -------------------------------------------------------------------------------

    def _build_rule_engine(self, settings: Settings, restored: list[dict[str, Any]] | None) -> RuleEngine:
        ruleset = load_ruleset(settings)
        if not ruleset.groups:
            log.warning("no rules loaded: nothing will alert (check rules.paths)",
                        extra={"rules_paths": list(settings.rules.paths)})
        return RuleEngine(ruleset, self.store, restored_state=restored,
                          rule_timeout_s=settings.rules.rule_timeout_seconds, honour_group_intervals=True,
                          group_interval_slack_ms=int(settings.tick_interval_seconds * 500),
                          sample_limit=settings.rules.max_samples)

    def _build_runbooks(self, settings: Settings) -> RunbookManager:
        return RunbookManager(settings.remediation, self.db, self.store, clock=self.clock,
                              catalogue=catalogue_from_settings(settings.runbooks, self.config_path),
                              template_config=settings_document(settings), node=self.node)

    # -- the loop -----------------------------------------------------------------------------------

    def _stage(self, name: str, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run one stage; a failure is logged, counted and replaced by ``default``."""
        started = time.thread_time()
        try:
            return fn()
        except Exception:  # the boundary that owns a stage
            log.exception("tick stage failed", extra={"stage": name})
            self.stats.stage_failures[name] = self.stats.stage_failures.get(name, 0) + 1
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
            now_ms = self.tick_time_ms(started)
            now = now_ms / 1000
            interval = self.settings.tick_interval_seconds
            self.stats.stage_cpu_seconds.clear()
            for before in self.before_tick:
                self._stage("before_tick", functools.partial(before, now))
            results = self._stage("collect", lambda: self.runner.run_once(
                background=False if self.incremental else None, now=now), [])
            self._note_results(ingest_results(self.store, results, now_ms))
            self.health = self._stage("health", self._assess_health, self.health)
            self._stage("gpu_flags", lambda: self._flag_gpus(results, now_ms))
            lane = Lane.FAULT if self.incremental else None
            alerts: list[Alert] = self._stage("rules", lambda: self.rule_engine.evaluate(now_ms, lane), [])
            alerts = self._deliver(alerts, now_ms)
            checkpoints = [("fault", time.monotonic())]
            if self.incremental:
                if checkpoints[0][1] - started < interval * ENGINE_START_FRACTION:
                    alerts = self._engine_work(now_ms, started + interval * ENGINE_DEADLINE_FRACTION, alerts)
                else:
                    self._defer("engines")
                checkpoints.append(("engines", time.monotonic()))
            if self._stage("persist", lambda: self._persist_alert_state(now_ms), False) is False:
                self.db.note_error("write")
            self.stats.ticks_total += 1
            if self.stats.ticks_total % GC_EVERY_TICKS == 0:
                self._stage("gc", lambda: self.store.gc(now_ms))
            if self.trim_heap is not None and self.stats.ticks_total % TRIM_EVERY_TICKS == 0:
                self._stage("trim_heap", self.trim_heap)
            self.stats.last_duration_seconds = time.monotonic() - started
            checkpoints.append(("finish", time.monotonic()))
            self._note_overran_stage(started, interval, checkpoints)
            self._stage("self_metrics", lambda: self._ingest_self_metrics(now_ms))
            fired = [a for a in alerts if a.state is AlertState.FIRING and a.fingerprint not in self._fired]
            if fired:
                self.history_fired.extend(fired)
                self._fired.update(a.fingerprint for a in fired)
            self.alerts = alerts
            self.ready = True
        for hook in self.after_tick:
            self._stage("after_tick", hook)
        return alerts

    def _deliver(self, alerts: list[Alert], now_ms: int) -> list[Alert]:
        """Runbook links, runbooks, incident grouping and the notifier for ``alerts``; returns them linked."""
        alerts = self._stage("runbook_urls", lambda: self._with_runbook_urls(alerts), alerts)
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
            self._note_results(ingest_results(self.store, results, now_ms, "self:collectors:engines"))
        rules_due = (bool(results) or self.rule_engine.pending(Lane.ENGINE) or self._engine_rules_ms is None
                     or now_ms - self._engine_rules_ms >= every_ms - half_tick_ms)
        if not rules_due or Lane.ENGINE not in self.rule_engine.lanes().values():
            return alerts
        self._engine_rules_ms = now_ms
        alerts = self._stage("rules", lambda: self.rule_engine.evaluate(now_ms, Lane.ENGINE, deadline=deadline),
                             alerts)
        if self.rule_engine.pending(Lane.ENGINE):
            self._defer("engine_rules")
        return self._deliver(alerts, now_ms)

    def _note_results(self, results: list[CollectResult]) -> None:
        """Keep each collector's latest result (the health assessment reads all of them)."""
        for result in results:
            self._last_results[result.name] = result

    def _defer(self, stage: str) -> None:
        self.stats.deferred[stage] = self.stats.deferred.get(stage, 0) + 1

    def _note_overran_stage(self, started: float, interval: float, checkpoints: list[tuple[str, float]]) -> None:
        """Count the tick under the stage during which it ran past its interval (if it did)."""
        for stage, at in checkpoints:
            if at - started > interval:
                self.stats.overrun_stage = stage
                return
        self.stats.overrun_stage = None

    def _links(self) -> RunbookLinks:
        """The runbook links of the running catalogue and URL base (built again after a reload)."""
        links = self._runbook_links
        catalogue, url_base = self.runbooks.catalogue, self.settings.runbooks.url_base
        if links is None or links.catalogue is not catalogue or links.url_base != url_base:
            links = self._runbook_links = RunbookLinks(catalogue, url_base)
        return links

    def _with_runbook_urls(self, alerts: list[Alert]) -> list[Alert]:
        return self._links().link(alerts)

    def _runbook_info(self) -> list[Sample]:
        """``watchdog_runbook_info{alertname,runbook,runbook_url}`` 1 per alert a runbook serves, so that a
        dashboard joins ALERTS with the runbook to link."""
        return self._links().info_samples

    def _assess_health(self) -> list[Problem]:
        ruleset = self.rule_engine.ruleset
        counted = self._rule_counts
        if counted is None or counted[0] is not ruleset:  # a rule set is immutable: count it once
            counted = self._rule_counts = (ruleset, ruleset.rule_count, len(ruleset.alerting_rules()))
        names = {c.name for c in self.collectors}
        latest = [r for name, r in self._last_results.items() if name in names]
        problems = assess(counted[1], counted[2], latest)
        if self._health_samples is None or problems != self.health:
            self._health_samples = health_samples(problems)
        return problems

    def _flag_gpus(self, results: list[CollectResult], now_ms: int) -> None:
        for flag in self.gpu_flags.observe((s for r in results if r.name == "nvml" for s in r.samples), now_ms):
            log.warning("GPU flagged until it is recovered", extra={"gpu": flag.gpu, "uuid": flag.uuid,
                                                                  "recovery": flag.recovery.value,
                                                                  "reason": flag.reason})
        self.store.ingest("self:gpu_flags", self.gpu_flags.samples(), now_ms)

    def set_incremental(self, on: bool) -> None:
        """Benchmarks only: switch the issue-16 savings on (the default) or off (every collector and
        every rule group every tick, in one pass, as before)."""
        self.incremental = on

    def watching(self) -> bool:
        """False while something the agent should watch is not watched (see :mod:`watchdog.collectors.health`)."""
        return not any(p.unwatched for p in self.health)

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
        self.rule_state.save(self.rule_engine.export_state(), now_ms)
        return True

    def note_overrun(self) -> None:
        """Called by the scheduler when a tick was due while the previous one still ran; counted under
        the stage the previous tick ran past its interval in (``finish`` when it ended just in time)."""
        stage = self.stats.overrun_stage or "finish"
        self.stats.overruns[stage] = self.stats.overruns.get(stage, 0) + 1
        log.warning("tick overran its interval; next tick skipped",
                    extra={"tick_interval_seconds": self.settings.tick_interval_seconds, "stage": stage,
                           "last_duration_seconds": round(self.stats.last_duration_seconds, 3)})

    def firing(self) -> list[Alert]:
        """Alerts currently firing."""
        return [a for a in self.alerts if a.state is AlertState.FIRING]

    # -- self-metrics -------------------------------------------------------------------------------

    def _ingest_self_metrics(self, now_ms: int) -> None:
        """Store :meth:`loop_samples` every tick and :meth:`component_samples` every
        :data:`COMPONENT_METRICS_EVERY_TICKS` ticks (and on the first tick after start or a reload)."""
        self.store.ingest("self:agent", self.loop_samples(), now_ms)
        if self._components_due or self.stats.ticks_total % COMPONENT_METRICS_EVERY_TICKS == 0:
            self._components_due = False
            self.store.ingest("self:agent:components", self.component_samples(), now_ms)

    def self_samples(self) -> list[Sample]:
        """The loop's own series plus those of rule engine, runbooks and notifiers."""
        return self.loop_samples() + self.component_samples()

    def component_samples(self) -> list[Sample]:
        """What changes with a reload or more slowly than the tick: build and runbook info, and the series
        of rule engine, runbooks and notifiers."""
        out = [Sample(metric("watchdog_build_info", version=__version__, node=self.node), 1.0),
               *self._runbook_info()]
        for component in (self.rule_engine, self.runbooks, self.dispatcher):
            provider = getattr(component, "self_samples", None)
            if provider is not None:
                out.extend(self._stage("self_samples", provider, []))
        return out

    def loop_samples(self) -> list[Sample]:
        """The loop's own series, health included: stored every tick."""
        s = self.stats
        out = [
            Sample(cached_metric("watchdog_ticks_total"), float(s.ticks_total)),
            Sample(cached_metric("watchdog_tick_duration_seconds"), s.last_duration_seconds),
            Sample(cached_metric("watchdog_store_series"), float(len(self.store))),
            Sample(cached_metric("watchdog_store_dropped_series_total"), float(self.store.dropped_series_total)),
            Sample(cached_metric("watchdog_store_evicted_series_total"), float(self.store.evicted_series_total)),
            Sample(cached_metric("watchdog_store_quota_rejections_total"), float(self.store.quota_rejections_total)),
            Sample(cached_metric("watchdog_store_label_value_drops_total"), float(self.store.label_value_drops_total)),
            Sample(cached_metric("watchdog_config_reload_success"), 1.0 if s.reload_success else 0.0),
            Sample(cached_metric("watchdog_clock_steps_total", direction="backward"), float(s.clock_steps_total)),
            Sample(cached_metric("watchdog_config_last_reload_timestamp_seconds"), s.last_reload_seconds),
            *(self._health_samples if self._health_samples is not None else health_samples(self.health)),
        ]
        for kind in sorted({"corrupt", "write", *self.db.errors}):
            out.append(Sample(cached_metric("watchdog_state_errors_total", kind=kind), float(self.db.errors[kind])))
        for stage in TICK_STAGES:
            out.append(Sample(cached_metric("watchdog_tick_overruns_total", stage=stage),
                              float(s.overruns.get(stage, 0))))
        for stage in DEFERRABLE_STAGES:
            out.append(Sample(cached_metric("watchdog_tick_deferred_total", stage=stage),
                              float(s.deferred.get(stage, 0))))
        for stage, count in sorted(s.stage_failures.items()):
            out.append(Sample(cached_metric("watchdog_tick_stage_failures_total", stage=stage), float(count)))
        return out

    # -- reload and shutdown ------------------------------------------------------------------------

    def _prepare_reload(self, also: Sequence[Preparer]) -> PreparedReload:
        """Build everything the config file now describes; raises on the first problem, changing nothing."""
        loaded = load_settings(self.config_path) if self.config_path else self.settings
        changed = changed_keys(self.settings, loaded)
        needs_restart = [key for key in changed if key.split(".")[0] in RESTART_KEYS]
        settings = dataclasses.replace(loaded, **{key: getattr(self.settings, key) for key in RESTART_KEYS})
        rule_engine = self._build_rule_engine(settings, restored=self.rule_engine.export_state())
        runbooks = self._build_runbooks(settings)
        try:
            collectors = build_collectors(settings, self.context)
            apply_steps = [self.dispatcher.reconfigure(settings.notifiers, remediation_mode=settings.remediation.mode,
                                                       tick_seconds=settings.tick_interval_seconds,
                                                       listen=settings.listen)]
            apply_steps.extend(prepare(settings) for prepare in also)
        except BaseException:
            runbooks.close()
            raise
        return PreparedReload(settings, rule_engine, runbooks, collectors, apply_steps,
                              [key for key in changed if key not in needs_restart], needs_restart)

    def reload(self, also: Sequence[Preparer] = ()) -> bool:
        """SIGHUP: re-read the config file and everything it names, then apply all of it or nothing (see
        the module docstring). ``also`` prepares the caller's own parts. Returns success."""
        try:
            prepared = self._prepare_reload(also)
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
            old_runner = self.runner
            self.collectors = prepared.collectors
            self.runner = build_runner(self.settings, prepared.collectors, self.background_scrapes)
            for apply in prepared.apply_steps:
                apply()
            self.dispatcher.attach_runbooks(prepared.runbooks)
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
