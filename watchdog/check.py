"""One-shot health check: collect twice, evaluate the rule set, report active alerts.

Contract: nothing is sent and nothing is remediated; the state database is not touched. Two collections
``interval_seconds`` apart let ``rate()``-style rules see movement. An alert counts as active when its
expression holds now (pending or firing): a one-shot check cannot wait out ``for``. The verdict is the
worst severity among active alerts — ``critical`` → 2, ``warning`` (or a failed collector) → 1, else 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watchdog.collectors.base import CollectorContext, CollectorRunner, CollectResult, ingest_results
from watchdog.collectors.registry import build_collectors
from watchdog.config.settings import Settings
from watchdog.model import Alert, AlertState
from watchdog.store import Store

EXIT_CODES = {"ok": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class CheckReport:
    """What a check found."""

    status: str
    alerts: list[Alert]
    collectors: list[CollectResult]

    @property
    def exit_code(self) -> int:
        """0 ok, 1 warning, 2 critical."""
        return EXIT_CODES[self.status]

    def to_json(self) -> dict[str, Any]:
        """The ``check --json`` document (docs/cli.md)."""
        return {
            "status": self.status,
            "alerts": [
                {"name": a.name, "state": a.state.value, "severity": a.severity, "labels": a.labels,
                 "annotations": a.annotations, "value": a.value}
                for a in self.alerts
            ],
            "collectors": [
                {"name": c.name, "success": c.success, "duration_seconds": round(c.duration_seconds, 4),
                 "error": c.error}
                for c in self.collectors
            ],
        }


def verdict(alerts: list[Alert], collectors: list[CollectResult]) -> str:
    """The worst status among active alerts and collector failures."""
    severities = {a.severity for a in alerts if a.state in (AlertState.PENDING, AlertState.FIRING)}
    if "critical" in severities:
        return "critical"
    if "warning" in severities or any(not c.success for c in collectors):
        return "warning"
    return "ok"


def run_check(settings: Settings, context: CollectorContext | None = None,
              interval_seconds: float = 1.0, clock: Callable[[], float] = time.time,
              sleep: Callable[[float], None] = time.sleep) -> CheckReport:
    """Collect, wait, collect, evaluate; see the module docstring."""
    from watchdog.rules.engine import RuleEngine
    from watchdog.rules.loader import load_ruleset

    store = Store()
    collectors = build_collectors(settings, context or CollectorContext())
    runner = CollectorRunner(collectors)
    engine = RuleEngine(load_ruleset(settings), store)
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
    return CheckReport(verdict(active, results), active, results)
