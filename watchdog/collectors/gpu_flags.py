"""GPUs that need a reset or a reboot stay flagged until they get one (state database, component
``gpu_flags``).

Contract:

- :func:`wanted_recovery` is pure: from one round of NVML samples it returns, per GPU uuid, the recovery
  the driver asks for: ``watchdog_gpu_lost`` or ``watchdog_gpu_reset_required`` 1, or
  ``watchdog_gpu_recovery_action{action="gpu_reset"|"drain_and_reset"}`` 1 → ``reset``;
  ``{action="node_reboot"}`` 1 → ``reboot`` (a reboot also resets).
- :class:`GpuFlagStore` persists a flag the first time it is wanted (a reboot request upgrades a reset
  flag) and keeps exporting ``watchdog_gpu_recovery_required{gpu,uuid,action} 1`` after the NVML
  state, an event window or the agent itself goes away: an alert on it does not resolve by itself.
- A flag is cleared only by a reboot (the kernel's ``boot_id`` differs from the one stored with the flag)
  or by an operator (``inference-watchdog gpu clear GPU``; NVML cannot tell that a GPU was reset, so a
  reset is confirmed by hand). Setting and clearing are audited in the append-only ``gpu_flag_audit``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from watchdog.infra.logs import redact
from watchdog.infra.state import StateDB
from watchdog.model import METRIC_NAME, Sample, metric, metric_name

COMPONENT = "gpu_flags"
SCHEMA_VERSION = 1
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")

DDL = (
    """CREATE TABLE IF NOT EXISTS gpu_flags (
        uuid TEXT PRIMARY KEY,
        gpu TEXT NOT NULL,
        action TEXT NOT NULL,
        reason TEXT NOT NULL,
        since_ms INTEGER NOT NULL,
        boot_id TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS gpu_flag_audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts_ms INTEGER NOT NULL,
        uuid TEXT NOT NULL,
        gpu TEXT NOT NULL,
        event TEXT NOT NULL,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT ''
    )""",
    """CREATE TRIGGER IF NOT EXISTS gpu_flag_audit_no_update BEFORE UPDATE ON gpu_flag_audit
       BEGIN SELECT RAISE(ABORT, 'gpu_flag_audit is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS gpu_flag_audit_no_delete BEFORE DELETE ON gpu_flag_audit
       BEGIN SELECT RAISE(ABORT, 'gpu_flag_audit is append-only'); END""",
)


class Recovery(Enum):
    """What a flagged GPU needs; a reboot covers a reset."""

    RESET = "reset"
    REBOOT = "reboot"


RECOVERY_ACTIONS = {"gpu_reset": Recovery.RESET, "drain_and_reset": Recovery.RESET,
                    "node_reboot": Recovery.REBOOT}


@dataclass(frozen=True)
class Wanted:
    """A recovery the driver asks for now, and why."""

    gpu: str
    recovery: Recovery
    reason: str


@dataclass(frozen=True)
class GpuFlag:
    """A persisted flag: this GPU needs ``recovery`` since ``since_ms`` (boot ``boot_id``)."""

    uuid: str
    gpu: str
    recovery: Recovery
    reason: str
    since_ms: int
    boot_id: str


RECOVERY_SERIES = frozenset({"watchdog_gpu_lost", "watchdog_gpu_reset_required", "watchdog_gpu_recovery_action"})
"""The NVML series :func:`wanted_recovery` reads."""


def wanted_recovery(samples: Iterable[Sample]) -> dict[str, Wanted]:
    """Per uuid, the strongest recovery the NVML samples ask for (see the module docstring)."""
    out: dict[str, Wanted] = {}
    for sample in samples:
        if sample.value != 1.0 or metric_name(sample.labels) not in RECOVERY_SERIES:
            continue  # most of a round: read no further
        labels = dict(sample.labels)
        name, uuid = labels.get(METRIC_NAME, ""), labels.get("uuid", "")
        if not uuid:
            continue
        if name in ("watchdog_gpu_lost", "watchdog_gpu_reset_required"):
            wanted = Wanted(labels.get("gpu", ""), Recovery.RESET,
                            "NVML reports the GPU lost" if name == "watchdog_gpu_lost"
                            else "NVML reports the GPU requires a reset")
        elif name == "watchdog_gpu_recovery_action" and labels.get("action") in RECOVERY_ACTIONS:
            action = labels["action"]
            wanted = Wanted(labels.get("gpu", ""), RECOVERY_ACTIONS[action],
                            f"the driver's recovery action is {action}")
        else:
            continue
        current = out.get(uuid)
        if current is None or (current.recovery is Recovery.RESET and wanted.recovery is Recovery.REBOOT):
            out[uuid] = wanted
    return out


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """This boot's id (changes on every reboot); "" when unreadable (then flags never clear by reboot)."""
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError:
        return ""


class GpuFlagStore:
    """The persisted flags; see the module docstring. Safe to share one StateDB with other components."""

    def __init__(self, db: StateDB, boot_id: str) -> None:
        self.db = db
        self.boot_id = boot_id
        db.ensure_schema(COMPONENT, SCHEMA_VERSION, DDL)

    def flags(self) -> list[GpuFlag]:
        """Every current flag, by GPU index."""
        rows = self.db.query("SELECT uuid, gpu, action, reason, since_ms, boot_id FROM gpu_flags")
        flags = [GpuFlag(r["uuid"], r["gpu"], Recovery(r["action"]), r["reason"], r["since_ms"], r["boot_id"])
                 for r in rows]
        return sorted(flags, key=lambda f: (len(f.gpu), f.gpu, f.uuid))

    def _audit(self, flag: GpuFlag, event: str, actor: str, reason: str, now_ms: int) -> None:
        self.db.execute("INSERT INTO gpu_flag_audit(ts_ms, uuid, gpu, event, action, actor, reason) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (now_ms, flag.uuid, flag.gpu, event, flag.recovery.value, redact(actor), redact(reason)))

    def clear_rebooted(self, now_ms: int) -> list[GpuFlag]:
        """Clear the flags set in an earlier boot (the reboot they needed happened); returns them."""
        if not self.boot_id:
            return []
        gone = [f for f in self.flags() if f.boot_id and f.boot_id != self.boot_id]
        for flag in gone:
            self.db.execute("DELETE FROM gpu_flags WHERE uuid = ?", (flag.uuid,))
            self._audit(flag, "cleared", "agent", "the node rebooted", now_ms)
        return gone

    def observe(self, samples: Iterable[Sample], now_ms: int) -> list[GpuFlag]:
        """Flag the GPUs the samples ask a recovery for (new or upgraded); returns those flags."""
        asked = wanted_recovery(samples)
        if not asked:
            return []  # the usual round: no database read
        current = {f.uuid: f for f in self.flags()}
        changed: list[GpuFlag] = []
        for uuid, wanted in asked.items():
            old = current.get(uuid)
            if old is not None and (old.recovery is Recovery.REBOOT or wanted.recovery is Recovery.RESET):
                continue
            flag = GpuFlag(uuid, wanted.gpu, wanted.recovery, wanted.reason, now_ms, self.boot_id)
            self.db.execute(
                "INSERT INTO gpu_flags(uuid, gpu, action, reason, since_ms, boot_id) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(uuid) DO UPDATE SET action = excluded.action, reason = excluded.reason",
                (uuid, flag.gpu, flag.recovery.value, flag.reason, now_ms, self.boot_id))
            self._audit(flag, "flagged", "agent", wanted.reason, now_ms)
            changed.append(flag)
        return changed

    def clear(self, gpu_or_uuid: str, actor: str, reason: str, now_ms: int) -> list[GpuFlag]:
        """Clear the flag of one GPU (index or uuid) by hand; audited. Returns what was cleared."""
        gone = [f for f in self.flags() if gpu_or_uuid in (f.gpu, f.uuid)]
        for flag in gone:
            self.db.execute("DELETE FROM gpu_flags WHERE uuid = ?", (flag.uuid,))
            self._audit(flag, "cleared", actor, reason, now_ms)
        return gone

    def audit(self) -> list[dict[str, object]]:
        """The audit trail, oldest first."""
        rows = self.db.query("SELECT ts_ms, uuid, gpu, event, action, actor, reason FROM gpu_flag_audit "
                             "ORDER BY id")
        return [dict(r) for r in rows]

    def samples(self) -> list[Sample]:
        """``watchdog_gpu_recovery_required{gpu,uuid,action} 1`` per flag."""
        return [Sample(metric("watchdog_gpu_recovery_required", gpu=f.gpu, uuid=f.uuid,
                              action=f.recovery.value), 1.0) for f in self.flags()]
