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

Speed: a scrape repeats the same series text every tick, so the parsed labels of each series text
(``name{...}``) are cached (the idea of Prometheus' scrape cache): in the caller's own table when it
passes one (the engine collector: one per endpoint, bounded by that endpoint's size), else in a bounded
module-level table. A cache hit costs one dictionary lookup; a cold parse goes through a small hand-written lexer.
A caller that keeps a :class:`PageMemo` per endpoint as well reads a page laid out as the previous one (same
lines but for the sample values) without a step per line. See ``benchmarks/parse.py`` for figures against
``prometheus_client.parser``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from itertools import compress, repeat
from operator import itemgetter
from typing import Any

from watchdog.model import METRIC_NAME, Labels

__all__ = [
    "ExpositionError",
    "PageMemo",
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
_MISSING = object()


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


def _known_comment(line: str, line_no: int) -> tuple[str, str] | None:
    """:func:`_comment` of ``line`` (without its line end and indentation), memoised for the lines that
    pass (a scrape repeats its HELP and TYPE lines: a third of a vLLM page)."""
    found = _comment_cache.get(line, _MISSING)
    if found is _MISSING:
        found = _comment(line, line_no)
        _bounded_put(_comment_cache, line, found)
    return found  # type: ignore[return-value]


def _bounded_put(table: dict[str, Any], key: str, value: Any) -> None:
    """``table[key] = value``, the module's tables emptied first when they hold :data:`_CACHE_LIMIT` keys."""
    if len(table) >= _CACHE_LIMIT:
        table.clear()
    table[key] = value


def _cache_put(key: str, labels: Labels) -> None:
    _bounded_put(_series_cache, key, labels)


_HEAD, _TAIL = itemgetter(0), itemgetter(2)


class PageMemo:
    """The layout of the last page an endpoint served, when every line of it took :func:`parse_columns`'
    steady paths: which lines are samples read as ``<series text> <value>`` (and their series texts and
    labels), which are ``*_created`` samples dropped, and the text of every other line (comments, blank).

    :meth:`values` reads a page with that layout by bulk operations, without a step per line in Python:
    it returns the new values only when every other line is the same text, every sample line has the
    same series text before its last space, and every value passes the checks of the steady path (no
    ``_``, ``float()`` accepts it); else None, and the page is parsed line by line. What the steady path
    makes of such a page is a function of those texts alone, so both paths yield the same samples.
    Small: the lines are picked by byte masks, and the texts kept are the strings the series and comment
    caches already hold (about 13 kB for a vLLM page); emptied with the endpoint's caches.
    """

    __slots__ = ("_heads", "_heads_mask", "_lines", "_other", "_other_mask", "_values_mask", "labels")

    def __init__(self) -> None:
        self.labels: list[Labels] | None = None
        """The labels the remembered page yielded (None: nothing remembered)."""
        self._lines = 0
        self._other: list[str] = []
        self._other_mask = b""  # 1 for each line compared whole
        self._heads: list[str] = []
        self._heads_mask = b""  # 1 for each line compared by its series text
        self._values_mask = b""  # 1 for each of those whose value is read (not a dropped *_created)

    def remember(self, lines: list[str], fast: list[int], dropped: list[int], labels: list[Labels],
                 cache: dict[str, Labels]) -> None:
        """Keep the layout of ``lines``: ``fast`` the sample lines (yielding ``labels``; their series
        texts keys of ``cache``), ``dropped`` the ``*_created`` lines, the others compared whole."""
        read = sorted(fast + dropped)
        mask = bytearray(len(lines))
        for i in read:
            mask[i] = 1
        kept = set(fast)
        self._lines = len(lines)
        self._heads_mask = bytes(mask)
        self._other_mask = bytes(flag ^ 1 for flag in mask)
        self._values_mask = bytes(1 if i in kept else 0 for i in read)
        held = {key: key for key in cache}  # the cache's own strings: the memo holds no copy of them
        self._heads = [held.get(head, head) for head in (lines[i].rpartition(" ")[0] for i in read)]
        held = {key: key for key in _comment_cache}
        self._other = [held.get(line, line) for line in compress(lines, self._other_mask)]
        self.labels = list(labels)

    def forget(self) -> None:
        """Remember nothing (the next page is parsed line by line)."""
        self.labels = None
        self._other, self._heads = [], []

    def values(self, lines: list[str]) -> list[float] | None:
        """The sample values of ``lines`` when they have the remembered layout, else None."""
        if len(lines) != self._lines or list(compress(lines, self._other_mask)) != self._other:
            return None
        parts = list(map(str.rpartition, compress(lines, self._heads_mask), repeat(" ")))
        if list(map(_HEAD, parts)) != self._heads:
            return None
        tails = list(map(_TAIL, compress(parts, self._values_mask)))
        if "_" in "".join(tails):
            return None
        try:
            return list(map(float, tails))
        except ValueError:
            return None


def parse_exposition(text: str, *, drop_created: bool = False, cache: dict[str, Labels] | None = None,
                     relabel: Callable[[Labels], Labels] | None = None) -> Iterator[ParsedSample]:
    """Yield ``(labels, value, timestamp_ms | None)`` per sample line; see the module contract. ``cache``
    (series text -> labels) is the caller's to keep and to bound; without it the module's table is used.

    ``relabel`` (only with the caller's ``cache``) maps each label set as parsed to the one yielded, and
    the cache holds the result: a line whose series text was seen before yields the relabelled set at
    no further cost. It must keep ``__name__`` (the ``*_created`` check reads it after relabelling).

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
                  check: Callable[[int], None] | None = None, check_every: int = 4096,
                  memo: PageMemo | None = None) -> tuple[list[Labels], list[float]]:
    """Every sample of ``text`` as two columns, labels and values, in file order (all or nothing:
    raises :class:`ExpositionError` at the first bad line). ``drop_created``, ``cache`` and ``relabel``
    as for :func:`parse_exposition`. A sample's explicit timestamp is validated and, with ``timestamps``,
    recorded there under the sample's index (most samples have none). ``check`` is called with the
    number of samples parsed so far before each ``check_every`` lines (the first time before any): what
    it raises (a deadline passed) ends the parse.

    ``memo`` (with the caller's ``cache``; one per endpoint, like the cache) remembers the layout of a page
    whose every line took the steady paths: a next page with the same lines but for the sample values is
    read by bulk operations (:meth:`PageMemo.values`; ``check`` called once, before) and yields the
    labels that page yielded. Any other page is parsed line by line and remembered (or forgotten) anew.
    """
    if relabel is not None and cache is None:
        raise ValueError("relabel needs the caller's own cache")
    put = _cache_put if cache is None else cache.__setitem__
    if cache is None:
        cache = _series_cache
    get = cache.get
    types: dict[str, str] | None = {} if drop_created else None
    comments = _comment_cache
    lines = text.split("\n")
    if memo is not None and memo.labels is not None:
        if check is not None:
            check(0)
        values = memo.values(lines)
        if values is not None:
            return list(memo.labels), values
    labels_out: list[Labels] = []
    values_out: list[float] = []
    add_labels, add_value = labels_out.append, values_out.append
    fast: list[int] = []  # the lines (0-based) read by the steady sample path, when memo is given
    dropped: list[int] = []  # the lines of *_created samples dropped on it
    steady = memo is not None  # every line so far on a steady path (the page can be remembered)
    for start in range(0, len(lines), check_every):
        if check is not None:
            check(len(values_out))
        for line_no, line in enumerate(lines[start:start + check_every], start + 1):
            if not line:
                continue
            if line[0] != "#":
                # The steady state: ``<series text> <value>`` whose series text a previous line cached.
                head, space, tail = line.rpartition(" ")
                known = get(head) if space else None
                if known is not None and "_" not in tail:
                    if types is not None and "_created" in head and _is_dropped(known, types):
                        if steady:
                            dropped.append(line_no - 1)
                        continue  # as the general path below drops it: before reading the value
                    try:
                        value = float(tail)
                    except ValueError:
                        pass  # the general path below says what is wrong
                    else:
                        add_labels(known)
                        add_value(value)
                        if steady:
                            fast.append(line_no - 1)
                        continue
                if line.isspace():  # never a cached series text: the fast path above passed it by
                    continue
            else:
                # The steady comment: a HELP or TYPE line seen before, exactly as memoised by _known_comment
                # (a line that was not stripped there is stripped below, and validated the same either way).
                comment = comments.get(line, _MISSING)
                if comment is not _MISSING:
                    if comment is _EOF:
                        if memo is not None:
                            memo.forget()  # the lines after it are not read: no layout to keep
                        return labels_out, values_out
                    if comment is not None and types is not None:
                        types[comment[0]] = comment[1]  # type: ignore[index]
                    continue
            steady = False
            if line[-1] == "\r":
                line = line[:-1]
            if line[0] in " \t":
                line = line.lstrip(" \t")
            if line[0] == "#":
                comment = _known_comment(line, line_no)
                if comment is _EOF:
                    return labels_out, values_out
                if comment is not None and types is not None:
                    types[comment[0]] = comment[1]
                continue
            brace = line.find("{")
            labels: Labels | None
            if brace != -1 and " " not in line[:brace] and "\t" not in line[:brace]:
                # A label block: the cache is keyed by the text up to the first '}' (see module docstring).
                close = line.find("}", brace)
                labels = get(line[: close + 1]) if close != -1 else None
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
                key = parts[0]
                rest = parts[1] if len(parts) == 2 else ""
                labels = get(key)
                if labels is None:
                    labels, end = _parse_series(key, line_no)
                    if end != len(key):
                        raise ExpositionError(line_no, f"unexpected character {key[end]!r} in the metric name")
                    if relabel is not None:
                        labels = relabel(labels)
                    put(key, labels)
            if types is not None and _is_dropped(labels, types):
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
    if memo is not None:
        if steady:
            memo.remember(lines, fast, dropped, labels_out, cache)
        else:
            memo.forget()
    return labels_out, values_out


def _is_dropped(labels: Labels, types: dict[str, str]) -> bool:
    """True for a ``*_created`` sample of a family declared so far (see :func:`_is_created_sample`)."""
    name = _name_of(labels)
    return name.endswith("_created") and _is_created_sample(name[:-8], types)


def _is_created_sample(base: str, types: dict[str, str]) -> bool:
    """True when ``<base>_created`` belongs to a counter/histogram/summary family declared so far.

    prometheus-client declares a counter by its ``_total`` name (``# TYPE x_total counter``) and, in
    the text format, emits ``x_created`` as a separate gauge family; both spellings are recognised.
    """
    return types.get(base) in _CREATED_FAMILIES or types.get(base + "_total") in _CREATED_FAMILIES


def _name_of(labels: Labels) -> str:
    for key, value in labels:
        if key == METRIC_NAME:
            return value
    return ""


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
