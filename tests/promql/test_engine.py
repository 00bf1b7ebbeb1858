"""Evaluator semantics on literal store contents (values cross-checked with promtool 2.42)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import pytest

from watchdog.model import STALE_NAN, Labels, metric
from watchdog.promql import EvalOptions, MatrixList, PromQLError, Scalar, VectorSample, evaluate, parse_query
from watchdog.store import Matcher, Store, matches

MIN = 60_000


def store_with(series: dict[Labels, list[tuple[int, float]]]) -> Store:
    store = Store(retention_ms=10**12, max_points=10**6)
    for labels, points in series.items():
        for t, v in points:
            store.append(labels, t, v)
    return store


def values(result: object) -> dict[Labels, float]:
    assert isinstance(result, list)
    return {s.labels: s.value for s in result if isinstance(s, VectorSample)}


def test_instant_selector_lookback_is_closed_at_both_ends() -> None:
    store = store_with({metric("g"): [(0, 1.0)]})
    assert values(evaluate(parse_query("g"), store, 5 * MIN)) == {metric("g"): 1.0}
    assert values(evaluate(parse_query("g"), store, 5 * MIN + 1)) == {}
    assert values(evaluate(parse_query("g"), store, 5 * MIN, EvalOptions(lookback_ms=MIN))) == {}


def test_stale_marker_hides_a_series_at_once() -> None:
    store = store_with({metric("g", i="1"): [(0, 1.0), (MIN, STALE_NAN), (3 * MIN, 3.0)],
                        metric("g", i="2"): [(0, math.nan)]})
    assert values(evaluate(parse_query("g"), store, 30_000)).keys() == {
        metric("g", i="1"), metric("g", i="2")}
    assert values(evaluate(parse_query("g"), store, 2 * MIN)) == {
        metric("g", i="2"): pytest.approx(math.nan, nan_ok=True)}
    assert values(evaluate(parse_query('g{i="1"}'), store, 3 * MIN)) == {metric("g", i="1"): 3.0}
    # Range selectors drop stale points but keep ordinary NaN.
    assert values(evaluate(parse_query("count_over_time(g[5m])"), store, 3 * MIN)) == {
        (("i", "1"),): 2.0, (("i", "2"),): 1.0}


def test_range_selector_is_closed_in_2_42() -> None:
    store = store_with({metric("c"): [(t * MIN, float(t)) for t in range(11)]})
    result = evaluate(parse_query("c[2m]"), store, 10 * MIN)
    assert isinstance(result, MatrixList)
    assert result[0].timestamps == [8 * MIN, 9 * MIN, 10 * MIN]
    assert values(evaluate(parse_query("increase(c[1m])"), store, 10 * MIN)) == {(): 1.0}


def test_rate_extrapolates_and_handles_resets() -> None:
    points = [(0, 0.0), (MIN, 60.0), (2 * MIN, 120.0), (3 * MIN, 10.0), (4 * MIN, 70.0)]
    store = store_with({metric("c_total", job="a"): points})
    # Reset adds the pre-reset value: 70 + 120 = 190 over 4 samples spanning 240s of a 300s window.
    # Zero-point clamp: the counter started at 0, so no extrapolation before the first sample.
    result = values(evaluate(parse_query("increase(c_total[5m])"), store, 4 * MIN))
    assert result == {(("job", "a"),): pytest.approx(190.0)}
    rate = values(evaluate(parse_query("rate(c_total[5m])"), store, 4 * MIN))
    assert rate == {(("job", "a"),): pytest.approx(190.0 / 300)}
    assert values(evaluate(parse_query("resets(c_total[5m])"), store, 4 * MIN)) == {(("job", "a"),): 1.0}
    assert values(evaluate(parse_query("irate(c_total[5m])"), store, 4 * MIN)) == {(("job", "a"),): 1.0}


def test_arithmetic_drops_the_name_and_filters_keep_it() -> None:
    store = store_with({metric("g", i="1"): [(0, 4.0)], metric("g", i="2"): [(0, 0.0)]})
    assert values(evaluate(parse_query("g / 0"), store, 0)) == {
        (("i", "1"),): math.inf, (("i", "2"),): pytest.approx(math.nan, nan_ok=True)}
    assert values(evaluate(parse_query("g > 1"), store, 0)) == {metric("g", i="1"): 4.0}
    assert values(evaluate(parse_query("g > bool 1"), store, 0)) == {(("i", "1"),): 1.0, (("i", "2"),): 0.0}
    assert values(evaluate(parse_query("1 < g"), store, 0)) == {metric("g", i="1"): 4.0}


def test_many_to_many_matching_is_an_execution_error() -> None:
    store = store_with({metric("a", job="x", i="1"): [(0, 1.0)], metric("a", job="x", i="2"): [(0, 1.0)],
                        metric("b", job="x"): [(0, 1.0)]})
    with pytest.raises(PromQLError, match="found duplicate series for the match group") as info:
        evaluate(parse_query("b + on(job) a"), store, 0)
    assert info.value.kind == "execution"
    grouped = values(evaluate(parse_query("a + on(job) group_left b"), store, 0))
    assert grouped == {(("i", "1"), ("job", "x")): 2.0, (("i", "2"), ("job", "x")): 2.0}
    with pytest.raises(PromQLError, match="many-to-one matching must be explicit"):
        evaluate(parse_query("a + on(job) b"), store, 0)


def test_same_labelset_after_dropping_names_is_an_error() -> None:
    store = store_with({metric("a", job="x"): [(0, 1.0)], metric("b", job="x"): [(0, 2.0)]})
    with pytest.raises(PromQLError, match="vector cannot contain metrics with the same labelset"):
        evaluate(parse_query('{__name__=~"a|b"} * 2'), store, 0)


def test_histogram_quantile_interpolates_and_needs_inf() -> None:
    buckets = {"0.1": 10.0, "0.5": 30.0, "1": 40.0, "+Inf": 40.0}
    store = store_with({metric("h_bucket", le=le): [(0, count)] for le, count in buckets.items()})
    store.append(metric("h_bucket", job="noinf", le="1"), 0, 5.0)
    result = values(evaluate(parse_query("histogram_quantile(0.5, h_bucket)"), store, 0))
    # rank 20 lies in (0.1, 0.5]: 0.1 + 0.4 * (20 - 10) / 20 = 0.3
    assert result[()] == pytest.approx(0.3)
    assert math.isnan(result[(("job", "noinf"),)])
    assert values(evaluate(parse_query("histogram_quantile(1, h_bucket)"), store, 0))[()] == 1.0


def test_subquery_steps_are_absolute_multiples() -> None:
    store = store_with({metric("c"): [(t * 10_000, float(t)) for t in range(100)]})
    # Steps at 180s, 210s, 240s (multiples of 30s inside [175s, 250s]), each sees the newest sample.
    result = values(evaluate(parse_query("sum_over_time(c[75s:30s])"), store, 250_000))
    assert result == {(): 18.0 + 21.0 + 24.0}
    assert values(evaluate(parse_query("count_over_time(c[1m:])"), store, 250_000,
                           EvalOptions(subquery_step_ms=20_000))) == {(): 3.0}


def test_at_modifier_and_offset() -> None:
    store = store_with({metric("c"): [(t * MIN, float(t)) for t in range(11)]})
    assert values(evaluate(parse_query("c @ 120"), store, 10 * MIN)) == {metric("c"): 2.0}
    assert values(evaluate(parse_query("c @ 300 offset 1m"), store, 10 * MIN)) == {metric("c"): 4.0}
    assert values(evaluate(parse_query("c offset 3m"), store, 10 * MIN)) == {metric("c"): 7.0}
    assert values(evaluate(parse_query("c @ end()"), store, 6 * MIN)) == {metric("c"): 6.0}
    assert values(evaluate(parse_query("timestamp(c)"), store, 10 * MIN + 5)) == {(): 600.0}


def test_aggregations_and_topk_order() -> None:
    store = store_with({metric("g", i=str(i)): [(0, float(v))] for i, v in enumerate([3, 1, 4, 1, 5])})
    top = evaluate(parse_query("topk(3, g)"), store, 0)
    assert isinstance(top, list)
    assert [s.value for s in top] == [5.0, 4.0, 3.0]
    assert [s.value for s in evaluate(parse_query("sort(g)"), store, 0)] == [1.0, 1.0, 3.0, 4.0, 5.0]  # type: ignore[union-attr]
    assert values(evaluate(parse_query("quantile(0.5, g)"), store, 0)) == {(): 3.0}
    assert values(evaluate(parse_query("count_values('v', g)"), store, 0)) == {
        (("v", "3"),): 1.0, (("v", "1"),): 2.0, (("v", "4"),): 1.0, (("v", "5"),): 1.0}
    assert values(evaluate(parse_query("stddev(g)"), store, 0))[()] == pytest.approx(1.6)


def test_absent_and_scalars() -> None:
    store = store_with({metric("up", job="a"): [(0, 1.0)]})
    absent = evaluate(parse_query('absent(nope{job="x", env=~"p"})'), store, 0)
    assert values(absent) == {(("job", "x"),): 1.0}
    assert values(evaluate(parse_query("absent(up)"), store, 0)) == {}
    assert evaluate(parse_query("scalar(up) * 2"), store, 1000) == Scalar(2.0, 1000)
    assert evaluate(parse_query("time()"), store, 1500) == Scalar(1.5, 1500)


def test_label_replace_follows_go_expansion() -> None:
    store = store_with({metric("up", instance="host:9090"): [(0, 1.0)]})
    result = values(evaluate(parse_query(
        'label_replace(up, "host", "$1", "instance", "(.*):(\\\\d+)")'), store, 0))
    assert result == {metric("up", instance="host:9090", host="host"): 1.0}
    # Go reads "$1x" as the group named "1x", which does not exist: empty, so the label is removed.
    query = parse_query('label_replace(up, "instance", "$1x", "instance", "(.*)")')
    result = values(evaluate(query, store, 0))
    assert result == {metric("up"): 1.0}


class WindowOnlySeries:
    """A series that offers only the documented ``window`` method."""

    def __init__(self, labels: Labels, points: list[tuple[int, float]]) -> None:
        self.labels = labels
        self._points = points

    def window(self, mint_ms: int, maxt_ms: int) -> tuple[list[int], list[float]]:
        kept = [(t, v) for t, v in self._points if mint_ms <= t <= maxt_ms]
        return [t for t, _ in kept], [v for _, v in kept]


class WindowOnlyStore:
    def __init__(self, series: list[WindowOnlySeries]) -> None:
        self.series = series

    def select(self, matchers: Iterable[Matcher]) -> Iterator[WindowOnlySeries]:
        wanted = list(matchers)
        return (s for s in self.series if matches(s.labels, wanted))


def test_any_store_with_select_and_window_works() -> None:
    store = WindowOnlyStore([WindowOnlySeries(metric("c"), [(t * MIN, t * 60.0) for t in range(6)])])
    assert values(evaluate(parse_query("c"), store, 5 * MIN + 1)) == {metric("c"): 300.0}
    assert values(evaluate(parse_query("rate(c[5m])"), store, 5 * MIN)) == {(): pytest.approx(1.0)}
