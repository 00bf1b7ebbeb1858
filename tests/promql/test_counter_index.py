"""Range functions answered from the counter index (``CounterIndex``: ``rate``/``increase``/``delta``,
``count_over_time``) give the same samples, bit for bit, and hold the same samples at the peak as the
plain path (every window walked), in comparisons, over series collected together (one window's bounds
shared between series that share their timestamps) and over series appended on their own."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest

from watchdog.model import STALE_NAN, Sample, make_labels
from watchdog.promql import EvalOptions, PromQLError, evaluate, parse_query
from watchdog.promql.cache import CounterIndex, EvalCache
from watchdog.promql.engine import Evaluator
from watchdog.store import Store

COUNTER_QUERIES = [
    "rate(c[1m]) > 0", "increase(c[5m]) > 1", "0 < increase(c[2m])", "delta(c[30s]) <= 0", "rate(c[1m]) == 0",
    "increase(c[90s]) != 0", "rate(c[1m]) >= -1", "-1 >= delta(c[1m])", 'increase(c{s=~"[024]"}[2m] offset 10s) < 5',
    "rate(c[20s]) > NaN", "delta(c[1m]) >= 0", "rate(c[5m] @ 1100) > 0",
    "(rate(c[5m]) > 0.5 and rate(c[1m]) > 0) or increase(c[5m]) > 1", "sum(rate(c[1m]) > 0)",
    "max_over_time((rate(c[1m]) > 0)[2m:10s])", "increase(c[1m] @ 10) > 0",
]
OTHER_QUERIES = [
    "rate(c[1m]) > bool 0", "rate(c[1m]) > rate(c[5m])", 'rate({__name__=~"c|d"}[1m]) > 0',
    "irate(c[1m]) > 0", "(rate(c[1m])) > 0", "max_over_time(c[1m])", "min_over_time(c[2m]) > 1",
    "count_over_time(c[90s])", "rate(c[1m])",
]
"""Comparisons of other shapes (``bool``, no literal, several names, another function, parentheses)."""


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _sorted(result: Any) -> list[tuple[Any, bytes]]:
    return [(sample.labels, _bits(sample.value)) for sample in result]


def _fill(seed: int) -> tuple[Store, list[int]]:
    """Counters collected together (one source: series that share their timestamps), quiet ones among
    them, with resets, ±0, NaN, infinities, series vanishing (staleness markers) and coming back, a
    replaced point, and two counters appended on their own irregular timestamps; a ``d`` series with the
    label set of a ``c`` one. Returns the store and the evaluation times."""
    rng = random.Random(seed)
    store = Store()
    values = {s: rng.choice((0.0, 5.0, 100.0)) for s in range(6)}
    t = 1_000_000
    times: list[int] = []
    for tick in range(160):
        t += 5000 if tick % 13 else 15_000
        samples = []
        for s, value in values.items():
            roll = rng.random()
            if s == 0:
                pass  # never moves
            elif s == 1:
                value = -0.0 if value == 0.0 and math.copysign(1.0, value) > 0 else 0.0  # flips between zeros
            elif roll < 0.04:
                value = rng.uniform(0, 3)  # reset
            elif roll < 0.06:
                value = rng.choice((math.nan, math.inf))
            elif roll < 0.5 and s != 5:
                value = (0.0 if value != value or math.isinf(value) else value) + rng.choice((0.5, 1.0, 30.0))
            values[s] = value
            if s == 4 and tick % 40 >= 30:
                continue  # gone for a while: stale, then back
            samples.append(Sample(make_labels({"__name__": "c", "s": str(s)}), value))
        samples.append(Sample(make_labels({"__name__": "d", "s": "3"}), 1.0 + tick))
        store.ingest("a", samples, t)
        if tick % 17 == 5:
            store.ingest("a", [*samples[:2], Sample(samples[2].labels, samples[2].value + 7.0), *samples[3:]], t)
        for own in (6, 7):
            if rng.random() < 0.7:
                own_t = t - rng.randrange(0, 4000)
                store.append(make_labels({"__name__": "c", "s": str(own)}), own_t,
                             STALE_NAN if rng.random() < 0.05 else float(tick // (own - 4)))
        if tick > 4:
            times.append(t + rng.choice((0, 500, 2500)))
    return store, times


def _outcome(query: str, store: Store, t: int, cache: EvalCache | None) -> tuple[Any, int]:
    """(result or the error's text, samples held at the peak)."""
    expr = parse_query(query).expr
    evaluator = Evaluator(store, t, EvalOptions(sample_limit=10**9), cache)
    try:
        raw = evaluator.eval(expr, t)
    except PromQLError as error:
        return str(error), evaluator._peak
    return sorted((labels, _bits(value)) for labels, value in raw), evaluator._peak


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_counter_index_equals_the_plain_path(seed: int) -> None:
    store, times = _fill(seed)
    counters = CounterIndex()
    kept = 0
    for t in times:
        for query in COUNTER_QUERIES + OTHER_QUERIES:
            plain = _outcome(query, store, t, None)
            cached = _outcome(query, store, t, EvalCache(None, counters))
            assert plain == cached, (seed, t, query)
            kept += len(plain[0]) if isinstance(plain[0], list) else 0
        if t % 7 == 0:
            store.gc(t)
    assert kept > 500


def test_the_sample_limit_stops_the_counter_index_where_it_stops_the_plain_path() -> None:
    store, times = _fill(3)
    t = times[-1]
    for query in ("rate(c[5m]) > 0", "2 > increase(c[2m])"):
        _, peak = _outcome(query, store, t, None)
        for limit in (peak - 1, peak):
            outcomes = []
            for cache in (None, EvalCache(None, CounterIndex())):
                try:
                    evaluate(query, store, t, EvalOptions(sample_limit=limit), cache)
                    outcomes.append("ok")
                except PromQLError as error:
                    outcomes.append(str(error))
            assert outcomes[0] == outcomes[1], (query, limit)
            assert (outcomes[0] == "ok") == (limit == peak)


def test_a_zero_increase_keeps_its_sign() -> None:
    """A counter at 0.0 then -0.0 rises by -0.0; at -0.0 then 0.0 by 0.0: the rate is that zero."""
    store = Store()
    for i, value in enumerate((0.0, -0.0, -0.0, 0.0)):
        store.append(make_labels({"__name__": "c"}), 1000 * (i + 1), value)
    for t, sign in ((2000, -1.0), (4000, 1.0)):
        for query in ("rate(c[1500ms]) <= 0", "delta(c[1500ms]) == 0"):
            result = evaluate(query, store, t, cache=EvalCache(None, CounterIndex()))
            assert [math.copysign(1.0, sample.value) for sample in result] == [sign], (query, t)
            assert _sorted(result) == _sorted(evaluate(query, store, t))
