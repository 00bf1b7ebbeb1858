"""The agent's SQLite state database (``<state_dir>/state.db``).

Contract: one connection per process, WAL mode, ``synchronous=FULL`` (a committed notification or audit
row survives a power cut), every access serialised by one lock. A file that is not a database or fails
SQLite's ``quick_check`` at open is set aside (renamed ``state.db.corrupt-<UTC timestamp>`` with its WAL
and shared-memory files, logged at error level) and a fresh database created, so the agent starts;
:attr:`StateDB.errors` counts that and the write failures components report (``note_error``), exported
as ``watchdog_state_errors_total{kind}``. Each component owns its tables and
creates them with :meth:`StateDB.ensure_schema` (idempotent DDL, versioned per component), so no
component edits another's schema.

:meth:`StateDB.read_only` opens an existing database for readers outside the agent (the command line):
SQLite ``mode=ro``, no schema rows, no WAL switch, no set-aside; every write raises
:class:`sqlite3.OperationalError`, so such a reader never changes the agent's database.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class StateDB:
    """A thread-safe handle on the state database. ``path=":memory:"`` for tests that need no file."""

    def __init__(self, path: str | Path, *, _read_only: bool = False) -> None:
        self.path = str(path)
        self.errors: Counter[str] = Counter()
        self._lock = threading.RLock()
        self.is_read_only = _read_only
        if _read_only:
            self._conn = sqlite3.connect(f"{Path(self.path).resolve().as_uri()}?mode=ro", uri=True,
                                         check_same_thread=False, isolation_level=None)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA busy_timeout=5000")
            return
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            if self.path == ":memory:":
                raise
            self._set_aside(str(exc))
            self._open()

    def _open(self) -> None:
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        try:
            self._initialise()
        except sqlite3.DatabaseError:
            self._conn.close()
            raise

    def _set_aside(self, why: str) -> None:
        """Rename the corrupt database (and its WAL/SHM files) out of the way; see the module docstring."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = f"{self.path}.corrupt-{stamp}"
        for suffix in ("", "-wal", "-shm"):
            source = Path(self.path + suffix)
            if source.exists():
                source.rename(aside + suffix)
        self.errors["corrupt"] += 1
        log.error("state database is corrupt: set aside, starting with a fresh one (alert state, outbox "
                  "and runbook history start empty)", extra={"path": self.path, "moved_to": aside, "error": why})

    def note_error(self, kind: str) -> None:
        """Count a failure a component met using the database (``write``: disk full, I/O error)."""
        self.errors[kind] += 1

    def _initialise(self) -> None:
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA busy_timeout=5000")
            if self.path != ":memory:":
                verdict = self._conn.execute("PRAGMA quick_check").fetchone()[0]
                if verdict != "ok":
                    raise sqlite3.DatabaseError(f"quick_check: {verdict}")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER)"
            )

    @classmethod
    def in_dir(cls, state_dir: str | Path) -> StateDB:
        """The database file ``state.db`` inside ``state_dir``."""
        return cls(Path(state_dir) / "state.db")

    @classmethod
    def read_only(cls, path: str | Path) -> StateDB | None:
        """An existing database opened read-only, or None when ``path`` is absent or not a readable
        database (see the module docstring)."""
        if not Path(path).is_file():
            return None
        try:
            db = cls(path, _read_only=True)
            db.query("SELECT 1")
        except sqlite3.Error:
            return None
        return db

    def ensure_schema(self, component: str, version: int, ddl: Sequence[str],
                      migrate: Callable[[sqlite3.Cursor], object] | None = None) -> None:
        """Run ``ddl`` once per (component, version), then ``migrate`` (rows written in an older shape),
        in one transaction; statements must be idempotent (IF NOT EXISTS), and so must ``migrate``.
        A read-only handle runs nothing: a table the agent never created reads as an error."""
        if self.is_read_only:
            return
        with self.transaction() as cur:
            row = cur.execute(
                "SELECT version FROM schema_versions WHERE component = ?", (component,)
            ).fetchone()
            if row is not None and row["version"] >= version:
                return
            for statement in ddl:
                cur.execute(statement)
            if migrate is not None:
                migrate(cur)
            cur.execute(
                "INSERT INTO schema_versions(component, version) VALUES (?, ?) "
                "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                (component, version),
            )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """An immediate transaction: committed on normal exit, rolled back on exception."""
        if self.is_read_only:
            raise sqlite3.OperationalError(f"state database {self.path} is open read-only")
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")
            finally:
                cur.close()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Run a read query and return all rows."""
        with self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement in its own transaction; returns ``lastrowid``."""
        with self.transaction() as cur:
            cur.execute(sql, params)
            return int(cur.lastrowid or 0)

    def close(self) -> None:
        """Close the connection (checkpointing the WAL)."""
        with self._lock:
            self._conn.close()
