"""Slack's own rows in the state database: its messages, and the message each alert is listed in.

Tables (component ``notify.slack``):

- ``notify_slack_messages``: one row per Slack message (a group of alerts, or an incident): channel,
  ``ts`` once posted, the members listed (each :meth:`Alert.to_json`), so a resolve can update the message
  and reply in its thread.
- ``notify_slack_alerts``: per alert fingerprint, the key of the message it is listed in and the alert's
  ``active_at_ms`` when it was listed.

An alert's listing holds while the notification side still knows the alert and the alert has not begun a
new pending episode since it was listed (it is pending with another ``active_at_ms``): a new episode gets a
new message. :class:`AlertMessages` applies that rule to one tick's planning, and
:meth:`SlackStore.save_listing` writes what the tick changed and forgets listings that no longer hold.

Migration (component version 1, run once, in the transaction that creates these tables): a database
written before Slack kept its own keys holds them in ``notify_alerts.slack_message_key``. Every non-empty
key is copied to ``notify_slack_alerts`` with the row's ``active_at_ms`` (so each listing holds exactly
when the old column's key would have been read), then the column is dropped (emptied where SQLite is
older than 3.35 and cannot drop one: the state store never names it).
``notify_slack_messages`` keeps its shape and rows. Nothing else changes; a second start finds version 1
recorded and runs nothing.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping

from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState

COMPONENT = "notify.slack"
SCHEMA_VERSION = 1
DDL = (
    """CREATE TABLE IF NOT EXISTS notify_slack_messages (
        message_key TEXT PRIMARY KEY,
        channel TEXT NOT NULL DEFAULT '',
        ts TEXT NOT NULL DEFAULT '',
        members TEXT NOT NULL,
        created_ms INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS notify_slack_alerts (
        fingerprint TEXT PRIMARY KEY,
        message_key TEXT NOT NULL,
        active_at_ms INTEGER NOT NULL DEFAULT 0)""",
)
LEGACY_COLUMN = "slack_message_key"


def migrate_legacy_keys(cur: sqlite3.Cursor) -> int:
    """Move ``notify_alerts.slack_message_key`` into ``notify_slack_alerts`` (see the module docstring);
    returns how many listings moved. Idempotent: without the column it does nothing."""
    columns = {row[1] for row in cur.execute("PRAGMA table_info(notify_alerts)").fetchall()}
    if LEGACY_COLUMN not in columns:
        return 0
    cur.execute(
        f"""INSERT OR IGNORE INTO notify_slack_alerts(fingerprint, message_key, active_at_ms)
            SELECT fingerprint, {LEGACY_COLUMN}, active_at_ms FROM notify_alerts WHERE {LEGACY_COLUMN} != ''"""
    )
    moved = cur.rowcount
    if sqlite3.sqlite_version_info >= (3, 35, 0):
        cur.execute(f"ALTER TABLE notify_alerts DROP COLUMN {LEGACY_COLUMN}")
    else:  # no DROP COLUMN before SQLite 3.35 (RHEL 8 has 3.26): the column stays, emptied, read by nothing
        cur.execute(f"UPDATE notify_alerts SET {LEGACY_COLUMN} = ''")
    return moved


def _holds(known: Alert | None, listed_active_at_ms: int) -> bool:
    """True while a listing made when the alert was active since ``listed_active_at_ms`` still holds."""
    if known is None:
        return False
    return known.state is not AlertState.PENDING or known.active_at_ms == listed_active_at_ms


class AlertMessages:
    """The message each alert is listed in, for one tick's planning: the stored listings that hold (see
    the module docstring) plus what this tick lists (:meth:`list_in`)."""

    def __init__(self, stored: Mapping[str, tuple[str, int]], alerts: Mapping[str, Alert]) -> None:
        self.alerts = alerts
        self.stale = {fp for fp, (_, active_at) in stored.items() if not _holds(alerts.get(fp), active_at)}
        self._keys = {fp: key for fp, (key, _) in stored.items() if fp not in self.stale}
        self.listed: set[str] = set()

    def of(self, fingerprint: str) -> str:
        """The message an alert is listed in, "" when none."""
        return self._keys.get(fingerprint, "")

    def list_in(self, fingerprint: str, message_key: str) -> None:
        """List an alert in a message (saved with the tick for alerts the notification side knows)."""
        self._keys[fingerprint] = message_key
        self.listed.add(fingerprint)


class SlackStore:
    """Reads and writes Slack's tables; writes during planning take the tick's cursor (one transaction)."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema(COMPONENT, SCHEMA_VERSION, DDL, migrate=migrate_legacy_keys)

    # -- which message each alert is listed in ------------------------------------------------------
    @staticmethod
    def listing(cur: sqlite3.Cursor, alerts: Mapping[str, Alert]) -> AlertMessages:
        """The stored listings, for planning a tick in which the notification side knows ``alerts``."""
        rows = cur.execute("SELECT fingerprint, message_key, active_at_ms FROM notify_slack_alerts").fetchall()
        return AlertMessages({row[0]: (row[1], row[2]) for row in rows}, alerts)

    @staticmethod
    def save_listing(cur: sqlite3.Cursor, messages: AlertMessages) -> None:
        """Write the tick's listings of known alerts and forget those that no longer hold."""
        kept = {fp for fp in messages.listed if fp in messages.alerts}
        cur.executemany("DELETE FROM notify_slack_alerts WHERE fingerprint = ?",
                        [(fp,) for fp in sorted(messages.stale - kept)])
        cur.executemany(
            """INSERT INTO notify_slack_alerts(fingerprint, message_key, active_at_ms) VALUES (?, ?, ?)
               ON CONFLICT(fingerprint) DO UPDATE SET message_key = excluded.message_key,
                   active_at_ms = excluded.active_at_ms""",
            [(fp, messages.of(fp), messages.alerts[fp].active_at_ms) for fp in sorted(kept)],
        )

    # -- messages -----------------------------------------------------------------------------------
    @staticmethod
    def add_message(cur: sqlite3.Cursor, message_key: str, members: list[Alert], now_ms: int) -> None:
        """Remember a message about to be posted (``ts`` is filled in when it is)."""
        cur.execute(
            "INSERT OR IGNORE INTO notify_slack_messages(message_key, members, created_ms) VALUES (?, ?, ?)",
            (message_key, json.dumps([m.to_json() for m in members]), now_ms),
        )

    @staticmethod
    def set_members(cur: sqlite3.Cursor, message_key: str, members: list[Alert]) -> None:
        """Change whom a message is about (an incident's cause takes over its symptoms' message)."""
        cur.execute("UPDATE notify_slack_messages SET members = ? WHERE message_key = ?",
                    (json.dumps([m.to_json() for m in members]), message_key))

    @staticmethod
    def set_ts(cur: sqlite3.Cursor, message_key: str, channel: str, ts: str) -> None:
        """Store the posted message's channel id and ``ts``."""
        cur.execute(
            "UPDATE notify_slack_messages SET channel = ?, ts = ? WHERE message_key = ?",
            (channel, ts, message_key),
        )

    def message(self, message_key: str) -> tuple[str, str, list[Alert]] | None:
        """(channel, ts, members) of a message; ts is "" until posted; None if unknown. A member's state
        follows from its times (the stored form has no state)."""
        rows = self.db.query("SELECT * FROM notify_slack_messages WHERE message_key = ?", (message_key,))
        if not rows:
            return None
        row = rows[0]
        members = [Alert.from_json(m) for m in json.loads(row["members"])]
        return row["channel"], row["ts"], members

    def known_channel(self) -> str:
        """A channel id learnt from an earlier post ("" if none yet); Slack's history API needs ids."""
        rows = self.db.query(
            "SELECT channel FROM notify_slack_messages WHERE channel != '' ORDER BY created_ms DESC LIMIT 1"
        )
        return str(rows[0]["channel"]) if rows else ""

    @staticmethod
    def gc(cur: sqlite3.Cursor, older_than_ms: int) -> int:
        """Forget messages created before ``older_than_ms`` that no alert is listed in; returns how many."""
        cur.execute(
            """DELETE FROM notify_slack_messages WHERE created_ms < ? AND message_key NOT IN
               (SELECT message_key FROM notify_slack_alerts)""",
            (older_than_ms,),
        )
        return cur.rowcount
