"""Issue 30: every PromQL entry point runs under one bounded budget (watchdog.promql.limits), so that no
rule file or query can stop the watchdog: rule load, reload, the agent's tick, the query API and the
command line's ``query``, ``rules check``, ``rules test`` and ``rules eval``.

What can be bounded in Python, and the hostile input each entry point meets here:

- a parse is bounded by the text before any parser runs (length, nesting, operators; RE2 refuses huge
  regex programs), and every parse failure is a PromQLError: a range beyond Go's durations (``x[293y]``)
  once escaped as a ValueError from the parser's binding, which no caller caught;
- an evaluation is bounded by CPU seconds (a subquery at a 1 ms step: millions of steps) and by samples
  held at once (the same subquery with ``@ end()``, which would hold millions of points).

Commands run in child processes with a hard time limit, so that a hang fails the test, not the suite.
"""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile.conftest import hostile_agent
from watchdog.exporter.api import QueryAPI
from watchdog.model import Sample, metric
from watchdog.promql import PromQLError, parse_query
from watchdog.promql.limits import COMMAND_BUDGET, QueryBudget
from watchdog.rules.loader import RuleLoadError, load_rule_files
from watchdog.store import Store

LIMIT_S = 60
HUGE_RANGE = "count_over_time(watchdog_gpu_temperature_celsius[293y])"
"""Beyond Go's time.Duration: promtool answers "duration out of range"."""
SLOW = "count_over_time(sum(x)[30m:1ms])"
"""1.8 million subquery steps of a one-sample vector: seconds of CPU, little memory at any instant."""
GREEDY = "count_over_time((x @ end())[1h:1ms])"
"""3.6 million steps times the series: gigabytes if nothing stops it."""
TINY = QueryBudget(cpu_seconds=0.2, max_samples=None)


def _rules(path: Path, expr: str, name: str = "hostile:rule") -> Path:
    path.write_text("groups:\n  - name: hostile\n    rules:\n"
                    f"      - record: {name}\n        expr: '{expr}'\n"
                    "      - record: hostile:after\n        expr: count(x)\n")
    return path


def _store(series: int = 4, points: int = 120) -> Store:
    store = Store()
    for t in range(points):
        store.ingest("x", [Sample(metric("x", i=str(i)), float(t)) for i in range(series)], t * 1000)
    return store


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          timeout=LIMIT_S)


# --------------------------------------------------------------------------------------------- parse


@pytest.mark.parametrize("query", [HUGE_RANGE, "x offset -300y", "rate(x[5m:293y])"])
def test_a_duration_beyond_go_is_a_parse_error_not_a_crash(query: str) -> None:
    with pytest.raises(PromQLError, match="duration out of range"):
        parse_query(query)
    parse_query("count_over_time(x[292y])")  # the longest Go duration of whole years still parses


@pytest.mark.parametrize("query", [
    'x{a=~"((a{1000}){1000}){1000}"}',                      # a regex program past RE2's memory cap
    'x{a=~"' + "(a|b)" * 3000 + '"}',                      # a giant regex
    "abs(" * 60 + "x" + ")" * 60,                            # nesting just inside the limit
    " + ".join(["sum(rate(x[5m]))"] * 200),                 # operators just inside the limit
])
def test_a_parse_is_bounded_by_the_text(query: str) -> None:
    started = time.process_time()
    with contextlib.suppress(PromQLError):
        parse_query(query)
    assert time.process_time() - started < 2


# ------------------------------------------------------------------------- rule load and reload


def test_rule_load_refuses_a_huge_range_naming_file_and_rule(tmp_path: Path) -> None:
    path = _rules(tmp_path / "huge.yaml", HUGE_RANGE)
    with pytest.raises(RuleLoadError) as caught:
        load_rule_files([str(path)])
    message = str(caught.value)
    assert str(path) in message and "hostile:rule" in message and "duration out of range" in message


def test_reload_keeps_the_last_good_rules_when_a_rule_would_crash_the_parser(tmp_path: Path) -> None:
    rules = _rules(tmp_path / "rules.yaml", "x")
    agent = hostile_agent(tmp_path, [1_800_000_000.0], {"rules": {"paths": [str(rules)]}})
    try:
        before = agent.rule_engine
        _rules(rules, HUGE_RANGE)
        assert agent.reload() is False
        assert agent.rule_engine is before and agent.stats.reload_success is False
    finally:
        agent.close()


def test_the_tick_stops_a_slow_rule_at_its_cpu_budget_and_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rules = _rules(tmp_path / "slow.yaml", SLOW.replace("x", "watchdog_gpu_temperature_celsius"))
    rules.write_text(rules.read_text().replace("count(x)", "count(watchdog_gpu_temperature_celsius)"))
    agent = hostile_agent(tmp_path, [1_800_000_000.0], {"rules": {
        "paths": [str(rules)], "rule_timeout_seconds": 0.2}})
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="watchdog.rules"):
            agent.tick()
        assert time.monotonic() - started < 20
        record = next(r for r in caplog.records if getattr(r, "reason", None) == "timeout")
        assert (record.file, record.rule) == (str(rules), "hostile:rule")
        assert "time budget of 0.2s" in record.error
        (after,) = agent.store.select([("__name__", "=", "hostile:after")])
        assert after.latest() is not None and after.latest()[1] == 8.0  # type: ignore[index]
    finally:
        agent.close()


# ------------------------------------------------------------------------------------- query API


def _api(store: Store, query: str, **extra: str) -> tuple[int, dict[str, object]]:
    import json
    from urllib.parse import urlencode

    api = QueryAPI(store, clock=lambda: 119.0, sample_limit=50_000)  # the agent passes rules.max_samples
    response = api.handle("GET", "/api/v1/query", urlencode({"query": query, "time": "119", **extra}))
    return response.code, json.loads(response.body)


def test_query_api_answers_each_hostile_query_with_an_error_in_bounded_time() -> None:
    store = _store()
    started = time.monotonic()
    status, body = _api(store, HUGE_RANGE)
    assert (status, body["errorType"]) == (400, "bad_data") and "duration out of range" in str(body["error"])
    status, body = _api(store, SLOW, timeout="300ms")
    assert (status, body["errorType"]) == (503, "timeout")
    status, body = _api(store, GREEDY)
    assert (status, body["errorType"]) == (422, "execution") and "too many samples" in str(body["error"])
    assert time.monotonic() - started < 30


# ------------------------------------------------------------------------------------ the commands


def test_query_command_stops_a_greedy_query_at_the_sample_limit(tmp_path: Path) -> None:
    page = tmp_path / "page.txt"
    page.write_text("".join(f'x{{i="{i}"}} 1\n' for i in range(4)))
    done = _run(["query", "--no-rules", "--metrics-file", str(page), "--at", "3600", GREEDY])
    assert done.returncode == 1, done.stderr
    assert f"stopped at the sample limit of {COMMAND_BUDGET.max_samples}" in done.stderr, done.stderr
    done = _run(["query", "--no-rules", "--metrics-file", str(page), HUGE_RANGE])
    assert done.returncode == 1 and "duration out of range" in done.stderr


def test_query_command_stops_a_slow_query_and_a_slow_rule_at_the_time_budget(tmp_path: Path) -> None:
    from watchdog.cli.query_cmd import MetricsText, QueryCommandError, run_query

    page = [MetricsText("page", "".join(f'x{{i="{i}"}} 1\n' for i in range(4)))]
    with pytest.raises(PromQLError, match=r"time budget of 0\.2s") as caught:
        run_query(SLOW, page, [], 3_600_000, TINY)
    assert caught.value.kind == "timeout"
    rules = _rules(tmp_path / "slow.yaml", SLOW)
    with pytest.raises(QueryCommandError, match=r"rule 'hostile:rule' of group 'hostile': .*time budget"):
        run_query("x", page, [str(rules)], 3_600_000, TINY)


@pytest.mark.parametrize("expr", [HUGE_RANGE, 'x{a=~"((a{1000}){1000}){1000}"}'])
def test_rules_check_names_file_and_rule_of_a_hostile_expression(tmp_path: Path, expr: str) -> None:
    path = _rules(tmp_path / "hostile.yaml", expr)
    done = _run(["rules", "check", str(path)])
    assert done.returncode == 1
    assert str(path) in done.stderr and "hostile:rule" in done.stderr and "Traceback" not in done.stderr


def _test_file(tmp_path: Path, expr: str) -> Path:
    rules = _rules(tmp_path / "rules.yaml", expr)
    test = tmp_path / "test.yaml"
    test.write_text(f"rule_files: [{rules.name}]\nevaluation_interval: 1m\ntests:\n"
                    "  - interval: 1m\n    input_series:\n      - series: 'x{i=\"0\"}'\n        values: '1x60'\n"
                    "    promql_expr_test:\n      - expr: hostile:after\n        eval_time: 1h\n"
                    "        exp_samples:\n          - labels: 'hostile:after'\n            value: 1\n")
    return test


def test_rules_test_fails_a_greedy_rule_instead_of_running_out_of_memory(tmp_path: Path) -> None:
    done = _run(["rules", "test", str(_test_file(tmp_path, GREEDY))])
    assert done.returncode == 1
    assert "rule: hostile:rule" in done.stderr and "too many samples" in done.stderr, done.stderr


def test_rules_test_fails_a_slow_rule_and_a_slow_expression_at_the_time_budget(tmp_path: Path) -> None:
    from watchdog.promtool.runner import run_test_files

    out, err = io.StringIO(), io.StringIO()
    assert run_test_files([str(_test_file(tmp_path, SLOW))], out, err, TINY) == 1
    assert "rule: hostile:rule" in err.getvalue() and "time budget of 0.2s" in err.getvalue()
    test = _test_file(tmp_path, "x")
    # at 0s: the subquery's window holds no samples, so promtool's own sample limit does not stop it first
    test.write_text(test.read_text().replace("expr: hostile:after\n        eval_time: 1h",
                                             f"expr: '{SLOW}'\n        eval_time: 0s"))
    out, err = io.StringIO(), io.StringIO()
    assert run_test_files([str(test)], out, err, TINY) == 1
    assert f"expr: {SLOW!r}".replace("'", '"') in err.getvalue() and "time budget" in err.getvalue()


def test_rules_eval_reports_a_rule_the_budget_stopped(tmp_path: Path) -> None:
    from watchdog.promtool.eval_input import evaluate_input

    rules = _rules(tmp_path / "rules.yaml", SLOW)
    source = tmp_path / "input.yaml"
    source.write_text(f"rule_files: [{rules.name}]\ninterval: 1m\n"
                      "input_series:\n  - series: 'x{i=\"0\"}'\n    values: '1x60'\n")
    result = evaluate_input(str(source), "2m", budget=TINY)
    (failure,) = [f for f in result.failures if f.rule == "hostile:rule"]
    assert failure.reason == "timeout" and "time budget of 0.2s" in failure.error
    source.write_text("interval: 1m\ninput_series:\n  - series: 'x{i=\"0\"}'\n    values: '1x60'\n")
    done = _run(["rules", "eval", "--input", str(source), "--at", "0", "--rules",
                 str(_rules(tmp_path / "greedy.yaml", GREEDY))])
    assert done.returncode == 0 and "rule failed: group 'hostile', rule 'hostile:rule'" in done.stderr
