"""The exporter catalogue is complete and has nothing extra.

The whole agent pipeline runs (on simulated time) against the fake NVML with an H100 profile and a fault
for each kind of hardware trouble, two engine simulator processes over loopback HTTP (one of them flapping
down, the other canary-probed on a loopback OpenAI API and its log followed), a kernel-log file with Xid,
SXid and OOM-kill lines, the shipped rules plus one alert of this test, runbooks in suggest mode and the
log notifier; then its real exporter is scraped over HTTP. Every exported ``watchdog_*`` series (and
``ALERTS``, ``ALERTS_FOR_STATE``) must be in ``watchdog/exporter/catalogue.yaml`` with the labels it lists,
and every catalogue entry must have been exported. With the default config, neither the engines' own
series nor Prometheus' per-target ``up``/``scrape_*`` are exported.

It runs in two modes. ``default``: the config's defaults, where the entries of the optional modes
(``source: dcgm``, ``source: pod_resources``) must not be exported. ``kubernetes-dcgm``: a kubelet-like
PodResources server gives GPUs to pods and the engines run in pod cgroups, ``pod_resources.pod_labels`` and
``exporter.dcgm_compatible`` are on, and every entry must be exported; series with ``uuid`` or ``job``
may then carry ``namespace``, ``pod`` and ``container`` as well.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest
import yaml

from tests.support.kubelet import FakeKubelet, FakePod, kubelet_server
from tests.support.openai import openai_server
from tests.support.sysfs import make_sysfs
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config.settings import EngineLogSettings, EngineProbeSettings, section_settings
from watchdog.daemon.serve import build_exporter
from watchdog.demo.gpu_driver import GpuSimulator
from watchdog.demo.runner import demo_config, start_engines, stop_engines
from watchdog.demo.scenario import load_scenario
from watchdog.exporter.catalogue import load_catalogue
from watchdog.pods.directory import PodDirectory

from .conftest import http_get

SIM_START = 1_800_000_000.0
ENGINE_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "engine_logs"
TICKS = 75
AGENT_OWNED = re.compile(r"^(watchdog_.*|ALERTS|ALERTS_FOR_STATE|DCGM_FI_.*)$")
OPTIONAL_MODE_SOURCES = {"dcgm", "pod_resources"}  # catalogue entries exported only in the kubernetes-dcgm mode
POD_LABELS = {"namespace", "pod", "container"}
NOT_EXPORTED = re.compile(r"^(up|scrape_.*|vllm:.*|sglang:.*)$")
# Labels every series of a family may carry beyond those the catalogue lists (alert labels on ALERTS).
OPEN_LABEL_SETS = {"ALERTS", "ALERTS_FOR_STATE"}

SCENARIO = {
    "name": "catalogue-coverage",
    "description": "Every fault kind on its own GPU, a busy engine and a flapping one.",
    "profile": "h100-sxm-8",
    "interval": "1s",
    "duration": f"{TICKS}s",
    "engines": [
        {"job": "vllm-busy", "model": "meta-llama/Llama-3.1-70B-Instruct", "gpus": [0, 1, 2, 3],
         "engine_args": ["--tensor-parallel-size", "4", "--max-num-seqs", "256", "--max-model-len", "32768",
                         "--gpu-memory-utilization", "0.9", "--enable-chunked-prefill", "--enable-prefix-caching"],
         "knobs": {"kv_usage": "0.5x5 0.5+0.1x4 0.98", "waiting": "0x5 0+10x10 100",
                   "preemption_rate": "0x5 3", "abort_ratio": "0x10 0.5"}},
        {"job": "vllm-flappy", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": [4, 5, 6, 7],
         "knobs": {"up": "1x20 0x10 1"}},
    ],
    "faults": [
        {"at": "3s", "gpu": 5, "fault": "xid", "params": {"xid": 79}},
        {"at": "3s", "gpu": 5, "fault": "gpu_lost"},
        {"at": "4s", "gpu": 2, "fault": "pcie_downtrain", "params": {"generation": 3, "width": 4}},
        {"at": "4s", "gpu": 1, "fault": "nvlink_down", "params": {"link": 3}},
        {"at": "5s", "gpu": 1, "fault": "nvlink_crc_burst"},
        {"at": "5s", "gpu": 3, "fault": "ecc_uncorrectable"},
        {"at": "6s", "gpu": 3, "fault": "row_remap_pending"},
        {"at": "6s", "gpu": 4, "fault": "hw_slowdown"},
        {"at": "7s", "gpu": 6, "fault": "thermal_throttle"},
        {"at": "8s", "fault": "oom_kill", "params": {"pid": 4242, "process": "python3"}},
    ],
}

# An alert of this test, so ALERTS/ALERTS_FOR_STATE and the notifier/runbook counters are exercised
# whatever the shipped rule pack holds.
TEST_RULES = {"groups": [{"name": "catalogue-test", "rules": [
    {"alert": "CatalogueTestXid", "expr": "increase(watchdog_gpu_xid_errors_total[5m]) > 0",
     "labels": {"severity": "critical"},
     "annotations": {"summary": "XID {{ $labels.xid }} on GPU {{ $labels.gpu }}",
                     "description": "test", "runbook": "gpu-xid"}},
    {"alert": "CatalogueTestPending", "expr": "watchdog_gpu_lost > 0", "for": "1h",
     "labels": {"severity": "warning"},
     "annotations": {"summary": "lost", "description": "test", "runbook": "gpu-fallen-off-bus"}},
]}]}

NVML_ERROR_UNKNOWN = 999


def _fail_once(at: float) -> Callable[[float], None]:
    """A before-tick hook that raises once (at simulated time ``at``): a failing stage is counted."""
    def hook(now: float) -> None:
        if now == at:
            raise RuntimeError("injected stage failure (catalogue test)")
    return hook


SXID_LINES = [
    "[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
]


def _parse_exposition(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    pattern = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head = line.rsplit(" ", 1)[0]
        name, _, rest = head.partition("{")
        yield name, dict(pattern.findall(rest))


def _pod_cgroups(proc: Path, containers: Path, pods: PodDirectory) -> Callable[[float], None]:
    """A before-tick hook: each engine root the agent noted runs in a pod's cgroup, named in the kubelet's
    container log directory (what a node with the engines in pods shows)."""
    def hook(now: float) -> None:
        for (job, _), pid in pods.engine_pids().items():
            container_id = f"{pid:064x}"
            (proc / str(pid)).mkdir(parents=True, exist_ok=True)
            (proc / str(pid) / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-pod{pid:032x}.slice/cri-containerd-{container_id}.scope\n")
            (containers / f"{job}-0_inference_engine-{container_id}.log").touch()
    return hook


@pytest.fixture(scope="module", params=["default", "kubernetes-dcgm"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, mode: str) -> dict[str, set[frozenset[str]]]:
    """Run the pipeline once per mode; every exported agent-owned name with the label-name sets seen."""
    with contextlib.ExitStack() as stack:
        return _run_pipeline(tmp_path_factory, mode, stack)


def _run_pipeline(tmp_path_factory: pytest.TempPathFactory, mode: str,
                  stack: contextlib.ExitStack) -> dict[str, set[frozenset[str]]]:
    base = tmp_path_factory.mktemp("catalogue")
    scenario_path = base / "scenario.yaml"
    scenario_path.write_text(yaml.safe_dump(SCENARIO))
    rules_path = base / "test-rules.yaml"
    rules_path.write_text(yaml.safe_dump(TEST_RULES))
    kmsg = base / "kmsg.log"
    kmsg.touch()
    clock_file = base / "clock"
    now = [SIM_START]
    clock_file.write_text(repr(now[0]))
    scenario = load_scenario(str(scenario_path))
    engines = start_engines(scenario, SIM_START, clock_file=clock_file)
    agent = None
    exporter = None
    probe_server = openai_server()  # the busy engine's OpenAI API, for the canary probe's series
    _, probe_url = probe_server.__enter__()
    try:
        gpus = GpuSimulator(scenario, kmsg, SIM_START, engine_pids={e.job: e.process.pid for e in engines})
        sysfs, modules, _ = make_sysfs(base, gpus=8, loaded=True, installed=True)
        extra: dict[str, object] = {}
        if mode == "kubernetes-dcgm":
            # Hopper reports no NVLink data-CRC counter; GPU 1 reports one here (as an Ampere board does), so
            # DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL has a source series.
            gpus.nvml.set_supported("nvlink_crc_data", True, gpu=1)
            gpus.nvml.nvmlInit()
            uuids = [gpus.nvml.nvmlDeviceGetUUID(gpus.nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]
            kubelet = FakeKubelet([FakePod("inference", "vllm-busy-0", {"engine": {"nvidia.com/gpu": uuids[:4]}}),
                                   FakePod("inference", "vllm-flappy-0", {"engine": {"nvidia.com/gpu": uuids[4:]}})],
                                  allocatable={"nvidia.com/gpu": uuids})
            stack.enter_context(kubelet_server(base / "kubelet.sock", kubelet))
            (base / "proc").mkdir()
            (base / "containers").mkdir()
            extra = {"pod_resources": {"socket": str(base / "kubelet.sock"), "required": True, "pod_labels": True,
                                    "refresh_seconds": 1, "proc_root": str(base / "proc"),
                                    "container_logs_dir": str(base / "containers")},
                     "exporter": {"dcgm_compatible": True}}
        config = demo_config(scenario, engines, base, "127.0.0.1:0", host_collector=True, extra={
            "remediation": {"diagnostics": {"simulated": False}},  # run them: their self-metrics count
            # A fixture PCI bus; one GPU vanished (9 expected): a health problem.
            "collectors": {"nvml": {"sysfs_root": str(sysfs), "modules_root": str(modules), "expected_gpus": 9}},
            **extra})
        config = replace(config, rules=replace(config.rules, paths=(*config.rules.paths, str(rules_path))))
        engine_log = base / "engine.log"
        engine_log.touch()
        probe = section_settings(EngineProbeSettings, "engines[].probe", {
            "url": f"{probe_url}/v1/completions", "model": "m", "interval_seconds": 5, "timeout_seconds": 2})
        busy = replace(config.engines[0], probe=probe, log=EngineLogSettings(file=str(engine_log), unit=None))
        config = replace(config, engines=(busy, *config.engines[1:]))
        agent = Agent(config, clock=lambda: now[0], background_scrapes=False,
                      context=CollectorContext(nvml=gpus.nvml))
        agent.before_tick.append(gpus.advance)
        if mode == "kubernetes-dcgm":
            agent.before_tick.append(_pod_cgroups(base / "proc", base / "containers", agent.pods))
        agent.before_tick.append(_fail_once(at=SIM_START + 12))
        for step in range(TICKS):
            now[0] = SIM_START + step
            clock_file.write_text(repr(now[0]))
            if step == 10:
                fallen = gpus.nvml.gpus[6].pci_bus_id.lower()
                with kmsg.open("a") as handle:
                    handle.write("\n".join([*SXID_LINES, f"NVRM: GPU {fallen}: GPU has fallen off the bus."]) + "\n")
                gpus.nvml.fail("nvmlDeviceGetPowerUsage", NVML_ERROR_UNKNOWN, gpu=7)
                with engine_log.open("a") as handle:
                    handle.write((ENGINE_LOGS / "vllm-mp-nccl-timeout.log").read_text(encoding="utf-8"))
            agent.tick()
        exporter = build_exporter(agent, "127.0.0.1:0")
        exporter.start()
        http_get(exporter.url + "/-/ready")
        text = http_get(exporter.url + "/metrics").text
    finally:
        if exporter is not None:
            exporter.stop()
        if agent is not None:
            agent.close(timeout_seconds=2)
        stop_engines(engines)
        probe_server.__exit__(None, None, None)
    names: dict[str, set[frozenset[str]]] = {}
    for name, labels in _parse_exposition(text):
        names.setdefault(name, set()).add(frozenset(labels))
    return names


def _optional_labels() -> dict[str, set[str]]:
    """``optional_labels`` of catalogue entries (labels present only on some engines or versions)."""
    text = (resources.files("watchdog.exporter") / "catalogue.yaml").read_text(encoding="utf-8")
    return {entry["name"]: set(entry.get("optional_labels", [])) for entry in yaml.safe_load(text)}


def test_every_exported_series_is_catalogued(exported: dict[str, set[frozenset[str]]]) -> None:
    catalogue = load_catalogue()
    missing = sorted({name for name in exported if AGENT_OWNED.match(name)} - set(catalogue))
    assert not missing, f"exported but not in catalogue.yaml: {missing}"


def test_exported_labels_match_the_catalogue(exported: dict[str, set[frozenset[str]]], mode: str) -> None:
    catalogue = load_catalogue()
    optional = _optional_labels()
    wrong: list[str] = []
    for name, label_sets in sorted(exported.items()):
        spec = catalogue.get(name)
        if spec is None or not AGENT_OWNED.match(name):
            continue
        listed = set(spec.labels)
        for labels in label_sets:
            extra = set(labels) - listed - optional.get(name, set())
            if mode == "kubernetes-dcgm" and ({"uuid", "job"} & set(labels)):
                extra -= POD_LABELS  # pod_resources.pod_labels: the pod of the GPU or engine
            if extra and name not in OPEN_LABEL_SETS:
                wrong.append(f"{name}: labels {sorted(extra)} not listed")
            if not listed <= set(labels) and name not in OPEN_LABEL_SETS:
                wrong.append(f"{name}: listed labels {sorted(listed - set(labels))} missing")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_engine_and_prometheus_scrape_series_are_not_exported(exported: dict[str, set[frozenset[str]]]) -> None:
    assert "watchdog_engine_up" in exported and any(name.startswith("engine:") for name in exported)
    assert not sorted(name for name in exported if NOT_EXPORTED.match(name))


def test_every_catalogue_entry_is_exported(exported: dict[str, set[frozenset[str]]], mode: str) -> None:
    sources = _sources()
    expected = {name for name in load_catalogue()
                if mode == "kubernetes-dcgm" or sources.get(name) not in OPTIONAL_MODE_SOURCES}
    never = sorted(expected - set(exported))
    assert not never, f"in catalogue.yaml but never exported by this pipeline ({mode}): {never}"
    if mode == "default":
        optional = sorted(name for name in exported if sources.get(name) in OPTIONAL_MODE_SOURCES)
        assert not optional, f"exported although their mode is off: {optional}"


def test_pod_labels_reach_gpu_and_engine_series(exported: dict[str, set[frozenset[str]]], mode: str) -> None:
    with_pods = {name for name, label_sets in exported.items() if any(labels >= POD_LABELS for labels in label_sets)}
    if mode == "default":
        assert not with_pods
    else:
        assert {"watchdog_gpu_temperature_celsius", "watchdog_engine_process_up", "DCGM_FI_DEV_GPU_UTIL",
                "watchdog_engine_up"} <= with_pods


def _sources() -> dict[str, str]:
    text = (resources.files("watchdog.exporter") / "catalogue.yaml").read_text(encoding="utf-8")
    return {entry["name"]: entry.get("source", "") for entry in yaml.safe_load(text)}


def test_catalogue_entries_are_well_formed() -> None:
    for name, spec in load_catalogue().items():
        assert spec.type in {"counter", "gauge"}, name
        assert spec.help and not spec.help.endswith(" "), name
        assert name.endswith("_total") == (spec.type == "counter"), f"{name}: counters and only counters end in _total"
