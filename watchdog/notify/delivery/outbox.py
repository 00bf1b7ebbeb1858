"""The durable outbox: every notification is a row in the state database before anything is sent.

Contract (table ``notify_outbox``, component ``notify.outbox``):

- :meth:`Outbox.enqueue` inserts with ``INSERT OR IGNORE`` on ``(notifier, idem_key)``, inside the
  caller's transaction, so one tick's rows and state changes commit together and a repeated enqueue of
  the same key is a no-op.
- Status ``pending``: certainly not delivered. ``sending``: an attempt started and its outcome is unknown
  (the process died mid-send, or the request timed out): the notifier must *verify* before resending.
  ``done``: delivered (``result`` holds e.g. the Slack ``ts``). ``failed``: rejected for good (a malformed
  message), counted and kept for inspection.
- Rows of one notifier are delivered in id order (a Slack thread reply after its parent).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from watchdog.infra.state import StateDB

SCHEMA_VERSION = 1
DDL = (
    """CREATE TABLE IF NOT EXISTS notify_outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        notifier TEXT NOT NULL,
        idem_key TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        result TEXT NOT NULL DEFAULT '',
        last_error TEXT NOT NULL DEFAULT '',
        UNIQUE (notifier, idem_key))""",
    "CREATE INDEX IF NOT EXISTS notify_outbox_due ON notify_outbox(notifier, status, id)",
)

PENDING, SENDING, DONE, FAILED = "pending", "sending", "done", "failed"


@dataclass(frozen=True)
class OutboxItem:
    """What a notifier plans to send: an idempotency key, a kind and a JSON payload."""

    idem_key: str
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class OutboxRow:
    """One stored outbox row."""

    id: int
    notifier: str
    idem_key: str
    kind: str
    payload: dict[str, Any]
    status: str
    attempts: int
    created_ms: int
    result: str

    @property
    def uncertain(self) -> bool:
        """True when an earlier attempt may have been delivered (verify before resending)."""
        return self.status == SENDING


class Outbox:
    """Accessor for the outbox table (thread-safe through :class:`StateDB`)."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema("notify.outbox", SCHEMA_VERSION, DDL)

    @staticmethod
    def enqueue(cur: sqlite3.Cursor, notifier: str, item: OutboxItem, now_ms: int) -> bool:
        """Add a row in the caller's transaction; False when the key was already there."""
        cur.execute(
            """INSERT OR IGNORE INTO notify_outbox(notifier, idem_key, kind, payload, created_ms, updated_ms)
               VALUES (?, ?, ?, ?, ?, ?)""",
            (notifier, item.idem_key, item.kind, json.dumps(item.payload, sort_keys=True), now_ms, now_ms),
        )
        return cur.rowcount > 0

    def due(self, notifier: str, limit: int = 1) -> list[OutboxRow]:
        """The oldest open rows of one notifier, in id order."""
        rows = self.db.query(
            "SELECT * FROM notify_outbox WHERE notifier = ? AND status IN ('pending', 'sending') "
            "ORDER BY id LIMIT ?",
            (notifier, limit),
        )
        return [_row(r) for r in rows]

    def mark_sending(self, row_ids: list[int], now_ms: int) -> None:
        """Record that an attempt starts (committed before any byte goes out)."""
        with self.db.transaction() as cur:
            cur.executemany(
                "UPDATE notify_outbox SET status = 'sending', attempts = attempts + 1, updated_ms = ? "
                "WHERE id = ?",
                [(now_ms, i) for i in row_ids],
            )

    def mark_done(
        self, row_id: int, now_ms: int, result: str = "", cur: sqlite3.Cursor | None = None
    ) -> None:
        """The row was delivered; pass ``cur`` to commit together with other writes."""
        sql = (
            "UPDATE notify_outbox SET status = 'done', result = ?, last_error = '', updated_ms = ? "
            "WHERE id = ?"
        )
        if cur is not None:
            cur.execute(sql, (result, now_ms, row_id))
        else:
            self.db.execute(sql, (result, now_ms, row_id))

    def mark_failed(self, row_id: int, now_ms: int, error: str) -> None:
        """The row was rejected for good (never retried)."""
        self.db.execute(
            "UPDATE notify_outbox SET status = 'failed', last_error = ?, updated_ms = ? WHERE id = ?",
            (error[:2000], now_ms, row_id),
        )

    def mark_retry(
        self, row_id: int, now_ms: int, error: str, uncertain: bool, result: str | None = None
    ) -> None:
        """The attempt failed transiently; ``uncertain`` keeps it ``sending`` (verify first next time)."""
        status = SENDING if uncertain else PENDING
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE notify_outbox SET status = ?, last_error = ?, updated_ms = ? WHERE id = ?",
                (status, error[:2000], now_ms, row_id),
            )
            if result is not None:
                cur.execute("UPDATE notify_outbox SET result = ? WHERE id = ?", (result, row_id))

    def pending_counts(self) -> dict[str, int]:
        """Open (pending or sending) rows per notifier."""
        rows = self.db.query(
            "SELECT notifier, COUNT(*) AS n FROM notify_outbox WHERE status IN ('pending', 'sending') "
            "GROUP BY notifier"
        )
        return {r["notifier"]: int(r["n"]) for r in rows}

    def rows(self, notifier: str | None = None) -> list[OutboxRow]:
        """Every row (of one notifier), in id order: for tests and inspection."""
        if notifier is None:
            found = self.db.query("SELECT * FROM notify_outbox ORDER BY id")
        else:
            found = self.db.query("SELECT * FROM notify_outbox WHERE notifier = ? ORDER BY id", (notifier,))
        return [_row(r) for r in found]

    def gc(self, older_than_ms: int) -> int:
        """Delete done and failed rows last touched before ``older_than_ms``; returns how many."""
        with self.db.transaction() as cur:
            cur.execute(
                "DELETE FROM notify_outbox WHERE status IN ('done', 'failed') AND updated_ms < ?",
                (older_than_ms,),
            )
            return cur.rowcount


def _row(r: sqlite3.Row) -> OutboxRow:
    return OutboxRow(
        id=r["id"],
        notifier=r["notifier"],
        idem_key=r["idem_key"],
        kind=r["kind"],
        payload=json.loads(r["payload"]),
        status=r["status"],
        attempts=r["attempts"],
        created_ms=r["created_ms"],
        result=r["result"],
    )
