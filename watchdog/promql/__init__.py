"""Our PromQL evaluator: ``promql-parser`` parses, this package evaluates with Prometheus 2.42 semantics.

Public API::

    query = parse_query('sum by (job) (rate(http_requests_total[5m]))')   # PromQLError if unsupported
    value = evaluate(query, store, t_ms)       # list[VectorSample] | MatrixList | Scalar | String
    data = to_api_json(value)                  # /api/v1/query "data": {"resultType", "result"}

``store`` is anything with ``select(matchers) -> Iterable[Series]`` (see :mod:`watchdog.store`).
Evaluation is pure: no I/O, no clock; time comes in as integer milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from watchdog.promql import nodes
from watchdog.promql.budget import CpuBudget
from watchdog.promql.cache import EvalCache
from watchdog.promql.engine import (
    DEFAULT_LOOKBACK_MS,
    DEFAULT_OPTIONS,
    DEFAULT_SUBQUERY_STEP_MS,
    EvalOptions,
    Selectable,
    evaluate_expr,
)
from watchdog.promql.errors import PromQLError, TooManySamples
from watchdog.promql.format import api_text_lines, to_api_json, to_text_lines
from watchdog.promql.parse import FUNCTION_RETURN_TYPES, parse_expr
from watchdog.promql.values import (
    Matrix,
    MatrixList,
    RangeSeries,
    Scalar,
    String,
    Value,
    Vector,
    VectorSample,
)

__all__ = [
    "DEFAULT_LOOKBACK_MS",
    "DEFAULT_SUBQUERY_STEP_MS",
    "SUPPORTED_FUNCTIONS",
    "CpuBudget",
    "EvalOptions",
    "Matrix",
    "MatrixList",
    "PromQLError",
    "Query",
    "RangeSeries",
    "Scalar",
    "String",
    "TooManySamples",
    "Value",
    "Vector",
    "VectorSample",
    "api_text_lines",
    "evaluate",
    "parse_query",
    "to_api_json",
    "to_text_lines",
]

SUPPORTED_FUNCTIONS: frozenset[str] = frozenset(FUNCTION_RETURN_TYPES)


@dataclass(frozen=True)
class Query:
    """A parsed, validated query. ``value_type`` is ``vector``, ``scalar``, ``matrix`` or ``string``."""

    text: str
    expr: nodes.Expr = field(repr=False)

    @property
    def value_type(self) -> str:
        """The result type Prometheus would report."""
        return self.expr.type

    def walk(self) -> list[nodes.Expr]:
        """Every node of the expression tree, parents first."""
        return nodes.walk(self.expr)

    def selectors(self) -> list[nodes.VectorSelector]:
        """Every vector selector (including those inside range selectors), in source order."""
        return [node for node in self.walk() if isinstance(node, nodes.VectorSelector)]


@lru_cache(maxsize=4096)
def parse_query(text: str) -> Query:
    """Parse and validate ``text``; raises :class:`PromQLError` naming an unsupported construct."""
    return Query(text, parse_expr(text))


def evaluate(query: Query | str, store: Selectable, t_ms: int, options: EvalOptions = DEFAULT_OPTIONS,
             cache: EvalCache | None = None) -> Value:
    """Evaluate ``query`` at ``t_ms`` (int ms) against ``store``, as ``options`` say.

    Returns a list of :class:`VectorSample` (stamped ``t_ms``), a :class:`MatrixList` of
    :class:`RangeSeries`, a :class:`Scalar` or a :class:`String`. Raises :class:`PromQLError`
    (``kind="execution"``) for evaluation errors such as many-to-many matching, (``kind="timeout"``) past
    ``options.deadline``, and :class:`TooManySamples` past ``options.sample_limit``.
    """
    if isinstance(query, str):
        query = parse_query(query)
    raw: Any = evaluate_expr(query.expr, store, int(t_ms), options, cache)
    kind = query.value_type
    if kind == nodes.SCALAR:
        return Scalar(float(raw), int(t_ms))
    if kind == nodes.STRING:
        return String(str(raw), int(t_ms))
    if kind == nodes.MATRIX:
        return MatrixList(RangeSeries(labels, list(times), list(values)) for labels, times, values in raw)
    return [VectorSample(labels, value, int(t_ms)) for labels, value in raw]
