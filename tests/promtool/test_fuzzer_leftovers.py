"""Issue 30's PromQL leftovers from the differential fuzzer, each against real promtool 2.42 when it is
installed (and against the answer it gave, recorded here, when it is not): input-series notation, a duration
after ``clock_offset``, ``exp`` of a huge negative number, ``cosh``/``sinh`` to the last bit, and
``topk(NaN, x @ 0)`` in a subquery whose window holds no step.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from watchdog.promql import PromQLError, parse_query
from watchdog.promtool.notation import SeriesNotationError, expand_values
from watchdog.promtool.runner import run_test_files

PROMTOOL = shutil.which("promtool")
# value string -> promtool 2.42 accepts it
NOTATION = {
    "1+-1x2": False, "1-+1x2": False, "1++1x2": False, "1--1x2": False,
    "0x1F": False, "0x1f": False, "0x1Fx2": False, "1+0x1x2": False,
    "0x2": True, "1+0x2": True, "-1+1x2": True, "+1-1x2": True, "1e+3": True, "-NaN": True,
}


def _promtool(tmp_path: Path, name: str, text: str) -> str:
    assert PROMTOOL is not None
    path = tmp_path / name
    path.write_text(text)
    done = subprocess.run([PROMTOOL, *(["check", "rules"] if "groups:" in text else ["test", "rules"]), name],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def _series_file(values: str) -> str:
    return ("rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"
            f"      - series: 'x'\n        values: '{values}'\n")


@pytest.mark.parametrize("values", sorted(NOTATION))
def test_series_notation_accepts_what_promtool_accepts(tmp_path: Path, values: str) -> None:
    try:
        expand_values(values)
        ours = True
    except SeriesNotationError:
        ours = False
    assert ours is NOTATION[values]
    if PROMTOOL is not None:
        assert ("FAILED" not in _promtool(tmp_path, "t.yaml", _series_file(values))) is ours


@pytest.mark.parametrize(("expr", "accepted"), [
    ("clock_offset - 5m", False), ("my:offset - 5m", False), ("offset - 5m", False), ("x - 5m", False),
    ("x offset -5m", True), ("x OFFSET 5m", True), ("rate(x[5m] offset 1h)", True),
])
def test_a_duration_as_a_number_is_refused_after_any_name_ending_in_offset(
        tmp_path: Path, expr: str, accepted: bool) -> None:
    try:
        parse_query(expr)
        ours = True
    except PromQLError:
        ours = False
    assert ours is accepted
    if PROMTOOL is not None:
        rules = f"groups:\n- name: g\n  rules:\n  - record: r\n    expr: {expr}\n"
        assert ("SUCCESS" in _promtool(tmp_path, "r.yaml", rules)) is accepted


EXPRS = """rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'x{i="a"}'
        values: '0.927 0.871 0.517 0.749 5'
    promql_expr_test:
      - {expr: 'exp(x * -1e300)', eval_time: 0m}
      - {expr: 'exp(x * 1e300)', eval_time: 0m}
      - {expr: 'cosh(x)', eval_time: 0m}
      - {expr: 'cosh(x)', eval_time: 1m}
      - {expr: 'sinh(x)', eval_time: 0m}
      - {expr: 'sinh(x)', eval_time: 2m}
      - {expr: 'sinh(x)', eval_time: 3m}
      - {expr: 'count_over_time(topk(NaN, x @ 0)[20s:])', eval_time: 90s}
      - {expr: 'count_over_time(topk(NaN, x @ 0)[20s:1m])', eval_time: 90s}
      - {expr: 'count_over_time(topk(NaN, x)[20s:])', eval_time: 90s}
      - {expr: 'count_over_time(topk(NaN, x @ 0)[1m:])', eval_time: 90s}
"""
# What promtool 2.42 prints for each (no expected samples are given, so every case with a result reports
# it; ``topk(NaN, x)[20s:]``, whose window holds no step and whose inner expression is not step-invariant,
# evaluates nothing, passes and prints nothing).
PROMTOOL_SAYS = [
    ("exp(x * -1e300)", "got: {i=\"a\"} 0E+00"),
    ("exp(x * 1e300)", "got: {i=\"a\"} +Inf"),
    ("cosh(x)", "got: {i=\"a\"} 1.4613280963753974E+00"),
    ("cosh(x)", "got: {i=\"a\"} 1.4039158826677518E+00"),
    ("sinh(x)", "got: {i=\"a\"} 1.0655889476041605E+00"),
    ("sinh(x)", "got: {i=\"a\"} 5.403411703384209E-01"),
    ("sinh(x)", "got: {i=\"a\"} 8.21022459593773E-01"),
    ("count_over_time(topk(NaN, x @ 0)[20s:])", "err: Scalar value NaN overflows int64"),
    ("count_over_time(topk(NaN, x @ 0)[20s:1m])", "err: Scalar value NaN overflows int64"),
    ("count_over_time(topk(NaN, x @ 0)[1m:])", "err: Scalar value NaN overflows int64"),
]


def _results(stderr: str) -> list[tuple[str, str]]:
    """(expr, its error or what it got), in order."""
    out = []
    for match in re.finditer(r'expr: "([^"]*)", time: [^,]*,(?: (err: [^\n]*)|\n\s*exp: [^\n]*\n\s*(got: [^\n]*))',
                             stderr):
        out.append((match.group(1), match.group(2) or match.group(3)))
    return out


def test_exp_cosh_sinh_and_a_stepless_topk_as_promtool(tmp_path: Path) -> None:
    path = tmp_path / "exprs.yaml"
    path.write_text(EXPRS)
    err = io.StringIO()
    run_test_files([str(path)], io.StringIO(), err)
    ours = _results(err.getvalue())
    assert ours == PROMTOOL_SAYS
    if PROMTOOL is not None:
        assert _results(_promtool(tmp_path, "exprs.yaml", EXPRS)) == ours
