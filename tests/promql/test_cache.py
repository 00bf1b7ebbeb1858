"""Reuse between evaluations never changes a result: counter index and shared sub-expressions."""

from __future__ import annotations

import math
import random
import struct

from tests.support.plain_rules import PlainRuleEngine
from watchdog.model import STALE_NAN, make_labels
from watchdog.promql import EvalOptions, TooManySamples, evaluate, parse_query
from watchdog.promql.cache import CounterIndex, EvalCache, Selections, SharedPlan
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_text
from watchdog.store import Store


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _same_vector(a: object, b: object) -> bool:
    assert isinstance(a, list) and isinstance(b, list)
    return [(s.labels, _bits(s.value)) for s in a] == [(s.labels, _bits(s.value)) for s in b]


def _counter_store(seed: int) -> tuple[Store, list[tuple[int, int, float]]]:
    """Counters with resets, staleness markers, NaN and replaced points, appended out of order of series."""
    rng = random.Random(seed)
    points: list[tuple[int, int, float]] = []
    for series in range(4):
        value = rng.uniform(0, 100)
        t = 1_000_000 + rng.randrange(0, 3000)
        for _ in range(300):
            t += rng.choice((1000, 1000, 1000, 2000, 15000))
            roll = rng.random()
            if roll < 0.05:
                value = rng.uniform(0, 5)  # counter reset
            elif roll < 0.08:
                points.append((series, t, STALE_NAN))
                continue
            elif roll < 0.09:
                points.append((series, t, math.nan))
                continue
            else:
                value += rng.choice((0.0, 0.1, 1.5, 1e16, 7.25))
            points.append((series, t, value))
    points.sort(key=lambda p: p[1])
    return Store(), points


def test_rate_increase_delta_from_the_counter_index_equal_the_full_walk() -> None:
    for seed in range(3):
        store, points = _counter_store(seed)
        counters = CounterIndex()
        queries = [parse_query(q) for q in (
            "rate(c[1m])", "increase(c[5m])", "delta(c[30s])", 'rate(c{s=~"[02]"}[2m] offset 10s)',
            "sum by (s) (increase(c[90s]))")]
        checked = 0
        for index, (series, t, value) in enumerate(points):
            labels = make_labels({"__name__": "c", "s": str(series)})
            store.append(labels, t, value)
            if index % 7 == 3:  # a point replaced at the same timestamp (the index must notice)
                store.append(labels, t, value + 3.0)
            if index % 5:
                continue
            for query in queries:
                plain = evaluate(query, store, t + 500)
                cached = evaluate(query, store, t + 500, cache=EvalCache(None, counters))
                assert _same_vector(plain, cached), (seed, t, query.text)
                checked += 1
            if index % 50 == 0:
                store.gc(t)  # trimmed fronts must not confuse the index
        assert checked > 500


def test_a_point_replaced_after_it_was_scanned_is_rescanned() -> None:
    """The index records one appended point without a rescan only when the point before it is the one it
    scanned, value included: a scanned point replaced by a higher value, then a lower one appended, is a
    counter reset the index must see."""
    store, counters = Store(), CounterIndex()
    labels = make_labels({"__name__": "c"})
    query = parse_query("increase(c[1m])")
    t = 1_000_000
    for value in (10.0, 20.0, 30.0):
        t += 1000
        store.append(labels, t, value)
    evaluate(query, store, t, cache=EvalCache(None, counters))  # scanned up to 30
    store.append(labels, t, 40.0)  # the newest point replaced
    t += 1000
    store.append(labels, t, 35.0)  # a reset against 40, not against 30
    plain = evaluate(query, store, t)
    assert _same_vector(plain, evaluate(query, store, t, cache=EvalCache(None, counters)))


def test_the_counter_index_counts_samples_like_the_range_selector() -> None:
    store, points = _counter_store(7)
    for series, t, value in points:
        store.append(make_labels({"__name__": "c", "s": str(series)}), t, value)
    end = points[-1][1]
    seen: set[str] = set()
    for limit in (50, 100, 200, 400, 2000):
        outcomes = []
        for cache in (None, EvalCache(None, CounterIndex())):
            try:
                evaluate("rate(c[5m])", store, end, EvalOptions(sample_limit=limit), cache)
                outcomes.append("ok")
            except TooManySamples:
                outcomes.append("stopped")
        assert outcomes[0] == outcomes[1], limit
        seen.add(outcomes[0])
    assert seen == {"ok", "stopped"}


SHARED_RULES = """
groups:
  - name: q
    rules:
      - record: job:lat:p50:previous
        expr: sum by (job) (job:lat:p50) + 0
      - record: job:lat:p50
        expr: histogram_quantile(0.5, sum by (job, le) (rate(lat_bucket[1m])))
      - record: job:lat:p90
        expr: histogram_quantile(0.9, sum by (job, le) (rate(lat_bucket[1m])))
      - record: lat_bucket:copy
        expr: sum by (job, le) (rate(lat_bucket[1m])) * 2
      - record: job:lat:p99
        expr: histogram_quantile(0.99, sum by (job, le) (rate(lat_bucket[1m])))
      - record: job:count
        expr: count by (job) (job:lat:p50) + sum by (job) (job:lat:p50)
      - alert: Slow
        expr: job:lat:p90 > 0.2 and count by (job) (job:lat:p50) > 0
        labels: {severity: warning}
"""


def _histogram_store(engine_store: Store, t_ms: int, rng: random.Random, totals: dict[tuple[str, str], float]) -> None:
    for job in ("a", "b"):
        for le in ("0.1", "0.25", "0.5", "1", "+Inf"):
            key = (job, le)
            totals[key] = totals.get(key, 0.0) + rng.uniform(0, 3) * (1 + float(le.replace("+Inf", "2")))
            engine_store.append(make_labels({"__name__": "lat_bucket", "job": job, "le": le}), t_ms, totals[key])


def test_shared_sub_expressions_give_the_same_rule_outputs_as_evaluating_each_rule_alone() -> None:
    ruleset = load_rule_text(SHARED_RULES)
    outputs: list[list[tuple[object, bytes]]] = []
    for reuse in (False, True):
        store = Store()
        engine = (RuleEngine if reuse else PlainRuleEngine)(ruleset, store)
        rng = random.Random(3)
        totals: dict[tuple[str, str], float] = {}
        seen: list[tuple[object, bytes]] = []
        for step in range(90):
            t_ms = 1_000_000 + step * 1000
            _histogram_store(store, t_ms, rng, totals)
            alerts = engine.evaluate(t_ms)
            for series in store.all_series():
                if series.labels[0][1] != "lat_bucket" and series.timestamps and series.timestamps[-1] == t_ms:
                    seen.append((series.labels, _bits(series.values[-1])))
            seen.extend((a.labels, _bits(a.value)) for a in alerts)
        outputs.append(sorted(seen, key=repr))
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) > 500


def test_the_plan_shares_only_repeated_sub_expressions() -> None:
    exprs = [parse_query(q).expr for q in (
        "histogram_quantile(0.5, sum by (le) (rate(x_bucket[1m])))",
        "histogram_quantile(0.9, sum by (le) (rate(x_bucket[1m])))",
        "rate(y[1m]) > 0")]
    plan = SharedPlan(exprs)
    assert len(set(plan.key_of.values())) == 2  # sum by (le) (rate(...)) and rate(x_bucket[1m])
    assert set(plan.reads.values()) == {frozenset({"x_bucket"})}


def test_selections_kept_between_passes_follow_new_and_removed_series() -> None:
    ruleset = load_rule_text("groups:\n  - name: g\n    rules:\n      - record: up:count\n        expr: count(up)\n")
    store = Store(retention_ms=10_000)
    engine = RuleEngine(ruleset, store)
    counts = []
    for step, instances in enumerate((["a"], ["a"], ["a", "b"], ["a", "b", "c"], ["c"])):
        t_ms = 1_000_000 + step * 20_000
        for instance in instances:
            store.append(make_labels({"__name__": "up", "instance": instance}), t_ms, 1.0)
        store.gc(t_ms)  # drops the series not appended within retention
        engine.evaluate(t_ms)
        (value,) = [s.values[-1] for s in store.select([("__name__", "=", "up:count")])]
        counts.append(value)
    assert counts == [1.0, 1.0, 2.0, 3.0, 1.0]


def test_min_and_max_over_time_agree_with_go_s_fold_on_nan_inf_and_signed_zero() -> None:
    from watchdog.promql import functions

    def fold(values: list[float], better: object) -> float:
        result = values[0]
        for value in values:
            if better(value, result) or math.isnan(result):  # type: ignore[operator]
                result = value
        return result

    rng = random.Random(5)
    pool = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 2.5]
    ctx = functions.RangeContext(0, 0, 0, 0, ())
    for _ in range(3000):
        values = [rng.choice(pool) for _ in range(rng.randrange(1, 6))]
        ts = list(range(len(values)))
        got_max = functions.RANGE_FUNCTIONS["max_over_time"](ts, values, ctx)
        got_min = functions.RANGE_FUNCTIONS["min_over_time"](ts, values, ctx)
        assert got_max is not None and got_min is not None
        assert _bits(got_max) == _bits(fold(values, lambda a, b: a > b)), values
        assert _bits(got_min) == _bits(fold(values, lambda a, b: a < b)), values


CHURN_RULES = """
groups:
  - name: g
    rules:
      - record: c:rate
        expr: rate(c[30s])
      - record: c:sum
        expr: sum by (job) (c:rate)
      - record: c:doubled
        expr: c:sum * 2
      - record: c:peak
        expr: max_over_time(c:sum[1m]) + count_over_time(c[1m])
      - record: c:fast
        expr: rate(c[30s]) > 0.5
      - record: c:fast_peak
        expr: max_over_time(c:fast[20s])
      - record: c:fast_count
        expr: count(c:fast)
"""


def test_kept_selections_follow_series_that_rule_outputs_and_scrapes_create_or_remove() -> None:
    """Selections survive a rule's write when it created or removed no series, and range functions label
    their outputs from the label sets kept with each selection: with counters of random jobs appearing
    and vanishing (new ``c:sum`` series mid-pass), every output equals evaluating with no reuse at all."""
    ruleset = load_rule_text(CHURN_RULES)
    outputs: list[list[tuple[object, list[bytes]]]] = []
    for reuse in (False, True):
        store = Store(retention_ms=20_000)
        engine = (RuleEngine if reuse else PlainRuleEngine)(ruleset, store)
        rng = random.Random(11)
        totals: dict[str, float] = {}
        for step in range(120):
            t_ms = 1_000_000 + step * 5_000
            for job in [job for job in "abcdef" if rng.random() < (0.9 if job < "e" else 0.05)]:
                totals[job] = totals.get(job, 0.0) + rng.uniform(0, 5)
                store.append(make_labels({"__name__": "c", "job": job, "i": "0"}), t_ms, totals[job])
            store.gc(t_ms)
            engine.evaluate(t_ms)
        outputs.append(sorted(((series.labels, [_bits(v) for v in series.values])
                               for series in store.all_series() if series.labels[0][1] != "c"), key=repr))
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) > 10


def test_label_sets_kept_with_a_selection_follow_it_when_it_is_selected_again() -> None:
    store = Store()
    selections = Selections()
    matchers = (("__name__", "=", "m"),)
    store.append(make_labels({"__name__": "m", "a": "1"}), 0, 1.0)
    selections.begin(store)
    found, unnamed = selections.select_unnamed(store, matchers)
    assert unnamed == [(("a", "1"),)] and [s.labels for s in found] == [make_labels({"__name__": "m", "a": "1"})]
    store.append(make_labels({"__name__": "m", "a": "2"}), 0, 1.0)  # a rule's write created a series
    selections.wrote("m")
    found, unnamed = selections.select_unnamed(store, matchers)
    assert sorted(unnamed) == [(("a", "1"),), (("a", "2"),)] and len(found) == 2
