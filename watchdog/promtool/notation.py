"""promtool's expanding notation for input series values (``'0+10x5 _x2 stale 1e3'``).

Contract (same as Prometheus 2.42's ``promtool test rules``):
- ``a`` one value; ``_`` one omitted sample; ``stale`` one staleness marker;
- ``a+bxn`` / ``a-bxn``: n+1 values a, a±b, ... (accumulated by repeated addition, as promtool does);
  ``axn``: a repeated n+1 times;
- ``_xn``: n omitted samples; ``stalexn`` is not accepted (promtool rejects it too);
- numbers accept ``Inf``/``+Inf``/``-Inf``/``NaN`` and exponents, not hexadecimal (``0x1F``); the step
  of ``a+bxn`` has no sign of its own (``1+-1x2`` is rejected).
Omitted samples are ``None``; the staleness marker is :data:`watchdog.model.STALE_NAN`.
"""

from __future__ import annotations

import re

from watchdog.model import STALE_NAN

_UNSIGNED = r"(?:Inf|inf|NaN|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
# promtool's series lexer reads ``0x1F`` as ``0`` then ``x``, so hexadecimal is not a number here, and the
# step of ``a+bxn`` carries no sign of its own (``1+-1x2`` is rejected).
_TOKEN = re.compile(
    rf"^(?:(?P<blank>_)(?:x(?P<blank_n>\d+))?"
    rf"|(?P<stale>stale)"
    rf"|(?P<start>[-+]?{_UNSIGNED})(?:(?P<sign>[-+])(?P<step>{_UNSIGNED}))?(?:x(?P<times>\d+))?)$"
)


class SeriesNotationError(ValueError):
    """A values string that promtool would reject; names the offending token."""


def _number(text: str) -> float:
    lowered = text.lower().lstrip("+")
    if lowered in ("inf",):
        return float("inf")
    if lowered == "-inf":
        return float("-inf")
    if lowered.lstrip("-") == "nan":
        return float("nan")
    return float(text)


def expand_values(text: str) -> list[float | None]:
    """Expand a promtool values string into one entry per interval step (None = omitted)."""
    out: list[float | None] = []
    for token in str(text).split():
        match = _TOKEN.match(token)
        # promtool's lexer reads "Infx2" / "NaNx2" as one identifier and rejects it.
        if match is None or re.search(r"(?i)(?:inf|nan)x", token):
            raise SeriesNotationError(f"invalid series value {token!r} in {text!r}")
        if match.group("blank"):
            out.extend([None] * int(match.group("blank_n") or 1))
        elif match.group("stale"):
            out.append(STALE_NAN)
        else:
            start = _number(match.group("start"))
            times = match.group("times")
            if match.group("step") is not None and times is None:
                raise SeriesNotationError(f"invalid series value {token!r}: a+b needs xN")
            step = _number(match.group("step")) if match.group("step") else 0.0
            if match.group("sign") == "-":
                step = -step
            count = int(times) + 1 if times is not None else 1
            # promtool accumulates (value += step), it does not multiply: 0.1+0.1x9 ends at
            # 0.9999999999999999, not 1.0. Exact values matter because promtool compares exactly.
            value = start
            for _ in range(count):
                out.append(value)
                value += step
    return out
