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
  While, in addition, the store's series set (``Store.kept_series``), which of them are fresh, the caps
  and the providers' labels stay the same, a scrape reads each kept series' newest point by position and
  hashes no label set: the limiter's answer and the providers' places are those of the last scrape (its
  drops counted again, as :meth:`SeriesLimiter.repeat` says).
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
from watchdog.model import METRIC_NAME, Labels, Sample, is_stale, label_value, metric, metric_name
from watchdog.store import Series, Store

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
        self._version = 0  # changes with the remembered input or the caps (see repeat)

    def set_limits(self, max_per_metric: int, max_per_job: int) -> None:
        """New caps from the next scrape on (config reload)."""
        with self._lock:
            self.max_per_metric, self.max_per_job = max_per_metric, max_per_job
            self._last_keys = []
            self._version += 1

    def admit(self, series: Iterable[tuple[Labels, float]]) -> list[tuple[Labels, float]]:
        """The series to export this scrape, sorted by labels; counts what the caps leave out."""
        return sorted(self.admit_unsorted(list(series)))

    def admit_unsorted(self, items: list[tuple[Labels, float]]) -> list[tuple[Labels, float]]:
        """:meth:`admit` in input order (unique labels): what a page cache wants (see module docstring)."""
        return [items[index] for index in self.admit_positions(items)[0]]

    def admit_positions(self, items: list[tuple[Labels, float]]) -> tuple[list[int], int]:
        """:meth:`admit_unsorted` as the kept items' positions in ``items`` (do not mutate the list), and a
        token for :meth:`repeat`."""
        keys = [labels for labels, _ in items]
        with self._lock:
            if keys == self._last_keys:
                for limit, count in self._last_dropped.items():
                    self.dropped_total[limit] += count
                return self._last_kept, self._version
        kept = set(labels for labels, _ in self._admit(sorted(items)))
        with self._lock:
            self._last_kept = [index for index, labels in enumerate(keys) if labels in kept]
            self._last_keys = keys
            self._version += 1
            return self._last_kept, self._version

    def repeat(self, token: int) -> bool:
        """Admit again exactly the input of the call that returned ``token`` (counting its drops again),
        unless another input or new caps came since: then False and nothing is counted."""
        with self._lock:
            if token != self._version:
                return False
            for limit, count in self._last_dropped.items():
                self.dropped_total[limit] += count
            return True

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


_latest = Series.latest


class _Plan:
    """What :meth:`StoreCollector._scrape` keeps between scrapes: the store's kept series it read, which
    of them were fresh, the limiter's answer for them, and where the providers' samples go."""

    def __init__(self, candidates: list[Series], absent: list[int], limiter_token: int, kept: list[int],
                 stored_keys: list[Labels]) -> None:
        self.candidates = candidates
        self.absent = absent  # positions in ``candidates`` not exported (no fresh point)
        self.limiter_token = limiter_token
        self.kept = kept  # positions in ``candidates`` the limiter kept, in order
        self.stored_keys = stored_keys
        self.provided_keys: list[Labels] | None = None
        self.provided_slots: list[int] = []
        self.keys: list[Labels] = stored_keys

    def merge(self, provided_keys: list[Labels]) -> None:
        """Place the providers' samples: a provider's labels already exported take that position (the
        last value wins), others follow the stored series in the order they come."""
        keys = list(self.stored_keys)
        position = {labels: index for index, labels in enumerate(keys)}
        slots: list[int] = []
        for labels in provided_keys:
            slot = position.get(labels)
            if slot is None:
                slot = position[labels] = len(keys)
                keys.append(labels)
            slots.append(slot)
        self.provided_keys, self.provided_slots, self.keys = provided_keys, slots, keys


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
        relabel: Callable[[list[Labels]], list[Labels]] | None = None,
    ) -> None:
        """``relabel`` (the pod directory's :meth:`~watchdog.pods.directory.PodDirectory.relabel_keys`
        with ``pod_resources.pod_labels``) maps each scrape's label sets to the ones exported, returning the
        same list object for the same input while nothing changed."""
        self.store = store
        self.relabel = relabel
        self.providers = list(providers)
        self.clock = clock
        self.lookback_ms = lookback_ms
        self.limiter = limiter or SeriesLimiter()
        self.selection = selection or ExportSelection()
        self.page = PageCache(family_of)
        self._plan: _Plan | None = None
        self._lock = threading.Lock()

    def unsorted_samples(self) -> list[tuple[Labels, float]]:
        """Every sample this scrape exports, in store order: the store within the caps, then providers
        (never capped: they are the agent's own few self-metrics, including the count of what the caps
        dropped; a provider's sample replaces a stored one with the same labels)."""
        keys, values = self._scrape()
        return list(zip(keys, values, strict=True))

    def _scrape(self) -> tuple[list[Labels], list[float]]:
        """:meth:`unsorted_samples` as labels and values. While the store's kept series (the same list
        from :meth:`Store.kept_series`), which of them are fresh, the limiter's input and caps and the
        providers' labels stay the same, the labels list is the previous scrape's object and nothing is
        hashed or compared but values and positions: the page cache then skips its own comparison."""
        with self._lock:
            cutoff = int(self.clock() * 1000) - self.lookback_ms
            candidates = self.store.kept_series(
                self.selection.keep, ("pass_through", self.selection.pass_through_engine_series))
            # One pass: each kept series' newest value, or None when it has none, is stale or too old.
            fresh = [point[1] if point is not None and point[0] >= cutoff
                     and (point[1] == point[1] or not is_stale(point[1])) else None
                     for point in map(_latest, candidates)]
            absent = [index for index, value in enumerate(fresh) if value is None]
            plan = self._plan
            if (plan is None or plan.candidates is not candidates or plan.absent != absent
                    or not self.limiter.repeat(plan.limiter_token)):
                present = [index for index, value in enumerate(fresh) if value is not None]
                items = [(candidates[index].labels, fresh[index]) for index in present]
                kept, token = self.limiter.admit_positions(items)  # type: ignore[arg-type]
                plan = self._plan = _Plan(candidates, absent, token, [present[index] for index in kept],
                                          [items[index][0] for index in kept])
            provided = [sample for provider in [*self.providers, self.limiter.self_samples]
                        for sample in provider()]
            provided_keys = [sample.labels for sample in provided]
            if plan.provided_keys != provided_keys:
                plan.merge(provided_keys)
            values: list[float]
            if len(plan.kept) == len(candidates):  # every series fresh and kept: the common case
                values = fresh  # type: ignore[assignment]
            elif len(plan.kept) + len(absent) == len(candidates):  # the caps dropped nothing
                values = [value for value in fresh if value is not None]
            else:
                values = [fresh[index] for index in plan.kept]  # type: ignore[misc]
            values.extend([0.0] * (len(plan.keys) - len(values)))
            for slot, sample in zip(plan.provided_slots, provided, strict=True):
                values[slot] = sample.value
            return (plan.keys if self.relabel is None else self.relabel(plan.keys)), values

    def samples(self) -> list[tuple[Labels, float]]:
        """:meth:`unsorted_samples` sorted by labels."""
        return sorted(self.unsorted_samples())

    def render(self) -> bytes:
        """The text exposition of this scrape, from the page cache (the bytes ``generate_latest`` writes
        from :meth:`collect`)."""
        keys, values = self._scrape()
        return self.page.render_columns(keys, values)

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
