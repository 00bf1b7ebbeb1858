"""Bounded in-memory time series: the one place rules, the exporter and `query` read from.

Contract:
- Each series holds (timestamp_ms, value) points in time order, in compact arrays, for at most
  ``retention_ms`` (trimmed by :meth:`Store.gc`) and at most ``max_points`` points.
- :meth:`Store.ingest` replaces everything one *source* (a collector instance, the rule engine) reports:
  a series the source reported last time but not now gets Prometheus' staleness marker, so an instant
  selector stops returning it at once instead of 5 minutes later.
- The number of series is capped (``max_series``); new series beyond the cap are dropped and counted
  in :attr:`Store.dropped_series_total`, never silently grown.
- No source can starve another (:class:`SeriesQuotas`): each source may hold at most
  ``per_source`` series, and sources outside the fault path (engines, the process collector, anything
  not in ``reserved_prefixes``) share ``max_series - reserved`` between them, so the kernel log, NVML,
  the host, rule outputs and self-metrics always find room. A collection that would take a source past
  its quota first evicts that source's series it no longer reports; if it still does not fit, nothing
  of it is stored, the source's previous series go stale, and :class:`SeriesQuotaExceeded` says why.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from watchdog.golang.goregexp import compile_anchored
from watchdog.model import METRIC_NAME, STALE_NAN, Labels, Sample, is_stale, label_value, metric_name

Matcher = tuple[str, str, str]
"""A label matcher ``(label, op, value)`` with op one of ``=``, ``!=``, ``=~``, ``!~`` (regexes anchored)."""


def matches(labels: Labels, matchers: Iterable[Matcher]) -> bool:
    """True when every matcher holds; an absent label has the value ""."""
    for name, op, want in matchers:
        have = label_value(labels, name)
        if op == "=":
            ok = have == want
        elif op == "!=":
            ok = have != want
        elif op == "=~":
            ok = compile_anchored(want).match(have) is not None
        elif op == "!~":
            ok = compile_anchored(want).match(have) is None
        else:
            raise ValueError(f"unknown matcher operator {op!r}")
        if not ok:
            return False
    return True


@dataclass
class Series:
    """One series' points, oldest first. ``timestamps`` and ``values`` are parallel arrays."""

    labels: Labels
    timestamps: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))

    def append(self, t_ms: int, value: float, max_points: int) -> None:
        """Append a point; an out-of-order or duplicate timestamp replaces/ignores like Prometheus."""
        if self.timestamps and t_ms <= self.timestamps[-1]:
            if t_ms == self.timestamps[-1]:
                self.values[-1] = value
            return
        self.timestamps.append(t_ms)
        self.values.append(value)
        if len(self.timestamps) > 2 * max_points:
            self.trim_count(max_points)

    def trim_count(self, keep: int) -> None:
        """Keep only the newest ``keep`` points."""
        drop = len(self.timestamps) - keep
        if drop > 0:
            del self.timestamps[:drop]
            del self.values[:drop]

    def trim_before(self, min_t_ms: int) -> None:
        """Drop points older than ``min_t_ms``."""
        drop = bisect_left(self.timestamps, min_t_ms)
        if drop:
            del self.timestamps[:drop]
            del self.values[:drop]

    def window(self, mint_ms: int, maxt_ms: int) -> tuple[list[int], list[float]]:
        """Points with ``mint_ms <= t <= maxt_ms`` (both ends closed), oldest first."""
        lo = bisect_left(self.timestamps, mint_ms)
        hi = bisect_right(self.timestamps, maxt_ms)
        return list(self.timestamps[lo:hi]), list(self.values[lo:hi])

    def latest(self) -> tuple[int, float] | None:
        """The newest point, or None."""
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.values[-1]


COLLECTOR_SOURCE_PREFIX = "collector:"
"""Sources named ``collector:<collector name>`` hold what a collector collected."""
RESERVED_PREFIXES = ("collector:kmsg", "collector:nvml", "collector:host", "rules:", "self:", "")
"""Sources on the fault path: they may use the reserved headroom (``""``: a plain :meth:`Store.append`)."""


class SeriesQuotaExceeded(Exception):
    """A collection refused as a whole because its source would exceed its series quota."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


@dataclass(frozen=True)
class SeriesQuotas:
    """Per-source series limits (see the module docstring)."""

    per_source: int = 50_000
    reserved: int = 20_000
    reserved_prefixes: tuple[str, ...] = RESERVED_PREFIXES

    def is_reserved(self, source: str) -> bool:
        """True for a source on the fault path (it may use the reserved headroom)."""
        return any(source.startswith(p) if p else source == "" for p in self.reserved_prefixes)


class Store:
    """Thread-safe bounded series store. See the module docstring for the contract."""

    def __init__(
        self,
        retention_ms: int = 15 * 60 * 1000,
        max_points: int = 15 * 60 + 60,
        max_series: int = 200_000,
        quotas: SeriesQuotas | None = None,
    ) -> None:
        self.retention_ms = retention_ms
        self.max_points = max_points
        self.max_series = max_series
        self.quotas = quotas or SeriesQuotas(per_source=max_series, reserved=0, reserved_prefixes=("",))
        self._enforce_quotas = quotas is not None
        self.dropped_series_total = 0
        self.evicted_series_total = 0
        self.quota_rejections_total = 0
        self._by_name: dict[str, dict[Labels, Series]] = {}
        self._count = 0
        self._sources: dict[str, set[Labels]] = {}
        self._owned: dict[str, set[Labels]] = {}
        self._owner: dict[Labels, str] = {}
        self._best_effort = 0
        self._lock = threading.RLock()
        self.generation = 0
        """Bumped whenever a series is created or removed (readers may cache selections until it moves)."""

    def __len__(self) -> int:
        return self._count

    def append(self, labels: Labels, t_ms: int, value: float, source: str = "") -> bool:
        """Add one point; returns False when the series is new and the series cap is reached."""
        with self._lock:
            bucket = self._by_name.setdefault(metric_name(labels), {})
            series = bucket.get(labels)
            if series is None:
                if self._count >= self.max_series:
                    self.dropped_series_total += 1
                    return False
                series = bucket[labels] = Series(labels)
                self._count += 1
                self.generation += 1
                self._owned.setdefault(source, set()).add(labels)
                self._owner[labels] = source
                if not self.quotas.is_reserved(source):
                    self._best_effort += 1
            series.append(t_ms, value, self.max_points)
            return True

    def ingest(self, source: str, samples: Iterable[Sample], t_ms: int, *, bypass_quota: bool = False) -> int:
        """Record one collection from ``source`` at ``t_ms``; mark its vanished series stale.

        Returns the number of samples stored. Duplicate labels within one collection keep the last.
        Raises :class:`SeriesQuotaExceeded` (having stored nothing but the staleness of the source's
        previous series) when the collection does not fit the source's quota; ``bypass_quota`` is for
        the few series that report such a failure (``up 0``).
        """
        with self._lock:
            batch: dict[Labels, float] = {}
            for sample in samples:
                batch[sample.labels] = sample.value
            if self._enforce_quotas and not bypass_quota:
                reason = self._admit(source, batch)
                if reason:
                    self.quota_rejections_total += 1
                    self.ingest(source, (), t_ms, bypass_quota=True)
                    raise SeriesQuotaExceeded(source, reason)
            seen: set[Labels] = set()
            for labels, value in batch.items():
                if self.append(labels, t_ms, value, source):
                    seen.add(labels)
            for labels in self._sources.get(source, set()) - seen:
                self.append(labels, t_ms, STALE_NAN, source)
            self._sources[source] = seen
            return len(seen)

    def _admit(self, source: str, batch: dict[Labels, float]) -> str:
        """Why ``batch`` cannot be stored for ``source`` ("" when it fits); may evict the source's own
        series that ``batch`` no longer contains to make room."""
        new = sum(1 for labels in batch if labels not in self._owner)
        if not new:
            return ""
        owned = self._owned.get(source, set())
        limit = self.quotas.per_source
        reserved = self.quotas.is_reserved(source)
        pool = self.max_series - self.quotas.reserved

        def fits() -> bool:
            return len(owned) + new <= limit and (reserved or self._best_effort + new <= pool)

        if fits():
            return ""
        self._evict(source, [labels for labels in owned if labels not in batch])
        if fits():
            return ""
        if len(owned) + new > limit:
            return (f"series quota exceeded: {len(owned) + new} series would exceed the per-source "
                    f"quota of {limit}")
        return (f"series quota exceeded: {new} new series do not fit the {pool} series shared by "
                f"engines and other non-reserved sources ({self._best_effort} held)")

    def _evict(self, source: str, doomed: list[Labels]) -> None:
        """Remove ``source``'s series ``doomed`` from the store at once (room for its new series)."""
        for labels in doomed:
            bucket = self._by_name.get(metric_name(labels), {})
            if bucket.pop(labels, None) is not None:
                self._count -= 1
                self.generation += 1
                self.evicted_series_total += 1
                if not bucket:
                    self._by_name.pop(metric_name(labels), None)
            self._disown(labels)
        self._sources[source] = self._sources.get(source, set()) - set(doomed)

    def _disown(self, labels: Labels) -> None:
        owner = self._owner.pop(labels, None)
        if owner is None:
            return
        self._owned.get(owner, set()).discard(labels)
        if not self.quotas.is_reserved(owner):
            self._best_effort -= 1

    def forget_source(self, source: str, t_ms: int) -> None:
        """Mark every series of ``source`` stale (the source was removed from config)."""
        self.ingest(source, (), t_ms)
        with self._lock:
            self._sources.pop(source, None)

    def select(self, matchers: Iterable[Matcher]) -> Iterator[Series]:
        """Series whose labels satisfy every matcher. Uses the ``__name__`` index when it can.

        The returned Series objects are live: read them under no assumption of stability beyond
        the current tick (the scheduler runs collection and evaluation in sequence).
        """
        matcher_list = list(matchers)
        name_eq = [m[2] for m in matcher_list if m[0] == METRIC_NAME and m[1] == "="]
        with self._lock:
            if name_eq:
                candidates: Iterable[Series] = list(self._by_name.get(name_eq[0], {}).values())
            else:
                candidates = [s for bucket in self._by_name.values() for s in bucket.values()]
        for series in candidates:
            if matches(series.labels, matcher_list):
                yield series

    def names(self) -> list[str]:
        """Every metric name currently held."""
        with self._lock:
            return sorted(self._by_name)

    def all_series(self) -> list[Series]:
        """A snapshot list of every series."""
        with self._lock:
            return [s for bucket in self._by_name.values() for s in bucket.values()]

    def latest_values(self, now_ms: int, lookback_ms: int = 300_000,
                      keep: Callable[[Labels, str], bool] | None = None) -> list[tuple[Labels, int, float]]:
        """Each series' newest point within the lookback, excluding stale series (for the exporter);
        with ``keep``, only the series for which ``keep(labels, source that stored it)`` is true."""
        out: list[tuple[Labels, int, float]] = []
        with self._lock:
            candidates = [s for bucket in self._by_name.values() for s in bucket.values()
                          if keep is None or keep(s.labels, self._owner.get(s.labels, ""))]
        for series in candidates:
            point = series.latest()
            if point is None:
                continue
            t_ms, value = point
            if t_ms < now_ms - lookback_ms or is_stale(value):
                continue
            out.append((series.labels, t_ms, value))
        return out

    def gc(self, now_ms: int) -> int:
        """Drop points past retention and series left empty; returns how many series were removed."""
        removed = 0
        min_t = now_ms - self.retention_ms
        with self._lock:
            for name in list(self._by_name):
                bucket = self._by_name[name]
                for labels in list(bucket):
                    series = bucket[labels]
                    series.trim_before(min_t)
                    series.trim_count(self.max_points)
                    point = series.latest()
                    if point is None or (is_stale(point[1]) and len(series.timestamps) == 1):
                        del bucket[labels]
                        self._disown(labels)
                        removed += 1
                        self.generation += 1
                if not bucket:
                    del self._by_name[name]
            self._count -= removed
            for source, labels_set in self._sources.items():
                self._sources[source] = {lbl for lbl in labels_set if lbl in self._by_name.get(
                    metric_name(lbl), {})}
        return removed
