"""The rule engine's plain path: every rule evaluated on its own, no cache shared across a pass."""

from __future__ import annotations

from watchdog.promql.cache import EvalCache
from watchdog.rules.engine import RuleEngine


class PlainRuleEngine(RuleEngine):
    """A :class:`RuleEngine` that evaluates without :mod:`watchdog.promql.cache` (what the cache must equal)."""

    def _pass_cache(self) -> EvalCache | None:
        return None
