"""One series' points, oldest first: sealed chunks (:mod:`watchdog.store.codec`) then an uncompressed head.

A :class:`Series` appends points in time order (a duplicate timestamp replaces, an older one is ignored,
as Prometheus does), trims by count and by time, and reads back exactly what was appended:
:meth:`Series.window` and :meth:`Series.span` for a time range, :meth:`Series.point_at` for an instant,
:meth:`Series.tail` for the live uncompressed arrays the evaluator's caches scan.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from watchdog.model import Labels
from watchdog.store.codec import Chunk, chunk_bounds, chunk_len, decode_chunk, encode_chunk

CHUNK_POINTS = 120
"""Points per sealed chunk."""
HEAD_POINTS = 16
"""Newest points always kept uncompressed (instant selectors never decode). A series read further back
(a rule's ``[5m]`` ending near now) keeps that much uncompressed too, its *head span*: the first such read
unseals what it needs, later ones never decode."""
NEAR_NOW_MS = 60_000
"""A window ending at most this long before a series' newest point counts towards its head span."""


class SharedTimestamps:
    """The head timestamp arrays made since the store last called :meth:`clear` (at each collection), by
    content: a series whose head needs new timestamps takes an array already made with the same ones, so
    series appended at the same times hold one array between them (see :class:`Series`). The plain path,
    each series with its own array, is what :meth:`share` returning its argument gives."""

    __slots__ = ("_arrays",)

    def __init__(self) -> None:
        self._arrays: dict[tuple[int, int, int], array] = {}

    def share(self, times: array) -> array:
        """An array made since :meth:`clear` whose first ``len(times)`` entries are ``times`` (it may hold
        more: arrays are only ever appended to), else ``times``, which later calls may then return."""
        n = len(times)
        if not n:
            return times
        key = (times[0], times[n - 1], n)
        found = self._arrays.get(key)
        if found is not None and (found[:n] if len(found) > n else found) == times:
            return found
        self._arrays[key] = times
        return times

    def clear(self) -> None:
        """Forget the arrays made so far (they stay with the series that hold them)."""
        self._arrays.clear()


_EMPTY_TIMES = array("q")
_SINGLE = struct.Struct("f")
_pack_single, _unpack_single = _SINGLE.pack, _SINGLE.unpack


def _is_float32(value: float) -> bool:
    """True when ``value`` is exactly a float32 (the sign of zero included; never a NaN)."""
    try:
        return bool(_unpack_single(_pack_single(value))[0] == value)
    except OverflowError:
        return False


def _float32_if_exact(values: array) -> array:
    """``values`` as float32 when each is exactly one (else ``values`` itself)."""
    if values.typecode == "f":
        return values
    single = array("f", values)
    return single if array("d", single) == values else values


class Series:
    """One series' points, oldest first: sealed chunks (compressed, exact) then an uncompressed head.

    About 2-5 bytes a point in the sealed chunks for regular ticks (delta timestamps; constant, integer
    delta, float32-exact or double values per chunk) instead of 16. Readers use :meth:`window` and
    :meth:`point_at`; the head (at least the newest :data:`HEAD_POINTS`) is served without decoding.

    The head's timestamps are shared between series: ``_head_t`` is an append-only array of which the
    series' head is the first ``len(_head_v)`` entries (the invariant every method keeps). Series appended
    at the same timestamps (one source's series, every collection at the tick's time) hold one array:
    the first to append a new timestamp appends it in place, the others find it already there; a series
    whose timestamps part from the array's (it missed a collection, or seals or trims its head) moves to
    a new array through its store's :class:`SharedTimestamps`, which the others doing the same join. So
    the head costs about 8 bytes a point (the value) instead of 16, and 4 while every value in it is
    exactly a float32 (counters below 2**24, most gauges of NVML and the engines: ``_head_v`` is then an
    ``f`` array, read as the same Python floats; it widens to ``d`` at the first value that is not, and
    narrows again when a seal leaves only such values).
    """

    __slots__ = ("__weakref__", "_chunks", "_head_span_ms", "_head_t", "_head_v", "_min_t", "_shared", "labels",
                 "source")

    def __init__(self, labels: Labels, shared: SharedTimestamps | None = None, source: str = "") -> None:
        self.labels = labels
        self.source = source
        """What stores it (a collector, a rule: see :meth:`watchdog.store.Store.ingest`)."""
        self._shared = SharedTimestamps() if shared is None else shared
        self._chunks: list[Chunk] = []
        self._head_t = _EMPTY_TIMES  # shared, append-only: the head's timestamps are its first len(_head_v)
        self._head_v = array("f")  # float32 while every value is exactly one, else float64
        self._min_t = -(1 << 62)  # points before this are trimmed (inside the oldest chunk)
        self._head_span_ms = 0  # the head keeps this much before its newest point uncompressed (a read's window)

    def __len__(self) -> int:
        """Points held (a partly trimmed oldest chunk counts whole)."""
        return len(self._head_v) + sum(chunk_len(chunk) for chunk in self._chunks)

    def storage(self) -> tuple[int, int, int]:
        """(uncompressed points, sealed points, bytes of the sealed chunks): what the memory benchmark reports."""
        return (len(self._head_v), sum(chunk_len(chunk) for chunk in self._chunks),
                sum(len(chunk) for chunk in self._chunks))

    @property
    def timestamps(self) -> array:
        """Every point's timestamp, decoded (for tests and tools; the evaluator uses :meth:`window`)."""
        return array("q", self.span(self._min_t, 1 << 62)[0])

    @property
    def values(self) -> array:
        """Every point's value, decoded (see :attr:`timestamps`)."""
        return array("d", self.span(self._min_t, 1 << 62)[1])

    def append(self, t_ms: int, value: float, max_points: int) -> None:
        """Append a point; an out-of-order or duplicate timestamp replaces/ignores like Prometheus."""
        head_t, head_v = self._head_t, self._head_v
        n = len(head_v)
        if n:
            last = head_t[n - 1]
            if t_ms <= last:
                if t_ms == last:
                    if head_v.typecode == "f" and not _is_float32(value):
                        head_v = self._head_v = array("d", head_v)
                    head_v[-1] = value
                return
        elif self._chunks and t_ms <= chunk_bounds(self._chunks[-1])[1]:
            return  # never after a trim of the whole head: chunks end before the head
        if len(head_t) == n:
            if head_t is _EMPTY_TIMES:
                head_t = self._head_t = self._shared.share(array("q", (t_ms,)))
            else:
                head_t.append(t_ms)  # the first of its array's series at t_ms
        elif head_t[n] != t_ms:
            parted = head_t[:n]
            parted.append(t_ms)
            head_t = self._head_t = self._shared.share(parted)
        head_v.append(value)
        if head_v[n] != value and head_v.typecode == "f":  # not exactly a float32 (or a NaN): widen
            del head_v[-1]
            head_v = self._head_v = array("d", head_v)
            head_v.append(value)
        n += 1
        if n >= CHUNK_POINTS + HEAD_POINTS and head_t[CHUNK_POINTS - 1] < t_ms - self._head_span_ms:
            self._chunks.append(encode_chunk(head_t[:CHUNK_POINTS], head_v[:CHUNK_POINTS]))
            self._head_t = self._shared.share(head_t[CHUNK_POINTS:n])
            del head_v[:CHUNK_POINTS]
            self._head_v = _float32_if_exact(head_v)
            if len(self) > 2 * max_points:
                self.trim_count(max_points)

    def _drop_head(self, drop: int) -> None:
        """Drop the oldest ``drop`` points of the head."""
        self._head_t = self._shared.share(self._head_t[drop:len(self._head_v)])
        del self._head_v[:drop]

    def trim_count(self, keep: int) -> None:
        """Keep only the newest ``keep`` points."""
        if len(self._head_v) + CHUNK_POINTS * len(self._chunks) <= keep:  # sealed chunks hold CHUNK_POINTS
            return  # nothing to drop, known without decoding every chunk's length (gc asks every series)
        drop = len(self) - keep
        while self._chunks and drop >= chunk_len(self._chunks[0]):
            drop -= chunk_len(self._chunks.pop(0))
        if drop <= 0:
            return
        if self._chunks:
            times, _ = decode_chunk(self._chunks[0])
            self._min_t = max(self._min_t, times[drop])
        else:
            self._drop_head(drop)

    def trim_before(self, min_t_ms: int) -> None:
        """Drop points older than ``min_t_ms``."""
        if self._chunks:
            if chunk_bounds(self._chunks[0])[0] >= min_t_ms:
                return  # the oldest point is kept: nothing to drop or to hide
        elif not self._head_v or self._head_t[0] >= min_t_ms:
            return
        while self._chunks and chunk_bounds(self._chunks[0])[1] < min_t_ms:
            self._chunks.pop(0)
        if self._chunks:
            self._min_t = max(self._min_t, min_t_ms)
            return
        drop = bisect_left(self._head_t, min_t_ms, 0, len(self._head_v))
        if drop:
            self._drop_head(drop)

    def window(self, mint_ms: int, maxt_ms: int) -> tuple[list[int], list[float]]:
        """Points with ``mint_ms <= t <= maxt_ms`` (both ends closed), oldest first."""
        times, values = self.span(mint_ms, maxt_ms)
        return list(times), list(values)

    def span(self, mint_ms: int, maxt_ms: int) -> tuple[Sequence[int], Sequence[float]]:
        """:meth:`window` without copies where it can: array slices when the window lies in the head
        (the evaluator's hot path), else lists. Read-only for the caller."""
        mint_ms = max(mint_ms, self._min_t)
        head_t = self._head_t
        n = len(self._head_v)
        if n and head_t[n - 1] - mint_ms > self._head_span_ms and maxt_ms >= head_t[n - 1] - NEAR_NOW_MS:
            self._head_span_ms = head_t[n - 1] - mint_ms  # a window ending near now: keep this much uncompressed
            self._unseal(mint_ms)
            head_t = self._head_t
            n = len(self._head_v)
        if (n and head_t[0] <= mint_ms) or not self._chunks:
            lo = bisect_left(head_t, mint_ms, 0, n)
            hi = bisect_right(head_t, maxt_ms, lo, n)
            return head_t[lo:hi], self._head_v[lo:hi]
        times: list[int] = []
        values: list[float] = []
        for chunk in self._chunks:
            first_t, last_t = chunk_bounds(chunk)
            if last_t < mint_ms:
                continue
            if first_t > maxt_ms:
                break
            chunk_t, chunk_v = decode_chunk(chunk)
            times += chunk_t
            values += chunk_v
        if not n or head_t[0] <= maxt_ms:
            times += head_t[:n]
            values += self._head_v
        lo = bisect_left(times, mint_ms)
        hi = bisect_right(times, maxt_ms, lo)
        return times[lo:hi], values[lo:hi]

    def tail(self, mint_ms: int) -> tuple[array, array]:
        """The uncompressed arrays (timestamps, values) of the newest points, holding every point at or
        after ``mint_ms`` (unsealed if needed; the series' head span grows to cover it). Live arrays of the same
        length: read them at once, never write them (the timestamps may be shared with other series)."""
        n = len(self._head_v)
        head_t = self._head_t
        if n and head_t[n - 1] - mint_ms > self._head_span_ms:
            self._head_span_ms = head_t[n - 1] - mint_ms
        if self._chunks and (not n or head_t[0] > mint_ms):
            self._unseal(mint_ms)
        n = len(self._head_v)
        if len(self._head_t) != n:  # the array holds newer timestamps of other series: take one of n
            head_t = self._shared.share(self._head_t[:n])
            self._head_t = head_t if len(head_t) == n else self._head_t[:n]
        return self._head_t, self._head_v

    def _unseal(self, mint_ms: int) -> None:
        """Move the sealed chunks holding points at or after ``mint_ms`` back into the head."""
        keep = len(self._chunks)
        while keep and chunk_bounds(self._chunks[keep - 1])[1] >= mint_ms:
            keep -= 1
        if keep == len(self._chunks):
            return
        times, values = array("q"), array("d")
        for chunk in self._chunks[keep:]:
            chunk_t, chunk_v = decode_chunk(chunk)
            times.extend(chunk_t)
            values.extend(chunk_v)
        del self._chunks[keep:]
        n = len(self._head_v)
        times.extend(self._head_t[:n])
        values.extend(self._head_v.tolist() if self._head_v.typecode != "d" else self._head_v)
        if not self._chunks:  # the oldest chunk came back whole: drop what a trim had only hidden
            drop = bisect_left(times, self._min_t)
            del times[:drop], values[:drop]
        self._head_t, self._head_v = self._shared.share(times), _float32_if_exact(values)

    def point_at(self, t_ms: int) -> tuple[int, float] | None:
        """The newest point at or before ``t_ms``, or None."""
        head_t = self._head_t
        n = len(self._head_v)
        if n and head_t[0] <= t_ms:
            index = bisect_right(head_t, t_ms, 0, n) - 1
            return head_t[index], self._head_v[index]
        for chunk in reversed(self._chunks):
            if chunk_bounds(chunk)[0] <= t_ms:
                times, values = decode_chunk(chunk)
                index = bisect_right(times, t_ms) - 1
                return (times[index], values[index]) if times[index] >= self._min_t else None
        return None

    def latest(self) -> tuple[int, float] | None:
        """The newest point, or None."""
        head_v = self._head_v
        if head_v:
            return self._head_t[len(head_v) - 1], head_v[-1]
        if self._chunks:
            times, values = decode_chunk(self._chunks[-1])
            return times[-1], values[-1]
        return None
