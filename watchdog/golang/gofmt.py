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

from watchdog.golang.gostrconv import can_backquote, format_float, quote


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
        self.sharp_v = self.plus_v = False  # %#v and %+v (Go moves the flags for the v verb)
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


def _bad(verb: str, value: Any, spec: _Spec | None = None) -> str:
    """Go's ``badVerb``: the value printed with ``%v`` under the directive's own flags, width, precision."""
    if value is None:
        return f"%!{verb}(<nil>)"
    shown = format_value(value) if spec is None else _format_one(value, "v", spec)
    return f"%!{verb}({go_type(value)}={shown})"


def go_syntax(value: Any) -> str:
    """Go's ``%#v`` of a modelled value."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, dict):
        items = ", ".join(f"{go_syntax(k)}:{go_syntax(value[k])}" for k in sorted(value))
        return f"{go_type(value)}{{{items}}}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(go_syntax(item) for item in value) + "}"
    return format_value(value)


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
    elif verb == "U":
        body = f"U+{value:04X}" if value >= 0 else f"U+{value & 0xFFFFFFFFFFFFFFFF:04X}"
        if spec.prec is not None and spec.prec > 4:
            body = f"U+{body[2:].rjust(spec.prec, '0')}"
        if spec.sharp and 0 <= value <= 0x10FFFF and chr(value).isprintable():
            body += f" '{chr(value)}'"
        saved, spec.zero = spec.zero, False
        out = _pad(body, spec, False)
        spec.zero = saved
        return out
    elif verb == "q":
        return _pad("'" + quote(chr(value), spec.plus)[1:-1].replace("\\\"", '"').replace("'", "\\'") + "'",
                    spec, False)
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
    if spec.sharp and verb != "v" and math.isfinite(value):
        body = _sharp_float(body, verb, spec.prec)
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


def _sharp_float(body: str, verb: str, prec: int | None) -> str:
    """Go's ``#`` flag on floats: always a decimal point; ``%#g`` keeps trailing zeros to the precision."""
    sign = body[0] if body[:1] in "+-" else ""
    num = body[len(sign):]
    digits = (6 if prec is None else prec) if verb in "gGxX" else 0
    tail = ""
    has_point = seen_nonzero = False
    for index, ch in enumerate(num):
        if ch == ".":
            has_point = True
        elif ch in "pP" or (ch in "eE" and verb not in "xX"):
            num, tail = num[:index], num[index:]
            break
        else:
            seen_nonzero = seen_nonzero or ch != "0"
            if seen_nonzero:
                digits -= 1
    if not has_point:
        if num == "0":
            digits -= 1
        num += "."
    return sign + num + "0" * max(digits, 0) + tail


def _fmt_string(value: str, verb: str, spec: _Spec) -> str | None:
    if verb in "vs":
        body = value if spec.prec is None else value[: spec.prec]
    elif verb == "q":
        text = value if spec.prec is None else value[: spec.prec]
        body = "`" + text + "`" if spec.sharp and can_backquote(text) else quote(text, spec.plus)
    elif verb in "xX":
        raw = value.encode("utf-8")
        body = raw.hex() if verb == "x" else raw.hex().upper()
        prefix = ("0x" if verb == "x" else "0X") if spec.sharp else ""
        pairs = [body[i:i + 2] for i in range(0, len(body), 2)] if spec.space else [body]
        body = " ".join(prefix + pair for pair in pairs)
    else:
        return None
    return _pad(body, spec, False)


def _format_one(value: Any, verb: str, spec: _Spec) -> str:
    if verb == "T":
        return _pad(go_type(value), spec, False)
    if verb == "v" and spec.sharp_v and not isinstance(value, (int, float)):
        return _pad(go_syntax(value), spec, False)
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
    return result if result is not None else _bad(verb, value, spec)


_TOO_LARGE = 1_000_000


def _parsenum(fmt: str, start: int, end: int) -> tuple[int, bool, int]:
    """Go's ``parsenum``: (number, found, index after it); a number past 1e6 is not a number."""
    num, found, i = 0, False, start
    while i < end and fmt[i].isascii() and fmt[i].isdigit():
        if abs(num) > _TOO_LARGE:
            return 0, False, end
        num, found, i = num * 10 + int(fmt[i]), True, i + 1
    return num, found, i


class _Printer:
    """Go's ``pp.doPrintf`` state: the argument cursor, argument indexes (``%[2]d``) and their errors."""

    def __init__(self, fmt: str, args: list[Any]) -> None:
        self.fmt, self.args = fmt, args
        self.arg_num = 0
        self.reordered = False
        self.good_arg_num = True

    def arg_number(self, i: int) -> tuple[int, bool]:
        """``argNumber``: an explicit ``[n]`` at ``i`` moves the cursor; returns (new i, found)."""
        fmt = self.fmt
        if i >= len(fmt) or fmt[i] != "[":
            return i, False
        self.reordered = True
        close = fmt.find("]", i + 1)
        if len(fmt) - i < 3 or close < 0:
            self.good_arg_num = False
            return i + 1, False
        index, ok, after = _parsenum(fmt, i + 1, close)
        if not ok or after != close:
            self.good_arg_num = False
            return close + 1, False
        if 0 <= index - 1 < len(self.args):
            self.arg_num = index - 1
            return close + 1, True
        self.good_arg_num = False
        return close + 1, True

    def int_arg(self) -> int | None:
        """``intFromArg``: the current argument as a width/precision (None when not an int)."""
        if self.arg_num >= len(self.args):
            return None
        value = self.args[self.arg_num]
        self.arg_num += 1
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _TOO_LARGE:
            return value
        return None


def sprintf(fmt: str, args: list[Any]) -> str:
    """``fmt.Sprintf(fmt, args...)``: Go's ``doPrintf``, with argument indexes (``%[2]v``, ``%[3]*.[2]*[1]f``)
    and Go's error notation for bad verbs, widths, indexes and argument counts."""
    out: list[str] = []
    p = _Printer(fmt, args)
    i, end = 0, len(fmt)
    while i < end:
        p.good_arg_num = True
        j = fmt.find("%", i)
        j = end if j < 0 else j
        out.append(fmt[i:j])
        if j >= end:
            break
        i = j + 1
        spec = _Spec()
        while i < end and fmt[i] in "+-# 0":
            flag = fmt[i]
            spec.plus |= flag == "+"
            spec.sharp |= flag == "#"
            spec.space |= flag == " "
            if flag == "0":
                spec.zero = not spec.minus
            if flag == "-":
                spec.minus, spec.zero = True, False
            i += 1
        i, after_index = p.arg_number(i)
        if i < end and fmt[i] == "*":
            i += 1
            width = p.int_arg()
            if width is None:
                out.append("%!(BADWIDTH)")
            else:
                spec.width = width
                if width < 0:
                    spec.minus, spec.zero, spec.width = True, False, -width
            after_index = False
        else:
            width, present, i = _parsenum(fmt, i, end)
            if present:
                spec.width = width
                if after_index:
                    p.good_arg_num = False
        if i + 1 < end and fmt[i] == ".":
            i += 1
            if after_index:
                p.good_arg_num = False
            i, after_index = p.arg_number(i)
            if i < end and fmt[i] == "*":
                i += 1
                prec = p.int_arg()
                if prec is None or prec < 0:  # Go: a negative precision is no precision, reported
                    out.append("%!(BADPREC)")
                else:
                    spec.prec = prec
                after_index = False
            else:
                prec, present, i = _parsenum(fmt, i, end)
                spec.prec = prec if present else 0
        if not after_index:
            i, after_index = p.arg_number(i)
        if i >= end:
            out.append("%!(NOVERB)")
            break
        verb = fmt[i]
        i += 1
        if verb == "%":
            out.append("%")
        elif not p.good_arg_num:
            out.append(f"%!{verb}(BADINDEX)")
        elif p.arg_num >= len(args):
            out.append(f"%!{verb}(MISSING)")
        else:
            if verb == "v":
                spec.sharp_v, spec.sharp = spec.sharp, False
                spec.plus_v, spec.plus = spec.plus, False
            out.append(_format_one(args[p.arg_num], verb, spec))
            p.arg_num += 1
    if not p.reordered and p.arg_num < len(args):
        extra = ", ".join(
            "<nil>" if a is None else f"{go_type(a)}={format_value(a)}" for a in args[p.arg_num:]
        )
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)
