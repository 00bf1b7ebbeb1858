"""Label sets written as PromQL metrics (``up{job="x"}``, ``{a='b'}``, ``''``) and printed like Go.

Contract: :func:`parse_metric` accepts Prometheus' ``parser.ParseMetric`` syntax (an optional metric
name, then an optional brace list of ``name="value"`` pairs with "...", '...' or `...` strings and Go
escapes, trailing comma allowed) and returns the label map including ``__name__``; empty values are
kept (promtool compares them as given). :func:`format_labels_go` prints ``labels.Labels.String()``:
``{__name__="up", job="x"}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from watchdog.golang.gostrconv import quote
from watchdog.golang.gotemplate import go_unquote

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`[^`]*`')


class MetricSyntaxError(ValueError):
    """Text that is not a valid metric with labels."""


def parse_metric(text: str, unique: bool = False) -> dict[str, str]:
    """``name{label="value", ...}`` → ``{"__name__": name, "label": "value"}``.

    A name before the braces wins over ``__name__`` inside them (Prometheus' grammar sets it last).
    With ``unique``, a label given twice is an error, as the TSDB refuses such a sample (promtool's
    input series); otherwise the last one wins.
    """
    pos = 0
    n = len(text)
    labels: dict[str, str] = {}
    seen: set[str] = set()

    def skip() -> None:
        nonlocal pos
        while pos < n and text[pos] in " \t\r\n":
            pos += 1

    skip()
    match = _NAME.match(text, pos)
    name = None
    if match:
        name = match.group(0)
        pos = match.end()
        skip()
    if pos < n and text[pos] == "{":
        pos += 1
        skip()
        while pos < n and text[pos] != "}":
            label = _LABEL.match(text, pos)
            if not label:
                raise MetricSyntaxError(f"unexpected character in label set: {text[pos:pos + 10]!r}")
            pos = label.end()
            skip()
            if not text.startswith("=", pos) or text.startswith("=~", pos):
                raise MetricSyntaxError(f"expected '=' after label {label.group(0)!r}")
            pos += 1
            skip()
            value = _STRING.match(text, pos)
            if not value:
                raise MetricSyntaxError(f"expected a string value for label {label.group(0)!r}")
            quoted = value.group(0)
            if quoted.startswith("'"):
                quoted = '"' + quoted[1:-1].replace('\\\'', "'").replace('"', '\\"') + '"'
            if unique and label.group(0) in seen:
                raise MetricSyntaxError(f'label name "{label.group(0)}" is not unique: invalid sample')
            seen.add(label.group(0))
            try:
                labels[label.group(0)] = go_unquote(quoted)
            except (ValueError, IndexError) as exc:
                raise MetricSyntaxError(f"invalid escape in {value.group(0)}") from exc
            pos = value.end()
            skip()
            if pos < n and text[pos] == ",":
                pos += 1
                skip()
            elif pos < n and text[pos] != "}":
                raise MetricSyntaxError(f"expected ',' or '}}' in label set at {text[pos:pos + 10]!r}")
        if pos >= n:
            raise MetricSyntaxError("unclosed label set")
        pos += 1
        skip()
    if pos != n:
        raise MetricSyntaxError(f"unexpected {text[pos:pos + 10]!r} in metric {text!r}")
    if name is not None:
        labels["__name__"] = name
    return labels


def sorted_pairs(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Labels as a sorted tuple of pairs (Prometheus' ordering: by name)."""
    return tuple(sorted(labels.items()))


def format_labels_go(labels: Mapping[str, str]) -> str:
    """Go's ``labels.Labels.String()``: ``{a="1", b="2"}``."""
    return "{" + ", ".join(f"{k}={quote(v)}" for k, v in sorted_pairs(labels)) + "}"
