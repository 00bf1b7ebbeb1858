"""Label-set helpers for the evaluator (pure functions over :data:`watchdog.model.Labels`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import lru_cache

from watchdog.model import METRIC_NAME, Labels

LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


MEMO_SIZE = 1 << 16
"""Entries of each per-label-set memo (label sets repeat tick after tick; churn only evicts)."""


@lru_cache(maxsize=MEMO_SIZE)
def drop_name(labels: Labels) -> Labels:
    """The label set without ``__name__`` (memoised: the same series are read every evaluation)."""
    for key, _ in labels:
        if key == METRIC_NAME:
            return tuple(pair for pair in labels if pair[0] != METRIC_NAME)
    return labels


def keep_only(labels: Labels, names: Iterable[str]) -> Labels:
    """Only the labels named in ``names``."""
    wanted = set(names)
    return tuple(pair for pair in labels if pair[0] in wanted)


def without(labels: Labels, names: Iterable[str]) -> Labels:
    """The labels not named in ``names``."""
    unwanted = set(names)
    return tuple(pair for pair in labels if pair[0] not in unwanted)


def with_label(labels: Labels, name: str, value: str) -> Labels:
    """``labels`` with ``name`` set to ``value`` (removed when ``value`` is empty)."""
    rest = [pair for pair in labels if pair[0] != name]
    if value:
        rest.append((name, value))
        rest.sort()
    return tuple(rest)


def go_quote(value: str) -> str:
    """Go ``strconv.Quote`` for the common cases (JSON escaping agrees for printable ASCII)."""
    return json.dumps(value, ensure_ascii=False)


def go_string(labels: Labels) -> str:
    """Go ``labels.Labels.String()``: ``{__name__="up", job="x"}``."""
    return "{" + ", ".join(f"{name}={go_quote(value)}" for name, value in labels) + "}"


def find_duplicate(labels_list: Iterable[Labels]) -> Labels | None:
    """The first label set that occurs twice, or None."""
    seen: set[Labels] = set()
    for labels in labels_list:
        if labels in seen:
            return labels
        seen.add(labels)
    return None
