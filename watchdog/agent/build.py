"""The parts of an agent built from settings: store, collector runner, rule engine, runbooks.

Each builder is used at start and again by a reload (which builds the new parts before swapping them in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from watchdog.collectors.base import Collector, CollectorRunner
from watchdog.config.settings import Settings, settings_document
from watchdog.infra.state import StateDB
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_ruleset
from watchdog.runbooks.catalogue import catalogue_from_settings
from watchdog.runbooks.manager import RunbookManager
from watchdog.store import SeriesQuotas, Store

log = logging.getLogger(__name__)


def series_quotas(settings: Settings) -> SeriesQuotas:
    """The store's per-source quotas (the reserve is at most half of ``max_series``)."""
    return SeriesQuotas(per_source=settings.max_series_per_source,
                        reserved=min(settings.reserved_series, settings.max_series // 2),
                        label_values=settings.max_label_values_per_metric)


def build_store(settings: Settings) -> Store:
    """The store: ``retention_seconds`` of points at the tick interval (plus a minute), bounded in series."""
    retention_s = settings.retention_seconds
    points = int(retention_s / settings.tick_interval_seconds) + 60
    return Store(retention_ms=int(retention_s * 1000), max_points=points, max_series=settings.max_series,
                 quotas=series_quotas(settings))


def build_runner(settings: Settings, collectors: list[Collector], background: bool = True) -> CollectorRunner:
    """The runner the tick uses: background collectors (engine scrapes) may hold it half a tick at most
    (``background`` False: the tick waits for every scrape, for simulated time)."""
    wait = settings.tick_interval_seconds / 2 if background else None
    return CollectorRunner(collectors, background_wait_seconds=wait)


def build_rule_engine(settings: Settings, store: Store, restored: list[dict[str, Any]] | None) -> RuleEngine:
    """The rule engine over the rule files of ``settings``, its alert state ``restored``."""
    ruleset = load_ruleset(settings)
    if not ruleset.groups:
        log.warning("no rules loaded: nothing will alert (check rules.paths)",
                    extra={"rules_paths": list(settings.rules.paths)})
    return RuleEngine(ruleset, store, restored_state=restored,
                      rule_timeout_s=settings.rules.rule_timeout_seconds, honour_group_intervals=True,
                      group_interval_slack_ms=int(settings.tick_interval_seconds * 500),
                      sample_limit=settings.rules.max_samples)


def build_runbooks(settings: Settings, db: StateDB, store: Store, clock: Callable[[], float],
                   config_path: str | None, node: str) -> RunbookManager:
    """The runbook manager of the catalogue ``settings`` names (paths relative to ``config_path``)."""
    return RunbookManager(settings.remediation, db, store, clock=clock,
                          catalogue=catalogue_from_settings(settings.runbooks, config_path),
                          template_config=settings_document(settings), node=node)
