"""The exporter's cached page: the same bytes as prometheus-client's ``generate_latest``, scrape after scrape."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from watchdog.exporter.collector import SeriesLimiter, StoreCollector, family_of
from watchdog.exporter.selection import ExportSelection
from watchdog.model import Sample, metric, metric_name
from watchdog.store import Store

NOW_MS = 1_800_000_000_000


def _samples(step: int) -> list[Sample]:
    """Agent series (typed from the catalogue), engine pass-through with awkward label values, histogram
    parts, special floats; values and the set of series change with ``step``."""
    out = [
        Sample(metric("watchdog_gpu_temperature_celsius", gpu="0", uuid="GPU-0"), 61.0 + step),
        Sample(metric("watchdog_ticks_total"), float(step)),
        Sample(metric("watchdog_gpu_xid_errors_total", gpu="1", uuid="GPU-1", xid="79"), 1e22 if step else 0.0),
        Sample(metric("vllm:num_requests_running", job="vllm", instance="127.0.0.1:8000",
                      model_name='we"ird\\mo\ndel ü'), -0.0 if step % 2 else 3.0),
        Sample(metric("vllm:kv_cache_usage_perc", job="vllm", instance="127.0.0.1:8000"), math.inf),
        Sample(metric("vllm:e2e_request_latency_seconds_sum", job="vllm", instance="127.0.0.1:8000"), math.nan),
        Sample(metric("noname_labels_only"), 1234567.0 * (step + 1)),
    ]
    for le in ("0.1", "1.0", "+Inf"):
        out.append(Sample(metric("vllm:time_to_first_token_seconds_bucket", job="vllm", le=le), float(step * 3)))
    if step % 3 == 1:  # series come and go
        out.append(Sample(metric("engine:requests_running", job="vllm", model_name="m"), 2.5 + step))
    return out


def _pair(store: Store, providers: list[list[Sample]],
          limiter: SeriesLimiter) -> tuple[StoreCollector, CollectorRegistry]:
    collector = StoreCollector(store, providers=[lambda: providers[0]], clock=lambda: NOW_MS / 1000,
                               limiter=limiter)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return collector, registry


def _parsed(body: bytes) -> list[tuple[str, str, list[tuple[str, dict[str, str], str]]]]:
    return [(f.name, f.type, [(s.name, s.labels, repr(s.value)) for s in f.samples])
            for f in text_string_to_metric_families(body.decode())]


def test_cached_page_equals_generate_latest_as_series_and_values_change() -> None:
    store = Store()
    providers = [[Sample(metric("watchdog_exporter_requests_total", handler="metrics", code="200"), 1.0)]]
    collector, _ = _pair(store, providers, SeriesLimiter(max_per_metric=2, max_per_job=100))
    reference_limiter = SeriesLimiter(max_per_metric=2, max_per_job=100)
    _, reference_registry = _pair(store, providers, reference_limiter)
    for step in range(7):
        store.ingest("test", _samples(step), NOW_MS - 1000 * (7 - step))
        providers[0] = [Sample(metric("watchdog_exporter_requests_total", handler="metrics", code="200"),
                               float(step))]
        cached = collector.render()
        expected = generate_latest(reference_registry)
        assert cached == expected, f"step {step}"
        assert _parsed(cached) == _parsed(expected)
        assert collector.limiter.dropped_total == reference_limiter.dropped_total  # the fast path counts too
    assert collector.limiter.dropped_total["per_metric"] > 0  # the cap (2 buckets of 3) cut something
    assert collector.page.rebuilds_total < 7  # steady steps reused the layout


def test_unchanged_series_set_reuses_the_layout() -> None:
    store = Store()
    collector, _ = _pair(store, [[]], SeriesLimiter())
    store.ingest("test", [Sample(metric("a", x="1"), 1.0), Sample(metric("b"), 2.0)], NOW_MS - 2000)
    first = collector.render()
    store.ingest("test", [Sample(metric("a", x="1"), 5.0), Sample(metric("b"), 2.0)], NOW_MS - 1000)
    second = collector.render()
    assert collector.page.rebuilds_total == 1
    assert b'a{x="1"} 1.0' in first and b'a{x="1"} 5.0' in second and b"b 2.0" in second


class _Oracle:
    """The page as the exporter defined it before any caching: the store's fresh series in store order
    (``latest_values``, as the exporter read them before), the limiter's sorted ``admit`` on its own
    instance, providers merged through a dict, families built with prometheus-client's ``Metric`` and
    written by ``generate_latest``."""

    def __init__(self, store: Store, provided: list[list[Sample]], limiter: SeriesLimiter,
                 now_ms: list[int]) -> None:
        self.store, self.provided, self.limiter, self.now_ms = store, provided, limiter, now_ms

    def collect(self) -> Iterator[Metric]:
        # The collector's selection and key: the store's memo of kept series stays the collector's.
        selection = ExportSelection()
        fresh = [(labels, value) for labels, _, value in self.store.latest_values(
            self.now_ms[0], 60_000, keep=selection.keep,
            keep_key=("pass_through", selection.pass_through_engine_series))]
        merged = dict(self.limiter.admit(fresh))
        for sample in [*self.provided[0], *self.limiter.self_samples()]:
            merged[sample.labels] = sample.value
        families: dict[str, Metric] = {}
        for labels, value in sorted(merged.items()):
            name = metric_name(labels)
            family, typ, doc = family_of(name)
            if family not in families:
                families[family] = Metric(family, doc, typ)
            families[family].add_sample(name, {k: v for k, v in labels if k != "__name__"}, value)
        yield from families.values()


def test_consecutive_scrapes_equal_an_uncached_page_as_series_come_go_stale_and_hit_caps() -> None:
    """Scrape after scrape on one collector: series added and removed, gone stale or out of the lookback
    without the series set changing, the per-metric cap hit and released, caps changed, a provider
    replacing a stored sample and its own set changing, signed zeros, NaN, and another reader of the
    store and the collector in between. Each page must be the uncached page, drops counted alike."""
    store = Store()
    provided: list[list[Sample]] = [[]]
    now_ms = [NOW_MS]
    limiter, reference = SeriesLimiter(max_per_metric=3, max_per_job=100), SeriesLimiter(3, 100)
    collector = StoreCollector(store, providers=[lambda: provided[0]], clock=lambda: now_ms[0] / 1000,
                               lookback_ms=60_000, limiter=limiter)
    oracle = CollectorRegistry(auto_describe=False)
    oracle.register(_Oracle(store, provided, reference, now_ms))
    pages: list[bytes] = []

    def put(samples: list[Sample], source: str = "test") -> None:
        now_ms[0] += 1000
        store.ingest(source, samples, now_ms[0])

    def check(step: int) -> None:
        page = collector.render()
        assert page == generate_latest(oracle), f"step {step}"
        assert limiter.dropped_total == reference.dropped_total, f"step {step}"
        pages.append(page)

    def gauges(count: int, value: float) -> list[Sample]:
        return [Sample(metric("watchdog_gpu_temperature_celsius", gpu=str(i), uuid=f"GPU-{i}"), value)
                for i in range(count)]

    def advance(seconds: int) -> None:
        now_ms[0] += seconds * 1000

    steps: list[Callable[[], object]] = [
        lambda: put([*gauges(2, 60.0), Sample(metric("b"), 0.0)]),
        lambda: put([*gauges(2, 61.0), Sample(metric("b"), -0.0)]),  # values only, 0.0 to -0.0
        lambda: put([*gauges(5, 62.0), Sample(metric("b"), math.nan)]),  # over the cap of 3
        lambda: put([*gauges(5, 62.0), Sample(metric("b"), math.nan)]),  # steady, capped
        lambda: put([*gauges(5, 62.0)[1:], Sample(metric("b"), math.nan)]),  # GPU 0 goes stale (left out)
        lambda: provided.__setitem__(0, [Sample(metric("b"), 7.0)]),  # a provider replaces a stored series
        lambda: provided.__setitem__(0, [Sample(metric("b"), 8.0), Sample(metric("c", k="v"), 1.0)]),
        lambda: (limiter.set_limits(2, 100), reference.set_limits(2, 100)),  # caps changed
        lambda: (advance(60), put([Sample(metric("d"), 1.0)], source="other")),  # the rest ages out
        lambda: (limiter.set_limits(10, 100), reference.set_limits(10, 100)),  # the cap released
        lambda: put([*gauges(6, 64.0), Sample(metric("b"), 0.0)]),
        lambda: store.latest_values(now_ms[0], keep=lambda labels, source: True, keep_key="other"),
        lambda: list(collector.collect()),  # another reader of the same collector in between
        lambda: (store.gc(now_ms[0] + store.retention_ms), advance(store.retention_ms // 1000),
                 put(gauges(2, 1.5))),  # everything removed, two series again
    ]
    for step, change in enumerate(steps):
        change()
        check(step)
        check(step)  # the same scrape again: the steady path
    assert limiter.dropped_total["per_metric"] > 0
    assert b'b -0.0' in pages[2] and b"b NaN" in pages[4] and b'b 7.0' in pages[10]  # the steps did happen
    assert b'gpu="3"' in pages[8] and b'gpu="3"' not in pages[6]  # a newcomer took the stale series' slot
    assert b"watchdog_gpu_temperature_celsius{" not in pages[16] and b"\nd 1.0" in pages[16]  # lookback
    assert pages[20].count(b"watchdog_gpu_temperature_celsius{") == 6  # the cap released
