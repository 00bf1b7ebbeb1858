"""The evaluator's own expression tree: small immutable nodes built (and validated) by ``parse.py``.

The tree mirrors Prometheus' AST after parsing: parentheses are kept only where evaluation needs to
see through them, durations and timestamps are integer milliseconds, matchers are the store's
``(label, op, value)`` tuples with the ``__name__`` matcher first (so the store's name index is used).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from functools import cached_property
from typing import Any, Union

from watchdog.store import Matcher

# Value types, as Prometheus names them.
SCALAR = "scalar"
VECTOR = "vector"
MATRIX = "matrix"
STRING = "string"


@dataclass(frozen=True)
class At:
    """An ``@`` modifier: a fixed time in ms, or ``start()``/``end()`` (the query's evaluation time)."""

    t_ms: int | None
    """None for ``start()``/``end()``: the range query's start or end (an instant query's time)."""
    end: bool = False
    """With ``t_ms`` None: ``end()`` rather than ``start()``."""


@dataclass(frozen=True)
class NumberLiteral:
    """A float literal."""

    value: float
    type: str = SCALAR


@dataclass(frozen=True)
class StringLiteral:
    """A string literal."""

    value: str
    type: str = STRING


@dataclass(frozen=True)
class VectorSelector:
    """``name{matchers} offset X @ T``: the newest sample of each series within the lookback."""

    name: str | None
    matchers: tuple[Matcher, ...]
    offset_ms: int = 0
    at: At | None = None
    type: str = VECTOR


@dataclass(frozen=True)
class MatrixSelector:
    """``selector[range]``: every sample of each series in ``[ref - range, ref]``."""

    selector: VectorSelector
    range_ms: int
    type: str = MATRIX


@dataclass(frozen=True)
class Subquery:
    """``expr[range:step] offset X @ T``: ``expr`` evaluated at absolute multiples of ``step``."""

    expr: Expr
    range_ms: int
    step_ms: int | None
    """None means the engine's default subquery step (Prometheus: the global evaluation interval)."""
    offset_ms: int = 0
    at: At | None = None
    type: str = MATRIX


@dataclass(frozen=True)
class Call:
    """A function call. ``type`` is the function's return type."""

    name: str
    args: tuple[Expr, ...]
    type: str = VECTOR

    @cached_property
    def range_argument(self) -> tuple[int, Expr]:
        """``(position, expression inside any parentheses)`` of the first range-vector argument (position
        0 when there is none); worked out once per node, not at every evaluation."""
        for index, arg in enumerate(self.args):
            inner = unwrap_parens(arg)
            if inner.type == MATRIX:
                return index, inner
        return 0, unwrap_parens(self.args[0]) if self.args else self

    @cached_property
    def over_one_name_selector(self) -> bool:
        """Whether the range argument is a range selector with a ``__name__=`` matcher (its series, one
        per output, are distinct even without their names)."""
        for arg in self.args:
            arg = unwrap_parens(arg)
            if isinstance(arg, MatrixSelector):
                return any(label == "__name__" and op == "=" for label, op, _ in arg.selector.matchers)
        return False


@dataclass(frozen=True)
class Aggregate:
    """``op by|without (labels) ([param,] expr)``; ``grouping`` is sorted."""

    op: str
    expr: Expr
    param: Expr | None
    grouping: tuple[str, ...]
    without: bool
    type: str = VECTOR


@dataclass(frozen=True)
class VectorMatching:
    """How two vectors are matched: cardinality, ``on``/``ignoring`` labels and ``group_x`` labels."""

    card: str
    """One of ``one-to-one``, ``many-to-one``, ``one-to-many``, ``many-to-many``."""
    on: bool
    labels: tuple[str, ...]
    include: tuple[str, ...]


@dataclass(frozen=True)
class Binary:
    """``lhs op [bool] [on|ignoring(...)] [group_x(...)] rhs``; ``matching`` only between vectors."""

    op: str
    lhs: Expr
    rhs: Expr
    matching: VectorMatching | None
    return_bool: bool
    type: str = VECTOR


@dataclass(frozen=True)
class Negate:
    """Unary minus (unary plus is dropped by the parser)."""

    expr: Expr
    type: str = VECTOR


@dataclass(frozen=True)
class Paren:
    """Parentheses; kept so that ``timestamp((x))`` and friends behave as in Prometheus."""

    expr: Expr
    type: str = VECTOR


Expr = Union[  # noqa: UP007 - a runtime alias of classes; keep it readable on Python 3.10
    NumberLiteral, StringLiteral, VectorSelector, MatrixSelector, Subquery, Call, Aggregate, Binary,
    Negate, Paren,
]

CARD_ONE_TO_ONE = "one-to-one"
CARD_MANY_TO_ONE = "many-to-one"
CARD_ONE_TO_MANY = "one-to-many"
CARD_MANY_TO_MANY = "many-to-many"

ARITHMETIC_OPS = frozenset({"+", "-", "*", "/", "%", "^"})
COMPARISON_OPS = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPS = frozenset({"and", "or", "unless"})
BINARY_OPS = ARITHMETIC_OPS | COMPARISON_OPS | SET_OPS | {"atan2"}


def unwrap_parens(expr: Expr) -> Expr:
    """The expression inside any number of parentheses."""
    while isinstance(expr, Paren):
        expr = expr.expr
    return expr


def children(expr: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions, in source order."""
    if isinstance(expr, MatrixSelector):
        return (expr.selector,)
    if isinstance(expr, (Subquery, Negate, Paren)):
        return (expr.expr,)
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, Aggregate):
        return (expr.param, expr.expr) if expr.param is not None else (expr.expr,)
    if isinstance(expr, Binary):
        return (expr.lhs, expr.rhs)
    return ()


def walk(expr: Expr) -> list[Expr]:
    """Every node of the tree, parents before children (pre-order)."""
    out: list[Expr] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(children(node)))
    return out


def _go_matcher_string(matcher: tuple[str, str, str]) -> bytes:
    """Go's ``labels.Matcher.String()`` (``name op "value"``), as bytes for Go's string order."""
    from watchdog.golang.gostrconv import quote

    name, op, value = matcher
    return f"{name}{op}{quote(value)}".encode()


def as_rule_manager_runs_it(expr: Expr) -> Expr:
    """``expr`` as Prometheus 2.42's rule manager evaluates it: it queries ``expr.String()``, which
    prints every selector's matchers sorted as strings, so order-sensitive results (``absent``'s labels:
    ``{le="a",le!="b"}`` becomes ``{le!="b",le="a"}`` and keeps ``le``) follow that order. The
    name-equality matcher stays first (it is skipped by ``absent`` and used by the store's index)."""
    if isinstance(expr, VectorSelector):
        named = [m for m in expr.matchers[:1] if m[0] == "__name__" and m[1] == "="]
        rest = sorted(expr.matchers[len(named):], key=_go_matcher_string)
        return replace(expr, matchers=(*named, *rest))
    changes: dict[str, Any] = {}
    for item in fields(expr):
        value = getattr(expr, item.name)
        if isinstance(value, tuple) and value and all(is_dataclass(v) for v in value):
            changes[item.name] = tuple(as_rule_manager_runs_it(v) for v in value)
        elif is_dataclass(value) and not isinstance(value, type) and not isinstance(value, (At, VectorMatching)):
            changes[item.name] = as_rule_manager_runs_it(value)  # type: ignore[arg-type]
    return replace(expr, **changes) if changes else expr
