"""Go's ``fmt`` formatting, for the values Prometheus alert templates handle.

Go values are modelled as Python values: ``string`` → ``str``, ``float64`` → ``float``, ``int`` → ``int``,
``bool`` → ``bool``, ``nil`` → ``None``, maps → ``dict``, slices → ``list``. Objects with a ``go_string()``
method print through it (Go's ``Stringer``) and name their type with ``go_type``.

Contract: :func:`sprintf`, :func:`sprint` and :func:`sprintln` give Go's output for the verbs
``%v %s %d %f %F %e %E %g %G %x %X %o %b %c %q %t %%`` with flags ``+ - # space 0``, width and precision,
including Go's error forms (``%!d(float64=1.5)``, ``%!s(MISSING)``, ``%!(EXTRA int=1)``).
Floats and quoted strings print through :mod:`watchdog.golang.gostrconv` (``strconv.FormatFloat``/``Quote``).
"""

from __future__ import annotations

import math
from typing import Any

from watchdog.golang.gostrconv import format_float, quote


def go_type(value: Any) -> str:
    """The Go type name of a modelled value, as ``%!verb(type=value)`` prints it."""
    if value is None:
        return "<nil>"
    declared = getattr(value, "GO_TYPE", None)
    if isinstance(declared, str):
        return declared
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map[string]string" if all(isinstance(v, str) for v in value.values()) else (
            "map[string]interface {}")
    if isinstance(value, list):
        return "[]interface {}"
    return type(value).__name__


def format_value(value: Any) -> str:
    """Go's ``%v`` of a modelled value (``fmt.Sprint`` of one operand)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        items = " ".join(f"{format_value(k)}:{format_value(value[k])}" for k in sorted(value))
        return f"map[{items}]"
    if isinstance(value, list):
        return "[" + " ".join(format_value(item) for item in value) + "]"
    go_string = getattr(value, "go_string", None)
    if callable(go_string):
        return str(go_string())
    return str(value)


def sprint(args: list[Any]) -> str:
    """``fmt.Sprint``: spaces between operands when neither side is a string."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if i > 0 and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(format_value(arg))
    return "".join(out)


def sprintln(args: list[Any]) -> str:
    """``fmt.Sprintln``: operands separated by spaces, newline appended."""
    return " ".join(format_value(arg) for arg in args) + "\n"


class _Spec:
    """One parsed ``%[flags][width][.prec]verb`` directive."""

    def __init__(self) -> None:
        self.plus = self.minus = self.sharp = self.space = self.zero = False
        self.width: int | None = None
        self.prec: int | None = None


def _pad(body: str, spec: _Spec, numeric: bool) -> str:
    width = spec.width or 0
    if len(body) >= width:
        return body
    fill = width - len(body)
    if spec.minus:
        return body + " " * fill
    if spec.zero:
        if numeric and body[:1] in "+- ":
            return body[0] + "0" * fill + body[1:]
        return "0" * fill + body
    return " " * fill + body


def _bad(verb: str, value: Any) -> str:
    if value is None:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({go_type(value)}={format_value(value)})"


def _sign(body: str, spec: _Spec) -> str:
    if body.startswith("-"):
        return body
    if spec.plus:
        return "+" + body
    if spec.space:
        return " " + body
    return body


def _fmt_int(value: int, verb: str, spec: _Spec) -> str | None:
    if verb in "vd":
        digits = str(abs(value))
    elif verb in "xX":
        digits = f"{abs(value):x}" if verb == "x" else f"{abs(value):X}"
        if spec.sharp:
            digits = ("0x" if verb == "x" else "0X") + digits
    elif verb == "o":
        digits = f"{abs(value):o}"
        if spec.sharp:
            digits = "0" + digits
    elif verb == "b":
        digits = f"{abs(value):b}"
    elif verb == "c":
        return _pad(chr(value), spec, False)
    elif verb == "q":
        return _pad("'" + quote(chr(value))[1:-1].replace("'", "\\'") + "'", spec, False)
    else:
        return None
    if spec.prec is not None:
        digits = digits.rjust(spec.prec, "0")
        spec.zero = False
    body = _sign(("-" if value < 0 else "") + digits, spec)
    return _pad(body, spec, True)


def _fmt_float(value: float, verb: str, spec: _Spec) -> str | None:
    if verb not in "vgGeEfFxX":
        return None
    if verb == "v":
        body = format_float(value, "g", -1 if spec.prec is None else spec.prec)
    elif verb in "gG" or verb in "xX":
        body = format_float(value, verb, -1 if spec.prec is None else spec.prec)
    else:
        body = format_float(value, verb, 6 if spec.prec is None else spec.prec)
    if math.isinf(value) or math.isnan(value):
        if spec.plus and not body.startswith(("+", "-")):
            body = "+" + body
        elif spec.space and body == "NaN":
            body = " NaN"
        elif spec.space and body == "+Inf" and not spec.plus:
            body = " Inf"
        saved, spec.zero = spec.zero, False
        out = _pad(body, spec, False)
        spec.zero = saved
        return out
    return _pad(_sign(body, spec), spec, True)


def _fmt_string(value: str, verb: str, spec: _Spec) -> str | None:
    if verb in "vs":
        body = value if spec.prec is None else value[: spec.prec]
    elif verb == "q":
        body = quote(value if spec.prec is None else value[: spec.prec])
    elif verb in "xX":
        raw = value.encode("utf-8")
        body = raw.hex() if verb == "x" else raw.hex().upper()
        if spec.space:
            body = " ".join(body[i:i + 2] for i in range(0, len(body), 2))
    else:
        return None
    return _pad(body, spec, False)


def _format_one(value: Any, verb: str, spec: _Spec) -> str:
    if verb == "T":
        return _pad(go_type(value), spec, False)
    if value is None:
        return _pad("<nil>", spec, False) if verb == "v" else _bad(verb, value)
    result: str | None
    if isinstance(value, bool):
        result = _pad("true" if value else "false", spec, False) if verb in "vt" else None
    elif isinstance(value, int):
        result = _fmt_int(value, verb, spec)
    elif isinstance(value, float):
        result = _fmt_float(value, verb, spec)
    elif isinstance(value, str):
        result = _fmt_string(value, verb, spec)
    elif verb in "vs" or callable(getattr(value, "go_string", None)):
        result = _pad(format_value(value), spec, False) if verb in "vs" else None
    else:
        result = None
    return result if result is not None else _bad(verb, value)


def sprintf(fmt: str, args: list[Any]) -> str:
    """``fmt.Sprintf(fmt, args...)`` with Go's error notation for bad verbs and argument counts."""
    out: list[str] = []
    argi = 0
    i = 0
    n = len(fmt)
    while i < n:
        ch = fmt[i]
        if ch != "%":
            j = fmt.find("%", i)
            j = n if j < 0 else j
            out.append(fmt[i:j])
            i = j
            continue
        i += 1
        spec = _Spec()
        while i < n and fmt[i] in "+-# 0":
            flag = fmt[i]
            spec.plus |= flag == "+"
            spec.minus |= flag == "-"
            spec.sharp |= flag == "#"
            spec.space |= flag == " "
            spec.zero |= flag == "0"
            i += 1
        if spec.minus:
            spec.zero = False
        if i < n and fmt[i] == "*":
            i += 1
            if argi < len(args) and isinstance(args[argi], int) and not isinstance(args[argi], bool):
                spec.width = int(args[argi])
                if spec.width < 0:
                    spec.minus, spec.zero, spec.width = True, False, -spec.width
            else:
                out.append("%!(BADWIDTH)")
            argi += 1
        else:
            start = i
            while i < n and fmt[i].isdigit():
                i += 1
            if i > start:
                spec.width = int(fmt[start:i])
        if i < n and fmt[i] == ".":
            i += 1
            if i < n and fmt[i] == "*":
                i += 1
                if argi < len(args) and isinstance(args[argi], int) and not isinstance(args[argi], bool):
                    spec.prec = max(int(args[argi]), 0)
                else:
                    out.append("%!(BADPREC)")
                argi += 1
            else:
                start = i
                while i < n and fmt[i].isdigit():
                    i += 1
                spec.prec = int(fmt[start:i]) if i > start else 0
        if i >= n:
            out.append("%!(NOVERB)")
            break
        verb = fmt[i]
        i += 1
        if verb == "%":
            out.append("%")
            continue
        if argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        out.append(_format_one(args[argi], verb, spec))
        argi += 1
    if argi < len(args):
        extra = ", ".join(
            "<nil>" if a is None else f"{go_type(a)}={format_value(a)}" for a in args[argi:]
        )
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)
