"""``to_promql``: our expression tree printed back parses to the same tree (every shipped rule, and the
constructs the shipped rules lack)."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.promql.parse import parse_expr
from watchdog.rules.loader import load_rule_files
from watchdog.rules.unparse import to_promql

ROOT = Path(__file__).resolve().parents[2]
RULES = load_rule_files(sorted(str(p) for p in (ROOT / "rules").glob("*.yaml")))


def test_every_shipped_rule_round_trips() -> None:
    rules = [rule for group in RULES.groups for rule in group.rules]
    assert len(rules) > 100
    for rule in rules:
        assert parse_expr(to_promql(rule.query.expr)) == rule.query.expr, rule.name


@pytest.mark.parametrize("text", [
    'x offset 5m', 'x offset -1m30s', 'x @ 1700000000.5', 'rate(x[5m] @ end())', 'x @ start() offset 1h',
    'max_over_time((a + b)[10m:30s] offset 1m)', 'min_over_time(rate(x[1m])[5m:])',
    'a > bool on (b) group_left (c, d) e', 'a - ignoring (le) group_right () b', 'a and on () b', 'a or b unless c',
    '-(a + b) ^ 2', '-a ^ b', '2 ^ 3 ^ 4', '(2 ^ 3) ^ 4', 'a / (b * c)', 'topk(3, x)', 'quantile without (a) (0.9, x)',
    'count_values("v", x)', 'label_replace(x, "dst", "$1", "src", "(.*)")', '{__name__=~"a|b", c!~"d\\\\.e"}',
    'x{a="quote\\"d", b="new\\nline", c="ünï"}', 'NaN', 'Inf', '-Inf', '1e+300', '0.000123', 'vector(1) * -2',
    'sum by (a) (x) > scalar(y)', 'timestamp((x))', 'absent(nonexistent{job="a"})',
])
def test_constructs_round_trip(text: str) -> None:
    expr = parse_expr(text)
    assert parse_expr(to_promql(expr)) == expr, to_promql(expr)
