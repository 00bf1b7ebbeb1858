"""Plain data of the notification side: alert snapshots, transitions and the notifications built from them.

An :class:`AlertSnapshot` is what a notifier needs to render one alert, JSON-serialisable so that it can be
persisted (state table, outbox payloads) and rendered again after a restart. A :class:`Transition` is one
alert changing state (``firing`` or ``resolved``) once; its ``key`` (fingerprint + transition + fired_at)
is the idempotency key every notifier derives its own keys from.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

from watchdog.model import Alert, AlertState
from watchdog.runbooks.events import RunbookEvent


@dataclass(frozen=True)
class AlertSnapshot:
    """One alert as notifiers render it; ``resolved_at_ms`` is 0 while it fires."""

    fingerprint: str
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float
    fired_at_ms: int
    resolved_at_ms: int = 0
    generator: str = ""

    @property
    def severity(self) -> str:
        """The ``severity`` label, or "" when absent."""
        return self.labels.get("severity", "")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (inverse of :meth:`from_json`)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AlertSnapshot:
        """Rebuild a snapshot persisted with :meth:`to_json`."""
        return cls(
            fingerprint=str(data["fingerprint"]),
            name=str(data["name"]),
            labels={str(k): str(v) for k, v in data.get("labels", {}).items()},
            annotations={str(k): str(v) for k, v in data.get("annotations", {}).items()},
            value=float(data.get("value", 0.0)),
            fired_at_ms=int(data.get("fired_at_ms", 0)),
            resolved_at_ms=int(data.get("resolved_at_ms", 0)),
            generator=str(data.get("generator", "")),
        )

    @classmethod
    def from_alert(
        cls, alert: Alert, fired_at_ms: int | None = None, resolved_at_ms: int = 0
    ) -> AlertSnapshot:
        """Snapshot of a rule-engine alert; ``fired_at_ms`` overrides the alert's own when given."""
        return cls(
            fingerprint=alert.fingerprint,
            name=alert.name,
            labels=dict(alert.labels),
            annotations=dict(alert.annotations),
            value=float(alert.value),
            fired_at_ms=alert.fired_at_ms if fired_at_ms is None else fired_at_ms,
            resolved_at_ms=resolved_at_ms,
            generator=alert.generator,
        )


@dataclass(frozen=True)
class Transition:
    """One alert entering ``firing`` or ``resolved``; notified once per ``key``.

    ``kind`` is :attr:`AlertState.FIRING` or :attr:`AlertState.RESOLVED` (its value is accepted too).
    """

    kind: AlertState
    alert: AlertSnapshot

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AlertState(self.kind))

    @property
    def key(self) -> str:
        """Idempotency key: ``<fingerprint>:<kind>:<fired_at_ms>``."""
        return f"{self.alert.fingerprint}:{self.kind.value}:{self.alert.fired_at_ms}"


@dataclass(frozen=True)
class GroupNotification:
    """Alerts of one cause that made the same transition in the same tick: one message listing members."""

    kind: AlertState  # FIRING or RESOLVED (its value is accepted too)
    members: tuple[AlertSnapshot, ...]
    at_ms: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AlertState(self.kind))

    @property
    def key(self) -> str:
        """Idempotency key of the whole group (stable digest of the members' transition keys)."""
        keys = sorted(Transition(self.kind, m).key for m in self.members)
        if len(keys) == 1:
            return keys[0]
        digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:20]
        return f"group:{self.kind.value}:{digest}"

    @property
    def lead(self) -> AlertSnapshot:
        """The member whose labels and annotations head the message (the first by fingerprint)."""
        return self.members[0]


@dataclass(frozen=True)
class EventNotification:
    """A runbook event (diagnostics, suggestion, decision, result) for the thread of its alert."""

    event: RunbookEvent
    alert: AlertSnapshot | None = None
    step: str = field(default="")

    @property
    def key(self) -> str:
        """Idempotency key: fingerprint, kind, time and a digest of the content."""
        ev = self.event
        digest = hashlib.sha256(f"{ev.title}\n{ev.text}".encode()).hexdigest()[:12]
        return f"{ev.fingerprint}:event:{ev.kind}:{ev.at_ms}:{digest}"
