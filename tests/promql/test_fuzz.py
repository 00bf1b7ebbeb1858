"""The differential fuzzer (``tests/promql/fuzz``) on a small fixed-seed budget, and the classes of
disagreement it found, each pinned case by case against real promtool 2.42.

Long runs: ``nice -n 19 scripts/promql-fuzz --seed N --expressions 50000 --alerts 5000``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.promql.fuzz.differ import (
    Totals,
    Workspace,
    alert_test,
    dump,
    expr_test,
    fuzz_alerts,
    fuzz_expressions,
    rule_file,
    show,
)
from tests.promql.fuzz.generate import AlertRule, Generator, leaf

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")

SERIES = [('x{job="a"}', "1 2 3 4 5 6"), ('x{job="b"}', "2 4 6 8 10 12")]

REJECTED_BY_BOTH = [
    "x[5]",  # 2.42 wants a unit in every duration
    "x offset 5",
    "rate(x[5m:5])",
    "1e400",  # strconv.ParseFloat: value out of range
    "0x1p3",
    "1_000",
    'sum by ("job") (x)',  # quoted label names arrived with Prometheus 3
    'x / on("job") x',
    'x{job=~"(?<n>a)"}',  # Go 1.19's RE2 lacks (?<name>)
    'x{job=~"\\\\Qa"}',  # an open \Q swallows the ")$" of Prometheus' anchoring
    "x @ NaN",
    "x @ Inf",
    "x @ 1e19",  # "timestamp out of bounds for @ modifier"
    "last_over_time((vector(-1))[90s:1ms])",  # promtool's engine holds at most 10000 samples
    "increase((clamp_min(x, -1))[1w:] @ 0)",  # a number literal is one sample per subquery step
    "count_over_time(x[1m:1ms])",
]


def _compare_expr(tmp_path: Path, expr: str) -> tuple[str, str]:
    ours, theirs = Workspace(tmp_path).compare({"test.yaml": dump(expr_test(SERIES, [(expr, "3m")]))})
    return show(ours), show(theirs)


@pytest.mark.parametrize("expr", REJECTED_BY_BOTH)
def test_rejected_by_both(tmp_path: Path, expr: str) -> None:
    """promtool rejects the expression, and so do we (an error, not a result, not a crash)."""
    ours, theirs = _compare_expr(tmp_path, expr)
    assert "err: <error>" in theirs, theirs
    assert "err: <error>" in ours and "internal error" not in ours, ours


TEMPLATES = [
    '{{ printf "%+q" "é☺" }}',  # QuoteToASCII
    '{{ printf "%#q|%#q" "é☺" "a`b" }}',  # backquoted when it can be
    '{{ printf "%q %+q" 233 233 }}',
    '{{ reReplaceAll "(a)(b)" "$1é|${1}é|$2_|$$1" "ab" }}',  # Go's $name is letters, digits, _
    '{{ printf "%[2]v %[1]v|%[3]*.[2]*[1]f|%[5]d|%[0]d" 12.0 2 6 }}',  # argument indexes
    '{{ printf "%#v|%#v|%#v" $labels.job 1.0 $labels }}',  # Go syntax
    '{{ printf "%U|%#U|%6.2U" 1234 65 65 }}',
    '{{ printf "%5.1s|%-6d|%.*d|%!|%z" 3.14 "s" -1 5 1 }}',  # bad verbs keep width and precision
    '{{ printf "%#g|%#.3g|%#.0f|% #x" 1.0 2.5 4.0 "hi" }}',
    '{{ toUpper "ǆ ß ﬃ ǰ ᾳ" }} {{ toLower "İ Σ ǅ ᾈ" }} {{ title "wörld ǆ ß ᾳx" }}',  # simple case maps
    '{{ define "x" }}[{{ . }}]{{ end }}{{ template "x" $labels.job }}-{{ template "x" }}',
    '{{ block "b" $value }}B{{ . }}{{ end }} {{ template "missing" }}',  # an error at execution
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_template_agrees(tmp_path: Path, template: str) -> None:
    """An annotation renders to exactly promtool's text."""
    rule = AlertRule("A", leaf("v", "x"), None, None, {}, {"s": template})
    ours, theirs = Workspace(tmp_path).compare({
        "test.yaml": dump(alert_test(SERIES, [rule], ["1m"], with_series_checks=False)),
        "rules.yaml": dump(rule_file([rule])),
    })
    assert show(ours) == show(theirs)
    assert "Annotations" in show(theirs)


def test_fixed_seed_budget_agrees(tmp_path: Path) -> None:
    """A small fixed-seed fuzz budget: every expression and alert rule agrees with promtool."""
    totals = Totals()
    gen = Generator(seed=2042, weird=0.05)
    ws = Workspace(tmp_path)
    logged: list[str] = []
    fuzz_expressions(gen, ws, batches=5, per_batch=200, totals=totals, log=logged.append)
    fuzz_alerts(gen, ws, batches=4, per_batch=25, totals=totals, log=logged.append)
    assert totals.expressions == 1000 and totals.alerts == 100
    assert not totals.found, "\n\n".join(logged)


RULE_FIELDS = [
    ("for", "5"), ("for", '""'), ("for", ""), ("for", '"0"'), ("for", "1.5m"), ("for", "01m"),
    ("keep_firing_for", '""'), ("keep_firing_for", "5"),
    ("limit", '""'), ("limit", '"3"'), ("limit", "1.5"), ("limit", "-1"), ("limit", ""), ("limit", "x"),
    ("interval", '""'), ("interval", ""), ("interval", "5"),
]


@pytest.mark.parametrize(("key", "value"), RULE_FIELDS)
def test_rule_file_fields_accepted_exactly_when_promtool_accepts(tmp_path: Path, key: str, value: str) -> None:
    """``promtool check rules`` and our loader accept and reject the same field values."""
    import subprocess

    from watchdog.rules.loader import RuleLoadError, load_rule_text

    group_field = key in ("limit", "interval")
    text = (f"groups:\n  - name: g\n{f'    {key}: {value}' + chr(10) if group_field else ''}    rules:\n"
            f"      - alert: A\n        expr: up\n{'' if group_field else f'        {key}: {value}' + chr(10)}")
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    promtool_ok = subprocess.run([shutil.which("promtool") or "promtool", "check", "rules", str(path)],
                                 capture_output=True, timeout=60, check=False).returncode == 0
    try:
        load_rule_text(text, str(path))
        ours_ok = True
    except RuleLoadError:
        ours_ok = False
    assert ours_ok == promtool_ok, text
