"""Which pod holds which GPU and runs which engine: the kubelet's PodResources API and engine cgroups.

Contract:
- Every ``pod_resources.refresh_seconds`` (tick time; ``interval_seconds``), with the engine scrapes
  (``background``: off the fault path), it calls ``List`` and, where the
  kubelet has it, ``GetAllocatableResources`` on ``pod_resources.socket``, maps GPU and MIG devices to
  their containers (:mod:`watchdog.pods.podresources`), resolves each engine's root process (noted
  by the ``processes`` collector) to its pod through ``<proc_root>/<pid>/cgroup`` and the kubelet's
  ``container_logs_dir``, and replaces the agent's :class:`~watchdog.pods.directory.PodDirectory`.
- Series: ``watchdog_gpu_pod_info{gpu,uuid,device,resource,namespace,pod,container} 1`` per device held
  by a container (``gpu`` the NVML index as last answered, so a lost GPU keeps it; absent when NVML
  never knew the UUID: a MIG device whose parent is unknown),
  ``watchdog_engine_pod_info{job,instance,namespace,pod,container,pod_uid} 1`` per engine in a pod,
  ``watchdog_kubernetes_gpu_devices{resource,state}`` (``allocatable`` when the kubelet reports it,
  ``allocated``).
- Where the socket does not exist (not on Kubernetes) it is quiet (:class:`NoData`), unless
  ``pod_resources.required`` makes that a failure. A failed call (kubelet down, refused)
  fails the collector (``watchdog_collector_success{collector="pod_resources"} 0``) and empties the
  directory: a pod that is not known now labels nothing (stale is unknown), the other collectors go on.
  A kubelet without ``GetAllocatableResources`` (before 1.21) is not a failure: the allocatable
  count is left out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from watchdog.collectors.base import Collector, CollectorContext, NoData
from watchdog.config.settings import PodResourcesSettings, Settings
from watchdog.kmsg.pci import InitialisedNvml
from watchdog.model import Sample, metric
from watchdog.pods.cgroup import parse_cgroup
from watchdog.pods.containers import read_container_index
from watchdog.pods.directory import PodDirectory
from watchdog.pods.podresources import (
    MIG_RESOURCE_PREFIX,
    GpuHolding,
    PodRef,
    PodResourcesClient,
    allocatable_gpus,
    gpu_holders,
    gpu_holdings,
)

log = logging.getLogger(__name__)


class PodResourcesCollector(Collector):
    """PodResources and engine cgroups into the pod directory and its info series (module docstring)."""

    name = "pod_resources"
    # Off the fault path, with the engine scrapes: a kubelet that stops answering holds this collector up
    # to its timeout, never the tick that pages about a lost GPU (collectors.base).
    background = True

    def __init__(self, settings: PodResourcesSettings, directory: PodDirectory, *, nvml: Any = None,
                 client: PodResourcesClient | None = None) -> None:
        self.settings = settings
        self.directory = directory
        self.timeout_seconds = settings.timeout_seconds
        self.interval_seconds = settings.refresh_seconds
        self.client = client or PodResourcesClient(settings.socket, settings.timeout_seconds)
        self.nvml = nvml
        self._nvml = InitialisedNvml(nvml) if nvml is not None else None
        self._indexes: dict[str, int] = {}
        """GPU UUID -> NVML index as last answered: a GPU that fell off the bus keeps its index (it is the
        one whose pod matters most)."""

    def collect(self) -> list[Sample]:
        """One refresh (see the module docstring)."""
        if not self.settings.required and not Path(self.settings.socket).exists():
            self.directory.update({}, {})
            raise NoData(f"{self.settings.socket}: no kubelet pod-resources socket (not on Kubernetes)")
        try:
            pods = self.client.list_pods()
            allocatable = self.client.allocatable_devices()
        except Exception:  # whatever the cause, the mapping is unknown now: nothing is labelled from it
            self.directory.update({}, {})
            raise
        indexes, mig_parents = self._nvml_view(any(
            devices.resource_name.startswith(MIG_RESOURCE_PREFIX)
            for pod in pods for container in pod.containers for devices in container.devices))
        holdings = gpu_holdings(pods, mig_parents)
        engines = self._engine_pods()
        self.directory.update(gpu_holders(holdings), {key: ref for key, (ref, _) in engines.items()})
        return self._samples(holdings, allocatable, engines, indexes)

    def _samples(self, holdings: list[GpuHolding], allocatable: list[Any] | None,
                 engines: Mapping[tuple[str, str], tuple[PodRef, str]], indexes: Mapping[str, int]) -> list[Sample]:
        out: list[Sample] = []
        allocated: dict[str, set[str]] = {}
        for holding in holdings:
            ref = holding.holder
            index = indexes.get(holding.gpu_uuid)
            out.append(Sample(metric("watchdog_gpu_pod_info", gpu="" if index is None else str(index),
                                     uuid=holding.gpu_uuid, device=holding.device_id, resource=holding.resource,
                                     namespace=ref.namespace, pod=ref.pod, container=ref.container), 1.0))
            allocated.setdefault(holding.resource, set()).add(holding.device_id)
        counts = allocatable_gpus(allocatable) if allocatable is not None else {}
        for resource in sorted(set(counts) | set(allocated)):
            out.append(Sample(metric("watchdog_kubernetes_gpu_devices", resource=resource, state="allocated"),
                              float(len(allocated.get(resource, ())))))
            if allocatable is not None:
                out.append(Sample(metric("watchdog_kubernetes_gpu_devices", resource=resource, state="allocatable"),
                                  float(counts.get(resource, 0))))
        for (job, instance), (ref, pod_uid) in sorted(engines.items()):
            out.append(Sample(metric("watchdog_engine_pod_info", job=job, instance=instance, namespace=ref.namespace,
                                     pod=ref.pod, container=ref.container, pod_uid=pod_uid), 1.0))
        return out

    def _engine_pods(self) -> dict[tuple[str, str], tuple[PodRef, str]]:
        """Each engine's pod (and pod UID), from its root process's cgroup; engines outside pods are left out."""
        pids = self.directory.engine_pids()
        if not pids:
            return {}
        index = read_container_index(self.settings.container_logs_dir)
        out: dict[tuple[str, str], tuple[PodRef, str]] = {}
        for key, pid in pids.items():
            try:
                text = (Path(self.settings.proc_root) / str(pid) / "cgroup").read_text(encoding="utf-8")
            except OSError:  # the process ended since it was noted
                continue
            cgroup = parse_cgroup(text)
            if cgroup is None or not cgroup.container_id:
                continue
            ref = index.get(cgroup.container_id)
            if ref is not None:
                out[key] = (ref, cgroup.pod_uid)
        return out

    def _nvml_view(self, with_mig: bool) -> tuple[dict[str, int], dict[str, str]]:
        """GPU UUID -> NVML index, and (when MIG devices are held) MIG UUID -> GPU UUID; empty without NVML."""
        if self._nvml is None:
            return {}, {}
        try:
            gpus = self._nvml.gpus()
        except self._nvml.error as exc:
            log.debug("NVML unavailable for the pod mapping", extra={"error": str(exc)})
            return dict(self._indexes), {}
        self._indexes.update({gpu.uuid: gpu.index for gpu in gpus})
        indexes = dict(self._indexes)
        parents: dict[str, str] = {}
        if with_mig:
            for gpu in gpus:
                parents.update({mig: gpu.uuid for mig in self._mig_uuids(gpu.handle)})
        return indexes, parents

    def _mig_uuids(self, handle: Any) -> list[str]:
        """The MIG device UUIDs of one GPU (none where NVML or the driver lacks MIG)."""
        nvml = self.nvml
        failed = (AttributeError, getattr(nvml, "NVMLError", AttributeError))
        out: list[str] = []
        try:
            count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        except failed:
            return out
        for slot in range(count):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                uuid = nvml.nvmlDeviceGetUUID(mig)
            except failed:
                continue  # an empty slot answers NOT_FOUND
            out.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        return out

    def close(self) -> None:
        """Close the gRPC channel."""
        self.client.close()


def pod_resources_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """The ``pod_resources`` collector when ``pod_resources.enabled`` and the context has a pod directory to fill
    (the agent's)."""
    section = settings.pod_resources
    if not section.enabled or context.pods is None:
        return []
    return [PodResourcesCollector(section, context.pods, nvml=context.nvml)]
