"""A static estimate of what a query costs per evaluation: how many times subqueries evaluate their
inner expressions. ``rules check`` warns when it is large, because the work is that count times the
number of series the inner selectors match, and the agent evaluates every rule every tick.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.promql import nodes as n

SUBQUERY_STEPS_WARNING = 300
"""Inner evaluations per rule evaluation from which ``rules check`` warns."""


@dataclass(frozen=True)
class SubqueryCost:
    """The costliest chain of nested subqueries: total inner evaluations and the chain, outermost first."""

    steps: int
    chain: tuple[str, ...]


def _duration(ms: int) -> str:
    """``90000`` -> ``1m30s`` (Prometheus' duration form)."""
    out = ""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            out += f"{ms // size}{unit}"
            ms %= size
    return out or "0s"


def _steps(sq: n.Subquery, default_step_ms: int) -> int:
    step = sq.step_ms or default_step_ms
    return sq.range_ms // step + 1


def subquery_cost(expr: n.Expr, default_step_ms: int) -> SubqueryCost:
    """Inner evaluations of the costliest nesting of subqueries in ``expr`` (1 without subqueries).

    ``default_step_ms`` is the step of subqueries written without one (the evaluation interval).
    """
    best = SubqueryCost(1, ())
    for child in n.children(expr):
        found = subquery_cost(child, default_step_ms)
        if found.steps > best.steps:
            best = found
    if isinstance(expr, n.Subquery):
        step = expr.step_ms or default_step_ms
        here = f"[{_duration(expr.range_ms)}:{_duration(step)}] = {_steps(expr, default_step_ms)} steps"
        return SubqueryCost(_steps(expr, default_step_ms) * best.steps, (here, *best.chain))
    return best
