"""The rule engine's state across restarts, in the agent's state database.

Contract: :meth:`RuleStateStore.save` persists ``RuleEngine.export_state()`` when it changed since the
last save (a digest comparison: calling it every tick costs a hash, no disk write while nothing changes);
:meth:`RuleStateStore.load` returns it for ``RuleEngine(restored_state=...)``. The table keeps the name it
had when the notification side owned it (``notify_rule_engine_state``), so existing state databases
restore their pending ``for`` timers and firing alerts after an upgrade.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from watchdog.infra.state import StateDB

SCHEMA_VERSION = 1
DDL = (
    """CREATE TABLE IF NOT EXISTS notify_rule_engine_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        digest TEXT NOT NULL,
        data TEXT NOT NULL,
        saved_ms INTEGER NOT NULL)""",
)


class RuleStateStore:
    """Reads and writes the rule engine's exported state (one row)."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema("rules.state", SCHEMA_VERSION, DDL)
        self._digest = ""

    def save(self, states: list[dict[str, Any]], now_ms: int = 0) -> bool:
        """Persist ``states`` when they changed since the last save; True if written."""
        data = json.dumps(states, sort_keys=True, default=str)
        digest = hashlib.sha256(data.encode()).hexdigest()
        if not self._digest:
            rows = self.db.query("SELECT digest FROM notify_rule_engine_state WHERE id = 1")
            self._digest = str(rows[0]["digest"]) if rows else ""
        if digest == self._digest:
            return False
        with self.db.transaction() as cur:
            cur.execute(
                """INSERT INTO notify_rule_engine_state(id, digest, data, saved_ms) VALUES (1, ?, ?, ?)
                   ON CONFLICT(id) DO UPDATE SET digest=excluded.digest, data=excluded.data,
                   saved_ms=excluded.saved_ms""",
                (digest, data, now_ms or int(time.time() * 1000)),
            )
        self._digest = digest
        return True

    def load(self) -> list[dict[str, Any]]:
        """The last saved state (``[]`` if none)."""
        rows = self.db.query("SELECT digest, data FROM notify_rule_engine_state WHERE id = 1")
        if not rows:
            return []
        self._digest = rows[0]["digest"]
        loaded: list[dict[str, Any]] = json.loads(rows[0]["data"])
        return loaded
