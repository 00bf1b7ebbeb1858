"""What a rule engine's evaluations against one store may reuse: the evaluator with an :class:`EvalCache`
returns, bit for bit, what it returns without one (``cache=None``, the plain path), and stops on the
same sample limit.

- :class:`CounterIndex` (kept across passes): each store series' counter resets and staleness markers,
  so ``rate``/``increase``/``delta`` of a range selector read the window's ends and resets, not every
  point (Prometheus' own arithmetic, in its order).
- :class:`Selections` (kept across passes while ``Store.generation`` holds): selector matches and
  their label sets without ``__name__``.
- :class:`SharedPlan` (per rule set): which sub-expressions several rules contain, and each aggregation
  node's :class:`~watchdog.promql.aggregations.Groupings`, kept while its input's label sets hold.
- :class:`EvalCache` (one pass, one evaluation time): the shared sub-expressions' results; a rule's
  write (:meth:`EvalCache.wrote`) drops what read the names it wrote.
Results handed out from the cache are shared: callers must not mutate them.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

from watchdog.model import METRIC_NAME, Labels, is_stale
from watchdog.promql import nodes as n
from watchdog.promql.aggregations import Groupings
from watchdog.promql.functions import RangeContext, extrapolate
from watchdog.promql.labels import drop_name


def _same(a: float, b: float) -> bool:
    """Equal values, NaNs equal when both are (or both are not) staleness markers."""
    return a == b or (a != a and b != b and is_stale(a) == is_stale(b))


class _SeriesEvents:
    """One series' counter resets (timestamp, previous value) and staleness markers, in time order."""

    __slots__ = ("previous", "ref", "reset_prev", "reset_t", "scanned_t", "scanned_v", "stale_t")

    def __init__(self, series: Any) -> None:
        self.ref = weakref.ref(series)
        self.reset()

    def reset(self) -> None:
        """Forget everything scanned."""
        self.scanned_t: int | None = None
        self.scanned_v = 0.0
        self.previous: float | None = None  # the newest non-stale value scanned
        self.reset_t: list[int] = []
        self.reset_prev: list[float] = []
        self.stale_t: list[int] = []

    def update(self, timestamps: Any, values: Any) -> None:
        """Scan the points appended since the last call (from scratch if a scanned point changed)."""
        start = 0
        if self.scanned_t is not None and timestamps[-1] == self.scanned_t and _same(values[-1], self.scanned_v):
            return
        n = len(timestamps)
        newest, previous = values[-1], self.previous
        if (n > 1 and timestamps[n - 2] == self.scanned_t and values[n - 2] == self.scanned_v
                and previous is not None and newest >= previous and not self.stale_t and not self.reset_t):
            # one ordinary point after the one scanned last, no reset: all the loop below would record
            self.scanned_t = timestamps[-1]
            self.scanned_v = self.previous = newest
            return
        if self.scanned_t is not None:
            index = len(timestamps) - 2  # most often exactly one point was appended since the last scan
            if index < 0 or timestamps[index] != self.scanned_t:
                index = bisect_left(timestamps, self.scanned_t)
            if index < len(timestamps) and timestamps[index] == self.scanned_t and _same(
                    values[index], self.scanned_v):
                start = index + 1
            else:
                self.reset()
        if start == len(timestamps):
            return
        previous = self.previous
        for i in range(start, len(timestamps)):
            value = values[i]
            if value != value and is_stale(value):
                self.stale_t.append(timestamps[i])
                continue
            if previous is not None and value < previous:
                self.reset_t.append(timestamps[i])
                self.reset_prev.append(previous)
            previous = value
        self.previous = previous
        self.scanned_t = timestamps[-1]
        self.scanned_v = values[-1]
        first = timestamps[0]
        if self.reset_t and self.reset_t[0] < first:
            cut = bisect_left(self.reset_t, first)
            del self.reset_t[:cut]
            del self.reset_prev[:cut]
        if self.stale_t and self.stale_t[0] < first:
            del self.stale_t[:bisect_left(self.stale_t, first)]


class CounterIndex:
    """Counter resets and staleness markers of store series (see the module docstring)."""

    def __init__(self) -> None:
        self._events: dict[int, _SeriesEvents] = {}
        self._created = 0

    def _scanned(self, series: Any, timestamps: Any, values: Any) -> _SeriesEvents:
        """``series``' entry, brought up to its newest point (``timestamps``, ``values``: its live arrays)."""
        events = self._events.get(id(series))
        if events is None or events.ref() is not series:
            events = self._events_of(series)
        newest = values[-1]
        if events.scanned_t != timestamps[-1] or (newest != events.scanned_v
                                                  and not _same(newest, events.scanned_v)):
            events.update(timestamps, values)
        return events

    def rates(self, selected: Sequence[Any], labels: Sequence[Labels], ctx: RangeContext, counter: bool,
              is_rate: bool) -> tuple[list[tuple[Labels, float]], int]:
        """``rate`` (``counter`` and ``is_rate``), ``increase`` (``counter``) or ``delta`` of each of
        ``selected`` (store series, one call per selector: this loop runs for every series a counter
        function reads) over ``ctx``'s window, labelled ``labels[i]``, in order. Returns (those samples,
        the points the windows held). Values, to the bit, those of
        :func:`~watchdog.promql.functions.extrapolate` over the window's points, stale markers dropped
        (Prometheus' ``extrapolatedRate``): the raw increase is the last value less the first plus the
        value before each counter reset, in time order; a zero increase is its own result (the factor
        that scales it is positive and finite: two points or more at distinct times)."""
        mint, maxt = ctx.range_start_ms, ctx.range_end_ms
        out: list[tuple[Labels, float]] = []
        append = out.append
        held = lo = hi = 0
        shared: Any = None  # the timestamps array lo and hi were found in (series collected together share one)
        for series, name in zip(selected, labels, strict=True):
            timestamps, values = series.tail(mint)  # uncompressed arrays from at or before mint to the newest
            if timestamps is not shared:  # the same live array is the same points: the same bounds
                lo = bisect_left(timestamps, mint)
                hi = bisect_right(timestamps, maxt, lo)
                shared = timestamps
            held += hi - lo
            if hi - lo < 2:
                continue
            events = self._scanned(series, timestamps, values)
            stale = events.stale_t
            first, last = lo, hi - 1
            count = hi - lo
            if stale:
                count -= bisect_right(stale, timestamps[last]) - bisect_left(stale, timestamps[first])
                if count < 2:
                    continue
                while values[first] != values[first] and is_stale(values[first]):
                    first += 1
                while values[last] != values[last] and is_stale(values[last]):
                    last -= 1
            result = values[last] - values[first]
            reset_t = events.reset_t
            if counter and reset_t:
                reset_prev = events.reset_prev
                first_t = timestamps[first]
                for k in range(bisect_right(reset_t, first_t), bisect_right(reset_t, timestamps[last])):
                    result += reset_prev[k]
            if result != 0.0:
                result = extrapolate(result, count, timestamps[first], timestamps[last], values[first], ctx,
                                     counter, is_rate)
            append((name, result))
        return out, held

    def _events_of(self, series: Any) -> _SeriesEvents:
        """A new index entry for ``series``; entries of series gone from the store are dropped once as
        many entries were created since the last sweep as half of those held (plus 1000)."""
        events = self._events[id(series)] = _SeriesEvents(series)
        self._created += 1
        if self._created >= len(self._events) // 2 + 1000:
            self._created = 0
            self._events = {k: e for k, e in self._events.items() if e.ref() is not None}
        return events


def _read_names(expr: n.Expr) -> frozenset[str] | None:
    """Metric names ``expr`` reads; None when some selector has no fixed name."""
    names: set[str] = set()
    for node in n.walk(expr):
        if isinstance(node, n.VectorSelector):
            fixed = [value for label, op, value in node.matchers if label == METRIC_NAME and op == "="]
            if not fixed:
                return None
            names.add(fixed[0])
    return frozenset(names)


class SharedPlan:
    """Which sub-expressions of a set of rule queries occur more than once (computed once per rule set)."""

    def __init__(self, exprs: Iterable[n.Expr]) -> None:
        roots = list(exprs)
        counts: dict[n.Expr, int] = {}
        for root in roots:
            for node in n.walk(root):
                if node is not root and isinstance(node, (n.Call, n.Aggregate, n.Binary)):
                    counts[node] = counts.get(node, 0) + 1
        canonical: dict[n.Expr, int] = {}
        self.key_of: dict[int, int] = {}  # id(node) -> shared key
        self.reads: dict[int, frozenset[str] | None] = {}
        self._nodes: list[n.Expr] = []  # keeps every keyed node alive (ids stay unique)
        self._groupings: dict[int, tuple[n.Aggregate, Groupings]] = {}  # id(node) -> (node, its groupings)
        for root in roots:
            for node in n.walk(root):
                if counts.get(node, 0) < 2 or node is root or node.type == n.MATRIX:
                    continue
                key = canonical.get(node)
                if key is None:
                    key = canonical[node] = len(canonical)
                    self.reads[key] = _read_names(node)
                self.key_of[id(node)] = key
                self._nodes.append(node)


    def groupings(self, node: n.Aggregate) -> Groupings:
        """The :class:`~watchdog.promql.aggregations.Groupings` of aggregation ``node``, kept from pass to
        pass (at most :data:`GROUPINGS_CAP` nodes: beyond that the table starts again)."""
        found = self._groupings.get(id(node))
        if found is None or found[0] is not node:
            if len(self._groupings) >= GROUPINGS_CAP:
                self._groupings.clear()
            found = self._groupings[id(node)] = (node, Groupings())
        return found[1]


GROUPINGS_CAP = 10_000
"""Aggregation nodes whose groups a :class:`SharedPlan` keeps (a rule set has a few hundred)."""


class Selections:
    """Selector matches against a stable series set: kept from pass to pass while the store's
    ``generation`` (bumped whenever a series is created or removed) is where the last pass left it."""

    def __init__(self) -> None:
        self._found: dict[tuple[Any, ...], list[Any]] = {}
        # matchers -> (the selection, its series' label sets without the name), while that selection holds
        self._unnamed: dict[tuple[Any, ...], tuple[list[Any], list[Labels]]] = {}
        self._by_name: dict[str | None, list[tuple[Any, ...]]] = {}
        self._generation: int | None = None

    def begin(self, store: Any) -> None:
        """Start a pass: forget everything if the store's series set changed since the last pass."""
        generation = getattr(store, "generation", None)
        if generation is None or generation != self._generation:
            self._found.clear()
            self._by_name.clear()
            self._unnamed.clear()

    def end(self, store: Any) -> None:
        """End a pass: what is held matches the store as it is now."""
        self._generation = getattr(store, "generation", None)

    def select(self, store: Any, matchers: tuple[Any, ...]) -> list[Any]:
        """The series ``matchers`` select (live series objects)."""
        found = self._found.get(matchers)
        if found is None:
            found = self._found[matchers] = list(store.select(matchers))
            fixed = [value for label, op, value in matchers if label == METRIC_NAME and op == "="]
            self._by_name.setdefault(fixed[0] if fixed else None, []).append(matchers)
        return found

    def select_unnamed(self, store: Any, matchers: tuple[Any, ...]) -> tuple[list[Any], list[Labels]]:
        """:meth:`select`, and each selected series' label set without ``__name__`` (what range functions
        label their outputs with), worked out once per selection instead of at every evaluation."""
        found = self.select(store, matchers)
        held = self._unnamed.get(matchers)
        if held is None or held[0] is not found:
            held = self._unnamed[matchers] = (found, [drop_name(series.labels) for series in found])
        return held

    def wrote(self, name: str) -> None:
        """Series named ``name`` may have been created: forget the selections that could match them."""
        for key in (name, None):
            for matchers in self._by_name.pop(key, ()):
                self._found.pop(matchers, None)


class EvalCache:
    """Selections, window indexes and shared sub-expression results of one rule-engine pass (see the
    module docstring)."""

    def __init__(self, plan: SharedPlan | None, counters: CounterIndex | None,
                 selections: Selections | None = None) -> None:
        self.plan = plan
        self.counters = counters
        self.selections = selections or Selections()
        self.results: dict[tuple[int, int], tuple[Any, int]] = {}  # (key, t) -> (result, samples held)
        self._reading: dict[str | None, list[tuple[int, int]]] = {}
        self._derived: dict[tuple[int, Any], tuple[Any, Any]] = {}  # (id(value), fn) -> (value, fn(value))

    def derived(self, value: Any, fn: Any) -> Any:
        """``fn(value)``, computed once per pass for the same ``value`` object (results handed out in a
        pass are never changed, so a shared sub-expression's result, such as the bucket rates the
        p50, p90 and p99 of one histogram read, gives the same ``fn(value)`` every time)."""
        key = (id(value), fn)
        found = self._derived.get(key)
        if found is not None and found[0] is value:
            return found[1]
        result = fn(value)
        self._derived[key] = (value, result)  # holding ``value`` keeps its id from being reused
        return result

    def remember(self, key: tuple[int, int], result: Any, peak: int) -> None:
        """Keep a shared sub-expression's result (and the samples its evaluation held at its peak)."""
        self.results[key] = (result, peak)
        reads = self.plan.reads[key[0]] if self.plan is not None else None
        for name in reads if reads is not None else (None,):
            self._reading.setdefault(name, []).append(key)

    def wrote(self, name: str, series_changed: bool = True) -> None:
        """A rule wrote series named ``name``: forget what read it. With ``series_changed`` False (the
        store's ``generation`` did not move: no series was created or removed) the selector matches
        still hold and are kept; the shared results that read ``name`` are dropped either way."""
        if series_changed:
            self.selections.wrote(name)
        for reader in (name, None):
            for key in self._reading.pop(reader, ()):
                self.results.pop(key, None)
