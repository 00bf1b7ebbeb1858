"""A kubelet's PodResources v1 service for tests: a real grpcio server built from the agent's own
``podresources_v1.proto``, on a unix socket, answering from a list of pods the test changes at will.

Like a kubelet: ``List`` answers every pod with its containers' devices; ``GetAllocatableResources``
answers every device the device plugins registered, or UNIMPLEMENTED (``allocatable=None``: a kubelet
before 1.21); ``Get`` answers one pod or NOT_FOUND.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from watchdog.pods import podresources_v1_pb2 as pb
from watchdog.pods import podresources_v1_pb2_grpc as pb_grpc

Devices = Mapping[str, Sequence[str]]  # resource name -> device ids


@dataclass
class FakePod:
    """One pod: namespace, name and its containers' devices (container name -> resource -> ids)."""

    namespace: str
    name: str
    containers: dict[str, Devices] = field(default_factory=dict)


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    """The service; ``pods`` and ``allocatable`` may be replaced between calls (pods come and go)."""

    def __init__(self, pods: Sequence[FakePod] = (), allocatable: Devices | None = None) -> None:
        self._lock = threading.Lock()
        self.pods = list(pods)
        self.allocatable = allocatable
        self.calls: list[str] = []

    def set_pods(self, pods: Sequence[FakePod]) -> None:
        with self._lock:
            self.pods = list(pods)

    @staticmethod
    def _pod(pod: FakePod) -> Any:
        return pb.PodResources(name=pod.name, namespace=pod.namespace, containers=[
            pb.ContainerResources(name=container, cpu_ids=[0, 1], devices=[
                pb.ContainerDevices(resource_name=resource, device_ids=list(ids),
                                    topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)]))
                for resource, ids in devices.items()])
            for container, devices in pod.containers.items()])

    def List(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls.append("List")
            return pb.ListPodResourcesResponse(pod_resources=[self._pod(pod) for pod in self.pods])

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        with self._lock:
            self.calls.append("GetAllocatableResources")
            allocatable = self.allocatable
        if allocatable is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        return pb.AllocatableResourcesResponse(devices=[
            pb.ContainerDevices(resource_name=resource, device_ids=list(ids))
            for resource, ids in allocatable.items()])

    def Get(self, request: Any, context: Any) -> Any:
        with self._lock:
            for pod in self.pods:
                if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                    return pb.GetPodResourcesResponse(pod_resources=self._pod(pod))
        context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")


@contextmanager
def kubelet_server(socket_path: Path, kubelet: FakeKubelet) -> Iterator[FakeKubelet]:
    """Serve ``kubelet`` on ``socket_path`` (a unix socket) until the block ends."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        yield kubelet
    finally:
        server.stop(grace=None).wait()
