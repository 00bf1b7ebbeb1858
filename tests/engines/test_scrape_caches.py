"""The engine collector from scrape to scrape: its per-endpoint caches serve what an uncached scrape would
(relabelled series), and the parse deadline, the detected kind, the derived config series and the scrape
series follow each page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from watchdog.collectors.engines import (
    CACHE_SLACK,
    DEADLINE_CHECK_EVERY,
    EngineCollector,
    ScrapeCaches,
    ScrapeError,
    apply_target_labels,
    parse_payload,
    scrape_result_samples,
)
from watchdog.config.settings import EngineSettings, section_settings
from watchdog.engines.config_series import config_series
from watchdog.exposition import parse_exposition
from watchdog.model import Sample, label_value, make_labels, metric, metric_name

TARGETS = {"job": "j", "instance": "h:1", "cluster": "c"}
PAGE = """\
# TYPE vllm:x counter
vllm:x_total{model_name="m",job="inner"} 1
vllm:x_created{model_name="m"} 1.7e9
vllm:y{instance="pod:1",exported_instance="e"} 2
plain 3
vllm:cache_config_info{block_size="16",num_gpu_blocks="100",Zone="a"} 1
"""


def uncached(text: str) -> list[Sample]:
    """What a scrape yields with nothing cached: parse, then attach target labels to each sample."""
    return [Sample(apply_target_labels(labels, TARGETS), value)
            for labels, value, _ in parse_exposition(text, drop_created=True, cache={})]


def test_cached_scrapes_yield_the_uncached_samples_and_reuse_the_label_sets() -> None:
    caches = ScrapeCaches()
    first = parse_payload(PAGE, TARGETS, caches)
    second = parse_payload(PAGE.replace(" 2\n", " 5\n"), TARGETS, caches)
    assert first == uncached(PAGE)
    assert second == uncached(PAGE.replace(" 2\n", " 5\n"))
    assert [metric_name(s.labels) for s in first] == ["vllm:x_total", "vllm:y", "plain", "vllm:cache_config_info"]
    assert label_value(first[1].labels, "exported_instance") == "e"
    assert label_value(first[1].labels, "exported_exported_instance") == "pod:1"
    assert all(a.labels is b.labels for a, b in zip(first, second, strict=True))  # from the cache
    assert all(type(s) is Sample for s in second)


def test_a_series_text_cached_for_one_target_set_is_relabelled_for_each_cache_apart() -> None:
    mine, other = ScrapeCaches(), ScrapeCaches()
    parse_payload(PAGE, TARGETS, mine)
    samples = parse_payload(PAGE, {"job": "k", "instance": "h:2"}, other)
    assert {label_value(s.labels, "job") for s in samples} == {"k"}


def test_relabel_needs_the_callers_cache() -> None:
    with pytest.raises(ValueError, match="cache"):
        list(parse_exposition(PAGE, relabel=lambda labels: labels))


def clock_after(calls: int) -> Iterator[float]:
    """0.0 for ``calls`` readings, then far past any deadline."""
    for _ in range(calls):
        yield 0.0
    while True:
        yield 1e9


@pytest.mark.parametrize("readings_in_time", [0, 1, 2])
def test_parsing_stops_at_the_deadline_every_few_thousand_samples(readings_in_time: int) -> None:
    page = "".join(f'm{{i="{i}"}} {i}\n' for i in range(2 * DEADLINE_CHECK_EVERY + 5))
    ticks = clock_after(readings_in_time)
    with pytest.raises(ScrapeError, match=f"after {readings_in_time * DEADLINE_CHECK_EVERY} samples"):
        parse_payload(page, TARGETS, ScrapeCaches(), deadline=1.0, clock=lambda: next(ticks))
    ticks = clock_after(3)
    assert len(parse_payload(page, TARGETS, ScrapeCaches(), deadline=1.0, clock=lambda: next(ticks))) == len(
        page.splitlines())


def test_config_series_finds_info_series_whose_name_is_not_the_first_label() -> None:
    info = make_labels({"__name__": "vllm:cache_config_info", "Zone": "a", "num_gpu_blocks": "7", "job": "j"})
    assert info[0] == ("Zone", "a")
    out = config_series([Sample(metric("other", job="j"), 1.0), Sample(info, 1.0), Sample((), 1.0)], ["job"])
    assert out == [Sample(metric("watchdog_engine_kv_cache_blocks", job="j"), 7.0)]


def test_scrape_result_samples_under_prometheus_names_and_ours() -> None:
    assert scrape_result_samples(TARGETS, True, 0.25, 9) == [
        Sample(metric(name, **TARGETS), value) for name, value in
        (("up", 1.0), ("watchdog_engine_up", 1.0), ("scrape_duration_seconds", 0.25),
         ("watchdog_engine_scrape_duration_seconds", 0.25), ("scrape_samples_scraped", 9.0),
         ("watchdog_engine_scrape_samples_scraped", 9.0))]


def engine(kind: str, pages: list[str]) -> EngineCollector:
    settings = section_settings(EngineSettings, "engines[]", {"url": "http://h:1/metrics", "job": "j", "kind": kind})
    served = iter(pages)
    return EngineCollector(settings, fetcher=lambda url, timeout, cap: next(served))


def test_auto_kind_follows_the_payload_from_scrape_to_scrape() -> None:
    vllm = "vllm:a 1\nvllm:b 2\n"
    sglang = "sglang:a 1\nsglang:b 2\nvllm:a 1\n"
    collector = engine("auto", [vllm, vllm, sglang, sglang, vllm])
    kinds = []
    for _ in range(5):
        samples = collector.collect()
        (info,) = [s for s in samples if metric_name(s.labels) == "watchdog_engine_info"]
        kinds.append(label_value(info.labels, "kind"))
    assert kinds == ["vllm", "vllm", "sglang", "sglang", "vllm"]


def test_failure_samples_are_a_fresh_list_each_time() -> None:
    collector = engine("vllm", [])
    first = collector.failure_samples()
    first.clear()
    again = collector.failure_samples()
    assert [(metric_name(s.labels), s.value) for s in again][:2] == [("up", 0.0), ("watchdog_engine_up", 0.0)]
    assert again == scrape_result_samples(collector.targets, False, collector.endpoint.scrape_timeout_seconds, 0)


def test_config_series_follow_the_info_labels_from_scrape_to_scrape() -> None:
    def page(blocks: int, value: float) -> str:
        return f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{blocks}"}} 1\nvllm:a {value}\n'

    pages = [page(100, 1), page(100, 2), page(200, 3), page(200, 4), page(100, 5), "vllm:a 6\n", page(100, 7)]
    collector = engine("vllm", pages)
    for text in pages:
        samples = collector.collect()
        parsed = [Sample(apply_target_labels(labels, collector.targets), value)
                  for labels, value, _ in parse_exposition(text, drop_created=True, cache={})]
        expected = config_series(parsed, collector.targets)
        assert samples[:len(parsed)] == parsed
        assert samples[len(parsed):len(parsed) + len(expected)] == expected
        assert metric_name(samples[len(parsed) + len(expected)].labels) == "watchdog_engine_info"


@pytest.mark.parametrize("entries", [CACHE_SLACK - 1, CACHE_SLACK, CACHE_SLACK + 1, CACHE_SLACK + 20, CACHE_SLACK + 21])
def test_caches_are_emptied_past_twice_the_page_plus_the_slack(entries: int) -> None:
    page = "m 1\n" * 10  # limit: 2 * 10 + CACHE_SLACK
    for table in ("series", "pairs"):
        caches = ScrapeCaches()
        getattr(caches, table).update({str(i): () for i in range(entries)})
        caches.bound(page)
        assert len(getattr(caches, table)) == (0 if entries > 2 * 10 + CACHE_SLACK else entries)
