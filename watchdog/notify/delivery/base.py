"""The notifier contract: plan outbox rows (pure, in the tick), deliver them (I/O, in a delivery thread).

A notifier is one module with one class of this shape, registered by its name (``log``, ``slack``,
``alertmanager``); the name is the same in config, outbox rows, logs and self-metrics.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from watchdog.notify.decisions.model import EventNotification, GroupNotification
from watchdog.notify.decisions.transitions import KnownAlert
from watchdog.notify.delivery.outbox import OutboxItem, OutboxRow
from watchdog.notify.delivery.state_store import AlertStateStore


class DeliveryError(Exception):
    """A failed delivery attempt; the message must already be free of secrets.

    ``permanent``: the payload itself was rejected (never retried; counted as ``failed``).
    ``uncertain``: the request may have been acted on (timeout, reset): verify before resending.
    ``retry_after_seconds``: the server asked to wait at least this long (HTTP 429 ``Retry-After``).
    ``results``: per-row partial results to keep (e.g. Alertmanager URLs already accepted).
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        uncertain: bool = False,
        retry_after_seconds: float = 0.0,
        results: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.uncertain = uncertain
        self.retry_after_seconds = retry_after_seconds
        self.results = dict(results or {})


@dataclass
class Delivered:
    """A row delivered: ``result`` is stored on the row; ``on_commit`` runs in the same transaction."""

    row_id: int
    result: str = ""
    on_commit: Callable[[sqlite3.Cursor], None] | None = None


@dataclass
class PlanContext:
    """What a notifier may consult while planning one tick (inside the tick's transaction)."""

    cur: sqlite3.Cursor
    store: AlertStateStore
    now_ms: int
    node: str
    alerts: dict[str, KnownAlert]  # this tick's alert states by fingerprint (writable: message keys)
    message_keys: dict[str, str] = field(default_factory=dict)  # fingerprint -> Slack message key
    causes: dict[str, str] = field(default_factory=dict)  # symptom fingerprint -> its incident's cause
    resolved: frozenset[str] = frozenset()  # fingerprints that resolved this tick, muted ones included

    def set_message_key(self, fingerprint: str, message_key: str) -> None:
        """Remember which Slack message an alert belongs to (persisted with its state)."""
        self.message_keys[fingerprint] = message_key

    def message_key_of(self, fingerprint: str) -> str:
        """The Slack message of an alert, "" when none."""
        if fingerprint in self.message_keys:
            return self.message_keys[fingerprint]
        known = self.alerts.get(fingerprint)
        return known.slack_message_key if known else ""


class Notifier(Protocol):
    """One delivery channel. ``plan`` is pure apart from ``ctx.cur``; ``deliver`` does the I/O."""

    name: str
    batch_size: int

    def plan(
        self, groups: list[GroupNotification], events: list[EventNotification], ctx: PlanContext
    ) -> list[OutboxItem]:
        """Outbox rows for one tick's notifications (may record Slack message rows through ``ctx``)."""
        ...

    def verify(self, row: OutboxRow) -> Delivered | None:
        """For an uncertain row: the delivery already made, found at the destination, or None."""
        ...

    def deliver(self, rows: list[OutboxRow]) -> list[Delivered]:
        """Send rows (at most ``batch_size``); raises :class:`DeliveryError` when the attempt failed."""
        ...

    def periodic(self, now_ms: int) -> int | None:
        """Periodic work (Alertmanager re-sends firing alerts), called by the delivery thread on each pass;
        returns when it is next due (clock ms, the thread sleeps until then at most), None when never."""
        ...

    def close(self) -> None:
        """Release connections (the delivery thread has stopped)."""
        ...
