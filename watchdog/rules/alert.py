"""The alert value handed from the rule engine to notifiers and runbooks: plain, immutable data."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class AlertState(str, Enum):
    """Prometheus' alert states. ``inactive`` alerts with ``resolved_at_ms`` set are resolved ones."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"


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
        """True for an alert that fired and has since resolved."""
        return self.state is AlertState.INACTIVE and self.resolved_at_ms > 0
