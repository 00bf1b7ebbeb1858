"""Prometheus HTTP API formatting of values and results."""

from __future__ import annotations

import math

import pytest

from watchdog.golang.gomath import format_api_value
from watchdog.golang.gostrconv import format_float, parse_float
from watchdog.model import metric
from watchdog.promql import MatrixList, RangeSeries, Scalar, String, VectorSample, to_api_json, to_text_lines


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e6, "1000000"),
        (0.1, "0.1"),
        (1e-7, "1e-07"),
        (1.5e-7, "1.5e-07"),
        (1e-6, "0.000001"),
        (123.456, "123.456"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (2.5e300, "2.5e+300"),
        (-42.0, "-42"),
        (0.0, "0"),
        (-0.0, "-0"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (1 / 3, "0.3333333333333333"),
        (5e-324, "5e-324"),
    ],
)
def test_api_value_formatting_follows_prometheus(value: float, text: str) -> None:
    assert format_api_value(value) == text


def test_go_f_and_e_formats() -> None:
    assert format_float(1e-7, "f") == "0.0000001"
    assert format_float(1.5e21, "f") == "1500000000000000000000"
    assert format_float(1234.5, "e") == "1.2345e+03"
    assert format_float(-1e-100, "e") == "-1e-100"


@pytest.mark.parametrize(
    ("text", "value"),
    [("+Inf", math.inf), ("-inf", -math.inf), ("Inf", math.inf), ("-Infinity", -math.inf), ("1e3", 1000.0),
     (".5", 0.5), ("5.", 5.0), ("0x10p0", 16.0), ("0x1p-2", 0.25), ("0x_1.8p1", 3.0), ("1", 1.0),
     ("1_000", 1000.0), ("1_0.2_5e1_0", 10.25e10), ("1e-400", 0.0)],
)
def test_parse_float_accepts_what_go_accepts(text: str, value: float) -> None:
    # Go's ParseFloat takes underscores between digits (promtool: le="1_000" is a bucket bound,
    # humanize "1_000" is 1k; see test_against_promtool.py and the template fixture).
    assert parse_float(text) == value


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 ", "1__000", "_1", "1_", "1_e3", "0x1_p0", "abc", "1e", "--1", "0x10", "0x1", "0b1",
     "+NaN", "infinit"],
)
def test_parse_float_rejects_what_go_rejects(text: str) -> None:
    # A hex mantissa needs a p exponent, NaN takes no sign (promtool: le="0x10" is skipped).
    with pytest.raises(ValueError, match="invalid syntax"):
        parse_float(text)


def test_parse_float_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match='parsing "1e400": value out of range'):
        parse_float("1e400")
    with pytest.raises(ValueError, match="value out of range"):
        parse_float("-0x1p2000")
    assert math.isnan(parse_float("NaN"))


def test_vector_json_shape() -> None:
    value = [VectorSample(metric("up", job="a"), 1.0, 1_700_000_000_500)]
    assert to_api_json(value) == {
        "resultType": "vector",
        "result": [{"metric": {"__name__": "up", "job": "a"}, "value": [1_700_000_000.5, "1"]}],
    }


def test_whole_second_timestamps_are_integers() -> None:
    data = to_api_json(Scalar(2.0, 60_000))
    assert data == {"resultType": "scalar", "result": [60, "2"]}
    assert isinstance(data["result"][0], int)


def test_matrix_and_string_shapes() -> None:
    matrix = MatrixList([RangeSeries(metric("x"), [1000, 2000], [1.0, math.nan])])
    assert to_api_json(matrix) == {
        "resultType": "matrix",
        "result": [{"metric": {"__name__": "x"}, "values": [[1, "1"], [2, "NaN"]]}],
    }
    assert to_api_json(MatrixList()) == {"resultType": "matrix", "result": []}
    assert to_api_json([]) == {"resultType": "vector", "result": []}
    assert to_api_json(String("hi", 0)) == {"resultType": "string", "result": [0, "hi"]}


def test_text_lines() -> None:
    value = [VectorSample(metric("up", job="a"), 1.0, 0), VectorSample((), 0.5, 0)]
    assert to_text_lines(value) == ['up{job="a"} => 1', "{} => 0.5"]
    assert to_text_lines(Scalar(math.inf, 0)) == ["scalar => +Inf"]
