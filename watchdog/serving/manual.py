"""Operators' manual serving states (``engine drain`` / ``engine admit``, and the runbook steps ``drain``
and ``readmit``), persisted in the state database so they survive restarts.

Contract:
- One row per engine job: setting a state replaces the job's previous one; :meth:`ManualStates.clear`
  removes it (the engine goes back to the agent's own verdict).
- A state with ``until_seconds`` expires by itself: :meth:`ManualStates.active` never returns an expired
  one, and :meth:`ManualStates.expire` deletes them (returning what it deleted, for the audit log).
- Only ``drain`` and ``admit`` can be set by hand; anything else raises :class:`ValueError`.
- Every method is safe to call from the daemon and from the command line at the same time (SQLite, WAL).
"""

from __future__ import annotations

import sqlite3

from watchdog.infra.state import StateDB
from watchdog.serving.model import ManualState, Verdict

COMPONENT = "serving.manual"
SCHEMA_VERSION = 1
DDL = (
    "CREATE TABLE IF NOT EXISTS serving_manual_states ("
    " job TEXT PRIMARY KEY, verdict TEXT NOT NULL, reason TEXT NOT NULL, set_by TEXT NOT NULL,"
    " set_at REAL NOT NULL, until REAL)",
)
SETTABLE = (Verdict.DRAIN, Verdict.ADMIT)


class ManualStates:
    """The manual-state table of one state database."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema(COMPONENT, SCHEMA_VERSION, DDL)

    def set(self, state: ManualState) -> None:
        """Record ``state`` for its job, replacing any earlier one."""
        if state.verdict not in SETTABLE:
            raise ValueError(f"a manual state is drain or admit, not {state.verdict.value!r}")
        self.db.execute(
            "INSERT INTO serving_manual_states(job, verdict, reason, set_by, set_at, until) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT(job) DO UPDATE SET verdict=excluded.verdict, reason=excluded.reason,"
            " set_by=excluded.set_by, set_at=excluded.set_at, until=excluded.until",
            (state.job, state.verdict.value, state.reason, state.set_by, state.set_at_seconds, state.until_seconds))

    def clear(self, job: str) -> ManualState | None:
        """Remove ``job``'s state; returns what was removed (None if there was none)."""
        current = self._all().get(job)
        if current is not None:
            self.db.execute("DELETE FROM serving_manual_states WHERE job = ?", (job,))
        return current

    def active(self, now_seconds: float) -> dict[str, ManualState]:
        """Every state still in force at ``now_seconds``, by job."""
        return {job: s for job, s in self._all().items() if s.active(now_seconds)}

    def expire(self, now_seconds: float) -> list[ManualState]:
        """Delete the states that expired by ``now_seconds``; returns them."""
        expired = [s for s in self._all().values() if not s.active(now_seconds)]
        for state in expired:
            self.db.execute("DELETE FROM serving_manual_states WHERE job = ? AND set_at = ?",
                            (state.job, state.set_at_seconds))
        return expired

    def _all(self) -> dict[str, ManualState]:
        try:
            rows = self.db.query("SELECT job, verdict, reason, set_by, set_at, until FROM serving_manual_states")
        except sqlite3.OperationalError:  # a read-only handle on a database the agent never gave this table
            return {}
        return {r["job"]: ManualState(job=r["job"], verdict=Verdict(r["verdict"]), reason=r["reason"],
                                      set_by=r["set_by"], set_at_seconds=r["set_at"], until_seconds=r["until"])
                for r in rows}
