"""Differential tests: every expression here must give exactly what promtool 2.42 gives.

Each scenario loads one set of input series and evaluates a table of expressions at several times,
both with our evaluator and with real ``promtool test rules`` (see ``oracle.py``). Values must agree
bit for bit; errors must be errors on both sides.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.promql.oracle import compare_with_promtool

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")

COUNTERS_AND_GAUGES = [
    ('http_requests_total{job="api",instance="a",code="200"}', "0+60x20"),
    ('http_requests_total{job="api",instance="b",code="200"}', "0+30x5 0+30x14"),
    ('http_requests_total{job="api",instance="a",code="500"}', "0+1x20"),
    ('http_requests_total{job="db",instance="c",code="200"}', "100+10x10 _x5 200+10x4"),
    ('gauge{job="api",instance="a"}', "1 5 3 NaN 2 -1 Inf 4 4 4 0 -Inf 3 2 1 1 1 2 3 4 5"),
    ('gauge{job="api",instance="b"}', "10 9 8 7 6 5 4 3 2 1 0 1 2 3 4 5 6 7 8 9 10"),
    ('gauge{job="db",instance="c"}', "0.25+0.25x20"),
    ('frac{job="db"}', "0.1+0.1x20"),
    ('frac{job="api"}', "1 0.3 0.7 1.1 -0.2 3.3 0.01 NaN 2.5 2.5 1e-3 7.77"),
    ('temp{gpu="0"}', "50 stale 60 70 _ 80 stale _ _ 90"),
    ('temp{gpu="1"}', "40+1x20"),
    ('up{job="api",instance="a"}', "1x20"),
    ('up{job="api",instance="b"}', "1 1 1 0 0 1x15"),
    ('up{job="db",instance="c"}', "1x8"),
    ('info{job="api",instance="a",version="1"}', "1x20"),
    ('info{job="api",instance="b",version="2"}', "1x20"),
    ('neg_counter_total{job="x"}', "-10+5x20"),
    ('big{job="x"}', "1e30+1e29x20"),
    ('tiny{job="x"}', "1e-9+1e-10x20"),
    ('tinyd{job="x"}', "9.313225746154785e-10+1.1641532182693481e-10x20"),
]

TIMES = ["0s", "1m", "3m", "5m30s", "10m", "16m", "20m", "24m", "26m"]

GENERAL_EXPRESSIONS = [
    # selectors, lookback, staleness, offset, @
    "http_requests_total",
    'http_requests_total{job=~"a.*|db"}',
    'http_requests_total{code!="200"}',
    'http_requests_total{job!~"api"}',
    '{__name__=~"temp|up", job=""}',
    "temp",
    "temp offset 2m",
    "temp offset -1m",
    "gauge @ 300",
    "gauge @ 300 offset 1m",
    "gauge @ start()",
    "gauge @ end() offset 5m",
    # arithmetic and name dropping
    "gauge + 1",
    "2 * gauge",
    "gauge / 0",
    "-gauge",
    "gauge % 3",
    "-gauge % 3",
    "gauge ^ 2",
    "2 ^ gauge",
    "gauge / gauge",
    "gauge atan2 gauge",
    "1 - 2 * 3 ^ 2 ^ 0.5",
    "-2 ^ 2",
    "(1 + 2) / 0",
    "0 / 0",
    "-1 / 0",
    "big * big",
    "tiny / 3",
    "big - big",
    # comparisons
    "gauge > 2",
    "gauge > bool 2",
    "2 < gauge",
    "2 < bool gauge",
    "gauge == gauge",
    "gauge != bool gauge",
    "gauge > gauge",
    "gauge >= bool on(job, instance) up",
    "1 > bool 2",
    "gauge == NaN",
    "gauge != NaN",
    "gauge <= Inf",
    # vector matching
    "http_requests_total / on(job, instance) group_left up",
    "http_requests_total * on(instance) group_left(version) info",
    "up * on(instance) group_right(version) info",
    "gauge + on(job) up",
    "gauge + ignoring(instance) up",
    "up + on() group_left gauge",
    "info * ignoring(version) up",
    "http_requests_total + ignoring(code) http_requests_total",
    "sum by (job) (http_requests_total) / on(job) group_right sum by (job, instance) (up)",
    "http_requests_total > on(job, instance, code) group_left http_requests_total",
    "up > bool on(instance) group_left(version) info",
    # set operators
    "gauge and up",
    "gauge and on(job) up",
    "up or gauge",
    "gauge or on(job) up",
    "gauge unless up == 0",
    "gauge unless on(instance) (up == 0)",
    "temp or gauge",
    "nothing or up",
    "up and nothing",
    "up unless nothing",
    "(up == 1) or vector(0)",
    # aggregations
    "sum(http_requests_total)",
    "sum by (job) (http_requests_total)",
    "sum without (instance) (http_requests_total)",
    "sum by (__name__) ({__name__=~'up|gauge'})",
    "avg(gauge)",
    "avg by (job) (gauge)",
    "min(gauge)",
    "max(gauge)",
    "max by (job) (gauge)",
    "count(gauge)",
    "count by (code) (http_requests_total)",
    "stddev(gauge)",
    "stdvar(gauge)",
    "stddev by (job) (http_requests_total)",
    "group(gauge)",
    "group by (job) (up)",
    "count_values('value', up)",
    "count_values by (job) ('v', gauge)",
    "count_values without (instance) ('v', up)",
    "topk(2, gauge)",
    "topk(1, http_requests_total) by (job)",
    "bottomk(2, gauge)",
    "bottomk by (job) (1, gauge)",
    "topk(0, gauge)",
    "topk(100, up)",
    "quantile(0.5, gauge)",
    "quantile(0.9, http_requests_total)",
    "quantile by (job) (0.25, gauge)",
    "quantile(-1, gauge)",
    "quantile(2, gauge)",
    "avg(big)",
    "sum(tiny)",
    "sum(tinyd) + sum(tinyd)",
    # single-series functions over non-dyadic values (order independent, so compared exactly)
    "frac * 3",
    "frac / 7",
    "frac ^ 3",
    "frac ^ 0.5",
    "frac ^ 1.7",
    "frac ^ -2",
    "3 ^ frac",
    "rate(frac[5m])",
    "delta(frac[4m])",
    "deriv(frac[10m])",
    "predict_linear(frac[10m], 123)",
    "avg_over_time(frac[10m])",
    "sum_over_time(frac[10m])",
    "stddev_over_time(frac[10m])",
    "stdvar_over_time(frac[7m])",
    "quantile_over_time(0.3, frac[10m])",
    "holt_winters(frac[10m], 0.3, 0.6)",
    "log2(frac)",
    "log10(frac)",
    "ln(frac)",
    "exp(frac)",
    "sqrt(frac)",
    "round(frac, 0.1)",
    "count_values('v', frac)",
    # range functions
    "rate(http_requests_total[5m])",
    "rate(http_requests_total[1m])",
    "rate(http_requests_total[10m])",
    "rate(http_requests_total[90s])",
    "increase(http_requests_total[5m])",
    "increase(http_requests_total[3m] offset 2m)",
    "increase(neg_counter_total[5m])",
    "rate(neg_counter_total[10m])",
    "delta(gauge[5m])",
    "delta(gauge[2m])",
    "irate(http_requests_total[5m])",
    "idelta(gauge[5m])",
    "deriv(gauge[5m])",
    "deriv(http_requests_total[10m])",
    "predict_linear(gauge[10m], 600)",
    "predict_linear(http_requests_total[5m] offset 1m, 3600)",
    "changes(gauge[10m])",
    "changes(up[20m])",
    "resets(http_requests_total[20m])",
    "resets(gauge[10m])",
    "avg_over_time(gauge[5m])",
    "avg_over_time(gauge[20m])",
    "sum_over_time(gauge[5m])",
    "sum_over_time(tiny[20m])",
    "min_over_time(gauge[10m])",
    "max_over_time(gauge[10m])",
    "count_over_time(temp[10m])",
    "last_over_time(temp[10m])",
    "present_over_time(temp[3m])",
    "quantile_over_time(0.5, gauge[10m])",
    "quantile_over_time(0.1, http_requests_total[5m])",
    "stddev_over_time(gauge[10m])",
    "stdvar_over_time(gauge[5m])",
    "stddev_over_time(big[20m])",
    "absent_over_time(temp[1m])",
    'absent_over_time(nothing{job="x",env=~"p.*"}[5m])',
    "holt_winters(gauge[10m], 0.5, 0.5)",
    "holt_winters(http_requests_total[5m], 0.1, 0.9)",
    # subqueries
    "max_over_time(rate(http_requests_total[2m])[10m:1m])",
    "avg_over_time(gauge[5m:])",
    "sum_over_time(gauge[10m:2m])",
    "rate(http_requests_total[5m:30s])",
    "min_over_time((gauge > 2)[10m:90s])",
    "count_over_time(up[5m:1m] offset 3m)",
    "max_over_time(deriv(gauge[3m])[10m:1m])",
    "absent_over_time(nothing[5m:1m])",
    "last_over_time(sum(up)[7m:2m])",
    "max_over_time(gauge[5m:1m] @ 600)",
    # other functions
    'absent(nothing{job="x", env="prod"})',
    'absent(nothing{job="x", job="y"})',
    "absent(up)",
    "absent(sum(nothing))",
    "abs(gauge)",
    "ceil(gauge / 3)",
    "floor(-gauge / 3)",
    "round(gauge / 3)",
    "round(gauge, 0.3)",
    "round(-gauge / 2)",
    "sqrt(gauge)",
    "ln(gauge)",
    "log2(gauge)",
    "log10(gauge)",
    "exp(gauge)",
    "exp(big)",
    "sgn(gauge)",
    "clamp(gauge, 1, 4)",
    "clamp(gauge, 4, 1)",
    "clamp_min(gauge, 2)",
    "clamp_max(gauge, 2)",
    "sin(gauge)",
    "cos(gauge)",
    "asin(gauge / 10)",
    "acosh(gauge)",
    "atanh(gauge / 10)",
    "deg(gauge)",
    "rad(gauge)",
    "pi()",
    "time()",
    "time() - 60",
    "timestamp(temp)",
    "timestamp(temp offset 1m)",
    "timestamp(-temp)",
    "timestamp(temp @ 120)",
    "vector(1)",
    "vector(time())",
    "scalar(up)",
    'scalar(up{instance="a"})',
    'scalar(up{instance="a"}) * gauge',
    "sort(gauge)",
    "sort_desc(gauge)",
    "sort(http_requests_total)",
    'label_replace(up, "host", "$1", "instance", "(.*)")',
    'label_replace(up, "host", "x-$1-y", "instance", "(b)")',
    'label_replace(up, "host", "${1}x", "job", "(a)(p)(i)")',
    'label_replace(up, "host", "$1x", "job", "(.*)")',
    'label_replace(up, "job", "", "job", ".*")',
    'label_replace(up, "__name__", "renamed", "job", "api")',
    'label_replace(up, "instance", "same", "instance", ".*")',
    'label_join(up, "key", "-", "job", "instance")',
    'label_join(up, "key", ",")',
    'label_join(up, "job", "", "missing")',
    "minute()",
    "hour(gauge * 3600)",
    "day_of_week(gauge * 86400)",
    "day_of_month()",
    "day_of_year(vector(86400 * 40))",
    "days_in_month(vector(86400 * 40))",
    "month(vector(86400 * 40))",
    "year()",
    # errors that depend on data
    "http_requests_total + on(job) up",
    "gauge * ignoring(instance) up",
    "http_requests_total + ignoring(code) group_left http_requests_total",
    "{__name__=~'gauge|up'} + 1",
    'label_replace(up, "instance", "same", "job", ".*")',
]


# Results that depend on the (random) order in which promtool creates its input series.
ORDER_DEPENDENT = [
    "avg(gauge)",
    "stddev(gauge)",
    "stdvar(gauge)",
    "stddev by (job) (http_requests_total)",
    "avg by (job) (gauge)",
    "sum(tiny)",
    "avg(big)",
    "quantile(0.5, gauge)",
    "topk(1, http_requests_total) by (job)",
    "bottomk by (job) (1, gauge)",
    "bottomk(2, gauge)",
    "topk(2, gauge)",
    "sum by (__name__) ({__name__=~'up|gauge'})",
]


def test_general_expressions_match_promtool(tmp_path: Path) -> None:
    cases = [(expr, t) for expr in GENERAL_EXPRESSIONS for t in TIMES]
    problems = compare_with_promtool(
        COUNTERS_AND_GAUGES, "1m", cases, tmp_path, order_dependent=ORDER_DEPENDENT
    )
    assert problems == [], "\n".join(problems)


HISTOGRAMS = [
    ('req_seconds_bucket{job="a",le="0.1"}', "0+1x10"),
    ('req_seconds_bucket{job="a",le="0.5"}', "0+3x10"),
    ('req_seconds_bucket{job="a",le="1"}', "0+5x10"),
    ('req_seconds_bucket{job="a",le="+Inf"}', "0+6x10"),
    # Not monotonic: le=1 below le=0.5.
    ('req_seconds_bucket{job="b",le="0.1"}', "0+2x10"),
    ('req_seconds_bucket{job="b",le="0.5"}', "0+6x10"),
    ('req_seconds_bucket{job="b",le="1"}', "0+4x10"),
    ('req_seconds_bucket{job="b",le="Inf"}', "0+8x10"),
    # No +Inf bucket.
    ('req_seconds_bucket{job="c",le="0.1"}', "0+1x10"),
    ('req_seconds_bucket{job="c",le="1"}', "0+2x10"),
    # Only +Inf.
    ('req_seconds_bucket{job="d",le="+Inf"}', "0+2x10"),
    # No observations.
    ('req_seconds_bucket{job="e",le="1"}', "0x10"),
    ('req_seconds_bucket{job="e",le="+Inf"}', "0x10"),
    # Negative and zero bounds, odd spellings.
    ('req_seconds_bucket{job="f",le="-1"}', "0+1x10"),
    ('req_seconds_bucket{job="f",le="0"}', "0+2x10"),
    ('req_seconds_bucket{job="f",le="1e0"}', "0+4x10"),
    ('req_seconds_bucket{job="f",le="1.0"}', "0+1x10"),
    ('req_seconds_bucket{job="f",le="+inf"}', "0+5x10"),
    # Bad le values are ignored.
    ('req_seconds_bucket{job="g",le="abc"}', "0+1x10"),
    ('req_seconds_bucket{job="g",le="1"}', "0+1x10"),
    ('req_seconds_bucket{job="g",le="+Inf"}', "0+2x10"),
    # le is read by strconv.ParseFloat: underscores and 0x...p are bounds, 0x10 (no p exponent) is not.
    ('req_seconds_bucket{job="h",le="0x1p3"}', "0+1x10"),
    ('req_seconds_bucket{job="h",le="0x10"}', "0+2x10"),
    ('req_seconds_bucket{job="h",le="1_000"}', "0+3x10"),
    ('req_seconds_bucket{job="h",le="+Inf"}', "0+4x10"),
    ('req_seconds_count{job="a"}', "0+6x10"),
    ('req_seconds_sum{job="a"}', "0+2.5x10"),
]

HISTOGRAM_EXPRESSIONS = [
    "histogram_quantile(0.5, rate(req_seconds_bucket[5m]))",
    "histogram_quantile(0.9, rate(req_seconds_bucket[5m]))",
    "histogram_quantile(0.99, req_seconds_bucket)",
    "histogram_quantile(0, req_seconds_bucket)",
    "histogram_quantile(1, req_seconds_bucket)",
    "histogram_quantile(0.25, req_seconds_bucket)",
    "histogram_quantile(-0.5, req_seconds_bucket)",
    "histogram_quantile(1.5, req_seconds_bucket)",
    "histogram_quantile(NaN, req_seconds_bucket)",
    "histogram_quantile(0.5, sum by (le) (rate(req_seconds_bucket[5m])))",
    "histogram_quantile(0.5, sum by (le, job) (increase(req_seconds_bucket[3m])))",
    "histogram_quantile(0.75, req_seconds_bucket offset 2m)",
    "rate(req_seconds_sum[5m]) / rate(req_seconds_count[5m])",
    'sum(rate(req_seconds_bucket{le="0.5"}[5m])) / sum(rate(req_seconds_count[5m]))',
    "histogram_count(req_seconds_bucket)",
    "histogram_sum(req_seconds_bucket)",
    "histogram_fraction(0, 1, req_seconds_bucket)",
]


def test_histograms_match_promtool(tmp_path: Path) -> None:
    cases = [(expr, t) for expr in HISTOGRAM_EXPRESSIONS for t in ["0s", "1m", "5m", "10m", "15m"]]
    order_dependent = [e for e in HISTOGRAM_EXPRESSIONS if "sum" in e]
    problems = compare_with_promtool(HISTOGRAMS, "1m", cases, tmp_path, order_dependent=order_dependent)
    assert problems == [], "\n".join(problems)


IRREGULAR = [
    ('c_total{i="1"}', "0 5 _ _ 20 _ 30 1 2 _ _ _ _ 8"),
    ('c_total{i="2"}', "_ _ _ 10 _ _ _ _ _ _ 40"),
    ('c_total{i="3"}', "3 2 1 0 1 2 3"),
    ('g{i="1"}', "1 stale 2 stale stale 3"),
]

IRREGULAR_EXPRESSIONS = [
    "rate(c_total[1m])",
    "rate(c_total[2m])",
    "rate(c_total[3m])",
    "rate(c_total[7m])",
    "increase(c_total[4m])",
    "irate(c_total[3m])",
    "idelta(c_total[5m])",
    "delta(c_total[6m])",
    "deriv(c_total[4m])",
    "resets(c_total[10m])",
    "changes(g[10m])",
    "count_over_time(g[3m])",
    "g",
    "max_over_time(g[2m:15s])",
    "count_over_time(c_total[5m:45s])",
    "rate(c_total[4m:20s] offset 1m)",
]


def test_irregular_sampling_matches_promtool(tmp_path: Path) -> None:
    times = ["0s", "30s", "1m", "2m", "3m30s", "4m", "6m", "7m", "9m59s", "10m", "13m", "20m"]
    cases = [(expr, t) for expr in IRREGULAR_EXPRESSIONS for t in times]
    problems = compare_with_promtool(IRREGULAR, "1m", cases, tmp_path)
    assert problems == [], "\n".join(problems)


SUBSECOND = [
    ('s{i="1"}', "0+1x100"),
    ('s{i="2"}', "1 2 _ 4 _ _ 7 stale 9"),
]


def test_short_intervals_and_subquery_alignment_match_promtool(tmp_path: Path) -> None:
    expressions = [
        "rate(s[2s])",
        "s",
        "max_over_time(s[3s:700ms])",
        "count_over_time(s[10s:1s])",
        "sum_over_time(s[5s:2s] offset 1500ms)",
        "timestamp(s)",
        "last_over_time(s[1s])",
    ]
    times = ["1s", "1500ms", "3s", "7s", "9999ms", "15s", "20s"]
    cases = [(expr, t) for expr in expressions for t in times]
    problems = compare_with_promtool(SUBSECOND, "1s", cases, tmp_path, evaluation_interval="1s")
    assert problems == [], "\n".join(problems)


EDGES = [
    ('v{i="a"}', "1 NaN 3 NaN 5 6 7 8 9 10 11"),
    ('v{i="b"}', "NaN 2 NaN 4 Inf -Inf 0 -0 1 2 3"),
    ('v{i="c"}', "5 4 3 2 1 0 -1 -2 -3 -4 -5"),
    ('w{i="a",j="x"}', "1x10"),
    ('w{i="b",j="y"}', "2x10"),
    ('cnt_total{i="a"}', "10 20 5 15 0 0 30 40 1 2 3"),
    ('le_weird_bucket{le="0.5"}', "1 2 NaN 4 5 6 7 8 9 10 11"),
    ('le_weird_bucket{le="+Inf"}', "2 4 6 8 NaN 12 14 16 18 20 22"),
]

EDGE_EXPRESSIONS = [
    "v",
    "sort(v)",
    "sort_desc(v)",
    "topk(1, v)",
    "bottomk(1, v)",
    "topk(2, v)",
    "max(v)",
    "min(v)",
    "quantile(0.5, v)",
    "count_values('x', v)",
    "clamp(v, 0, 3)",
    "clamp_min(v, NaN)",
    "v > NaN",
    "v != bool NaN",
    "v == bool v",
    "v unless v > 3",
    "abs(v) >= 2",
    "round(v * 0.5)",
    "v / v",
    "v % 0",
    "v ^ 0",
    "0 ^ -v",
    "changes(v[5m])",
    "resets(v[5m])",
    "max_over_time(v[3m])",
    "min_over_time(v[3m])",
    "quantile_over_time(0.5, v[5m])",
    "quantile_over_time(NaN, v[5m])",
    "avg_over_time(v[4m])",
    "sum_over_time(v[4m])",
    "stddev_over_time(v[4m])",
    "deriv(v[4m])",
    "predict_linear(v[4m], 60)",
    "rate(cnt_total[5m])",
    "irate(cnt_total[5m])",
    "increase(cnt_total[10m])",
    "delta(cnt_total[3m])",
    "histogram_quantile(0.5, le_weird_bucket)",
    "histogram_quantile(0.9, rate(le_weird_bucket[3m]))",
    "w + on(i) group_left(j) w",
    "w * on() group_left w{i='a'}",
    "w{i='a'} * on() group_right w",
    "label_join(w, 'k', '-', 'i', 'j', 'i')",
    "max_over_time(max_over_time(v[2m:1m])[5m:2m])",
    "sum_over_time(v[4m:1m] @ 300)",
    "sum_over_time(v[4m:1m] @ 300 offset 1m)",
    "last_over_time(v[3m:1m] offset -2m)",
    "timestamp(last_over_time(v[3m]))",
    "count(v) by (i) > bool 0",
    "absent_over_time(v{i='zzz'}[2m:1m])",
    "vector(1) + on() group_left v",
    "scalar(v{i='a'}) > bool 2",
    "-v ^ 2",
    "(v > 2) + 1",
    "group by (j) (w)",
    "stdvar without (i) (w)",
    "avg without (i) (v)",
]


def test_nan_infinities_and_nesting_match_promtool(tmp_path: Path) -> None:
    times = ["0s", "1m", "2m", "4m", "5m", "7m", "10m", "12m"]
    cases = [(expr, t) for expr in EDGE_EXPRESSIONS for t in times]
    order_dependent = ["topk(1, v)", "bottomk(1, v)", "topk(2, v)", "quantile(0.5, v)", "avg without (i) (v)",
                       "max(v)", "min(v)"]
    problems = compare_with_promtool(EDGES, "1m", cases, tmp_path, order_dependent=order_dependent)
    assert problems == [], "\n".join(problems)
