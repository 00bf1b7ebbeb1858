"""A page read through the remembered layout of the previous one (``PageMemo``) yields what a parse with
nothing cached yields: same samples, same errors, and the layout is used only where that holds."""

from __future__ import annotations

import pytest

from watchdog.exposition import ExpositionError, PageMemo, parse_columns
from watchdog.model import Labels, make_labels

BASE = """\
# HELP x_total Requests.
# TYPE x_total counter
x_total{model_name="m"} 1
x_created{model_name="m"} 1.7e9
# TYPE h histogram
h_bucket{le="0.5"} 2
h_bucket{le="+Inf"} 3
h_count 3
h_sum 1.25
h_created 1.7e9
g{path="/a b"} 7.5

g{path="c"} NaN
"""


def relabel(labels: Labels) -> Labels:
    return make_labels({**dict(labels), "job": "j"})


def uncached(text: str) -> tuple[list[Labels], list[float]]:
    return parse_columns(text, drop_created=True, cache={}, relabel=relabel)


class Reader:
    """One endpoint's parses: its own cache and memo, as the engine collector keeps them."""

    def __init__(self) -> None:
        self.cache: dict[str, Labels] = {}
        self.memo = PageMemo()

    def read(self, text: str) -> tuple[list[Labels], list[float]]:
        return parse_columns(text, drop_created=True, cache=self.cache, relabel=relabel, memo=self.memo)


def same(a: tuple[list[Labels], list[float]], b: tuple[list[Labels], list[float]]) -> bool:
    """Equal columns, values compared as their repr (NaN equals NaN, -0.0 differs from 0.0)."""
    return a[0] == b[0] and [repr(v) for v in a[1]] == [repr(v) for v in b[1]]


def with_values(step: int) -> str:
    """BASE with every sample value moved (the created samples' too), as successive scrapes serve it."""
    return (BASE.replace("} 1\n", f"}} {1 + step}\n").replace(" 3\n", f" {3 + step}\n")
            .replace("1.25", f"{1.25 + step / 3!r}").replace("7.5", f"{7.5 * step}")
            .replace("1.7e9", f"{1.7e9 + step}").replace("NaN", "-0.0" if step % 2 else "+Inf"))


def test_pages_laid_out_alike_are_read_by_the_memo_and_yield_the_uncached_samples() -> None:
    reader = Reader()
    for step in range(6):
        page = with_values(step)
        assert same(reader.read(page), uncached(page)), step
        # the first parse reads new series texts; from the second every line takes a steady path
        assert (reader.memo.labels is not None) is (step > 0)
    first, _ = reader.read(with_values(1))
    again, _ = reader.read(with_values(2))
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert [dict(labels)["__name__"] for labels in first] == ["x_total", "h_bucket", "h_bucket", "h_count",
                                                               "h_sum", "g", "g"]


@pytest.mark.parametrize("change", [
    # a TYPE line changes what is dropped: x_created becomes a sample of its own
    lambda page: page.replace("# TYPE x_total counter", "# TYPE x_total gauge"),
    # a sample with a timestamp whose value did not move: the timestamp is not the value
    lambda page: page.replace("h_count 3", "h_count 3 1700000000000"),
    # same number of lines, another series
    lambda page: page.replace('g{path="c"}', 'g{path="d"}'),
    # a line more, a line less
    lambda page: page + "extra 1\n",
    lambda page: page.replace("h_count 3\n", ""),
    # a blank line that now holds a sample, a comment that moved
    lambda page: page.replace("\n\n", "\nnew 4\n"),
    lambda page: page.replace("# HELP x_total Requests.", "# HELP x_total Requests served."),
    # line ends, indentation, an exemplar, an OpenMetrics end
    lambda page: page.replace("h_sum 1.25\n", "h_sum 1.25\r\n"),
    lambda page: page.replace("h_count 3", "  h_count 3"),
    lambda page: page.replace('h_bucket{le="0.5"} 2', 'h_bucket{le="0.5"} 2 # {trace_id="a"} 0.4'),
    lambda page: page.replace("\n\n", "\n# EOF\n"),
    # values the steady path does not read: with an underscore, spelled as the format allows
    lambda page: page.replace("h_sum 1.25", "h_sum 1_25"),
    lambda page: page.replace("7.5", "7.5e0"),
    lambda page: page.replace("x_created{model_name=\"m\"} 1.7e9", "x_created{model_name=\"m\"} 1_7"),
])
def test_a_page_laid_out_otherwise_is_parsed_line_by_line(change: object) -> None:
    reader = Reader()
    for page in (BASE, BASE, change(BASE), change(BASE), BASE, change(with_values(3))):  # type: ignore[operator]
        try:
            expected = uncached(page)
        except ExpositionError as exc:
            with pytest.raises(ExpositionError, match=f"line {exc.line_no}:"):
                reader.read(page)
            continue
        assert same(reader.read(page), expected), page


@pytest.mark.parametrize("bad", ["h_sum 1.2.5", "h_sum", "h_sum 1 2 3", "h_sum 0x10", 'g{path="c"} abc'])
def test_a_bad_value_in_a_remembered_layout_raises_what_the_uncached_parse_raises(bad: str) -> None:
    reader = Reader()
    reader.read(BASE)
    reader.read(BASE)
    assert reader.memo.labels is not None
    page = BASE.replace("h_sum 1.25", bad) if bad.startswith("h_sum") else BASE.replace('g{path="c"} NaN', bad)
    with pytest.raises(ExpositionError) as expected:
        uncached(page)
    with pytest.raises(ExpositionError, match=f"line {expected.value.line_no}: "):
        reader.read(page)
    assert same(reader.read(BASE), uncached(BASE))  # and the next good page reads as before


def test_the_deadline_check_runs_before_a_remembered_page_too() -> None:
    reader = Reader()
    reader.read(BASE)
    reader.read(BASE)
    seen: list[int] = []

    def check(parsed: int) -> None:
        seen.append(parsed)
        raise TimeoutError

    with pytest.raises(TimeoutError):
        parse_columns(BASE, drop_created=True, cache=reader.cache, relabel=relabel, memo=reader.memo, check=check)
    assert seen == [0]


def test_the_returned_labels_are_the_callers() -> None:
    reader = Reader()
    reader.read(BASE)
    labels, _ = reader.read(BASE)
    labels.clear()
    assert same(reader.read(BASE), uncached(BASE))


@pytest.mark.parametrize("pages", [["x 1\n", "x 2\n", "x 3\n"], ["x 1", "x 2", "y 2"], ["", "", "x 1"],
                                   ["# TYPE x counter\nx_created 1\n"] * 3])
def test_pages_of_one_line_or_none(pages: list[str]) -> None:
    reader = Reader()
    for page in pages:
        assert same(reader.read(page), uncached(page))


def test_the_memo_holds_the_caches_own_strings() -> None:
    reader = Reader()
    reader.read(BASE)
    reader.read(with_values(1))
    series_texts = {id(key) for key in reader.cache}
    assert reader.memo._heads and all(id(head) in series_texts for head in reader.memo._heads)
