"""Kernel-log collector: Xid / SXid / fallen-off-bus / OOM-kill events → counters and an event table.

Contract:
- Reads new lines from a :class:`~watchdog.kmsg.follow.LogSource` (``/dev/kmsg``, journald, or a file),
  parses them with :class:`~watchdog.kmsg.parse.KernelLogParser`, maps each event's PCI bus id to the GPU
  index and UUID NVML reports (both sides normalised; a GPU NVML can no longer describe keeps the mapping
  remembered in the state database, or the UUID the log itself printed), and emits:
  ``watchdog_gpu_xid_errors_total{gpu,uuid,xid}`` (a fallen-off-bus message counts as xid 79),
  ``watchdog_gpu_fallen_off_bus_total{gpu,uuid}``, ``watchdog_nvswitch_sxid_errors_total{sxid,pci_bus_id}``,
  ``watchdog_kernel_oom_kills_total{process}``, plus ``watchdog_kmsg_lines_read_total`` and
  ``watchdog_kmsg_records_lost_total``. Counters start from the values persisted in the state database.
- Events, counters and the reader's cursor are written in one transaction per collection, so after a
  crash either a line was fully accounted for and will not be read again, or neither happened.
- A storm is absorbed at the parser's speed: escalation history is read once per (GPU, xid), and per
  collection at most ``EVENT_ROWS_PER_KEY`` events of one (kind, xid, GPU) are stored one by one (the
  counters count every event; a warning says how many were aggregated).
- Each Xid event's action is escalated from its history (:mod:`watchdog.xid.escalation`): the same Xid
  on the same GPU in N+1 different boots turns reboot/reset into ``hardware_inspection``.
- :func:`recent_events` gives runbooks the stored events since a time.

Tables (component ``kmsg``): ``kmsg_events``, ``kmsg_counters``, ``kmsg_cursor``, ``kmsg_gpu_map``.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.collectors.base import Collector, CollectorContext, NoData
from watchdog.config.settings import Settings
from watchdog.infra.state import StateDB
from watchdog.kmsg.follow import (
    KMSG_PATH,
    FileFollower,
    JournalReader,
    KmsgReader,
    LogSource,
    read_boot_id,
)
from watchdog.kmsg.parse import KernelEvent, KernelLogParser
from watchdog.kmsg.pci import InitialisedNvml
from watchdog.model import METRIC_NAME, Labels, Sample, make_labels, metric, now_ms
from watchdog.xid.catalogue import Catalogue, default_catalogue
from watchdog.xid.escalation import DEFAULT_REBOOT_THRESHOLD, XidOccurrence, escalate_action

log = logging.getLogger(__name__)

SCHEMA_COMPONENT = "kmsg"
SCHEMA_VERSION = 1
SCHEMA_DDL = (
    """CREATE TABLE IF NOT EXISTS kmsg_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        t_ms INTEGER NOT NULL,
        boot_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        xid INTEGER,
        gpu TEXT,
        uuid TEXT,
        gpu_key TEXT,
        pci_bus_id TEXT,
        pid INTEGER,
        process TEXT,
        severity TEXT NOT NULL,
        action TEXT NOT NULL,
        caused_by INTEGER,
        message TEXT NOT NULL,
        seq INTEGER
    )""",
    "CREATE INDEX IF NOT EXISTS kmsg_events_t ON kmsg_events(t_ms)",
    "CREATE INDEX IF NOT EXISTS kmsg_events_gpu_xid ON kmsg_events(gpu_key, xid)",
    """CREATE TABLE IF NOT EXISTS kmsg_counters (
        name TEXT NOT NULL, labels TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (name, labels)
    )""",
    "CREATE TABLE IF NOT EXISTS kmsg_cursor (source TEXT PRIMARY KEY, cursor TEXT NOT NULL, t_ms INTEGER)",
    """CREATE TABLE IF NOT EXISTS kmsg_gpu_map (
        pci_bus_id TEXT PRIMARY KEY, gpu TEXT NOT NULL, uuid TEXT NOT NULL, t_ms INTEGER
    )""",
)

XID_ERRORS = "watchdog_gpu_xid_errors_total"
FALLEN_OFF_BUS = "watchdog_gpu_fallen_off_bus_total"
SXID_ERRORS = "watchdog_nvswitch_sxid_errors_total"
OOM_KILLS = "watchdog_kernel_oom_kills_total"
LINES_READ = "watchdog_kmsg_lines_read_total"
RECORDS_LOST = "watchdog_kmsg_records_lost_total"

UNKNOWN = "unknown"
EVENT_RETENTION_MS = 30 * 24 * 3600 * 1000
EVENT_MAX_ROWS = 20000
GPU_MAP_REFRESH_SECONDS = 60.0
GPU_MAP_FORCED_REFRESH_SECONDS = 5.0
EVENT_ROWS_PER_KEY = 20
"""Per collection, events of one (kind, xid, GPU) beyond this many are counted but not stored one by one."""


def ensure_schema(db: StateDB) -> None:
    """Create the collector's tables (idempotent)."""
    db.ensure_schema(SCHEMA_COMPONENT, SCHEMA_VERSION, SCHEMA_DDL)


def recent_events(db: StateDB, since_ms: int, kinds: Iterable[str] | None = None,
                  limit: int = 1000) -> list[dict[str, Any]]:
    """Stored kernel events with ``t_ms >= since_ms``, oldest first (at most ``limit``, the newest ones)."""
    ensure_schema(db)
    sql = ("SELECT t_ms, boot_id, kind, xid, gpu, uuid, pci_bus_id, pid, process, severity, action, "
           "caused_by, message FROM kmsg_events WHERE t_ms >= ?")
    params: list[Any] = [since_ms]
    wanted = list(kinds or [])
    if wanted:
        sql += f" AND kind IN ({','.join('?' for _ in wanted)})"
        params.extend(wanted)
    sql += " ORDER BY id DESC LIMIT ?"
    params.append(limit)
    return [dict(row) for row in reversed(db.query(sql, params))]


@dataclass(frozen=True)
class GpuIdentity:
    """What the series labels say about a GPU: NVML index and UUID (``unknown`` when not known)."""

    gpu: str
    uuid: str


def _labels_key(labels: Labels) -> str:
    return json.dumps([list(pair) for pair in labels])


class KmsgCollector(Collector):
    """Follow the kernel log and count GPU/OOM events. See the module docstring."""

    def __init__(
        self,
        source_factory: Callable[[dict[str, Any] | None], LogSource],
        db: StateDB,
        *,
        source_key: str,
        nvml: Any = None,
        boot_id: str | None = None,
        clock: Callable[[], float] = time.time,
        catalogue: Catalogue | None = None,
        reboot_threshold: int = DEFAULT_REBOOT_THRESHOLD,
        timeout_seconds: float = 5.0,
        name: str = "kmsg",
    ) -> None:
        self.name = name
        self.timeout_seconds = timeout_seconds
        self.db = db
        self.nvml = nvml
        self.boot_id = boot_id or read_boot_id()
        self.clock = clock
        self.catalogue = catalogue or default_catalogue()
        self.reboot_threshold = reboot_threshold
        self.source_key = source_key
        self._source_factory = source_factory
        self._source: LogSource | None = None
        self._parser = KernelLogParser(self.catalogue)
        self._line_no = 0
        self._lines_read = 0
        self._nvml_map: dict[str, GpuIdentity] = {}
        self._nvml_map_at = float("-inf")
        self._nvml = InitialisedNvml(nvml)
        self._persisted_cursor: dict[str, Any] | None = None
        ensure_schema(db)
        self._counters: dict[Labels, float] = self._load_counters()
        self._remembered: dict[str, GpuIdentity] = self._load_gpu_map()
        self._xid_boots: dict[tuple[str, int], set[str]] = {}
        self._unpersisted: list[tuple[Any, ...]] = []

    # ---- persistence --------------------------------------------------------------------------
    def _load_counters(self) -> dict[Labels, float]:
        counters: dict[Labels, float] = {}
        for row in self.db.query("SELECT name, labels, value FROM kmsg_counters"):
            pairs = {str(key): str(value) for key, value in json.loads(row["labels"])}
            counters[make_labels({METRIC_NAME: row["name"], **pairs})] = float(row["value"])
        return counters

    def _load_gpu_map(self) -> dict[str, GpuIdentity]:
        rows = self.db.query("SELECT pci_bus_id, gpu, uuid FROM kmsg_gpu_map")
        return {row["pci_bus_id"]: GpuIdentity(row["gpu"], row["uuid"]) for row in rows}

    def _load_cursor(self) -> dict[str, Any] | None:
        rows = self.db.query("SELECT cursor FROM kmsg_cursor WHERE source = ?", (self.source_key,))
        return json.loads(rows[0]["cursor"]) if rows else None

    # ---- GPU identity -------------------------------------------------------------------------
    def _refresh_nvml_map(self, force: bool = False) -> None:
        if self.nvml is None:
            return
        now = time.monotonic()
        if now - self._nvml_map_at < (GPU_MAP_FORCED_REFRESH_SECONDS if force else GPU_MAP_REFRESH_SECONDS):
            return  # a storm of unmapped events asks NVML at most every few seconds, not per event
        self._nvml_map_at = now
        try:
            gpus = self._nvml.gpus()
        except self._nvml.error as exc:
            log.info("NVML unavailable for PCI mapping", extra={"error": str(exc)})
            return
        fresh = {g.pci_bus_id: GpuIdentity(str(g.index), g.uuid) for g in gpus if g.pci_bus_id}
        if fresh:
            self._nvml_map = fresh

    def identify(self, pci_bus_id: str | None, log_uuid: str | None) -> GpuIdentity:
        """GPU index and UUID for a PCI bus id: NVML first, then the remembered map, then the log's UUID."""
        if pci_bus_id:
            if pci_bus_id not in self._nvml_map:
                self._refresh_nvml_map(force=not self._nvml_map)
            for known in (self._nvml_map, self._remembered):
                if pci_bus_id in known:
                    return known[pci_bus_id]
        return GpuIdentity(UNKNOWN, log_uuid or UNKNOWN)

    # ---- collection ---------------------------------------------------------------------------
    def _source_now(self) -> LogSource:
        if self._source is None:
            self._persisted_cursor = self._load_cursor()
            self._source = self._source_factory(self._persisted_cursor)
        return self._source

    def _bump(self, labels: Labels, by: float = 1.0) -> None:
        self._counters[labels] = self._counters.get(labels, 0.0) + by

    def _escalated(self, event: KernelEvent, gpu_key: str) -> str:
        if event.xid is None or event.kind not in ("xid", "fallen_off_bus") or not gpu_key:
            return event.action
        boots = self._xid_boots.get((gpu_key, event.xid))
        if boots is None:  # once per (GPU, xid): a storm is absorbed without a query per event
            rows = self.db.query(
                "SELECT DISTINCT boot_id FROM kmsg_events WHERE gpu_key = ? AND xid = ? "
                "AND kind IN ('xid', 'fallen_off_bus')", (gpu_key, event.xid))
            boots = self._xid_boots[(gpu_key, event.xid)] = {row["boot_id"] for row in rows}
        boots.add(self.boot_id)
        history = [XidOccurrence(boot, gpu_key, event.xid) for boot in sorted(boots)]
        return escalate_action(event.action, history, gpu_key, event.xid, self.reboot_threshold)

    def _account(self, event: KernelEvent, t_ms: int) -> tuple[Any, ...]:
        """Update counters for one event; return its row for ``kmsg_events``."""
        ident = GpuIdentity(UNKNOWN, UNKNOWN)
        gpu_key = ""
        action = event.action
        if event.kind in ("xid", "fallen_off_bus"):
            ident = self.identify(event.pci_bus_id, event.uuid)
            gpu_key = ident.uuid if ident.uuid != UNKNOWN else (event.pci_bus_id or "")
            action = self._escalated(event, gpu_key)
            self._bump(metric(XID_ERRORS, gpu=ident.gpu, uuid=ident.uuid, xid=str(event.xid)))
            if event.kind == "fallen_off_bus":
                self._bump(metric(FALLEN_OFF_BUS, gpu=ident.gpu, uuid=ident.uuid))
        elif event.kind == "sxid":
            self._bump(metric(SXID_ERRORS, sxid=str(event.xid), pci_bus_id=event.pci_bus_id or UNKNOWN))
        elif event.kind == "oom_kill":
            self._bump(metric(OOM_KILLS, process=event.process or UNKNOWN))
        return (t_ms, self.boot_id, event.kind, event.xid,
                ident.gpu if event.kind in ("xid", "fallen_off_bus") else None,
                ident.uuid if event.kind in ("xid", "fallen_off_bus") else None,
                gpu_key or None, event.pci_bus_id, event.pid, event.process, event.severity, action,
                event.caused_by, event.message, event.seq)

    def collect(self) -> list[Sample]:
        """Read new kernel-log lines, account for their events, persist, and return every counter."""
        try:
            source = self._source_now()
            lines = source.read()
        except PermissionError as exc:
            problem = kmsg_access_problem(exc.filename) if exc.filename else ""
            raise NoData(f"kernel log not readable: {problem or exc}") from exc
        except FileNotFoundError as exc:
            raise NoData(f"kernel log not readable: {exc}") from exc
        # Learn (and persist) which GPU sits at which PCI address while NVML can still tell: a GPU that
        # falls off the bus answers nothing afterwards, and its Xid line still needs its gpu and uuid.
        self._refresh_nvml_map()
        t_ms = now_ms(self.clock())
        rows: list[tuple[Any, ...]] = []
        per_key: dict[tuple[Any, ...], int] = {}
        for line in lines:
            self._line_no += 1
            for event in self._parser.feed(line, self._line_no):
                row = self._account(event, t_ms)
                key = (row[2], row[3], row[6])  # kind, xid, gpu_key
                per_key[key] = per_key.get(key, 0) + 1
                if per_key[key] <= EVENT_ROWS_PER_KEY:
                    rows.append(row)
        storms = {key: n for key, n in per_key.items() if n > EVENT_ROWS_PER_KEY}
        for (kind, xid, gpu_key), count in storms.items():
            log.warning("kernel-log storm: events aggregated", extra={
                "kind": kind, "xid": xid, "gpu": gpu_key, "events": count, "stored": EVENT_ROWS_PER_KEY})
        self._lines_read += len(lines)
        rows = [*self._unpersisted, *rows]
        try:
            self._persist(rows, source.cursor(), t_ms)
            self._unpersisted = []
        except sqlite3.Error as exc:  # disk full, I/O error: the counters stay served, rows retried
            self.db.note_error("write")
            log.warning("kernel events not persisted; retrying next collection", extra={"error": str(exc)})
            self._unpersisted = rows[-EVENT_MAX_ROWS:]
        return self.samples()

    def _persist(self, rows: list[tuple[Any, ...]], cursor: dict[str, Any], t_ms: int) -> None:
        mapped = {pci: ident for pci, ident in self._nvml_map.items() if self._remembered.get(pci) != ident}
        if not rows and not mapped and cursor == self._persisted_cursor:
            return  # nothing new: no write (the database is fsynced on every commit)
        with self.db.transaction() as cur:
            if rows:
                cur.executemany(
                    "INSERT INTO kmsg_events (t_ms, boot_id, kind, xid, gpu, uuid, gpu_key, pci_bus_id, pid, "
                    "process, severity, action, caused_by, message, seq) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
                cur.executemany(
                    "INSERT INTO kmsg_counters (name, labels, value) VALUES (?, ?, ?) "
                    "ON CONFLICT(name, labels) DO UPDATE SET value = excluded.value",
                    [(dict(labels)[METRIC_NAME], _labels_key(tuple(p for p in labels if p[0] != METRIC_NAME)),
                      value) for labels, value in self._counters.items()])
                cur.execute("DELETE FROM kmsg_events WHERE t_ms < ? OR id <= "
                            "(SELECT COALESCE(MAX(id), 0) - ? FROM kmsg_events)",
                            (t_ms - EVENT_RETENTION_MS, EVENT_MAX_ROWS))
            for pci, ident in mapped.items():
                cur.execute("INSERT INTO kmsg_gpu_map (pci_bus_id, gpu, uuid, t_ms) VALUES (?, ?, ?, ?) "
                            "ON CONFLICT(pci_bus_id) DO UPDATE SET gpu = excluded.gpu, uuid = excluded.uuid, "
                            "t_ms = excluded.t_ms", (pci, ident.gpu, ident.uuid, t_ms))
            cur.execute("INSERT INTO kmsg_cursor (source, cursor, t_ms) VALUES (?, ?, ?) "
                        "ON CONFLICT(source) DO UPDATE SET cursor = excluded.cursor, t_ms = excluded.t_ms",
                        (self.source_key, json.dumps(cursor), t_ms))
        self._remembered.update(mapped)
        self._persisted_cursor = cursor

    def samples(self) -> list[Sample]:
        """Every counter, plus the reader's own counters."""
        out = [Sample(labels, value) for labels, value in sorted(self._counters.items())]
        out.append(Sample(metric(LINES_READ, source=self.source_key), float(self._lines_read)))
        lost = getattr(self._source, "lost_records", 0)
        out.append(Sample(metric(RECORDS_LOST, source=self.source_key), float(lost)))
        return out

    def close(self) -> None:
        """Release the reader."""
        if self._source is not None:
            self._source.close()


def kmsg_access_problem(path: str = KMSG_PATH) -> str:
    """Why ``path`` cannot be read by this process ("" when it can), naming what is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return f"{path} does not exist here (a container without the host's kernel log?)"
    except PermissionError:
        return (f"{path} is not readable by uid {os.getuid()}: reading the kernel log needs read permission on "
                f"{path} and, where kernel.dmesg_restrict=1, the CAP_SYSLOG capability (a unit drop-in with "
                "AmbientCapabilities=CAP_SYSLOG); or read it through journald as a member of the "
                "systemd-journal group, which the shipped unit adds (kmsg.source: journal)")
    except OSError as exc:
        return f"{path} cannot be opened: {exc.strerror}"
    os.close(fd)
    return ""


def _kmsg_readable(path: str = KMSG_PATH) -> bool:
    return not kmsg_access_problem(path)


def build_source_factory(source: str, state_dir: str | Path, boot_id: str
                         ) -> tuple[str, Callable[[dict[str, Any] | None], LogSource]]:
    """``(source_key, factory)`` for the configured source: ``auto``, ``kmsg``, ``journal`` or a file path."""
    if source == "auto":
        if _kmsg_readable():
            source = "kmsg"
        elif JournalReader.available():
            source = "journal"
        else:
            raise NoData(f"no kernel log to read: {kmsg_access_problem()}; and journalctl is not installed")
    if source == "kmsg":
        return "kmsg", lambda cursor: KmsgReader(boot_id, cursor)
    if source == "journal":
        cursor_file = Path(state_dir) / "kmsg.journal.cursor"
        return "journal", lambda cursor: JournalReader(cursor_file)
    path = Path(source)
    return f"file:{path}", lambda cursor: FileFollower(path, cursor)


class _DeferredNoData(Collector):
    """Stands in for a collector whose source is absent here: every call reports "no data", quietly."""

    def __init__(self, name: str, reason: str, timeout_seconds: float) -> None:
        self.name, self.reason, self.timeout_seconds = name, reason, timeout_seconds

    def collect(self) -> list[Sample]:
        raise NoData(self.reason)


def kmsg_collectors(settings: Settings, context: CollectorContext) -> list[Any]:
    """The kernel-log collector for the ``kmsg`` section; none when disabled.

    Uses the context's state database, clock, boot id and NVML (each None means the real one).
    """
    section = settings.kmsg
    if not section.enabled:
        return []
    timeout = section.timeout_seconds
    boot_id = context.boot_id or read_boot_id()
    state_dir = settings.state_dir
    try:
        source_key, factory = build_source_factory(section.source, state_dir, boot_id)
    except NoData as exc:
        return [_DeferredNoData("kmsg", str(exc), timeout)]
    return [KmsgCollector(
        factory, context.db_for(state_dir), source_key=source_key, nvml=context.nvml, boot_id=boot_id,
        clock=context.clock or time.time,
        reboot_threshold=section.reboot_escalation_threshold,
        timeout_seconds=timeout,
    )]
