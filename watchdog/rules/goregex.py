"""Go (RE2) regular expressions run on Python's ``re``: translate the syntax, keep Go's meaning.

Contract: :func:`compile_go` accepts RE2 syntax as Go's ``regexp`` does and returns a Python pattern that
matches the same strings, or raises :class:`GoRegexError` with Go's wording where Go would refuse
(backreferences, lookaround). Translated differences:
- ``\\d \\w \\s \\b`` (and negations, also inside classes) are ASCII-only in RE2;
- ``$`` without ``(?m)`` matches only at the end of the text (Python also matches before a final
  newline); ``\\z`` is Python's ``\\Z``;
- flags in the middle of a pattern (``a(?i)b``) apply to the rest of the enclosing group;
- POSIX classes (``[[:alpha:]]``), ``\\Q...\\E`` literals, ``\\pL``/``\\p{Lu}``/``\\PN`` Unicode general
  categories (scripts such as ``\\p{Greek}`` are refused);
- ``x{,n}`` is a literal in RE2.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import lru_cache

_ASCII_CLASS = {
    "d": "0-9",
    "w": "0-9A-Za-z_",
    "s": "\\t\\n\\f\\r ",
}
_POSIX = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
    "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_WORD_BOUNDARY = r"(?:(?<=[0-9A-Za-z_])(?![0-9A-Za-z_])|(?<![0-9A-Za-z_])(?=[0-9A-Za-z_]))"
_NOT_WORD_BOUNDARY = r"(?:(?<=[0-9A-Za-z_])(?=[0-9A-Za-z_])|(?<![0-9A-Za-z_])(?![0-9A-Za-z_]))"


class GoRegexError(ValueError):
    """A pattern Go's regexp package rejects (or one we cannot translate)."""


@lru_cache(maxsize=64)
def _category_ranges(category: str) -> str:
    """A character-class body for a Unicode general category (``L``, ``Lu``, ``N``, ...)."""
    ranges: list[tuple[int, int]] = []
    start = -1
    prev = -2
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)).startswith(category):
            if code != prev + 1:
                if start >= 0:
                    ranges.append((start, prev))
                start = code
            prev = code
    if start >= 0:
        ranges.append((start, prev))
    if not ranges:
        raise GoRegexError(f"invalid character class range: `\\p{{{category}}}`")
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


_CATEGORIES = {"L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc",
               "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C",
               "Cc", "Cf", "Co", "Cs"}


def _unicode_class(pattern: str, i: int) -> tuple[str, bool, int]:
    """Parse ``\\pX`` / ``\\p{Name}`` at ``pattern[i]`` (the ``p``/``P``); returns (body, negated, next)."""
    negated = pattern[i] == "P"
    j = i + 1
    if j < len(pattern) and pattern[j] == "{":
        close = pattern.find("}", j)
        if close < 0:
            raise GoRegexError(f"invalid character class range: `{pattern[i - 1:]}`")
        name = pattern[j + 1:close]
        nxt = close + 1
    else:
        name = pattern[j:j + 1]
        nxt = j + 1
    if name.startswith("^"):
        negated, name = not negated, name[1:]
    if name not in _CATEGORIES:
        raise GoRegexError(f"invalid character class range: `\\p{{{name}}}` (only general categories are "
                           "supported)")
    return _category_ranges(name), negated, nxt


def translate(pattern: str, global_flags: bool = True) -> str:
    """The Python ``re`` source equivalent to the RE2 ``pattern``; raises :class:`GoRegexError`.

    With ``global_flags`` false, leading flags like ``(?i)`` become a scoped group, so the result can be
    embedded in a larger pattern.
    """
    out: list[str] = []
    levels: list[list[str]] = [[]]  # per open group: flags of the scoped groups opened inside it
    multiline = False
    i = 0
    n = len(pattern)
    at_start = True
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i = _escape(pattern, i, out)
            at_start = False
            continue
        if ch == "[":
            body, i = _char_class(pattern, i)
            out.append(body)
            at_start = False
            continue
        if ch == "(" and pattern.startswith("(?", i):
            if pattern.startswith("(?P<", i):
                out.append("(?P<")
                levels.append([])
                i += 4
                at_start = False
                continue
            flags = re.match(r"\(\?([imsU-]*)(\)|:)", pattern[i:])
            if flags is None:
                raise GoRegexError(f"invalid or unsupported Perl syntax: `{pattern[i:i + 3]}`")
            if "U" in flags.group(1):
                raise GoRegexError("the U (ungreedy) flag is not supported")
            flag_text = flags.group(1)
            if "m" in flag_text.split("-")[0]:
                multiline = True
            if flags.group(2) == ":":
                out.append(f"(?{flag_text}:")
                levels.append([])
            elif global_flags and at_start and len(levels) == 1 and "-" not in flag_text:
                out.append(f"(?{flag_text})" if flag_text else "")
            elif flag_text:
                out.append(f"(?{flag_text}:")
                levels[-1].append(flag_text)
            i += flags.end()
            continue
        at_start = False
        if ch == "(":
            out.append("(")
            levels.append([])
        elif ch == ")":
            if len(levels) == 1:
                raise GoRegexError(f"unexpected ): `{pattern}`")
            out.append(")" * len(levels.pop()) + ")")
        elif ch == "|":
            scoped = levels[-1]
            out.append(")" * len(scoped) + "|" + "".join(f"(?{f}:" for f in scoped))
        elif ch == "$" and not multiline:
            out.append(r"\Z")
        elif ch == "{" and pattern.startswith("{,", i):
            out.append(r"\{")
        else:
            out.append(ch)
        i += 1
    if len(levels) > 1:
        raise GoRegexError(f"missing closing ): `{pattern}`")
    out.append(")" * len(levels[0]))
    return "".join(out)


def _escape(pattern: str, i: int, out: list[str]) -> int:
    """Translate the escape at ``pattern[i] == '\\'``; returns the index after it."""
    if i + 1 >= len(pattern):
        raise GoRegexError("trailing backslash at end of expression: ``")
    esc = pattern[i + 1]
    if esc == "Q":
        end = pattern.find("\\E", i + 2)
        out.append(re.escape(pattern[i + 2:] if end < 0 else pattern[i + 2:end]))
        return len(pattern) if end < 0 else end + 2
    if esc in "dws":
        out.append(f"[{_ASCII_CLASS[esc]}]")
    elif esc in "DWS":
        out.append(f"[^{_ASCII_CLASS[esc.lower()]}]")
    elif esc == "b":
        out.append(_WORD_BOUNDARY)
    elif esc == "B":
        out.append(_NOT_WORD_BOUNDARY)
    elif esc == "z":
        out.append(r"\Z")
    elif esc in "pP":
        body, negated, nxt = _unicode_class(pattern, i + 1)
        out.append(f"[{'^' if negated else ''}{body}]")
        return nxt
    elif (esc.isdigit() and esc != "0") or (esc.isalnum() and esc not in "AaftnrvxC0"):
        raise GoRegexError(f"invalid escape sequence: `\\{esc}`")
    else:
        out.append(pattern[i:i + 2])
    return i + 2


def _char_class(pattern: str, i: int) -> tuple[str, int]:
    """Translate the class starting at ``pattern[i] == '['``; returns (text, index after ``]``)."""
    out = ["["]
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        out.append("^")
        j += 1
    first = True
    while j < len(pattern):
        ch = pattern[j]
        if ch == "]" and not first:
            out.append("]")
            return "".join(out), j + 1
        first = False
        if ch == "[" and pattern.startswith("[:", j):
            close = pattern.find(":]", j + 2)
            name = pattern[j + 2:close] if close > 0 else ""
            negated = name.startswith("^")
            body = _POSIX.get(name.lstrip("^"))
            if body is None:
                raise GoRegexError(f"invalid character class range: `{pattern[j:close + 2]}`")
            if negated:
                raise GoRegexError("negated POSIX classes are not supported")
            out.append(body)
            j = close + 2
            continue
        if ch == "\\" and j + 1 < len(pattern):
            esc = pattern[j + 1]
            if esc in "dws":
                out.append(_ASCII_CLASS[esc])
                j += 2
                continue
            if esc in "DWS":
                raise GoRegexError("negated Perl classes inside brackets are not supported")
            if esc in "pP":
                body, negated, j = _unicode_class(pattern, j + 1)
                if negated:
                    raise GoRegexError("negated Unicode classes inside brackets are not supported")
                out.append(body)
                continue
            out.append(pattern[j:j + 2])
            j += 2
            continue
        if ch == "[":
            out.append("\\[")
            j += 1
            continue
        out.append(ch)
        j += 1
    raise GoRegexError(f"missing closing ]: `{pattern[i:]}`")


@lru_cache(maxsize=4096)
def compile_go(pattern: str, anchored: bool = False) -> re.Pattern[str]:
    """Compile an RE2 pattern (``anchored``: as Prometheus label matchers, ``^(?:pattern)$``)."""
    source = translate(pattern, global_flags=not anchored)
    if anchored:
        source = f"^(?:{source})\\Z"
    try:
        return re.compile(source)
    except re.error as exc:
        raise GoRegexError(f"error parsing regexp: {exc}: `{pattern}`") from exc
