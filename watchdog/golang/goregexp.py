"""Go's regexp on RE2: label regexes anchored as Prometheus anchors them (``^(?:pattern)$``), and the
unanchored ``regexp.Compile``/``Expand`` of its template functions.

Prometheus 2.42 compiles label matchers and ``label_replace`` regexes with Go's RE2. Python's ``re``
differs in ways rules hit (``.`` vs newline, ``$`` before a trailing newline, ``\\w`` on Unicode, POSIX
classes, ``\\p{L}``, mid-pattern flags), so we use the RE2 library itself (``google-re2``).
"""

from __future__ import annotations

import re
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


_EXPAND_NAME = re.compile(r"[A-Za-z0-9_]+")


def expand(template: str, match: Any) -> str:
    """Go's ``Regexp.Expand``: ``$1``, ``${1}``, ``$name``, ``${name}``, ``$$``."""
    out: list[str] = []
    i = 0
    groups = match.re.groupindex
    while i < len(template):
        j = template.find("$", i)
        if j < 0:
            out.append(template[i:])
            break
        out.append(template[i:j])
        rest = template[j + 1:]
        if rest.startswith("$"):
            out.append("$")
            i = j + 2
            continue
        name = ""
        consumed = 0
        if rest.startswith("{"):
            close = rest.find("}")
            inner = rest[1:close] if close > 0 else ""
            if close > 0 and _EXPAND_NAME.fullmatch(inner):
                name, consumed = inner, close + 1
        else:
            found = _EXPAND_NAME.match(rest)
            if found:
                name, consumed = found.group(0), found.end()
        if not name:
            out.append("$")
            i = j + 1
            continue
        i = j + 1 + consumed
        value: str | None = None
        if name.isdigit():
            index = int(name)
            if index <= (match.re.groups or 0):
                value = match.group(index)
        elif name in groups:
            value = match.group(name)
        out.append(value or "")
    return "".join(out)
