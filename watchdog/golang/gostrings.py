"""Go's ``strings`` case functions, rune by rune: ``Title``, ``ToUpper``, ``ToLower``.

Go's ``unicode.ToUpper``/``ToLower``/``ToTitle`` use the simple one-rune mappings of UnicodeData;
Python's ``str`` methods use the full ones. Where the full mapping has several runes, the simple one is
the rune itself except for the few listed here (Greek letters with ypogegrammeni, the dotted capital I).
"""

from __future__ import annotations

_SIMPLE_UPPER = {
    **{chr(c): chr(c + 8) for base in (0x1F80, 0x1F90, 0x1FA0) for c in range(base, base + 8)},
    "\u1fb3": "\u1fbc", "\u1fc3": "\u1fcc", "\u1ff3": "\u1ffc",
}
_SIMPLE_LOWER = {"\u0130": "i"}


def title(text: str) -> str:
    """Go's deprecated ``strings.Title``: title-cases (``ǆ`` -> ``ǅ``) the first letter of each word."""
    out = []
    prev = " "
    for ch in text:
        out.append(_title_rune(ch) if _is_separator(prev) else ch)
        prev = ch
    return "".join(out)


def _is_separator(ch: str) -> bool:
    if ord(ch) <= 0x7F:
        return not (ch.isalnum() or ch == "_")
    if ch.isalpha() or ch.isdigit():
        return False
    return ch.isspace()


def _upper_rune(ch: str) -> str:
    """Go's ``unicode.ToUpper``."""
    up = ch.upper()
    return up if len(up) == 1 else _SIMPLE_UPPER.get(ch, ch)


def _title_rune(ch: str) -> str:
    """Go's ``unicode.ToTitle``."""
    title_case = ch.title()
    return title_case if len(title_case) == 1 else _SIMPLE_UPPER.get(ch, ch)


def _lower_rune(ch: str) -> str:
    """Go's ``unicode.ToLower``."""
    low = ch.lower()
    return low if len(low) == 1 else _SIMPLE_LOWER.get(ch, ch)


def to_upper(text: str) -> str:
    """Go's ``strings.ToUpper``: per rune, simple case mapping."""
    return "".join(_upper_rune(ch) for ch in text)


def to_lower(text: str) -> str:
    """Go's ``strings.ToLower``: per rune, simple case mapping."""
    return "".join(_lower_rune(ch) for ch in text)
