"""The notifier contract: plan outbox rows (pure, in the tick), deliver them (I/O, in a delivery thread).

A notifier is one module with one class of this shape, registered by its name (``log``, ``slack``,
``alertmanager``); the name is the same in config, outbox rows, logs and self-metrics.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from watchdog.model import Alert
from watchdog.notify.decisions.model import EventNotification, GroupNotification
from watchdog.notify.delivery.outbox import OutboxItem, OutboxRow


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


@dataclass(frozen=True)
class PlanContext:
    """What a notifier may consult while planning one tick. ``cur`` is the tick's transaction: rows a
    notifier keeps of its own are written through it, so they commit with the tick's outbox rows."""

    cur: sqlite3.Cursor
    now_ms: int
    node: str
    alerts: Mapping[str, Alert]  # the notification side's alerts as recorded after this tick, by fingerprint
    causes: Mapping[str, str] = field(default_factory=dict)  # symptom fingerprint -> its incident's cause
    resolved: frozenset[str] = frozenset()  # fingerprints that resolved this tick, muted ones included


class Notifier(Protocol):
    """One delivery channel. ``plan`` is pure apart from ``ctx.cur``; ``deliver`` does the I/O."""

    name: str
    batch_size: int

    def plan(
        self, groups: list[GroupNotification], events: list[EventNotification], ctx: PlanContext
    ) -> list[OutboxItem]:
        """Outbox rows for one tick's notifications (rows of the notifier's own go through ``ctx.cur``)."""
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
