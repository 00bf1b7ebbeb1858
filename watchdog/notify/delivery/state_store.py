"""Persisted alert state of the notification side, in the agent's state database.

Tables (component ``notify.state``):

- ``notify_alerts``: per alert fingerprint, its notification state (pending / firing / resolved), pending
  since, firing since, keep-firing since, resolved at, the snapshot last notified, the Slack message it
  belongs to and when it was last sent. This is what makes a restart reconcile instead of re-announce.
- ``notify_slack_messages``: one row per Slack message (a group of alerts): channel, ``ts`` once posted,
  the members listed, so a resolve can update the message and reply in its thread.

The rule engine's own state is persisted by :mod:`watchdog.rules.state_store`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState
from watchdog.notify.decisions.transitions import KnownAlert

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
        slack_message_key TEXT NOT NULL DEFAULT '',
        last_sent_ms INTEGER NOT NULL DEFAULT 0,
        updated_ms INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS notify_slack_messages (
        message_key TEXT PRIMARY KEY,
        channel TEXT NOT NULL DEFAULT '',
        ts TEXT NOT NULL DEFAULT '',
        members TEXT NOT NULL,
        created_ms INTEGER NOT NULL)""",
)


class AlertStateStore:
    """Reads and writes the notification state tables; writes take an open cursor (one transaction)."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema("notify.state", SCHEMA_VERSION, DDL)

    # -- alert notification state -------------------------------------------------------------------
    def load_alerts(self) -> dict[str, KnownAlert]:
        """Every persisted alert state, by fingerprint."""
        rows = self.db.query("SELECT * FROM notify_alerts")
        return {row["fingerprint"]: _known_from_row(row) for row in rows}

    @staticmethod
    def upsert_alert(cur: sqlite3.Cursor, known: KnownAlert, now_ms: int) -> None:
        """Insert or replace one alert's state (keeps ``last_sent_ms``); the alert's state and times go to
        their columns, :meth:`Alert.to_json` to ``snapshot``."""
        alert = known.alert
        cur.execute(
            """INSERT INTO notify_alerts(fingerprint, alertname, state, snapshot, active_at_ms, fired_at_ms,
                   keep_firing_since_ms, resolved_at_ms, slack_message_key, updated_ms)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT(fingerprint) DO UPDATE SET alertname=excluded.alertname, state=excluded.state,
                   snapshot=excluded.snapshot, active_at_ms=excluded.active_at_ms,
                   fired_at_ms=excluded.fired_at_ms, keep_firing_since_ms=excluded.keep_firing_since_ms,
                   resolved_at_ms=excluded.resolved_at_ms, slack_message_key=excluded.slack_message_key,
                   updated_ms=excluded.updated_ms""",
            (
                alert.fingerprint,
                alert.name,
                alert.state.value,
                json.dumps(alert.to_json()),
                alert.active_at_ms,
                alert.fired_at_ms,
                alert.keep_firing_since_ms,
                alert.resolved_at_ms,
                known.slack_message_key,
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
        """Delete resolved alert states and Slack messages older than ``older_than_ms``; returns rows gone."""
        with self.db.transaction() as cur:
            cur.execute(
                "DELETE FROM notify_alerts WHERE state = ? AND updated_ms < ?",
                (AlertState.RESOLVED.value, older_than_ms),
            )
            gone = cur.rowcount
            cur.execute(
                """DELETE FROM notify_slack_messages WHERE created_ms < ? AND message_key NOT IN
                   (SELECT slack_message_key FROM notify_alerts)""",
                (older_than_ms,),
            )
            return gone + cur.rowcount

    # -- Slack messages -----------------------------------------------------------------------------
    @staticmethod
    def add_slack_message(
        cur: sqlite3.Cursor, message_key: str, members: list[Alert], now_ms: int
    ) -> None:
        """Remember a Slack message about to be posted (``ts`` is filled in when it is)."""
        cur.execute(
            "INSERT OR IGNORE INTO notify_slack_messages(message_key, members, created_ms) VALUES (?, ?, ?)",
            (message_key, json.dumps([m.to_json() for m in members]), now_ms),
        )

    @staticmethod
    def set_slack_members(cur: sqlite3.Cursor, message_key: str, members: list[Alert]) -> None:
        """Change whom a message is about (an incident's cause takes over its symptoms' message)."""
        cur.execute("UPDATE notify_slack_messages SET members = ? WHERE message_key = ?",
                    (json.dumps([m.to_json() for m in members]), message_key))

    @staticmethod
    def set_slack_ts(cur: sqlite3.Cursor, message_key: str, channel: str, ts: str) -> None:
        """Store the posted message's channel id and ``ts``."""
        cur.execute(
            "UPDATE notify_slack_messages SET channel = ?, ts = ? WHERE message_key = ?",
            (channel, ts, message_key),
        )

    def slack_message(self, message_key: str) -> tuple[str, str, list[Alert]] | None:
        """(channel, ts, members) of a message; ts is "" until posted; None if unknown."""
        rows = self.db.query("SELECT * FROM notify_slack_messages WHERE message_key = ?", (message_key,))
        if not rows:
            return None
        row = rows[0]
        members = [Alert.from_json(m) for m in json.loads(row["members"])]
        return row["channel"], row["ts"], members

    def known_slack_channel(self) -> str:
        """A channel id learnt from an earlier post ("" if none yet); Slack's history API needs ids."""
        rows = self.db.query(
            "SELECT channel FROM notify_slack_messages WHERE channel != '' ORDER BY created_ms DESC LIMIT 1"
        )
        return str(rows[0]["channel"]) if rows else ""


def _known_from_row(row: sqlite3.Row) -> KnownAlert:
    """The row's columns hold the state and times (``fired_at_ms`` and ``resolved_at_ms`` are also in the
    snapshot, always equal; the columns are what the idempotency keys were derived from)."""
    alert = Alert.from_json(json.loads(row["snapshot"]), AlertState(row["state"]),
                            active_at_ms=row["active_at_ms"], keep_firing_since_ms=row["keep_firing_since_ms"])
    alert = replace(alert, fired_at_ms=row["fired_at_ms"], resolved_at_ms=row["resolved_at_ms"])
    return KnownAlert(alert, row["slack_message_key"])
