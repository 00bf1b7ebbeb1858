"""The pod_resources collector over gRPC to a kubelet-like server on a unix socket: pods that come and go,
engines found through their cgroup, the quiet and failed outcomes, isolation by the runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kubelet import FakeKubelet, FakePod, kubelet_server
from tests.support.settings import settings_of
from watchdog.collectors.base import CollectorContext, CollectorRunner, NoData, self_metrics
from watchdog.collectors.pod_resources import PodResourcesCollector, pod_resources_collectors
from watchdog.config.settings import PodResourcesSettings, section_settings
from watchdog.fakes.pynvml import FakeNvml
from watchdog.model import Sample, metric
from watchdog.pods.directory import PodDirectory

UID = "0d1b7e3c-5a2f-4c1e-9b8a-3f2e1d0c9b8a"
CID = "4f3c2b1a" * 8


def settings(tmp_path: Path, **overrides: object) -> PodResourcesSettings:
    return section_settings(PodResourcesSettings, "pod_resources", {
        "socket": str(tmp_path / "kubelet.sock"), "proc_root": str(tmp_path / "proc"),
        "container_logs_dir": str(tmp_path / "containers"), **overrides})


def by_name(samples: list[Sample], name: str) -> list[dict[str, str]]:
    return [dict(s.labels) for s in samples if dict(s.labels)["__name__"] == name]


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml.from_profile("h100-sxm-8")


def uuids(nvml: FakeNvml) -> list[str]:
    nvml.nvmlInit()
    return [nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]


def test_pods_that_come_and_go(tmp_path: Path, nvml: FakeNvml) -> None:
    gpu = uuids(nvml)
    pods = PodDirectory()
    kubelet = FakeKubelet([FakePod("inference", "vllm-0", {"engine": {"nvidia.com/gpu": gpu[:2]}})],
                          allocatable={"nvidia.com/gpu": gpu})
    with kubelet_server(tmp_path / "kubelet.sock", kubelet):
        collector = PodResourcesCollector(settings(tmp_path), pods, nvml=nvml)
        first = collector.collect()
        info = sorted((d["gpu"], d["pod"], d["container"]) for d in by_name(first, "watchdog_gpu_pod_info"))
        assert info == [("0", "vllm-0", "engine"), ("1", "vllm-0", "engine")]
        devices = {(d["state"]): s.value for s in first for d in [dict(s.labels)]
                   if d["__name__"] == "watchdog_kubernetes_gpu_devices"}
        assert devices == {"allocated": 2.0, "allocatable": 8.0}
        assert pods.labels_for({"uuid": gpu[0]})["pod"] == "vllm-0"

        # vllm-0 goes, two pods share GPU 3 (time-slicing), one holds GPU 4
        kubelet.set_pods([FakePod("a", "small-1", {"m": {"nvidia.com/gpu": [f"{gpu[3]}::0"]}}),
                          FakePod("b", "small-2", {"m": {"nvidia.com/gpu": [f"{gpu[3]}::1"]}}),
                          FakePod("b", "big", {"m": {"nvidia.com/gpu": [gpu[4]]}})])
        second = collector.collect()
        collector.close()
    assert sorted((d["gpu"], d["pod"]) for d in by_name(second, "watchdog_gpu_pod_info")) == [
        ("3", "small-1"), ("3", "small-2"), ("4", "big")]
    assert pods.labels_for({"uuid": gpu[0]}) == {}
    assert pods.labels_for({"uuid": gpu[3]}) == {"namespace": "a,b", "pod": "small-1,small-2", "container": "m"}


def test_engine_pod_through_its_cgroup(tmp_path: Path) -> None:
    (tmp_path / "proc" / "4242").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
        f"cri-containerd-{CID}.scope\n")
    (tmp_path / "proc" / "4343").mkdir()
    (tmp_path / "proc" / "4343" / "cgroup").write_text("0::/system.slice/vllm.service\n")  # not in a pod
    (tmp_path / "containers").mkdir()
    (tmp_path / "containers" / f"vllm-0_inference_engine-{CID}.log").touch()
    pods = PodDirectory()
    pods.note_engine_pid("vllm", "127.0.0.1:8000", 4242)
    pods.note_engine_pid("sglang", "127.0.0.1:30000", 4343)
    pods.note_engine_pid("gone", "127.0.0.1:1", 999999)
    with kubelet_server(tmp_path / "kubelet.sock", FakeKubelet([], allocatable=None)):
        samples = PodResourcesCollector(settings(tmp_path), pods).collect()
    assert by_name(samples, "watchdog_engine_pod_info") == [dict(metric(
        "watchdog_engine_pod_info", job="vllm", instance="127.0.0.1:8000", namespace="inference", pod="vllm-0",
        container="engine", pod_uid=UID))]
    assert pods.labels_for({"job": "vllm", "instance": "127.0.0.1:8000"})["pod"] == "vllm-0"
    assert pods.labels_for({"job": "sglang", "instance": "127.0.0.1:30000"}) == {}
    assert not by_name(samples, "watchdog_kubernetes_gpu_devices")  # nothing allocated, allocatable unknown


def test_no_socket_is_quiet_unless_required(tmp_path: Path) -> None:
    pods = PodDirectory()
    pods.update({"GPU-x": []}, {})
    with pytest.raises(NoData):
        PodResourcesCollector(settings(tmp_path), pods).collect()
    runner = CollectorRunner([PodResourcesCollector(settings(tmp_path, required=True, timeout_seconds=0.5), pods)])
    [result] = runner.run_once()
    runner.close()
    assert not result.success and "UNAVAILABLE" in result.error
    assert dict((dict(s.labels)["__name__"], s.value) for s in self_metrics([result]))[
        "watchdog_collector_success"] == 0.0


def test_failure_empties_the_directory_and_recovers(tmp_path: Path, nvml: FakeNvml) -> None:
    gpu = uuids(nvml)
    pods = PodDirectory()
    kubelet = FakeKubelet([FakePod("inference", "vllm-0", {"engine": {"nvidia.com/gpu": [gpu[0]]}})])
    collector = PodResourcesCollector(settings(tmp_path, required=True, timeout_seconds=0.5), pods, nvml=nvml)
    runner = CollectorRunner([collector])
    with kubelet_server(tmp_path / "kubelet.sock", kubelet):
        [ok] = runner.run_once(now=100.0)
        assert runner.run_once(now=105.0) == []  # refreshed every refresh_seconds (10) of tick time only
    assert ok.success and pods.labels_for({"uuid": gpu[0]})["pod"] == "vllm-0"
    [down] = runner.run_once(now=110.0)  # the kubelet restarts: its socket is gone
    assert not down.success and pods.labels_for({"uuid": gpu[0]}) == {}  # unknown, not stale
    with kubelet_server(tmp_path / "kubelet.sock", kubelet):
        [back] = runner.run_once(now=120.0)
    runner.close()
    assert back.success and pods.labels_for({"uuid": gpu[0]})["pod"] == "vllm-0"


def test_factory_is_registered_and_honours_enabled(tmp_path: Path) -> None:
    from watchdog.collectors.registry import FACTORIES

    assert FACTORIES["pod_resources"] is pod_resources_collectors
    on = settings_of({"pod_resources": {"socket": str(tmp_path / "k.sock")}})
    assert [c.name for c in pod_resources_collectors(on, CollectorContext(pods=PodDirectory()))] == ["pod_resources"]
    off = settings_of({"pod_resources": {"enabled": False}})
    assert pod_resources_collectors(off, CollectorContext(pods=PodDirectory())) == []
    assert on.pod_resources.pod_labels is False and on.pod_resources.refresh_seconds == 10


class MigNvml:
    """The fake NVML with MIG slots on GPU 0 (two MIG devices), which the fake itself does not model."""

    def __init__(self, nvml: FakeNvml, migs: list[str]) -> None:
        self._nvml = nvml
        self._migs = migs

    def __getattr__(self, name: str) -> object:
        return getattr(self._nvml, name)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object) -> int:
        return 7 if self._nvml.nvmlDeviceGetIndex(handle) == 0 else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, slot: int) -> str:
        if slot >= len(self._migs):
            raise self._nvml.NVMLError(self._nvml.NVML_ERROR_NOT_FOUND)
        return f"mig-handle-{slot}"

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        if isinstance(handle, str):
            return self._migs[int(handle.rsplit("-", 1)[1])]
        return str(self._nvml.nvmlDeviceGetUUID(handle))


def test_mig_devices_are_attributed_to_their_parent_gpu_through_nvml(tmp_path: Path, nvml: FakeNvml) -> None:
    gpu = uuids(nvml)
    migs = ["MIG-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", "MIG-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"]
    orphan = "MIG-cccccccc-0000-0000-0000-000000000000"  # on no GPU NVML reports
    pods = PodDirectory()
    kubelet = FakeKubelet([FakePod("a", "slice-0", {"m": {"nvidia.com/mig-3g.40gb": [migs[0]]}}),
                           FakePod("b", "slice-1", {"m": {"nvidia.com/mig-3g.40gb": [migs[1]]}}),
                           FakePod("c", "orphan", {"m": {"nvidia.com/mig-1g.10gb": [orphan]}})])
    with kubelet_server(tmp_path / "kubelet.sock", kubelet):
        samples = PodResourcesCollector(settings(tmp_path), pods, nvml=MigNvml(nvml, migs)).collect()
    info = {d["pod"]: d for d in by_name(samples, "watchdog_gpu_pod_info")}
    assert (info["slice-0"]["gpu"], info["slice-0"]["uuid"], info["slice-0"]["device"]) == ("0", gpu[0], migs[0])
    assert (info["slice-1"]["gpu"], info["slice-1"]["uuid"]) == ("0", gpu[0])
    assert "gpu" not in info["orphan"] and info["orphan"]["uuid"] == orphan
    assert pods.labels_for({"uuid": gpu[0]}) == {"namespace": "a,b", "pod": "slice-0,slice-1", "container": "m"}
