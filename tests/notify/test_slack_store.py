"""Slack's own rows (watchdog/notify/channels/slack/store.py) and the one migration of stored rows: a
database whose ``notify_alerts`` carried each alert's Slack message key is moved, with the real SQLite, to
the shape where Slack keeps its keys; every alert and message reads back intact, and restarts are no-ops."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

from tests.notify.alerts import make_alert
from tests.notify.conftest import Dispatchers, notify_config
from tests.notify.slack_api import FakeSlack
from tests.support.polling import wait_until
from watchdog.infra.state import StateDB
from watchdog.model import Alert, AlertState
from watchdog.notify.channels.slack.store import SlackStore
from watchdog.notify.decisions.transitions import derive_transitions
from watchdog.notify.delivery.state_store import AlertStateStore

# The schema as the agent wrote it before Slack kept its own keys (component notify.state, version 1),
# and the outbox's, unchanged.
OLD_DDL = (
    "CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER)",
    """CREATE TABLE notify_alerts (
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
    """CREATE TABLE notify_slack_messages (
        message_key TEXT PRIMARY KEY,
        channel TEXT NOT NULL DEFAULT '',
        ts TEXT NOT NULL DEFAULT '',
        members TEXT NOT NULL,
        created_ms INTEGER NOT NULL)""",
    """CREATE TABLE notify_outbox (
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
    "CREATE INDEX notify_outbox_due ON notify_outbox(notifier, status, id)",
    "INSERT INTO schema_versions VALUES ('notify.state', 1), ('notify.outbox', 1)",
)


def _snapshot(fp: str, gpu: str, fired_at_ms: int, resolved_at_ms: int = 0) -> str:
    return json.dumps({"fingerprint": fp, "name": "GpuHot",
                       "labels": {"alertname": "GpuHot", "gpu": gpu, "severity": "warning"},
                       "annotations": {"summary": "hot"}, "value": 91.5, "fired_at_ms": fired_at_ms,
                       "resolved_at_ms": resolved_at_ms, "generator": "gpu_temp > 90"})


# fingerprint, alertname, state, snapshot, active_at_ms, fired_at_ms, keep_firing_since_ms, resolved_at_ms,
# slack_message_key, last_sent_ms, updated_ms
OLD_ALERTS = (
    ("0123abcd", "GpuHot", "firing", _snapshot("0123abcd", "0", 61_000), 1_000, 61_000, 0, 0,
     "msg:0123abcd:firing:61000", 70_000, 70_000),
    ("4567ef01", "GpuHot", "resolved", _snapshot("4567ef01", "1", 61_000, 90_000), 1_000, 61_000, 0, 90_000,
     "msg:group:firing:37b1a88a791956d20e08", 90_000, 90_000),
    ("89abcdef", "GpuHot", "firing", _snapshot("89abcdef", "2", 61_000), 1_000, 61_000, 75_000, 0,
     "msg:group:firing:37b1a88a791956d20e08", 70_000, 76_000),
    ("fedcba98", "GpuHot", "pending", _snapshot("fedcba98", "3", 0), 95_000, 0, 0, 0, "", 0, 95_000),
    ("76543210", "GpuHot", "pending", _snapshot("76543210", "4", 0), 96_000, 0, 0, 0,
     "msg:group:firing:37b1a88a791956d20e08", 0, 96_000),  # a pending symptom folded into a message
    ("00ff00ff", "GpuHot", "firing", _snapshot("00ff00ff", "5", 80_000), 20_000, 80_000, 0, 0, "", 80_000, 80_000),
)
OLD_MESSAGES = (
    ("msg:0123abcd:firing:61000", "C0ALERTS", "1700000000.000100", f"[{_snapshot('0123abcd', '0', 61_000)}]",
     70_000),
    ("msg:group:firing:37b1a88a791956d20e08", "C0ALERTS", "1700000000.000200",
     f"[{_snapshot('4567ef01', '1', 61_000)}, {_snapshot('89abcdef', '2', 61_000)}]", 70_000),
    ("msg:unposted", "", "", f"[{_snapshot('00ff00ff', '5', 80_000)}]", 80_000),
)
OLD_OUTBOX = ("slack", "post:0123abcd:firing:61000", "post", '{"channel": "C0ALERTS"}', "done", 1, 70_000, 70_500,
              '{"channel": "C0ALERTS", "ts": "1700000000.000100"}', "")
ALERT_COLUMNS = ("fingerprint, alertname, state, snapshot, active_at_ms, fired_at_ms, keep_firing_since_ms, "
                 "resolved_at_ms, last_sent_ms, updated_ms")
OUTBOX_COLUMNS = "notifier, idem_key, kind, payload, status, attempts, created_ms, updated_ms, result, last_error"


def write_old_database(path: Path) -> None:
    """A state database in the old shape, written with SQLite directly."""
    conn = sqlite3.connect(path)
    for statement in OLD_DDL:
        conn.execute(statement)
    conn.executemany("INSERT INTO notify_alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", OLD_ALERTS)
    conn.executemany("INSERT INTO notify_slack_messages VALUES (?, ?, ?, ?, ?)", OLD_MESSAGES)
    conn.execute(f"INSERT INTO notify_outbox({OUTBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", OLD_OUTBOX)
    conn.commit()
    conn.close()


def _without_key(row: tuple[object, ...]) -> tuple[object, ...]:
    return (*row[:8], *row[9:])


def _read_back(db: StateDB) -> tuple[dict[str, Alert], dict[str, str], list[tuple[object, ...]]]:
    """What the new code reads: the alerts, each alert's Slack message, and the raw rows."""
    alerts = AlertStateStore(db).load_alerts()
    slack = SlackStore(db)
    with db.transaction() as cur:
        listed = slack.listing(cur, alerts)
    rows = [tuple(r) for r in db.query(f"SELECT {ALERT_COLUMNS} FROM notify_alerts ORDER BY rowid")]
    return alerts, {fp: listed.of(fp) for fp in alerts}, rows


def test_a_database_in_the_old_shape_migrates_and_reads_back_every_alert_and_message(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    write_old_database(path)
    db = StateDB(path)
    alerts, listed, rows = _read_back(db)

    # Every alert row is intact, byte for byte, less the column that moved; the column is gone.
    assert rows == [_without_key(row) for row in OLD_ALERTS]
    columns = {r["name"] for r in db.query("PRAGMA table_info(notify_alerts)")}
    assert "slack_message_key" not in columns
    for row in OLD_ALERTS:
        known = alerts[row[0]]
        assert (known.state.value, json.dumps(known.to_json())) == (row[2], row[3])
        assert (known.active_at_ms, known.fired_at_ms, known.keep_firing_since_ms, known.resolved_at_ms) == row[4:8]
    # Every alert is listed in the message the old column named.
    assert listed == {row[0]: row[8] for row in OLD_ALERTS}
    # Every message reads back as it was written.
    slack = SlackStore(db)
    for key, channel, ts, members, _ in OLD_MESSAGES:
        found = slack.message(key)
        assert found is not None
        assert (found[0], found[1], f"[{', '.join(json.dumps(m.to_json()) for m in found[2])}]") == (
            channel, ts, members)
    assert slack.known_channel() == "C0ALERTS"
    assert [tuple(r) for r in db.query(f"SELECT {OUTBOX_COLUMNS} FROM notify_outbox")] == [OLD_OUTBOX]
    versions = {r["component"]: r["version"] for r in db.query("SELECT * FROM schema_versions")}
    assert versions == {"notify.state": 1, "notify.outbox": 1, "notify.slack": 1}
    db.close()

    # Restarts after the migration change nothing.
    for _ in range(2):
        db = StateDB(path)
        assert _read_back(db) == (alerts, listed, rows)
        assert len(db.query("SELECT * FROM notify_slack_alerts")) == 4
        assert len(db.query("SELECT * FROM notify_slack_messages")) == len(OLD_MESSAGES)
        db.close()


def test_where_sqlite_cannot_drop_a_column_the_migration_empties_it(tmp_path: Path, monkeypatch) -> None:
    """SQLite before 3.35 (RHEL 8) has no DROP COLUMN: the keys move all the same and the column stays,
    emptied; the state store, which never names it, reads and writes every row as elsewhere."""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 26, 0))
    path = tmp_path / "state.db"
    write_old_database(path)
    db = StateDB(path)
    alerts, listed, rows = _read_back(db)
    assert rows == [_without_key(row) for row in OLD_ALERTS]
    assert listed == {row[0]: row[8] for row in OLD_ALERTS}
    assert {r[0] for r in db.query("SELECT slack_message_key FROM notify_alerts")} == {""}
    with db.transaction() as cur:
        AlertStateStore.upsert_alert(cur, replace(alerts["00ff00ff"], fingerprint="11ee11ee"), 99_000)
    assert AlertStateStore(db).load_alerts()["11ee11ee"].fired_at_ms == 80_000
    db.close()


def test_a_migrated_alert_writes_back_byte_for_byte_and_resolves_under_the_same_keys(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    write_old_database(path)
    db = StateDB(path)
    store = AlertStateStore(db)
    SlackStore(db)
    known = store.load_alerts()["0123abcd"]
    with db.transaction() as cur:
        cur.execute("DELETE FROM notify_alerts WHERE fingerprint = '0123abcd'")
        store.upsert_alert(cur, known, 70_000)
        cur.execute("UPDATE notify_alerts SET last_sent_ms = 70000 WHERE fingerprint = '0123abcd'")
    assert tuple(db.query(f"SELECT {ALERT_COLUMNS} FROM notify_alerts WHERE fingerprint = '0123abcd'")[0]) == (
        _without_key(OLD_ALERTS[0]))
    gone = derive_transitions({"0123abcd": known}, [], now_ms=80_000)
    assert [t.key for t in gone.transitions] == ["0123abcd:resolved:61000"]
    with db.transaction() as cur:
        listed = SlackStore.listing(cur, {"0123abcd": gone.upserts[0]})
    assert listed.of("0123abcd") == "msg:0123abcd:firing:61000"  # a resolved alert keeps its message
    db.close()


def test_a_listing_lapses_when_its_alert_begins_a_new_pending_episode_or_is_forgotten(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    slack = SlackStore(db)
    firing = make_alert("GpuHot", gpu="0", fired_at_ms=61_000)  # active since 1_000
    pending = make_alert("GpuHot", "pending", gpu="1", fired_at_ms=65_000)  # active since 5_000
    known = {a.fingerprint: a for a in (firing, pending)}
    with db.transaction() as cur:
        listed = slack.listing(cur, known)
        listed.list_in(firing.fingerprint, "msg:a")
        listed.list_in(pending.fingerprint, "msg:b")
        listed.list_in("unknown", "msg:c")  # this tick only: the notification side does not know it
        slack.save_listing(cur, listed)

    def listing(alerts: list[Alert]) -> dict[str, str]:
        with db.transaction() as cur:
            now = slack.listing(cur, {a.fingerprint: a for a in alerts})
            slack.save_listing(cur, now)
        return {a.fingerprint: now.of(a.fingerprint) for a in alerts}

    assert listing([firing, pending]) == {firing.fingerprint: "msg:a", pending.fingerprint: "msg:b"}
    resolved = replace(firing, state=AlertState.RESOLVED, resolved_at_ms=80_000)
    assert listing([resolved, pending]) == {firing.fingerprint: "msg:a", pending.fingerprint: "msg:b"}
    pending_again = replace(firing, state=AlertState.PENDING, active_at_ms=90_000, fired_at_ms=0)
    assert listing([pending_again, pending]) == {firing.fingerprint: "", pending.fingerprint: "msg:b"}
    assert listing([pending_again]) == {firing.fingerprint: ""}
    assert [r["fingerprint"] for r in db.query("SELECT fingerprint FROM notify_slack_alerts")] == []
    db.close()


def _to_old_shape(path: Path) -> None:
    """Rewrite a database the new code wrote into the old shape: the listings back into notify_alerts."""
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE notify_alerts ADD COLUMN slack_message_key TEXT NOT NULL DEFAULT ''")
    conn.execute("""UPDATE notify_alerts SET slack_message_key = COALESCE((SELECT message_key FROM notify_slack_alerts
                    WHERE notify_slack_alerts.fingerprint = notify_alerts.fingerprint), '')""")
    conn.execute("DROP TABLE notify_slack_alerts")
    conn.execute("DELETE FROM schema_versions WHERE component = 'notify.slack'")
    conn.commit()
    conn.close()


def test_after_the_migration_a_resolve_updates_the_message_posted_before_it(
    fake_slack: FakeSlack, slack_token: str, dispatchers: Dispatchers
) -> None:
    config = notify_config({"base_url": fake_slack.base_url})
    storm = [make_alert("GpuXidError", gpu=str(i), uuid=f"GPU-{i:04d}", xid="79") for i in range(2)]
    d = dispatchers(config)
    d.handle(storm, [], 1_000_000)
    wait_until(lambda: sum(d.outbox.pending_counts().values()) == 0, what="firing delivered")
    dispatchers.close_all()
    path = dispatchers.state_dir / "state.db"
    _to_old_shape(path)
    assert sqlite3.connect(path).execute(
        "SELECT COUNT(*) FROM notify_alerts WHERE slack_message_key LIKE 'msg:group:%'").fetchone() == (2,)

    d = dispatchers(config)
    resolved = [make_alert("GpuXidError", "resolved", resolved_at_ms=1_060_000, gpu=str(i), uuid=f"GPU-{i:04d}",
                           xid="79") for i in range(2)]
    d.handle(resolved, [], 1_061_000)
    wait_until(lambda: sum(d.outbox.pending_counts().values()) == 0, what="resolve delivered")
    [message] = fake_slack.top_level()
    [reply] = fake_slack.replies(message.ts)
    assert "Resolved" in reply.text and "RESOLVED" in message.updates[-1]["text"]
    assert {k.state for k in d.state_store.load_alerts().values()} == {AlertState.RESOLVED}
