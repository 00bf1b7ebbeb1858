"""The current pod of every GPU and engine, and the labels it adds to exported series and to alerts.

Contract:
- One :class:`PodDirectory` per agent. The ``pod_resources`` collector replaces its GPU holders and engine
  pods at each refresh (:meth:`PodDirectory.update`); the engine-process collector notes each engine's
  root pid (:meth:`PodDirectory.note_engine_pid`) for the collector to resolve through its cgroup. Every
  method is thread-safe; readers see one refresh whole.
- The labels are ``namespace``, ``pod``, ``container``. A series with a ``uuid`` label gets those of the
  containers holding that GPU; a series with ``job`` and ``instance`` (an engine's) gets its engine's
  pod, which wins for a series that has both. Several containers sharing a GPU (time-slicing, MIG)
  give each label the distinct values joined by ``,`` in sorted order, so one GPU stays one series and
  sums over GPUs count it once. A label the series already has is kept (as ``honor_labels``).
- They are added where series leave the node (the exporter's page, :meth:`relabel_keys`) and to alerts
  (:class:`AlertPodLabels`), not in the store: the store's series keep the identity ``gpu`` and ``uuid``
  give them, so a pod that comes or goes neither makes a GPU's counter look new to the rules (the Xid
  rules read a new series as new events) nor restarts a ``for:`` clock. ``watchdog_gpu_pod_info`` holds
  the same facts as a series for joins.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping

from watchdog.model import Alert, Labels
from watchdog.pods.podresources import PodRef

POD_LABELS = ("namespace", "pod", "container")
MAX_FROZEN_ALERTS = 10_000
"""Alerts whose pod labels are remembered at most (bounded memory)."""


def holder_labels(holders: Iterable[PodRef]) -> dict[str, str]:
    """``namespace``, ``pod``, ``container`` of one or more holders (several: sorted distinct values
    joined by ``,``); empty for none."""
    refs = sorted(set(holders))
    if not refs:
        return {}
    return {"namespace": ",".join(sorted({r.namespace for r in refs})),
            "pod": ",".join(sorted({r.pod for r in refs})),
            "container": ",".join(sorted({r.container for r in refs if r.container}))}


class PodDirectory:
    """GPU UUID -> holders and engine (job, instance) -> pod, as last refreshed. See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gpus: dict[str, dict[str, str]] = {}
        self._engines: dict[tuple[str, str], dict[str, str]] = {}
        self._engine_pids: dict[tuple[str, str], int] = {}
        self.version = 0
        self.loaded = False
        """Whether a refresh has set the mapping yet (before it, nothing is known, not even "no pods")."""
        self._cache: tuple[int, list[Labels] | None, list[Labels]] = (-1, None, [])
        self._memo: dict[Labels, Labels] = {}

    def update(self, gpus: Mapping[str, Iterable[PodRef]], engines: Mapping[tuple[str, str], PodRef]) -> None:
        """Replace the mapping (a refresh); the version changes only when the labels do."""
        gpu_labels = {uuid: holder_labels(refs) for uuid, refs in gpus.items()}
        engine_labels = {key: holder_labels([ref]) for key, ref in engines.items()}
        with self._lock:
            self.loaded = True
            if gpu_labels != self._gpus or engine_labels != self._engines:
                self._gpus, self._engines = gpu_labels, engine_labels
                self.version += 1

    def note_engine_pid(self, job: str, instance: str, pid: int | None) -> None:
        """The root pid of an engine as last found (None: not running)."""
        with self._lock:
            if pid is None:
                self._engine_pids.pop((job, instance), None)
            else:
                self._engine_pids[(job, instance)] = pid

    def engine_pids(self) -> dict[tuple[str, str], int]:
        """Each running engine's root pid."""
        with self._lock:
            return dict(self._engine_pids)

    def labels_for(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The pod labels a series (or alert) with ``labels`` gets; empty when nothing is known."""
        with self._lock:
            return self._labels_for(labels.get("uuid", ""), labels.get("job", ""), labels.get("instance", ""))

    def _labels_for(self, uuid: str, job: str, instance: str) -> dict[str, str]:
        if job and instance:
            engine = self._engines.get((job, instance))
            if engine:
                return engine
        return self._gpus.get(uuid, {}) if uuid else {}

    def relabel(self, labels: Labels) -> Labels:
        """``labels`` with the pod labels added (see the module docstring); the same object when none apply."""
        uuid = job = instance = ""
        for key, value in labels:
            if key == "uuid":
                uuid = value
            elif key == "job":
                job = value
            elif key == "instance":
                instance = value
        extra = self._labels_for(uuid, job, instance)
        if not extra:
            return labels
        present = {key for key, _ in labels}
        added = [(key, value) for key, value in extra.items() if value and key not in present]
        return tuple(sorted((*labels, *added))) if added else labels

    def relabel_keys(self, keys: list[Labels]) -> list[Labels]:
        """:meth:`relabel` of every key. While ``keys`` is the previous call's object and the mapping is
        unchanged, returns the previous answer's object (the exporter's page cache then compares nothing);
        a key seen at the previous call with the mapping unchanged is not relabelled again."""
        with self._lock:
            version, last_keys, last = self._cache
            if keys is last_keys and version == self.version:
                return last
            if not self._gpus and not self._engines:
                out = keys
                self._memo = {}
            else:
                memo = self._memo if version == self.version else {}
                relabelled = {key: memo.get(key) or self.relabel(key) for key in keys}
                self._memo = relabelled  # bounded by the keys of this call
                out = [relabelled[key] for key in keys]
            self._cache = (self.version, keys, out)
            return out


class AlertPodLabels:
    """Adds the pod labels to alerts, frozen per alert (fingerprint) from the evaluation it was first
    seen at until it is gone: a firing alert's labels never change under Alertmanager, and the alert
    names the pod that held the GPU when the fault began. The fingerprint stays the rule engine's."""

    def __init__(self, directory: PodDirectory) -> None:
        self.directory = directory
        self._frozen: dict[str, dict[str, str]] = {}

    def label(self, alerts: list[Alert]) -> list[Alert]:
        """``alerts`` with their pod labels (labels the rule already set win); unchanged, and nothing frozen,
        until the directory's first refresh (an alert restored at start keeps waiting for its pod)."""
        if not self.directory.loaded:
            return alerts
        out: list[Alert] = []
        if len(self._frozen) > MAX_FROZEN_ALERTS:  # alerts that vanished without resolving: start over
            self._frozen.clear()
        for alert in alerts:
            extra = self._frozen.get(alert.fingerprint)
            if extra is None:
                extra = self._frozen[alert.fingerprint] = self.directory.labels_for(alert.labels)
            if alert.is_resolved:
                self._frozen.pop(alert.fingerprint, None)
            added = {key: value for key, value in extra.items() if value and key not in alert.labels}
            out.append(dataclasses.replace(alert, labels={**alert.labels, **added}) if added else alert)
        return out
