"""Plain data shared by every stage: labels, samples, the staleness marker, and the alert hand-off type.

Labels are an immutable, sorted tuple of ``(name, value)`` pairs that include ``__name__``; they are
hashable, cheap to compare, and identical for identical label sets. Timestamps are integer
milliseconds since the epoch, as in Prometheus, so range boundaries are exact.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

Labels = tuple[tuple[str, str], ...]

METRIC_NAME = "__name__"

# Prometheus' staleness marker: a NaN with a distinct bit pattern (value.StaleNaN).
STALE_NAN_BITS = 0x7FF0000000000002
STALE_NAN: float = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]


def is_stale(value: float) -> bool:
    """True only for the staleness marker, not for an ordinary NaN."""
    return math.isnan(value) and struct.unpack("<Q", struct.pack("<d", value))[0] == STALE_NAN_BITS


def make_labels(mapping: Mapping[str, str] | Iterable[tuple[str, str]]) -> Labels:
    """Canonical Labels from a mapping or pairs; empty values are dropped as Prometheus does."""
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    return tuple(sorted((k, v) for k, v in items if v != ""))


def metric(name: str, **labels: str) -> Labels:
    """Labels for a metric name plus keyword labels: ``metric("up", job="vllm")``."""
    return make_labels({METRIC_NAME: name, **labels})


cached_metric = functools.lru_cache(maxsize=4096)(metric)
""":func:`metric`, memoised: for the agent's own series stored at every tick or collection (the loop's,
the collectors', the engine processes'), whose few label sets are then built once."""


def label_value(labels: Labels, name: str) -> str:
    """The value of one label, or "" when absent (Prometheus' convention)."""
    for key, value in labels:
        if key == name:
            return value
    return ""


def metric_name(labels: Labels) -> str:
    """The ``__name__`` of a label set, or "" for a nameless (computed) series."""
    return label_value(labels, METRIC_NAME)


def format_labels(labels: Labels) -> str:
    """Prometheus text form: ``name{a="1",b="2"}``."""
    name = metric_name(labels)
    rest = ",".join(
        f'{k}="{v}"'.replace("\n", "\\n") for k, v in labels if k != METRIC_NAME
    )
    return f"{name}{{{rest}}}" if rest or not name else name


class Sample(NamedTuple):
    """One value of one series at collection time (the collector does not stamp time)."""

    labels: Labels
    value: float


def now_ms(seconds: float) -> int:
    """Seconds since the epoch (float) to integer milliseconds."""
    return round(seconds * 1000)


# -- the hand-off type from the rule engine to everything downstream (runbooks, notifiers, check) -------


class AlertState(str, Enum):
    """The one alert-state vocabulary downstream of the rule engine.

    ``inactive``, ``pending`` and ``firing`` are Prometheus' states; the rule engine hands over only these
    (an ``inactive`` alert with ``resolved_at_ms`` set is a resolved one). ``resolved`` is the notification
    side's word for an alert whose firing episode it has notified as ended (its persisted state, its
    transition kind); the rule engine never produces it. Where a state is formatted into a key, a JSON
    document, an SQL parameter or a message, use ``.value`` explicitly; ``str()`` also gives the value.
    """

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"

    def __str__(self) -> str:
        """The value (``firing``), as :class:`enum.StrEnum` does on Python 3.11+."""
        return self.value


@dataclass(frozen=True)
class Alert:
    """One alert instance (one label set of one alerting rule) at one evaluation.

    ``labels`` include ``alertname`` and the rule's extra labels (never ``__name__``); ``annotations`` are
    rendered. ``fingerprint`` is a stable hex digest of the sorted labels (same labels, same fingerprint,
    across restarts). Timestamps are int milliseconds; ``fired_at_ms`` is 0 until firing and
    ``resolved_at_ms`` is 0 until resolved. ``value`` is the expression's value at the last evaluation.
    """

    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    state: AlertState
    value: float
    fingerprint: str
    active_at_ms: int
    fired_at_ms: int = 0
    resolved_at_ms: int = 0
    keep_firing_since_ms: int = 0
    last_eval_ms: int = 0
    rule_group: str = ""
    generator: str = field(default="", compare=False)  # the rule's expr, for generatorURL

    @property
    def severity(self) -> str:
        """The ``severity`` label (``info``, ``warning``, ``critical``), or "" when absent."""
        return self.labels.get("severity", "")

    @property
    def is_resolved(self) -> bool:
        """True for an alert that fired and has since resolved (``inactive`` with ``resolved_at_ms`` set, as
        the engine hands it over, or ``resolved``, as the notification side records it)."""
        return self.state is AlertState.RESOLVED or (
            self.state is AlertState.INACTIVE and self.resolved_at_ms > 0
        )

    def to_json(self) -> dict[str, Any]:
        """The persisted form: exactly the eight keys ``fingerprint``, ``name``, ``labels``, ``annotations``,
        ``value``, ``fired_at_ms``, ``resolved_at_ms``, ``generator``, in this order.

        This is stored (``notify_alerts.snapshot``, Slack message members, outbox payloads), so it never
        changes. The state and the other timestamps are not part of it: whoever stores an alert keeps
        those itself (``notify_alerts`` has a column for each) and passes them to :meth:`from_json`.
        """
        return {
            "fingerprint": self.fingerprint,
            "name": self.name,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "value": float(self.value),
            "fired_at_ms": int(self.fired_at_ms),
            "resolved_at_ms": int(self.resolved_at_ms),
            "generator": self.generator,
        }

    @classmethod
    def from_json(
        cls,
        data: Mapping[str, Any],
        state: AlertState | None = None,
        *,
        active_at_ms: int = 0,
        keep_firing_since_ms: int = 0,
    ) -> Alert:
        """Rebuild an alert stored with :meth:`to_json` (also as written before ``Alert`` was the stored type).

        ``state`` defaults to what the stored times say: ``resolved`` once ``resolved_at_ms`` is set,
        ``firing`` once ``fired_at_ms`` is, else ``pending``.
        """
        fired_at_ms = int(data.get("fired_at_ms", 0))
        resolved_at_ms = int(data.get("resolved_at_ms", 0))
        if state is None:
            state = (AlertState.RESOLVED if resolved_at_ms else
                     AlertState.FIRING if fired_at_ms else AlertState.PENDING)
        return cls(
            name=str(data["name"]),
            labels={str(k): str(v) for k, v in data.get("labels", {}).items()},
            annotations={str(k): str(v) for k, v in data.get("annotations", {}).items()},
            state=AlertState(state),
            value=float(data.get("value", 0.0)),
            fingerprint=str(data["fingerprint"]),
            active_at_ms=active_at_ms,
            fired_at_ms=fired_at_ms,
            resolved_at_ms=resolved_at_ms,
            keep_firing_since_ms=keep_firing_since_ms,
            generator=str(data.get("generator", "")),
        )
