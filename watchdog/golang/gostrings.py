"""Go's ``strings`` case functions, rune by rune: ``Title``, ``ToUpper``, ``ToLower``."""

from __future__ import annotations


def title(text: str) -> str:
    """Go's deprecated ``strings.Title``: upper-cases the first letter of each word."""
    out = []
    prev = " "
    for ch in text:
        out.append(_upper_rune(ch) if _is_separator(prev) else ch)
        prev = ch
    return "".join(out)


def _is_separator(ch: str) -> bool:
    if ord(ch) <= 0x7F:
        return not (ch.isalnum() or ch == "_")
    if ch.isalpha() or ch.isdigit():
        return False
    return ch.isspace()


def _upper_rune(ch: str) -> str:
    up = ch.upper()
    return up if len(up) == 1 else ch


def _lower_rune(ch: str) -> str:
    low = ch.lower()
    return low if len(low) == 1 else ch


def to_upper(text: str) -> str:
    """Go's ``strings.ToUpper``: per rune, keeping runes whose upper case is not one rune."""
    return "".join(_upper_rune(ch) for ch in text)


def to_lower(text: str) -> str:
    """Go's ``strings.ToLower``: per rune, keeping runes whose lower case is not one rune."""
    return "".join(_lower_rune(ch) for ch in text)
