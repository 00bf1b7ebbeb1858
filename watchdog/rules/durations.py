"""Prometheus and Go duration strings: parsing and formatting, to the millisecond.

Contract:
- :func:`parse_duration` accepts exactly what Prometheus' ``model.ParseDuration`` accepts (``0``, ``90s``,
  ``1h30m``, ``1w``, ``2y``, ``500ms``; units in descending order, each at most once) and returns ms.
- :func:`format_duration` is ``model.Duration.String`` (``1h30m``, ``0s``, ``90d``).
- :func:`format_go_duration` is Go's ``time.Duration.String`` (``5m0s``, ``1h0m0s``, ``1.5s``).
"""

from __future__ import annotations

import math
import re

_UNITS_MS: tuple[tuple[str, int], ...] = (
    ("y", 365 * 24 * 3600 * 1000),
    ("w", 7 * 24 * 3600 * 1000),
    ("d", 24 * 3600 * 1000),
    ("h", 3600 * 1000),
    ("m", 60 * 1000),
    ("s", 1000),
    ("ms", 1),
)
_DURATION_RE = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_MAX_MS = (1 << 63) // 1_000_000  # time.Duration (ns) must not overflow int64


class DurationError(ValueError):
    """A string that is not a valid Prometheus duration."""


def parse_duration(text: str) -> int:
    """Milliseconds of a Prometheus duration string; raises :class:`DurationError`."""
    if text == "":
        raise DurationError("empty duration string")
    if text == "0":
        return 0
    match = _DURATION_RE.match(text)
    if match is None:
        raise DurationError(f"not a valid duration string: {text!r}")
    total = 0
    for group, (_unit, mult) in zip(match.groups(), _UNITS_MS, strict=True):
        if group is not None:
            total += int(group) * mult
    if total > _MAX_MS:
        raise DurationError(f"duration out of range: {text!r}")
    return total


def format_duration(ms: int) -> str:
    """``model.Duration.String``: years and weeks only when exact, then d h m s ms."""
    if ms == 0:
        return "0s"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    out = ""
    for unit, mult in _UNITS_MS:
        exact_only = unit in ("y", "w")
        if exact_only and ms % mult != 0:
            continue
        count = ms // mult
        if count > 0:
            out += f"{count}{unit}"
            ms -= count * mult
    return sign + out


def format_go_duration(ms: int) -> str:
    """Go's ``time.Duration.String`` for a whole number of milliseconds (``5m0s``, ``1.5s``, ``0s``)."""
    if ms == 0:
        return "0s"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    hours, rest = divmod(ms, 3600 * 1000)
    minutes, rest = divmod(rest, 60 * 1000)
    seconds, millis = divmod(rest, 1000)
    sec = str(seconds) + (f".{millis:03d}".rstrip("0") if millis else "")
    if hours:
        return f"{sign}{hours}h{minutes}m{sec}s"
    if minutes:
        return f"{sign}{minutes}m{sec}s"
    return f"{sign}{sec}s"


def parse_time_arg(text: str) -> int:
    """A command-line time offset: a Prometheus duration (``10m``) or plain seconds (``600``, ``1.5``)."""
    try:
        value = float(text)
    except ValueError:
        return parse_duration(text)
    if math.isnan(value) or math.isinf(value):
        raise DurationError(f"not a valid time: {text!r}")
    return round(value * 1000)
