#!/usr/bin/env python3
"""CPU cost of one agent tick, and of parsing a vLLM payload, measured side by side in one run.

Guards how cost grows: CPU per tick by stage at 1 and 8 GPUs x 1 and 8 engines (a share of one core).

    .venv/bin/python benchmarks/tick.py [--ticks 40] [--warmup 20]

For 1 and 8 GPUs (fake NVML over the h100-sxm-8 profile) × 1 and 8 engine endpoints (the simulated node of
``simnode.py``, in a separate process so its CPU is not counted, each endpoint serving
``tests/fixtures/engines/vllm-v1-full.txt``, every metric family vLLM V1 exposes with its real buckets,
its values moving at every scrape),
it runs the real pipeline (collectors, store, the default rule pack, alert lifecycle, runbooks,
notifier hand-off) and an exporter scrape, and reports CPU milliseconds per tick per stage
(``time.process_time``: all threads of this process). Then it parses the same payload with our parser
and with ``prometheus_client.parser``. These machines are shared and noisy: read the ratios, not the
absolute numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simnode import PAYLOAD, bench_settings, fake_nvml, start_engines

from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext, ingest_results
from watchdog.exporter.collector import StoreCollector
from watchdog.exporter.selection import ExportSelection
from watchdog.exposition import clear_cache, parse_exposition


def measure(gpus: int, engines: int, ticks: int, warmup: int, workdir: Path) -> dict[str, Any]:
    """CPU ms per tick per stage for one (GPUs, engines) combination."""
    proc, ports = start_engines(engines)
    try:
        config = bench_settings(ports, workdir / f"state-{gpus}-{engines}")
        now = [1_800_000_000.0]
        agent = Agent(config, clock=lambda: now[0], context=CollectorContext(nvml=fake_nvml(gpus)))
        registry = CollectorRegistry(auto_describe=False)
        # The heavier export: the engines' own series too (``pass_through_engine_series``).
        registry.register(StoreCollector(agent.store, clock=lambda: now[0],
                                         selection=ExportSelection(pass_through_engine_series=True)))
        stages: dict[str, list[float]] = {"collect+store": [], "rules+alerts": [], "runbooks+notify": [],
                                           "export": [], "tick": []}
        for index in range(warmup + ticks):
            now[0] += 1.0
            now_ms = int(now[0] * 1000)
            t0 = time.process_time()
            results = agent.runner.run_once()
            ingest_results(agent.store, results, now_ms)
            t1 = time.process_time()
            alerts = agent.rule_engine.evaluate(now_ms)
            t2 = time.process_time()
            events = agent.runbooks.on_alerts(alerts, now_ms)
            agent.dispatcher.handle(alerts, events, now_ms)
            t3 = time.process_time()
            body = generate_latest(registry)
            t4 = time.process_time()
            if index >= warmup:
                stages["collect+store"].append(t1 - t0)
                stages["rules+alerts"].append(t2 - t1)
                stages["runbooks+notify"].append(t3 - t2)
                stages["export"].append(t4 - t3)
                stages["tick"].append(t4 - t0)
        failed = [r.name for r in results if not r.success]
        out = {k: statistics.median(v) * 1000 for k, v in stages.items()}
        out.update(series=len(agent.store), export_bytes=len(body), failed=failed)
        agent.close(timeout_seconds=1)
        return out
    finally:
        proc.kill()
        proc.wait()


def parse_comparison(rounds: int) -> dict[str, float]:
    """Median ms to parse the payload: ours (cold and warm label cache) and prometheus_client's."""
    text = PAYLOAD.read_text()
    ours_cold, ours_warm, theirs = [], [], []
    for _ in range(rounds):
        clear_cache()
        t0 = time.process_time()
        list(parse_exposition(text))
        t1 = time.process_time()
        list(parse_exposition(text))
        t2 = time.process_time()
        for family in text_string_to_metric_families(text):
            list(family.samples)
        t3 = time.process_time()
        ours_cold.append(t1 - t0)
        ours_warm.append(t2 - t1)
        theirs.append(t3 - t2)
    return {"ours_cold": statistics.median(ours_cold) * 1000, "ours_warm": statistics.median(ours_warm) * 1000,
            "prometheus_client": statistics.median(theirs) * 1000}


def main() -> int:
    """Run every combination and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--parse-rounds", type=int, default=100)
    args = parser.parse_args()
    samples = sum(1 for _ in parse_exposition(PAYLOAD.read_text()))
    print(f"payload: {PAYLOAD.name}, {PAYLOAD.stat().st_size} bytes, {samples} samples\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in (1, 8):
            for engines in (1, 8):
                rows.append(((gpus, engines), measure(gpus, engines, args.ticks, args.warmup, Path(tmp))))
    base = rows[0][1]["tick"]
    header = (f"{'GPUs':>4} {'engines':>7} {'series':>7} | {'collect':>8} {'rules':>8} {'notify':>7} "
              f"{'export':>7} | {'tick ms':>8} {'x base':>6}")
    print("CPU milliseconds per tick (median; all threads of the agent process)")
    print(header)
    print("-" * len(header))
    for (gpus, engines), r in rows:
        print(f"{gpus:>4} {engines:>7} {r['series']:>7} | {r['collect+store']:>8.2f} {r['rules+alerts']:>8.2f} "
              f"{r['runbooks+notify']:>7.2f} {r['export']:>7.2f} | {r['tick']:>8.2f} {r['tick'] / base:>6.2f}"
              + (f"  FAILED: {r['failed']}" if r["failed"] else ""))
    print("\n'export' is one Prometheus scrape of the exporter; the others run every tick.")
    for (gpus, engines), r in rows:
        per_second = (r["tick"] - r["export"]) + r["export"] / 15
        print(f"{gpus} GPU(s) x {engines} engine(s): 1 s tick + 15 s scrape interval = "
              f"{per_second / 10:.1f} % of one core")
    parse = parse_comparison(args.parse_rounds)
    print("\nparsing the payload once (median ms)")
    for name, value in parse.items():
        print(f"  {name:<18} {value:7.3f}  ({parse['prometheus_client'] / value:5.1f}x faster than prometheus_client)"
              if name != "prometheus_client" else f"  {name:<18} {value:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
