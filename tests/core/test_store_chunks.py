"""Compressed series storage: every window and point reads back exactly what was appended."""

from __future__ import annotations

import copy
import math
import random
import struct
from array import array
from bisect import bisect_left, bisect_right

import pytest

from watchdog.model import STALE_NAN, Sample, metric
from watchdog.store import Series, Store
from watchdog.store.codec import decode_chunk, encode_chunk
from watchdog.store.series import CHUNK_POINTS, HEAD_POINTS, SharedTimestamps


def _bits(values: list[float]) -> list[int]:
    return [struct.unpack("<Q", struct.pack("<d", v))[0] for v in values]


KINDS = {
    "constant": lambda i, rng: 7.0,
    "counter": lambda i, rng: float(1000 + 3 * i + rng.randrange(3)),
    "big_counter": lambda i, rng: float(2**40 + i * 100_000),
    "float32": lambda i, rng: 0.5 * rng.randrange(100),
    "double": lambda i, rng: rng.random(),
    "special": lambda i, rng: rng.choice([math.nan, STALE_NAN, -0.0, 0.0, math.inf, -math.inf, 1.0]),
    "huge": lambda i, rng: 1e300 * rng.random(),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("regular", [True, False])
def test_chunks_round_trip_bitwise(kind: str, regular: bool) -> None:
    rng = random.Random(kind)
    times = array("q", [1_800_000_000_000 + (1000 * i if regular else 1000 * i + rng.randrange(40))
                        for i in range(CHUNK_POINTS)])
    values = array("d", [KINDS[kind](i, rng) for i in range(CHUNK_POINTS)])
    chunk = encode_chunk(times, values)
    decoded_t, decoded_v = decode_chunk(chunk)
    assert decoded_t == list(times)
    assert _bits(decoded_v) == _bits(list(values))


def test_compact_encodings_are_chosen() -> None:
    times = array("q", range(0, 120_000, 1000))
    header = 36
    assert len(encode_chunk(times, array("d", [5.0] * 120))) == header  # constant, regular: no arrays
    assert len(encode_chunk(times, array("d", [float(i * 3) for i in range(120)]))) == header + 119  # b deltas
    assert len(encode_chunk(times, array("d", [i / 4 for i in range(120)]))) == header + 4 * 120  # float32
    jittery = array("q", [t + t % 7 for t in times])
    assert len(encode_chunk(jittery, array("d", [1.0] * 120))) == header + 119  # one byte a timestamp


def test_windows_and_points_match_a_plain_list_across_chunks_and_trims() -> None:
    rng = random.Random(3)
    series = Series(metric("x"))
    ref_t: list[int] = []
    ref_v: list[float] = []
    t = 0
    for i in range(3 * CHUNK_POINTS + HEAD_POINTS + 17):
        t += rng.choice([1000, 1000, 1000, 1003, 2000])
        value = rng.choice([float(i), rng.random(), STALE_NAN, 2.5])
        series.append(t, value, max_points=10_000)
        ref_t.append(t)
        ref_v.append(value)
    for trim_at in (None, ref_t[50], ref_t[CHUNK_POINTS + 5]):
        if trim_at is not None:
            series.trim_before(trim_at)
            keep = bisect_left(ref_t, trim_at)
            del ref_t[:keep], ref_v[:keep]
        for _ in range(200):
            lo = rng.randrange(ref_t[0] - 5000, ref_t[-1] + 5000)
            hi = lo + rng.randrange(0, 400_000)
            times, values = series.window(lo, hi)
            a, b = bisect_left(ref_t, lo), bisect_right(ref_t, hi)
            assert times == ref_t[a:b]
            assert _bits(values) == _bits(ref_v[a:b])
            point = series.point_at(hi)
            index = bisect_right(ref_t, hi) - 1
            expected = (ref_t[index], ref_v[index]) if index >= 0 else None
            assert (point is None) == (expected is None)
            if point and expected:
                assert point[0] == expected[0] and _bits([point[1]]) == _bits([expected[1]])
        assert list(series.timestamps) == ref_t
        assert series.latest() == (ref_t[-1], ref_v[-1]) or math.isnan(ref_v[-1])


def test_count_trim_keeps_the_newest_points() -> None:
    series = Series(metric("x"))
    for i in range(1000):
        series.append(i * 1000, float(i), max_points=10_000)
    series.trim_count(300)
    assert list(series.timestamps) == [i * 1000 for i in range(700, 1000)]


@pytest.mark.parametrize("seed", range(4))
def test_trims_leave_the_points_a_plain_list_keeps(seed: int) -> None:
    """The store's gc calls ``trim_before`` and ``trim_count`` on every series, and both return at once
    when they have nothing to drop: after each of a sequence of trims (retention edges before, inside and
    after the sealed chunks and the head; point caps below and above the series' length; reads that
    unseal in between) the series reads back exactly the newest ``max_points`` of the appended points
    at or after the edge."""
    rng = random.Random(seed)
    series = Series(metric("x"))
    ref_t: list[int] = []
    ref_v: list[float] = []
    t = sealed = 0
    for _ in range(16):
        for _ in range(rng.randrange(0, 3 * CHUNK_POINTS)):
            t += rng.choice([1000, 1000, 1003, 2000])
            value = rng.choice([float(t), 2.5, STALE_NAN])
            series.append(t, value, max_points=10_000)
            ref_t.append(t)
            ref_v.append(value)
        if rng.random() < 0.3:
            series.window(t - rng.randrange(0, 60_000), t)  # a read that unseals (a rule's reach)
        min_t = t - rng.choice([0, 30_000, 150_000, 300_000, 500_000, 10**9])
        max_points = rng.choice([50, 300, 700, 10_000])
        sealed += bool(series._chunks)
        series.trim_before(min_t)
        series.trim_count(max_points)
        keep = max(bisect_left(ref_t, min_t), len(ref_t) - max_points)
        del ref_t[:keep], ref_v[:keep]
        read = copy.deepcopy(series)  # reads unseal: check a copy, keep the chunks
        assert list(read.timestamps) == ref_t
        assert _bits(list(read.values)) == _bits(ref_v)
        for lo in (min_t - 5000, min_t, min_t + 7000, t - 60_000):
            times, values = copy.deepcopy(series).window(lo, t)
            a, b = bisect_left(ref_t, lo), bisect_right(ref_t, t)
            assert times == ref_t[a:b] and _bits(values) == _bits(ref_v[a:b])
    assert sealed > 4  # trims met sealed chunks


def test_full_store_uses_a_few_bytes_a_point() -> None:
    """15 minutes of 1 s ticks of counters and gauges: far below the 16 bytes of plain arrays."""
    import tracemalloc

    store = Store(retention_ms=900_000, max_points=960)
    labels = [metric("m", i=str(i)) for i in range(50)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for tick in range(960):
        for n, lbl in enumerate(labels):
            value = float(tick * n) if n % 2 else (n + math.sin(tick)) / 3
            store.append(lbl, 1_800_000_000_000 + tick * 1000 + (tick * 7 % 5), value)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert used / (960 * 50) < 9, used / (960 * 50)  # plain arrays: over 16


def test_tail_holds_every_point_since_mint_uncompressed_and_later_reads_need_no_decoding() -> None:
    series = Series(metric("x"))
    for i in range(5 * CHUNK_POINTS):
        series.append(i * 1000 + i % 3, float(i), max_points=10_000)
    assert series.storage()[1] > 0  # sealed chunks exist
    mint = (5 * CHUNK_POINTS - 300) * 1000
    times, values = series.tail(mint)
    assert times[0] <= mint and list(values[-3:]) == [597.0, 598.0, 599.0]
    for i in range(5 * CHUNK_POINTS, 7 * CHUNK_POINTS):  # the reach keeps 300 s uncompressed as it grows
        series.append(i * 1000, float(i), max_points=10_000)
    assert series.tail(i * 1000 - 300_000)[0][0] <= i * 1000 - 300_000
    assert series.storage()[0] <= 300 + CHUNK_POINTS + HEAD_POINTS + 1


def test_series_collected_together_share_their_head_timestamps() -> None:
    store = Store(retention_ms=900_000, max_points=960)
    for i in range(400):
        samples = [Sample(metric("gpu_temp", gpu=str(g)), float(i + g)) for g in range(8)]
        store.ingest("collector:nvml", samples, 1_800_000_000_000 + 1000 * i)
        for series in store.select([("__name__", "=", "gpu_temp")]):
            if series.labels[1][1] in "0123":  # half of them read back over 5 minutes: a longer head
                series.tail(1_800_000_000_000 + 1000 * i - 300_000)
    heads = {id(series.tail(0)[0]) for series in store.all_series()}
    assert len(heads) == 2  # one array for the series read back, one for the others
    for series in store.all_series():
        gpu = int(series.labels[1][1])
        assert list(series.values) == [float(i + gpu) for i in range(400)]


class _OwnTimestamps(SharedTimestamps):
    """The plain path: every series keeps its own head timestamps."""

    def share(self, times: array) -> array:
        return times


def test_shared_timestamps_keep_every_series_exact_under_gaps_trims_and_reads() -> None:
    """Series part from and join shared timestamp arrays at random (gaps, staleness, out-of-order points,
    seals, unseals, trims); each must read back exactly what a plain list of its points holds, and the
    store must hold what a store whose series each own their timestamps holds."""
    rng = random.Random(16)
    retention = 400_000
    store = Store(retention_ms=retention, max_points=10_000)
    plain = Store(retention_ms=retention, max_points=10_000, shared_timestamps=_OwnTimestamps())
    names = [metric("x", k=str(k)) for k in range(10)]
    model: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]] = {labels: [] for labels in names}

    def add(labels: tuple[tuple[str, str], ...], t_ms: int, value: float) -> None:
        points = model[labels]
        if points and t_ms <= points[-1][0]:
            if t_ms == points[-1][0]:
                points[-1] = (t_ms, value)
            return
        points.append((t_ms, value))

    seen: set[tuple[tuple[str, str], ...]] = set()
    t = 1_800_000_000_000
    for step in range(900):
        t += rng.choice([1000, 1000, 1000, 1000, 1001, 3000])
        present = [labels for labels in names if rng.random() < (0.98 if step % 200 < 150 else 0.5)]
        batch = [Sample(labels, rng.choice([float(step), rng.random(), 1.0])) for labels in present]
        store.ingest("a", batch, t)
        plain.ingest("a", batch, t)
        for sample in batch:
            add(sample.labels, t, sample.value)
        for labels in seen - set(present):
            add(labels, t, STALE_NAN)
        seen = set(present)
        if rng.random() < 0.05:
            labels = rng.choice(names)
            late = t - rng.choice([0, 1000])
            store.append(labels, late, 42.0, "a")
            plain.append(labels, late, 42.0, "a")
            add(labels, late, 42.0)
        if step % 37 == 0:
            store.gc(t)
            plain.gc(t)
            held = {series.labels for series in store.all_series()}
            for labels in names:
                model[labels] = [p for p in model[labels] if p[0] >= t - retention] if labels in held else []
        for labels in rng.sample(names, 4):
            series = next(iter(store.select([("k", "=", labels[1][1])])), None)
            if series is None:
                continue
            points = model[labels]
            mint = t - rng.choice([5_000, 60_000, 150_000, 300_000])
            next(iter(plain.select([("k", "=", labels[1][1])]))).tail(mint)
            times, values = series.tail(mint)
            assert len(times) == len(values)
            start = len(points) - len(times)
            assert list(times) == [p[0] for p in points[start:]]
            assert _bits(list(values)) == _bits([p[1] for p in points[start:]])
            lo = rng.randrange(points[0][0] - 5000, t + 1000)
            hi = lo + rng.randrange(400_000)
            window_t, window_v = series.window(lo, hi)
            expect = [p for p in points if lo <= p[0] <= hi]
            assert window_t == [p[0] for p in expect]
            assert _bits(window_v) == _bits([p[1] for p in expect])
    for series in store.all_series():
        points = model[series.labels]
        assert list(series.timestamps) == [p[0] for p in points]
        assert _bits(list(series.values)) == _bits([p[1] for p in points])
    owned = {series.labels: series for series in plain.all_series()}
    assert sorted(owned) == sorted(series.labels for series in store.all_series())
    for series in store.all_series():
        assert list(series.timestamps) == list(owned[series.labels].timestamps)
        assert _bits(list(series.values)) == _bits(list(owned[series.labels].values))
        assert series.storage() == owned[series.labels].storage()


def test_head_values_are_float32_only_while_exact() -> None:
    series = Series(metric("x"))
    exact = [0.0, -0.0, 1.0, 0.5, 2.0**24, -3.25, math.inf, -math.inf, 3.4028234663852886e38]
    inexact = [0.1, 2.0**24 + 1, 1e-50, 1e300, math.nan, STALE_NAN, 3.4028235677973366e38]
    appended: list[float] = []
    t = 0
    for value in exact:
        t += 1000
        series.append(t, value, 10_000)
        appended.append(value)
    assert series.tail(t)[1].typecode == "f"  # (tail(t): the live head, reach unchanged)
    for value in inexact:
        narrow = Series(metric("y"))
        narrow.append(1000, 1.0, 10_000)
        narrow.append(1000, value, 10_000)  # a replaced point widens too
        assert narrow.tail(0)[1].typecode == "d" and _bits([narrow.tail(0)[1][0]]) == _bits([value])
        t += 1000
        series.append(t, value, 10_000)
        appended.append(value)
    assert series.tail(t)[1].typecode == "d"
    assert _bits(list(series.tail(t)[1])) == _bits(appended)
    for value in range(2 * CHUNK_POINTS):  # once the inexact points are sealed, the head narrows again
        t += 1000
        series.append(t, float(value), 10_000)
        appended.append(float(value))
    assert series.tail(t)[1].typecode == "f"
    assert _bits(list(series.values)) == _bits(appended)
    assert _bits(series.window(0, t)[1]) == _bits(appended)


def test_a_repeated_collection_stores_what_appending_each_series_stores() -> None:
    """``Store.ingest`` of the same series tick after tick against each series' own ``Series.append``:
    same points, same storage, over values that widen and narrow the head, seals, reads that hold points
    uncompressed, a series that missed collections, duplicate and out-of-order ticks."""
    rng = random.Random(16)
    names = [metric("x", i=str(i)) for i in range(6)]
    kinds = ["float32", "double", "special", "counter", "constant", "big_counter"]
    store = Store(retention_ms=10**9, max_points=10_000)
    reference = {labels: Series(labels) for labels in names}
    ticks = [1_800_000_000_000 + 1000 * i for i in range(3 * (CHUNK_POINTS + HEAD_POINTS))]
    ticks[40] = ticks[39]  # a tick again at the same time: the value replaced
    ticks[41] = ticks[38]  # and one from the past: ignored
    for i, t_ms in enumerate(ticks):
        # the first series misses a few collections (a batch without it is not a repeat), so its head's
        # timestamps part from the others'; from time to time every value moves to a double
        batch = names[1:] if 60 <= i < 64 else names
        samples = [Sample(labels, KINDS[kinds[n % len(kinds)] if i % 50 else "double"](i, rng))
                   for n, labels in enumerate(batch)]
        store.ingest("collector:x", samples, t_ms)
        for sample in samples:
            reference[sample.labels].append(t_ms, sample.value, store.max_points)
        if i == 60:  # the store marks the series that left the collection stale, once
            reference[names[0]].append(t_ms, STALE_NAN, store.max_points)
        for labels, expected in reference.items():  # sealed when the reference seals, same newest point
            (stored,) = store.select([("__name__", "=", "x"), ("i", "=", dict(labels)["i"])])
            assert stored.storage()[:2] == expected.storage()[:2], (i, labels)
            assert _bits([stored.latest()[1]]) == _bits([expected.latest()[1]])  # type: ignore[index]
        if i % 37 == 0:  # a rule reading the last minute keeps that much of each head uncompressed
            for labels in names[::2]:
                (stored,) = store.select([("__name__", "=", "x"), ("i", "=", dict(labels)["i"])])
                stored.span(t_ms - 60_000, t_ms)
                reference[labels].span(t_ms - 60_000, t_ms)
    for labels, expected in reference.items():
        (stored,) = store.select([("__name__", "=", "x"), ("i", "=", dict(labels)["i"])])
        got_t, got_v = stored.span(-(1 << 62), 1 << 62)
        want_t, want_v = expected.span(-(1 << 62), 1 << 62)
        assert list(got_t) == list(want_t)
        assert _bits(list(got_v)) == _bits(list(want_v))
        assert stored.storage() == expected.storage()
        assert stored._head_v.typecode == expected._head_v.typecode


def test_a_repeated_collection_appends_a_timestamp_its_shared_array_does_not_hold_next() -> None:
    """Series sharing their timestamps, some of them ahead (the others missed a point): the ones behind
    are not given the others' next timestamp by the repeat path, whether the series before them in the
    collection took it or not."""
    store = Store(retention_ms=10**9, max_points=10_000)
    a, b, c, d = (metric("x", i=name) for name in "abcd")
    order = [b, c, a, d]
    store.ingest("collector:x", [Sample(labels, 1.0) for labels in order], 1000)
    series = {labels: next(iter(store.select([("i", "=", dict(labels)["i"])]))) for labels in order}
    assert len({id(one._head_t) for one in series.values()}) == 1
    for labels in (b, c):  # the shared array holds 2000 next, which a and d never had
        series[labels].append(2000, 2.0, store.max_points)
    store.ingest("collector:x", [Sample(labels, 3.0) for labels in order], 3000)
    for labels, times in ((a, [1000, 3000]), (b, [1000, 2000, 3000]), (c, [1000, 2000, 3000]), (d, [1000, 3000])):
        assert list(series[labels].span(0, 10_000)[0]) == times
