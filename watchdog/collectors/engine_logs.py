"""Engine logs as evidence: follow each engine's log and count what its metrics cannot say.

For every ``engines[]`` entry with a ``log`` section, :class:`EngineLogCollector` reads the new lines of
the engine's log (``log.file``: a file followed like ``tail -F``, starting at its end when the agent
starts; ``log.unit``: the systemd unit's journal, ``journalctl -u UNIT`` with a cursor file in the state
directory) and classifies each with :func:`watchdog.engines.logparse.parse_engine_log_line`. Series
(labels: the endpoint's ``job`` and ``instance``):

- ``watchdog_engine_log_events_total{kind}``: ``cuda_oom``, ``nccl_timeout``, ``cuda_error``,
  ``engine_dead`` (every kind from the start, at 0);
- ``watchdog_engine_nccl_timeout_info{rank, collective, seq}`` 1: the last NCCL watchdog timeout seen.

Every event is also logged (logger ``watchdog.collectors.engine_logs``) with its detail. A log that does
not exist yet is quiet (``NoData``); a journalctl failure fails the collector for that tick.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from watchdog.collectors.base import Collector, CollectorContext, NoData
from watchdog.collectors.engines import target_labels
from watchdog.config.settings import Settings
from watchdog.engines.logparse import KINDS, EngineLogEvent, parse_engine_log_line
from watchdog.kmsg.follow import FileFollower, JournalReader, LogSource
from watchdog.model import Sample, metric

log = logging.getLogger(__name__)


def file_source(path: str) -> FileFollower:
    """Follow ``path`` from its current end (earlier lines are history, not news)."""
    cursor = None
    try:
        stat = os.stat(path)
        cursor = {"kind": "file", "path": path, "inode": stat.st_ino, "offset": stat.st_size}
    except FileNotFoundError:
        pass  # created later: read it from the start
    return FileFollower(path, cursor)


def journal_source(unit: str, state_dir: str) -> JournalReader:
    """The unit's journal after the cursor kept in ``state_dir``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in unit)
    return JournalReader(Path(state_dir) / f"engine-log.{safe}.cursor", selector=("-u", unit))


class EngineLogCollector(Collector):
    """Counts one engine's log events; see the module docstring."""

    timeout_seconds = 10.0

    def __init__(self, targets: Mapping[str, str], source: LogSource, path: str | None = None) -> None:
        self.targets = dict(targets)
        self.name = f"engine_log:{self.targets['job']}"
        self.source = source
        self.path = path  # for a file source: NoData while it does not exist
        self.counts = dict.fromkeys(KINDS, 0)
        self.last_nccl: EngineLogEvent | None = None

    def collect(self) -> list[Sample]:
        """Read and classify the new lines; the counters."""
        if self.path is not None and not os.path.exists(self.path):
            raise NoData(f"{self.path} does not exist (yet)")
        for line in self.source.read():
            event = parse_engine_log_line(line)
            if event is None:
                continue
            self.counts[event.kind] += 1
            if event.kind == "nccl_timeout":
                self.last_nccl = event
            log.warning("engine log event", extra={"collector": self.name, "kind": event.kind,
                                                   "detail": event.detail, "rank": event.rank,
                                                   "collective": event.collective, "seq": event.seq})
        out = [Sample(metric("watchdog_engine_log_events_total", **self.targets, kind=k), float(n))
               for k, n in self.counts.items()]
        if self.last_nccl is not None:
            out.append(Sample(metric("watchdog_engine_nccl_timeout_info", **self.targets, rank=self.last_nccl.rank,
                                     collective=self.last_nccl.collective, seq=self.last_nccl.seq), 1.0))
        return out


def engine_log_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """One :class:`EngineLogCollector` per ``engines[]`` entry with a ``log`` section."""
    del context
    out: list[Collector] = []
    for endpoint in settings.engines:
        section = endpoint.log
        if section is None:
            continue
        targets = target_labels(endpoint)
        if section.file:
            out.append(EngineLogCollector(targets, file_source(section.file), section.file))
        elif section.unit:
            out.append(EngineLogCollector(targets, journal_source(section.unit, settings.state_dir)))
    return out
