"""The agent's own series: the loop's, stored every tick, and its components', every few ticks.

- :class:`TickStats` holds the counters about the loop itself.
- :func:`loop_samples` is what the agent stores every tick (source ``self:agent``): ticks, durations,
  overruns and deferrals by stage, stage failures, store and state-database counters, reload and clock
  steps, and the health series of :class:`HealthWatch`.
- :func:`component_samples` is what changes with a reload or more slowly than the tick (source
  ``self:agent:components``, every :data:`COMPONENT_METRICS_EVERY_TICKS` ticks): build info, runbook
  info, and the ``self_samples()`` of the rule engine, runbooks and notifiers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from watchdog import __version__
from watchdog.collectors.base import CollectResult
from watchdog.collectors.health import Problem, assess, health_samples
from watchdog.infra.state import StateDB
from watchdog.model import Sample, cached_metric, metric
from watchdog.rules.loader import RuleSet
from watchdog.store import Store

COMPONENT_METRICS_EVERY_TICKS = 5
"""The components' series are stored every this many ticks (a scrape sees them at most this many seconds
old), and on the first tick after start or a reload."""
TICK_STAGES = ("fault", "engines", "finish")
"""The parts of a tick overruns are counted by: the fault path, engine work, bookkeeping."""
DEFERRABLE_STAGES = ("engines", "engine_rules")
"""The engine work a tick may put off for lack of time."""


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

    def count(self, counters: dict[str, int], stage: str) -> None:
        """Add one to ``counters[stage]`` (one of the dicts above)."""
        counters[stage] = counters.get(stage, 0) + 1


class HealthWatch:
    """The agent's health (:func:`~watchdog.collectors.health.assess`) over each collector's latest result,
    and its series, made again only when the problems change."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.samples: list[Sample] = health_samples([])
        self._latest: dict[str, CollectResult] = {}
        self._counts: tuple[RuleSet, int, int] | None = None  # (rule set, rules, alerting rules)

    def note(self, results: Iterable[CollectResult]) -> None:
        """Keep each collector's latest result."""
        for result in results:
            self._latest[result.name] = result

    def assess(self, ruleset: RuleSet, collectors: Iterable[str]) -> list[Problem]:
        """The current problems, given the running rule set and the names of the running collectors."""
        counted = self._counts
        if counted is None or counted[0] is not ruleset:  # a rule set is immutable: count it once
            counted = self._counts = (ruleset, ruleset.rule_count, len(ruleset.alerting_rules()))
        names = set(collectors)
        problems = assess(counted[1], counted[2], [r for name, r in self._latest.items() if name in names])
        if problems != self.problems:
            self.samples = health_samples(problems)
        self.problems = problems
        return problems


def loop_samples(stats: TickStats, store: Store, db: StateDB, health: Sequence[Sample]) -> list[Sample]:
    """The loop's own series, ``health`` included: stored every tick."""
    out = [
        Sample(cached_metric("watchdog_ticks_total"), float(stats.ticks_total)),
        Sample(cached_metric("watchdog_tick_duration_seconds"), stats.last_duration_seconds),
        Sample(cached_metric("watchdog_store_series"), float(len(store))),
        Sample(cached_metric("watchdog_store_dropped_series_total"), float(store.dropped_series_total)),
        Sample(cached_metric("watchdog_store_evicted_series_total"), float(store.evicted_series_total)),
        Sample(cached_metric("watchdog_store_quota_rejections_total"), float(store.quota_rejections_total)),
        Sample(cached_metric("watchdog_store_label_value_drops_total"), float(store.label_value_drops_total)),
        Sample(cached_metric("watchdog_config_reload_success"), 1.0 if stats.reload_success else 0.0),
        Sample(cached_metric("watchdog_clock_steps_total", direction="backward"), float(stats.clock_steps_total)),
        Sample(cached_metric("watchdog_config_last_reload_timestamp_seconds"), stats.last_reload_seconds),
        *health,
    ]
    for kind in sorted({"corrupt", "write", *db.errors}):
        out.append(Sample(cached_metric("watchdog_state_errors_total", kind=kind), float(db.errors[kind])))
    for stage in TICK_STAGES:
        out.append(Sample(cached_metric("watchdog_tick_overruns_total", stage=stage),
                          float(stats.overruns.get(stage, 0))))
    for stage in DEFERRABLE_STAGES:
        out.append(Sample(cached_metric("watchdog_tick_deferred_total", stage=stage),
                          float(stats.deferred.get(stage, 0))))
    for stage, count in sorted(stats.stage_failures.items()):
        out.append(Sample(cached_metric("watchdog_tick_stage_failures_total", stage=stage), float(count)))
    return out


def component_samples(node: str, runbook_info: Sequence[Sample],
                      providers: Iterable[Callable[[], list[Sample]]]) -> list[Sample]:
    """Build info, ``runbook_info`` and what each provider returns (each provider guarded by the caller)."""
    out = [Sample(metric("watchdog_build_info", version=__version__, node=node), 1.0), *runbook_info]
    for provider in providers:
        out.extend(provider())
    return out
