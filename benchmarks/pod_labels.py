#!/usr/bin/env python3
"""The exporter's page with pod labels and with dcgm-exporter compatibility, beside the plain page.

What ``pod_resources.pod_labels`` and ``exporter.dcgm_compatible`` cost per Prometheus scrape:

    .venv/bin/python benchmarks/pod_labels.py [--gpus 8] [--engines 8] [--fill 120] [--scrapes 20]

One agent as ``simnode.simulated_agent`` builds it (fake NVML, ``--engines`` endpoints of the simulated
node serving the full vLLM V1 payload, the default pack, simulated 1 s ticks) and three exporters on its
store, built by ``exporter_for_store`` (not started): ``plain``; ``pods`` (every GPU held by one of the
engines' pods and every engine in its pod, as the pod_resources collector would set the agent's pod
directory); ``pods+dcgm`` (also ``dcgm_compatible``). After ``--fill`` ticks, ``--scrapes`` times: 15
ticks (Prometheus' scrape interval), then one ``render_metrics()`` of each exporter, in an order that
rotates every scrape, each timed with ``time.process_time``. Printed: each page's median render CPU,
series and size, and its ratio to the plain page's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from simnode import simulated_agent, start_engines

from watchdog.collectors.engines import scrape_instance
from watchdog.config.settings import ExporterSettings, section_settings
from watchdog.exporter.server import exporter_for_store
from watchdog.pods.directory import PodDirectory
from watchdog.pods.podresources import PodRef


def main() -> int:
    """Build the agent and the three exporters, scrape them alternately, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--fill", type=int, default=120)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    proc, ports = start_engines(args.engines)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            agent, now = simulated_agent(args.gpus, ports, 900, Path(tmp))
            nvml = agent.context.nvml
            nvml.nvmlInit()
            uuids = [nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(args.gpus)]
            engines = [(e.job, scrape_instance(e.url)) for e in agent.settings.engines]
            pods = [PodRef("inference", f"{job}-0", "engine") for job, _ in engines]
            # The directory the pod_resources collector would fill (the agent's own is emptied by its collector:
            # no kubelet socket here).
            directory = PodDirectory()
            directory.update({uuid: [pods[i % len(pods)]] for i, uuid in enumerate(uuids)},
                             dict(zip(engines, pods, strict=True)))
            dcgm = section_settings(ExporterSettings, "exporter", {"dcgm_compatible": True})
            exporters = {
                "plain": exporter_for_store(agent.store, "127.0.0.1:0", ready=lambda: True, clock=lambda: now[0]),
                "pods": exporter_for_store(agent.store, "127.0.0.1:0", ready=lambda: True, clock=lambda: now[0],
                                           pods=directory),
                "pods+dcgm": exporter_for_store(agent.store, "127.0.0.1:0", ready=lambda: True,
                                                clock=lambda: now[0], section=dcgm, pods=directory, node="n"),
            }
            for _ in range(args.fill):
                now[0] += 1.0
                agent.tick()
            pages = {name: exporter.render_metrics() for name, exporter in exporters.items()}  # builds caches
            cpu: dict[str, list[float]] = {name: [] for name in exporters}
            names = list(exporters)
            for scrape in range(args.scrapes):
                for _ in range(15):
                    now[0] += 1.0
                    agent.tick()
                for name in names[scrape % 3:] + names[:scrape % 3]:
                    started = time.process_time()
                    pages[name] = exporters[name].render_metrics()
                    cpu[name].append(time.process_time() - started)
            agent.close(timeout_seconds=1)
    finally:
        proc.kill()
        proc.wait()
    plain = statistics.median(cpu["plain"])
    print(f"exporter page at {args.gpus}x{args.engines} after {args.fill} ticks, one render of each every 15 ticks "
          f"({args.scrapes} scrapes, order rotating)")
    for name in names:
        median = statistics.median(cpu[name])
        series = sum(1 for line in pages[name].splitlines() if line and not line.startswith(b"#"))
        labelled = pages[name].count(b'pod="')
        print(f"  {name:<10} {median * 1000:6.2f} ms per render, {series} series ({labelled} with pod labels), "
              f"{len(pages[name]) / 1000:.0f} KB"
              f"  ({median / plain:.2f}x plain)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
