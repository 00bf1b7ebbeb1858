"""Aggregation operators (``sum``, ``avg``, ..., ``topk``, ``count_values``), as Prometheus 2.42.

Groups are output in order of first appearance. Floating-point steps follow Prometheus exactly
(incremental mean for ``avg``, Welford for ``stddev``/``stdvar``, plain summation for ``sum``), so
results agree bit for bit. ``topk``/``bottomk`` reproduce Go's heap, so ties come out in the same order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from watchdog.golang import gomath
from watchdog.golang.gostrconv import format_float
from watchdog.model import METRIC_NAME, Labels
from watchdog.promql.errors import evaluation_error
from watchdog.promql.labels import LABEL_NAME_RE, MEMO_SIZE, with_label

InstantVector = list[tuple[Labels, float]]
Sample = tuple[Labels, float]


@dataclass
class _Group:
    labels: Labels
    value: float
    mean: float
    count: int = 1
    heap: list[Sample] = field(default_factory=list)


def _group_key_function(grouping: tuple[str, ...], without: bool) -> Callable[[Labels], object]:
    if without:  # the group's labels themselves, memoised (the same series are aggregated every evaluation)
        return lambda labels: _group_labels(labels, grouping, True)
    if not grouping:
        return lambda labels: ()
    return functools.partial(_by_key, grouping)


@functools.lru_cache(maxsize=MEMO_SIZE)
def _by_key(names: tuple[str, ...], labels: Labels) -> object:
    lookup = dict(labels)
    return tuple(lookup.get(name, "") for name in names)


@functools.lru_cache(maxsize=MEMO_SIZE)
def _group_labels(labels: Labels, grouping: tuple[str, ...], without: bool) -> Labels:
    if without:
        excluded = frozenset(grouping) | {METRIC_NAME}
        return tuple(pair for pair in labels if pair[0] not in excluded)
    if not grouping:
        return ()
    wanted = frozenset(grouping)
    return tuple(pair for pair in labels if pair[0] in wanted)


# --- Go container/heap over samples, with Prometheus' "NaN is smallest" orderings -------------

def _less_value(a: Sample, b: Sample) -> bool:
    """vectorByValueHeap.Less: NaN sorts first, then ascending."""
    return math.isnan(a[1]) or a[1] < b[1]


def _less_reverse(a: Sample, b: Sample) -> bool:
    """vectorByReverseValueHeap.Less: NaN sorts first, then descending."""
    return math.isnan(a[1]) or a[1] > b[1]


def _heap_up(heap: list[Sample], j: int, less: Callable[[Sample, Sample], bool]) -> None:
    while True:
        i = (j - 1) // 2 if j > 0 else 0
        if i == j or not less(heap[j], heap[i]):
            break
        heap[i], heap[j] = heap[j], heap[i]
        j = i


def _heap_down(heap: list[Sample], i: int, size: int, less: Callable[[Sample, Sample], bool]) -> None:
    while True:
        j1 = 2 * i + 1
        if j1 >= size:
            break
        j = j1
        j2 = j1 + 1
        if j2 < size and less(heap[j2], heap[j1]):
            j = j2
        if not less(heap[j], heap[i]):
            break
        heap[i], heap[j] = heap[j], heap[i]
        i = j


def _heap_push(heap: list[Sample], item: Sample, less: Callable[[Sample, Sample], bool]) -> None:
    heap.append(item)
    _heap_up(heap, len(heap) - 1, less)


def _heap_pop(heap: list[Sample], less: Callable[[Sample, Sample], bool]) -> None:
    last = len(heap) - 1
    heap[0], heap[last] = heap[last], heap[0]
    _heap_down(heap, 0, last, less)
    heap.pop()


def quantile(q: float, values: list[float]) -> float:
    """Prometheus' ``quantile``: linear interpolation between closest ranks; NaN sorts first."""
    if not values or math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(values, key=lambda v: (0, 0.0) if math.isnan(v) else (1, v))
    count = float(len(ordered))
    rank = q * (count - 1)
    lower = max(0.0, math.floor(rank))
    upper = min(count - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[int(lower)] * (1 - weight) + ordered[int(upper)] * weight


def _topk_k(param: float) -> int:
    if not (param <= 9.223372036854775807e18 and param >= -9.223372036854775808e18):
        raise evaluation_error(f"Scalar value {format_float(param)} overflows int64")
    return int(param)


class Groupings:
    """``sum``, ``max``, ``min``, ``count`` and ``group`` (:data:`SIMPLE_OPS`): the general loop's arithmetic,
    in the same order, without its per-sample dispatch and per-group records; and one aggregation node's
    groups, kept from its last evaluation: the label sets of its input, in order, the group each one fell
    in and each group's labels. While a rule's input holds the same label sets in the same order (a stable
    series set: most evaluations), :meth:`aggregate` reuses them instead of computing and hashing every
    sample's group key (a sum starts from ``-0.0``, which adds to any first value without changing a bit
    of it). Replaced whole (one tuple), so a reader never sees half of an update. :func:`aggregate` uses a
    fresh one per call."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[list[Labels], list[int], list[Labels], list[int]] | None = None

    def aggregate(self, op: str, vector: InstantVector, grouping: tuple[str, ...], without: bool) -> InstantVector:
        """``op`` (one of :data:`SIMPLE_OPS`) over ``vector``, as :func:`aggregate` gives it."""
        keys = [labels for labels, _ in vector]
        last = self._last
        if last is None or last[0] != keys:
            last = self._last = _groups_of(keys, grouping, without)
        _, slots, labels, counts = last
        if op == "count":
            return [(group, float(count)) for group, count in zip(labels, counts, strict=True)]
        if op == "group":
            return [(group, 1.0) for group in labels]
        if op == "sum":
            sums = [-0.0] * len(labels)
            for slot, (_, value) in zip(slots, vector, strict=True):
                sums[slot] += value
            return list(zip(labels, sums, strict=True))
        best: list[float | None] = [None] * len(labels)
        largest = op == "max"
        for slot, (_, value) in zip(slots, vector, strict=True):
            held = best[slot]
            if held is None:
                best[slot] = value
            elif largest:
                if held < value or held != held:
                    best[slot] = value
            elif held > value or held != held:
                best[slot] = value
        return list(zip(labels, best, strict=True))  # type: ignore[arg-type]  # every group has a sample


def _groups_of(keys: list[Labels], grouping: tuple[str, ...],
               without: bool) -> tuple[list[Labels], list[int], list[Labels], list[int]]:
    """(``keys``, the group index of each, each group's labels, each group's size), groups in order of
    first appearance."""
    key_of = _group_key_function(grouping, without)
    index: dict[object, int] = {}
    slots: list[int] = []
    firsts: list[Labels] = []
    counts: list[int] = []
    for labels in keys:
        key = key_of(labels)
        slot = index.get(key)
        if slot is None:
            slot = index[key] = len(firsts)
            firsts.append(labels)
            counts.append(0)
        counts[slot] += 1
        slots.append(slot)
    return keys, slots, [_group_labels(first, grouping, without) for first in firsts], counts


SIMPLE_OPS = frozenset({"sum", "max", "min", "count", "group"})
"""Aggregations without a parameter or per-group state beyond one number (see :class:`Groupings`)."""


def aggregate(
    op: str,
    vector: InstantVector,
    grouping: tuple[str, ...],
    without: bool,
    param: float | str | None,
) -> InstantVector:
    """Apply aggregation ``op`` to ``vector`` grouped ``by``/``without`` the (sorted) ``grouping``."""
    if op in SIMPLE_OPS:
        return Groupings().aggregate(op, vector, grouping, without)
    return general_aggregate(op, vector, grouping, without, param)


def general_aggregate(
    op: str,
    vector: InstantVector,
    grouping: tuple[str, ...],
    without: bool,
    param: float | str | None,
) -> InstantVector:
    """:func:`aggregate` through one loop for every ``op`` (the reference the simple ones are checked
    against)."""
    k = 0
    if op in ("topk", "bottomk"):
        assert isinstance(param, float)
        k = _topk_k(param)
        if k < 1:
            return []
    value_label = ""
    if op == "count_values":
        assert isinstance(param, str)
        value_label = param
        if not LABEL_NAME_RE.match(value_label):
            raise evaluation_error(f'invalid label name "{value_label}"')
        if not without:
            grouping = tuple(sorted((*grouping, value_label)))
    key_of = _group_key_function(grouping, without)
    groups: dict[object, _Group] = {}
    ordered: list[_Group] = []
    less = _less_reverse if op == "bottomk" else _less_value

    for labels, value in vector:
        if op == "count_values":
            labels = with_label(labels, value_label, format_float(value, "f"))
        key = key_of(labels)
        group = groups.get(key)
        if group is None:
            group = _Group(_group_labels(labels, grouping, without), value, value)
            if op in ("stddev", "stdvar"):
                group.value = 0.0
            elif op in ("topk", "bottomk", "quantile"):
                group.heap = [(labels, value)]
            elif op == "group":
                group.value = 1.0
            groups[key] = group
            ordered.append(group)
            continue
        if op == "sum":
            group.value += value
        elif op == "avg":
            group.count += 1
            mean = group.mean
            if math.isinf(mean):
                if math.isinf(value) and (mean > 0) == (value > 0):
                    continue
                if not math.isinf(value) and not math.isnan(value):
                    continue
            group.mean = mean + (value / group.count - mean / group.count)
        elif op == "max":
            if group.value < value or math.isnan(group.value):
                group.value = value
        elif op == "min":
            if group.value > value or math.isnan(group.value):
                group.value = value
        elif op in ("count", "count_values"):
            group.count += 1
        elif op in ("stddev", "stdvar"):
            group.count += 1
            delta = value - group.mean
            group.mean += delta / group.count
            group.value += delta * (value - group.mean)
        elif op in ("topk", "bottomk"):
            heap = group.heap
            top = heap[0][1]
            better = top < value if op == "topk" else top > value
            if len(heap) < k or better or math.isnan(top):
                if len(heap) == k:
                    if k == 1:
                        heap[0] = (labels, value)
                        continue
                    _heap_pop(heap, less)
                _heap_push(heap, (labels, value), less)
        elif op == "quantile":
            group.heap.append((labels, value))
        # "group" needs nothing per extra sample.

    out: InstantVector = []
    for group in ordered:
        if op in ("topk", "bottomk"):
            heap = group.heap
            if len(heap) > 1:
                gomath.go_sort(heap, lambda a, b: less(b, a))
            out.extend(heap)
            continue
        if op == "avg":
            result = group.mean
        elif op in ("count", "count_values"):
            result = float(group.count)
        elif op == "stdvar":
            result = group.value / group.count
        elif op == "stddev":
            result = gomath.sqrt(group.value / group.count)
        elif op == "quantile":
            assert isinstance(param, float)
            result = quantile(param, [v for _, v in group.heap])
        else:
            result = group.value
        out.append((group.labels, result))
    return out
