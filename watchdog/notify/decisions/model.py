"""Plain data of the notification side: transitions and the notifications built from them.

The alert itself is the rule engine's hand-off type, :class:`watchdog.model.Alert`, as the notification
side records it (see :func:`watchdog.notify.decisions.transitions.as_notified`): its ``fired_at_ms`` is its
episode's, its ``resolved_at_ms`` is set once resolved; :meth:`Alert.to_json` is what is persisted
(state table, outbox payloads) and rendered again after a restart. A :class:`Transition` is one alert
changing state (``firing`` or ``resolved``) once; its ``key`` (fingerprint + transition + fired_at) is the
idempotency key every notifier derives its own keys from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from watchdog.model import Alert, AlertState
from watchdog.runbooks.events import RunbookEvent


@dataclass(frozen=True)
class Transition:
    """One alert entering ``firing`` or ``resolved``; notified once per ``key``.

    ``kind`` is :attr:`AlertState.FIRING` or :attr:`AlertState.RESOLVED` (its value is accepted too).
    """

    kind: AlertState
    alert: Alert

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
    members: tuple[Alert, ...]
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
    def lead(self) -> Alert:
        """The member whose labels and annotations head the message (the first by fingerprint)."""
        return self.members[0]


@dataclass(frozen=True)
class EventNotification:
    """A runbook event (diagnostics, suggestion, decision, result) for the thread of its alert."""

    event: RunbookEvent
    alert: Alert | None = None

    @property
    def key(self) -> str:
        """Idempotency key: fingerprint, kind, time and a digest of the content."""
        ev = self.event
        digest = hashlib.sha256(f"{ev.title}\n{ev.text}".encode()).hexdigest()[:12]
        return f"{ev.fingerprint}:event:{ev.kind}:{ev.at_ms}:{digest}"
