"""Engine process trees with real processes: found by port or command line, restarts, TP groups, NUMA."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.settings import settings_of
from watchdog.collectors.base import CollectorContext
from watchdog.collectors.processes import (
    EngineTarget,
    ProcessCollector,
    engine_targets,
    numa_mismatch,
    parse_cpulist,
    process_collectors,
    read_cpu_nodes,
    read_gpu_numa_node,
)
from watchdog.fakes.pynvml import FakeNvml
from watchdog.infra.state import StateDB
from watchdog.model import label_value, metric_name

SERVER = """
import socket, subprocess, sys, time
port, token = int(sys.argv[1]), sys.argv[2]
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", port))
sock.listen()
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", token + "-worker"])
        for _ in range(2)]
print(sock.getsockname()[1], " ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


class Engine:
    """A real engine-like process tree: a listener on 127.0.0.1 with two worker children."""

    def __init__(self, script: Path, port: int = 0, token: str = "", args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.token = token or f"fake-engine-{uuid.uuid4().hex[:8]}"
        self.proc = subprocess.Popen([sys.executable, str(script), str(port), self.token, *args],
                                     stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().split()
        self.port = int(first[0])
        self.workers = [int(pid) for pid in first[1:]]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "fake_engine.py"
    path.write_text(SERVER)
    return path


@pytest.fixture
def engines(script: Path) -> Iterator[list[Engine]]:
    started: list[Engine] = []
    yield started
    for engine in started:
        engine.stop()


def start(engines: list[Engine], script: Path, port: int = 0, token: str = "", args: tuple[str, ...] = (),
          env: dict[str, str] | None = None) -> Engine:
    engine = Engine(script, port, token, args, env)
    engines.append(engine)
    return engine


def series(samples: list[Any], name: str) -> list[Any]:
    return [s for s in samples if metric_name(s.labels) == name]


def one(samples: list[Any], name: str) -> float:
    [sample] = series(samples, name)
    return float(sample.value)


def targets(config_engines: list[dict[str, Any]]) -> list[EngineTarget]:
    return engine_targets(settings_of({"engines": config_engines}).engines)


def collector(tmp_path: Path, config_engines: list[dict[str, Any]], **kw: Any) -> ProcessCollector:
    return ProcessCollector(targets(config_engines), StateDB(tmp_path / "state.db"), **kw)


def test_found_by_listening_port(tmp_path: Path, script: Path, engines: list[Engine]) -> None:
    engine = start(engines, script)
    proc = collector(tmp_path, [{"job": "vllm", "url": f"http://127.0.0.1:{engine.port}/metrics"}])
    samples = proc.collect()
    for sample in samples:
        assert label_value(sample.labels, "job") == "vllm"
        assert label_value(sample.labels, "instance") == f"127.0.0.1:{engine.port}"
    assert one(samples, "watchdog_engine_process_up") == 1
    assert one(samples, "watchdog_engine_process_count") == 3
    assert one(samples, "watchdog_engine_process_threads") >= 3
    assert one(samples, "watchdog_engine_process_resident_memory_bytes") > 1_000_000
    assert one(samples, "watchdog_engine_process_cpu_seconds_total") > 0
    assert one(samples, "watchdog_engine_process_start_time_seconds") == pytest.approx(
        psutil.Process(engine.proc.pid).create_time())
    assert one(samples, "watchdog_engine_process_restarts_total") == 0


def test_found_by_command_line_match_topmost_process(tmp_path: Path, script: Path,
                                                     engines: list[Engine]) -> None:
    engine = start(engines, script)  # the workers' command lines carry the token too
    proc = collector(tmp_path, [{"job": "sglang", "url": "http://127.0.0.1:1/metrics",
                                 "process": {"match": engine.token}}])
    root = proc.find_root(proc.targets[0], {})
    assert root is not None and root.pid == engine.proc.pid
    assert one(proc.collect(), "watchdog_engine_process_count") == 3


def test_restart_is_counted_and_persisted(tmp_path: Path, script: Path, engines: list[Engine]) -> None:
    first = start(engines, script)
    config = [{"job": "vllm", "url": f"http://127.0.0.1:{first.port}/metrics"}]
    proc = collector(tmp_path, config)
    assert one(proc.collect(), "watchdog_engine_process_restarts_total") == 0
    first.stop()
    down = proc.collect()
    assert one(down, "watchdog_engine_process_up") == 0
    assert one(down, "watchdog_engine_process_restarts_total") == 0
    start(engines, script, port=first.port)
    assert one(proc.collect(), "watchdog_engine_process_restarts_total") == 1
    assert one(proc.collect(), "watchdog_engine_process_restarts_total") == 1  # same process: no new restart
    again = collector(tmp_path, config)  # the agent restarts: the count survives
    assert one(again.collect(), "watchdog_engine_process_restarts_total") == 1


def test_not_running(tmp_path: Path) -> None:
    proc = collector(tmp_path, [{"job": "vllm", "url": "http://127.0.0.1:9/metrics",
                                 "process": {"match": "no-such-engine-" + uuid.uuid4().hex}}])
    samples = proc.collect()
    assert one(samples, "watchdog_engine_process_up") == 0
    assert series(samples, "watchdog_engine_process_cpu_seconds_total") == []


def sysfs(tmp_path: Path, gpu_nodes: dict[str, int]) -> Path:
    root = tmp_path / "sys"
    for node, cpus in (("node0", "0"), ("node1", "1-1023")):
        (root / "devices/system/node" / node).mkdir(parents=True)
        (root / "devices/system/node" / node / "cpulist").write_text(cpus + "\n")
    for bus, node in gpu_nodes.items():
        (root / "bus/pci/devices" / bus).mkdir(parents=True)
        (root / "bus/pci/devices" / bus / "numa_node").write_text(f"{node}\n")
    return root


def test_tp_group_and_numa_mismatch(tmp_path: Path, script: Path, engines: list[Engine]) -> None:
    engine = start(engines, script)
    nvml = FakeNvml.from_profile("h100-sxm-8")
    nvml.set_processes(0, [(engine.workers[0], 40 << 30)])  # rank 0 on GPU 0 (0000:18:00.0, NUMA node 1)
    nvml.set_processes(1, [(engine.workers[1], 41 << 30)])  # rank 1 on GPU 1 (0000:2a:00.0, NUMA node 0)
    nvml.set_processes(5, [(1, 1 << 30)])  # someone else's process
    for worker in engine.workers:
        os.sched_setaffinity(worker, {0})  # both ranks pinned to CPU 0: NUMA node 0
    root = sysfs(tmp_path, {"0000:18:00.0": 1, "0000:2a:00.0": 0})
    proc = collector(tmp_path, [{"job": "vllm", "url": f"http://127.0.0.1:{engine.port}/metrics"}],
                     nvml=nvml, sysfs_root=root)
    samples = proc.collect()
    held = {label_value(s.labels, "gpu"): s.value for s in series(samples, "watchdog_engine_gpu_info")}
    assert held == {"0": 1.0, "1": 1.0}
    uuids = {label_value(s.labels, "gpu"): label_value(s.labels, "uuid")
             for s in series(samples, "watchdog_engine_gpu_info")}
    assert uuids["0"] == nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0))
    mismatch = {label_value(s.labels, "gpu"): s.value
                for s in series(samples, "watchdog_engine_numa_mismatch")}
    assert mismatch == {"0": 1.0, "1": 0.0}
    from watchdog.exporter.catalogue import load_catalogue

    catalogue = load_catalogue()
    for sample in samples:  # every series is catalogued, with exactly its catalogued labels
        spec = catalogue[metric_name(sample.labels)]
        assert {k for k, _ in sample.labels} - {"__name__"} == set(spec.labels), spec.name
    # 10 process and GPU series + the config audit's TP size and two NCCL flags (a plain python command line)
    assert len({metric_name(s.labels) for s in samples}) == 13
    memory = {label_value(s.labels, "gpu"): s.value
              for s in series(samples, "watchdog_engine_gpu_memory_used_bytes")}
    assert memory == {"0": float(40 << 30), "1": float(41 << 30)}


def test_instance_matches_the_engine_scrape() -> None:
    for url, instance in (("http://127.0.0.1:8000/metrics", "127.0.0.1:8000"), ("http://localhost/metrics",
                          "localhost:80"), ("https://[::1]/m", "[::1]:443"),
                          ("http://10.0.0.5:30000/metrics", "10.0.0.5:30000")):
        [target] = targets([{"job": "j", "url": url}])
        assert target.instance == instance


def test_targets_from_config() -> None:
    config = settings_of(
        "engines:\n"
        "  - {job: vllm, url: 'http://127.0.0.1:8000/metrics'}\n"
        "  - {job: sglang, url: 'http://127.0.0.1:30000/metrics',\n"
        "     process: {match: 'sglang.launch_server', port: 30001}}\n")
    first, second = engine_targets(config.engines)
    assert (first.job, first.port, first.match) == ("vllm", 8000, None)
    assert second.port == 30001
    assert second.match is not None and second.match.pattern == "sglang.launch_server"


def test_factory(tmp_path: Path) -> None:
    config = settings_of(f"state_dir: {tmp_path}\nengines:\n  - {{job: vllm, url: 'http://127.0.0.1:8000/m'}}\n")
    [proc] = process_collectors(config, CollectorContext())
    assert proc.name == "processes" and isinstance(proc.targets[0], EngineTarget)
    none = settings_of("processes: {enabled: false}\nengines:\n  - {job: v, url: 'http://127.0.0.1:1/m'}\n")
    assert process_collectors(none, CollectorContext()) == []
    assert process_collectors(settings_of(""), CollectorContext()) == []


# ---- pure helpers -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "cpus"),
                         [("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}), ("5", {5}), ("", set())])
def test_parse_cpulist(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == cpus


def test_numa_reading(tmp_path: Path) -> None:
    root = sysfs(tmp_path, {"0000:18:00.0": 1, "0000:2a:00.0": -1})
    nodes = read_cpu_nodes(root)
    assert nodes[0] == 0 and nodes[1] == 1 and nodes[1023] == 1
    assert read_gpu_numa_node(root, "00000000:18:00.0") == 1
    assert read_gpu_numa_node(root, "00000000:2A:00.0") is None  # -1: single node / unknown
    assert read_gpu_numa_node(root, "00000000:99:00.0") is None
    assert read_cpu_nodes(tmp_path / "nothing") == {}


@pytest.mark.parametrize(("gpu_node", "affinity", "expected"), [
    (1, {0}, True), (0, {0}, False), (1, {0, 1}, False), (None, {0}, False), (1, set(), False)])
def test_numa_mismatch(gpu_node: int | None, affinity: set[int], expected: bool) -> None:
    assert numa_mismatch(gpu_node, affinity, {0: 0, 1: 1}) is expected


class WalkCounting:
    """The real psutil, counting the passes over every process (``_ppid_map``)."""

    def __init__(self) -> None:
        self.walks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(psutil, name)

    def _ppid_map(self) -> dict[int, int]:
        self.walks += 1
        return dict(psutil._ppid_map())  # type: ignore[attr-defined]


def test_one_pass_over_the_host_serves_every_engine_and_is_repeated_only_every_refresh(
        tmp_path: Path, script: Path, engines: list[Engine], monkeypatch: pytest.MonkeyPatch) -> None:
    engine = start(engines, script)
    ps = WalkCounting()
    url = f"http://127.0.0.1:{engine.port}/metrics"
    proc = collector(tmp_path, [{"job": f"vllm-{i}", "url": url} for i in range(3)], ps=ps)
    for _ in range(2):
        counts = [s.value for s in series(proc.collect(), "watchdog_engine_process_count")]
        assert counts == [3.0, 3.0, 3.0]  # the same tree as psutil's children(recursive=True) finds
        assert ps.walks == 1
    assert {p.pid for p in proc.tree(psutil.Process(engine.proc.pid), proc.children_map())} == {
        engine.proc.pid, *engine.workers}
    monkeypatch.setattr("watchdog.collectors.processes.TREE_REFRESH_SECONDS", 0.0)
    proc.collect()
    assert ps.walks == 3  # children_map above, then one walk for the three engines


class ReadCounting:
    """The real psutil, counting command-line and environment reads; ``environ_denied``: every
    environment unreadable, as another user's is to an agent that is not root."""

    def __init__(self, environ_denied: bool = False) -> None:
        self.reads: list[str] = []
        counting = self

        class Process(psutil.Process):
            def cmdline(self) -> list[str]:
                counting.reads.append("cmdline")
                return super().cmdline()

            def environ(self) -> dict[str, str]:
                counting.reads.append("environ")
                if environ_denied:
                    raise psutil.AccessDenied(self.pid)
                return super().environ()

        self.Process = Process

    def __getattr__(self, name: str) -> Any:
        return getattr(psutil, name)


def config(samples: list[Any]) -> dict[str, float]:
    prefix = "watchdog_engine_config_"
    return {metric_name(s.labels)[len(prefix):]: s.value for s in samples if metric_name(s.labels).startswith(prefix)}


def test_engine_config_is_read_once_per_root_process_and_again_after_a_restart(
        tmp_path: Path, script: Path, engines: list[Engine]) -> None:
    first = start(engines, script, args=("--max-num-seqs", "64", "--tensor-parallel-size", "2"),
                  env={**os.environ, "NCCL_ASYNC_ERROR_HANDLING": "1"})
    ps = ReadCounting()
    proc = collector(tmp_path, [{"job": "vllm", "url": f"http://127.0.0.1:{first.port}/metrics"}], ps=ps)
    for _ in range(3):
        assert config(proc.collect()) == {"max_num_seqs": 64.0, "tensor_parallel_size": 2.0,
                                          "nccl_async_error_handling": 1.0, "nccl_timeout_set": 0.0}
    assert ps.reads == ["cmdline", "environ"]
    first.stop()
    down = proc.collect()
    assert one(down, "watchdog_engine_process_up") == 0 and config(down) == {}
    start(engines, script, port=first.port, args=("--max-num-seqs", "128"),
          env={**os.environ, "NCCL_WATCHDOG_TIMEOUT": "600"})  # the same engine, restarted with new flags
    for _ in range(2):
        assert config(proc.collect()) == {"max_num_seqs": 128.0, "tensor_parallel_size": 1.0,
                                          "nccl_async_error_handling": 0.0, "nccl_timeout_set": 1.0}
    assert ps.reads == ["cmdline", "environ"] * 2


def test_engine_config_without_a_readable_environment(tmp_path: Path, script: Path,
                                                      engines: list[Engine]) -> None:
    engine = start(engines, script, args=("--max-model-len", "4096"),
                   env={**os.environ, "NCCL_ASYNC_ERROR_HANDLING": "1"})
    proc = collector(tmp_path, [{"job": "vllm", "url": f"http://127.0.0.1:{engine.port}/metrics"}],
                     ps=ReadCounting(environ_denied=True))
    for _ in range(2):
        samples = proc.collect()
        assert one(samples, "watchdog_engine_process_up") == 1
        assert config(samples) == {"max_model_len_tokens": 4096.0, "tensor_parallel_size": 1.0,
                                   "nccl_async_error_handling": 0.0, "nccl_timeout_set": 0.0}
