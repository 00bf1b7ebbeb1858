"""Parsing and validation: what Prometheus 2.42 accepts, we accept; the rest is a named error."""

from __future__ import annotations

import pytest

from watchdog.promql import SUPPORTED_FUNCTIONS, PromQLError, parse_query
from watchdog.promql import nodes as n


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("limitk(2, up)", "limitk"),
        ("info(up)", "info"),
        ("sort_by_label(up, 'job')", "sort_by_label"),
        ("mad_over_time(up[5m])", "mad_over_time"),
        ("double_exponential_smoothing(up[5m], 0.1, 0.1)", "double_exponential_smoothing"),
        ("no_such_function(up)", "no_such_function"),
        ('up{job="a" or job="b"}', "'or'"),
        ("sum(up", "unclosed"),
        ("rate(up)", "expected type matrix"),
        ("1 == 1", "BOOL"),
        ("up + bool up", "bool modifier"),
        ("", "empty"),
        ("{}", "at least one non-empty matcher"),
    ],
)
def test_unsupported_or_invalid_queries_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(PromQLError) as info:
        parse_query(text)
    assert fragment in str(info.value)
    assert info.value.kind == "bad_data"


def test_unknown_function_message_matches_the_contract() -> None:
    with pytest.raises(PromQLError, match="unsupported function 'holt_winterz'"):
        parse_query("holt_winterz(up[5m], 0.1, 0.1)")


def test_every_2_42_function_parses() -> None:
    examples = {
        "vector": "vector(1)", "time": "time()", "pi": "pi()", "scalar": "scalar(up)",
        "label_replace": 'label_replace(up, "a", "$1", "b", "(.*)")',
        "label_join": 'label_join(up, "a", ",", "b", "c")',
        "histogram_quantile": "histogram_quantile(0.9, up)",
        "histogram_fraction": "histogram_fraction(0, 1, up)",
        "quantile_over_time": "quantile_over_time(0.5, up[5m])",
        "predict_linear": "predict_linear(up[5m], 60)",
        "holt_winters": "holt_winters(up[5m], 0.5, 0.5)",
        "clamp": "clamp(up, 0, 1)", "clamp_min": "clamp_min(up, 0)", "clamp_max": "clamp_max(up, 1)",
        "round": "round(up, 0.5)",
    }
    for name in SUPPORTED_FUNCTIONS:
        if name in examples:
            text = examples[name]
        elif name.endswith("_over_time") or name in {"rate", "irate", "increase", "delta", "idelta",
                                                        "deriv", "changes", "resets"}:
            text = f"{name}(up[5m])"
        else:
            text = f"{name}(up)"
        assert parse_query(text).value_type in (n.VECTOR, n.SCALAR), name


def test_selector_matchers_put_the_name_first() -> None:
    query = parse_query('{job="a", __name__="up"} offset 1m')
    (selector,) = query.selectors()
    assert selector.matchers[0] == ("__name__", "=", "up")
    assert selector.offset_ms == 60_000


def test_durations_offsets_and_at_are_integer_milliseconds() -> None:
    query = parse_query("rate(x[1m30s] offset -2m @ 1700000000.5)")
    call = query.expr
    assert isinstance(call, n.Call)
    matrix = call.args[0]
    assert isinstance(matrix, n.MatrixSelector)
    assert matrix.range_ms == 90_000
    assert matrix.selector.offset_ms == -120_000
    assert matrix.selector.at == n.At(1_700_000_000_500)
    assert parse_query("x @ start()").selectors()[0].at == n.At(None)
    assert parse_query("x @ end()").selectors()[0].at == n.At(None, end=True)


def test_subquery_step_and_default_step() -> None:
    explicit = parse_query("max_over_time(x[10m:30s])").expr
    default = parse_query("max_over_time(x[10m:])").expr
    assert isinstance(explicit, n.Call) and isinstance(default, n.Call)
    assert explicit.args[0] == n.Subquery(parse_query("x").expr, 600_000, 30_000)
    assert isinstance(default.args[0], n.Subquery) and default.args[0].step_ms is None


def test_value_types_and_matching() -> None:
    assert parse_query("1 + 2").value_type == n.SCALAR
    assert parse_query("up[5m]").value_type == n.MATRIX
    assert parse_query('"text"').value_type == n.STRING
    binary = parse_query("a * on(x) group_left(y) b").expr
    assert isinstance(binary, n.Binary)
    assert binary.matching == n.VectorMatching(n.CARD_MANY_TO_ONE, True, ("x",), ("y",))
    set_op = parse_query("a and b").expr
    assert isinstance(set_op, n.Binary) and set_op.matching is not None
    assert set_op.matching.card == n.CARD_MANY_TO_MANY
    assert isinstance(parse_query("a > 1").expr, n.Binary)


def test_queries_are_cached_and_keep_their_text() -> None:
    assert parse_query("up") is parse_query("up")
    assert parse_query("sum(up)").text == "sum(up)"


@pytest.mark.parametrize(
    "text", ['{"my.metric"}', 'up{"job"="a"}', "time() - 10m", "up > 5m", "1_000", "foo[5m] anchored"]
)
def test_prometheus_3_syntax_is_rejected(text: str) -> None:
    with pytest.raises(PromQLError):
        parse_query(text)


@pytest.mark.parametrize(
    "text",
    ["up offset 5m", "up offset -1h30m", 'up{job="5m"}', "rate(up[5m:30s] offset 1m)", "rate5m",
     'label_replace(up, "a", "5m", "b", "(.*)")', "up{job=`x`}"],
)
def test_durations_where_2_42_allows_them(text: str) -> None:
    parse_query(text)


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [("(?i)DB", "db", True), ("d(?i)B", "Db", False), (r"\w+", "über", False), ("[[:alpha:]]+", "ab", True),
     (r"\p{L}+", "über", True), ("a.b", "a\nb", False), ("abc", "abc\n", False), ("x(?i)a|b", "B", True)],
)
def test_regex_matchers_have_re2_semantics(pattern: str, value: str, matches: bool) -> None:
    from watchdog.golang.goregexp import compile_anchored

    assert (compile_anchored(pattern).match(value) is not None) is matches


@pytest.mark.parametrize("pattern", ["(?=a)", r"(a)\1", "("])
def test_regexes_go_rejects_are_parse_errors(pattern: str) -> None:
    with pytest.raises(PromQLError, match=r"regex|regular expression"):
        parse_query(f'up{{job=~"{pattern}"}}'.replace("\\", "\\\\"))


def test_errors_carry_the_position_of_the_construct() -> None:
    with pytest.raises(PromQLError) as info:
        parse_query("sum(up) /\n  holt_winterz(up[5m], 0.1, 0.1)")
    assert str(info.value) == "2:3: unsupported function 'holt_winterz'"
