"""The ``/metrics`` page rendered from a cache that rewrites only what changed since the last scrape.

Contract: :meth:`PageCache.render` returns exactly the bytes ``prometheus_client.generate_latest`` writes
for the metric families :class:`watchdog.exporter.collector.StoreCollector` builds from the same samples
(classic text format, underscore escaping): families in the order of their first sample in label order,
each with its ``# HELP`` and ``# TYPE`` lines, then its samples in label order. Label and name escaping,
the family layout and the sort run only when the set of series differs from the previous render (the
steady state: the same series, new values); otherwise the cached lines are kept and only the lines whose
value changed are formatted again. Memory is bounded by the last render's series.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from math import copysign

from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.utils import floatToGoString

from watchdog.model import METRIC_NAME, Labels, metric_name

FamilyOf = Callable[[str], tuple[str, str, str]]
"""A series name to its family: (family name, type, help), as the collector groups series."""

_PROMETHEUS_TYPE = {"counter": "counter", "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram",
                    "unknown": "untyped"}


def escape_label_value(value: str) -> str:
    """A label value escaped as ``generate_latest`` does (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def sample_prefix(labels: Labels) -> str:
    """``name{label="value",...} `` as ``generate_latest`` writes it (the value follows)."""
    name = metric_name(labels)
    inner = ",".join(f'{escape_label_name(k)}="{escape_label_value(v)}"'
                     for k, v in labels if k != METRIC_NAME)
    return f"{escape_metric_name(name)}{{{inner}}} " if inner else f"{escape_metric_name(name)} "


def family_header(family: str, typ: str, doc: str) -> str:
    """The ``# HELP`` and ``# TYPE`` lines of a family (validated as prometheus-client's ``Metric`` does)."""
    metric = Metric(family, doc, typ)  # raises ValueError on a name or type prometheus-client refuses
    mname, mtype = metric.name, _PROMETHEUS_TYPE.get(metric.type, metric.type)
    if metric.type == "counter":
        mname += "_total"
    elif metric.type == "info":
        mname += "_info"
    escaped = escape_metric_name(mname)
    text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {escaped} {text}\n# TYPE {escaped} {mtype}\n"


class PageCache:
    """Renders (labels, value) samples to the text format, reusing the previous render. Thread-safe.

    It holds one line per exported series (``name{labels} value``); a changed value is written after the
    line's last space, so no label text is kept twice."""

    def __init__(self, family_of: FamilyOf) -> None:
        self.family_of = family_of
        self.rebuilds_total = 0
        self._keys: list[Labels] = []
        self._parts: list[str] = []
        self._slots: list[int] = []  # input position -> index in _parts (-1: not exported)
        self._values: list[float | None] = []
        self._lock = threading.Lock()

    def render(self, samples: Sequence[tuple[Labels, float]]) -> bytes:
        """The page for ``samples`` (unique labels, any order); see the module docstring."""
        return self.render_columns([labels for labels, _ in samples], [value for _, value in samples])

    def render_columns(self, keys: list[Labels], values: Sequence[float]) -> bytes:
        """:meth:`render` of ``zip(keys, values)``. Passing the previous call's ``keys`` object again
        (unmutated) says the series are the same: they are not compared."""
        with self._lock:
            if keys is not self._keys and keys != self._keys:
                self._rebuild(keys)
            self._keys = keys
            parts, slots, last = self._parts, self._slots, self._values
            # Unchanged values keep their line (0.0 and -0.0 compare equal but are written apart).
            changed = [index for index, (value, old) in enumerate(zip(values, last, strict=True))
                       if value != old or (not value and copysign(1.0, value) != copysign(1.0, old))]
            for index in changed:
                slot = slots[index]
                if slot < 0:
                    continue
                value = values[index]
                last[index] = value
                line = parts[slot]
                parts[slot] = f"{line[:line.rindex(' ') + 1]}{floatToGoString(value)}\n"
            return "".join(parts).encode("utf-8")

    def _rebuild(self, keys: list[Labels]) -> None:
        """Sort, group into families and escape labels for a new set of series."""
        self.rebuilds_total += 1
        order = sorted(range(len(keys)), key=keys.__getitem__)
        families: dict[str, list[int]] = {}
        headers: dict[str, str] = {}
        for index in order:
            name = metric_name(keys[index])
            if not name:
                continue
            family, typ, doc = self.family_of(name)
            members = families.get(family)
            if members is None:
                members = families[family] = []
                headers[family] = family_header(family, typ, doc)
            members.append(index)
        old_lines = {labels: self._parts[slot] for labels, slot in zip(self._keys, self._slots, strict=True)
                     if slot >= 0}
        parts: list[str] = []
        slots = [-1] * len(keys)
        values: list[float | None] = [None] * len(keys)
        for family, members in families.items():
            parts.append(headers[family])
            for index in members:
                labels = keys[index]
                line = old_lines.get(labels)
                slots[index] = len(parts)
                parts.append(line if line is not None else sample_prefix(labels) + "NaN\n")
        self._keys = keys
        self._parts = parts
        self._slots = slots
        self._values = values
