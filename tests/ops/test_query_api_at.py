"""``@ start()`` and ``@ end()`` in the HTTP query API, against promtool 2.42 (issue 11's leftover), and its
sample limit.

Prometheus resolves both before evaluating (``PreprocessExpr``): in ``/api/v1/query_range`` to the range's
start and end, in ``/api/v1/query`` to the query time. So every step of a range query of ``E @ start()``
must equal promtool's ``E @ <start>`` at that step's time, and an instant query of ``E @ end()`` at ``t``
must equal promtool's ``E @ end()`` (its ``promql_expr_test`` evaluates at ``t`` for both).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

from tests.promql.oracle import Outcome, load_store, promtool_results
from watchdog.exporter.api import PREFIX, QueryAPI

SERIES = [('x{a="1"}', "0+1x30"), ('x{a="2"}', "100-3x30")]
START_S, END_S, STEP_S = 180, 600, 60
EXPRS = ["x @ {}", "x @ {} offset 1m", "sum_over_time(x[2m:1m] @ {})", "timestamp(x @ {})"]


def _api(api: QueryAPI, endpoint: str, **params: object) -> list[dict[str, object]]:
    response = api.handle("GET", PREFIX + endpoint, urlencode(params))
    document = json.loads(response.body)
    assert response.code == 200, document
    return document["data"]["result"]  # type: ignore[no-any-return]


def _samples(outcome: Outcome) -> dict[str, float]:
    assert outcome.error is None, outcome.error
    return {dict(labels).get("a", ""): value for labels, value in outcome.samples}


def _by_series(result: list[dict[str, object]]) -> dict[str, dict[int, float]]:
    return {str(s["metric"].get("a", "")): {int(t): float(v) for t, v in s["values"]}  # type: ignore[attr-defined]
            for s in result}


def test_range_query_start_and_end_are_the_ranges(tmp_path: Path) -> None:
    api = QueryAPI(load_store(SERIES, "1m"), subquery_step_ms=60_000)
    steps = range(START_S, END_S + 1, STEP_S)
    cases = [(expr.format(at), f"{t // 60}m") for expr in EXPRS for at in (START_S, END_S) for t in steps]
    expected = promtool_results(SERIES, "1m", cases, tmp_path)
    for expr in EXPRS:
        for name, at in (("start()", START_S), ("end()", END_S)):
            got = _by_series(_api(api, "query_range", query=expr.format(name), start=START_S, end=END_S,
                                  step=STEP_S))
            want: dict[str, dict[int, float]] = {}
            for t in steps:
                for a, value in _samples(expected[(expr.format(at), f"{t // 60}m")]).items():
                    want.setdefault(a, {})[t] = value
            assert got == want, (expr.format(name), got, want)
            assert len({v for series in got.values() for v in series.values()}) <= len(got)  # one value per series


def test_instant_query_start_and_end_are_the_query_time(tmp_path: Path) -> None:
    api = QueryAPI(load_store(SERIES, "1m"), subquery_step_ms=60_000)
    cases = [(expr.format(name), "7m") for expr in EXPRS for name in ("start()", "end()")]
    expected = promtool_results(SERIES, "1m", cases, tmp_path)
    for expr, at in cases:
        got = {str(s["metric"].get("a", "")): float(s["value"][1])  # type: ignore[attr-defined,index]
               for s in _api(api, "query", query=expr, time=420)}
        assert got == _samples(expected[(expr, at)]), expr


def test_queries_are_bounded_by_the_sample_limit() -> None:
    api = QueryAPI(load_store(SERIES, "1m"), subquery_step_ms=60_000, sample_limit=100)
    for endpoint, params in (("query", {"query": "count_over_time((x @ end())[1h:1s])", "time": 600}),
                             ("query_range", {"query": "x", "start": 0, "end": 1800, "step": 1})):
        response = api.handle("GET", PREFIX + endpoint, urlencode(params))
        document = json.loads(response.body)
        assert (response.code, document["errorType"]) == (422, "execution"), document
        assert "too many samples" in document["error"]
    assert _api(api, "query_range", query="x", start=0, end=1800, step=60)  # 62 points: within the limit
