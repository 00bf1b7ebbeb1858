"""Item 6: storage faults survived. A corrupt state database is set aside and a fresh one created; a
full database degrades delivery to the log (every transition printed, once) and what could not be
stored is delivered once it is writable again; ``watchdog_state_errors_total`` shows both."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

from tests.hostile.conftest import HOT_RULE, hostile_agent
from watchdog.agent import Agent
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.state import StateDB
from watchdog.model import label_value
from watchdog.notify.channels.log import LogNotifier


def _errors(agent: Agent) -> dict[str, float]:
    return {label_value(s.labels, "kind"): s.latest()[1]  # type: ignore[index]
            for s in agent.store.select([("__name__", "=", "watchdog_state_errors_total")])}


def test_a_corrupt_state_database_is_set_aside_and_the_agent_starts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"SQLite format 3\x00" + b"\xde\xad\xbe\xef" * 4096)
    clock = [1_800_000_000.0]
    agent = hostile_agent(tmp_path, clock, {})
    try:
        agent.tick()
        assert _errors(agent)["corrupt"] == 1.0
    finally:
        agent.close()
    aside = list(state.glob("state.db.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"SQLite format 3")
    assert StateDB(state / "state.db").query("PRAGMA quick_check")[0][0] == "ok"


def _fill(conn: sqlite3.Connection) -> None:
    """Make every further write fail, as a full disk (or one remounted read-only after I/O errors) does:
    SQLite reports both as ``sqlite3.OperationalError`` at the write. (``max_page_count`` would leave the
    free space inside existing pages writable, so a small write could still land.)"""
    conn.execute("PRAGMA query_only = ON")


def test_a_full_database_degrades_to_the_log_and_delivers_after_recovery(tmp_path: Path) -> None:
    rules = tmp_path / "hot.yaml"
    rules.write_text(HOT_RULE)
    nvml = FakeNvml.from_profile("h100-sxm-8")
    clock = [1_800_000_000.0]
    agent = hostile_agent(tmp_path, clock, {"rules": {"paths": [str(rules)]},
                                            "notifiers": {"log": {"enabled": True, "format": "json"}}}, nvml=nvml)
    printed = io.StringIO()
    log_notifier = agent.dispatcher.notifiers["log"]
    assert isinstance(log_notifier, LogNotifier)
    log_notifier.stream, log_notifier.json_lines = printed, True
    conn: sqlite3.Connection = agent.db._conn
    try:
        agent.tick()
        _fill(conn)  # the disk is full from here on
        nvml.set(3, temperature_celsius=90)
        nvml.set(5, temperature_celsius=91)
        for _ in range(3):
            clock[0] += 1
            agent.tick()
        lines = [json.loads(line) for line in printed.getvalue().splitlines()]
        firing = [line for line in lines if line.get("event") == "alert_firing"]
        assert len(firing) == 2, lines  # both transitions printed, each once, while nothing can be stored
        assert _errors(agent)["write"] >= 1
        assert not conn.execute("SELECT COUNT(*) FROM notify_outbox").fetchone()[0]

        conn.execute("PRAGMA query_only = OFF")  # space again
        clock[0] += 1
        agent.tick()
        stored = conn.execute("SELECT COUNT(*) FROM notify_alerts WHERE state = 'firing'").fetchone()[0]
        assert stored == 2  # the transitions are persisted once the database is writable
        assert not [r for r in agent.dispatcher.outbox.rows("log") if r.idem_key.startswith("firing:")]  # once
    finally:
        agent.close()
