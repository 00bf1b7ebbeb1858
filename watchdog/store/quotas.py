"""Who may hold how many series: the store's per-source quotas and its per-metric label-value limit.

:class:`SeriesQuotas` states the limits; :class:`LabelValueCounts` keeps what the label-value limit
needs (how many series of each source and metric carry each value of each label) and says which new
series a collection must drop to stay within it. The store raises :class:`SeriesQuotaExceeded` for a
collection refused whole and :class:`LabelValuesExceeded` for one stored without its churning series.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass

from watchdog.model import METRIC_NAME, Labels, metric_name

COLLECTOR_SOURCE_PREFIX = "collector:"
"""Sources named ``collector:<collector name>`` hold what a collector collected."""
RESERVED_PREFIXES = ("collector:kmsg", "collector:nvml", "collector:host", "rules:", "self:", "")
"""Sources on the fault path: they may use the reserved headroom (``""``: a plain :meth:`Store.append`)."""


class LabelValuesExceeded(Exception):
    """New series of a collection dropped by the per-metric label-value limit; the rest was stored."""

    def __init__(self, source: str, reason: str, dropped: int) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason
        self.dropped = dropped


class SeriesQuotaExceeded(Exception):
    """A collection refused as a whole because its source would exceed its series quota."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


@dataclass(frozen=True)
class SeriesQuotas:
    """Per-source series limits (see :mod:`watchdog.store`)."""

    per_source: int = 50_000
    reserved: int = 20_000
    reserved_prefixes: tuple[str, ...] = RESERVED_PREFIXES
    label_values: int = 0
    """Distinct values one label of one metric may take among a non-reserved source's series (0: no limit)."""

    def is_reserved(self, source: str) -> bool:
        """True for a source on the fault path (it may use the reserved headroom)."""
        return any(source.startswith(p) if p else source == "" for p in self.reserved_prefixes)


class LabelValueCounts:
    """Per (source, metric), how many held series carry each value of each label."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], dict[str, dict[str, int]]] = {}

    def add(self, source: str, labels: Labels, delta: int) -> None:
        """Add ``delta`` (1: a series created, -1: one removed) to the count of each of ``labels``' values."""
        key = (source, metric_name(labels))
        per_label = self._counts.setdefault(key, {})
        for name, value in labels:
            if name == METRIC_NAME:
                continue
            counts = per_label.setdefault(name, {})
            left = counts.get(value, 0) + delta
            if left > 0:
                counts[value] = left
            else:
                counts.pop(value, None)
                if not counts:
                    del per_label[name]
        if not per_label:
            del self._counts[key]

    def over_limit(self, source: str, new: Iterable[Labels], held: Container[Labels],
                   limit: int) -> tuple[list[Labels], str]:
        """The series of ``new`` not yet ``held`` that would take a label of their metric past ``limit``
        distinct values for ``source`` (counting the others of ``new`` as stored), and the reason ("" if none)."""
        added: dict[tuple[str, str], set[str]] = {}
        doomed: list[Labels] = []
        reason = ""
        for labels in new:
            if labels in held:
                continue
            name = metric_name(labels)
            known = self._counts.get((source, name), {})
            for key, value in labels:
                if key == METRIC_NAME:
                    continue
                values = known.get(key, {})
                fresh = added.setdefault((name, key), set())
                if value in values or value in fresh or len(values) + len(fresh) < limit:
                    continue
                doomed.append(labels)
                reason = reason or (f"label {key!r} of {name} would take more than {limit} distinct values "
                                    f"(max_label_values_per_metric): its new series are dropped")
                break
            else:
                for key, value in labels:
                    if key != METRIC_NAME and value not in known.get(key, {}):
                        added[(name, key)].add(value)
        return doomed, reason
