"""Fast paths of the evaluator give what the general code gives.

Results the evaluator returns without a duplicate-label-set check are distinct by construction.

The evaluator skips Prometheus' "vector cannot contain metrics with the same labelset" check where it
cannot fire: set operations (``and``/``unless`` keep a subset of the left side, ``or`` adds only right
samples whose match group the left lacks) and filtering comparisons with a scalar (a subset of the
operand, labels untouched), given distinct operands. Random vectors over a small label alphabet (so
match groups collide often, ``__name__`` included) check that claim: a duplicate here means the check
must come back. The simple aggregations' own loop is compared with the general one, bit for bit, and
quantiles over shared histogram buckets with ``bucketQuantile`` in one piece.
"""

from __future__ import annotations

import math
import random
import struct

import pytest

from watchdog.golang import gomath
from watchdog.model import Labels, make_labels
from watchdog.promql import aggregations, binary, functions
from watchdog.promql import nodes as n
from watchdog.promql.labels import find_duplicate

NAMES = ("__name__", "a", "b", "c")


def _vector(rng: random.Random) -> list[tuple[Labels, float]]:
    """Up to 12 distinct label sets over NAMES, each value drawn from two or three choices."""
    seen: dict[Labels, float] = {}
    for _ in range(rng.randrange(13)):
        labels = make_labels({name: rng.choice(["", "x", "y"] if name != "__name__" else ["m", "n"])
                              for name in NAMES if rng.random() < 0.8})
        seen[labels] = rng.choice([0.0, 1.0, 2.0, float("nan")])
    return list(seen.items())


def _matching(rng: random.Random) -> n.VectorMatching:
    labels = tuple(sorted(rng.sample(NAMES[1:], rng.randrange(4))))
    return n.VectorMatching(n.CARD_MANY_TO_MANY, rng.random() < 0.5, labels, ())


@pytest.mark.parametrize("seed", range(4))
def test_set_operations_of_distinct_vectors_are_distinct(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        lhs, rhs, matching = _vector(rng), _vector(rng), _matching(rng)
        for op in ("and", "or", "unless"):
            result = binary.set_operation(op, lhs, rhs, matching)
            assert find_duplicate(labels for labels, _ in result) is None, (op, lhs, rhs, matching)


@pytest.mark.parametrize("seed", range(4))
def test_filtering_comparisons_of_a_distinct_vector_are_distinct_subsets(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        vector = _vector(rng)
        for op in sorted(n.COMPARISON_OPS):
            for scalar_on_left in (False, True):
                result = binary.vector_scalar_binop(op, vector, 1.0, scalar_on_left, False)
                assert find_duplicate(labels for labels, _ in result) is None
                assert set(result) <= set(vector)


def _bits(vector: list[tuple[Labels, float]]) -> list[tuple[Labels, bytes]]:
    return [(labels, struct.pack("<d", value)) for labels, value in vector]


@pytest.mark.parametrize("seed", range(3))
def test_simple_aggregations_match_the_general_loop_bit_for_bit(seed: int) -> None:
    """``sum``/``max``/``min``/``count``/``group`` take a loop of their own: same groups, same order, same
    bits (NaN, infinities and signed zeros included) as the loop every aggregation can take."""
    rng = random.Random(seed)
    values = [0.0, -0.0, 1.5, -2.25, 1e308, float("inf"), float("-inf"), float("nan"), 3.0]
    for _ in range(400):
        vector = [(labels, rng.choice(values)) for labels, _ in _vector(rng)]
        grouping = tuple(sorted(rng.sample(NAMES[1:], rng.randrange(4))))
        without = rng.random() < 0.5
        for op in sorted(aggregations.SIMPLE_OPS):
            assert _bits(aggregations.aggregate(op, vector, grouping, without, None)) == _bits(
                aggregations.general_aggregate(op, vector, grouping, without, None)), (op, vector, grouping)


@pytest.mark.parametrize("seed", range(3))
def test_groupings_kept_between_evaluations_match_the_general_loop_bit_for_bit(seed: int) -> None:
    """One node's :class:`Groupings` over a sequence of evaluations: the same label sets with new values
    (groups reused), the same label sets in another order, one fewer, new ones (groups computed again);
    each result is the general loop's, bit for bit."""
    rng = random.Random(seed)
    values = [0.0, -0.0, 1.5, -2.25, 1e308, float("inf"), float("-inf"), float("nan"), 3.0]
    for _ in range(100):
        grouping = tuple(sorted(rng.sample(NAMES[1:], rng.randrange(4))))
        without = rng.random() < 0.5
        memos = {op: aggregations.Groupings() for op in aggregations.SIMPLE_OPS}
        keys = [labels for labels, _ in _vector(rng)]
        for step in range(8):
            if step in (3, 6):
                keys = keys[::-1] if step == 3 else keys[1:] + [labels for labels, _ in _vector(rng)][:2]
                keys = list(dict.fromkeys(keys))
            vector = [(labels, rng.choice(values)) for labels in keys]
            for op, memo in sorted(memos.items()):
                assert _bits(memo.aggregate(op, vector, grouping, without)) == _bits(
                    aggregations.general_aggregate(op, vector, grouping, without, None)), (op, vector, grouping)


def _regression_in_one_loop(ts: list[int], vs: list[float], intercept_ms: int) -> tuple[float, float]:
    """Prometheus 2.42's ``linearRegression`` (Kahan sums) as one loop over the points."""

    def kahan(total: float, c: float, x: float) -> tuple[float, float]:
        s = total + x
        c += (total - s) + x if abs(total) >= abs(x) else (x - s) + total
        return s, c

    sum_x = c_x = sum_y = c_y = sum_xy = c_xy = sum_x2 = c_x2 = 0.0
    const_y = True
    for i, (t, v) in enumerate(zip(ts, vs, strict=True)):
        if const_y and i > 0 and v != vs[0]:
            const_y = False
        x = (t - intercept_ms) / 1e3
        sum_x, c_x = kahan(sum_x, c_x, x)
        sum_y, c_y = kahan(sum_y, c_y, v)
        sum_xy, c_xy = kahan(sum_xy, c_xy, x * v)
        sum_x2, c_x2 = kahan(sum_x2, c_x2, x * x)
    if const_y:
        return (math.nan, math.nan) if math.isinf(vs[0]) else (0.0, vs[0])
    n = float(len(ts))
    sum_x, sum_y, sum_xy, sum_x2 = sum_x + c_x, sum_y + c_y, sum_xy + c_xy, sum_x2 + c_x2
    slope = gomath.div(sum_xy - sum_x * sum_y / n, sum_x2 - sum_x * sum_x / n)
    return slope, sum_y / n - slope * sum_x / n


def test_regressions_sharing_timestamps_match_one_loop_bit_for_bit() -> None:
    """``deriv``/``predict_linear``'s regression takes its x sums from a memo keyed by the window's
    timestamps: several series over the same timestamps, and windows with the same first and last
    timestamp, length and intercept but other points between, all give the one-loop result's bits."""
    rng = random.Random(5)
    pool = [0.0, -0.0, 1.5, 1e16, -3.25, math.inf, math.nan, 7.0]
    checked = 0
    for _ in range(300):
        start = rng.randrange(0, 10**13)
        ts = sorted({start + rng.randrange(0, 600_000) for _ in range(rng.randrange(2, 70))} | {start})
        if len(ts) < 3:
            continue
        moved = [ts[0], *sorted({t + rng.choice([-1, 1]) for t in ts[1:-1]} - {ts[0], ts[-1]}), ts[-1]]
        for window in (ts, moved, ts):
            intercept = window[0] if rng.random() < 0.5 else window[-1] + rng.randrange(10_000)
            for _ in range(3):  # series sharing the window's timestamps
                vs = ([rng.choice(pool)] * len(window) if rng.random() < 0.2 else
                      [rng.choice(pool) if rng.random() < 0.2 else rng.uniform(-1e6, 1e6) for _ in window])
                got = functions._linear_regression(window, vs, intercept)
                want = _regression_in_one_loop(window, vs, intercept)
                assert [struct.pack("<d", v) for v in got] == [struct.pack("<d", v) for v in want], (window, vs)
                checked += 1
    assert checked > 2000


def _bucket_quantile_in_one(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus 2.42's ``bucketQuantile`` as one function (the evaluator splits it around ``q``)."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets, key=lambda b: b[0])
    if not (math.isinf(ordered[-1][0]) and ordered[-1][0] > 0):
        return math.nan
    merged: list[list[float]] = []
    for upper, count in ordered:
        if merged and merged[-1][0] == upper:
            merged[-1][1] += count
        else:
            merged.append([upper, count])
    highest = -math.inf
    for bucket in merged:
        if bucket[1] > highest:
            highest = bucket[1]
        elif bucket[1] < highest:
            bucket[1] = highest
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    low, high = 0, len(merged) - 1
    while low < high:
        middle = (low + high) // 2
        if merged[middle][1] >= rank:
            high = middle
        else:
            low = middle + 1
    if low == len(merged) - 1:
        return merged[-2][0]
    if low == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[low][0], merged[low][1]
    if low > 0:
        start = merged[low - 1][0]
        count -= merged[low - 1][1]
        rank -= merged[low - 1][1]
    return start + (end - start) * gomath.div(rank, count)


def _histograms(rng: random.Random) -> list[tuple[Labels, float]]:
    """Bucket series of a few histograms: random bounds (repeated, unparsable, +Inf or not), random
    counts (NaN and zero included)."""
    vector: dict[Labels, float] = {}
    for histogram in range(rng.randrange(1, 4)):
        for _ in range(rng.randrange(1, 7)):
            le = rng.choice(["0", "-1", "0.5", "1", "1.0", "2.5", "+Inf", "Inf", "bad", "1e1"])
            vector[make_labels({"__name__": "h_bucket", "h": str(histogram), "le": le,
                                "x": rng.choice(["", "a"])})] = rng.choice(
                [0.0, 1.0, 2.0, 5.0, 7.5, 10.0, float("nan")])
    return list(vector.items())


@pytest.mark.parametrize("seed", range(3))
def test_histogram_quantiles_sharing_their_buckets_match_one_pass_bucket_quantile(seed: int) -> None:
    """p50, p90 and p99 of the same bucket vector share :func:`histogram_buckets` (over a sequence of
    vectors: the same label sets with new counts half of the time); each must be what ``bucketQuantile``
    in one piece gives, whatever order the quantiles are asked in."""
    rng = random.Random(seed)
    vector = _histograms(rng)
    for _ in range(300):
        if rng.random() < 0.5:
            vector = _histograms(rng)
        else:
            vector = [(labels, rng.choice([0.0, 1.0, 3.0, 8.0, float("nan")])) for labels, _ in vector]
        shared = functions.histogram_buckets(vector)
        for q in rng.sample([0.5, 0.9, 0.99, 0.0, 1.0, -0.5, 1.5, float("nan"), 0.25], 9):
            got = functions.histogram_quantile(q, vector, shared)
            groups: dict[Labels, list[tuple[float, float]]] = {}
            for labels, value in vector:
                le = dict(labels)["le"]
                try:
                    upper = float(le)
                except ValueError:
                    continue
                key = tuple(pair for pair in labels if pair[0] not in ("le", "__name__"))
                groups.setdefault(key, []).append((upper, value))
            want = [(key, _bucket_quantile_in_one(q, buckets)) for key, buckets in groups.items()]
            assert _bits(got) == _bits(want), (q, vector)
