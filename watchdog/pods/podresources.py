"""The kubelet's PodResources v1 API: the client, and which containers hold which GPU (pure).

Contract:
- :class:`PodResourcesClient` calls ``List`` and ``GetAllocatableResources`` over the kubelet's unix
  socket (default ``/var/lib/kubelet/pod-resources/kubelet.sock``), each bounded by ``timeout_seconds``.
  A kubelet older than 1.21 answers ``GetAllocatableResources`` with UNIMPLEMENTED: that reads as None
  (unknown), not as an error. Any other gRPC failure raises :class:`PodResourcesError` naming the socket
  and the call, and the next call opens a new channel (a restarted kubelet is reached at once).
- grpcio and protobuf are imported on first use: without them :class:`PodResourcesUnavailable` says
  what to install (the agent's other parts do not need them).
- :func:`gpu_holders` maps an answer to GPU → the containers holding it. GPU resources are
  ``nvidia.com/gpu`` (device ids are GPU UUIDs; NVIDIA's device plugin suffixes ``::<n>`` to the
  replicas of a time-sliced GPU, so one GPU may appear under several containers) and
  ``nvidia.com/mig-<profile>`` (device ids are MIG device UUIDs; :func:`mig_parent` finds the GPU).
  Other resources are ignored. Holders are sorted and unique.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# The MIG UUID format of drivers before R470 names its parent: MIG-GPU-<gpu uuid>/<gi>/<ci>.
_OLD_MIG = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/\d+/\d+$")


class PodResourcesError(Exception):
    """A PodResources call failed (socket absent, kubelet not answering, refused)."""


class PodResourcesUnavailable(PodResourcesError):
    """grpcio or protobuf is not installed."""


@dataclass(frozen=True, order=True)
class PodRef:
    """One container: namespace, pod and container names."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, order=True)
class GpuHolding:
    """One GPU device a container was given: the device id as the kubelet lists it, its resource, the
    GPU it belongs to (the GPU UUID; for a MIG device whose parent is unknown, the MIG UUID) and whether
    it is a MIG device."""

    gpu_uuid: str
    device_id: str
    resource: str
    holder: PodRef

    @property
    def mig(self) -> bool:
        """Whether the device is a MIG slice of ``gpu_uuid``."""
        return self.resource.startswith(MIG_RESOURCE_PREFIX)


def is_gpu_resource(resource: str) -> bool:
    """Whether a device-plugin resource name is an NVIDIA GPU or MIG device."""
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


def device_gpu_uuid(device_id: str) -> str:
    """The GPU UUID of an ``nvidia.com/gpu`` device id (a time-sliced replica's ``::<n>`` removed)."""
    return device_id.split("::", 1)[0]


def mig_parent(device_id: str, parents: Mapping[str, str]) -> str | None:
    """The GPU UUID a MIG device id belongs to: from the old format's own text, else from ``parents``
    (MIG UUID -> GPU UUID, as NVML reports it); None when unknown."""
    device_id = device_gpu_uuid(device_id)
    old = _OLD_MIG.match(device_id)
    if old is not None:
        return old.group(1)
    return parents.get(device_id)


def gpu_holdings(pods: Iterable[Any], mig_parents: Mapping[str, str] | None = None) -> list[GpuHolding]:
    """Every GPU device held by a container of ``pods`` (``PodResources`` messages), sorted."""
    parents = mig_parents or {}
    out: set[GpuHolding] = set()
    for pod in pods:
        for container in pod.containers:
            holder = PodRef(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                resource = devices.resource_name
                if not is_gpu_resource(resource):
                    continue
                for device_id in devices.device_ids:
                    if resource == GPU_RESOURCE:
                        gpu = device_gpu_uuid(device_id)
                    else:
                        gpu = mig_parent(device_id, parents) or device_gpu_uuid(device_id)
                    out.add(GpuHolding(gpu, device_id, resource, holder))
    return sorted(out)


def gpu_holders(holdings: Iterable[GpuHolding]) -> dict[str, tuple[PodRef, ...]]:
    """GPU UUID -> the containers holding it or a slice of it (sorted, unique)."""
    holders: dict[str, set[PodRef]] = {}
    for holding in holdings:
        holders.setdefault(holding.gpu_uuid, set()).add(holding.holder)
    return {gpu: tuple(sorted(refs)) for gpu, refs in holders.items()}


def allocatable_gpus(devices: Iterable[Any], mig_parents: Mapping[str, str] | None = None) -> dict[str, int]:
    """GPU resource name -> how many devices of it the kubelet may hand out (``ContainerDevices``
    messages of a ``GetAllocatableResources`` answer; time-sliced replicas each count)."""
    counts: dict[str, int] = {}
    for group in devices:
        if is_gpu_resource(group.resource_name):
            counts[group.resource_name] = counts.get(group.resource_name, 0) + len(group.device_ids)
    return counts


def _grpc() -> tuple[Any, Any, Any]:
    """grpc, the generated messages and the generated stubs; :class:`PodResourcesUnavailable` without them."""
    try:
        import grpc

        from watchdog.pods import podresources_v1_pb2 as messages
        from watchdog.pods import podresources_v1_pb2_grpc as stubs
    except ImportError as exc:
        raise PodResourcesUnavailable(
            f"reading the kubelet's PodResources API needs grpcio and protobuf ({exc}); "
            "install inference-watchdog's dependencies again (pip install inference-watchdog)") from exc
    return grpc, messages, stubs


class PodResourcesClient:
    """``List`` and ``GetAllocatableResources`` on the kubelet's socket; one channel, opened on first use."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout_seconds: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self._channel: Any = None
        self._stub: Any = None

    def _open(self) -> tuple[Any, Any, Any]:
        grpc, messages, stubs = _grpc()
        if self._stub is None:
            # The kubelet serves plain gRPC on a unix socket guarded by file permissions (no TLS).
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
            self._stub = stubs.PodResourcesListerStub(self._channel)
        return grpc, messages, self._stub

    def list_pods(self) -> list[Any]:
        """Every pod's ``PodResources`` message; raises :class:`PodResourcesError`."""
        grpc, messages, stub = self._open()
        try:
            return list(stub.List(messages.ListPodResourcesRequest(), timeout=self.timeout_seconds).pod_resources)
        except grpc.RpcError as exc:
            raise PodResourcesError(self._describe("List", exc)) from exc

    def allocatable_devices(self) -> list[Any] | None:
        """The ``ContainerDevices`` the kubelet may hand out; None when the kubelet lacks the call."""
        grpc, messages, stub = self._open()
        try:
            answer = stub.GetAllocatableResources(messages.AllocatableResourcesRequest(),
                                                  timeout=self.timeout_seconds)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return None  # kubelet before 1.21 (or the feature gate off): not an error
            raise PodResourcesError(self._describe("GetAllocatableResources", exc)) from exc
        return list(answer.devices)

    def _describe(self, call: str, exc: Any) -> str:
        """The error text; also drops the channel, so the next call connects afresh instead of waiting out
        gRPC's reconnect backoff (a restarted kubelet makes a new socket)."""
        self.close()
        code = exc.code() if hasattr(exc, "code") else None
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        name = getattr(code, "name", "UNKNOWN")
        return f"{self.socket_path}: PodResources {call} failed: {name}: {detail}"

    def close(self) -> None:
        """Close the channel (a later call opens a new one)."""
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None
