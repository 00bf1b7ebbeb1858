#!/usr/bin/env python3
"""An engine whose label values change at every scrape, beside normal ones: the tick, the other engines'
scrape intervals and memory with and without it, side by side in one run.

Guards the churn limits: a churning engine cannot grow the store, the caches (at most 2 MB after an
hour) or the tick, and the other engines keep their scrape interval.

    .venv/bin/python benchmarks/churn.py [--size 8x8] [--seconds 240] [--churn-series 200]
                                         [--tree NAME=PATH]...

One run starts the simulated node of ``benchmarks/simnode.py`` (N GPUs, E engines serving the full vLLM
V1 payload, plus one *churning* engine: the same payload and ``--churn-series`` series of
``vllm:request_latency_seconds`` whose ``request_id`` values are new at every scrape) and, per checkout
(default: this tree), two agents at once, as the daemon runs them (``Agent`` + ``serve``: scheduler,
exporter; real clock, 1 s tick, default settings, the full default rule pack): *quiet* scrapes the E
engines and one more normal engine, *churn* the E engines and the churning one (both scrape E + 1).
After ``--seconds`` each agent prints:

- tick duration (``TickStats.last_duration_seconds`` after every tick: p50, p90, p99, max) and overruns;
- the normal engines' scrape intervals (the gaps between the points of their ``up`` series: a churning
  neighbour must leave them at ``engine_scrape_interval_seconds``);
- the series held, the label-value drops, RSS, and the churning engine's health problem (it must be
  reported failed with the reason, its new series dropped).

Then, per checkout, in one process each: ``--cache-scrapes`` scrapes of the churning payload through the
engine collector (``EngineCollector`` with its fetch replaced by the payload text: parse, relabel,
caches), printing the memory the scrapes left behind (tracemalloc) and a normal engine's parse time
before and after: an hour of churn at a 5 s scrape interval is 720 scrapes.

The machines these run on are shared: compare the agents of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from simnode import PAYLOAD, ROOT, env_for, start_simulator

AGENT = r"""
import json, logging, statistics, sys, time
import yaml
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.daemon.serve import serve
from watchdog.fakes.gpu_model import load_profile
from watchdog.fakes.pynvml import FakeNvml

doc, gpus, seconds, normal_jobs = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split(",")
logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
profile = load_profile("h100-sxm-8")
profile["gpus"] = profile["gpus"][:gpus]
nvml = FakeNvml(profile)
for i in range(gpus):
    nvml.set_load(i, 90.0)
agent = Agent(settings_from_config(load_config_text(yaml.safe_dump(doc), "<churn>")),
              context=CollectorContext(nvml=nvml))
durations = []
agent.after_tick.append(lambda: durations.append(agent.stats.last_duration_seconds))
serve(agent, "127.0.0.1:0", duration_seconds=seconds, install_signals=False)

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

settle = len(durations) // 4  # the first quarter warms caches and fills the label-value limit
ticks = sorted(durations[settle:])
gaps = []
for series in agent.store.select([("__name__", "=", "up")]):
    if dict(series.labels).get("job") in normal_jobs:
        stamps = list(series.timestamps)
        stamps = stamps[len(stamps) // 4:]
        gaps += [(b - a) / 1000 for a, b in zip(stamps, stamps[1:])]
gaps.sort()
pick = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")
print(json.dumps({
    "ticks": len(durations),
    "tick_ms": [round(1000 * pick(ticks, q), 1) for q in (0.5, 0.9, 0.99, 1.0)],
    "overruns": sum(agent.stats.overruns.values()),
    "scrape_gap_s": [round(pick(gaps, q), 2) for q in (0.5, 0.9, 0.99, 1.0)],
    "series": len(agent.store),
    "label_value_drops": agent.store.label_value_drops_total,
    "rss_mb": round(rss(), 1),
    "problems": [f"{p.check}: {p.message}" for p in agent.health if "churn" in p.check + p.message],
}))
"""


CACHES = r"""
import gc, sys, time, tracemalloc
from watchdog.collectors.engines import EngineCollector
from watchdog.config.settings import EngineSettings, section_settings

payload, scrapes, churn = open(sys.argv[1], encoding="utf-8").read(), int(sys.argv[2]), int(sys.argv[3])
page = {"step": 0}

def churning(url, timeout, cap):
    page["step"] += 1
    return payload + "".join(f'vllm:request_latency_seconds{{request_id="{page["step"]}-{k}"}} 1\n'
                             for k in range(churn))

def endpoint(job):
    return section_settings(EngineSettings, "engines[]", {"url": "http://127.0.0.1:1/metrics", "job": job})

normal = EngineCollector(endpoint("normal"), fetcher=lambda url, timeout, cap: payload)
def normal_ms():
    normal.collect()
    started = time.perf_counter()
    for _ in range(20):
        normal.collect()
    return (time.perf_counter() - started) / 20 * 1000

before_ms = normal_ms()
churner = EngineCollector(endpoint("churn"), fetcher=churning)
tracemalloc.start()
gc.collect()
base = tracemalloc.get_traced_memory()[0]
peak = 0
for _ in range(scrapes):
    churner.collect()
    peak = max(peak, tracemalloc.get_traced_memory()[0] - base)
gc.collect()
held = tracemalloc.get_traced_memory()[0] - base
tracemalloc.stop()
print(f"{held / 2**20:.1f} {peak / 2**20:.1f} {before_ms:.2f} {normal_ms():.2f}")
"""


def config(workdir: Path, name: str, ports: list[int], last: tuple[str, int]) -> dict[str, object]:
    """An agent's config: default settings, the engines given and the ``last`` (job, port)."""
    (workdir / "kmsg.log").touch()
    engines = [{"job": f"vllm-{i}", "url": f"http://127.0.0.1:{port}/metrics", "kind": "vllm"}
               for i, port in enumerate(ports)]
    engines.append({"job": last[0], "url": f"http://127.0.0.1:{last[1]}/metrics", "kind": "vllm"})
    return {"node": "churn-node", "tick_interval_seconds": 1, "state_dir": str(workdir / f"state-{name}"),
            "rules": {"paths": [str(ROOT / "rules" / "*.yaml")]}, "engines": engines,
            "kmsg": {"source": str(workdir / "kmsg.log")}, "collectors": {"host": {"enabled": False}},
            "notifiers": {"log": {"enabled": False}}}


def main() -> int:
    """Run a quiet and a churning agent per checkout side by side and print what each saw."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="8x8", metavar="GxE", help="GPUs x normal engine endpoints")
    parser.add_argument("--seconds", type=float, default=240.0, help="wall seconds each agent runs")
    parser.add_argument("--churn-series", type=int, default=200, help="new series per scrape of the churner")
    parser.add_argument("--cache-scrapes", type=int, default=720, help="scrapes of the cache phase (0: skip)")
    parser.add_argument("--tree", action="append", default=None, metavar="NAME=PATH",
                        help="a checkout to measure (repeatable; default: this tree)")
    args = parser.parse_args()
    gpus, engines = (int(x) for x in args.size.lower().split("x"))
    trees = [(spec.partition("=")[0], Path(spec.partition("=")[2]).resolve()) for spec in args.tree or []]
    trees = trees or [("this", ROOT)]
    sim, _, ports = start_simulator(gpus, engines + 1, churners=1, churn_series=args.churn_series)
    normal, extra_port, churn_port = ports[:engines], ports[engines], ports[engines + 1]
    jobs = ",".join(f"vllm-{i}" for i in range(engines))
    with tempfile.TemporaryDirectory(prefix="watchdog-churn-") as workdir:
        try:
            children = []
            for tree_name, tree in trees:
                for mode, last in (("quiet", ("vllm-extra", extra_port)), ("churn", ("vllm-churn", churn_port))):
                    name = f"{tree_name}/{mode}"
                    doc = config(Path(workdir), name.replace("/", "-"), normal, last)
                    child = subprocess.Popen([sys.executable, "-c", AGENT, json.dumps(doc), str(gpus),
                                              str(args.seconds), jobs], stdout=subprocess.PIPE,
                                             env=env_for(tree), cwd=workdir)
                    children.append((name, child))
            print(f"{gpus} GPU(s) x {engines} engine(s), churner: {args.churn_series} new series per scrape, "
                  f"{args.seconds:g} s; figures after the first quarter")
            print(f"{'agent':<14} {'ticks':>5} {'tick ms p50/p90/p99/max':>26} {'overruns':>8} "
                  f"{'scrape gap s p50/p90/p99/max':>30} {'series':>7} {'drops':>7} {'RSS MB':>7}")
            problems = []
            for name, child in children:
                out, _ = child.communicate()
                r = json.loads(out.decode().strip().splitlines()[-1])
                print(f"{name:<14} {r['ticks']:>5} {'/'.join(map(str, r['tick_ms'])):>26} {r['overruns']:>8} "
                      f"{'/'.join(map(str, r['scrape_gap_s'])):>30} {r['series']:>7} {r['label_value_drops']:>7} "
                      f"{r['rss_mb']:>7}")
                problems += [f"  {name}: {p}" for p in r["problems"]]
            print("health problems of the churning engine:")
            print("\n".join(problems) or "  none")
            if args.cache_scrapes:
                print(f"engine collector caches after {args.cache_scrapes} churning scrapes "
                      f"({args.churn_series} new series each):")
                print(f"{'tree':<10} {'held MB':>8} {'peak MB':>8} {'normal engine ms/scrape before/after':>38}")
                for tree_name, tree in trees:
                    out = subprocess.run([sys.executable, "-c", CACHES, str(PAYLOAD), str(args.cache_scrapes),
                                          str(args.churn_series)], env=env_for(tree), cwd=workdir,
                                         capture_output=True, text=True, check=True).stdout.split()
                    print(f"{tree_name:<10} {out[0]:>8} {out[1]:>8} {out[2] + ' / ' + out[3]:>38}")
        finally:
            sim.kill()
            sim.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
