"""PromQL functions, following Prometheus 2.42's ``promql/functions.go`` step for step.

Two kinds:
- range functions take one series' points in the selected window (``timestamps``, ``values``, oldest
  first, stale markers already dropped, at least one point) and return one value or None (no output);
- instant functions take evaluated arguments (vectors as ``[(labels, value)]``, scalars as floats,
  strings as str) and return a vector or a scalar.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from watchdog.golang import gomath, gotrig
from watchdog.golang.goregexp import RegexError, compile_anchored, expand
from watchdog.golang.gostrconv import parse_float
from watchdog.model import Labels
from watchdog.promql.aggregations import quantile
from watchdog.promql.errors import evaluation_error
from watchdog.promql.labels import LABEL_NAME_RE, MEMO_SIZE, drop_name, with_label

InstantVector = list[tuple[Labels, float]]


@dataclass(frozen=True)
class RangeContext:
    """What a range function may need besides the points."""

    range_start_ms: int
    """``ref - range``: the left edge of the selected window (for extrapolation)."""
    range_end_ms: int
    """``ref``: the right edge of the selected window."""
    range_ms: int
    eval_ms: int
    """The evaluation time (``predict_linear`` regresses to it, offset or not)."""
    scalars: tuple[float, ...]
    """The function's scalar arguments, in order."""


RangeFunction = Callable[[Sequence[int], Sequence[float], RangeContext], "float | None"]


def _kahan_inc(inc: float, total: float, comp: float) -> tuple[float, float]:
    """One Kahan-Neumaier summation step."""
    t = total + inc
    if abs(total) >= abs(inc):
        comp += (total - t) + inc
    else:
        comp += (inc - t) + total
    return t, comp


# --- rate, increase, delta, irate, idelta ------------------------------------------------------

def _extrapolated_rate(
    ts: Sequence[int], vs: Sequence[float], ctx: RangeContext, is_counter: bool, is_rate: bool
) -> float | None:
    """Prometheus' ``extrapolatedRate``: counter resets, extrapolation to the window edges."""
    count = len(ts)
    if count < 2:
        return None
    result = vs[-1] - vs[0]
    if is_counter and not _non_decreasing(vs):
        previous = vs[0]
        for value in vs[1:]:
            if value < previous:
                result += previous
            previous = value
    return extrapolate(result, count, ts[0], ts[-1], vs[0], ctx, is_counter, is_rate)


def extrapolate(result: float, count: int, first_t: int, last_t: int, first_value: float, ctx: RangeContext,
                is_counter: bool, is_rate: bool) -> float:
    """The rest of ``extrapolatedRate`` once the raw increase (``result``) over ``count`` >= 2 points
    from ``first_t`` to ``last_t`` is known."""
    duration_to_start = (first_t - ctx.range_start_ms) / 1000
    duration_to_end = (ctx.range_end_ms - last_t) / 1000
    sampled_interval = (last_t - first_t) / 1000
    average_interval = sampled_interval / (count - 1)
    if is_counter and result > 0 and first_value >= 0:
        duration_to_zero = sampled_interval * (first_value / result)  # result > 0: Go's division too
        if duration_to_zero < duration_to_start:
            duration_to_start = duration_to_zero
    threshold = average_interval * 1.1
    extrapolate_to = sampled_interval
    extrapolate_to += duration_to_start if duration_to_start < threshold else average_interval / 2
    extrapolate_to += duration_to_end if duration_to_end < threshold else average_interval / 2
    factor = extrapolate_to / sampled_interval if sampled_interval else gomath.div(extrapolate_to, sampled_interval)
    if is_rate:
        factor /= ctx.range_ms / 1000
    return result * factor


def _non_decreasing(vs: Sequence[float]) -> bool:
    """True when no value is below its predecessor (C-speed: an already sorted list sorts in one
    pass; without NaN, ``sorted(x) == x`` is exactly "non-decreasing"). False means "check"."""
    values = list(vs)
    total = sum(values)
    return total == total and values == sorted(values)


def _rate(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return _extrapolated_rate(ts, vs, ctx, True, True)


def _increase(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return _extrapolated_rate(ts, vs, ctx, True, False)


def _delta(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return _extrapolated_rate(ts, vs, ctx, False, False)


def _instant_value(ts: Sequence[int], vs: Sequence[float], is_rate: bool) -> float | None:
    if len(ts) < 2:
        return None
    last, previous = vs[-1], vs[-2]
    result = last if is_rate and last < previous else last - previous
    interval = ts[-1] - ts[-2]
    if interval == 0:
        return None
    if is_rate:
        result /= interval / 1000
    return result


def _irate(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return _instant_value(ts, vs, True)


def _idelta(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return _instant_value(ts, vs, False)


# --- regression ---------------------------------------------------------------------------------

XSums = tuple[list[float], float, float, float, float]
"""A regression's x side: each point's ``x`` (seconds from the intercept), then ``sum_x`` and its Kahan
compensation, ``sum_x2`` and its compensation, accumulated in point order."""

_X_SUMS: dict[tuple[int, int, int, int], tuple[tuple[int, ...], XSums]] = {}
_X_SUMS_CAP = 256


def _x_sums(ts: Sequence[int], intercept_ms: int) -> XSums:
    """The x side of a regression over ``ts`` (it depends on the timestamps alone). The series one rule
    wrote, or one collector collected, share their timestamps: the same sums are looked up, checked
    equal point by point, and reused."""
    key = (intercept_ms, len(ts), ts[0], ts[-1])
    found = _X_SUMS.get(key)
    if found is not None and found[0] == tuple(ts):
        return found[1]
    xs: list[float] = []
    sum_x = c_x = sum_x2 = c_x2 = 0.0
    for t in ts:
        x = (t - intercept_ms) / 1e3
        xs.append(x)
        s = sum_x + x
        c_x += (sum_x - s) + x if abs(sum_x) >= abs(x) else (x - s) + sum_x
        sum_x = s
        x2 = x * x
        s = sum_x2 + x2
        c_x2 += (sum_x2 - s) + x2 if abs(sum_x2) >= abs(x2) else (x2 - s) + sum_x2
        sum_x2 = s
    sums = (xs, sum_x, c_x, sum_x2, c_x2)
    if len(_X_SUMS) >= _X_SUMS_CAP:
        _X_SUMS.clear()
    _X_SUMS[key] = (tuple(ts), sums)
    return sums


def _linear_regression(ts: Sequence[int], vs: Sequence[float], intercept_ms: int) -> tuple[float, float]:
    """Least-squares slope (per second) and intercept at ``intercept_ms`` (Kahan sums, as Prometheus;
    :func:`_kahan_inc` written out in the loops, the same operations in the same order for each sum: the
    x sums, which depend on the timestamps alone, come from :func:`_x_sums`)."""
    count = float(len(ts))
    xs, sum_x, c_x, sum_x2, c_x2 = _x_sums(ts, intercept_ms)
    sum_y = c_y = sum_xy = c_xy = 0.0
    init_y = vs[0]
    const_y = True
    for x, v in zip(xs, vs, strict=True):
        if const_y and v != init_y:
            const_y = False
        s = sum_y + v
        c_y += (sum_y - s) + v if abs(sum_y) >= abs(v) else (v - s) + sum_y
        sum_y = s
        xy = x * v
        s = sum_xy + xy
        c_xy += (sum_xy - s) + xy if abs(sum_xy) >= abs(xy) else (xy - s) + sum_xy
        sum_xy = s
    if const_y:
        if math.isinf(init_y):
            return math.nan, math.nan
        return 0.0, init_y
    sum_x += c_x
    sum_y += c_y
    sum_xy += c_xy
    sum_x2 += c_x2
    cov_xy = sum_xy - sum_x * sum_y / count
    var_x = sum_x2 - sum_x * sum_x / count
    slope = gomath.div(cov_xy, var_x)
    intercept = sum_y / count - slope * sum_x / count
    return slope, intercept


def _deriv(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    if len(ts) < 2:
        return None
    slope, _ = _linear_regression(ts, vs, ts[0])
    return slope


def _predict_linear(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    if len(ts) < 2:
        return None
    slope, intercept = _linear_regression(ts, vs, ctx.eval_ms)
    return slope * ctx.scalars[0] + intercept


def _holt_winters(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    smoothing, trend = ctx.scalars
    if smoothing <= 0 or smoothing >= 1:
        raise evaluation_error(
            f"invalid smoothing factor. Expected: 0 < sf < 1, got: {smoothing:f}"
        )
    if trend <= 0 or trend >= 1:
        raise evaluation_error(f"invalid trend factor. Expected: 0 < tf < 1, got: {trend:f}")
    if len(vs) < 2:
        return None
    s0 = 0.0
    s1 = vs[0]
    b = vs[1] - vs[0]
    for i in range(1, len(vs)):
        x = smoothing * vs[i]
        if i - 1 != 0:  # calcTrendValue(i-1, ...) returns b unchanged for index 0
            b = trend * (s1 - s0) + (1 - trend) * b
        y = (1 - smoothing) * (s1 + b)
        s0, s1 = s1, x + y
    return s1


# --- counting -----------------------------------------------------------------------------------

def _changes(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    changes = 0
    previous = vs[0]
    for current in vs[1:]:
        if current != previous and not (math.isnan(current) and math.isnan(previous)):
            changes += 1
        previous = current
    return float(changes)


def _resets(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    resets = 0
    previous = vs[0]
    for current in vs[1:]:
        if current < previous:
            resets += 1
        previous = current
    return float(resets)


# --- *_over_time ---------------------------------------------------------------------------------

def _avg_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    mean = comp = count = 0.0
    for value in vs:
        count += 1
        if math.isinf(mean):
            if math.isinf(value) and (mean > 0) == (value > 0):
                continue
            if not math.isinf(value) and not math.isnan(value):
                continue
        mean, comp = _kahan_inc(value / count - mean / count, mean, comp)
    if math.isinf(mean):
        return mean
    return mean + comp


def _sum_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    total = comp = 0.0
    for value in vs:
        total, comp = _kahan_inc(value, total, comp)
    if math.isinf(total):
        return total
    return total + comp


def _count_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return float(len(vs))


def _min_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    total = sum(vs)
    if total == total:  # no NaN: Go's fold is the builtin (both keep the first of equal values)
        return min(vs)
    result = vs[0]
    for value in vs:
        if value < result or math.isnan(result):
            result = value
    return result


def _max_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    total = sum(vs)
    if total == total:  # no NaN: Go's fold is the builtin (both keep the first of equal values)
        return max(vs)
    result = vs[0]
    for value in vs:
        if value > result or math.isnan(result):
            result = value
    return result


def _last_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return vs[-1]


def _present_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return 1.0


def _quantile_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return quantile(ctx.scalars[0], list(vs))


def _variance(vs: Sequence[float]) -> float:
    """Welford's variance with Kahan sums, as Prometheus (:func:`_kahan_inc` written out)."""
    count = mean = c_mean = aux = c_aux = 0.0
    for value in vs:
        count += 1
        delta = value - (mean + c_mean)
        inc = delta / count
        s = mean + inc
        c_mean += (mean - s) + inc if abs(mean) >= abs(inc) else (inc - s) + mean
        mean = s
        inc = delta * (value - (mean + c_mean))
        s = aux + inc
        c_aux += (aux - s) + inc if abs(aux) >= abs(inc) else (inc - s) + aux
        aux = s
    return (aux + c_aux) / count


def _stddev_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return gomath.sqrt(_variance(vs))


def _stdvar_over_time(ts: Sequence[int], vs: Sequence[float], ctx: RangeContext) -> float | None:
    return _variance(vs)


RANGE_FUNCTIONS: dict[str, RangeFunction] = {
    "rate": _rate,
    "increase": _increase,
    "delta": _delta,
    "irate": _irate,
    "idelta": _idelta,
    "deriv": _deriv,
    "predict_linear": _predict_linear,
    "holt_winters": _holt_winters,
    "changes": _changes,
    "resets": _resets,
    "avg_over_time": _avg_over_time,
    "sum_over_time": _sum_over_time,
    "count_over_time": _count_over_time,
    "min_over_time": _min_over_time,
    "max_over_time": _max_over_time,
    "last_over_time": _last_over_time,
    "present_over_time": _present_over_time,
    "quantile_over_time": _quantile_over_time,
    "stddev_over_time": _stddev_over_time,
    "stdvar_over_time": _stdvar_over_time,
    "absent_over_time": _present_over_time,  # the engine turns "any output" into absence
}


# --- instant functions ---------------------------------------------------------------------------

def _sgn(v: float) -> float:
    if v < 0:
        return -1.0
    if v > 0:
        return 1.0
    return v


MATH_FUNCTIONS: dict[str, Callable[[float], float]] = {
    "abs": abs,
    "ceil": gomath.ceil,
    "floor": gomath.floor,
    "exp": gomath.exp,
    "sqrt": gomath.sqrt,
    "ln": gomath.log,
    "log2": gomath.log2,
    "log10": gomath.log10,
    "sin": gotrig.sin,
    "cos": gotrig.cos,
    "tan": gotrig.tan,
    "asin": gotrig.asin,
    "acos": gotrig.acos,
    "atan": gotrig.atan,
    "sinh": gotrig.sinh,
    "cosh": gotrig.cosh,
    "tanh": gotrig.tanh,
    "asinh": gotrig.asinh,
    "acosh": gotrig.acosh,
    "atanh": gotrig.atanh,
    "rad": lambda v: v * math.pi / 180,
    "deg": lambda v: v * 180 / math.pi,
    "sgn": _sgn,
}


def apply_math(name: str, vector: InstantVector) -> InstantVector:
    """A per-element math function; drops ``__name__``."""
    fn = MATH_FUNCTIONS[name]
    return [(drop_name(labels), fn(value)) for labels, value in vector]


def clamp(vector: InstantVector, low: float, high: float) -> InstantVector:
    """``clamp``: nothing when ``high < low``."""
    if high < low:
        return []
    return [(drop_name(labels), _go_max(low, _go_min(high, value))) for labels, value in vector]


def _go_max(a: float, b: float) -> float:
    """Go ``math.Max``: +Inf wins, then NaN; +0 beats -0."""
    if a == math.inf or b == math.inf:
        return math.inf
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:
        return a if math.copysign(1, a) > 0 else b
    return a if a > b else b


def _go_min(a: float, b: float) -> float:
    """Go ``math.Min``: -Inf wins, then NaN; -0 beats +0."""
    if a == -math.inf or b == -math.inf:
        return -math.inf
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:
        return a if math.copysign(1, a) < 0 else b
    return a if a < b else b


def clamp_max(vector: InstantVector, high: float) -> InstantVector:
    """``clamp_max``: each value capped at ``high`` (Go ``math.Min``); drops ``__name__``."""
    return [(drop_name(labels), _go_min(high, value)) for labels, value in vector]


def clamp_min(vector: InstantVector, low: float) -> InstantVector:
    """``clamp_min``: each value raised to at least ``low`` (Go ``math.Max``); drops ``__name__``."""
    return [(drop_name(labels), _go_max(low, value)) for labels, value in vector]


def round_(vector: InstantVector, to_nearest: float = 1.0) -> InstantVector:
    """``round``: ties up, to a multiple of ``to_nearest``."""
    inverse = gomath.div(1.0, to_nearest)
    return [
        (drop_name(labels), gomath.div(gomath.floor(value * inverse + 0.5), inverse))
        for labels, value in vector
    ]


def sort_vector(vector: InstantVector, descending: bool) -> InstantVector:
    """``sort``/``sort_desc``: NaN last either way."""
    items = list(vector)
    if descending:
        # sort.Reverse(vectorByValueHeap): less(a, b) = vectorByValueHeap.Less(b, a)
        gomath.go_sort(items, lambda a, b: math.isnan(b[1]) or b[1] < a[1])
    else:
        gomath.go_sort(items, lambda a, b: math.isnan(b[1]) or b[1] > a[1])
    return items


def label_replace(
    vector: InstantVector, dst: str, replacement: str, src: str, regex: str
) -> InstantVector:
    """``label_replace``: on a full match of ``regex`` against ``src``, set ``dst`` to the expansion."""
    try:
        pattern = compile_anchored(regex)
    except RegexError:
        raise evaluation_error(f"invalid regular expression in label_replace(): {regex}") from None
    if not LABEL_NAME_RE.match(dst):
        raise evaluation_error(f"invalid destination label name in label_replace(): {dst}")
    out: InstantVector = []
    cache: dict[Labels, Labels] = {}
    for labels, value in vector:
        result = cache.get(labels)
        if result is None:
            source = dict(labels).get(src, "")
            match = pattern.match(source)
            result = labels if match is None else with_label(labels, dst, expand(replacement, match))
            cache[labels] = result
        out.append((result, value))
    return out


def label_join(vector: InstantVector, dst: str, separator: str, sources: Sequence[str]) -> InstantVector:
    """``label_join``: ``dst`` = the ``sources`` values joined by ``separator`` (removed when empty)."""
    for src in sources:
        if not LABEL_NAME_RE.match(src):
            raise evaluation_error(f"invalid source label name in label_join(): {src}")
    if not LABEL_NAME_RE.match(dst):
        raise evaluation_error(f"invalid destination label name in label_join(): {dst}")
    out: InstantVector = []
    for labels, value in vector:
        lookup = dict(labels)
        joined = separator.join(lookup.get(src, "") for src in sources)
        out.append((with_label(labels, dst, joined), value))
    return out


HistogramBuckets = list[tuple[Labels, "list[list[float]] | None"]]
"""Each histogram of a vector of ``le`` buckets (labels without ``le`` and the name, in order of first
appearance) with its buckets sorted, coalesced and made monotonic (None: no quantile can come of them)."""


def histogram_buckets(vector: InstantVector) -> HistogramBuckets:
    """What :func:`histogram_quantile` computes of ``vector`` before it looks at ``q`` (so the p50, p90
    and p99 of the same buckets can share it)."""
    keys = [labels for labels, _ in vector]
    return [(labels, _prepared_sorted(uppers, [vector[i][1] for i in positions]))
            for labels, uppers, positions in _bucket_layout(keys)]


BucketGroups = list[tuple[Labels, list[float], list[int]]]
"""Each histogram of a vector of ``le`` buckets: its labels (without ``le`` and the name), its buckets'
upper bounds sorted, and the positions in the vector of the buckets in that order."""


def _bucket_layout(keys: list[Labels]) -> BucketGroups:
    """What :func:`histogram_buckets` works out of the label sets alone: histograms in order of first
    appearance, buckets sorted by upper bound (stable, as Go's sort of the same slice is not: ties are
    coalesced, so their order only decides the order of a float sum, kept as the input's)."""
    groups: dict[Labels, tuple[Labels, list[tuple[float, int]]]] = {}
    for position, labels in enumerate(keys):
        key, upper = _split_le(labels)
        if upper is None:  # Prometheus skips a bucket whose le does not parse
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = (drop_name(key), [])
        group[1].append((upper, position))
    out: BucketGroups = []
    for labels, members in groups.values():
        members.sort(key=lambda member: member[0])
        out.append((labels, [upper for upper, _ in members], [position for _, position in members]))
    return out


def histogram_quantile(q: float, vector: InstantVector, buckets: HistogramBuckets | None = None) -> InstantVector:
    """Classic-histogram quantile over ``le`` buckets grouped by all other labels (incl. the name);
    ``buckets`` is :func:`histogram_buckets` of ``vector`` when the caller has it already."""
    if buckets is None:
        buckets = histogram_buckets(vector)
    return [(labels, _quantile_of_prepared(q, merged)) for labels, merged in buckets]


@lru_cache(maxsize=MEMO_SIZE)
def _split_le(labels: Labels) -> tuple[Labels, float | None]:
    """A bucket's labels without ``le``, and its parsed upper bound (None: ``le`` does not parse)."""
    le_text = ""
    rest: list[tuple[str, str]] = []
    for pair in labels:
        if pair[0] == "le":
            le_text = pair[1]
        else:
            rest.append(pair)
    try:
        return tuple(rest), parse_float(le_text)
    except ValueError:
        return tuple(rest), None


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' ``bucketQuantile``: needs a +Inf bucket and two buckets; monotonicity is enforced."""
    if math.isnan(q) or q < 0 or q > 1:
        return _quantile_of_prepared(q, None)
    return _quantile_of_prepared(q, _prepared_buckets(buckets))


def _prepared_buckets(buckets: list[tuple[float, float]]) -> list[list[float]] | None:
    """``bucketQuantile``'s steps that do not depend on ``q``: buckets sorted by upper bound, coalesced,
    made monotonic; None when it returns NaN for every ``q`` in [0, 1] (no +Inf bucket, fewer than two
    buckets, no observations)."""
    ordered = sorted(buckets, key=lambda b: b[0])  # Go sorts by upper bound; ties keep no order
    return _prepared_sorted([upper for upper, _ in ordered], [count for _, count in ordered])


def _prepared_sorted(uppers: list[float], counts: list[float]) -> list[list[float]] | None:
    """:func:`_prepared_buckets` of buckets already sorted by upper bound (``uppers[i]``, ``counts[i]``)."""
    if not uppers or not (math.isinf(uppers[-1]) and uppers[-1] > 0):
        return None
    # Coalesce buckets with the same upper bound.
    merged: list[list[float]] = []
    for upper, count in zip(uppers, counts, strict=True):
        if merged and merged[-1][0] == upper:
            merged[-1][1] += count
        else:
            merged.append([upper, count])
    # Ensure monotonic counts (Go's ensureMonotonic: from -Inf, so a NaN count stays NaN).
    highest = -math.inf
    for bucket in merged:
        if bucket[1] > highest:
            highest = bucket[1]
        elif bucket[1] < highest:
            bucket[1] = highest
    if len(merged) < 2 or merged[-1][1] == 0:
        return None
    return merged


def _quantile_of_prepared(q: float, merged: list[list[float]] | None) -> float:
    """The rest of ``bucketQuantile`` over :func:`_prepared_buckets` (read, never changed)."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if merged is None:
        return math.nan
    observations = merged[-1][1]
    rank = q * observations
    # Go's sort.Search (a binary search) over all but the last bucket for count >= rank; with NaN
    # counts the predicate is not monotonic, so the bisection itself decides.
    low, high = 0, len(merged) - 1
    while low < high:
        middle = (low + high) // 2
        if merged[middle][1] >= rank:
            high = middle
        else:
            low = middle + 1
    index = low
    if index == len(merged) - 1:
        return merged[-2][0]
    if index == 0 and merged[0][0] <= 0:
        return merged[0][0]
    bucket_start = 0.0
    bucket_end = merged[index][0]
    count = merged[index][1]
    if index > 0:
        bucket_start = merged[index - 1][0]
        count -= merged[index - 1][1]
        rank -= merged[index - 1][1]
    return bucket_start + (bucket_end - bucket_start) * gomath.div(rank, count)


# --- date functions --------------------------------------------------------------------------------
# Go's time package arithmetic (UTC), so that every input, even NaN or huge values, gives Go's answer.

_SECONDS_PER_DAY = 86_400
_UNIX_TO_ABSOLUTE = 9_223_372_028_715_321_600  # Go: unixToInternal + internalToAbsolute
_ABSOLUTE_ZERO_YEAR = -292_277_022_399
_DAYS_BEFORE = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _absolute(seconds: int) -> int:
    """Go's ``Time.abs()`` for a UTC time: seconds since the absolute zero year, as uint64."""
    return (seconds + _UNIX_TO_ABSOLUTE) % 2**64


def _abs_date(absolute: int) -> tuple[int, int, int, int]:
    """Go's ``absDate``: (year, month 1-12, day of month, zero-based day of year)."""
    days = absolute // _SECONDS_PER_DAY
    n = days // 146_097
    year = 400 * n
    days -= 146_097 * n
    n = days // 36_524
    n -= n >> 2
    year += 100 * n
    days -= 36_524 * n
    n = days // 1_461
    year += 4 * n
    days -= 1_461 * n
    n = days // 365
    n -= n >> 2
    year += n
    days -= 365 * n
    year += _ABSOLUTE_ZERO_YEAR
    yday = days
    day = yday
    if _is_leap(year):
        if day > 31 + 29 - 1:
            day -= 1
        elif day == 31 + 29 - 1:
            return year, 2, 29, yday
    month = day // 31
    end = _DAYS_BEFORE[month + 1]
    if day >= end:
        month += 1
        begin = end
    else:
        begin = _DAYS_BEFORE[month]
    return year, month + 1, day - begin + 1, yday


def _date_part(name: str, seconds: int) -> float:
    absolute = _absolute(seconds)
    if name == "minute":
        return float(absolute % 3_600 // 60)
    if name == "hour":
        return float(absolute % _SECONDS_PER_DAY // 3_600)
    if name == "day_of_week":
        return float((absolute + _SECONDS_PER_DAY) % (7 * _SECONDS_PER_DAY) // _SECONDS_PER_DAY)
    year, month, day, yday = _abs_date(absolute)
    if name == "day_of_month":
        return float(day)
    if name == "day_of_year":
        return float(yday + 1)
    if name == "month":
        return float(month)
    if name == "days_in_month":
        if month == 2:
            return 29.0 if _is_leap(year) else 28.0
        return float(_DAYS_BEFORE[month] - _DAYS_BEFORE[month - 1])
    return float(year)  # year


DATE_FUNCTIONS = frozenset(
    {"minute", "hour", "day_of_week", "day_of_month", "day_of_year", "days_in_month", "month", "year"}
)


def date_function(name: str, args: list[Any], eval_ms: int) -> InstantVector:
    """Date functions: of the evaluation time without argument, else of each sample value (seconds)."""
    if not args:
        seconds = int(eval_ms / 1000) if eval_ms >= 0 else -((-eval_ms) // 1000)  # Go truncates
        return [((), _date_part(name, seconds))]
    return [(drop_name(labels), _date_part(name, gomath.to_int64(value))) for labels, value in args[0]]
