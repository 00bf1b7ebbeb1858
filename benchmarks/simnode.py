"""The benchmarks' one harness: the simulated node they scrape, the agent they build, the children they compare.

Every benchmark of the suite (``benchmarks/README.md``) builds on these pieces:

- :func:`start_simulator`: the simulated node (below);
- :func:`fake_nvml`, :func:`bench_settings`, :func:`simulated_agent`, :func:`run_ticks`: the agent under
  test on a simulated clock (fake NVML over h100-sxm-8 cut to N busy GPUs, the whole default rule pack,
  default settings, 1 s ticks that wait for every engine scrape);
- :func:`env_for`, :func:`start_child`, :func:`take_turns`, :func:`print_medians`, :func:`stop`: one
  child process per checkout (``--tree NAME=PATH``), taking turns so that each sees the same load.

:func:`start_simulator` starts one child process (its CPU is not the agent's) serving, on loopback:

- per engine, the full vLLM V1 payload (``tests/fixtures/engines/vllm-v1-full.txt``: every family vLLM
  V1 exports, real buckets). Each scrape of a port is the next step of that port: counters (``_total``,
  ``_bucket``, ``_count``) grow by 0-4 (``_sum`` by a fraction), gauges move a few per cent, as a busy
  engine's would, so nothing compresses better than it would in production;
- one page of the NVML series of the simulated GPUs (the agent's own NVML collector over the demo's
  fake NVML, h100-sxm-8 cut to N GPUs), for a Prometheus to scrape with ``honor_labels``;
- optionally, churning engines: the same payload plus ``churn_series`` series of one metric
  (``vllm:request_latency_seconds{request_id=...}``) whose ``request_id`` values are new at every scrape,
  as an engine that puts a per-request value in a label would serve.

It prints the GPU page's port, then the engines' ports, then the churning engines' ports.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from watchdog.agent import Agent  # noqa: E402
from watchdog.collectors.base import CollectorContext  # noqa: E402
from watchdog.config import load_config_text  # noqa: E402
from watchdog.config.settings import Settings, settings_from_config  # noqa: E402
from watchdog.fakes.gpu_model import load_profile  # noqa: E402
from watchdog.fakes.pynvml import FakeNvml  # noqa: E402
from watchdog.infra.heap import quiet_cyclic_gc  # noqa: E402

SIM_START = 1_800_000_000.0
PAYLOAD = ROOT / "tests" / "fixtures" / "engines" / "vllm-v1-full.txt"

SIMULATOR = r"""
import math, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from watchdog.collectors.base import CollectorContext
from watchdog.collectors.nvml import nvml_collectors
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.fakes.gpu_model import load_profile
from watchdog.fakes.pynvml import FakeNvml

payload, engines, gpus, churners, churn_series = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                  int(sys.argv[4]), int(sys.argv[5]))
COUNTER = ("_total", "_bucket", "_count")
lines = []  # (series or comment, base value, kind)
for line in open(payload, encoding="utf-8"):
    line = line.rstrip("\n")
    if not line or line.startswith("#"):
        lines.append((line, None, ""))
        continue
    series, _, value = line.rpartition(" ")
    name = series.split("{", 1)[0]
    kind = "c" if name.endswith(COUNTER) else "s" if name.endswith("_sum") else "g"
    lines.append((series, float(value), kind))

# A counter line grows by (i * 7 + k * 13) % 5 at step k: 0-4, 100 every 50 steps (precomputed sums)
growth = [[0] * 51 for _ in lines]
for i, row in enumerate(growth):
    for k in range(50):
        row[k + 1] = row[k] + (i * 7 + k * 13) % 5

def render_engine(step):
    out = []
    for i, (series, base, kind) in enumerate(lines):
        if base is None:
            out.append(series)
        elif kind == "c":
            out.append(f"{series} {base + growth[i][step % 50] + 100 * (step // 50)}")
        elif kind == "s":
            out.append(f"{series} {base + 0.37 * step}")
        else:
            out.append(f"{series} {base * (1.0 + 0.05 * math.sin(step / 7.0))}")
    return ("\n".join(out) + "\n").encode()

profile = load_profile("h100-sxm-8")
profile["gpus"] = profile["gpus"][:gpus]
nvml = FakeNvml(profile)
for i in range(gpus):
    nvml.set_load(i, 90.0)
# counters read at every scrape: Prometheus sees every series in every scrape, as from a node exporter
collector = nvml_collectors(settings_from_config(load_config_text(
    "{collectors: {nvml: {counters_interval_seconds: 0}}}", "<sim>")), CollectorContext(nvml=nvml))[0]

def esc(v):
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

def render_gpus(step):
    out = []
    for s in collector.collect():
        labels = dict(s.labels)
        name = labels.pop("__name__")
        inner = ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items()))
        out.append(f"{name}{{{inner}}} {s.value!r}")
    return ("\n".join(out) + "\n").encode()

def handler(kind):
    steps = {}
    lock = threading.Lock()
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            with lock:
                client = self.headers.get("User-Agent", "")
                step = steps[client] = steps.get(client, -1) + 1
            b = render_engine(step) if kind != "gpu" else render_gpus(step)
            if kind == "churn":
                b += "".join(f'vllm:request_latency_seconds{{request_id="{step}-{k}"}} {0.001 * k}\n'
                             for k in range(churn_series)).encode()
            self.send_response(200); self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
        def log_message(self, *a): pass
    return H

ports = []
for kind in ["gpu"] + ["engine"] * engines + ["churn"] * churners:
    s = ThreadingHTTPServer(("127.0.0.1", 0), handler(kind)); s.daemon_threads = True
    threading.Thread(target=s.serve_forever, daemon=True).start(); ports.append(s.server_address[1])
print(" ".join(map(str, ports)), flush=True)
sys.stdin.read()
"""


def start_engines(engines: int, gpus: int = 1) -> tuple[subprocess.Popen[bytes], list[int]]:
    """The simulator with ``engines`` vLLM endpoints; the process and the engines' ports."""
    sim, _, ports = start_simulator(gpus, engines)
    return sim, ports


def fake_nvml(gpus: int) -> FakeNvml:
    """The h100-sxm-8 fake cut to ``gpus`` GPUs, all busy."""
    profile = load_profile("h100-sxm-8")
    profile["gpus"] = profile["gpus"][:gpus]
    nvml = FakeNvml(profile)
    for index in range(gpus):
        nvml.set_load(index, 90.0)
    return nvml


def bench_settings(ports: list[int], state_dir: Path, **extra: Any) -> Settings:
    """Default settings with the whole rule pack, one engine per port, no kmsg, processes or log notifier."""
    doc = {
        "state_dir": str(state_dir),
        "rules": {"paths": [str(ROOT / "rules" / "*.yaml")]},
        "engines": [{"job": f"vllm-{i}", "url": f"http://127.0.0.1:{port}/metrics"}
                    for i, port in enumerate(ports)],
        "kmsg": {"enabled": False},
        "processes": {"enabled": False},
        "notifiers": {"log": {"enabled": False}},
        **extra,
    }
    return settings_from_config(load_config_text(yaml.safe_dump(doc), "<bench>"))


def simulated_agent(gpus: int, ports: list[int], retention: int, workdir: Path) -> tuple[Agent, list[float]]:
    """The agent under test on a simulated clock (the returned one-element list holds its time), with the
    daemon's cyclic-collector thresholds."""
    config = bench_settings(ports, workdir / f"state-{gpus}-{len(ports)}", retention_seconds=retention)
    now = [SIM_START]
    agent = Agent(config, clock=lambda: now[0], context=CollectorContext(nvml=fake_nvml(gpus)),
                  background_scrapes=False)
    quiet_cyclic_gc()  # serve() sets them in the daemon
    return agent, now


def run_ticks(agent: Agent, now: list[float], ticks: int) -> tuple[float, list[float]]:
    """Run ``ticks`` ticks, 1 s of simulated time each; (CPU seconds in all, rules stage CPU seconds per tick)."""
    rules: list[float] = []
    cpu = 0.0
    for _ in range(ticks):
        now[0] += 1.0
        t0 = time.process_time()
        agent.tick()
        cpu += time.process_time() - t0
        rules.append(agent.stats.stage_cpu_seconds.get("rules", 0.0))
    return cpu, rules


def env_for(tree: Path) -> dict[str, str]:
    """The environment of a child running ``tree``'s code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def start_simulator(gpus: int, engines: int, churners: int = 0,
                    churn_series: int = 0) -> tuple[subprocess.Popen[bytes], int, list[int]]:
    """The simulator process, the GPU page's port and the engines' ports, the churning engines' last
    (kill the process when done)."""
    sim = subprocess.Popen([sys.executable, "-c", SIMULATOR, str(PAYLOAD), str(engines), str(gpus),
                            str(churners), str(churn_series)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env_for(ROOT))
    assert sim.stdout is not None
    ports = [int(p) for p in sim.stdout.readline().split()]
    return sim, ports[0], ports[1:]


def start_child(name: str, tree: Path, code: str, argv: list[str], env: dict[str, str],
                cwd: str | Path) -> subprocess.Popen[str]:
    """A child running ``code`` (``python -c``) on ``tree``'s checkout; it must print ``ready <path of
    the watchdog package it imported>`` first (checked to lie in ``tree``), then answer each line of
    stdin with one line of JSON."""
    child = subprocess.Popen([sys.executable, "-c", code, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env, cwd=cwd)
    assert child.stdout is not None
    ready = child.stdout.readline().split()
    if not ready or ready[0] != "ready" or not Path(ready[1]).is_relative_to(tree):
        child.kill()
        raise SystemExit(f"{name}: the child did not start on its own checkout: {ready}")
    return child


def take_turns(children: dict[str, subprocess.Popen[str]], rounds: int, calls: int,
               keys: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """``rounds`` + 1 rounds in which each child in turn is sent ``calls`` and answers a JSON object of
    ``keys``; the figures of every round but the first (warm-up), per child and key."""
    figures: dict[str, dict[str, list[float]]] = {name: {key: [] for key in keys} for name in children}
    for round_no in range(rounds + 1):
        for name, child in children.items():
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"{calls}\n")
            child.stdin.flush()
            result = json.loads(child.stdout.readline())
            if round_no:
                for key in keys:
                    figures[name][key].append(result[key])
    return figures


def print_medians(figures: dict[str, dict[str, list[float]]], rows: tuple[tuple[str, str], ...],
                  width: int = 24) -> None:
    """Per ``(key, what)`` row and child: the median in ms (min-max) and the first child's ratio to it."""
    first = next(iter(figures))
    for key, what in rows:
        base = statistics.median(figures[first][key])
        for name, per_key in figures.items():
            values = per_key[key]
            median = statistics.median(values)
            print(f"{what:<{width}} {name:<8} {median * 1000:7.3f} ({min(values) * 1000:.3f}-"
                  f"{max(values) * 1000:.3f})   {base / median:5.2f}x vs {first}")


def stop(children: dict[str, subprocess.Popen[str]], sim: subprocess.Popen[bytes]) -> None:
    """Kill and reap the children and the simulator."""
    for child in children.values():
        child.kill()
        child.wait()
    sim.kill()
    sim.wait()
