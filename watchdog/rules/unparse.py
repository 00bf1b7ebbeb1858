"""Our expression tree back to PromQL text (``to_promql``), for rules rewritten before they are rendered.

Contract: ``parse_expr(to_promql(e)) == e`` for every tree ``parse_expr`` builds (tests/promql check it
on every shipped rule). The text is Prometheus 2.42 syntax on one line. The parser
keeps every pair of parentheses as a ``Paren`` node, and a tree it built never holds an operand that
binds more loosely than its operator without one, so printing ``Paren`` nodes where they stand is
enough; durations in Prometheus' own notation, strings quoted as Go does.
"""

from __future__ import annotations

import math

from watchdog.golang.gostrconv import quote
from watchdog.promql import nodes as n
from watchdog.rules.durations import format_duration

_GROUP_KEYWORDS = {n.CARD_MANY_TO_ONE: "group_left", n.CARD_ONE_TO_MANY: "group_right"}


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _at(at: n.At | None) -> str:
    if at is None:
        return ""
    if at.t_ms is None:
        return " @ end()" if at.end else " @ start()"
    return f" @ {_number(at.t_ms / 1000)}"


def _offset(offset_ms: int) -> str:
    if not offset_ms:
        return ""
    if offset_ms < 0:
        return f" offset -{format_duration(-offset_ms)}"
    return f" offset {format_duration(offset_ms)}"


def _selector(vs: n.VectorSelector) -> str:
    matchers = list(vs.matchers)
    if vs.name is not None and matchers and matchers[0] == ("__name__", "=", vs.name):
        matchers = matchers[1:]
    body = ",".join(f"{label}{op}{quote(value)}" for label, op, value in matchers)
    if vs.name is not None:
        return vs.name + (f"{{{body}}}" if body else "")
    return f"{{{body}}}"


def _labels(labels: tuple[str, ...]) -> str:
    return "(" + ", ".join(labels) + ")"


def to_promql(expr: n.Expr) -> str:
    """``expr`` as PromQL text (see the module docstring)."""
    if isinstance(expr, n.NumberLiteral):
        return _number(expr.value)
    if isinstance(expr, n.StringLiteral):
        return quote(expr.value)
    if isinstance(expr, n.VectorSelector):
        return _selector(expr) + _offset(expr.offset_ms) + _at(expr.at)
    if isinstance(expr, n.MatrixSelector):
        vs = expr.selector
        return f"{_selector(vs)}[{format_duration(expr.range_ms)}]{_offset(vs.offset_ms)}{_at(vs.at)}"
    if isinstance(expr, n.Subquery):
        step = format_duration(expr.step_ms) if expr.step_ms else ""
        return f"{to_promql(expr.expr)}[{format_duration(expr.range_ms)}:{step}]{_offset(expr.offset_ms)}{_at(expr.at)}"
    if isinstance(expr, n.Call):
        return f"{expr.name}(" + ", ".join(to_promql(arg) for arg in expr.args) + ")"
    if isinstance(expr, n.Aggregate):
        grouping = f" {'without' if expr.without else 'by'} {_labels(expr.grouping)}"
        if not expr.without and not expr.grouping:
            grouping = ""
        args = ([to_promql(expr.param)] if expr.param is not None else []) + [to_promql(expr.expr)]
        return f"{expr.op}{grouping} (" + ", ".join(args) + ")"
    if isinstance(expr, n.Binary):
        parts = [to_promql(expr.lhs), expr.op]
        if expr.return_bool:
            parts.append("bool")
        matching = expr.matching
        if matching is not None:
            if matching.on:
                parts.append("on " + _labels(matching.labels))
            elif matching.labels:
                parts.append("ignoring " + _labels(matching.labels))
            keyword = _GROUP_KEYWORDS.get(matching.card)
            if keyword is not None:
                parts.append(keyword + " " + _labels(matching.include))
        parts.append(to_promql(expr.rhs))
        return " ".join(parts)
    if isinstance(expr, n.Negate):
        return "-" + to_promql(expr.expr)
    if isinstance(expr, n.Paren):
        return f"({to_promql(expr.expr)})"
    raise TypeError(f"not a PromQL expression node: {expr!r}")
