"""Go's float semantics where Python's differ, so results match Prometheus bit for bit.

Python raises where Go returns IEEE specials (division by zero, ``math.exp`` overflow, ``log(0)``,
``floor(inf)``), formats floats differently, and sorts stably where Go's ``sort.Sort`` does not.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import TypeVar

NAN = math.nan
INF = math.inf

T = TypeVar("T")


def div(a: float, b: float) -> float:
    """``a / b`` with IEEE results for a zero divisor."""
    try:
        return a / b
    except ZeroDivisionError:
        if a == 0 or math.isnan(a):
            return NAN
        return math.copysign(INF, a) * math.copysign(1.0, b)


def mod(a: float, b: float) -> float:
    """Go's ``math.Mod`` (C ``fmod``): NaN for a zero divisor or infinite dividend."""
    try:
        return math.fmod(a, b)
    except ValueError:
        return NAN


def _is_odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0


def pow_(x: float, y: float) -> float:
    """Go's ``math.Pow``."""
    try:
        return math.pow(x, y)
    except ZeroDivisionError:  # pragma: no cover - CPython raises ValueError, kept for safety
        return INF
    except ValueError:
        if x == 0:  # 0 ** negative
            if _is_odd_integer(y):
                return math.copysign(INF, x)
            return INF
        return NAN
    except OverflowError:
        if x < 0 and _is_odd_integer(y):
            return -INF
        return INF


def floor(x: float) -> float:
    """``math.Floor`` returning a float, specials unchanged."""
    return float(math.floor(x)) if math.isfinite(x) else x


def ceil(x: float) -> float:
    """``math.Ceil`` returning a float, specials unchanged."""
    return float(math.ceil(x)) if math.isfinite(x) else x


def exp(x: float) -> float:
    """``math.Exp``: +Inf on overflow."""
    try:
        return math.exp(x)
    except OverflowError:
        return INF


def log(x: float, fn: Callable[[float], float] = math.log) -> float:
    """``math.Log``/``Log2``/``Log10``: -Inf at 0, NaN below."""
    if x == 0:
        return -INF
    if x < 0:
        return NAN
    if math.isnan(x) or x == INF:
        return x
    return fn(x)


def sqrt(x: float) -> float:
    """``math.Sqrt``: NaN below zero."""
    if x < 0:
        return NAN
    return math.sqrt(x)


def guarded(fn: Callable[[float], float], overflow: float | None = None) -> Callable[[float], float]:
    """Wrap a ``math`` function: domain errors give NaN, overflow gives ``overflow`` (signed Inf)."""

    def call(x: float) -> float:
        try:
            return fn(x)
        except ValueError:
            return NAN
        except OverflowError:
            return math.copysign(INF, x) if overflow is None else overflow

    return call


def atanh(x: float) -> float:
    """``math.Atanh``: ±Inf at ±1, NaN outside."""
    if x == 1:
        return INF
    if x == -1:
        return -INF
    return guarded(math.atanh)(x)


def trunc_int(x: float) -> int:
    """Go's ``int64(x)`` conversion for finite ``x`` (truncation toward zero)."""
    return int(x)


# --- number formatting -------------------------------------------------------------------------

def _digits_and_exponent(value: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of ``abs(value)`` and the decimal exponent of the first digit.

    ``1234.5`` -> ("12345", 3): value = 0.12345 * 10**4 = 1.2345 * 10**3.
    """
    text = repr(abs(value))
    mantissa, _, exponent_text = text.partition("e")
    exponent = int(exponent_text) if exponent_text else 0
    whole, _, fraction = mantissa.partition(".")
    if fraction == "0":
        fraction = ""
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return "0", 0
    # Position of the first significant digit relative to the decimal point.
    leading_zeros = len(whole + fraction) - len((whole + fraction).lstrip("0"))
    point = len(whole) + exponent  # digits before the decimal point in whole+fraction
    first_digit_exponent = point - leading_zeros - 1
    return digits.rstrip("0") or "0", first_digit_exponent


def format_f(value: float) -> str:
    """Go ``strconv.FormatFloat(v, 'f', -1, 64)``: shortest digits, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    digits, exponent = _digits_and_exponent(value)
    if exponent >= 0:
        if len(digits) <= exponent + 1:
            return sign + digits + "0" * (exponent + 1 - len(digits))
        return sign + digits[: exponent + 1] + "." + digits[exponent + 1 :]
    return sign + "0." + "0" * (-exponent - 1) + digits


def format_e(value: float) -> str:
    """Go ``strconv.FormatFloat(v, 'e', -1, 64)``: ``1e-07``, ``1.5e+21``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    digits, exponent = _digits_and_exponent(value)
    if value == 0:
        exponent = 0
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    exp_sign = "-" if exponent < 0 else "+"
    return f"{sign}{mantissa}e{exp_sign}{abs(exponent):02d}"


def format_api_value(value: float) -> str:
    """A sample value as Prometheus' HTTP API writes it ('f' format, 'e' below 1e-6 or from 1e21)."""
    magnitude = abs(value)
    if magnitude != 0 and math.isfinite(magnitude) and (magnitude < 1e-6 or magnitude >= 1e21):
        return format_e(value)
    return format_f(value)


def format_g(value: float) -> str:
    """Go ``strconv.FormatFloat(v, 'g', -1, 64)`` (Go's ``%v`` for floats, used in messages)."""
    if math.isnan(value) or math.isinf(value):
        return format_f(value)
    if value == 0:
        return format_f(value)
    _, exponent = _digits_and_exponent(value)
    if exponent < -4 or exponent >= 6:
        return format_e(value)
    return format_f(value)


# --- number parsing ----------------------------------------------------------------------------

_GO_FLOAT = re.compile(
    r"[+-]?(?:(?:\d+(?:_\d+)*)?\.?\d*(?:[eE][+-]?\d+)?|0[xX][0-9a-fA-F_.]+(?:[pP][+-]?\d+)?)"
)
_SPECIALS = {"inf": INF, "+inf": INF, "-inf": -INF, "infinity": INF, "+infinity": INF,
             "-infinity": -INF, "nan": NAN, "+nan": NAN, "-nan": NAN}


def parse_float(text: str) -> float | None:
    """Go ``strconv.ParseFloat(text, 64)``; None where Go returns an error (no whitespace, no ``_``)."""
    special = _SPECIALS.get(text.lower())
    if special is not None:
        return special
    if not text or text != text.strip() or "_" in text:
        return None
    if text.lower().lstrip("+-").startswith("0x"):
        try:
            return float.fromhex(text)
        except ValueError:
            return None
    try:
        return float(text)
    except ValueError:
        return None
    except OverflowError:  # pragma: no cover - float() returns inf instead
        return None


# --- sorting -----------------------------------------------------------------------------------

def go_sort(items: list[T], less: Callable[[T, T], bool]) -> None:
    """Sort in place like Go's ``sort.Sort`` for small inputs (insertion sort up to 12 elements).

    Larger inputs use a stable merge sort with the same ``less``; Go's pdqsort may order equal
    elements differently there (values are equal, so only the order of ties can differ).
    """
    count = len(items)
    if count <= 12:
        for i in range(1, count):
            j = i
            while j > 0 and less(items[j], items[j - 1]):
                items[j], items[j - 1] = items[j - 1], items[j]
                j -= 1
        return
    def compare(a: T, b: T) -> int:
        return -1 if less(a, b) else (1 if less(b, a) else 0)

    items.sort(key=functools.cmp_to_key(compare))
