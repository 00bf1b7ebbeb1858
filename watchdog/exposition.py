"""Parser of the Prometheus text exposition format (version 0.0.4), built for per-tick scrapes.

Contract:

- :func:`parse_exposition` yields ``(labels, value, timestamp_ms_or_None)`` for every sample line, in
  file order. ``labels`` is canonical :data:`watchdog.model.Labels` (sorted, ``__name__`` included, empty
  label values dropped, as :func:`watchdog.model.make_labels` builds them).
- Accepted: ``# HELP`` / ``# TYPE`` lines (TYPE is checked: known type, valid name), other comments,
  blank lines, ``\\r\\n`` line ends, label escapes ``\\\\``, ``\\"`` and ``\\n`` (an unknown escape is
  kept verbatim, as Prometheus does), a trailing comma inside ``{...}``, values ``NaN``, ``+Inf``,
  ``-Inf`` (any case), optional integer millisecond timestamps, an OpenMetrics exemplar after the value
  (``# {trace_id="..."} 1.0``: ignored) and an OpenMetrics ``# EOF`` line (stops parsing).
- Anything else raises :class:`ExpositionError` with the 1-based line number, for the whole text: the
  generator parses all of it at its first ``next()`` (:func:`parse_columns`, which returns the samples
  as two columns, labels and values, is what it iterates), so a bad page yields no sample.
- ``drop_created=True`` skips the ``<family>_created`` samples of counter, histogram and summary families
  declared by an earlier ``# TYPE`` line (as ``<family>`` or ``<family>_total``): creation timestamps
  that client libraries export; no rule may use them.

Cache: the parsed labels of each series text (``name{...}``) are kept, in the caller's table when it
passes one (one per scrape target, bounded by the caller), else in a bounded module-level table; HELP and
TYPE lines are validated once and remembered. A line whose series text was seen before costs one lookup.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any

from watchdog.model import METRIC_NAME, Labels

__all__ = [
    "ExpositionError",
    "ParsedSample",
    "clear_cache",
    "parse_columns",
    "parse_exposition",
    "parse_samples",
    "parse_types",
]

ParsedSample = tuple[Labels, float, "int | None"]

METRIC_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped", "unknown",
                          "info", "stateset", "gaugehistogram"})
_CREATED_FAMILIES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*\"")
_LABEL_VALUE_RE = re.compile(r'((?:[^"\\\n]|\\.)*)"')
_ESCAPE_RE = re.compile(r"\\(.)")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}

_CACHE_LIMIT = 200_000
_series_cache: dict[str, Labels] = {}
_comment_cache: dict[str, tuple[str, str] | None] = {}


class ExpositionError(ValueError):
    """A line that is not valid exposition text. ``line_no`` is 1-based."""

    def __init__(self, line_no: int, message: str) -> None:
        self.line_no = line_no
        self.message = message
        super().__init__(f"line {line_no}: {message}")


def clear_cache() -> None:
    """Forget every cached series text and comment line (tests and benchmarks use it to measure cold
    parses)."""
    _series_cache.clear()
    _comment_cache.clear()


def _unescape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), value)


def _parse_value(text: str, line_no: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ExpositionError(line_no, f"invalid sample value {text!r}") from None
    if "_" in text:  # Python accepts 1_000; the format does not
        raise ExpositionError(line_no, f"invalid sample value {text!r}")
    return value


def _parse_timestamp(text: str, line_no: int) -> int:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        as_float = float(text)
    except ValueError:
        raise ExpositionError(line_no, f"invalid timestamp {text!r}") from None
    if "_" in text or not math.isfinite(as_float):
        raise ExpositionError(line_no, f"invalid timestamp {text!r}")
    return int(as_float)


def _parse_series(line: str, line_no: int) -> tuple[Labels, int]:
    """Lex ``name{labels}`` at the start of ``line``: the labels and the index just past the series."""
    m = _NAME_RE.match(line)
    if m is None:
        raise ExpositionError(line_no, "expected a metric name")
    name = m.group(0)
    pos = m.end()
    pairs: dict[str, str] = {METRIC_NAME: name}
    n = len(line)
    if pos < n and line[pos] == "{":
        pos += 1
        while True:
            while pos < n and line[pos] in " \t":
                pos += 1
            if pos < n and line[pos] == "}":
                pos += 1
                break
            lm = _LABEL_NAME_RE.match(line, pos)
            if lm is None:
                raise ExpositionError(line_no, f"expected a label name at column {pos + 1}")
            label = lm.group(1)
            vm = _LABEL_VALUE_RE.match(line, lm.end())
            if vm is None:
                raise ExpositionError(line_no, f"unterminated value of label {label!r}")
            raw = vm.group(1)
            if label in pairs:
                raise ExpositionError(line_no, f"duplicate label {label!r}")
            pairs[label] = _unescape(raw) if "\\" in raw else raw
            pos = vm.end()
            while pos < n and line[pos] in " \t":
                pos += 1
            if pos < n and line[pos] == ",":
                pos += 1
            elif pos < n and line[pos] == "}":
                pos += 1
                break
            else:
                raise ExpositionError(line_no, f"expected ',' or '}}' after label {label!r}")
    labels: Labels = tuple(sorted(item for item in pairs.items() if item[1] != ""))
    return labels, pos


_EOF = ("", "")
"""What :func:`_comment` returns for ``# EOF``."""
_UNSEEN = ("#", "")
"""The default of a lookup in :data:`_comment_cache` (compared by identity)."""


def _comment(line: str, line_no: int) -> tuple[str, str] | None:
    """Validate a ``#`` line: ``(name, type)`` for a TYPE line, :data:`_EOF` for ``# EOF``, else None."""
    parts = line.split(None, 3)
    if len(parts) >= 2 and parts[0] == "#":
        keyword = parts[1]
        if keyword == "EOF" and len(parts) == 2:
            return _EOF
        if keyword in ("HELP", "TYPE"):
            if len(parts) < 3 or _NAME_RE.fullmatch(parts[2]) is None:
                raise ExpositionError(line_no, f"# {keyword} needs a valid metric name")
            if keyword == "TYPE":
                kind = parts[3].strip().lower() if len(parts) == 4 else ""
                if kind not in METRIC_TYPES:
                    raise ExpositionError(line_no, f"unknown metric type {kind!r} for {parts[2]}")
                return parts[2], kind
    return None


def _first_comment(line: str, line_no: int) -> tuple[str, str] | None:
    """:func:`_comment` of a ``#`` line not in :data:`_comment_cache`, remembered there when valid (a
    scrape repeats its HELP and TYPE lines: a third of a vLLM page)."""
    found = _comment(line, line_no)
    _bounded_put(_comment_cache, line, found)
    return found


def _bounded_put(table: dict[str, Any], key: str, value: Any) -> None:
    """``table[key] = value``, the module's tables emptied first when they hold :data:`_CACHE_LIMIT` keys."""
    if len(table) >= _CACHE_LIMIT:
        table.clear()
    table[key] = value


def _cache_put(key: str, labels: Labels) -> None:
    _bounded_put(_series_cache, key, labels)


def parse_exposition(text: str, *, drop_created: bool = False, cache: dict[str, Labels] | None = None,
                     relabel: Callable[[Labels], Labels] | None = None) -> Iterator[ParsedSample]:
    """Yield ``(labels, value, timestamp_ms | None)`` per sample line; see the module contract. ``cache``
    (series text -> labels) is the caller's to keep and to bound; without it the module's table is used.

    ``relabel`` (only with the caller's ``cache``) maps each label set as parsed to the one yielded, and
    the cache holds the result: a line whose series text was seen before yields the relabelled set at
    no further cost. It must keep ``__name__``.

    The whole text is parsed at the first ``next()`` (:func:`parse_columns`): a page with a bad line
    raises there, before any of its samples is yielded.
    """
    stamps: dict[int, int] = {}
    labels, values = parse_columns(text, drop_created=drop_created, cache=cache, relabel=relabel,
                                   timestamps=stamps)
    if stamps:
        yield from ((labels[i], values[i], stamps.get(i)) for i in range(len(values)))
    else:
        yield from zip(labels, values, repeat(None))


def parse_columns(text: str, *, drop_created: bool = False, cache: dict[str, Labels] | None = None,
                  relabel: Callable[[Labels], Labels] | None = None, timestamps: dict[int, int] | None = None,
                  check: Callable[[int], None] | None = None,
                  check_every: int = 4096) -> tuple[list[Labels], list[float]]:
    """Every sample of ``text`` as two columns, labels and values, in file order (all or nothing:
    raises :class:`ExpositionError` at the first bad line). ``drop_created``, ``cache`` and ``relabel``
    as for :func:`parse_exposition`. A sample's explicit timestamp is validated and, with ``timestamps``,
    recorded there under the sample's index (most samples have none). ``check`` is called with the
    number of samples parsed so far before each ``check_every`` lines (the first time before any): what
    it raises (a deadline passed) ends the parse.
    """
    if relabel is not None and cache is None:
        raise ValueError("relabel needs the caller's own cache")
    put = _cache_put if cache is None else cache.__setitem__
    get = (_series_cache if cache is None else cache).get
    types: dict[str, str] | None = {} if drop_created else None
    labels_out: list[Labels] = []
    values_out: list[float] = []
    add_labels, add_value = labels_out.append, values_out.append
    known_comments = _comment_cache.get
    lines = text.split("\n")
    for start in range(0, len(lines), check_every):
        if check is not None:
            check(len(values_out))
        for line_no, line in enumerate(lines[start:start + check_every], start + 1):
            if not line:
                continue
            if line[-1] == "\r" or line[0] in " \t":
                line = line.strip(" \t\r")
                if not line or line.isspace():
                    continue
            if line[0] == "#":
                comment = known_comments(line, _UNSEEN)
                if comment is _UNSEEN:
                    comment = _first_comment(line, line_no)
                if comment is _EOF:
                    return labels_out, values_out
                if comment is not None and types is not None:
                    types[comment[0]] = comment[1]
                continue
            # A sample. Once its series text is cached, the line is that text, a space and the value.
            series, space, value_text = line.rpartition(" ")
            labels: Labels | None = get(series) if space else None
            if labels is not None and "_" not in value_text:
                if types is not None and "_created" in series and _is_created(series.partition("{")[0], types):
                    continue
                try:
                    add_value(float(value_text))
                except ValueError:
                    pass  # lexed below, which says what is wrong
                else:
                    add_labels(labels)
                    continue
            if line.isspace():
                continue
            # Lexed: a series text not cached yet (cached now), or a line with more than a value after it
            # (a timestamp, an exemplar, tabs), or a bad line. The cache is keyed by the series text here too.
            brace = line.find("{")
            if brace != -1 and " " not in line[:brace] and "\t" not in line[:brace]:
                name = line[:brace]
                close = line.find("}", brace)  # a '}' inside a label value: a key no series text has
                labels = get(line[:close + 1]) if close != -1 else None
                if labels is not None:
                    rest = line[close + 1:]
                else:
                    labels, end = _parse_series(line, line_no)
                    if relabel is not None:
                        labels = relabel(labels)
                    put(line[:end], labels)
                    rest = line[end:]
                if rest and rest[0] not in " \t":
                    raise ExpositionError(line_no, "expected whitespace after the label set")
            else:
                parts = line.split(None, 1)
                name = parts[0]
                rest = parts[1] if len(parts) == 2 else ""
                labels = get(name)
                if labels is None:
                    labels, end = _parse_series(name, line_no)
                    if end != len(name):
                        raise ExpositionError(line_no, f"unexpected character {name[end]!r} in the metric name")
                    if relabel is not None:
                        labels = relabel(labels)
                    put(name, labels)
            if types is not None and _is_created(name, types):
                continue
            if "#" in rest:
                rest, _, exemplar = rest.partition("#")
                if not exemplar.lstrip().startswith("{"):
                    raise ExpositionError(line_no, "unexpected '#' after the sample value")
            fields = rest.split()
            if len(fields) == 1:
                add_value(_parse_value(fields[0], line_no))
            elif len(fields) == 2:
                value = _parse_value(fields[0], line_no)
                stamp = _parse_timestamp(fields[1], line_no)
                if timestamps is not None:
                    timestamps[len(values_out)] = stamp
                add_value(value)
            elif not fields:
                raise ExpositionError(line_no, "missing sample value")
            else:
                raise ExpositionError(line_no, f"unexpected text after the sample: {' '.join(fields[2:])!r}")
            add_labels(labels)
    return labels_out, values_out


def _is_created(name: str, types: dict[str, str]) -> bool:
    """True when ``name`` is ``<base>_created`` of a counter/histogram/summary family declared so far.

    prometheus-client declares a counter by its ``_total`` name (``# TYPE x_total counter``) and, in
    the text format, emits ``x_created`` as a separate gauge family; both spellings are recognised.
    """
    if not name.endswith("_created"):
        return False
    base = name[:-8]
    return types.get(base) in _CREATED_FAMILIES or types.get(base + "_total") in _CREATED_FAMILIES


def parse_samples(text: str, *, drop_created: bool = False) -> list[ParsedSample]:
    """All samples of ``text`` as a list: all or nothing (raises :class:`ExpositionError` on garbage)."""
    return list(parse_exposition(text, drop_created=drop_created))


def parse_types(text: str) -> dict[str, str]:
    """``{family name: type}`` from the ``# TYPE`` lines of ``text`` (lower-case type names)."""
    types: dict[str, str] = {}
    for line_no, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if stripped.startswith("#") and "TYPE" in stripped:
            known = _comment(stripped, line_no)
            if known is _EOF:
                break
            if known is not None:
                types[known[0]] = known[1]
    return types
