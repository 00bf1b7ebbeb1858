"""The exposition parser: agreement with prometheus_client on every fixture, edge cases, errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from watchdog.exposition import ExpositionError, clear_cache, parse_exposition, parse_samples, parse_types
from watchdog.model import Labels, make_labels, metric

ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
FIXTURES = sorted(ENGINES.glob("*.txt")) + sorted((ENGINES / "real").glob("*.txt"))  # generated, then captured


def reference(text: str) -> list[tuple[tuple[tuple[str, str], ...], float]]:
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((make_labels({**s.labels, "__name__": s.name}), s.value))
    return out


def canon(samples: list[tuple[tuple[tuple[str, str], ...], float]]) -> list[tuple[object, str]]:
    return sorted((labels, repr(value)) for labels, value in samples)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_fixture_parses_like_prometheus_client(path: Path) -> None:
    text = path.read_text(encoding="utf-8")

    def parsed(drop_created: bool = False, cache: dict[str, Labels] | None = None) -> list[tuple[Labels, str]]:
        """The samples with their values as repr (NaN equals NaN)."""
        return [(labels, repr(value)) for labels, value, _ in
                parse_exposition(text, drop_created=drop_created, cache=cache)]

    ours = parsed()
    assert sorted(ours) == canon(reference(text))
    clear_cache()  # cold and warm parses agree
    assert parsed() == ours
    assert parsed() == ours  # warm (the module's cache)
    cache: dict[str, Labels] = {}
    for _ in range(2):  # a caller's own cache, cold then warm, with _created samples dropped
        assert parsed(drop_created=True, cache=cache) == [
            (labels, value) for labels, value in ours if not _is_created(labels, text)], path.name


def _is_created(labels: Labels, text: str) -> bool:
    """A ``<family>_created`` sample of a counter/histogram/summary family the text declares."""
    name = dict(labels)["__name__"]
    if not name.endswith("_created"):
        return False
    types = parse_types(text)
    base = name[: -len("_created")]
    return any(types.get(family) in ("counter", "histogram", "summary", "gaugehistogram")
               for family in (base, base + "_total"))


def test_created_samples_of_prometheus_client_counters_and_histograms_are_dropped() -> None:
    text = """\
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0"} 3.0
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0"} 1.7e+09
# TYPE lat histogram
lat_bucket{le="+Inf"} 1.0
lat_count 1.0
lat_sum 0.5
# TYPE lat_created gauge
lat_created 1.7e+09
# TYPE a_gauge_created gauge
a_gauge_created 5
"""
    names = [dict(labels)["__name__"] for labels, _, _ in parse_exposition(text, drop_created=True)]
    assert names == ["vllm:num_preemptions_total", "lat_bucket", "lat_count", "lat_sum", "a_gauge_created"]
    assert len(parse_samples(text)) == 7


def test_escapes_special_values_timestamps_exemplars_and_comments() -> None:
    text = (
        '# HELP weird A help line with "quotes" and \\\\ backslashes\n'
        "# TYPE weird gauge\n"
        "# just a comment\n"
        "\n"
        'weird{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",brace="}{",unknown="\\q"} 1 1700000000000\r\n'
        "nan_value NaN\n"
        "pos_inf +Inf\n"
        "neg_inf -Inf\n"
        'hist_bucket{le="0.5"} 3 # {trace_id="abc"} 0.4 1700000000.1\n'
        "  indented 2\n"
        "tabbed\t4\n"
        'empty{dropped=""} 5\n'
        "# EOF\n"
        "after_eof 1\n"
    )
    samples = parse_samples(text)
    by_name = {dict(labels)["__name__"]: (dict(labels), value, ts) for labels, value, ts in samples}
    labels, value, ts = by_name["weird"]
    assert labels == {"__name__": "weird", "path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb",
                      "brace": "}{", "unknown": "\\q"}
    assert (value, ts) == (1.0, 1700000000000)
    assert math.isnan(by_name["nan_value"][1])
    assert by_name["pos_inf"][1] == math.inf and by_name["neg_inf"][1] == -math.inf
    assert by_name["hist_bucket"][1] == 3.0
    assert by_name["indented"][1] == 2.0 and by_name["tabbed"][1] == 4.0
    assert by_name["empty"][0] == {"__name__": "empty"}
    assert "after_eof" not in by_name


def test_the_series_cache_does_not_confuse_label_values_containing_braces() -> None:
    first = 'm{a="x}",b="1"} 1\n'
    second = 'm{a="x"} 2\n'
    assert parse_samples(first)[0][0] == metric("m", a="x}", b="1")
    assert parse_samples(second)[0][0] == metric("m", a="x")
    assert parse_samples(first)[0][0] == metric("m", a="x}", b="1")


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("ok 1\nbad{a=1} 2\n", 2, "label name"),
        ('m{a="1"}2\n', 1, "whitespace"),
        ('m{a="1" 2\n', 1, "','"),
        ('m{a="unterminated} 2\n', 1, "unterminated"),
        ('m{a="1",a="2"} 3\n', 1, "duplicate"),
        ("m one\n", 1, "invalid sample value"),
        ("m 1_000\n", 1, "invalid sample value"),
        ("m 1 2 3\n", 1, "unexpected text"),
        ("m\n", 1, "missing sample value"),
        ("m 1 abc\n", 1, "invalid timestamp"),
        ("1m 1\n", 1, "metric name"),
        ("# TYPE m sometype\n", 1, "unknown metric type"),
        ("# TYPE\n", 1, "metric name"),
        ("m 1 # not an exemplar\n", 1, "'#'"),
        ("<html><body>502 Bad Gateway</body></html>\n", 1, "metric name"),
    ],
)
def test_garbage_raises_with_the_line_number(text: str, line: int, fragment: str) -> None:
    with pytest.raises(ExpositionError) as info:
        parse_samples(text)
    assert info.value.line_no == line
    assert fragment in info.value.message


TRICKY = (
    '# HELP m A metric.\r\n# TYPE m counter\nm_total 1\r\nm_created 1.7e9\n  m_total 2\n'
    'n{a="x y",b="}"} 3\nn{a="x y",b="}"}\t4\nn{a="x y",b="}"} 5 1700000000000\n'
    'n{a="x y",b="}"} 6 # {trace_id="t"} 1\no +Inf\no NaN\no -inf\n'
)


def test_a_warm_parse_gives_what_a_cold_one_gives() -> None:
    """The steady-state path (series text cached by an earlier scrape, comment lines memoised) yields
    exactly what a cold parse yields, ``_created`` samples dropped, timestamps and exemplars included."""
    def parse(cache: dict[str, Labels]) -> list[tuple[Labels, str, int | None]]:
        return [(labels, repr(value), ts) for labels, value, ts in
                parse_exposition(TRICKY, drop_created=True, cache=cache)]

    clear_cache()
    cold = parse({})
    cache: dict[str, Labels] = {}
    assert parse(cache) == cold and cache
    assert parse(cache) == cold
    assert [ts for _, _, ts in cold] == [None, None, None, None, 1700000000000, None, None, None, None]
    assert not any(dict(labels)["__name__"] == "m_created" for labels, _, _ in cold)


@pytest.mark.parametrize("line", ["m one", "m 1_000", "m 1 2 3", "m 1 abc", "m 1 # not an exemplar", "m",
                                  'n{a="1"} one', 'n{a="1"} ', 'n{a="1"} 1 # x'])
def test_garbage_after_its_series_text_was_cached_raises_as_when_cold(line: str) -> None:
    text = f"m 1\nn{{a=\"1\"}} 1\n{line}\n"
    clear_cache()
    with pytest.raises(ExpositionError) as cold:
        parse_samples(text)
    parse_samples("m 5\nn{a=\"1\"} 5\n")  # the series texts are cached now
    with pytest.raises(ExpositionError) as warm:
        parse_samples(text)
    assert (warm.value.line_no, warm.value.message) == (cold.value.line_no, cold.value.message) == (
        3, cold.value.message)


def test_parse_types() -> None:
    text = "# TYPE a counter\n# TYPE b histogram\n# HELP c x\nc 1\n# TYPE d GAUGE\n"
    assert parse_types(text) == {"a": "counter", "b": "histogram", "d": "gauge"}


def test_memoised_comment_lines_with_stray_line_ends_and_indentation_read_as_when_cold() -> None:
    page = ("# TYPE a counter\r\r\n# TYPE a counter\r\n  # TYPE b counter\n# TYPE b counter\n"
            "a_total 1\na_created 2\r\nb_created 3\n \t \nc 4\r\n# EOF\r\nafter 5\n")

    def parsed() -> list[tuple[Labels, float, int | None]]:
        return list(parse_exposition(page, drop_created=True, cache={}))

    clear_cache()
    cold = parsed()
    assert cold == [(metric("a_total"), 1.0, None), (metric("c"), 4.0, None)]
    assert parsed() == parsed() == cold  # every comment line memoised by now
    clear_cache()
    with pytest.raises(ExpositionError, match="line 2"):
        list(parse_exposition("# TYPE a counter\n# TYPE a nonsense\n"))
    with pytest.raises(ExpositionError, match="line 3"):  # a line memoised as valid never hides a bad one
        list(parse_exposition("# TYPE a counter\n# TYPE a counter\n# TYPE a nonsense\n"))
