"""The sealed chunk: a run of one series' points compressed without loss.

:func:`encode_chunk` turns (timestamps, values) into one ``bytes`` object and :func:`decode_chunk` gives
back exactly the points appended (bit for bit, NaN payloads and the sign of zero included);
:func:`chunk_bounds` and :func:`chunk_len` read the header alone.

Layout: a header (first t, last t, step, first value, the typecodes of the time and value arrays, the
point count) then the two arrays. Timestamps: no array means regular, each ``step`` after the previous;
else each is ``step`` plus its array entry (typecode B for a jittery regular tick: one byte a point past
the smallest step; else H or q with step 0). Values: no array when every value is bitwise the first one;
integer deltas (b/h/i) when every value is an exact integer; else absolute values ("f" when float32 holds
each one exactly, else "d").
"""

from __future__ import annotations

import struct
from array import array
from itertools import accumulate
from operator import sub

_INT_TYPECODES = (("b", 1 << 7), ("h", 1 << 15), ("i", 1 << 31))

Chunk = bytes
"""A sealed chunk (see the module docstring for its layout)."""
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
