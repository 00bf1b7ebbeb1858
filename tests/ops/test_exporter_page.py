"""The exporter's cached page: the same bytes as prometheus-client's ``generate_latest``, scrape after scrape."""

from __future__ import annotations

import math

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from watchdog.exporter.collector import SeriesLimiter, StoreCollector
from watchdog.model import Sample, metric
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
