"""Which nodes of an expression evaluate to an empty vector, without an error, because the selectors
under them match no series: the evaluator answers those at once instead of walking them.

Contract:
- :func:`empty_nodes` takes an expression and a test telling whether a selector matches no series, and
  returns ``{id(node): peak}`` for the topmost nodes whose evaluation is certain to give ``[]`` and raise
  nothing, whatever the time: a selector that matches no series; an operator, aggregation or function
  whose vector operands are all such nodes and whose other operands are literals, where our evaluator
  gives ``[]`` for exactly those operands (functions and aggregations are tried on them, so invalid
  regular expressions or label names, which raise even on an empty vector, are never marked). ``absent``,
  ``absent_over_time``, ``vector``, ``scalar``, time functions and everything inside a subquery are never
  marked.
- ``peak`` is the number of samples the node's evaluation would hold at once at its peak beyond what was
  held before it (its literal operands count one each, as the evaluator counts them): the evaluator
  charges it to the sample limit, so that the limit stops the same queries as a full evaluation.
- :class:`EmptyNodes` keeps the answer for one expression while the store's series set holds
  (``Store.generation``), and per combination of empty selectors otherwise.
Speed never changes a result: the evaluator with these marks returns what it returns without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from watchdog.promql import aggregations, functions
from watchdog.promql import nodes as n
from watchdog.promql.errors import PromQLError

_NEVER_EMPTY = frozenset({"absent", "absent_over_time", "vector", "scalar", "time", "pi"})
"""Functions whose result is not empty (or not a vector) when their operands are."""

Static = tuple[int, int, Any]
"""``(peak, output, value)`` of a node whose evaluation is known without the store: output 0 and value
``[]`` for an empty vector, output 1 and the value itself for a literal (a number or a string)."""


def empty_nodes(expr: n.Expr, matches_nothing: Callable[[n.VectorSelector], bool]) -> dict[int, int]:
    """``{id(node): peak}`` for the topmost nodes of ``expr`` known to evaluate to an empty vector without
    an error (see the module docstring)."""
    from watchdog.promql.engine import Evaluator  # the evaluator imports this module's users

    marks: dict[int, int] = {}
    probe = Evaluator(_NoStore(), 0)
    _static(expr, matches_nothing, marks, probe)
    return marks


class _NoStore:
    """The probe evaluator's store: it only ever evaluates literals and empty operands."""

    def select(self, matchers: Any) -> list[Any]:  # pragma: no cover - never called
        """No series."""
        return []


def _peak(own: int, kids: list[Static]) -> int:
    """The most a node holds while evaluating ``kids`` in order and then giving ``own`` samples: each
    child's output stays held until the node has its result."""
    peak = own
    running = 0
    for kid_peak, kid_output, _ in kids:
        peak = max(peak, running + kid_peak)
        running += kid_output
    return peak


def _static(node: n.Expr, matches_nothing: Callable[[n.VectorSelector], bool], marks: dict[int, int],
            probe: Any) -> Static | None:
    """``node``'s static evaluation, or None; records empty nodes in ``marks`` (topmost only)."""
    kids = [] if isinstance(node, n.Subquery) else [
        _static(kid, matches_nothing, marks, probe) for kid in n.children(node)]
    result = _evaluate(node, kids, matches_nothing, probe)
    if result is not None and result[1] == 0:
        for kid in n.children(node):
            marks.pop(id(kid), None)
        marks[id(node)] = result[0]
    return result


def _literal(value: Any) -> Static:
    return (1, 1, value)


def _empty(peak: int) -> Static:
    return (peak, 0, [])


def _evaluate(node: n.Expr, kids: list[Static | None], matches_nothing: Callable[[n.VectorSelector], bool],
              probe: Any) -> Static | None:
    """What ``node`` evaluates to when every child's evaluation is the known ``kids``; None when that is
    not known without the store (or could raise)."""
    if isinstance(node, (n.NumberLiteral, n.StringLiteral)):
        return _literal(node.value)
    if isinstance(node, n.VectorSelector):
        return _empty(0) if matches_nothing(node) else None
    if isinstance(node, n.MatrixSelector):
        return _empty(0) if matches_nothing(node.selector) else None
    if any(kid is None for kid in kids) or not kids:
        return None
    known: list[Static] = [kid for kid in kids if kid is not None]
    if isinstance(node, n.Paren):
        return known[0]
    if isinstance(node, n.Negate):
        peak, output, value = known[0]
        return (peak, output, -value if output else [])
    if isinstance(node, n.Binary):
        return _binary(node, known)
    if isinstance(node, n.Aggregate):
        return _aggregate(node, known)
    if isinstance(node, n.Call):
        return _call(node, known, probe)
    return None


def _binary(node: n.Binary, kids: list[Static]) -> Static | None:
    (_, left_out, left), (_, right_out, right) = kids
    if left_out and right_out:  # number op number: the parser allows only arithmetic and bool comparisons
        from watchdog.promql.binary import scalar_binop

        if isinstance(left, str) or isinstance(right, str):
            return None
        return (_peak(1, kids), 1, scalar_binop(node.op, left, right))
    if node.lhs.type == n.VECTOR and node.rhs.type == n.VECTOR:
        # Vector op vector: empty when both are (set operators keep a side; the others match nothing).
        return _empty(_peak(0, kids)) if not left_out and not right_out else None
    # Vector op number: the empty vector gives an empty result (a number operand is a literal here).
    return _empty(_peak(0, kids)) if not isinstance(left, str) and not isinstance(right, str) else None


def _aggregate(node: n.Aggregate, kids: list[Static]) -> Static | None:
    param = kids[0][2] if node.param is not None else None
    if kids[-1][1]:
        return None
    try:
        result = aggregations.aggregate(node.op, [], node.grouping, node.without, param)
    except PromQLError:
        return None
    return _empty(_peak(0, kids)) if result == [] else None


def _call(node: n.Call, kids: list[Static], probe: Any) -> Static | None:
    name = node.name
    if name in _NEVER_EMPTY or (name in functions.DATE_FUNCTIONS and not node.args):
        return None
    if name in functions.RANGE_FUNCTIONS:
        position, source = node.range_argument
        if not isinstance(source, n.MatrixSelector) or kids[position][1]:
            return None
        # The evaluator evaluates the other arguments in order, then reads the range (held: nothing).
        return _empty(_peak(0, [kid for index, kid in enumerate(kids) if index != position]))
    if name == "timestamp":
        if kids[0][1]:
            return None
        # A selector's timestamps are read without evaluating it; any other argument is evaluated.
        direct = isinstance(n.unwrap_parens(node.args[0]), n.VectorSelector)
        return _empty(0 if direct else kids[0][0])
    if not any(output == 0 for _, output, _ in kids):
        return None
    try:
        result = probe._instant_call(node, [value for _, _, value in kids], 0)
    except PromQLError:
        return None
    return _empty(_peak(0, kids)) if result == [] else None


class EmptyNodes:
    """:func:`empty_nodes` of one expression against a changing store (see the module docstring)."""

    __slots__ = ("_current", "_generation", "_memo", "expr", "selectors")

    def __init__(self, expr: n.Expr) -> None:
        self.expr = expr
        self.selectors = _selectors_outside_subqueries(expr)
        self._memo: dict[tuple[bool, ...], dict[int, int] | None] = {}
        self._generation: int | None = None
        self._current: dict[int, int] | None = None

    def current(self, store: Any, select: Callable[[Any, tuple[Any, ...]], list[Any]]) -> dict[int, int] | None:
        """The marks for ``store`` as it is now (None: nothing is known empty); ``select(store, matchers)``
        gives a selector's series (the pass's cached selections)."""
        if not self.selectors:
            return None
        generation = getattr(store, "generation", None)
        if generation is not None and generation == self._generation:
            return self._current
        empty = tuple(not select(store, vs.matchers) for vs in self.selectors)
        if empty not in self._memo:
            if len(self._memo) > 64:  # a store whose series set keeps changing shape: stay bounded
                self._memo.clear()
            by_id = {id(vs): flag for vs, flag in zip(self.selectors, empty, strict=True)}
            marks = empty_nodes(self.expr, lambda vs: by_id.get(id(vs), False))
            self._memo[empty] = marks or None
        self._generation = generation
        self._current = self._memo[empty]
        return self._current


def _selectors_outside_subqueries(expr: n.Expr) -> list[n.VectorSelector]:
    """Every vector selector of ``expr`` that is not inside a subquery, in tree order."""
    out: list[n.VectorSelector] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, n.Subquery):
            continue
        if isinstance(node, n.VectorSelector):
            out.append(node)
        stack.extend(reversed(n.children(node)))
    return out
