"""End to end on the fake NVML: a real agent, the kubelet-like gRPC server, the shipped GPU rules and the
real exporter over loopback HTTP. A GPU held by a pod falls off the bus: the alert names that pod; the
exported GPU series carry their pods; the store keeps the plain identity; with dcgm-exporter
compatibility on, the DCGM_FI_* fields carry the agent's values in dcgm-exporter's units."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.kubelet import FakeKubelet, FakePod, kubelet_server
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_settings
from watchdog.daemon.serve import build_exporter
from watchdog.fakes.pynvml import FakeNvml
from watchdog.model import AlertState

REPO = Path(__file__).resolve().parents[2]
START = 1_800_000_000.0
MIB = 1024 * 1024


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    pattern = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            name, _, rest = head.partition("{")
            out.append((name, dict(pattern.findall(rest)), float(value)))
    return out


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Agent, FakeNvml, list[str], list[float]]]:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.nvmlInit()
    uuids = [nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]
    sock = tmp_path / "kubelet.sock"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "node": "gpu-node-7", "state_dir": str(tmp_path / "state"),
        "rules": {"paths": [str(REPO / "rules" / "gpu.yaml")]},
        "collectors": {"host": {"enabled": False}}, "kmsg": {"enabled": False},
        "notifiers": {"log": {"enabled": False}},
        "pod_resources": {"socket": str(sock), "required": True, "pod_labels": True, "refresh_seconds": 1},
        "exporter": {"dcgm_compatible": True}}))
    kubelet = FakeKubelet([FakePod("inference", "vllm-llama-0", {"engine": {"nvidia.com/gpu": uuids[2:4]}}),
                           FakePod("team-a", "notebook-1", {"jupyter": {"nvidia.com/gpu": [f"{uuids[5]}::0"]}}),
                           FakePod("team-b", "notebook-2", {"jupyter": {"nvidia.com/gpu": [f"{uuids[5]}::1"]}})],
                          allocatable={"nvidia.com/gpu": uuids})
    now = [START]
    with kubelet_server(sock, kubelet):
        agent = Agent(load_settings(config), config_path=config, clock=lambda: now[0],
                      context=CollectorContext(nvml=nvml))
        try:
            yield agent, nvml, uuids, now
        finally:
            agent.close(timeout_seconds=2)


def scrape(agent: Agent) -> list[tuple[str, dict[str, str], float]]:
    exporter = build_exporter(agent, "127.0.0.1:0")
    exporter.start()
    try:
        with urllib.request.urlopen(exporter.url + "/metrics", timeout=10) as response:
            return parse(response.read().decode())
    finally:
        exporter.stop()


def test_fault_on_a_pod_gpu_names_the_pod(world: tuple[Agent, FakeNvml, list[str], list[float]]) -> None:
    agent, nvml, uuids, now = world
    for step in range(3):
        now[0] = START + step
        agent.tick()
    nvml.set(3, lost=True)  # GPU 3, held by inference/vllm-llama-0, falls off the bus
    alerts = []
    for step in range(3, 8):
        now[0] = START + step
        alerts = agent.tick()
    firing = [a for a in alerts if a.name == "GpuFallenOffBus" and a.state is AlertState.FIRING]
    assert len(firing) == 1
    assert {k: firing[0].labels[k] for k in ("gpu", "uuid", "namespace", "pod", "container")} == {
        "gpu": "3", "uuid": uuids[3], "namespace": "inference", "pod": "vllm-llama-0", "container": "engine"}
    # the store keeps the plain identity: no pod label inside (rules see no new series when pods move)
    stored = [dict(s.labels) for s in agent.store.select([("__name__", "=", "watchdog_gpu_temperature_celsius")])]
    assert stored and not any("pod" in labels for labels in stored)

    page = scrape(agent)
    alert_series = [labels for name, labels, _ in page
                    if name == "ALERTS" and labels.get("alertname") == "GpuFallenOffBus"]
    assert alert_series and all(labels["pod"] == "vllm-llama-0" for labels in alert_series)
    temps = {labels["gpu"]: labels for name, labels, _ in page if name == "watchdog_gpu_temperature_celsius"}
    assert temps["2"]["pod"] == "vllm-llama-0" and temps["2"]["namespace"] == "inference"
    assert (temps["5"]["namespace"], temps["5"]["pod"]) == ("team-a,team-b", "notebook-1,notebook-2")
    assert "pod" not in temps["0"]
    pod_info = {(labels["gpu"], labels["pod"]) for name, labels, _ in page if name == "watchdog_gpu_pod_info"}
    assert pod_info == {("2", "vllm-llama-0"), ("3", "vllm-llama-0"), ("5", "notebook-1"), ("5", "notebook-2")}


def test_dcgm_fields_carry_our_values_in_dcgm_units(world: tuple[Agent, FakeNvml, list[str], list[float]]) -> None:
    agent, nvml, uuids, now = world
    nvml.set(2, utilization_gpu=73, temperature_celsius=64, power_watts=512.5, sm_clock_mhz=1755,
             memory_clock_mhz=2619, memory_used_bytes=40 * 1024 * MIB, pcie_replays=7)
    for step in range(3):
        now[0] = START + step
        agent.tick()
    page = scrape(agent)
    ours = {(name, labels.get("gpu", "")): (labels, value) for name, labels, value in page
            if name.startswith("watchdog_gpu_") and not labels.get("link") and not labels.get("type")}
    dcgm = {(name, labels["gpu"]): (labels, value) for name, labels, value in page if name.startswith("DCGM_FI_")}

    def ours_value(name: str, gpu: str = "2") -> float:
        return ours[(name, gpu)][1]

    labels, util = dcgm[("DCGM_FI_DEV_GPU_UTIL", "2")]
    assert util == pytest.approx(ours_value("watchdog_gpu_utilization_ratio") * 100) == pytest.approx(73)
    info = ours[("watchdog_gpu_info", "2")][0]
    assert labels == {"gpu": "2", "UUID": uuids[2], "device": "nvidia2", "modelName": info["name"],
                      "Hostname": "gpu-node-7", "pci_bus_id": info["pci_bus_id"],
                      "DCGM_FI_DRIVER_VERSION": info["driver_version"],
                      "namespace": "inference", "pod": "vllm-llama-0", "container": "engine"}
    assert dcgm[("DCGM_FI_DEV_GPU_TEMP", "2")][1] == ours_value("watchdog_gpu_temperature_celsius") == 64
    assert dcgm[("DCGM_FI_DEV_POWER_USAGE", "2")][1] == pytest.approx(ours_value("watchdog_gpu_power_watts"))
    assert dcgm[("DCGM_FI_DEV_SM_CLOCK", "2")][1] == pytest.approx(1755)
    assert dcgm[("DCGM_FI_DEV_MEM_CLOCK", "2")][1] == pytest.approx(ours_value("watchdog_gpu_memory_clock_hertz") / 1e6)
    used = ours_value("watchdog_gpu_memory_used_bytes")
    assert dcgm[("DCGM_FI_DEV_FB_USED", "2")][1] == pytest.approx(used / MIB) == pytest.approx(40 * 1024)
    reserved = ours.get(("watchdog_gpu_memory_reserved_bytes", "2"), ({}, 0.0))[1]
    free = (ours_value("watchdog_gpu_memory_total_bytes") - used - reserved) / MIB
    assert dcgm[("DCGM_FI_DEV_FB_FREE", "2")][1] == pytest.approx(free)
    assert dcgm[("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "2")][1] == ours_value("watchdog_gpu_pcie_replays_total") == 7
    assert dcgm[("DCGM_FI_DEV_XID_ERRORS", "2")][1] == 0  # no Xid seen
    assert dcgm[("DCGM_FI_DEV_GPU_UTIL", "0")][0].get("pod") is None  # an idle GPU has no pod
    assert len({gpu for (_, gpu) in dcgm}) == 8
