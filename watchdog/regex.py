"""Label regexes with Prometheus' semantics: Google RE2, fully anchored (``^(?:pattern)$``).

Prometheus 2.42 compiles label matchers and ``label_replace`` regexes with Go's RE2. Python's ``re``
differs in ways rules hit (``.`` vs newline, ``$`` before a trailing newline, ``\\w`` on Unicode, POSIX
classes, ``\\p{L}``, mid-pattern flags), so we use the RE2 library itself (``google-re2``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2


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

