"""Go's float semantics where Python's differ, so results match Prometheus bit for bit.

Python raises where Go returns IEEE specials (division by zero, ``math.exp`` overflow, ``log(0)``,
``floor(inf)``) and sorts stably where Go's ``sort.Sort`` does not.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable
from typing import TypeVar

from watchdog.golang.gostrconv import format_float

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
    if not math.isfinite(y):
        return False
    fraction, whole = math.modf(y)
    return fraction == 0 and abs(whole) < 2**63 and int(whole) & 1 == 1


def pow_(x: float, y: float) -> float:
    """Go 1.19's ``math.Pow``: special cases per IEEE 754-2008, then repeated squaring.

    The integer part of ``y`` is applied by squaring ``frexp`` mantissas (as Go does), so results
    agree with Prometheus where a correctly rounded ``pow`` would differ in the last bit.
    """
    if y == 0 or x == 1:
        return 1.0
    if math.isnan(x) or math.isnan(y):
        return NAN
    if x == 0:
        if y < 0:
            return math.copysign(INF, x) if _is_odd_integer(y) else INF
        return x if _is_odd_integer(y) else 0.0
    if math.isinf(y):
        if x == -1:
            return 1.0
        if (abs(x) < 1) == (y > 0):
            return 0.0
        return INF
    if math.isinf(x):
        if x < 0:
            return pow_(div(1.0, x), -y)
        return 0.0 if y < 0 else INF
    if y == 0.5:
        return sqrt(x)
    if y == -0.5:
        return div(1.0, sqrt(x))
    fraction, whole = math.modf(abs(y))
    if fraction != 0 and x < 0:
        return NAN
    if whole >= 2.0**63:
        if x == -1:
            return 1.0
        if (abs(x) < 1) == (y > 0):
            return 0.0
        return INF
    a1 = 1.0
    ae = 0
    if fraction != 0:
        if fraction > 0.5:
            fraction -= 1
            whole += 1
        a1 = exp(fraction * log(x))
    x1, xe = math.frexp(x)
    i = int(whole)
    while i != 0:
        if xe < -(1 << 12) or xe > (1 << 12):
            ae += xe
            break
        if i & 1 == 1:
            a1 *= x1
            ae += xe
        x1 *= x1
        xe <<= 1
        if x1 < 0.5:
            x1 += x1
            xe -= 1
        i >>= 1
    if y < 0:
        a1 = div(1.0, a1)
        ae = -ae
    return ldexp(a1, ae)


def ldexp(fraction: float, exponent: int) -> float:
    """``math.Ldexp`` with IEEE overflow/underflow instead of exceptions."""
    try:
        return math.ldexp(fraction, exponent)
    except OverflowError:
        return math.copysign(INF, fraction)


# Go evaluates constant expressions like 1/Ln10 exactly, then rounds once to float64.
_LN2 = "0.693147180559945309417232121458176568075500134360255254120680009"
_LN10 = "2.30258509299404568401799145468436420760110148862877297603332790"


def _exact_reciprocal(text: str) -> float:
    import decimal

    with decimal.localcontext() as context:
        context.prec = 60
        return float(decimal.Decimal(1) / decimal.Decimal(text))


_INV_LN2 = _exact_reciprocal(_LN2)
_INV_LN10 = _exact_reciprocal(_LN10)


def log2(x: float) -> float:
    """Go's ``math.Log2``: ``Log(frac)/Ln2 + exp`` over ``Frexp``."""
    if x == 0:
        return -INF
    if x < 0 or math.isnan(x):
        return NAN
    if x == INF:
        return INF
    fraction, exponent = math.frexp(x)
    if fraction == 0.5:
        return float(exponent - 1)
    return log(fraction) * _INV_LN2 + exponent


def log10(x: float) -> float:
    """Go's ``math.Log10``: ``Log(x) * (1/Ln10)``."""
    return log(x) * _INV_LN10 if x > 0 and math.isfinite(x) else log(x)


def floor(x: float) -> float:
    """``math.Floor`` returning a float; specials and the sign of zero unchanged."""
    if not math.isfinite(x) or x == 0:
        return x
    return float(math.floor(x))


def ceil(x: float) -> float:
    """``math.Ceil`` returning a float; ``ceil(-0.5)`` is ``-0`` as in Go."""
    if not math.isfinite(x) or x == 0:
        return x
    result = float(math.ceil(x))
    return math.copysign(0.0, x) if result == 0 else result


def _fma(a: float, b: float, c: float) -> float:
    """Fused multiply-add (one rounding), as the FMA instruction computes it."""
    from fractions import Fraction

    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        return float(exact)
    except OverflowError:  # beyond float64: the infinity of its sign (copysign would convert it again)
        return INF if exact > 0 else -INF


_EXP_COEFFICIENTS = (  # Taylor coefficients of Go's amd64 Exp, highest order first
    2.4801587301587301587e-5, 1.9841269841269841270e-4, 1.3888888888888888889e-3,
    8.3333333333333333333e-3, 4.1666666666666666667e-2, 1.6666666666666666667e-1, 0.5, 1.0,
)
_LOG2E = 1.4426950408889634073599246810018920
_LN2U = 0.69314718055966295651160180568695068359375
_LN2L = 0.28235290563031577122588448175013436025525412068e-12
_EXP_OVERFLOW = 7.09782712893384e02

USE_FMA = True
"""Go's amd64 Exp takes an FMA path on CPUs with FMA (every x86 server since 2013); results differ
from the non-FMA path in the last bit for some inputs."""


def exp(x: float) -> float:
    """Go 1.19's amd64 ``math.Exp`` (the assembly routine): +Inf on overflow; results below the normal
    range go through its denormal path (down to 5e-324), then 0."""
    if math.isnan(x) or x == INF:
        return x
    if x == -INF:
        return 0.0
    if x > _EXP_OVERFLOW:
        return INF
    scaled = _LOG2E * x
    exponent = round(scaled) if -(2.0**31) <= scaled < 2.0**31 else -(2**31)  # CVTSD2SL
    k = float(exponent)
    if USE_FMA:
        x = _fma(-_LN2U, k, x)
        x = _fma(-_LN2L, k, x)
        x *= 0.0625
        poly = _EXP_COEFFICIENTS[0]
        for coefficient in _EXP_COEFFICIENTS[1:]:
            poly = _fma(poly, x, coefficient)
        x *= poly
        for _ in range(3):
            x *= x + 2.0
        x = _fma(x, x + 2.0, 1.0)
    else:
        x -= _LN2U * k
        x -= _LN2L * k
        x *= 0.0625
        poly = _EXP_COEFFICIENTS[0]
        for coefficient in _EXP_COEFFICIENTS[1:]:
            poly = poly * x + coefficient
        x *= poly
        for _ in range(4):
            x *= x + 2.0
        x += 1.0
    biased = exponent + 0x3FF
    if biased < 0:  # the assembly's denormal path: two scalings, so the result rounds to a subnormal
        if biased < -52:
            return 0.0
        x *= struct.unpack("<d", struct.pack("<Q", (biased + 0x3FE) << 52))[0]
        return x * struct.unpack("<d", struct.pack("<Q", 1 << 52))[0]
    if biased >= 0x7FF:
        return INF
    return x * struct.unpack("<d", struct.pack("<Q", biased << 52))[0]


_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_LOG_L = (
    6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
    2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
    1.479819860511658591e-01,
)


def _go_log(x: float) -> float:
    """Go's amd64 ``math.Log`` (FreeBSD's algorithm, frexp by bit masking) for finite x > 0."""
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    f1 = struct.unpack("<d", struct.pack("<Q", (bits & 0x000FFFFFFFFFFFFF) | 0x3FE0000000000000))[0]
    k = float(((bits >> 52) & 0x7FF) - 0x3FE)
    if f1 < 7.07106781186547524401e-01:
        k -= 1
        f1 *= 2
    f = f1 - 1
    s = f / (2 + f)
    s2 = s * s
    s4 = s2 * s2
    l1, l2, l3, l4, l5, l6, l7 = _LOG_L
    t1 = s2 * (l1 + s4 * (l3 + s4 * (l5 + s4 * l7)))
    t2 = s4 * (l2 + s4 * (l4 + s4 * l6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


def log(x: float) -> float:
    """Go's ``math.Log``: -Inf at 0, NaN below, the amd64 algorithm otherwise."""
    if x == 0:
        return -INF
    if x < 0:
        return NAN
    if math.isnan(x) or x == INF:
        return x
    return _go_log(x)


def sqrt(x: float) -> float:
    """``math.Sqrt``: NaN below zero."""
    if x < 0:
        return NAN
    return math.sqrt(x)


def to_int64(x: float) -> int:
    """Go's ``int64(x)`` on amd64: truncation; NaN and out-of-range values give the minimum int64."""
    if math.isfinite(x) and -(2.0**63) <= x < 2.0**63:
        return int(x)
    return -(2**63)


# --- number formatting -------------------------------------------------------------------------

def format_api_value(value: float) -> str:
    """A sample value as Prometheus' HTTP API writes it ('f' format, 'e' below 1e-6 or from 1e21)."""
    magnitude = abs(value)
    if magnitude != 0 and math.isfinite(magnitude) and (magnitude < 1e-6 or magnitude >= 1e21):
        return format_float(value, "e")
    return format_float(value, "f")


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


def int_quo(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def int_rem(a: int, b: int) -> int:
    """Go's remainder (sign of the dividend)."""
    return a - int_quo(a, b) * b
