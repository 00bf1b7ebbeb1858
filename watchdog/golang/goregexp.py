"""Go's regexp on RE2: label regexes anchored as Prometheus anchors them (``^(?:pattern)$``), and the
unanchored ``regexp.Compile``/``Expand`` of its template functions.

Prometheus 2.42 compiles label matchers and ``label_replace`` regexes with Go's RE2. Python's ``re``
differs in ways rules hit (``.`` vs newline, ``$`` before a trailing newline, ``\\w`` on Unicode, POSIX
classes, ``\\p{L}``, mid-pattern flags), so we use the RE2 library itself (``google-re2``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from watchdog.golang import gostrconv


class RegexError(ValueError):
    """An invalid RE2 pattern; the message names the pattern."""


def _quiet_options() -> Any:
    """RE2 options that do not print parse errors to stderr (we raise them instead)."""
    options = re2.Options()
    options.log_errors = False
    return options


_OPTIONS = _quiet_options()


@lru_cache(maxsize=4096)
def compile_anchored(pattern: str) -> Any:
    """The RE2 program for ``^(?:pattern)$``; raises :class:`RegexError` when RE2 rejects it."""
    try:
        return re2.compile(f"^(?:{pattern})$", _OPTIONS)
    except re2.error as exc:
        raise RegexError(f"invalid regex {pattern!r}: {exc}") from exc


@lru_cache(maxsize=1024)
def compile_unanchored(pattern: str) -> Any:
    """Go's ``regexp.Compile(pattern)`` (RE2 itself, unanchored); raises :class:`RegexError` worded as Go's."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise RegexError(f"regexp: Compile({gostrconv.quote(pattern)}): error parsing regexp: {detail}") from exc


def _expand_name(text: str) -> tuple[str, int]:
    """Go ``regexp.extract``: the longest run of Unicode letters, digits (Nd) and ``_``; (name, end)."""
    end = 0
    while end < len(text) and (text[end].isalpha() or text[end].isdecimal() or text[end] == "_"):
        end += 1
    return text[:end], end


def expand(template: str, match: Any) -> str:
    """Go's ``Regexp.ExpandString`` for ``match``: ``$1``, ``${1}``, ``$name``, ``${name}``, ``$$``.

    As in Go, a name is the longest run of Unicode letters, digits and ``_`` (``$1é`` names the group
    ``1é``, which does not exist, so it expands to nothing); a number has no leading zero and is below
    1e8; a malformed reference keeps its ``$``; a group that did not take part expands to nothing.
    """
    out: list[str] = []
    i = 0
    while True:
        j = template.find("$", i)
        if j < 0:
            out.append(template[i:])
            return "".join(out)
        out.append(template[i:j])
        rest = template[j + 1 :]
        if rest.startswith("$"):
            out.append("$")
            i = j + 2
            continue
        brace = rest.startswith("{")
        name, end = _expand_name(rest[1:] if brace else rest)
        if not name or (brace and rest[1 + end:2 + end] != "}"):
            out.append("$")
            i = j + 1
            continue
        i = j + 1 + end + (2 if brace else 0)
        number = int(name) if name.isascii() and name.isdigit() and len(name) <= 9 else -1
        if name[0] == "0" and len(name) > 1:
            number = -1
        value: str | None = None
        if number >= 0:
            if number <= (match.re.groups or 0):
                value = match.group(number)
        elif name in match.re.groupindex:
            value = match.group(name)
        out.append(value or "")
