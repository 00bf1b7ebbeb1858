"""prometheus-client collector that reads the store at scrape time, with bounded cardinality.

Contract:
- Each scrape yields every non-stale series in the store that :class:`ExportSelection` keeps (newest point
  within the lookback, no timestamps), grouped into metric families; agent series are typed and documented
  from the catalogue, other series (recording-rule outputs, ``ALERTS``, engine pass-through) are
  ``untyped``. Extra sample
  providers (self-metrics computed on demand) are called at scrape time and merged in.
- Cardinality is bounded by :class:`SeriesLimiter`: at most ``max_series_per_metric`` series per metric
  name and ``max_series_per_job`` per ``job`` label value. A series exported before keeps its slot while
  it exists, so the exported set does not flap; what is left out is counted in
  ``watchdog_exporter_dropped_series_total{limit}`` (series left out, summed over scrapes: its rate is
  how much is being cut off right now).
- :meth:`StoreCollector.render` writes the page itself from a :class:`~watchdog.exporter.page.PageCache`
  (the same bytes ``generate_latest`` writes from :meth:`StoreCollector.collect`): while the set of
  series stays the same, a scrape sorts nothing, escapes nothing and formats only the values that changed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from watchdog.config.settings import ExporterSettings, section_settings
from watchdog.exporter.catalogue import load_catalogue
from watchdog.exporter.page import PageCache
from watchdog.exporter.selection import ExportSelection
from watchdog.model import METRIC_NAME, Labels, Sample, label_value, metric, metric_name
from watchdog.store import Store

SampleProvider = Callable[[], Iterable[Sample]]
_SCHEMA_DEFAULTS = section_settings(ExporterSettings, "exporter")  # the config schema is the one source
DEFAULT_MAX_SERIES_PER_METRIC = _SCHEMA_DEFAULTS.max_series_per_metric
DEFAULT_MAX_SERIES_PER_JOB = _SCHEMA_DEFAULTS.max_series_per_job
LIMITS = ("per_metric", "per_job")


def _family_name(name: str, typ: str) -> str:
    if typ == "counter" and name.endswith("_total"):
        return name[: -len("_total")]
    return name


def family_of(name: str) -> tuple[str, str, str]:
    """The family a series name belongs to on the page: (family name, type, help). Agent series are typed
    and documented from the catalogue; others are untyped, one family per name."""
    spec = load_catalogue().get(name)
    typ = spec.type if spec else "unknown"
    doc = spec.help if spec else "Series collected or recorded by inference-watchdog."
    return _family_name(name, typ), typ, doc


class SeriesLimiter:
    """First come, first kept: caps series per metric name and per ``job``; thread-safe.

    :meth:`admit` keeps, in order, the series admitted by the previous call that are still present, then
    new series (in label order) while their metric and job are under the caps. Memory is bounded by the
    caps: only the series of the last call are remembered.
    """

    def __init__(self, max_per_metric: int = DEFAULT_MAX_SERIES_PER_METRIC,
                 max_per_job: int = DEFAULT_MAX_SERIES_PER_JOB) -> None:
        self.max_per_metric = max_per_metric
        self.max_per_job = max_per_job
        self.dropped_total: dict[str, int] = dict.fromkeys(LIMITS, 0)
        self.last_exported = 0
        self._admitted: set[Labels] = set()
        self._lock = threading.Lock()
        # The last call's input labels (in input order), which of them were kept, and the drops per limit:
        # the same input with the same caps gives the same answer, without sorting.
        self._last_keys: list[Labels] = []
        self._last_kept: list[int] = []
        self._last_dropped: dict[str, int] = {}

    def set_limits(self, max_per_metric: int, max_per_job: int) -> None:
        """New caps from the next scrape on (config reload)."""
        with self._lock:
            self.max_per_metric, self.max_per_job = max_per_metric, max_per_job
            self._last_keys = []

    def admit(self, series: Iterable[tuple[Labels, float]]) -> list[tuple[Labels, float]]:
        """The series to export this scrape, sorted by labels; counts what the caps leave out."""
        return sorted(self.admit_unsorted(list(series)))

    def admit_unsorted(self, items: list[tuple[Labels, float]]) -> list[tuple[Labels, float]]:
        """:meth:`admit` in input order (unique labels): what a page cache wants (see module docstring)."""
        keys = [labels for labels, _ in items]
        with self._lock:
            if keys == self._last_keys:
                for limit, count in self._last_dropped.items():
                    self.dropped_total[limit] += count
                return [items[index] for index in self._last_kept]
        kept = set(labels for labels, _ in self._admit(sorted(items)))
        with self._lock:
            self._last_kept = [index for index, labels in enumerate(keys) if labels in kept]
            self._last_keys = keys
        return [items[index] for index in self._last_kept]

    def _admit(self, items: list[tuple[Labels, float]]) -> list[tuple[Labels, float]]:
        with self._lock:
            kept: list[tuple[Labels, float]] = []
            per_metric: Counter[str] = Counter()
            per_job: Counter[str] = Counter()
            dropped: Counter[str] = Counter()
            previously = [item for item in items if item[0] in self._admitted]
            newcomers = [item for item in items if item[0] not in self._admitted]
            for labels, value in previously + newcomers:
                name, job = metric_name(labels), label_value(labels, "job")
                if per_metric[name] >= self.max_per_metric:
                    dropped["per_metric"] += 1
                    continue
                if job and per_job[job] >= self.max_per_job:
                    dropped["per_job"] += 1
                    continue
                per_metric[name] += 1
                if job:
                    per_job[job] += 1
                kept.append((labels, value))
            self._admitted = {labels for labels, _ in kept}
            for limit, count in dropped.items():
                self.dropped_total[limit] += count
            self._last_dropped = dict(dropped)
            self.last_exported = len(kept)
        return kept

    def self_samples(self) -> list[Sample]:
        """``watchdog_exporter_dropped_series_total{limit}`` and ``watchdog_exporter_series``."""
        with self._lock:
            out = [Sample(metric("watchdog_exporter_dropped_series_total", limit=limit), float(count))
                   for limit, count in sorted(self.dropped_total.items())]
            out.append(Sample(metric("watchdog_exporter_series"), float(self.last_exported)))
        return out


class StoreCollector(Collector):
    """Exposes the store (and on-demand providers) to a prometheus-client registry."""

    def __init__(
        self,
        store: Store,
        providers: Iterable[SampleProvider] = (),
        clock: Callable[[], float] = time.time,
        lookback_ms: int = 300_000,
        limiter: SeriesLimiter | None = None,
        selection: ExportSelection | None = None,
    ) -> None:
        self.store = store
        self.providers = list(providers)
        self.clock = clock
        self.lookback_ms = lookback_ms
        self.limiter = limiter or SeriesLimiter()
        self.selection = selection or ExportSelection()
        self.page = PageCache(family_of)

    def unsorted_samples(self) -> list[tuple[Labels, float]]:
        """Every sample this scrape exports, in store order: the store within the caps, then providers
        (never capped: they are the agent's own few self-metrics, including the count of what the caps
        dropped; a provider's sample replaces a stored one with the same labels)."""
        now_ms = int(self.clock() * 1000)
        from_store = [(labels, value) for labels, _, value in self.store.latest_values(
            now_ms, self.lookback_ms, keep=self.selection.keep,
            keep_key=("pass_through", self.selection.pass_through_engine_series))]
        merged: dict[Labels, float] = dict(self.limiter.admit_unsorted(from_store))
        for provider in [*self.providers, self.limiter.self_samples]:
            for sample in provider():
                merged[sample.labels] = sample.value
        return list(merged.items())

    def samples(self) -> list[tuple[Labels, float]]:
        """:meth:`unsorted_samples` sorted by labels."""
        return sorted(self.unsorted_samples())

    def render(self) -> bytes:
        """The text exposition of this scrape, from the page cache (the bytes ``generate_latest`` writes
        from :meth:`collect`)."""
        return self.page.render(self.unsorted_samples())

    def collect(self) -> Iterator[Metric]:
        """Build metric families: one per series name (histogram parts stay separate, untyped)."""
        families: dict[str, Metric] = {}
        for labels, value in self.samples():
            name = metric_name(labels)
            if not name:
                continue
            family_key, typ, doc = family_of(name)
            family = families.get(family_key)
            if family is None:
                family = families[family_key] = Metric(family_key, doc, typ)
            family.add_sample(name, {k: v for k, v in labels if k != METRIC_NAME}, value)
        yield from families.values()
