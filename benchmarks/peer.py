#!/usr/bin/env python3
"""The agent next to a real Prometheus doing the same job: CPU and resident memory from ``/proc``, side by side.

Guards the cost targets: at 8 GPUs x 8 engines at least 10x less CPU than Prometheus and at most 80 MB
resident; ``--no-rules`` measures the floor (what the agent costs with no rule to evaluate).

    .venv/bin/python benchmarks/peer.py [--size 8x8] [--minutes 2] [--warmup 30]
                                        [--retention-full] [--retention SECONDS] [--no-rules]
                                        [--agent NAME=TREE]... [--agent-extra JSON]

One run starts, on loopback only:

- the simulated node of ``benchmarks/simnode.py`` (its CPU is not counted): per engine the full vLLM V1
  payload, moving at every scrape, and a page of the simulated GPUs' NVML series for Prometheus;
- each agent (default: this tree; ``--agent main=PATH`` adds another checkout, so "before" and
  "after" run side by side in one run): the daemon ``inference-watchdog run`` builds (``Agent`` +
  ``serve``: scheduler, exporter, signals), with the fake NVML injected as the demo does, the full default
  rule pack of its own checkout, the default settings, a 1 s tick and the given retention; its exporter
  is scraped every 15 s (Prometheus' default interval), with gzip, by this process;
- ``/usr/bin/prometheus``: the same engine endpoints plus the GPU page scraped every 1 s, the agent's
  whole rule set (``inference-watchdog rules render`` of the last ``--agent``, the newest by convention:
  rule files plus the rules generated from config) evaluated every 1 s (a group's own ``interval:``
  honoured), ``--storage.tsdb.retention.time`` = the retention.

After the warm-up it samples every process's CPU (utime+stime of ``/proc/PID/stat``, all threads) and
RSS (``/proc/PID/status``) for the measured minutes and prints CPU milliseconds per second, RSS (mean,
last, growth over the window), wake-ups per second (voluntary context switches of the live threads,
``/proc/PID/task/*/status``: on this project's virtual machines each costs tens of microseconds of CPU)
and the ratios. ``--retention-full`` warms up for the retention plus a
minute, so every window is full before measuring (use ``--retention 120`` for a quick full-retention run;
the default 900 then needs 16 minutes of warm-up). ``--no-rules`` runs every agent without rule files (only the
rules generated from config, which find none of the pack's canonical series to read), and Prometheus with
the same: collection, storage, self-metrics, the exporter and the daemon's machinery. The
machines these run on are shared: compare processes of the same run, not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from simnode import ROOT, env_for, start_simulator

PROMETHEUS = "/usr/bin/prometheus"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
EXPORTER_SCRAPE_SECONDS = 15.0

AGENT = r"""
import logging, sys
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_settings
from watchdog.daemon.serve import serve
from watchdog.fakes.gpu_model import load_profile
from watchdog.fakes.pynvml import FakeNvml

config, listen, gpus = sys.argv[1], sys.argv[2], int(sys.argv[3])
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
profile = load_profile("h100-sxm-8")
profile["gpus"] = profile["gpus"][:gpus]
nvml = FakeNvml(profile)
for i in range(gpus):
    nvml.set_load(i, 90.0)
settings = load_settings(config)
agent = Agent(settings, config_path=config, context=CollectorContext(nvml=nvml))
sys.exit(serve(agent, listen))
"""


@dataclass
class Proc:
    """One measured process and its samples."""

    name: str
    popen: subprocess.Popen[bytes]
    cpu: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, CPU s)
    rss: list[float] = field(default_factory=list)  # MB
    wakes: list[tuple[float, int]] = field(default_factory=list)  # (monotonic s, voluntary switches)
    url: str = ""  # the agent's /metrics

    def sample(self) -> None:
        """Read CPU and RSS now."""
        stat = Path(f"/proc/{self.popen.pid}/stat").read_text()
        fields = stat.rpartition(")")[2].split()
        self.cpu.append((time.monotonic(), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS))
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                self.rss.append(int(line.split()[1]) / 1024)
        self.wakes.append((time.monotonic(), voluntary_switches(self.popen.pid)))

    def wakes_per_second(self) -> float:
        """Voluntary context switches per wall second over the sampled window (threads alive at each
        sample; a thread that ended takes its count with it)."""
        (t0, w0), (t1, w1) = self.wakes[0], self.wakes[-1]
        return (w1 - w0) / (t1 - t0)

    def cpu_ms_per_second(self) -> float:
        """Mean CPU milliseconds per wall second over the sampled window."""
        (t0, c0), (t1, c1) = self.cpu[0], self.cpu[-1]
        return (c1 - c0) / (t1 - t0) * 1000

    def cpu_series(self) -> list[float]:
        """CPU ms per second of each sampling interval (the spread of the measurement)."""
        return [(c1 - c0) / (t1 - t0) * 1000 for (t0, c0), (t1, c1) in zip(self.cpu, self.cpu[1:], strict=False)
                if t1 > t0]


def voluntary_switches(pid: int) -> int:
    """Sum of ``voluntary_ctxt_switches`` over a process's live threads: each one a wait that ended."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            continue
    return total


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_config(workdir: Path, name: str, tree: Path, ports: list[int], retention: float,
                 extra: dict[str, Any]) -> Path:
    """The agent's config file: default settings plus what the benchmark's node differs in; the rule
    pack is that of the agent's own checkout (``tree``), so a checkout is measured with its own rules."""
    (workdir / "kmsg.log").touch()
    doc: dict[str, Any] = {
        "node": "peer-node",
        "tick_interval_seconds": 1,
        "retention_seconds": retention,
        "state_dir": str(workdir / f"state-{name}"),
        "rules": {"paths": [str(tree / "rules" / "*.yaml")]},
        "engines": [{"job": f"vllm-{i}", "url": f"http://127.0.0.1:{port}/metrics", "kind": "vllm"}
                    for i, port in enumerate(ports)],
        "kmsg": {"source": str(workdir / "kmsg.log")},
        "notifiers": {"log": {"enabled": True}},
    }
    for key, value in extra.items():
        doc[key] = value
    path = workdir / f"agent-{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def prometheus_config(workdir: Path, gpu_port: int, engine_ports: list[int], rules: Path) -> Path:
    """Prometheus doing the agent's job: the same endpoints and rule files, every second."""
    doc = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "gpus", "honor_labels": True,
             "static_configs": [{"targets": [f"127.0.0.1:{gpu_port}"]}]},
            *({"job_name": f"vllm-{i}", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
              for i, port in enumerate(engine_ports)),
        ],
    }
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def scrape(url: str) -> None:
    """One exporter scrape as Prometheus does it (gzip accepted); errors are printed, not fatal."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
    except OSError as exc:
        print(f"  exporter scrape of {url} failed: {exc}", file=sys.stderr)


def run_size(gpus: int, engines: int, args: argparse.Namespace, agents: list[tuple[str, Path]],
             workdir: Path) -> list[Proc]:
    """One side-by-side run at ``gpus`` x ``engines``; returns the measured processes."""
    sim, gpu_port, engine_ports = start_simulator(gpus, engines)
    procs: list[Proc] = []
    extra = json.loads(args.agent_extra) if args.agent_extra else {}
    if args.no_rules:
        extra["rules"] = {"paths": []}
    try:
        for name, tree in agents:
            config = agent_config(workdir, name, tree, engine_ports, args.retention, extra)
            port = free_port()
            log = (workdir / f"agent-{name}.log").open("wb")
            popen = subprocess.Popen([sys.executable, "-c", AGENT, str(config), f"127.0.0.1:{port}", str(gpus)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env_for(tree), cwd=workdir)
            procs.append(Proc(f"agent {name}", popen, url=f"http://127.0.0.1:{port}/metrics"))
        rules = workdir / "rules.yaml"
        rules_config = workdir / f"agent-{agents[-1][0]}.yaml"
        rules.write_bytes(subprocess.run([sys.executable, "-m", "watchdog", "rules", "render", "--config",
                                          str(rules_config)], check=True, capture_output=True,
                                         env=env_for(agents[-1][1])).stdout)
        prom_dir = workdir / f"prometheus-{gpus}x{engines}"
        shutil.rmtree(prom_dir, ignore_errors=True)
        prom_log = (workdir / "prometheus.log").open("wb")
        prom_config = prometheus_config(workdir, gpu_port, engine_ports, rules)
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={prom_config}",
                                 f"--storage.tsdb.path={prom_dir}",
                                 f"--storage.tsdb.retention.time={int(args.retention)}s",
                                 f"--web.listen-address=127.0.0.1:{free_port()}"],
                                stdout=prom_log, stderr=subprocess.STDOUT)
        procs.append(Proc("prometheus", prom))
        warmup = args.retention + 60 if args.retention_full else args.warmup
        print(f"{gpus} GPU(s) x {engines} engine(s): warming up {warmup:.0f} s, then measuring "
              f"{args.minutes:g} min", file=sys.stderr, flush=True)
        next_scrape = time.monotonic() + EXPORTER_SCRAPE_SECONDS  # once the agents listen
        end_warmup = time.monotonic() + warmup
        end = end_warmup + args.minutes * 60
        next_sample = end_warmup
        while time.monotonic() < end:
            for proc in procs:
                if proc.popen.poll() is not None:
                    raise SystemExit(f"{proc.name} exited with {proc.popen.returncode}; see {workdir}")
            now = time.monotonic()
            if now >= next_scrape:
                next_scrape += EXPORTER_SCRAPE_SECONDS
                for proc in procs:
                    if proc.url:
                        scrape(proc.url)
            if now >= next_sample:
                next_sample += args.sample_seconds
                for proc in procs:
                    proc.sample()
            time.sleep(0.2)
        for proc in procs:
            proc.sample()
        return procs
    finally:
        for proc in procs:
            proc.popen.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
        sim.kill()
        sim.wait()


def report(gpus: int, engines: int, procs: list[Proc]) -> None:
    """Print one size's table and ratios."""
    prom = next(p for p in procs if p.name == "prometheus")
    print(f"\n{gpus} GPU(s) x {engines} engine(s), {len(prom.cpu) - 1} samples")
    header = (f"{'process':<18} {'CPU ms/s':>9} {'p10-p90':>15} {'RSS MB mean':>12} {'last':>7} {'growth':>7} "
              f"{'wakes/s':>8}")
    print(header)
    print("-" * len(header))
    for p in procs:
        series = sorted(p.cpu_series())
        spread = f"{series[len(series) // 10]:.1f}-{series[(9 * len(series)) // 10]:.1f}" if series else "-"
        mean_rss = sum(p.rss) / len(p.rss)
        print(f"{p.name:<18} {p.cpu_ms_per_second():>9.1f} {spread:>15} {mean_rss:>12.1f} {p.rss[-1]:>7.1f} "
              f"{p.rss[-1] - p.rss[0]:>+7.1f} {p.wakes_per_second():>8.1f}")
    for p in procs:
        if p is prom:
            continue
        print(f"{p.name}: Prometheus / agent CPU = {prom.cpu_ms_per_second() / max(p.cpu_ms_per_second(), 1e-9):.2f}x, "
              f"RSS = {(sum(prom.rss) / len(prom.rss)) / (sum(p.rss) / len(p.rss)):.2f}x")
    agents = [p for p in procs if p is not prom]
    for other in agents[1:]:
        base = agents[0]
        cpu = base.cpu_ms_per_second() / max(other.cpu_ms_per_second(), 1e-9)
        print(f"{base.name} / {other.name}: CPU {cpu:.2f}x, "
              f"RSS {(sum(base.rss) / len(base.rss)) / (sum(other.rss) / len(other.rss)):.2f}x")


def main() -> int:
    """Run the requested sizes and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", action="append", default=None, metavar="GxE",
                        help="GPUs x engine endpoints (repeatable; default 8x8)")
    parser.add_argument("--minutes", type=float, default=2.0, help="measured minutes after the warm-up")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds before measuring")
    parser.add_argument("--retention", type=float, default=900.0, help="retention of both, seconds")
    parser.add_argument("--retention-full", action="store_true",
                        help="warm up for the retention plus a minute (every window full)")
    parser.add_argument("--sample-seconds", type=float, default=5.0, help="sampling interval")
    parser.add_argument("--agent", action="append", default=None, metavar="NAME=TREE",
                        help="an agent checkout to run (repeatable; default: this tree as 'this')")
    parser.add_argument("--agent-extra", default="", help="JSON merged into each agent's config")
    parser.add_argument("--no-rules", action="store_true",
                        help="no rule files (agents and Prometheus): the floor under the rules")
    args = parser.parse_args()
    if not Path(PROMETHEUS).exists():
        print(f"{PROMETHEUS} is missing (Debian package prometheus)", file=sys.stderr)
        return 2
    agents = [(spec.partition("=")[0], Path(spec.partition("=")[2]).resolve()) for spec in args.agent or []]
    agents = agents or [("this", ROOT)]
    for _, tree in agents:
        if not (tree / "watchdog" / "__init__.py").exists():
            print(f"{tree} is not a checkout of inference-watchdog", file=sys.stderr)
            return 2
    sizes = [tuple(int(x) for x in size.lower().split("x")) for size in args.size or ["8x8"]]
    with tempfile.TemporaryDirectory(prefix="watchdog-peer-") as tmp:
        for gpus, engines in sizes:
            procs = run_size(gpus, engines, args, agents, Path(tmp))
            report(gpus, engines, procs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
