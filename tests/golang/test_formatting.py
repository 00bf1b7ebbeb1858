"""Go value formatting, durations, label sets and RE2 template functions: literal inputs, Go's outputs."""

from __future__ import annotations

import math

import pytest

from watchdog.golang.gofmt import sprint, sprintf
from watchdog.golang.gostrconv import format_float, quote
from watchdog.rules.durations import (
    DurationError,
    format_duration,
    format_go_duration,
    parse_duration,
    parse_time_arg,
)
from watchdog.rules.labelsets import MetricSyntaxError, format_labels_go, parse_metric
from watchdog.rules.templates import TemplateContext, expand


@pytest.mark.parametrize(("value", "expected"), [
    (1234567.0, "1.234567e+06"), (123456.0, "123456"), (0.0001, "0.0001"), (0.00001, "1e-05"),
    (1e21, "1e+21"), (0.5, "0.5"), (-0.0, "-0"), (0.0, "0"), (3.0, "3"), (math.inf, "+Inf"),
    (-math.inf, "-Inf"), (math.nan, "NaN"), (2.5e-05, "2.5e-05"), (0.1 + 0.2, "0.30000000000000004"),
])
def test_format_float_shortest_matches_go_v(value: float, expected: str) -> None:
    assert format_float(value) == expected


@pytest.mark.parametrize(("fmt", "args", "expected"), [
    ("%.2f", [1234567.0], "1234567.00"),
    ("%d", [1.5], "%!d(float64=1.5)"),
    ("%s", [], "%!s(MISSING)"),
    ("%d", [1, 2], "1%!(EXTRA int=2)"),
    ("%05d|%-4s|%x|%q", [-42, "ab", 255, "a\n"], '-0042|ab  |ff|"a\\n"'),
    ("%x", [3.0], "0x1.8p+01"),
    ("%v %v", [{"b": "2", "a": "1"}, True], "map[a:1 b:2] true"),
    ("%5.1f|%e|%g", [math.inf, 1.0, 1e6], " +Inf|1.000000e+00|1e+06"),
    ("%!", [], "%!!(MISSING)"),
    ("100%", [], "100%!(NOVERB)"),
])
def test_sprintf_matches_go(fmt: str, args: list[object], expected: str) -> None:
    assert sprintf(fmt, args) == expected


def test_sprint_spaces_only_between_non_strings() -> None:
    assert sprint([1, 2, "a", 3, "b", "c"]) == "1 2a3bc"


def test_go_quote_escapes_controls() -> None:
    assert quote('a"b\\c\x01') == '"a\\"b\\\\c\\x01"'


@pytest.mark.parametrize(("text", "ms"), [
    ("0", 0), ("90s", 90_000), ("1h30m", 5_400_000), ("1w", 604_800_000), ("2y", 2 * 365 * 86_400_000),
    ("500ms", 500), ("1d2h", 93_600_000),
])
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "5", "1.5m", "1m1h", "-1m", "5x"])
def test_parse_duration_rejects_what_prometheus_rejects(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def test_duration_formats() -> None:
    assert format_duration(5_400_000) == "1h30m"
    assert format_duration(0) == "0s"
    assert format_duration(90 * 86_400_000) == "90d"
    assert format_duration(14 * 86_400_000) == "2w"
    assert format_go_duration(300_000) == "5m0s"
    assert format_go_duration(3_600_000) == "1h0m0s"
    assert format_go_duration(1_500) == "1.5s"
    assert parse_time_arg("10m") == 600_000
    assert parse_time_arg("1.5") == 1_500
    with pytest.raises(DurationError):
        parse_time_arg("nan")


def test_parse_metric_forms() -> None:
    assert parse_metric('up{job="a", instance=\'b\',}') == {"__name__": "up", "job": "a", "instance": "b"}
    assert parse_metric("{}") == {}
    assert parse_metric("") == {}
    assert parse_metric('x{a="\\"q\\"\\n"}') == {"__name__": "x", "a": '"q"\n'}
    assert parse_metric("a:b_c") == {"__name__": "a:b_c"}
    for bad in ['up{job=~"a"}', "up{job}", 'up{job="a"', "up foo"]:
        with pytest.raises(MetricSyntaxError):
            parse_metric(bad)


def test_format_labels_like_go() -> None:
    assert format_labels_go({"b": "2", "__name__": "m", "a": 'x"y'}) == '{__name__="m", a="x\\"y", b="2"}'


@pytest.mark.parametrize(("template", "expected"), [
    ('{{ match "^\\\\w+$" "über" }}', "false"),          # RE2: \w is ASCII-only
    ('{{ match "^\\\\p{L}+$" "über" }}', "true"),
    ('{{ match "a$" "a\\n" }}', "false"),                 # $ is the end of the text
    ('{{ match "a(?i)b|c" "C" }}', "true"),                # a mid-pattern flag covers each branch
    ('{{ reReplaceAll "x*" "-" "abxd" }}', "-a-b-d-"),     # Go skips an empty match right after a match
    ('{{ reReplaceAll "(?P<h>[a-z]+)-(\\\\d)" "${h}_$2x $$" "gpu-7" }}', "gpu_ $"),  # $2x is group "2x"
])
def test_regex_functions_use_go_semantics(template: str, expected: str) -> None:
    assert expand(template, "A", TemplateContext(labels={}, value=0.0, external_labels={})) == expected


def test_invalid_regex_renders_an_error_without_logging(capfd: pytest.CaptureFixture[str]) -> None:
    out = expand('{{ reReplaceAll "(" "" "x" }}', "A", TemplateContext(labels={}, value=0.0, external_labels={}))
    assert 'error calling reReplaceAll: regexp: Compile("("): error parsing regexp: missing ): (' in out
    assert capfd.readouterr().err == ""
