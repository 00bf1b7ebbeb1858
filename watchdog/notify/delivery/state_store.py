"""Persisted alert state of the notification side, in the agent's state database.

Table ``notify_alerts`` (component ``notify.state``): per alert fingerprint, its notification state
(pending / firing / resolved), pending since, firing since, keep-firing since, resolved at, the snapshot
last notified and when it was last sent. This is what makes a restart reconcile instead of re-announce.
Channels keep their own rows in tables of their own (Slack: :mod:`watchdog.notify.channels.slack.store`).

The rule engine's own state is persisted by :mod:`watchdog.rules.state_store`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState

SCHEMA_VERSION = 1
DDL = (
    """CREATE TABLE IF NOT EXISTS notify_alerts (
        fingerprint TEXT PRIMARY KEY,
        alertname TEXT NOT NULL,
        state TEXT NOT NULL,
        snapshot TEXT NOT NULL,
        active_at_ms INTEGER NOT NULL DEFAULT 0,
        fired_at_ms INTEGER NOT NULL DEFAULT 0,
        keep_firing_since_ms INTEGER NOT NULL DEFAULT 0,
        resolved_at_ms INTEGER NOT NULL DEFAULT 0,
        last_sent_ms INTEGER NOT NULL DEFAULT 0,
        updated_ms INTEGER NOT NULL DEFAULT 0)""",
)


class AlertStateStore:
    """Reads and writes the notification state tables; writes take an open cursor (one transaction)."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema("notify.state", SCHEMA_VERSION, DDL)

    # -- alert notification state -------------------------------------------------------------------
    def load_alerts(self) -> dict[str, Alert]:
        """Every persisted alert state (the alert as last recorded), by fingerprint."""
        rows = self.db.query("SELECT * FROM notify_alerts")
        return {row["fingerprint"]: _known_from_row(row) for row in rows}

    @staticmethod
    def upsert_alert(cur: sqlite3.Cursor, alert: Alert, now_ms: int) -> None:
        """Insert or replace one alert's state (keeps ``last_sent_ms``); the alert's state and times go to
        their columns, :meth:`Alert.to_json` to ``snapshot``."""
        cur.execute(
            """INSERT INTO notify_alerts(fingerprint, alertname, state, snapshot, active_at_ms, fired_at_ms,
                   keep_firing_since_ms, resolved_at_ms, updated_ms)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT(fingerprint) DO UPDATE SET alertname=excluded.alertname, state=excluded.state,
                   snapshot=excluded.snapshot, active_at_ms=excluded.active_at_ms,
                   fired_at_ms=excluded.fired_at_ms, keep_firing_since_ms=excluded.keep_firing_since_ms,
                   resolved_at_ms=excluded.resolved_at_ms, updated_ms=excluded.updated_ms""",
            (
                alert.fingerprint,
                alert.name,
                alert.state.value,
                json.dumps(alert.to_json()),
                alert.active_at_ms,
                alert.fired_at_ms,
                alert.keep_firing_since_ms,
                alert.resolved_at_ms,
                now_ms,
            ),
        )

    @staticmethod
    def delete_alert(cur: sqlite3.Cursor, fingerprint: str) -> None:
        """Forget one alert (a pending alert that went away)."""
        cur.execute("DELETE FROM notify_alerts WHERE fingerprint = ?", (fingerprint,))

    @staticmethod
    def mark_sent(cur: sqlite3.Cursor, fingerprints: list[str], now_ms: int) -> None:
        """Record that a notification about these alerts was enqueued (``last_sent_ms``)."""
        cur.executemany(
            "UPDATE notify_alerts SET last_sent_ms = ? WHERE fingerprint = ?",
            [(now_ms, f) for f in fingerprints],
        )

    def gc(self, older_than_ms: int) -> int:
        """Delete resolved alert states last updated before ``older_than_ms``; returns how many."""
        with self.db.transaction() as cur:
            cur.execute(
                "DELETE FROM notify_alerts WHERE state = ? AND updated_ms < ?",
                (AlertState.RESOLVED.value, older_than_ms),
            )
            return cur.rowcount


def _known_from_row(row: sqlite3.Row) -> Alert:
    """The row's columns hold the state and times (``fired_at_ms`` and ``resolved_at_ms`` are also in the
    snapshot, always equal; the columns are what the idempotency keys were derived from)."""
    alert = Alert.from_json(json.loads(row["snapshot"]), AlertState(row["state"]),
                            active_at_ms=row["active_at_ms"], keep_firing_since_ms=row["keep_firing_since_ms"])
    return replace(alert, fired_at_ms=row["fired_at_ms"], resolved_at_ms=row["resolved_at_ms"])
