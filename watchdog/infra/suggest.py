""""Did you mean" for every command that takes a name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to ``name`` (case-insensitive), or None when nothing is close."""
    pool = {c.lower(): c for c in candidates}
    match = difflib.get_close_matches(name.lower(), list(pool), n=1, cutoff=0.6)
    return pool[match[0]] if match else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``" (did you mean X?)"`` for the nearest candidate, or "" when none is close."""
    match = closest(name, candidates)
    return f" (did you mean {match}?)" if match else ""
