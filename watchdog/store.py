"""Bounded in-memory time series: the one place rules, the exporter and `query` read from.

Contract:
- Each series holds (timestamp_ms, value) points in time order for at most ``retention_ms`` (trimmed by
  :meth:`Store.gc`) and at most ``max_points`` points: the newest in plain arrays, older ones in sealed
  chunks compressed without loss (see :class:`Series`), so every query result stays exact.
- :meth:`Store.ingest` replaces everything one *source* (a collector instance, the rule engine) reports:
  a series the source reported last time but not now gets Prometheus' staleness marker, so an instant
  selector stops returning it at once instead of 5 minutes later.
- The number of series is capped (``max_series``); new series beyond the cap are dropped and counted
  in :attr:`Store.dropped_series_total`, never silently grown.
- No source can starve another (:class:`SeriesQuotas`): each source may hold at most
  ``per_source`` series, and sources outside the fault path (engines, the process collector, anything
  not in ``reserved_prefixes``) share ``max_series - reserved`` between them, so the kernel log, NVML,
  the host, rule outputs and self-metrics always find room. A collection that would take a source past
  its quota first evicts that source's series it no longer reports; if it still does not fit, nothing
  of it is stored, the source's previous series go stale, and :class:`SeriesQuotaExceeded` says why.
- Churn is bounded per metric (``SeriesQuotas.label_values``): a source outside the fault path may give
  one label of one metric at most that many distinct values among its series. New series that would
  exceed it are dropped, the rest of the collection is stored, and :class:`LabelValuesExceeded` (raised
  once the collection is stored) names the source, metric, label and limit. Checking costs nothing while
  a source's series stay the same: only new series are looked at.
"""

from __future__ import annotations

import struct
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import sub

from watchdog.golang.goregexp import compile_anchored
from watchdog.model import METRIC_NAME, STALE_NAN, Labels, Sample, is_stale, label_value, metric_name

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


CHUNK_POINTS = 120
"""Points per sealed chunk."""
HEAD_POINTS = 16
"""Newest points always kept uncompressed (instant selectors never decode). A series read further back
(a rule's ``[5m]`` ending near now) keeps that much uncompressed too, its *reach*: the first such read
unseals what it needs, later ones never decode."""
NEAR_NOW_MS = 60_000
"""A window ending at most this long before a series' newest point counts towards its reach."""

_INT_TYPECODES = (("b", 1 << 7), ("h", 1 << 15), ("i", 1 << 31))

# A sealed chunk is one bytes object: a header (first t, last t, step, first value, the typecodes of the
# time and value arrays, the point count) then the two arrays. Timestamps: no array means regular, each
# ``step`` after the previous; else each is ``step`` plus its array entry (typecode B for a jittery regular
# tick: one byte a point past the smallest step; else H or q with step 0). Values: no array when every
# value is bitwise the first one; integer deltas (b/h/i) when every value is an exact integer; else
# absolute values ("f" when float32 holds each one exactly, else "d").
Chunk = bytes
_HEADER = struct.Struct("<qqqdccH")
_NONE = b"-"


def encode_chunk(times: array, values: array) -> Chunk:
    """Seal ``times``/``values`` (same length, 1 to 65535 points) into the smallest exact chunk."""
    n = len(times)
    if values.typecode != "d":
        values = array("d", values)
    first_t, last_t, first_v = times[0], times[-1], values[0]
    raw = values.tobytes()
    deltas = list(map(sub, times[1:], times))
    step, encoded_t = 0, None
    if n > 1:
        low, high = min(deltas), max(deltas)
        if low == high:
            step = low
        elif high - low < 256:
            step, encoded_t = low, array("B", [d - low for d in deltas])
        else:
            encoded_t = array("H" if high < 1 << 16 else "q", deltas)
    encoded_v = _encode_values(values, raw, first_v, n)
    header = _HEADER.pack(first_t, last_t, step, first_v,
                          encoded_t.typecode.encode() if encoded_t is not None else _NONE,
                          encoded_v.typecode.encode() if encoded_v is not None else _NONE, n)
    return b"".join((header, encoded_t.tobytes() if encoded_t is not None else b"",
                     encoded_v.tobytes() if encoded_v is not None else b""))


def _encode_values(values: array, raw: bytes, first_v: float, n: int) -> array | None:
    if raw == array("d", [first_v]).tobytes() * n:
        return None
    try:
        ints = [int(v) for v in values]
    except (ValueError, OverflowError):  # NaN, infinities
        ints = []
    if ints and array("d", ints).tobytes() == raw:  # exact integers (and no -0.0)
        value_deltas = list(map(sub, ints[1:], ints))
        low, high = min(value_deltas), max(value_deltas)
        for code, bound in _INT_TYPECODES:
            if -bound <= low and high < bound:
                return array(code, value_deltas)
    single = array("f", values)
    if array("d", single).tobytes() == raw:
        return single
    return array("d", values)


def chunk_bounds(chunk: Chunk) -> tuple[int, int]:
    """The first and last timestamp of a sealed chunk."""
    first_t, last_t = _HEADER.unpack_from(chunk)[:2]
    return first_t, last_t


def chunk_len(chunk: Chunk) -> int:
    """The number of points in a sealed chunk."""
    return int(_HEADER.unpack_from(chunk)[6])


def decode_chunk(chunk: Chunk) -> tuple[list[int], list[float]]:
    """The points of a sealed chunk, exactly as they were appended."""
    first_t, last_t, step, first_v, time_code, value_code, n = _HEADER.unpack_from(chunk)
    offset = _HEADER.size
    decoded_t: list[int]
    if time_code == _NONE:
        decoded_t = list(range(first_t, last_t + 1, step)) if step else [first_t]
    else:
        deltas = array(time_code.decode())
        end = offset + (n - 1) * deltas.itemsize
        deltas.frombytes(chunk[offset:end])
        offset = end
        if step:
            decoded_t = list(accumulate(map(step.__add__, deltas), initial=first_t))
        else:
            decoded_t = list(accumulate(deltas, initial=first_t))
    if value_code == _NONE:
        return decoded_t, [first_v] * n
    encoded = array(value_code.decode())
    encoded.frombytes(chunk[offset:])
    if encoded.typecode in "bhi":
        return decoded_t, list(accumulate(encoded, initial=first_v))
    return decoded_t, encoded.tolist()


_SHARED: dict[tuple[int, int, int, int], tuple[array, array]] = {}
"""Timestamp arrays derived during one collection, so that series with the same timestamps share one array
(see :class:`Series`): key (id of the array derived from, first index, end index, appended timestamp or -1)."""
_SHARED_CAP = 50_000


def _derive(times: array, start: int, end: int, then: int = -1) -> array:
    """``times[start:end]`` (plus ``then`` unless -1) as a new append-only array, or the one already derived
    the same way from the same array, still held in :data:`_SHARED` (arrays are only ever appended to, so
    its first ``end - start`` (+ 1) entries are the same)."""
    key = (id(times), start, end, then)
    found = _SHARED.get(key)
    if found is not None and found[0] is times:
        return found[1]
    derived = times[start:end]
    if then != -1:
        derived.append(then)
    if len(_SHARED) >= _SHARED_CAP:
        _SHARED.clear()
    _SHARED[key] = (times, derived)
    return derived


def forget_shared() -> None:
    """Drop :data:`_SHARED` (the store calls it at each collection: arrays derived by then are shared)."""
    _SHARED.clear()


_EMPTY_TIMES = array("q")
_SINGLE = struct.Struct("f")
_pack_single, _unpack_single = _SINGLE.pack, _SINGLE.unpack


def _fits_single(value: float) -> bool:
    """True when ``value`` is exactly a float32 (the sign of zero included; never a NaN)."""
    try:
        return bool(_unpack_single(_pack_single(value))[0] == value)
    except OverflowError:
        return False


def _narrowed(values: array) -> array:
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
    an array derived through :func:`_derive`, which the others doing the same join. So the head costs
    about 8 bytes a point (the value) instead of 16, and 4 while every value in it is exactly a float32
    (counters below 2**24, most gauges of NVML and the engines: ``_head_v`` is then an ``f`` array, read as
    the same Python floats; it widens to ``d`` at the first value that is not, and narrows again when a
    seal leaves only such values).
    """

    __slots__ = ("__weakref__", "_chunks", "_head_t", "_head_v", "_min_t", "_reach", "labels")

    def __init__(self, labels: Labels) -> None:
        self.labels = labels
        self._chunks: list[Chunk] = []
        self._head_t = _EMPTY_TIMES  # shared, append-only: the head's timestamps are its first len(_head_v)
        self._head_v = array("f")  # float32 while every value is exactly one, else float64
        self._min_t = -(1 << 62)  # points before this are trimmed (inside the oldest chunk)
        self._reach = 0  # how far back from its newest point this series has been read (ms)

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
                    if head_v.typecode == "f" and not _fits_single(value):
                        head_v = self._head_v = array("d", head_v)
                    head_v[-1] = value
                return
        elif self._chunks and t_ms <= chunk_bounds(self._chunks[-1])[1]:
            return  # never after a trim of the whole head: chunks end before the head
        if len(head_t) == n:
            if head_t is _EMPTY_TIMES:
                head_t = self._head_t = _derive(head_t, 0, 0, t_ms)
            else:
                head_t.append(t_ms)  # the first of its array's series at t_ms
        elif head_t[n] != t_ms:
            head_t = self._head_t = _derive(head_t, 0, n, t_ms)
        head_v.append(value)
        if head_v[n] != value and head_v.typecode == "f":  # not exactly a float32 (or a NaN): widen
            del head_v[-1]
            head_v = self._head_v = array("d", head_v)
            head_v.append(value)
        n += 1
        if n >= CHUNK_POINTS + HEAD_POINTS and head_t[CHUNK_POINTS - 1] < t_ms - self._reach:
            self._chunks.append(encode_chunk(head_t[:CHUNK_POINTS], head_v[:CHUNK_POINTS]))
            self._head_t = _derive(head_t, CHUNK_POINTS, n)
            del head_v[:CHUNK_POINTS]
            self._head_v = _narrowed(head_v)
            if len(self) > 2 * max_points:
                self.trim_count(max_points)

    def _drop_head(self, drop: int) -> None:
        """Drop the oldest ``drop`` points of the head."""
        self._head_t = _derive(self._head_t, drop, len(self._head_v))
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
        if n and head_t[n - 1] - mint_ms > self._reach and maxt_ms >= head_t[n - 1] - NEAR_NOW_MS:
            self._reach = head_t[n - 1] - mint_ms  # a window ending near now: keep this much uncompressed
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
        after ``mint_ms`` (unsealed if needed; the series' reach grows to cover it). Live arrays of the same
        length: read them at once, never write them (the timestamps may be shared with other series)."""
        n = len(self._head_v)
        head_t = self._head_t
        if n and head_t[n - 1] - mint_ms > self._reach:
            self._reach = head_t[n - 1] - mint_ms
        if self._chunks and (not n or head_t[0] > mint_ms):
            self._unseal(mint_ms)
        if len(self._head_t) != len(self._head_v):
            self._head_t = _derive(self._head_t, 0, len(self._head_v))
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
        # series of one array unsealing the same points at once share the result
        key = (id(self._head_t), -len(times), n, times[0] if times else -1)
        found = _SHARED.get(key)
        if found is not None and found[0] is self._head_t and found[1][:len(times)] == times:
            times = found[1]
        else:
            _SHARED[key] = (self._head_t, times)
        self._head_t, self._head_v = times, _narrowed(values)

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


COLLECTOR_SOURCE_PREFIX = "collector:"
"""Sources named ``collector:<collector name>`` hold what a collector collected."""
RESERVED_PREFIXES = ("collector:kmsg", "collector:nvml", "collector:host", "rules:", "self:", "")
"""Sources on the fault path: they may use the reserved headroom (``""``: a plain :meth:`Store.append`)."""


class LabelValuesExceeded(Exception):
    """New series of a collection dropped by the per-metric label-value limit; the rest was stored."""

    def __init__(self, source: str, reason: str, dropped: int) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason
        self.dropped = dropped


class SeriesQuotaExceeded(Exception):
    """A collection refused as a whole because its source would exceed its series quota."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


@dataclass(frozen=True)
class SeriesQuotas:
    """Per-source series limits (see the module docstring)."""

    per_source: int = 50_000
    reserved: int = 20_000
    reserved_prefixes: tuple[str, ...] = RESERVED_PREFIXES
    label_values: int = 0
    """Distinct values one label of one metric may take among a non-reserved source's series (0: no limit)."""

    def is_reserved(self, source: str) -> bool:
        """True for a source on the fault path (it may use the reserved headroom)."""
        return any(source.startswith(p) if p else source == "" for p in self.reserved_prefixes)


class Store:
    """Thread-safe bounded series store. See the module docstring for the contract."""

    def __init__(
        self,
        retention_ms: int = 15 * 60 * 1000,
        max_points: int = 15 * 60 + 60,
        max_series: int = 200_000,
        quotas: SeriesQuotas | None = None,
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
        # (source, metric) -> label -> value -> series count, for sources outside the fault path
        self._label_values: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
        self._by_name: dict[str, dict[Labels, Series]] = {}
        self._count = 0
        self._sources: dict[str, tuple[Labels, ...]] = {}  # what each source's last collection stored
        self._kept: tuple[tuple[int, Hashable], list[Series]] | None = None  # latest_values' last selection
        self._owned: dict[str, set[Labels]] = {}
        self._owner: dict[Labels, str] = {}
        self._best_effort = 0
        self._lock = threading.RLock()
        self.generation = 0
        """Bumped whenever a series is created or removed (readers may cache selections until it moves)."""

    def __len__(self) -> int:
        return self._count

    def append(self, labels: Labels, t_ms: int, value: float, source: str = "") -> bool:
        """Add one point; returns False when the series is new and the series cap is reached."""
        with self._lock:
            bucket = self._by_name.setdefault(metric_name(labels), {})
            series = bucket.get(labels)
            if series is None:
                if self._count >= self.max_series:
                    self.dropped_series_total += 1
                    return False
                series = bucket[labels] = Series(labels)
                self._count += 1
                self.generation += 1
                self._owned.setdefault(source, set()).add(labels)
                self._owner[labels] = source
                if not self.quotas.is_reserved(source):
                    self._best_effort += 1
                    self._count_label_values(source, labels, 1)
            series.append(t_ms, value, self.max_points)
            return True

    def ingest(self, source: str, samples: Iterable[Sample], t_ms: int, *, bypass_quota: bool = False) -> int:
        """Record one collection from ``source`` at ``t_ms``; mark its vanished series stale.

        Returns the number of samples stored. Duplicate labels within one collection keep the last.
        Raises :class:`SeriesQuotaExceeded` (having stored nothing but the staleness of the source's
        previous series) when the collection does not fit the source's quota; ``bypass_quota`` is for
        the few series that report such a failure (``up 0``).
        """
        with self._lock:
            forget_shared()
            try:
                return self._ingest(source, samples, t_ms, bypass_quota)
            finally:
                forget_shared()

    def _ingest(self, source: str, samples: Iterable[Sample], t_ms: int, bypass_quota: bool) -> int:
        """:meth:`ingest` itself, under its lock (which frees the timestamp arrays its series moved away
        from)."""
        batch: dict[Labels, float] = {}
        for sample in samples:
            batch[sample.labels] = sample.value
        over_limit = ""
        dropped = 0
        if self._enforce_quotas and not bypass_quota:
            reason = self._admit(source, batch)
            if reason:
                self.quota_rejections_total += 1
                self.ingest(source, (), t_ms, bypass_quota=True)
                raise SeriesQuotaExceeded(source, reason)
            if self.quotas.label_values and not self.quotas.is_reserved(source):
                over_limit, dropped = self._drop_label_value_churn(source, batch)
        stored = tuple(labels for labels, value in batch.items() if self.append(labels, t_ms, value, source))
        for labels in self._sources.get(source, ()):
            if labels not in batch:
                self.append(labels, t_ms, STALE_NAN, source)
        self._sources[source] = stored  # a tuple: a third of a set's memory
        if over_limit:
            raise LabelValuesExceeded(source, over_limit, dropped)
        return len(stored)

    def _drop_label_value_churn(self, source: str, batch: dict[Labels, float]) -> tuple[str, int]:
        """Remove from ``batch`` the new series that would take a label of their metric past the
        label-value limit; returns the reason (the first label over it) and how many were dropped."""
        limit = self.quotas.label_values
        owner = self._owner
        added: dict[tuple[str, str], set[str]] = {}
        doomed: list[Labels] = []
        reason = ""
        for labels in batch:
            if labels in owner:
                continue
            name = metric_name(labels)
            known = self._label_values.get((source, name), {})
            for key, value in labels:
                if key == METRIC_NAME:
                    continue
                values = known.get(key, {})
                fresh = added.setdefault((name, key), set())
                if value in values or value in fresh or len(values) + len(fresh) < limit:
                    continue
                doomed.append(labels)
                reason = reason or (f"label {key!r} of {name} would take more than {limit} distinct values "
                                    f"(max_label_values_per_metric): its new series are dropped")
                break
            else:
                for key, value in labels:
                    if key != METRIC_NAME and value not in known.get(key, {}):
                        added[(name, key)].add(value)
        for labels in doomed:
            del batch[labels]
        self.label_value_drops_total += len(doomed)
        return reason, len(doomed)

    def _count_label_values(self, source: str, labels: Labels, delta: int) -> None:
        """Add ``delta`` to the series count of each of ``labels``' values under (source, metric)."""
        key = (source, metric_name(labels))
        per_label = self._label_values.setdefault(key, {})
        for name, value in labels:
            if name == METRIC_NAME:
                continue
            counts = per_label.setdefault(name, {})
            left = counts.get(value, 0) + delta
            if left > 0:
                counts[value] = left
            else:
                counts.pop(value, None)
                if not counts:
                    del per_label[name]
        if not per_label:
            del self._label_values[key]

    def _admit(self, source: str, batch: dict[Labels, float]) -> str:
        """Why ``batch`` cannot be stored for ``source`` ("" when it fits); may evict the source's own
        series that ``batch`` no longer contains to make room."""
        new = sum(1 for labels in batch if labels not in self._owner)
        if not new:
            return ""
        owned = self._owned.get(source, set())
        limit = self.quotas.per_source
        reserved = self.quotas.is_reserved(source)
        pool = self.max_series - self.quotas.reserved

        def fits() -> bool:
            return len(owned) + new <= limit and (reserved or self._best_effort + new <= pool)

        if fits():
            return ""
        self._evict(source, [labels for labels in owned if labels not in batch])
        if fits():
            return ""
        if len(owned) + new > limit:
            return (f"series quota exceeded: {len(owned) + new} series would exceed the per-source "
                    f"quota of {limit}")
        return (f"series quota exceeded: {new} new series do not fit the {pool} series shared by "
                f"engines and other non-reserved sources ({self._best_effort} held)")

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
        owner = self._owner.pop(labels, None)
        if owner is None:
            return
        self._owned.get(owner, set()).discard(labels)
        if not self.quotas.is_reserved(owner):
            self._best_effort -= 1
            self._count_label_values(owner, labels, -1)

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
                          if keep is None or keep(s.labels, self._owner.get(s.labels, ""))]
            self._kept = ((self.generation, keep_key), candidates) if keep_key is not None else None
            return candidates

    def gc(self, now_ms: int) -> int:
        """Drop points past retention and series left empty; returns how many series were removed."""
        removed = 0
        min_t = now_ms - self.retention_ms
        with self._lock:
            forget_shared()
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
            forget_shared()
        return removed
