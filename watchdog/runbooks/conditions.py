"""``requires`` / ``verify`` conditions: a PromQL expression evaluated against the store.

Truth follows alerting rules: an instant vector holds when it is non-empty (comparison operators filter
it), a scalar when it is non-zero and not NaN. Anything else (a parse error, a range vector, a string)
does not hold, and the detail says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from watchdog.runbooks.planner import Condition

if TYPE_CHECKING:
    from watchdog.promql import Selectable

ConditionCheck = Callable[[str, int], Condition]
"""``(expr, now_ms) -> Condition``: how the manager evaluates requires/verify (injectable)."""


def truth(value: Any) -> tuple[bool, str]:
    """Whether a PromQL result counts as "holds", with a short description of the result."""
    from watchdog.promql.values import MatrixList, RangeSeries, Scalar, String, VectorSample

    if isinstance(value, Scalar):
        ok = not math.isnan(value.value) and value.value != 0
        return ok, f"scalar {value.value:g}"
    if isinstance(value, String):
        return False, "a string is not a condition"
    if isinstance(value, list):
        if isinstance(value, MatrixList) or (value and isinstance(value[0], RangeSeries)):
            return False, "a range vector is not a condition"
        samples = [v for v in value if isinstance(v, VectorSample)]
        if not samples:
            return False, "empty result"
        shown = ", ".join(f"{s.value:g}" for s in samples[:3])
        more = "…" if len(samples) > 3 else ""
        return True, f"{len(samples)} series ({shown}{more})"
    return False, f"unexpected result {type(value).__name__}"


class StoreConditions:
    """Evaluates conditions with :mod:`watchdog.promql` against one :class:`~watchdog.store.Store`."""

    def __init__(self, store: Selectable, lookback_ms: int = 300_000) -> None:
        self.store = store
        self.lookback_ms = lookback_ms

    def __call__(self, expr: str, now_ms: int) -> Condition:
        """Evaluate ``expr`` at ``now_ms``; errors become a condition that does not hold."""
        from watchdog.promql import PromQLError, evaluate, parse_query

        try:
            value = evaluate(parse_query(expr), self.store, now_ms, lookback_ms=self.lookback_ms)
        except PromQLError as exc:
            return Condition(False, f"cannot evaluate: {exc}")
        holds, detail = truth(value)
        return Condition(holds, detail)


def check_expression(expr: str) -> str:
    """"" when ``expr`` parses as PromQL, else the parser's message (for load-time checks)."""
    from watchdog.promql import PromQLError, parse_query

    try:
        parse_query(expr)
    except PromQLError as exc:
        return str(exc)
    return ""
