"""Go's ``strconv`` for float64 and strings: ``FormatFloat``, ``ParseFloat`` and ``Quote``.

One implementation for everything that must print or read numbers exactly as Prometheus does: the
PromQL engine (API values, ``count_values`` labels, ``le`` bucket bounds, error messages), the alert
template language (``%v``, ``printf``, ``humanize "1_000"``, number literals) and the promtool test runner.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal


def format_float(value: float, fmt: str = "g", prec: int = -1) -> str:
    """``strconv.FormatFloat(value, fmt, prec, 64)`` for fmt in g G e E f F x X."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    upper = fmt in "GEFX"
    low = fmt.lower()
    if low == "x":
        return _format_hex_float(value, prec, upper)
    neg = math.copysign(1.0, value) < 0
    sign = "-" if neg else ""
    if prec >= 0:
        if low == "f":
            return f"{value:.{prec}f}"
        if low == "e":
            text = f"{value:.{prec}e}"
            return text.upper() if upper else text
        text = f"{value:.{max(prec, 1) if prec == 0 else prec}g}"
        return text.upper() if upper else text
    # Shortest representation.
    if value == 0:
        digits, dp = "0", 1
    else:
        digits, dp = _shortest_digits(value)
    if low == "f":
        return sign + _fixed(digits, dp)
    exp = dp - 1
    if low == "e" or exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return sign + mantissa + _exp_suffix(exp, upper)
    return sign + _fixed(digits, dp)


def _fixed(digits: str, dp: int) -> str:
    """Digits with the decimal point at ``dp`` (``0.digits * 10**dp``), no trailing zero fraction."""
    if dp <= 0:
        return "0." + "0" * (-dp) + digits
    if dp >= len(digits):
        return digits + "0" * (dp - len(digits))
    return digits[:dp] + "." + digits[dp:]


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of a finite non-zero |value| and the decimal point position."""
    _sign, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    raw = "".join(str(d) for d in digit_tuple)
    stripped = raw.lstrip("0")
    dp = len(raw) + int(exponent) - (len(raw) - len(stripped))  # value = 0.DIGITS * 10**dp
    return stripped.rstrip("0") or "0", dp


def _exp_suffix(exp: int, upper: bool) -> str:
    mark = "E" if upper else "e"
    return f"{mark}{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _format_hex_float(value: float, prec: int, upper: bool) -> str:
    """Go's ``%x`` of a float64: ``0x1.8p+01``."""
    neg = math.copysign(1.0, value) < 0
    if value == 0:
        mantissa, exp = "0", 0
    else:
        mant, e = math.frexp(abs(value))  # abs = mant * 2**e, 0.5 <= mant < 1
        bits = int(mant * (1 << 53))  # 53-bit integer with the leading 1 at bit 52
        exp = e - 1
        frac = bits - (1 << 52)
        hex_frac = f"{frac:013x}".rstrip("0") if prec < 0 else f"{frac:013x}"
        if prec >= 0:
            hex_frac = hex_frac[:prec].ljust(prec, "0")  # truncation; rounding is rarely visible
        mantissa = "1" + ("." + hex_frac if hex_frac else "")
    text = f"{'-' if neg else ''}0x{mantissa}p{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return text.upper() if upper else text


_DECIMAL_DIGITS = r"[0-9](?:_?[0-9])*"
_HEX_DIGITS = r"[0-9a-fA-F](?:_?[0-9a-fA-F])*"
_GO_FLOAT = re.compile(
    r"[+-]?(?:inf|infinity)|nan"  # specials; NaN takes no sign
    rf"|[+-]?(?:{_DECIMAL_DIGITS}(?:\.(?:{_DECIMAL_DIGITS})?)?|\.{_DECIMAL_DIGITS})(?:[eE][+-]?{_DECIMAL_DIGITS})?"
    rf"|[+-]?0[xX](?:_?{_HEX_DIGITS}(?:\.(?:{_HEX_DIGITS})?)?|\.{_HEX_DIGITS})[pP][+-]?{_DECIMAL_DIGITS}",
    re.IGNORECASE,
)
"""Go's float syntax: underscores only between digits or after ``0x``; a hex mantissa needs ``p``."""


def parse_float(text: str) -> float:
    """``strconv.ParseFloat(text, 64)``; raises ValueError with Go's message where Go returns an error.

    Accepts ``1_000``, ``.5``, ``5.``, ``0x1p-2``, ``Inf``/``+Infinity``/``NaN`` (any case); refuses
    ``0x1`` (no ``p`` exponent), ``+NaN``, ``1__0``, surrounding space, and values beyond float64
    ("value out of range"); values below the smallest denormal round to zero as in Go.
    """
    if not _GO_FLOAT.fullmatch(text):
        raise ValueError(f"strconv.ParseFloat: parsing {quote(text)}: invalid syntax")
    body = text.replace("_", "")
    low = body.lower()
    if "inf" in low or "nan" in low:
        return float(low)
    try:
        value = float.fromhex(body) if "x" in low else float(body)
    except OverflowError:  # float.fromhex; float() returns inf instead
        value = math.inf
    if math.isinf(value):
        raise ValueError(f"strconv.ParseFloat: parsing {quote(text)}: value out of range")
    return value


def quote(text: str, ascii_only: bool = False) -> str:
    """``strconv.Quote`` (``QuoteToASCII`` with ``ascii_only``): a double-quoted Go string literal."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code > 0x7F and (ascii_only or not ch.isprintable()):
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def can_backquote(text: str) -> bool:
    """``strconv.CanBackquote``: one line, no backquote, no control character but tab, no BOM."""
    return all(ch == "\t" or (ord(ch) >= 0x20 and ch not in "`\x7f\ufeff") for ch in text)


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
