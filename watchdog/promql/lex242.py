"""The lexical rules of Prometheus 2.42's PromQL that ``promql-parser`` (which follows Prometheus 3)
does not enforce, applied to the query text before it is parsed.

Contract: :func:`prepare` returns the text to hand to the parser plus the ``@`` timestamps it took
out, or raises :class:`PromQLError` for what 2.42 rejects:

- a number where 2.42's grammar wants a duration: ``x[5]``, ``x[5m:5]``, ``x offset 5``;
- a number literal that Go's ``strconv`` cannot read: ``1e400`` (out of range), hexadecimal beyond
  int64 (Go then tries ``ParseFloat``, which refuses hex without a ``p`` exponent);
- a quoted label name inside ``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``;
- a regex that Go 1.19's RE2 rejects and the parser's Rust ``regex`` accepts: ``(?<name>...)``;
- an ``@`` timestamp that is NaN, infinite or beyond int64 seconds (2.42: "timestamp out of bounds").

``@ <number>`` is replaced by a marker time (``MARKER_BASE_S + i`` seconds, after 1970, which the
parser's binding can hold) and the real time in milliseconds is returned in ``markers``; 2.42 computes
it as ``int64(math.Round(ts * 1000))``, where Go on amd64 turns an out-of-range conversion into
``math.MinInt64``, and so do we. ``\\Q...\\E`` inside a regex matcher (RE2 quoting, which the parser's
Rust ``regex`` lacks) is rewritten into the same literal with each metacharacter escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from watchdog.promql.errors import PromQLError

MARKER_BASE_S = 4_000_000_000
"""Marker ``@`` times start here (seconds); every numeric ``@`` of a query is rewritten to one."""
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_GROUPING_KEYWORDS = frozenset(("by", "without", "on", "ignoring", "group_left", "group_right"))
_UNITS = "smhdwy"


@dataclass
class Prepared:
    """The text for the parser and the real ``@`` times (ms) of the marker times (ms) in it."""

    text: str
    markers: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Token:
    kind: str  # "string", "ident", "number", "duration", "punct", "space"
    text: str
    start: int


def _is_alpha(char: str) -> bool:
    """Go's ``isAlpha``: ASCII letters and ``_`` only (``str.isalpha`` would also take ``é``)."""
    return char == "_" or ("a" <= char <= "z") or ("A" <= char <= "Z")


def _is_digit(char: str) -> bool:
    """An ASCII digit (``str.isdigit`` would also take ``²`` and other scripts' digits)."""
    return "0" <= char <= "9"


def _is_alnum(char: str) -> bool:
    return _is_alpha(char) or _is_digit(char)


def _scan_number_or_duration(text: str, pos: int) -> tuple[str, int]:
    """Go's ``lexNumberOrDuration`` from ``pos``: (kind, end); kind "bad" for a lexer error."""
    i = pos
    digits = "0123456789"
    if text.startswith(("0x", "0X"), i):
        digits = "0123456789abcdefABCDEF"
        i += 2
    elif text.startswith("0", i):
        i += 1
    while i < len(text) and text[i] in digits:
        i += 1
    if i < len(text) and text[i] == ".":
        i += 1
        while i < len(text) and text[i] in digits:
            i += 1
    if i < len(text) and text[i] in "eE":
        i += 1
        if i < len(text) and text[i] in "+-":
            i += 1
        while i < len(text) and _is_digit(text[i]):
            i += 1
    if i >= len(text) or not _is_alnum(text[i]):
        return "number", i
    # Not a number: the rest must be a duration (units, then more number+unit pairs).
    if text[i] not in _UNITS:
        return "bad", i
    i += 1
    if i < len(text) and text[i] == "s":
        i += 1
    while i < len(text) and _is_digit(text[i]):
        while i < len(text) and _is_digit(text[i]):
            i += 1
        if i >= len(text) or text[i] not in _UNITS:
            return "bad", i
        i += 1
        if i < len(text) and text[i] == "s":
            i += 1
    if i < len(text) and _is_alnum(text[i]):
        return "bad", i
    return "duration", i


def string_end(text: str, start: int) -> int:
    """Index of the closing quote of the string literal opening at ``start`` (``len(text)`` or past it
    when unclosed); backslash escapes count except in raw (backquoted) strings."""
    quote = text[start]
    end = start + 1
    while end < len(text) and text[end] != quote:
        end += 2 if text[end] == "\\" and quote != "`" else 1
    return end


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in "\"'`":
            end = string_end(text, i)
            out.append(_Token("string", text[i : end + 1], i))
            i = end + 1
        elif char.isspace():
            end = i
            while end < len(text) and text[end].isspace():
                end += 1
            out.append(_Token("space", text[i:end], i))
            i = end
        elif char == "#":  # a comment runs to the end of the line
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out.append(_Token("space", text[i:end], i))
            i = end
        elif _is_digit(char) or (char == "." and i + 1 < len(text) and _is_digit(text[i + 1])):
            kind, end = _scan_number_or_duration(text, i)
            if kind == "bad":  # leave the message to the parser, which rejects it too
                end = max(end, i + 1)
                kind = "punct"
            out.append(_Token(kind, text[i:end], i))
            i = end
        elif _is_alpha(char) or (char == ":" and i + 1 < len(text) and (text[i + 1] == ":" or _is_alpha(text[i + 1]))):
            end = i
            while end < len(text) and (_is_alnum(text[end]) or text[end] == ":"):
                end += 1
            out.append(_Token("ident", text[i:end], i))
            i = end
        else:
            out.append(_Token("punct", char, i))
            i += 1
    return out


_REGEX_META = frozenset("\\.+*?()|[]{}^$")


def _expand_regex_quotes(token: str) -> str:
    """A quoted regex source with each ``\\Q...\\E`` replaced by its text, metacharacters escaped."""
    quote = token[0]
    raw = quote == "`"
    slash = "\\" if raw else "\\\\"  # one regex backslash, as written in this kind of string
    body = token[1:-1] if len(token) > 1 and token.endswith(quote) else token[1:]
    out: list[str] = []
    i = 0
    quoting = False
    while i < len(body):
        if body.startswith(slash + "Q", i) and not quoting:
            quoting, i = True, i + len(slash) + 1
            continue
        if body.startswith(slash + "E", i) and quoting:
            quoting, i = False, i + len(slash) + 1
            continue
        if body[i] == "\\" and not raw:  # one escape sequence of the string literal
            piece = body[i : i + 2]
            if piece == "\\\\" and quoting:
                out.append(slash + slash)
            else:
                out.append(piece)
            i += 2
            continue
        out.append((slash if quoting and body[i] in _REGEX_META else "") + body[i])
        i += 1
    if quoting:  # Prometheus compiles ^(?:re)$: an open \Q swallows the closing parenthesis
        raise PromQLError(f"invalid regular expression {token}: error parsing regexp: missing closing ): "
                          f"`^(?:{body})$`")
    return quote + "".join(out) + quote


def go_parse_number(literal: str) -> float:
    """Go 2.42's ``parser.number``: ``strconv.ParseInt(s, 0, 64)``, else ``ParseFloat``; errors as Go."""
    lowered = literal.lower()
    try:
        if lowered.startswith("0x"):
            value = int(lowered, 16)
            if value > _INT64_MAX:
                raise PromQLError(f'error parsing number: strconv.ParseFloat: parsing "{literal}": '
                                  "invalid syntax")
            return float(value)
        result = float(literal)
    except ValueError:
        raise PromQLError(f'error parsing number: strconv.ParseFloat: parsing "{literal}": '
                          "invalid syntax") from None
    if math.isinf(result) and lowered.lstrip("+-") not in ("inf", "infinity"):
        raise PromQLError(f'error parsing number: strconv.ParseFloat: parsing "{literal}": '
                          "value out of range")
    return result


def at_milliseconds(seconds: float) -> int:
    """2.42's ``@`` time: bounds checked, then ``int64(math.Round(ts * 1000))`` as amd64 Go does it."""
    if math.isnan(seconds) or math.isinf(seconds) or seconds >= 2.0**63 or seconds <= -(2.0**63):
        raise PromQLError(f"timestamp out of bounds for @ modifier: {seconds:f}")
    scaled = seconds * 1000
    if math.isinf(scaled) or not (-(2.0**63) <= scaled < 2.0**63):
        return _INT64_MIN
    rounded = math.floor(abs(scaled) + 0.5) * (1 if scaled >= 0 else -1)  # Go rounds half away from 0
    return _INT64_MIN if not (_INT64_MIN <= rounded <= _INT64_MAX) else int(rounded)


def prepare(text: str) -> Prepared:
    """Check ``text`` against 2.42's lexical rules and take its numeric ``@`` times out (see module)."""
    solid = [t for t in _tokens(text) if t.kind != "space"]
    replace: dict[int, str] = {}  # token start -> replacement text (covering the token)
    spans: dict[int, int] = {}  # token start -> end of the replaced span
    markers: dict[int, int] = {}
    bracket = 0
    grouping_depth: int | None = None
    paren = 0
    for index, token in enumerate(solid):
        previous = solid[index - 1] if index else None
        if token.kind == "punct":
            if token.text == "[":
                bracket += 1
            elif token.text == "]":
                bracket -= 1
            elif token.text == "(":
                paren += 1
                if previous is not None and previous.kind == "ident" and previous.text.lower() in _GROUPING_KEYWORDS:
                    grouping_depth = paren
            elif token.text == ")":
                if grouping_depth == paren:
                    grouping_depth = None
                paren -= 1
        if token.kind == "string" and previous is not None and previous.text in ("~",):
            source = token.text
            if "(?<" in source.replace("(?<=", "").replace("(?<!", ""):
                raise PromQLError(f"invalid regular expression {source}: invalid or unsupported Perl syntax: "
                                  "`(?<` (named groups are written (?P<name>...) in Prometheus 2.42)")
            if "Q" in source:
                source = _expand_regex_quotes(source)
                if source.startswith("`"):
                    body = source[1:-1]
                    source = '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"'
                replace[token.start] = source
                spans[token.start] = token.start + len(token.text)
        if token.kind == "string" and token.text.startswith("`") and token.start not in replace:
            # a raw string: Go keeps backslashes as they are, the parser would read escapes in it
            body = token.text[1:-1] if len(token.text) > 1 and token.text.endswith("`") else token.text[1:]
            replace[token.start] = '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"'
            spans[token.start] = token.start + len(token.text)
        if token.kind == "string" and grouping_depth is not None:
            raise PromQLError(f'unexpected string {token.text} in grouping opts, expected label (quoted '
                              "label names need Prometheus 3)")
        if token.kind == "number":
            wants_duration = previous is not None and (
                (bracket > 0 and previous.kind == "punct" and previous.text in ("[", ":"))
                or (previous.kind == "ident" and previous.text.lower() == "offset")
                or (previous.kind == "punct" and previous.text in ("-", "+") and index >= 2
                    and solid[index - 2].kind == "ident" and solid[index - 2].text.lower() == "offset"))
            if wants_duration:
                raise PromQLError(f'unexpected number "{token.text}", expected duration (a unit is '
                                  "required in Prometheus 2.42)")
            go_parse_number(token.text)
        is_at_number = token.kind in ("number", "ident") and previous is not None and (
            (previous.kind == "punct" and previous.text == "@")
            or (previous.kind == "punct" and previous.text in ("-", "+") and index >= 2
                and solid[index - 2].kind == "punct" and solid[index - 2].text == "@"))
        if is_at_number and (token.kind == "number" or token.text.lower() in ("inf", "nan")):
            seconds = go_parse_number(token.text)
            if previous is not None and previous.text == "-":
                seconds = -seconds
            real = at_milliseconds(seconds)
            marker_s = MARKER_BASE_S + len(markers)
            markers[marker_s * 1000] = real
            first = previous if previous is not None and previous.text in ("-", "+") else token
            replace[first.start] = str(marker_s)
            spans[first.start] = token.start + len(token.text)
    if not replace:
        return Prepared(text)
    out: list[str] = []
    i = 0
    for start in sorted(replace):
        out.append(text[i:start])
        out.append(replace[start])
        i = spans[start]
    out.append(text[i:])
    return Prepared("".join(out), markers)
