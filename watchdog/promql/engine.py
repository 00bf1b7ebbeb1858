"""Expression evaluation at one instant, following Prometheus 2.42's engine.

Internal value shapes (cheap tuples, converted to :mod:`watchdog.promql.values` at the API boundary):
instant vector ``[(labels, value)]``, range vector ``[(labels, timestamps, values)]``, scalar ``float``,
string ``str``.

Time semantics (all integer milliseconds):
- the reference time of a selector is ``(@ time or evaluation time) - offset``; ``@ start()`` and
  ``@ end()`` are the start and end of the query's range (both the evaluation time of an instant query);
- an instant selector takes each series' newest sample in ``[ref - lookback, ref]`` (closed, as 2.42),
  and returns nothing for a series whose newest sample there is a staleness marker;
- a range selector takes the samples in ``[ref - range, ref]`` (closed, as 2.42), minus stale markers;
- a subquery evaluates its expression at every absolute multiple of its step in ``[ref - range, ref]``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from watchdog.model import Labels, is_stale
from watchdog.promql import aggregations, binary, functions
from watchdog.promql import nodes as n
from watchdog.promql.budget import CpuBudget
from watchdog.promql.cache import EvalCache
from watchdog.promql.errors import PromQLError, TooManySamples, evaluation_error
from watchdog.promql.labels import drop_name, find_duplicate
from watchdog.store import Matcher

InstantVector = list[tuple[Labels, float]]
RangeVector = list[tuple[Labels, Sequence[int], Sequence[float]]]

DEFAULT_LOOKBACK_MS = 300_000
DEFAULT_SUBQUERY_STEP_MS = 60_000


@dataclass(frozen=True)
class EvalOptions:
    """How one evaluation runs; the defaults are Prometheus' own and set no limit."""

    lookback_ms: int = DEFAULT_LOOKBACK_MS
    """How far back an instant selector looks for a series' newest sample."""
    subquery_step_ms: int = DEFAULT_SUBQUERY_STEP_MS
    """The step of a subquery written without one (Prometheus: the global evaluation interval)."""
    deadline: float | CpuBudget | None = None
    """A ``time.monotonic()`` instant or a :class:`CpuBudget`: past it, a ``timeout`` :class:`PromQLError`."""
    max_samples: int | None = None
    """promtool's sample accounting in range selectors and subqueries (``rules test``: 10000): past it,
    an ``execution`` :class:`PromQLError` in promtool's words."""
    sample_limit: int | None = None
    """Samples held in memory at once anywhere (Prometheus' ``--query.max-samples``): past it,
    :class:`TooManySamples`."""
    range_ms: tuple[int, int] | None = None
    """``(start, end)`` of the range query the evaluation is one step of: what ``@ start()`` and
    ``@ end()`` mean (without it, both are the evaluation time)."""


DEFAULT_OPTIONS = EvalOptions()
_TOO_MANY_SAMPLES = "query processing would load too many samples into memory in query execution"
"""promtool 2.42's words past its sample limit, for range selectors and subqueries alike."""


class Selectable(Protocol):
    """What the evaluator needs from a store."""

    def select(self, matchers: Iterable[Matcher]) -> Iterable[Any]:
        """Series whose labels satisfy every matcher."""
        ...


def _newest_point(series: Any, mint: int, maxt: int) -> tuple[int, float] | None:
    """The newest point of ``series`` in ``[mint, maxt]``, or None (through ``window``)."""
    times, values = series.window(mint, maxt)
    if not times:
        return None
    return times[-1], values[-1]


def _window(series: Any, mint: int, maxt: int) -> tuple[Sequence[int], Sequence[float]]:
    """Points in ``[mint, maxt]``: ``span()`` for :class:`watchdog.store.Series` (array slices where it
    can, no per-point objects), ``window()`` for any other series."""
    span = getattr(series, "span", None)
    if span is not None:
        return span(mint, maxt)
    return series.window(mint, maxt)


def _without_stale(
    times: Sequence[int], values: Sequence[float]
) -> tuple[Sequence[int], Sequence[float]]:
    """Drop staleness markers from a window (a cheap NaN test first: any NaN makes the sum NaN)."""
    total = sum(values)
    if total == total:
        return times, values
    kept_t: list[int] = []
    kept_v: list[float] = []
    for t, v in zip(times, values, strict=True):
        if v != v and is_stale(v):
            continue
        kept_t.append(t)
        kept_v.append(v)
    return kept_t, kept_v


def _check_unique(vector: InstantVector) -> InstantVector:
    """``vector`` itself; an evaluation error when two of its samples have the same label set."""
    if len(vector) > 1 and find_duplicate([labels for labels, _ in vector]) is not None:
        raise evaluation_error("vector cannot contain metrics with the same labelset")
    return vector


def absent_labels(expr: n.Expr) -> Labels:
    """Labels of ``absent()``'s output: the selector's equality matchers, except repeated names."""
    if isinstance(expr, n.MatrixSelector):
        expr = expr.selector
    if not isinstance(expr, n.VectorSelector):
        return ()
    result: dict[str, str] = {}
    seen: set[str] = set()
    for name, op, value in expr.matchers:
        if name == "__name__":
            continue
        if op == "=" and name not in seen:
            result[name] = value
            seen.add(name)
        else:
            result.pop(name, None)
    return tuple(sorted((k, v) for k, v in result.items() if v != ""))


def _peak_samples(expr: n.Expr, counts: dict[int, int]) -> tuple[int, int]:
    """(samples ``expr`` produced over all steps of a subquery, peak held while producing them).

    Prometheus 2.42 evaluates a subquery's inner expression as a range query: each node's argument
    matrices stay in memory while it builds its own output, and a number literal is a matrix with one
    sample per step. This models that accounting (``--query.max-samples``; promtool tests use 10000)
    without the windows of range functions, which it frees series by series.
    """
    own = counts.get(id(expr), 0)
    if isinstance(expr, (n.Paren, n.Negate)):
        return own, _peak_samples(expr.expr, counts)[1]
    kids = [kid for kid in n.children(expr) if kid.type != n.MATRIX]
    running = peak = 0
    for kid in kids:
        kid_total, kid_peak = _peak_samples(kid, counts)
        peak = max(peak, running + kid_peak)
        running += kid_total
    return own, max(peak, running + own)


_AT_UNSAFE_FUNCTIONS = frozenset((
    "days_in_month", "day_of_month", "day_of_week", "day_of_year", "hour", "minute", "month", "year",
    "predict_linear", "time"))
"""Functions whose result depends on the evaluation time beyond their arguments' (2.42's
``AtModifierUnsafeFunctions``): a call to one is never step-invariant."""


def _step_invariant(expr: n.Expr) -> bool:
    """Whether 2.42's ``PreprocessExpr`` would evaluate ``expr`` once for every step (``@``-pinned
    selectors and literals, and what is built from them alone; an aggregation's parameter does not count)."""
    if isinstance(expr, (n.NumberLiteral, n.StringLiteral)):
        return True
    if isinstance(expr, n.VectorSelector):
        return expr.at is not None
    if isinstance(expr, n.MatrixSelector):
        return expr.selector.at is not None
    if isinstance(expr, n.Subquery):
        return expr.at is not None
    if isinstance(expr, (n.Paren, n.Negate, n.Aggregate)):
        return _step_invariant(expr.expr)
    if isinstance(expr, n.Binary):
        return _step_invariant(expr.lhs) and _step_invariant(expr.rhs)
    if isinstance(expr, n.Call):
        return expr.name not in _AT_UNSAFE_FUNCTIONS and all(_step_invariant(arg) for arg in expr.args)
    return False


class Evaluator:
    """Evaluates expression nodes against a store for one top-level query at ``query_ms``."""

    def __init__(self, store: Selectable, query_ms: int, options: EvalOptions = DEFAULT_OPTIONS,
                 cache: EvalCache | None = None) -> None:
        self.store = store
        self.cache = cache
        self._peak = 0  # the most samples held at once so far (with ``sample_limit``)
        self.max_samples = options.max_samples
        # Samples held at once, counted where they are materialised (a node's result, a range
        # selector's windows, a subquery's steps).
        self.sample_limit = options.sample_limit
        self._held = 0
        self.range_ms = (query_ms, query_ms) if options.range_ms is None else options.range_ms
        self._counts: dict[int, int] | None = None  # id(node) -> samples it produced (in a subquery)
        # 2.42's @ bookkeeping (setOffsetForAtModifier): the evaluation time E its offsets were computed
        # for, the start S of the current (sub)query evaluator, and the subquery offsets (and the @ of
        # the closest subquery with one) between E's root and here.
        self._at_context: tuple[int, int, int, int | None] = (query_ms, query_ms, 0, None)
        self.query_ms = query_ms
        self.lookback_ms = options.lookback_ms
        self.subquery_step_ms = options.subquery_step_ms
        # A wall-clock instant (``time.monotonic()``); with a CPU budget, the instant before which it
        # cannot be spent (moved on by the budget until it is).
        deadline = options.deadline
        self._budget = deadline if isinstance(deadline, CpuBudget) else None
        self.deadline = deadline.wall_deadline if isinstance(deadline, CpuBudget) else deadline
        self._selected: dict[tuple[Matcher, ...], list[Any]] = {}
        self._top_context = self._at_context
        # id(node) -> key of the sub-expressions whose results the pass's cache shares (None: no sharing)
        self._key_of = cache.plan.key_of if cache is not None and cache.plan is not None else None

    # --- dispatch -------------------------------------------------------------------------------

    def eval(self, expr: n.Expr, t: int) -> Any:
        """Evaluate ``expr`` at ``t``; the result shape follows ``expr.type``.

        Past ``deadline`` (``time.monotonic()``; or a :class:`CpuBudget` spent), raises
        :class:`PromQLError` with ``kind="timeout"``; every node and every subquery step checks it.
        """
        if self.deadline is not None and time.monotonic() > self.deadline:
            if self._budget is None or self._budget.spent():
                raise PromQLError("query timed out in expression evaluation", kind="timeout")
            self.deadline = self._budget.wall_deadline
        held = self._held
        key_of = self._key_of
        key = None if key_of is None else key_of.get(id(expr))
        if key is not None and t == self.query_ms and self._counts is None and self._at_context == self._top_context:
            result = self._eval_shared(expr, t, (key, t))
        else:
            result = _DISPATCH[type(expr)](self, expr, t)
        limit = self.sample_limit
        if limit is not None and expr.type != n.MATRIX:
            # A node's inputs are freed once it has its output: what is held is what was held before
            # plus that output (range selectors and subqueries count their matrices as they build them).
            held += len(result) if isinstance(result, list) else 1
            self._held = held
            if held > self._peak:
                self._peak = held
            if held > limit:
                raise TooManySamples(
                    "query processing would load too many samples into memory in query execution")
        if self._counts is not None:
            produced = 1 if isinstance(result, float) else 0 if isinstance(result, str) else len(result)
            self._counts[id(expr)] = self._counts.get(id(expr), 0) + produced
        return result

    def _eval_shared(self, expr: n.Expr, t: int, key: tuple[int, int]) -> Any:
        """``expr`` from the pass's cache, or evaluated and cached. A hit holds, for ``sample_limit``, the
        peak its evaluation held, so that the limit stops the same rules as without the cache."""
        assert self.cache is not None
        held = self._held
        hit = self.cache.results.get(key)
        if hit is not None:
            result, peak = hit
            if self.sample_limit is not None:
                self._hold(peak)
            return result
        outer_peak, self._peak = self._peak, held
        result = self._eval_node(expr, t)
        peak = self._peak - held
        self._peak = max(outer_peak, self._peak)
        self.cache.remember(key, result, peak)
        return result

    def _hold(self, samples: int) -> None:
        """Count ``samples`` more held in memory; past ``sample_limit``, stop the query."""
        self._held += samples
        if self._held > self._peak:
            self._peak = self._held
        if self.sample_limit is not None and self._held > self.sample_limit:
            raise TooManySamples(
                "query processing would load too many samples into memory in query execution")

    def _at_time(self, at: n.At) -> int:
        """The time an ``@`` modifier names: its timestamp, or the query's start or end."""
        if at.t_ms is not None:
            return at.t_ms
        return self.range_ms[1] if at.end else self.range_ms[0]

    def _eval_node(self, expr: n.Expr, t: int) -> Any:
        """``expr`` evaluated by the method for its node type (no sharing, no accounting)."""
        return _DISPATCH[type(expr)](self, expr, t)

    def _literal(self, expr: n.NumberLiteral | n.StringLiteral, t: int) -> Any:
        return expr.value

    def _paren(self, expr: n.Paren, t: int) -> Any:
        return self.eval(expr.expr, t)

    def _negate(self, expr: n.Negate, t: int) -> Any:
        value = self.eval(expr.expr, t)
        if isinstance(value, float):
            return -value
        return _check_unique([(drop_name(labels), -v) for labels, v in value])

    # --- selectors ------------------------------------------------------------------------------

    def _series(self, matchers: tuple[Matcher, ...]) -> list[Any]:
        """The series for ``matchers``, selected once per top-level evaluation."""
        if self.cache is not None:
            return self.cache.selections.select(self.store, matchers)
        found = self._selected.get(matchers)
        if found is None:
            found = self._selected[matchers] = list(self.store.select(matchers))
        return found

    def _series_unnamed(self, matchers: tuple[Matcher, ...]) -> tuple[list[Any], list[Labels]]:
        """:meth:`_series` and each series' label set without ``__name__`` (kept with the selection)."""
        if self.cache is not None:
            return self.cache.selections.select_unnamed(self.store, matchers)
        found = self._series(matchers)
        return found, [drop_name(series.labels) for series in found]

    def _reference(self, at: n.At | None, offset_ms: int, t: int) -> int:
        """The time a selector or subquery looks back from.

        With ``@ T``, 2.42 turns ``T`` into an offset against the evaluation time E of its last
        ``setOffsetForAtModifier`` pass, minus the offsets of the subqueries in between, and evaluates
        the (step-invariant) node once at the start S of the enclosing evaluator: ``S - o - E + T +
        subquery offsets``. At the top level that is ``T - o``; inside a subquery whose first step is
        the enclosing start, the subquery's offset shifts ``T`` (a 2.42 quirk promtool shows).
        """
        if at is None:
            return t - offset_ms
        base = self._at_time(at)
        evaluated_for, start, subquery_offsets, subquery_at = self._at_context
        if subquery_at is not None:
            subquery_offsets += evaluated_for - subquery_at
        return start - offset_ms - evaluated_for + base + subquery_offsets

    def selector_points(self, vs: n.VectorSelector, t: int) -> list[tuple[Labels, int, float]]:
        """Each matching series' newest non-stale sample in the lookback: ``(labels, t, value)``."""
        ref = self._reference(vs.at, vs.offset_ms, t)
        mint = ref - self.lookback_ms
        out: list[tuple[Labels, int, float]] = []
        append = out.append
        for series in self._series(vs.matchers):
            point_at = getattr(series, "point_at", None)
            if point_at is not None:  # watchdog.store.Series: bisect, no copies
                newest = point_at(ref)
                if newest is None or newest[0] < mint:
                    continue
                sample_t, value = newest
            else:
                point = _newest_point(series, mint, ref)
                if point is None:
                    continue
                sample_t, value = point
            if value != value and is_stale(value):
                continue
            append((series.labels, sample_t, value))
        return out

    def instant_selector(self, vs: n.VectorSelector, t: int) -> InstantVector:
        """An instant vector selector."""
        return [(labels, value) for labels, _, value in self.selector_points(vs, t)]

    def range_selector(self, ms: n.MatrixSelector, t: int) -> RangeVector:
        """A range vector selector: series with at least one non-stale point in the window."""
        vs = ms.selector
        ref = self._reference(vs.at, vs.offset_ms, t)
        out: RangeVector = []
        mint = ref - ms.range_ms
        limited = self.sample_limit is not None
        promtool_limit = self.max_samples
        for series in self._series(vs.matchers):
            times, values = _window(series, mint, ref)
            if not times:
                continue
            if limited:
                self._hold(len(times))
            # promtool 2.42 holds one series' points at a time, plus the output of the series before it
            # and one more (measured at the boundary: one series errs from 10000 points, two from 9999).
            if promtool_limit is not None and len(times) + len(out) + 1 > promtool_limit:
                raise evaluation_error(_TOO_MANY_SAMPLES)
            times, values = _without_stale(times, values)
            if times:
                out.append((series.labels, times, values))
        return out

    def subquery(self, sq: n.Subquery, t: int) -> RangeVector:
        """Evaluate ``sq.expr`` at each multiple of the step within ``[ref - range, ref]``."""
        ref = self._reference(sq.at, sq.offset_ms, t)
        step = sq.step_ms or self.subquery_step_ms
        start = ref - sq.range_ms
        first = -(-start // step) * step
        collected: dict[Labels, tuple[list[int], list[float]]] = {}
        outer_counts = self._counts
        self._counts = {} if self.max_samples is not None else None
        outer_context = self._at_context
        evaluated_for, start, subquery_offsets, subquery_at = outer_context
        # Prometheus evaluates a subquery once as a range query from the enclosing evaluator's start:
        # its own start is aligned from there, whatever step of the enclosing one we are at.
        range_start = self._reference(sq.at, sq.offset_ms, start) - sq.range_ms
        inner_start = -(-range_start // step) * step
        if inner_start != start:  # 2.42 recomputes the inner @ offsets for that start
            self._at_context = (inner_start, inner_start, 0, None)
        elif sq.at is not None:
            self._at_context = (evaluated_for, start, sq.offset_ms, self._at_time(sq.at))
        else:
            self._at_context = (evaluated_for, start, subquery_offsets + sq.offset_ms, subquery_at)
        promtool_limit = self.max_samples
        points = 0
        try:
            if first > ref and _step_invariant(sq.expr):
                # No step falls in the window, but 2.42 evaluates a step-invariant inner expression once
                # before it replicates it over the (zero) steps, so its errors surface:
                # ``topk(NaN, x @ 0)[20s:]`` between two steps is "Scalar value NaN overflows int64".
                self.eval(sq.expr, first)
            for ts in range(first, ref + 1, step):
                vector = self.eval(sq.expr, ts)
                for labels, value in vector:
                    entry = collected.get(labels)
                    if entry is None:
                        entry = collected[labels] = ([], [])
                    entry[0].append(ts)
                    entry[1].append(value)
                if promtool_limit is not None:
                    points += len(vector)
                    if points > promtool_limit:  # past it whatever comes next
                        raise evaluation_error(_TOO_MANY_SAMPLES)
            # promtool 2.42 evaluates the inner expression as a range query (its peak, see _peak_samples),
            # keeps the whole result while the function over it walks the series, and holds each series'
            # points again as it does a range selector's (one series errs from 5000 steps, two from
            # 3333, three from 2500, measured at the boundary; see docs/promql.md).
            if self._counts is not None and promtool_limit is not None and (
                    _peak_samples(sq.expr, self._counts)[1] > promtool_limit
                    or points + max((len(times) + k + 1 for k, (times, _) in enumerate(collected.values())),
                                    default=0) > promtool_limit):
                raise evaluation_error(_TOO_MANY_SAMPLES)
        finally:
            self._counts = outer_counts
            self._at_context = outer_context
        return [(labels, times, values) for labels, (times, values) in collected.items()]

    # --- operators ------------------------------------------------------------------------------

    def binary(self, expr: n.Binary, t: int) -> Any:
        """Binary operators between scalars and vectors."""
        lhs = self.eval(expr.lhs, t)
        rhs = self.eval(expr.rhs, t)
        lhs_scalar = isinstance(lhs, float)
        rhs_scalar = isinstance(rhs, float)
        if lhs_scalar and rhs_scalar:
            return binary.scalar_binop(expr.op, lhs, rhs)
        if rhs_scalar or lhs_scalar:
            vector, scalar = (rhs, lhs) if lhs_scalar else (lhs, rhs)
            result = binary.vector_scalar_binop(expr.op, vector, scalar, lhs_scalar, expr.return_bool)
            # A filtering comparison keeps a subset of its operand's samples, labels untouched: distinct.
            filtered = expr.op in n.COMPARISON_OPS and not expr.return_bool
            return result if filtered else _check_unique(result)
        assert expr.matching is not None
        if expr.op in n.SET_OPS:
            # ``and``/``unless`` keep a subset of the left side; ``or`` adds right samples whose match
            # group the left lacks, so never a label set the left has: distinct when both sides are.
            return binary.set_operation(expr.op, lhs, rhs, expr.matching)
        return _check_unique(binary.vector_binop(expr.op, lhs, rhs, expr.matching, expr.return_bool))

    def aggregate(self, expr: n.Aggregate, t: int) -> InstantVector:
        """Aggregation operators."""
        param: float | str | None = None
        if expr.param is not None:
            param = self.eval(expr.param, t)
        vector = self.eval(expr.expr, t)
        cache = self.cache
        if cache is not None and cache.plan is not None and expr.op in aggregations.SIMPLE_OPS:
            return cache.plan.groupings(expr).aggregate(expr.op, vector, expr.grouping, expr.without)
        return aggregations.aggregate(expr.op, vector, expr.grouping, expr.without, param)

    # --- functions ------------------------------------------------------------------------------

    def call(self, expr: n.Call, t: int) -> Any:
        """Function calls: range functions over a matrix argument, others over evaluated arguments."""
        name = expr.name
        if name in functions.RANGE_FUNCTIONS:
            result = self._range_call(expr, t)
            # One output per series of one fixed-name selector: distinct without the name too.
            return result if expr.over_one_name_selector else _check_unique(result)
        if name == "timestamp":
            arg = n.unwrap_parens(expr.args[0])
            if isinstance(arg, n.VectorSelector):
                return _check_unique(self._timestamp_of_selector(arg, t))
            return _check_unique([(drop_name(labels), t / 1000) for labels, _ in self.eval(arg, t)])
        args = [self.eval(arg, t) for arg in expr.args]
        return self._instant_call(expr, args, t)

    def _timestamp_of_selector(self, vs: n.VectorSelector, t: int) -> InstantVector:
        """``timestamp(selector)``: the sample times.

        With ``@ T offset o``, 2.42 looks up at T itself (its per-step offset override drops ``o``) but
        only among the samples its querier fetched, ``[T - o - lookback, T - o]``: the newest sample in
        ``[max(T, T - o) - lookback, min(T, T - o)]``.
        """
        if vs.at is None:
            return [(drop_name(labels), ts / 1000) for labels, ts, _ in self.selector_points(vs, t)]
        at_t = self._at_time(vs.at)
        upper = min(at_t, at_t - vs.offset_ms)
        lower = max(at_t, at_t - vs.offset_ms) - self.lookback_ms
        out: InstantVector = []
        for series in self._series(vs.matchers):
            times, values = _window(series, lower, upper)
            if len(times) and not (values[-1] != values[-1] and is_stale(values[-1])):
                out.append((drop_name(series.labels), times[-1] / 1000))
        return out

    def _instant_call(self, expr: n.Call, args: list[Any], t: int) -> Any:
        name = expr.name
        if name in functions.MATH_FUNCTIONS:
            return _check_unique(functions.apply_math(name, args[0]))
        if name == "time":
            return t / 1000
        if name == "pi":
            return math.pi
        if name == "vector":
            return [((), args[0])]
        if name == "scalar":
            return args[0][0][1] if len(args[0]) == 1 else math.nan
        if name == "absent":
            if args[0]:
                return []
            return [(absent_labels(n.unwrap_parens(expr.args[0])), 1.0)]
        if name == "clamp":
            return _check_unique(functions.clamp(args[0], args[1], args[2]))
        if name == "clamp_max":
            return _check_unique(functions.clamp_max(args[0], args[1]))
        if name == "clamp_min":
            return _check_unique(functions.clamp_min(args[0], args[1]))
        if name == "round":
            return _check_unique(functions.round_(args[0], args[1] if len(args) > 1 else 1.0))
        if name in ("sort", "sort_desc"):
            return functions.sort_vector(args[0], name == "sort_desc")
        if name == "label_replace":
            return _check_unique(functions.label_replace(*args))
        if name == "label_join":
            return _check_unique(functions.label_join(args[0], args[1], args[2], args[3:]))
        if name == "histogram_quantile":
            cache = self.cache
            buckets = None if cache is None else cache.derived(args[1], functions.histogram_buckets)
            return _check_unique(functions.histogram_quantile(args[0], args[1], buckets))
        if name in ("histogram_count", "histogram_sum", "histogram_fraction"):
            return []  # native histograms only; classic series are skipped, as in Prometheus
        if name in functions.DATE_FUNCTIONS:
            return _check_unique(functions.date_function(name, args, t))
        raise PromQLError(f"unsupported function '{name}'")  # pragma: no cover - parse rejects it

    def _counter_call(self, name: str, source: n.MatrixSelector,
                      context: functions.RangeContext) -> InstantVector | None:
        """``rate``/``increase``/``delta`` of a range selector from the cache's counter index: the same
        values, in the same order, as :meth:`range_selector` and the range function, without walking
        the window; None for series that are not :class:`watchdog.store.Series` (the caller walks)."""
        assert self.cache is not None and self.cache.counters is not None
        selected, unnamed = self._series_unnamed(source.selector.matchers)
        if selected and getattr(selected[0], "tail", None) is None:  # not watchdog.store series (all alike)
            return None
        is_counter, is_rate = COUNTER_FUNCTIONS[name]
        out, held = self.cache.counters.rates(selected, unnamed, context, is_counter, is_rate)
        if self.sample_limit is not None and held:
            self._hold(held)  # every window's points held at once by the end: the same peak, the same stop
        return out

    def _range_call(self, expr: n.Call, t: int) -> InstantVector:
        """A function with a range-vector argument, applied per series."""
        name = expr.name
        matrix_index, source = expr.range_argument
        scalars = () if len(expr.args) == 1 else tuple(
            float(self.eval(arg, t)) for i, arg in enumerate(expr.args) if i != matrix_index
        )
        if isinstance(source, n.MatrixSelector):
            vs = source.selector
            ref = self._reference(vs.at, vs.offset_ms, t)
            range_ms = source.range_ms
            if name in COUNTER_FUNCTIONS and self.cache is not None and self.cache.counters is not None:
                counted = self._counter_call(name, source, functions.RangeContext(ref - range_ms, ref, range_ms,
                                                                                  t, scalars))
                if counted is not None:
                    return counted
            matrix = self.range_selector(source, t)
        elif isinstance(source, n.Subquery):
            ref = self._reference(source.at, source.offset_ms, t)
            range_ms = source.range_ms
            matrix = self.subquery(source, t)
        else:  # pragma: no cover - the parser only allows these two
            raise PromQLError(f"unsupported range argument to {name}")
        if name == "absent_over_time":
            if matrix:
                return []
            return [(absent_labels(source), 1.0)]
        context = functions.RangeContext(ref - range_ms, ref, range_ms, t, scalars)
        fn = functions.RANGE_FUNCTIONS[name]
        keep_name = name == "last_over_time"
        out: InstantVector = []
        for labels, times, values in matrix:
            result = fn(times, values, context)
            if result is not None:
                out.append((labels if keep_name else drop_name(labels), result))
        return out


_DISPATCH: dict[type, Any] = {
    n.VectorSelector: Evaluator.instant_selector,
    n.Binary: Evaluator.binary,
    n.Call: Evaluator.call,
    n.Aggregate: Evaluator.aggregate,
    n.NumberLiteral: Evaluator._literal,
    n.Paren: Evaluator._paren,
    n.Negate: Evaluator._negate,
    n.StringLiteral: Evaluator._literal,
    n.MatrixSelector: Evaluator.range_selector,
    n.Subquery: Evaluator.subquery,
}
"""The method that evaluates each node type (one dictionary lookup instead of a chain of type tests)."""

COUNTER_FUNCTIONS: dict[str, tuple[bool, bool]] = {"rate": (True, True), "increase": (True, False),
                                                   "delta": (False, False)}
"""Range functions that need only the window's ends and counter resets: name -> (is_counter, is_rate)."""


def evaluate_expr(expr: n.Expr, store: Selectable, t_ms: int, options: EvalOptions = DEFAULT_OPTIONS,
                  cache: EvalCache | None = None) -> Any:
    """Evaluate a parsed expression at ``t_ms``; the internal result shape follows ``expr.type``.
    ``cache`` (:mod:`watchdog.promql.cache`) lets a rule engine's pass reuse work between rules."""
    return Evaluator(store, t_ms, options, cache).eval(expr, t_ms)
