"""The PodResources client against a real gRPC server built from the same .proto, on a unix socket."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kubelet import FakeKubelet, FakePod, kubelet_server
from watchdog.pods.podresources import (
    GpuHolding,
    PodRef,
    PodResourcesClient,
    PodResourcesError,
    PodResourcesUnavailable,
    allocatable_gpus,
    gpu_holders,
    gpu_holdings,
    mig_parent,
)

GPU0 = "GPU-11111111-1111-1111-1111-111111111111"
GPU1 = "GPU-22222222-2222-2222-2222-222222222222"
MIG_A = "MIG-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
REPO = Path(__file__).resolve().parents[2]


def test_list_maps_gpus_to_containers_and_ignores_other_resources(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    pods = [FakePod("inference", "vllm-0", {"engine": {"nvidia.com/gpu": [GPU0, GPU1], "example.com/nic": ["n0"]},
                                            "sidecar": {}}),
            FakePod("kube-system", "coredns", {"coredns": {}})]
    with kubelet_server(sock, FakeKubelet(pods, allocatable={"nvidia.com/gpu": [GPU0, GPU1]})):
        client = PodResourcesClient(str(sock), timeout_seconds=5)
        listed = client.list_pods()
        holdings = gpu_holdings(listed)
        assert allocatable_gpus(client.allocatable_devices() or []) == {"nvidia.com/gpu": 2}
        client.close()
    engine = PodRef("inference", "vllm-0", "engine")
    assert holdings == [GpuHolding(GPU0, GPU0, "nvidia.com/gpu", engine),
                        GpuHolding(GPU1, GPU1, "nvidia.com/gpu", engine)]
    assert gpu_holders(holdings) == {GPU0: (engine,), GPU1: (engine,)}


def test_time_sliced_gpu_is_shared_by_several_containers(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    pods = [FakePod("a", "small-1", {"m": {"nvidia.com/gpu": [f"{GPU0}::0"]}}),
            FakePod("b", "small-2", {"m": {"nvidia.com/gpu": [f"{GPU0}::3"]}})]
    with kubelet_server(sock, FakeKubelet(pods, allocatable={"nvidia.com/gpu": [f"{GPU0}::{n}" for n in range(4)]})):
        client = PodResourcesClient(str(sock))
        holders = gpu_holders(gpu_holdings(client.list_pods()))
        allocatable = allocatable_gpus(client.allocatable_devices() or [])
    assert holders == {GPU0: (PodRef("a", "small-1", "m"), PodRef("b", "small-2", "m"))}
    assert allocatable == {"nvidia.com/gpu": 4}


def test_mig_devices_map_to_their_parent_gpu(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    old_format = f"MIG-{GPU1}/1/0"
    pods = [FakePod("a", "mig-1", {"c": {"nvidia.com/mig-1g.10gb": [MIG_A]}}),
            FakePod("b", "mig-2", {"c": {"nvidia.com/mig-3g.40gb": [old_format]}}),
            FakePod("c", "mig-3", {"c": {"nvidia.com/mig-1g.10gb": ["MIG-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"]}})]
    with kubelet_server(sock, FakeKubelet(pods)):
        holdings = gpu_holdings(PodResourcesClient(str(sock)).list_pods(), mig_parents={MIG_A: GPU0})
    by_pod = {h.holder.pod: h for h in holdings}
    assert by_pod["mig-1"].gpu_uuid == GPU0 and by_pod["mig-1"].mig
    assert by_pod["mig-2"].gpu_uuid == GPU1  # the pre-R470 format names its parent
    # parent unknown (no NVML answer): kept under the MIG UUID, not dropped, not guessed
    assert by_pod["mig-3"].gpu_uuid == "MIG-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
    assert mig_parent(MIG_A, {}) is None


def test_old_kubelet_without_allocatable_reads_as_unknown(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    with kubelet_server(sock, FakeKubelet([FakePod("a", "p", {"c": {"nvidia.com/gpu": [GPU0]}})],
                                          allocatable=None)) as kubelet:
        client = PodResourcesClient(str(sock))
        assert client.allocatable_devices() is None
        assert len(client.list_pods()) == 1
    assert kubelet.calls == ["GetAllocatableResources", "List"]


def test_absent_socket_is_an_error_naming_it(tmp_path: Path) -> None:
    sock = tmp_path / "absent.sock"
    client = PodResourcesClient(str(sock), timeout_seconds=0.5)
    with pytest.raises(PodResourcesError, match=rf"{sock}: PodResources List failed: UNAVAILABLE"):
        client.list_pods()


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    """The generated modules are committed: regenerating them from the .proto changes nothing."""
    proto = "watchdog/pods/podresources_v1.proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO), f"--python_out={tmp_path}",
                    f"--grpc_python_out={tmp_path}", f"--pyi_out={tmp_path}", str(REPO / proto)], check=True)
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
        name = f"watchdog/pods/podresources_v1{suffix}"
        assert (tmp_path / name).read_text() == (REPO / name).read_text(), f"{name} is stale: regenerate it"


def test_without_grpcio_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc now raises ImportError
    client = PodResourcesClient(str(tmp_path / "kubelet.sock"))
    with pytest.raises(PodResourcesUnavailable, match="needs grpcio and protobuf"):
        client.list_pods()
