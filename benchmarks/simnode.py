"""The simulated node the benchmarks scrape: vLLM V1 endpoints whose values move, and a page of GPU series.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
