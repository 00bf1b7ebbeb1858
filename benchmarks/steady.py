#!/usr/bin/env python3
"""Steady-state CPU of the agent with retention full, before/after the issue-16 work, side by side.

    .venv/bin/python benchmarks/steady.py [--gpus 8] [--engines 8] [--retention 900] [--rounds 4]
                                          [--block 20] [--profile before|after]

One agent (fake NVML over the h100-sxm-8 profile, ``--engines`` real HTTP endpoints on loopback in a
child process serving ``tests/fixtures/engines/vllm-v1-full.txt``, the whole default rule pack,
default settings, simulated 1 s ticks) first runs ``--retention`` seconds of ticks in the *before*
mode so that every window is full. Then it alternates blocks of ``--block`` ticks in each mode, for
``--rounds`` rounds, on the same store:

- ``before``: every engine scraped and every rule group evaluated at every tick, evaluator caches off
  (the agent as it was before issue 16);
- ``after``: the defaults (engine scrapes and engine rule groups at ``engine_scrape_interval_seconds``,
  fault-path groups every tick, evaluator caches on).

It prints CPU milliseconds per second of agent time (``time.process_time``: every thread of this
process; the engine servers' CPU is not counted) and rule-engine milliseconds per tick, and their
ratios. Shared machines are noisy: read the ratios, which come from interleaved blocks of one run.
``--gc`` runs the after mode at CPython's cyclic-collector thresholds and at the daemon's
(``watchdog.infra.heap``), interleaved, and prints the time inside the collector and the cyclic garbage
the agent leaves. ``--profile MODE`` prints a cProfile of that mode's measured ticks instead of timing
both; ``--stages``
prints, for the after mode, each tick stage's CPU (the tick thread's, ``Agent.stats.stage_cpu_seconds``;
nested stages, ``self_samples`` in ``self_metrics``, are inside their parent) and the CPU of the other
threads (collector workers), per tick.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tick import bench_settings, fake_nvml, start_servers  # noqa: E402

from watchdog.agent import Agent  # noqa: E402
from watchdog.collectors.base import CollectorContext  # noqa: E402
from watchdog.infra.heap import GC_THRESHOLDS, quiet_cyclic_gc  # noqa: E402

MODES = ("before", "after")


def build_agent(gpus: int, ports: list[int], retention: int, workdir: Path) -> tuple[Agent, list[float]]:
    """The agent under test, on a simulated clock (the returned one-element list holds its time)."""
    config = bench_settings(ports, workdir / f"state-{gpus}-{len(ports)}", retention_seconds=retention)
    now = [1_800_000_000.0]
    agent = Agent(config, clock=lambda: now[0], context=CollectorContext(nvml=fake_nvml(gpus)),
                  background_scrapes=False)
    quiet_cyclic_gc()  # the daemon's cyclic-collector thresholds (serve() sets them)
    return agent, now


def set_mode(agent: Agent, mode: str, engine_interval: float | None = None) -> None:
    """Switch the agent between the pre-issue-16 behaviour and the defaults (``engine_interval``
    replaces ``engine_scrape_interval_seconds`` in the after mode)."""
    agent.set_incremental(mode == "after")
    if engine_interval is not None:
        agent.settings = dataclasses.replace(agent.settings, engine_scrape_interval_seconds=engine_interval)


def run_block(agent: Agent, now: list[float], ticks: int) -> tuple[float, list[float]]:
    """Run ``ticks`` ticks; (CPU seconds in all, rule-engine CPU seconds per tick)."""
    rules: list[float] = []
    cpu = 0.0
    for _ in range(ticks):
        now[0] += 1.0
        t0 = time.process_time()
        agent.tick()
        cpu += time.process_time() - t0
        spent = agent.stats.stage_cpu_seconds
        rules.append(spent.get("rules", 0.0))
    return cpu, rules


def print_stages(agent: Agent, now: list[float], ticks: int, size: str) -> None:
    """CPU per tick of each stage (tick thread) and of the other threads, over ``ticks`` ticks."""
    spent: dict[str, float] = {}
    process0, thread0 = time.process_time(), time.thread_time()
    for _ in range(ticks):
        now[0] += 1.0
        agent.tick()
        for stage, seconds in agent.stats.stage_cpu_seconds.items():
            spent[stage] = spent.get(stage, 0.0) + seconds
    process, thread = time.process_time() - process0, time.thread_time() - thread0
    print(f"{size}: {process / ticks * 1000:.2f} ms CPU per tick: tick thread {thread / ticks * 1000:.2f}, "
          f"other threads {(process - thread) / ticks * 1000:.2f}")
    for stage, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {stage:<18} {seconds / ticks * 1000:7.3f} ms/tick {seconds / process * 100:5.1f} %")


def print_gc(agent: Agent, now: list[float], args: argparse.Namespace, size: str) -> None:
    """The after mode at CPython's collector thresholds and at the daemon's, interleaved: CPU per tick,
    time inside the cyclic collector (``gc.callbacks``) and collections per tick; then the cyclic garbage
    the agent leaves (unreachable objects a collection finds after 100 ticks without one)."""
    inside = [0.0, 0.0]  # seconds inside the collector, start of the current collection
    collections = [0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            inside[1] = time.perf_counter()
        else:
            inside[0] += time.perf_counter() - inside[1]
            collections[0] += 1

    settings = {"CPython (700, 10, 10)": (700, 10, 10), f"daemon {GC_THRESHOLDS}": GC_THRESHOLDS}
    figures = {name: [0.0, 0.0, 0] for name in settings}
    gc.callbacks.append(timed)
    try:
        for _ in range(args.rounds):
            for name, thresholds in settings.items():
                gc.set_threshold(*thresholds)
                inside[0], collections[0] = 0.0, 0
                cpu, _ = run_block(agent, now, args.block)
                figures[name][0] += cpu
                figures[name][1] += inside[0]
                figures[name][2] += collections[0]
    finally:
        gc.callbacks.remove(timed)
        quiet_cyclic_gc()
    ticks = args.rounds * args.block
    for name, (cpu, spent, count) in figures.items():
        print(f"{size} {name:<24} {cpu / ticks * 1000:7.2f} ms CPU/tick, {spent / ticks * 1000:6.3f} ms inside "
              f"the collector, {count / ticks:5.2f} collections/tick")
    gc.collect()
    gc.disable()
    try:
        run_block(agent, now, 100)
        print(f"{size} cyclic garbage left by 100 ticks: {gc.collect()} objects")
    finally:
        gc.enable()


def measure(gpus: int, engines: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Fill retention, then interleave measured blocks of both modes."""
    proc, ports = start_servers(engines)
    try:
        agent, now = build_agent(gpus, ports, args.retention, workdir)
        set_mode(agent, "before")
        started = time.monotonic()
        run_block(agent, now, args.retention)
        fill_s = time.monotonic() - started
        if args.stages:
            set_mode(agent, "after", args.engine_interval)
            print_stages(agent, now, args.block * args.rounds, f"{gpus}x{engines}")
            return {}
        if args.gc:
            set_mode(agent, "after", args.engine_interval)
            print_gc(agent, now, args, f"{gpus}x{engines}")
            return {}
        if args.profile:
            set_mode(agent, args.profile, args.engine_interval)
            profiler = cProfile.Profile()
            profiler.enable()
            run_block(agent, now, args.block * args.rounds)
            profiler.disable()
            lanes = agent.rule_engine.lanes()
            for key, stats in agent.rule_engine.stats.items():
                print(f"{key:<28} {lanes[key].value:<7} {stats.rules:>3} rules "
                      f"{stats.last_duration_seconds * 1000:8.1f} ms (last evaluation, profiled)")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(35)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
            return {}
        cpu: dict[str, float] = dict.fromkeys(MODES, 0.0)
        rules: dict[str, list[float]] = {mode: [] for mode in MODES}
        seconds: dict[str, int] = dict.fromkeys(MODES, 0)
        for _ in range(args.rounds):
            for mode in MODES:
                set_mode(agent, mode, args.engine_interval)
                run_block(agent, now, 2)  # let the switch settle (a first scrape, a first evaluation)
                block_cpu, block_rules = run_block(agent, now, args.block)
                cpu[mode] += block_cpu
                rules[mode].extend(block_rules)
                seconds[mode] += args.block
        out: dict[str, Any] = {"series": len(agent.store), "fill_s": fill_s}
        for mode in MODES:
            out[f"{mode}_cpu_ms_per_s"] = cpu[mode] / seconds[mode] * 1000
            out[f"{mode}_rules_ms_mean"] = statistics.fmean(rules[mode]) * 1000
            out[f"{mode}_rules_ms_max"] = max(rules[mode]) * 1000
        agent.close(timeout_seconds=1)
        return out
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    """Run the requested sizes and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8x8,1x1", help="GPUsxengines, comma-separated")
    parser.add_argument("--retention", type=int, default=900, help="retention_seconds (ticks to fill)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--block", type=int, default=20, help="ticks per measured block (multiple of 5)")
    parser.add_argument("--profile", choices=MODES)
    parser.add_argument("--stages", action="store_true", help="per-stage CPU of the after mode")
    parser.add_argument("--engine-interval", type=float, help="engine_scrape_interval_seconds of the after mode")
    parser.add_argument("--gc", action="store_true",
                        help="the after mode at CPython's and the daemon's cyclic-collector thresholds")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            gpus, engines = (int(x) for x in size.split("x"))
            rows.append(((gpus, engines), measure(gpus, engines, args, Path(tmp))))
    if args.profile or args.stages or args.gc:
        return 0
    print(f"retention {args.retention} s full; {args.rounds} rounds of {args.block}-tick blocks per mode\n")
    header = (f"{'size':>5} {'series':>7} | {'CPU ms/s before':>15} {'after':>7} {'ratio':>6} | "
              f"{'rule ms/tick before':>19} {'after':>7} {'ratio':>6} | {'rule ms max before':>18} {'after':>7}")
    print(header)
    print("-" * len(header))
    for (gpus, engines), r in rows:
        print(f"{gpus}x{engines:<3} {r['series']:>7} | {r['before_cpu_ms_per_s']:>15.1f} "
              f"{r['after_cpu_ms_per_s']:>7.1f} {r['before_cpu_ms_per_s'] / r['after_cpu_ms_per_s']:>5.1f}x | "
              f"{r['before_rules_ms_mean']:>19.1f} {r['after_rules_ms_mean']:>7.1f} "
              f"{r['before_rules_ms_mean'] / r['after_rules_ms_mean']:>5.1f}x | "
              f"{r['before_rules_ms_max']:>18.1f} {r['after_rules_ms_max']:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
