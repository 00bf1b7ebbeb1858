"""The runbook audit trail and remediation state in the state database (:class:`watchdog.state.StateDB`).

Tables (component ``runbooks``):

- ``runbook_audit`` — append-only (triggers abort any UPDATE or DELETE): one row per decision:
  ts_ms, fingerprint, alertname, runbook, step, decision, reason, actor, action, action_key,
  exit_code, duration_ms, output_sha256, dry_run. A step is audited ``started`` before it executes and
  ``ran``/``failed`` after; cooldowns and daily caps count ``started`` rows, so they survive a restart
  of the agent (even one in the middle of a step).
- ``runbook_episodes`` — one row per firing episode of an alert (fingerprint + fired_at_ms): how far
  the runbook got (phase, next step, verify deadline), whether diagnostics ran, whether anything was
  remediated. Lets a restarted agent continue instead of starting over.
- ``runbook_escalations`` — alerts a human must look at; automatic action stays stopped until
  :meth:`RunbookState.clear_escalation`.

Contract: every text written (reason, action) has been passed through :func:`watchdog.logs.redact`;
outputs are never stored, only their SHA-256.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum
from typing import Any

from watchdog.infra.logs import redact
from watchdog.infra.state import StateDB

COMPONENT = "runbooks"
SCHEMA_VERSION = 1
RUN_DECISIONS = ("started",)  # attempts: what cooldown and max_per_day count (written before executing)

DDL = (
    """CREATE TABLE IF NOT EXISTS runbook_audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts_ms INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        alertname TEXT NOT NULL,
        runbook TEXT NOT NULL,
        step TEXT NOT NULL,
        decision TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        actor TEXT NOT NULL DEFAULT 'agent',
        action TEXT NOT NULL DEFAULT '',
        action_key TEXT NOT NULL DEFAULT '',
        exit_code INTEGER,
        duration_ms INTEGER,
        output_sha256 TEXT NOT NULL DEFAULT '',
        dry_run INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS runbook_audit_target ON runbook_audit (action_key, decision, ts_ms)",
    "CREATE INDEX IF NOT EXISTS runbook_audit_alert ON runbook_audit (fingerprint, ts_ms)",
    """CREATE TRIGGER IF NOT EXISTS runbook_audit_no_update BEFORE UPDATE ON runbook_audit
       BEGIN SELECT RAISE(ABORT, 'runbook_audit is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS runbook_audit_no_delete BEFORE DELETE ON runbook_audit
       BEGIN SELECT RAISE(ABORT, 'runbook_audit is append-only'); END""",
    """CREATE TABLE IF NOT EXISTS runbook_episodes (
        fingerprint TEXT NOT NULL,
        fired_at_ms INTEGER NOT NULL,
        alertname TEXT NOT NULL,
        runbook TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        phase TEXT NOT NULL,
        step_index INTEGER NOT NULL DEFAULT 0,
        verify_step TEXT NOT NULL DEFAULT '',
        verify_deadline_ms INTEGER NOT NULL DEFAULT 0,
        remediated INTEGER NOT NULL DEFAULT 0,
        diagnosed INTEGER NOT NULL DEFAULT 0,
        ended_ms INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (fingerprint, fired_at_ms)
    )""",
    """CREATE TABLE IF NOT EXISTS runbook_escalations (
        fingerprint TEXT PRIMARY KEY,
        alertname TEXT NOT NULL,
        runbook TEXT NOT NULL,
        since_ms INTEGER NOT NULL,
        reason TEXT NOT NULL
    )""",
)


def digest(output: bytes) -> str:
    """SHA-256 hex of an output ("" for no output)."""
    return hashlib.sha256(output).hexdigest() if output else ""


class Decision(str, Enum):
    """What an audit row records about a step (the ``decision`` column; a closed vocabulary)."""

    SUGGESTED = "suggested"
    AWAITING_APPROVAL = "awaiting_approval"
    SKIPPED = "skipped"
    REFUSED = "refused"
    DRY_RUN = "dry_run"
    RUN = "run"
    STARTED = "started"
    RAN = "ran"
    FAILED = "failed"
    VERIFIED = "verified"
    ESCALATED = "escalated"
    APPROVED = "approved"
    APPROVE_REFUSED = "approve_refused"
    SKIP_REFUSED = "skip_refused"
    ACKNOWLEDGED = "acknowledged"
    DIAGNOSED = "diagnosed"
    DIAGNOSE_FAILED = "diagnose_failed"


class EpisodePhase(str, Enum):
    """How far an episode's runbook got (the ``phase`` column)."""

    ACTIVE = "active"  # walking the remediation steps
    RUNNING = "running"  # a step is executing in the pool
    VERIFYING = "verifying"  # waiting for a step's verify condition
    WAITING = "waiting"  # waiting for a human (approval) or a cooldown
    DONE = "done"  # every step ran
    ESCALATED = "escalated"  # handed to a human
    RESOLVED = "resolved"  # the alert resolved


@dataclass(frozen=True)
class AuditRecord:
    """One decision about one step of one alert's runbook."""

    ts_ms: int
    fingerprint: str
    alertname: str
    runbook: str
    step: str
    decision: Decision
    reason: str = ""
    actor: str = "agent"
    action: str = ""
    action_key: str = ""
    exit_code: int | None = None
    duration_ms: int | None = None
    output_sha256: str = ""
    dry_run: bool = False


@dataclass
class Episode:
    """One firing episode of one alert and how far its runbook got (mutable; persisted)."""

    fingerprint: str
    fired_at_ms: int
    alertname: str
    runbook: str
    started_ms: int
    phase: EpisodePhase = EpisodePhase.ACTIVE
    step_index: int = 0
    verify_step: str = ""
    verify_deadline_ms: int = 0
    remediated: bool = False
    diagnosed: bool = False
    ended_ms: int = 0

    @property
    def open(self) -> bool:
        """True while the alert is still being handled (not resolved or closed)."""
        return self.ended_ms == 0


class RunbookState:
    """Reads and writes the runbook tables; one instance per state database."""

    def __init__(self, db: StateDB) -> None:
        self.db = db
        db.ensure_schema(COMPONENT, SCHEMA_VERSION, DDL)

    # -- audit --------------------------------------------------------------------------------------

    def record(self, rec: AuditRecord) -> None:
        """Append one decision (texts redacted)."""
        self.db.execute(
            "INSERT INTO runbook_audit (ts_ms, fingerprint, alertname, runbook, step, decision, reason, "
            "actor, action, action_key, exit_code, duration_ms, output_sha256, dry_run) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rec.ts_ms, rec.fingerprint, rec.alertname, rec.runbook, rec.step, rec.decision.value,
             redact(rec.reason), redact(rec.actor), redact(rec.action), redact(rec.action_key),
             rec.exit_code, rec.duration_ms, rec.output_sha256, int(rec.dry_run)),
        )

    def target_runs(self, action_key: str, since_ms: int) -> tuple[int, ...]:
        """Timestamps of runs of one target since ``since_ms``, oldest first."""
        placeholders = ",".join("?" for _ in RUN_DECISIONS)
        rows = self.db.query(
            f"SELECT ts_ms FROM runbook_audit WHERE action_key = ? AND decision IN ({placeholders}) "
            "AND ts_ms >= ? ORDER BY ts_ms",
            (redact(action_key), *RUN_DECISIONS, since_ms),
        )
        return tuple(int(row["ts_ms"]) for row in rows)

    # -- episodes -----------------------------------------------------------------------------------

    def save_episode(self, ep: Episode) -> None:
        """Insert or update an episode."""
        self.db.execute(
            "INSERT INTO runbook_episodes (fingerprint, fired_at_ms, alertname, runbook, started_ms, phase, "
            "step_index, verify_step, verify_deadline_ms, remediated, diagnosed, ended_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(fingerprint, fired_at_ms) DO UPDATE SET phase = excluded.phase, "
            "step_index = excluded.step_index, verify_step = excluded.verify_step, "
            "verify_deadline_ms = excluded.verify_deadline_ms, remediated = excluded.remediated, "
            "diagnosed = excluded.diagnosed, ended_ms = excluded.ended_ms",
            (ep.fingerprint, ep.fired_at_ms, ep.alertname, ep.runbook, ep.started_ms, ep.phase.value,
             ep.step_index, ep.verify_step, ep.verify_deadline_ms, int(ep.remediated), int(ep.diagnosed),
             ep.ended_ms),
        )

    def open_episodes(self) -> list[Episode]:
        """Episodes not yet ended."""
        rows = self.db.query("SELECT * FROM runbook_episodes WHERE ended_ms = 0")
        return [_episode(row) for row in rows]

    def find_episode(self, fingerprint: str, fired_at_ms: int) -> Episode | None:
        """The episode of this alert that fired at ``fired_at_ms``."""
        rows = self.db.query("SELECT * FROM runbook_episodes WHERE fingerprint = ? AND fired_at_ms = ?",
                             (fingerprint, fired_at_ms))
        return _episode(rows[0]) if rows else None

    def remediated_episodes(self, fingerprint: str, since_ms: int, exclude_fired_at_ms: int) -> int:
        """How many earlier episodes of this alert since ``since_ms`` had a remediation step run."""
        rows = self.db.query(
            "SELECT COUNT(*) AS n FROM runbook_episodes WHERE fingerprint = ? AND remediated = 1 "
            "AND fired_at_ms >= ? AND fired_at_ms != ?",
            (fingerprint, since_ms, exclude_fired_at_ms),
        )
        return int(rows[0]["n"]) if rows else 0

    def prune_episodes(self, ended_before_ms: int) -> int:
        """Forget episodes that ended before ``ended_before_ms`` (the audit keeps their story)."""
        rows = self.db.query("SELECT COUNT(*) AS n FROM runbook_episodes WHERE ended_ms > 0 AND ended_ms < ?",
                             (ended_before_ms,))
        self.db.execute("DELETE FROM runbook_episodes WHERE ended_ms > 0 AND ended_ms < ?", (ended_before_ms,))
        return int(rows[0]["n"]) if rows else 0

    # -- escalations --------------------------------------------------------------------------------

    def escalate(self, fingerprint: str, alertname: str, runbook: str, now_ms: int, reason: str) -> None:
        """Mark an alert as escalated (kept until cleared by a human)."""
        self.db.execute(
            "INSERT INTO runbook_escalations (fingerprint, alertname, runbook, since_ms, reason) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(fingerprint) DO NOTHING",
            (fingerprint, alertname, runbook, now_ms, redact(reason)),
        )

    def escalation(self, fingerprint: str) -> dict[str, Any] | None:
        """The escalation of this alert, or None."""
        rows = self.db.query("SELECT * FROM runbook_escalations WHERE fingerprint = ?", (fingerprint,))
        return dict(rows[0]) if rows else None

    def escalations(self) -> list[dict[str, Any]]:
        """Every open escalation."""
        return [dict(r) for r in self.db.query("SELECT * FROM runbook_escalations ORDER BY since_ms")]

    def clear_escalation(self, fingerprint: str) -> bool:
        """Remove an escalation; True when there was one."""
        before = self.escalation(fingerprint) is not None
        self.db.execute("DELETE FROM runbook_escalations WHERE fingerprint = ?", (fingerprint,))
        return before


def _episode(row: Any) -> Episode:
    return Episode(
        fingerprint=row["fingerprint"], fired_at_ms=int(row["fired_at_ms"]), alertname=row["alertname"],
        runbook=row["runbook"], started_ms=int(row["started_ms"]), phase=EpisodePhase(row["phase"]),
        step_index=int(row["step_index"]), verify_step=row["verify_step"],
        verify_deadline_ms=int(row["verify_deadline_ms"]), remediated=bool(row["remediated"]),
        diagnosed=bool(row["diagnosed"]), ended_ms=int(row["ended_ms"]),
    )

