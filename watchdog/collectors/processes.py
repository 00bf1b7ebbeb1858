"""Engine processes: each configured engine's process tree, its restarts, NUMA placement and GPUs held.

Contract:
- For every ``engines[]`` entry the root process is found by the TCP port it listens on
  (``engines[].process.port``, else the port of its ``url``) or, failing that, by a regex on the command
  line (``engines[].process.match``; the topmost, then oldest, matching process). The tree is the root and
  all its descendants. Labels ``job`` and ``instance`` are exactly those the engine scrape uses.
- Per engine: ``watchdog_engine_process_up`` (0/1), ``..._cpu_seconds_total`` (user+system of the tree),
  ``..._threads``, ``..._resident_memory_bytes``, ``..._count``, ``..._start_time_seconds`` (root), and
  ``watchdog_engine_process_restarts_total``: +1 each time the engine is found as a different root
  process (pid and create time) than before, persisted so restarts while the agent was down count.
- TP groups: a GPU whose NVML compute processes include a pid of the tree yields
  ``watchdog_engine_gpu_info{job,instance,gpu,uuid} 1`` and ``watchdog_engine_gpu_memory_used_bytes``.
- NUMA: for each GPU held, ``watchdog_engine_numa_mismatch{job,instance,gpu,uuid}`` is 1 when the GPU's
  NUMA node (``<sysfs>/bus/pci/devices/<bus>/numa_node``) is not among the nodes of the CPU affinity of
  the tree's processes that use that GPU, else 0 (also 0 when the node is unknown: single-node hosts).
- The trees come from one pass over the host's processes per collection (shared by every engine), and an
  engine's tree is walked again every :data:`TREE_REFRESH_SECONDS` or when its root changes; members
  that ended in between are skipped at once, a new worker is counted from the next walk.
- The engine's knobs (``watchdog_engine_config_*``, :mod:`watchdog.engines.engine_args`) come from its
  root's command line and environment, read once per root process (pid and create time): a restarted
  engine's are read again; an unreadable environment reads as empty.
- Collected with the engine scrapes (``background``: every ``engine_scrape_interval_seconds``, off the
  fault path), since a process tree is only found by walking every process of the host.
- Each engine's root pid is noted in the agent's pod directory (``context.pods``), where the
  ``pod_resources`` collector resolves it to a pod through its cgroup.
- psutil, NVML, the sysfs root and the state database are injected; a process vanishing mid-read is
  skipped, one engine failing does not hide the others.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from watchdog.collectors.base import Collector, CollectorContext
from watchdog.collectors.engines import scrape_instance
from watchdog.config.settings import EngineSettings, Settings
from watchdog.engines.engine_args import engine_arg_samples, parse_engine_args
from watchdog.infra.state import StateDB
from watchdog.kmsg.pci import GpuRef, InitialisedNvml, sysfs_pci_address
from watchdog.model import Labels, Sample, cached_metric
from watchdog.pods.directory import PodDirectory

log = logging.getLogger(__name__)

SCHEMA_COMPONENT = "processes"
SCHEMA_VERSION = 1
SCHEMA_DDL = (
    """CREATE TABLE IF NOT EXISTS engine_process_roots (
        job TEXT NOT NULL, instance TEXT NOT NULL, pid INTEGER NOT NULL, create_time REAL NOT NULL,
        restarts INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job, instance)
    )""",
)

PREFIX = "watchdog_engine_process_"
TREE_REFRESH_SECONDS = 30.0
"""An engine's process tree is walked again this often (and whenever its root changes)."""


@dataclass(frozen=True)
class EngineTarget:
    """How to find one engine's processes."""

    job: str
    instance: str
    port: int | None
    match: re.Pattern[str] | None


def engine_targets(engines: Iterable[EngineSettings]) -> list[EngineTarget]:
    """One :class:`EngineTarget` per ``engines[]`` entry (port from ``process.port``, else from the URL)."""
    targets: list[EngineTarget] = []
    for entry in engines:
        port = entry.process.port or urlsplit(entry.url).port
        pattern = entry.process.match
        targets.append(EngineTarget(
            job=entry.job,
            instance=scrape_instance(entry.url),
            port=int(port) if port else None,
            match=re.compile(pattern) if pattern else None,
        ))
    return targets


def parse_cpulist(text: str) -> set[int]:
    """CPUs of a sysfs cpulist (``0-3,8,10-11``)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(part))
    return cpus


def read_cpu_nodes(sysfs_root: str | Path) -> dict[int, int]:
    """CPU → NUMA node from ``<sysfs>/devices/system/node/node*/cpulist``; empty where sysfs lacks it."""
    mapping: dict[int, int] = {}
    base = Path(sysfs_root) / "devices" / "system" / "node"
    for node_dir in sorted(base.glob("node[0-9]*")):
        try:
            node = int(node_dir.name[4:])
            cpus = parse_cpulist((node_dir / "cpulist").read_text(encoding="ascii"))
        except (OSError, ValueError):
            continue
        for cpu in cpus:
            mapping[cpu] = node
    return mapping


def read_gpu_numa_node(sysfs_root: str | Path, bus_id: str) -> int | None:
    """NUMA node of a PCI device (``<sysfs>/bus/pci/devices/<bus>/numa_node``); ``None`` if unknown/-1."""
    try:
        path = Path(sysfs_root) / "bus" / "pci" / "devices" / sysfs_pci_address(bus_id) / "numa_node"
        node = int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def numa_mismatch(gpu_node: int | None, affinity: Iterable[int], cpu_nodes: Mapping[int, int]) -> bool:
    """True when the GPU's node is known and none of the affinity's CPUs is on it."""
    if gpu_node is None or not cpu_nodes:
        return False
    nodes = {cpu_nodes[cpu] for cpu in affinity if cpu in cpu_nodes}
    return bool(nodes) and gpu_node not in nodes


class ProcessCollector(Collector):
    """Engine process trees. See the module docstring."""

    # Read with the engine scrapes (every engine_scrape_interval_seconds), never holding the fault path:
    # walking every process of a busy host for the trees is this collector's cost (collectors.base).
    background = True

    def __init__(
        self,
        targets: list[EngineTarget],
        db: StateDB,
        *,
        ps: Any = None,
        nvml: Any = None,
        sysfs_root: str | Path = "/sys",
        self_pid: int | None = None,
        timeout_seconds: float = 5.0,
        name: str = "processes",
        pods: PodDirectory | None = None,
    ) -> None:
        if ps is None:
            import psutil

            ps = psutil
        self.name = name
        self.timeout_seconds = timeout_seconds
        self.targets = targets
        self.db = db
        self.ps = ps
        self.nvml = nvml
        self.sysfs_root = Path(sysfs_root)
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self.pods = pods
        self._nvml = InitialisedNvml(nvml)
        self._nvml_last_error = ""
        self._roots: dict[tuple[str, str], tuple[int, float, int]] = {}
        self._cached_roots: dict[EngineTarget, Any] = {}
        self._trees: dict[EngineTarget, tuple[tuple[int, float], float, list[Any]]] = {}
        self._configs: dict[EngineTarget, tuple[tuple[int, float], list[Sample]]] = {}
        """The config series of each engine's root as last read, by its (pid, create time)."""
        self._skip = (ps.NoSuchProcess, ps.AccessDenied, getattr(ps, "ZombieProcess", ps.NoSuchProcess))
        db.ensure_schema(SCHEMA_COMPONENT, SCHEMA_VERSION, SCHEMA_DDL)

    # ---- finding the engines ----------------------------------------------------------------------
    def _listeners(self) -> dict[int, list[int]]:
        """Listening TCP port → pids."""
        listening: dict[int, list[int]] = {}
        found: list[tuple[Any, int | None]] = []
        try:
            found = [(conn, conn.pid) for conn in self.ps.net_connections(kind="inet")]
        except self.ps.AccessDenied:  # not root: look at the processes we may inspect, one by one
            for proc in self.ps.process_iter():
                try:
                    get = getattr(proc, "net_connections", None) or proc.connections
                    found.extend((conn, proc.pid) for conn in get(kind="inet"))
                except self._skip:
                    continue
        for conn, pid in found:
            if conn.status == self.ps.CONN_LISTEN and conn.laddr and pid:
                listening.setdefault(conn.laddr.port, []).append(pid)
        return listening

    def _topmost(self, pids: Iterable[int]) -> Any | None:
        """The process among ``pids`` that has no ancestor among them (the oldest if several)."""
        candidates = []
        wanted = set(pids) - {self.self_pid}
        for pid in wanted:
            try:
                proc = self.ps.Process(pid)
                if any(parent.pid in wanted for parent in proc.parents()):
                    continue
                candidates.append((proc.create_time(), pid, proc))
            except self._skip:
                continue
        return min(candidates, key=lambda item: (item[0], item[1]))[2] if candidates else None

    def find_root(self, target: EngineTarget, listeners: Mapping[int, list[int]]) -> Any | None:
        """The engine's root process by port, then by command-line match; ``None`` if not running."""
        if target.port is not None and target.port in listeners:
            root = self._topmost(listeners[target.port])
            if root is not None:
                return root
        if target.match is not None:
            matched = []
            for proc in self.ps.process_iter(["pid", "cmdline"]):
                cmdline = " ".join(proc.info.get("cmdline") or [])
                if cmdline and target.match.search(cmdline):
                    matched.append(proc.info["pid"])
            return self._topmost(matched)
        return None

    def tree(self, root: Any, children: Mapping[int, list[int]] | None = None) -> list[Any]:
        """The root and its live descendants (``children``: pid -> child pids of the whole host, from
        :meth:`children_map`; None: psutil's own walk)."""
        if children is None:
            try:
                return [root, *root.children(recursive=True)]
            except self._skip:
                return [root]
        try:
            root_created = root.create_time()
        except self._skip:
            return [root]
        out, seen, stack = [root], {root.pid}, [root.pid]
        while stack:  # as psutil's children(recursive=True), on a map made once for every engine
            for pid in children.get(stack.pop(), ()):
                if pid in seen:
                    continue
                seen.add(pid)
                try:
                    child = self.ps.Process(pid)
                    if root_created <= child.create_time():  # else a reused pid, older than the root
                        out.append(child)
                        stack.append(pid)
                except self._skip:
                    continue
        return out

    def children_map(self) -> dict[int, list[int]] | None:
        """pid -> child pids of every process on the host, from one pass over ``/proc`` (psutil's
        ``_ppid_map``, what ``children()`` reads on every call); None where the psutil in use lacks it."""
        ppid_map = getattr(self.ps, "_ppid_map", None)
        if ppid_map is None:
            return None
        children: dict[int, list[int]] = {}
        for pid, ppid in ppid_map().items():
            children.setdefault(ppid, []).append(pid)
        return children

    def _tree(self, target: EngineTarget, root: Any, create_time: float,
              children: Callable[[], Mapping[int, list[int]] | None]) -> list[Any]:
        """The engine's tree, walked again when its root changed or every :data:`TREE_REFRESH_SECONDS`
        (members that ended since are skipped by the caller; a new worker joins at the next walk)."""
        now = time.monotonic()
        known = self._trees.get(target)
        if known is not None and known[0] == (root.pid, create_time) and now - known[1] < TREE_REFRESH_SECONDS:
            return known[2]
        members = self.tree(root, children())
        self._trees[target] = ((root.pid, create_time), now, members)
        return members

    # ---- GPUs ---------------------------------------------------------------------------------------
    def _gpu_processes(self) -> list[tuple[GpuRef, dict[int, int | None]]]:
        """Each GPU NVML describes, with its compute processes (pid → used bytes)."""
        if self.nvml is None:
            return []
        nvml_error = self._nvml.error
        try:
            gpus = self._nvml.gpus()
        except nvml_error as exc:
            if str(exc) != self._nvml_last_error:  # once per distinct cause, not once a tick
                self._nvml_last_error = str(exc)
                log.info("NVML unavailable for engine GPU mapping", extra={"error": str(exc)})
            return []
        self._nvml_last_error = ""
        out = []
        for gpu in gpus:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
            except nvml_error:
                continue
            out.append((gpu, {int(p.pid): getattr(p, "usedGpuMemory", None) for p in procs}))
        return out

    # ---- restarts -------------------------------------------------------------------------------------
    def _restarts(self, target: EngineTarget, pid: int, create_time: float) -> int:
        """Restart count after seeing ``(pid, create_time)`` as the root now (persisted)."""
        key = (target.job, target.instance)
        known = self._roots.get(key)
        if known is not None and known[0] == pid and abs(known[1] - create_time) <= 0.5:
            return known[2]  # same process as last time: no database round trip
        restarts = self._restarts_in_db(key, pid, create_time)
        self._roots[key] = (pid, create_time, restarts)
        return restarts

    def _restarts_in_db(self, key: tuple[str, str], pid: int, create_time: float) -> int:
        with self.db.transaction() as cur:
            row = cur.execute(
                "SELECT pid, create_time, restarts FROM engine_process_roots WHERE job = ? AND instance = ?",
                key).fetchone()
            if row is None:
                cur.execute("INSERT INTO engine_process_roots (job, instance, pid, create_time, restarts) "
                            "VALUES (?, ?, ?, ?, 0)", (*key, pid, create_time))
                return 0
            restarts = int(row["restarts"])
            if int(row["pid"]) != pid or abs(float(row["create_time"]) - create_time) > 0.5:
                restarts += 1
                cur.execute("UPDATE engine_process_roots SET pid = ?, create_time = ?, restarts = ? "
                            "WHERE job = ? AND instance = ?", (pid, create_time, restarts, *key))
            return restarts

    def _stored_restarts(self, target: EngineTarget) -> int:
        rows = self.db.query("SELECT restarts FROM engine_process_roots WHERE job = ? AND instance = ?",
                             (target.job, target.instance))
        return int(rows[0]["restarts"]) if rows else 0

    # ---- collection ---------------------------------------------------------------------------------
    @staticmethod
    def _metric(name: str, target: EngineTarget, *extra: tuple[str, str]) -> Labels:
        """``metric(name, job=..., instance=..., **dict(extra))``, memoised (:func:`cached_metric`)."""
        return cached_metric(name, job=target.job, instance=target.instance, **dict(extra))

    def _alive(self, proc: Any) -> bool:
        try:
            return bool(proc.is_running()) and proc.status() != getattr(self.ps, "STATUS_ZOMBIE", "zombie")
        except self._skip:
            return False

    def roots(self) -> dict[EngineTarget, Any | None]:
        """Each target's root process. A root found before is kept while it runs (no socket scan every
        tick: listing every connection of a busy host is the expensive part); the others are searched."""
        found: dict[EngineTarget, Any | None] = {}
        missing = []
        for target in self.targets:
            cached = self._cached_roots.get(target)
            if cached is not None and self._alive(cached):
                found[target] = cached
            else:
                missing.append(target)
        if missing:
            listeners = self._listeners() if any(t.port is not None for t in missing) else {}
            for target in missing:
                found[target] = self.find_root(target, listeners)
                if found[target] is not None:
                    self._cached_roots[target] = found[target]
                else:
                    self._cached_roots.pop(target, None)
        return found

    def collect(self) -> list[Sample]:
        """One sample set for every configured engine (see the module docstring)."""
        roots = self.roots()
        gpu_processes = self._gpu_processes()
        cpu_nodes = read_cpu_nodes(self.sysfs_root)
        walked: list[dict[int, list[int]] | None] = []

        def children() -> dict[int, list[int]] | None:  # one pass over /proc per collection, if any
            if not walked:
                walked.append(self.children_map())
            return walked[0]

        out: list[Sample] = []
        for target in self.targets:
            out.extend(self._engine_samples(target, roots[target], gpu_processes, cpu_nodes, children))
            if self.pods is not None:  # the pod_resources collector finds each engine's pod from its root's cgroup
                root = roots[target]
                self.pods.note_engine_pid(target.job, target.instance, None if root is None else int(root.pid))
        return out

    def _engine_samples(self, target: EngineTarget, root: Any | None,
                        gpu_processes: list[tuple[GpuRef, dict[int, int | None]]],
                        cpu_nodes: Mapping[int, int],
                        children: Callable[[], Mapping[int, list[int]] | None]) -> list[Sample]:
        ids = {"job": target.job, "instance": target.instance}
        if root is None:
            self._configs.pop(target, None)
            return [Sample(self._metric(PREFIX + "up", target), 0.0),
                    Sample(self._metric(PREFIX + "restarts_total", target), float(self._stored_restarts(target)))]
        try:
            create_time = float(root.create_time())
        except self._skip:
            return [Sample(self._metric(PREFIX + "up", target), 0.0)]
        cpu = threads = rss = 0.0
        members: set[int] = set()
        affinity: dict[int, set[int]] = {}
        for proc in self._tree(target, root, create_time, children):
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    cpu += times.user + times.system
                    threads += proc.num_threads()
                    rss += proc.memory_info().rss
                    get_affinity = getattr(proc, "cpu_affinity", None)
                    affinity[proc.pid] = set(get_affinity() or []) if get_affinity else set()
                members.add(proc.pid)
            except self._skip:
                continue
        count = len(members)
        out = [
            Sample(self._metric(PREFIX + "up", target), 1.0),
            Sample(self._metric(PREFIX + "cpu_seconds_total", target), cpu),
            Sample(self._metric(PREFIX + "threads", target), threads),
            Sample(self._metric(PREFIX + "resident_memory_bytes", target), rss),
            Sample(self._metric(PREFIX + "count", target), float(count)),
            Sample(self._metric(PREFIX + "start_time_seconds", target), create_time),
            Sample(self._metric(PREFIX + "restarts_total", target),
                   float(self._restarts(target, int(root.pid), create_time))),
        ]
        out.extend(self._config_samples(target, root, create_time, ids))
        for gpu, procs in gpu_processes:
            held = [pid for pid in procs if pid in members]
            if not held:
                continue
            gpu_ids = ("gpu", str(gpu.index)), ("uuid", gpu.uuid)
            out.append(Sample(self._metric("watchdog_engine_gpu_info", target, *gpu_ids), 1.0))
            used = [procs[pid] for pid in held if procs[pid] is not None]
            if used:
                out.append(Sample(self._metric("watchdog_engine_gpu_memory_used_bytes", target, *gpu_ids),
                                  float(sum(int(u) for u in used if u is not None))))
            gpu_node = read_gpu_numa_node(self.sysfs_root, gpu.bus_id_raw) if gpu.bus_id_raw else None
            cpus: set[int] = set().union(*(affinity.get(pid, set()) for pid in held))
            mismatch = numa_mismatch(gpu_node, cpus, cpu_nodes)
            out.append(Sample(self._metric("watchdog_engine_numa_mismatch", target, *gpu_ids),
                              1.0 if mismatch else 0.0))
        return out

    def _config_samples(self, target: EngineTarget, root: Any, create_time: float,
                        ids: dict[str, str]) -> list[Sample]:
        """The engine's knobs from its command line and environment (config audit); none if unreadable.

        Read once per root process: a process's command line and environment are fixed at its start, so
        they are kept while the root is the same (pid, create time), one entry per engine; a command line
        that could not be read is tried again at the next collection.
        """
        identity = (int(root.pid), create_time)
        known = self._configs.get(target)
        if known is not None and known[0] == identity:
            return known[1]
        self._configs.pop(target, None)
        try:
            argv = list(root.cmdline())
        except self._skip:
            return []
        try:
            environ = dict(root.environ())
        except self._skip:  # another user's environment needs root: the NCCL flags then read unset
            environ = {}
        samples = engine_arg_samples(ids, parse_engine_args(argv, environ))
        self._configs[target] = (identity, samples)
        return samples


def process_collectors(settings: Settings, context: CollectorContext) -> list[Any]:
    """The engine-process collector when engines are configured and ``processes.enabled``.

    Uses the context's state database, psutil, NVML and sysfs root (each None means the real one).
    """
    section = settings.processes
    if not section.enabled or not settings.engines:
        return []
    return [ProcessCollector(
        engine_targets(settings.engines), context.db_for(settings.state_dir), ps=context.psutil,
        nvml=context.nvml, sysfs_root=context.sysfs_root or section.sysfs_root,
        timeout_seconds=section.timeout_seconds, pods=context.pods,
    )]
