"""Go 1.19's trigonometric and hyperbolic functions (Cephes and FreeBSD algorithms, as in ``math``).

Prometheus' ``sin``, ``cos``, ``asinh``, ... call Go's pure-Go implementations, whose last bit often
differs from the C library's; promtool compares results exactly, so we compute the same way.
Arguments at or above 2**29 are reduced with Go's Payne-Hanek ``trigReduce`` (``math/trig_reduce.go``)
over the binary digits of 4/pi, computed here once with integers.
"""

from __future__ import annotations

import decimal
import math
import struct

from watchdog.golang.gomath import exp, log, sqrt

NAN = math.nan
INF = math.inf
PI = math.pi  # float64(Pi)
_PI_DIGITS = "3.14159265358979323846264338327950288419716939937510582097494459"
with decimal.localcontext() as _context:
    _context.prec = 60
    _FOUR_OVER_PI = float(decimal.Decimal(4) / decimal.Decimal(_PI_DIGITS))  # Go constant 4/Pi

_REDUCE_THRESHOLD = float(1 << 29)


def _atan_inverse(n: int, scale: int) -> int:
    """``atan(1/n) * 2**scale`` (truncated), by its Taylor series in integers."""
    total = term = (1 << scale) // n
    k, sign, n2 = 1, -1, n * n
    while term:
        term //= n2
        total += sign * (term // (2 * k + 1))
        sign, k = -sign, k + 1
    return total


def _four_over_pi_words() -> tuple[int, ...]:
    """Go's ``mPi4``: 4/pi as 20 uint64 words, 4/pi = sum(w[i] * 2**(-64*i))."""
    scale = 64 * 20 + 128
    pi = 16 * _atan_inverse(5, scale) - 4 * _atan_inverse(239, scale)  # Machin, * 2**scale
    value = (4 << (scale + 64 * 19)) // pi  # 4/pi * 2**(64*19)
    return tuple((value >> (64 * (19 - i))) & 0xFFFFFFFFFFFFFFFF for i in range(20))


_MPI4 = _four_over_pi_words()
_U64 = 0xFFFFFFFFFFFFFFFF


def trig_reduce(x: float) -> tuple[int, float]:
    """Go's ``trigReduce`` for ``x >= 2**29``: octant j (0..7) and the remainder scaled by pi/4."""
    if x < PI / 4:
        return 0, x
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    exponent = ((bits >> 52) & 0x7FF) - 1023 - 52
    mantissa = (bits & ((1 << 52) - 1)) | (1 << 52)
    digit, shift = divmod(exponent + 61, 64)

    def word(i: int) -> int:
        high = (_MPI4[i] << shift) & _U64
        return high | (_MPI4[i + 1] >> (64 - shift) if shift else 0)

    z0, z1, z2 = word(digit), word(digit + 1), word(digit + 2)
    z2hi = (z2 * mantissa) >> 64
    z1_full = z1 * mantissa
    z1hi, z1lo = z1_full >> 64, z1_full & _U64
    z0lo = (z0 * mantissa) & _U64
    lo_sum = z1lo + z2hi
    lo, carry = lo_sum & _U64, lo_sum >> 64
    hi = (z0lo + z1hi + carry) & _U64
    j = hi >> 61
    hi = ((hi << 3) & _U64) | (lo >> 61)
    leading = 64 - hi.bit_length()
    e = 1023 - (leading + 1)
    hi = ((hi << (leading + 1)) & _U64) | (lo >> (64 - (leading + 1)))
    hi >>= 64 - 52
    hi |= e << 52
    z = struct.unpack("<d", struct.pack("<Q", hi & _U64))[0]
    if j & 1:
        j = (j + 1) & 7
        z -= 1
    return j, z * (PI / 4)
_PI4A = 7.85398125648498535156e-1
_PI4B = 3.77489470793079817668e-8
_PI4C = 2.69515142907905952645e-15
_SIN = (1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
        -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
_COS = (-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
        2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)
_TAN_P = (-1.30936939181383777646e4, 1.15351664838587416140e6, -1.79565251976484877988e7)
_TAN_Q = (1.0, 1.36812963470692954678e4, -1.32089234440210967447e6, 2.50083801823357915839e7,
          -5.38695755929454629881e7)


def _octant(x: float) -> tuple[int, float]:
    """Cody-Waite reduction of ``x >= 0`` (below 2**29): octant j and remainder z."""
    j = int(x * _FOUR_OVER_PI)
    y = float(j)
    if j & 1:
        j += 1
        y += 1
    j &= 7
    z = ((x - y * _PI4A) - y * _PI4B) - y * _PI4C
    return j, z


def _octant_tan(x: float) -> tuple[int, float]:
    """``_octant`` as Go's ``Tan`` does it (j not reduced modulo 8; only its bit 1 matters)."""
    j = int(x * _FOUR_OVER_PI)
    y = float(j)
    if j & 1:
        j += 1
        y += 1
    return j, ((x - y * _PI4A) - y * _PI4B) - y * _PI4C


def _sin_poly(z: float, zz: float) -> float:
    s = _SIN
    return z + z * zz * (((((s[0] * zz + s[1]) * zz + s[2]) * zz + s[3]) * zz + s[4]) * zz + s[5])


def _cos_poly(zz: float) -> float:
    c = _COS
    poly = ((((c[0] * zz + c[1]) * zz + c[2]) * zz + c[3]) * zz + c[4]) * zz + c[5]
    return 1.0 - 0.5 * zz + zz * zz * poly


def sin(x: float) -> float:
    """Go's ``math.Sin``."""
    if x == 0 or math.isnan(x):
        return x
    if math.isinf(x):
        return NAN
    sign = x < 0
    if sign:
        x = -x
    j, z = trig_reduce(x) if x >= _REDUCE_THRESHOLD else _octant(x)
    if j > 3:
        sign = not sign
        j -= 4
    zz = z * z
    y = _cos_poly(zz) if j in (1, 2) else _sin_poly(z, zz)
    return -y if sign else y


def cos(x: float) -> float:
    """Go's ``math.Cos``."""
    if math.isnan(x) or math.isinf(x):
        return NAN
    x = abs(x)
    j, z = trig_reduce(x) if x >= _REDUCE_THRESHOLD else _octant(x)
    sign = False
    if j > 3:
        j -= 4
        sign = not sign
    if j > 1:
        sign = not sign
    zz = z * z
    y = _sin_poly(z, zz) if j in (1, 2) else _cos_poly(zz)
    return -y if sign else y


def tan(x: float) -> float:
    """Go's ``math.Tan``."""
    if x == 0 or math.isnan(x):
        return x
    if math.isinf(x):
        return NAN
    sign = x < 0
    if sign:
        x = -x
    j, z = trig_reduce(x) if x >= _REDUCE_THRESHOLD else _octant_tan(x)
    zz = z * z
    if zz > 1e-14:
        p, q = _TAN_P, _TAN_Q
        y = z + z * (zz * ((p[0] * zz + p[1]) * zz + p[2])
                     / ((((zz + q[1]) * zz + q[2]) * zz + q[3]) * zz + q[4]))
    else:
        y = z
    if j & 2 == 2:
        y = -1 / y
    return -y if sign else y


def _xatan(x: float) -> float:
    p0, p1, p2, p3, p4 = (-8.750608600031904122785e-01, -1.615753718733365076637e01,
                          -7.500855792314704667340e01, -1.228866684490136173410e02,
                          -6.485021904942025371773e01)
    q0, q1, q2, q3, q4 = (2.485846490142306297962e01, 1.650270098316988542046e02,
                          4.328810604912902668951e02, 4.853903996359136964868e02,
                          1.945506571482613964425e02)
    z = x * x
    numerator = (((p0 * z + p1) * z + p2) * z + p3) * z + p4
    z = z * numerator / (((((z + q0) * z + q1) * z + q2) * z + q3) * z + q4)
    return x * z + x


_MOREBITS = 6.123233995736765886130e-17
_TAN3PIO8 = 2.41421356237309504880


def _satan(x: float) -> float:
    if x <= 0.66:
        return _xatan(x)
    if x > _TAN3PIO8:
        return PI / 2 - _xatan(1 / x) + _MOREBITS
    return PI / 4 + _xatan((x - 1) / (x + 1)) + 0.5 * _MOREBITS


def atan(x: float) -> float:
    """Go's ``math.Atan``."""
    if x == 0 or math.isnan(x):
        return x
    if x > 0:
        return _satan(x)
    return -_satan(-x)


def asin(x: float) -> float:
    """Go's ``math.Asin``."""
    if x == 0 or math.isnan(x):
        return x
    sign = x < 0
    if sign:
        x = -x
    if x > 1:
        return NAN
    temp = sqrt(1 - x * x)
    temp = PI / 2 - _satan(temp / x) if x > 0.7 else _satan(x / temp if temp else INF)
    return -temp if sign else temp


def acos(x: float) -> float:
    """Go's ``math.Acos``."""
    return PI / 2 - asin(x)


def sinh(x: float) -> float:
    """Go's ``math.Sinh``."""
    p0, p1, p2, p3 = (-0.6307673640497716991184787251e6, -0.8991272022039509355398013511e5,
                      -0.2894211355989563807284660366e4, -0.2630563213397497062819489e2)
    q0, q1, q2 = (-0.6307673640497716991212077277e6, 0.1521517378790019070696485176e5,
                  -0.173678953558233699533450911e3)
    sign = x < 0
    if sign:
        x = -x
    if x > 21:
        temp = exp(x) * 0.5
    elif x > 0.5:  # one exponential and its reciprocal, not exp(-x): the last bit differs
        ex = exp(x)
        temp = (ex - 1 / ex) * 0.5
    else:
        sq = x * x
        temp = (((p3 * sq + p2) * sq + p1) * sq + p0) * x
        temp = temp / (((sq + q2) * sq + q1) * sq + q0)
    return -temp if sign else temp


def cosh(x: float) -> float:
    """Go's ``math.Cosh``."""
    x = abs(x)
    if x > 21:
        return exp(x) * 0.5
    ex = exp(x)  # one exponential and its reciprocal, not exp(-x): the last bit differs
    return (ex + 1 / ex) * 0.5


def tanh(x: float) -> float:
    """Go's ``math.Tanh``."""
    p = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
    q = (1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)
    z = abs(x)
    if z > 0.5 * 8.8029691931113054295988e01:
        return -1.0 if x < 0 else 1.0
    if z >= 0.625:
        s = exp(2 * z)
        z = 1 - 2 / (s + 1)
        return -z if x < 0 else z
    if x == 0 or math.isnan(x):
        return x
    s = x * x
    return x + x * s * ((p[0] * s + p[1]) * s + p[2]) / (((s + q[0]) * s + q[1]) * s + q[2])


_LN2 = 6.93147180559945286227e-01


def log1p(x: float) -> float:
    """Go's ``math.Log1p`` (FreeBSD's s_log1p)."""
    import struct

    if x < -1 or math.isnan(x):
        return NAN
    if x == -1:
        return -INF
    if x == INF:
        return INF
    absx = abs(x)
    f = 0.0
    iu = 0
    k = 1
    if absx < 4.142135623730950488017e-01:
        if absx < 1.0 / (1 << 29):
            if absx < 1.0 / (1 << 54):
                return x
            return x - x * x * 0.5
        if x > -2.928932188134524755992e-01:
            k = 0
            f = x
            iu = 1
    c = 0.0
    if k != 0:
        if absx < float(1 << 53):
            u = 1.0 + x
            iu = struct.unpack("<Q", struct.pack("<d", u))[0]
            k = (iu >> 52) - 1023
            c = 1.0 - (u - x) if k > 0 else x - (u - 1.0)
            c /= u
        else:
            u = x
            iu = struct.unpack("<Q", struct.pack("<d", u))[0]
            k = (iu >> 52) - 1023
            c = 0.0
        iu &= 0x000FFFFFFFFFFFFF
        if iu < 0x0006A09E667F3BCD:
            u = struct.unpack("<d", struct.pack("<Q", iu | 0x3FF0000000000000))[0]
        else:
            k += 1
            u = struct.unpack("<d", struct.pack("<Q", iu | 0x3FE0000000000000))[0]
            iu = (0x0010000000000000 - iu) >> 2
        f = u - 1.0
    ln2_hi, ln2_lo = 6.93147180369123816490e-01, 1.90821492927058770002e-10
    hfsq = 0.5 * f * f
    if iu == 0:
        if f == 0:
            if k == 0:
                return 0.0
            c += k * ln2_lo
            return k * ln2_hi + c
        r = hfsq * (1.0 - 0.66666666666666666 * f)
        if k == 0:
            return f - r
        return k * ln2_hi - ((r - (k * ln2_lo + c)) - f)
    lp = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
          2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
          1.479819860511658591e-01)
    s = f / (2.0 + f)
    z = s * s
    r = z * (lp[0] + z * (lp[1] + z * (lp[2] + z * (lp[3] + z * (lp[4] + z * (lp[5] + z * lp[6]))))))
    if k == 0:
        return f - (hfsq - s * (hfsq + r))
    return k * ln2_hi - ((hfsq - (s * (hfsq + r) + (k * ln2_lo + c))) - f)


def asinh(x: float) -> float:
    """Go's ``math.Asinh``."""
    if math.isnan(x) or math.isinf(x):
        return x
    sign = x < 0
    if sign:
        x = -x
    if x > float(1 << 28):
        temp = log(x) + _LN2
    elif x > 2:
        temp = log(2 * x + 1 / (sqrt(x * x + 1) + x))
    elif x < 1.0 / (1 << 28):
        temp = x
    else:
        temp = log1p(x + x * x / (1 + sqrt(1 + x * x)))
    return -temp if sign else temp


def acosh(x: float) -> float:
    """Go's ``math.Acosh``."""
    if x < 1 or math.isnan(x):
        return NAN
    if x == 1:
        return 0.0
    if x >= float(1 << 28):
        return log(x) + _LN2
    if x > 2:
        return log(2 * x - 1 / (x + sqrt(x * x - 1)))
    t = x - 1
    return log1p(t + sqrt(2 * t + t * t))


def atanh(x: float) -> float:
    """Go's ``math.Atanh``."""
    if x < -1 or x > 1 or math.isnan(x):
        return NAN
    if x == 1:
        return INF
    if x == -1:
        return -INF
    sign = x < 0
    if sign:
        x = -x
    if x < 1.0 / (1 << 28):
        temp = x
    elif x < 0.5:
        temp = x + x
        temp = 0.5 * log1p(temp + temp * x / (1 - x))
    else:
        temp = 0.5 * log1p((x + x) / (1 - x))
    return -temp if sign else temp


def atan2(y: float, x: float) -> float:
    """Go's ``math.Atan2``: special cases, then ``Atan(y / x)`` moved into the right quadrant."""
    if math.isnan(y) or math.isnan(x):
        return NAN
    if y == 0:
        return math.copysign(0.0, y) if x >= 0 and math.copysign(1.0, x) > 0 else math.copysign(PI, y)
    if x == 0:
        return math.copysign(PI / 2, y)
    if math.isinf(x):
        if x > 0:
            return math.copysign(PI / 4, y) if math.isinf(y) else math.copysign(0.0, y)
        return math.copysign(3 * PI / 4, y) if math.isinf(y) else math.copysign(PI, y)
    if math.isinf(y):
        return math.copysign(PI / 2, y)
    q = atan(y / x)
    if x < 0:
        return q + PI if q <= 0 else q - PI
    return q
