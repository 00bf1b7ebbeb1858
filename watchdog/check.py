"""One-shot health check: collect twice, evaluate the rule set, report active alerts.

Contract: nothing is sent and nothing is remediated; nothing is written under ``state_dir`` (a check is
read-only: collectors that keep state get an in-memory database and a temporary directory, removed
afterwards, so a check never creates ``/var/lib/inference-watchdog`` or changes the daemon's cursors). Two collections
``interval_seconds`` apart let ``rate()``-style rules see movement. An alert counts as active when its
expression holds now (pending or firing): a one-shot check cannot wait out ``for``. The verdict is the
worst of the active alerts' severities and the agent's own health problems (:mod:`watchdog.collectors.health`: no
rules, an engine that cannot be scraped, a GPU host whose driver or NVML does not load, ...), with the
Nagios/Icinga codes: 0 ok, 1 warning, 2 critical (3 unknown is the CLI's, for a config error or a crash).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watchdog.collectors.base import (
    CollectorContext,
    CollectorRunner,
    CollectResult,
    ingest_results,
    one_shot_context,
)
from watchdog.collectors.health import Problem, Severity, assess, worst
from watchdog.collectors.registry import build_collectors
from watchdog.config.settings import Settings
from watchdog.model import Alert, AlertState
from watchdog.store import Store


@dataclass(frozen=True)
class CheckReport:
    """What a check found."""

    severity: Severity
    alerts: list[Alert]
    collectors: list[CollectResult]
    problems: list[Problem]

    @property
    def status(self) -> str:
        """``ok``, ``warning`` or ``critical``."""
        return self.severity.word

    @property
    def exit_code(self) -> int:
        """0 ok, 1 warning, 2 critical (Nagios plugin codes)."""
        return int(self.severity)

    def collector_rows(self) -> list[dict[str, Any]]:
        """One row per collector: ``status`` ``ok``, ``failed`` (``error`` says why) or ``no data`` (its
        subject is absent here: no GPU, no kernel log; quiet, not an error; ``note`` says why), ``success``
        false exactly when it failed, its own ``duration_seconds``. ``error`` is empty unless it failed."""
        rows = []
        for c in self.collectors:
            status = "failed" if not c.success else ("no data" if c.error == "no data" else "ok")
            rows.append({"name": c.name, "status": status, "success": c.success,
                         "duration_seconds": round(c.duration_seconds, 4),
                         "error": c.error if not c.success else "",
                         "note": c.note if status == "no data" else ""})
        return rows

    def to_json(self) -> dict[str, Any]:
        """The ``check --json`` document (docs/cli.md)."""
        return {
            "status": self.status,
            "alerts": [
                {"name": a.name, "state": a.state.value, "severity": a.severity, "labels": a.labels,
                 "annotations": a.annotations, "value": a.value}
                for a in self.alerts
            ],
            "collectors": self.collector_rows(),
            "problems": [p.to_json() for p in self.problems],
        }


ALERT_SEVERITY = {"critical": Severity.CRITICAL, "warning": Severity.WARNING}


def verdict(alerts: list[Alert], problems: list[Problem]) -> Severity:
    """The worst of the active alerts' severities (``info`` counts as ok) and the health problems."""
    from_alerts = [ALERT_SEVERITY.get(a.severity, Severity.OK) for a in alerts
                   if a.state in (AlertState.PENDING, AlertState.FIRING)]
    return max([*from_alerts, worst(problems)])


def run_check(settings: Settings, context: CollectorContext | None = None,
              interval_seconds: float = 1.0, clock: Callable[[], float] = time.time,
              sleep: Callable[[float], None] = time.sleep) -> CheckReport:
    """Collect, wait, collect, evaluate; see the module docstring."""
    with tempfile.TemporaryDirectory(prefix="inference-watchdog-check-") as scratch:
        return _run_check(dataclasses.replace(settings, state_dir=scratch), one_shot_context(context),
                          interval_seconds, clock, sleep)


def _run_check(settings: Settings, context: CollectorContext, interval_seconds: float,
               clock: Callable[[], float], sleep: Callable[[float], None]) -> CheckReport:
    from watchdog.rules.engine import RuleEngine
    from watchdog.rules.loader import load_ruleset

    store = Store()
    collectors = build_collectors(settings, context)
    runner = CollectorRunner(collectors, honour_intervals=False)  # every collector in both rounds
    engine = RuleEngine(load_ruleset(settings), store, sample_limit=settings.rules.max_samples)
    alerts: list[Alert] = []
    results: list[CollectResult] = []
    try:
        for round_index in range(2):
            if round_index:
                sleep(interval_seconds)
            now_ms = int(clock() * 1000)
            results = runner.run_once()
            ingest_results(store, results, now_ms)
            alerts = engine.evaluate(now_ms)
    finally:
        runner.close()
    active = [a for a in alerts if a.state in (AlertState.PENDING, AlertState.FIRING)]
    ruleset = engine.ruleset
    problems = assess(ruleset.rule_count, len(ruleset.alerting_rules()), results)
    return CheckReport(verdict(active, problems), active, results, problems)
