"""prometheus-client collector that reads the store at scrape time.

Contract: each scrape yields every non-stale series in the store (newest point within the lookback, no
timestamps), grouped into metric families; agent series are typed and documented from the catalogue,
other series (engine pass-through, recording-rule outputs) are ``untyped``. Extra sample providers
(self-metrics computed on demand) are called at scrape time and merged in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from watchdog.exporter.catalogue import load_catalogue
from watchdog.model import METRIC_NAME, Labels, Sample, metric_name
from watchdog.store import Store

SampleProvider = Callable[[], Iterable[Sample]]


def _family_name(name: str, typ: str) -> str:
    if typ == "counter" and name.endswith("_total"):
        return name[: -len("_total")]
    return name


class StoreCollector(Collector):
    """Exposes the store (and on-demand providers) to a prometheus-client registry."""

    def __init__(
        self,
        store: Store,
        providers: Iterable[SampleProvider] = (),
        clock: Callable[[], float] = time.time,
        lookback_ms: int = 300_000,
    ) -> None:
        self.store = store
        self.providers = list(providers)
        self.clock = clock
        self.lookback_ms = lookback_ms

    def samples(self) -> list[tuple[Labels, float]]:
        """Every sample this scrape exports, store first, providers overriding equal label sets."""
        now_ms = int(self.clock() * 1000)
        merged: dict[Labels, float] = {
            labels: value for labels, _, value in self.store.latest_values(now_ms, self.lookback_ms)
        }
        for provider in self.providers:
            for sample in provider():
                merged[sample.labels] = sample.value
        return list(merged.items())

    def collect(self) -> Iterator[Metric]:
        """Build metric families: one per series name (histogram parts stay separate, untyped)."""
        catalogue = load_catalogue()
        families: dict[str, Metric] = {}
        for labels, value in sorted(self.samples()):
            name = metric_name(labels)
            if not name:
                continue
            spec = catalogue.get(name)
            typ = spec.type if spec else "unknown"
            family_key = _family_name(name, typ)
            family = families.get(family_key)
            if family is None:
                doc = spec.help if spec else "Series collected or recorded by inference-watchdog."
                family = families[family_key] = Metric(family_key, doc, typ)
            family.add_sample(name, {k: v for k, v in labels if k != METRIC_NAME}, value)
        yield from families.values()
