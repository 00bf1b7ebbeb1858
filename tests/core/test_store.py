"""The series store: windows, staleness, retention, the series cap."""

from __future__ import annotations

import math
import tracemalloc

from watchdog.model import Sample, is_stale, metric
from watchdog.store import Store, matches


def _names(store: Store, *matchers: tuple[str, str, str]) -> list[str]:
    return sorted(dict(s.labels).get("job", "") for s in store.select(list(matchers)))


def test_window_is_closed_on_both_ends() -> None:
    store = Store()
    labels = metric("x")
    for t in range(0, 10_000, 1000):
        store.append(labels, t, float(t))
    (series,) = store.select([("__name__", "=", "x")])
    ts, vs = series.window(2000, 5000)
    assert ts == [2000, 3000, 4000, 5000]
    assert vs == [2000.0, 3000.0, 4000.0, 5000.0]


def test_ingest_marks_vanished_series_stale_only_for_that_source() -> None:
    store = Store()
    a, b = metric("up", job="a"), metric("up", job="b")
    store.ingest("src1", [Sample(a, 1), Sample(b, 1)], 1000)
    store.ingest("src2", [Sample(metric("other"), 5)], 1000)
    store.ingest("src1", [Sample(a, 1)], 2000)
    store.ingest("src2", [Sample(metric("other"), 6)], 2000)
    latest = {s.labels: s.latest() for s in store.all_series()}
    assert latest[a] == (2000, 1.0)
    t, value = latest[b]  # type: ignore[misc]
    assert t == 2000 and is_stale(value)
    assert latest[metric("other")] == (2000, 6.0)
    exported = {lbl for lbl, _, _ in store.latest_values(2000)}
    assert b not in exported and a in exported


def test_ordinary_nan_is_not_stale() -> None:
    assert not is_stale(float("nan"))
    assert math.isnan(float("nan"))


def test_out_of_order_points_are_ignored_and_duplicates_replace() -> None:
    store = Store()
    labels = metric("x")
    store.append(labels, 2000, 1.0)
    store.append(labels, 1000, 9.0)
    store.append(labels, 2000, 3.0)
    (series,) = store.select([("__name__", "=", "x")])
    assert list(series.timestamps) == [2000]
    assert list(series.values) == [3.0]


def test_regex_matchers_are_anchored() -> None:
    labels = metric("up", job="vllm-70b")
    assert matches(labels, [("job", "=~", "vllm.*")])
    assert not matches(labels, [("job", "=~", "vllm")])
    assert matches(labels, [("job", "!~", "sglang.*"), ("missing", "=", "")])
    assert not matches(labels, [("missing", "!=", "")])


def test_select_without_name_scans_all() -> None:
    store = Store()
    store.ingest("s", [Sample(metric("a", job="x"), 1), Sample(metric("b", job="y"), 1)], 1000)
    assert _names(store, ("job", "=~", ".+")) == ["x", "y"]


def test_gc_drops_old_points_and_dead_series() -> None:
    store = Store(retention_ms=10_000)
    store.append(metric("old"), 0, 1.0)
    for t in range(0, 30_000, 1000):
        store.append(metric("live"), t, 1.0)
    removed = store.gc(30_000)
    assert removed == 1
    (live,) = store.select([("__name__", "=", "live")])
    assert live.timestamps[0] >= 20_000
    assert len(store) == 1


def _points(store: Store, labels: object) -> list[tuple[int, float]]:
    (series,) = [s for s in store.all_series() if s.labels == labels]
    return list(zip(series.timestamps, series.values, strict=True))


def test_a_repeated_collection_appends_to_the_same_series() -> None:
    store = Store()
    a, b = metric("up", job="a"), metric("up", job="b")
    for t in range(1, 4):
        assert store.ingest("src", [Sample(a, t), Sample(b, -t)], t * 1000) == 2
    assert len(store) == 2 and store.generation == 2
    assert _points(store, a) == [(1000, 1.0), (2000, 2.0), (3000, 3.0)]
    assert _points(store, b) == [(1000, -1.0), (2000, -2.0), (3000, -3.0)]
    # the same series in another order, or one series fewer: the general path (staleness included)
    store.ingest("src", [Sample(b, 9), Sample(a, 8)], 4000)
    store.ingest("src", [Sample(b, 7)], 5000)
    store.ingest("src", [Sample(b, 6)], 6000)
    assert _points(store, a)[-2] == (4000, 8.0) and is_stale(_points(store, a)[-1][1])
    assert _points(store, b)[-3:] == [(4000, 9.0), (5000, 7.0), (6000, 6.0)]


def test_a_repeated_collection_after_its_series_left_the_store_creates_them_again() -> None:
    store = Store(retention_ms=10_000)
    a = metric("up", job="a")
    store.ingest("src", [Sample(a, 1)], 1000)
    store.ingest("src", [Sample(a, 2)], 2000)
    assert store.gc(60_000) == 1 and len(store) == 0  # every point past retention: the series is gone
    store.ingest("src", [Sample(a, 3)], 61_000)
    assert len(store) == 1 and _points(store, a) == [(61_000, 3.0)]


def test_latest_values_remember_the_kept_series_while_the_series_set_and_the_key_hold() -> None:
    store = Store()
    a, b, c = metric("a"), metric("b"), metric("c")
    store.ingest("src", [Sample(a, 1), Sample(b, 2)], 1000)
    calls: list[object] = []

    def keep_all_but_b(labels: object, source: str) -> bool:
        calls.append(labels)
        return labels != b

    def latest(key: object) -> list[tuple[object, float]]:
        return [(labels, value) for labels, _, value in store.latest_values(2000, keep=keep_all_but_b,
                                                                             keep_key=key)]

    assert latest("k") == [(a, 1.0)] and len(calls) == 2
    store.ingest("src", [Sample(a, 3), Sample(b, 4)], 2000)
    assert latest("k") == [(a, 3.0)] and len(calls) == 2  # same series, same key: keep not asked again
    assert latest("other") == [(a, 3.0)] and len(calls) == 4  # another key: asked again
    store.ingest("src", [Sample(a, 5), Sample(b, 6), Sample(c, 7)], 2000)  # a new series
    assert latest("other") == [(a, 5.0), (c, 7.0)] and len(calls) == 7
    assert [(labels, value) for labels, _, value in store.latest_values(2000, keep=keep_all_but_b)] == [
        (a, 5.0), (c, 7.0)] and len(calls) == 10  # without a key: asked every time


def test_series_cap_drops_and_counts_new_series() -> None:
    store = Store(max_series=100)
    samples = [Sample(metric("flood", id=str(i)), 1.0) for i in range(150)]
    stored = store.ingest("engine", samples, 1000)
    assert stored == 100
    assert len(store) == 100
    assert store.dropped_series_total == 50


def test_memory_stays_flat_over_many_ticks() -> None:
    """A day of 1 s ticks in miniature: memory after 2 880 ticks ≈ after 960 (retention 600 points)."""
    store = Store(retention_ms=600_000, max_points=660)
    series = [metric("m", i=str(i)) for i in range(50)]

    def run(ticks: range) -> None:
        for tick in ticks:
            t = tick * 1000
            store.ingest("s", [Sample(lbl, float(tick)) for lbl in series], t)
            if tick % 30 == 0:
                store.gc(t)

    tracemalloc.start()
    run(range(0, 960))  # both phases end at the same point of a chunk (sealed every 120 points)
    first = tracemalloc.get_traced_memory()[0]
    run(range(960, 2880))
    second = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert second < first * 1.5, (first, second)
    assert all(len(s.timestamps) <= 2 * 660 for s in store.all_series())
