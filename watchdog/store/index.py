"""The series index: :class:`Store` keeps every :class:`~watchdog.store.series.Series` by metric name and
by the source that stores it, and :func:`matches` decides which label sets a selector selects.

The store's contract is :mod:`watchdog.store`'s docstring.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Iterator

from watchdog.golang.goregexp import compile_anchored
from watchdog.model import METRIC_NAME, STALE_NAN, Labels, Sample, is_stale, label_value, metric_name
from watchdog.store.quotas import LabelValueCounts, LabelValuesExceeded, SeriesQuotaExceeded, SeriesQuotas
from watchdog.store.series import Series, SharedTimestamps

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


class Store:
    """Thread-safe bounded series store (see :mod:`watchdog.store` for the contract)."""

    def __init__(
        self,
        retention_ms: int = 15 * 60 * 1000,
        max_points: int = 15 * 60 + 60,
        max_series: int = 200_000,
        quotas: SeriesQuotas | None = None,
        *,
        shared_timestamps: SharedTimestamps | None = None,
    ) -> None:
        self.retention_ms = retention_ms
        self.max_points = max_points
        self.max_series = max_series
        self.quotas = quotas or SeriesQuotas(per_source=max_series, reserved=0, reserved_prefixes=("",))
        self._enforce_quotas = quotas is not None
        self.dropped_series_total = 0
        self.evicted_series_total = 0
        self.quota_rejections_total = 0
        self.label_value_drops_total = 0
        self._label_values = LabelValueCounts()  # for sources outside the fault path
        self._by_name: dict[str, dict[Labels, Series]] = {}
        self._count = 0
        self._sources: dict[str, tuple[Labels, ...]] = {}  # what each source's last collection stored
        self._kept: tuple[tuple[int, Hashable], list[Series]] | None = None  # latest_values' last selection
        self._owned: dict[str, set[Labels]] = {}
        self._series: dict[Labels, Series] = {}  # every series by its labels (its source is series.source)
        self._unreserved_series = 0
        self._lock = threading.RLock()
        self._shared_timestamps = SharedTimestamps() if shared_timestamps is None else shared_timestamps
        """The head timestamp arrays its series share (cleared at each collection)."""
        self.generation = 0
        """Bumped whenever a series is created or removed (readers may cache selections until it moves)."""

    def __len__(self) -> int:
        return self._count

    def append(self, labels: Labels, t_ms: int, value: float, source: str = "") -> bool:
        """Add one point; returns False when the series is new and the series cap is reached."""
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._create(labels, source)
                if series is None:
                    return False
            series.append(t_ms, value, self.max_points)
            return True

    def _create(self, labels: Labels, source: str) -> Series | None:
        """A new series of ``source``, indexed; None (counted) when the series cap is reached."""
        if self._count >= self.max_series:
            self.dropped_series_total += 1
            return None
        series = self._series[labels] = Series(labels, self._shared_timestamps, source)
        self._by_name.setdefault(metric_name(labels), {})[labels] = series
        self._count += 1
        self.generation += 1
        self._owned.setdefault(source, set()).add(labels)
        if not self.quotas.is_reserved(source):
            self._unreserved_series += 1
            self._label_values.add(source, labels, 1)
        return series

    def ingest(self, source: str, samples: Iterable[Sample], t_ms: int, *, bypass_quota: bool = False) -> int:
        """Record one collection from ``source`` at ``t_ms``; mark its vanished series stale.

        Returns the number of samples stored. Duplicate labels within one collection keep the last.
        Raises :class:`SeriesQuotaExceeded` (having stored nothing but the staleness of the source's
        previous series) when the collection does not fit the source's quota; ``bypass_quota`` is for
        the few series that report such a failure (``up 0``).
        """
        with self._lock:
            self._shared_timestamps.clear()
            try:
                return self._ingest(source, samples, t_ms, bypass_quota)
            finally:
                self._shared_timestamps.clear()

    def _ingest(self, source: str, samples: Iterable[Sample], t_ms: int, bypass_quota: bool) -> int:
        """:meth:`ingest` itself, under its lock."""
        batch: dict[Labels, float] = dict(samples)  # (labels, value) pairs: the last of duplicates wins
        series_of = self._series.get
        found = [series_of(labels) for labels in batch]
        over_limit = ""
        dropped = 0
        if self._enforce_quotas and not bypass_quota and None in found:  # new series: may they be created?
            reason = self._admit(source, batch)
            if reason:
                self.quota_rejections_total += 1
                self.ingest(source, (), t_ms, bypass_quota=True)
                raise SeriesQuotaExceeded(source, reason)
            if self.quotas.label_values and not self.quotas.is_reserved(source):
                over_limit, dropped = self._drop_label_value_churn(source, batch)
                found = [series_of(labels) for labels in batch]
        max_points = self.max_points
        stored: list[Labels] = []
        for (labels, value), series in zip(batch.items(), found, strict=True):
            if series is None:
                series = self._create(labels, source)
                if series is None:
                    continue
            series.append(t_ms, value, max_points)
            stored.append(labels)
        kept = tuple(stored)  # a tuple: a third of a set's memory
        previous = self._sources.get(source, ())
        if previous != kept:  # (compared without hashing a label set: the same series are the common case)
            for labels in previous:
                if labels not in batch:
                    self.append(labels, t_ms, STALE_NAN, source)
        self._sources[source] = kept
        if over_limit:
            raise LabelValuesExceeded(source, over_limit, dropped)
        return len(stored)

    def _drop_label_value_churn(self, source: str, batch: dict[Labels, float]) -> tuple[str, int]:
        """Remove from ``batch`` the new series that would take a label of their metric past the
        label-value limit; returns the reason (the first label over it) and how many were dropped."""
        doomed, reason = self._label_values.over_limit(source, batch, self._series, self.quotas.label_values)
        for labels in doomed:
            del batch[labels]
        self.label_value_drops_total += len(doomed)
        return reason, len(doomed)

    def _admit(self, source: str, batch: dict[Labels, float]) -> str:
        """Why ``batch`` cannot be stored for ``source`` ("" when it fits); may evict the source's own
        series that ``batch`` no longer contains to make room."""
        new = sum(1 for labels in batch if labels not in self._series)
        if not new:
            return ""
        owned = self._owned.get(source, set())
        limit = self.quotas.per_source
        reserved = self.quotas.is_reserved(source)
        pool = self.max_series - self.quotas.reserved

        def fits() -> bool:
            return len(owned) + new <= limit and (reserved or self._unreserved_series + new <= pool)

        if fits():
            return ""
        self._evict(source, [labels for labels in owned if labels not in batch])
        if fits():
            return ""
        if len(owned) + new > limit:
            return (f"series quota exceeded: {len(owned) + new} series would exceed the per-source "
                    f"quota of {limit}")
        return (f"series quota exceeded: {new} new series do not fit the {pool} series shared by "
                f"engines and other non-reserved sources ({self._unreserved_series} held)")

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
        gone = set(doomed)
        self._sources[source] = tuple(labels for labels in self._sources.get(source, ()) if labels not in gone)

    def _disown(self, labels: Labels) -> None:
        series = self._series.pop(labels, None)
        if series is None:
            return
        owner = series.source
        self._owned.get(owner, set()).discard(labels)
        if not self.quotas.is_reserved(owner):
            self._unreserved_series -= 1
            self._label_values.add(owner, labels, -1)

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
                      keep: Callable[[Labels, str], bool] | None = None,
                      keep_key: Hashable | None = None) -> list[tuple[Labels, int, float]]:
        """Each series' newest point within the lookback, excluding stale series (for the exporter);
        with ``keep``, only the series for which ``keep(labels, source that stored it)`` is true. A
        ``keep_key`` says that ``keep``'s answers depend on nothing but the series and that key: the
        series kept are then remembered while the store's series set and the key stay the same."""
        out: list[tuple[Labels, int, float]] = []
        for series in self.kept_series(keep, keep_key):
            point = series.latest()
            if point is None:
                continue
            t_ms, value = point
            if t_ms < now_ms - lookback_ms or is_stale(value):
                continue
            out.append((series.labels, t_ms, value))
        return out

    def kept_series(self, keep: Callable[[Labels, str], bool] | None = None,
                    keep_key: Hashable | None = None) -> list[Series]:
        """The series (all, or those ``keep(labels, source)`` keeps), in store order. With a ``keep_key``
        (see :meth:`latest_values`) the same list object comes back while the series set and the key stay
        the same, so a caller may key its own caches on the list's identity; the list is never mutated."""
        with self._lock:
            memo = self._kept
            if keep_key is not None and memo is not None and memo[0] == (self.generation, keep_key):
                return memo[1]
            candidates = [s for bucket in self._by_name.values() for s in bucket.values()
                          if keep is None or keep(s.labels, s.source)]
            self._kept = ((self.generation, keep_key), candidates) if keep_key is not None else None
            return candidates

    def gc(self, now_ms: int) -> int:
        """Drop points past retention and series left empty; returns how many series were removed."""
        removed = 0
        min_t = now_ms - self.retention_ms
        with self._lock:
            self._shared_timestamps.clear()
            max_points = self.max_points
            for name, bucket in list(self._by_name.items()):
                for labels, series in list(bucket.items()):
                    series.trim_before(min_t)
                    series.trim_count(max_points)
                    point = series.latest()
                    if point is None or (is_stale(point[1]) and len(series) == 1):
                        del bucket[labels]
                        self._disown(labels)
                        removed += 1
                        self.generation += 1
                if not bucket:
                    del self._by_name[name]
            self._count -= removed
            for source, labels_set in self._sources.items() if removed else ():
                self._sources[source] = tuple(lbl for lbl in labels_set if lbl in self._by_name.get(
                    metric_name(lbl), {}))
            self._shared_timestamps.clear()
        return removed
