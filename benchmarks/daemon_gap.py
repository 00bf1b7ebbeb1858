#!/usr/bin/env python3
"""Where the daemon's CPU goes beyond its ticks: the same agent as a daemon, ticking in real time, and
ticking back to back on a simulated clock, side by side, per thread.

    .venv/bin/python benchmarks/daemon_gap.py [--size 1x1] [--seconds 60] [--warmup 30]

Three child processes run at once against one simulated node (``simnode.py``: vLLM V1 endpoints whose
values move, fake NVML), each with ``peer.py``'s agent config (default settings, the whole rule pack,
the kernel-log collector on a file, the process collector, the log notifier, 1 s ticks):

- ``daemon``: the agent as ``peer.py`` runs it (``serve``: scheduler, exporter, signals), its exporter
  scraped every 15 s with gzip;
- ``realtime``: ``Agent.tick()`` every wall-clock second from a plain loop (no scheduler, no exporter),
  engines scraped in the background as in the daemon;
- ``paced``: ``Agent.tick()`` on a simulated clock advanced 1 s a tick, engine scrapes waited for, one
  tick every wall-clock second (the machine idles between ticks as the daemon's does);
- ``simulated``: the same back to back (as ``steady.py`` and ``rule_cost.py`` measure); as many ticks
  warm up and are measured as the others have seconds, so that every store holds as much.

After the warm-up each child samples the CPU of its threads (``pthread_getcpuclockid``: each thread's
own CPU clock, named by ``threading``) and of the whole process over ``--seconds`` of wall time;
printed per second of agent time (simulated ticks: per tick), per thread name (collector workers by
collector; threads that ended meanwhile, such as the exporter's per-request threads, together), and
the wake-ups per second: voluntary context switches of the threads alive at both ends (each a wait or
sleep that ended; on this project's virtual machines a sleep and its wake-up cost 35-65 µs of the
thread's CPU, against a few on bare metal). ``--no-rules`` runs every child without rule files: the
floor under the rules (collection, storage, self-metrics, the daemon's machinery).
``daemon`` - ``realtime`` is the daemon's own machinery; ``realtime`` - ``paced``, engine scrapes in the
background and the real clock; ``paced`` - ``simulated``, what a second of idling between ticks costs
the next one (caches and branch predictors cold, other processes run meanwhile). The machine is shared:
read the columns of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from peer import EXPORTER_SCRAPE_SECONDS, agent_config, free_port  # noqa: E402
from simnode import ROOT, env_for, start_simulator  # noqa: E402

CHILD = r"""
import json, logging, os, re, sys, threading, time
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_settings
from tick import fake_nvml

mode, config, listen, gpus, warmup, seconds = (sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                                               float(sys.argv[5]), float(sys.argv[6]))
logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
nvml = fake_nvml(gpus)  # the checkout's benchmarks/tick.py: h100-sxm-8 cut to ``gpus``, all busy
settings = load_settings(config)
now = [time.time()]
simulated = mode in ("simulated", "paced")
agent = Agent(settings, config_path=config, context=CollectorContext(nvml=nvml),
              **({"clock": lambda: now[0], "background_scrapes": False} if simulated else {}))

def cpu():
    out = {}
    for thread in threading.enumerate():
        try:
            out[thread.native_id] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, TypeError):  # the thread ended meanwhile
            continue
    return out

def switches():
    # voluntary context switches of each live thread (each a wait or sleep that ended in a wake-up)
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                out[int(tid)] = next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt"))
        except (OSError, StopIteration):  # the thread ended meanwhile
            continue
    return out

def names():
    return {t.native_id: re.sub(r"-\d+$|^Thread-\d+ ", "", t.name) for t in threading.enumerate()}

def report(start, end, ticks, wall):
    t0, t1 = start[0], end[0]
    per = {}
    labels = names()
    for tid, value in end[1].items():
        label = labels.get(tid, "(unnamed)")
        per[label] = per.get(label, 0.0) + value - start[1].get(tid, 0.0)
    wakes = {}
    for tid, value in end[3].items():
        label = labels.get(tid, "(unnamed)")
        wakes[label] = wakes.get(label, 0) + value - start[3].get(tid, 0)
    live = sum(per.values())
    per["(threads gone)"] = (end[2] - start[2]) - live
    # one write, so that no log line of another thread lands inside it
    sys.stdout.write(json.dumps({"mode": mode, "wall": t1 - t0, "ticks": ticks, "cpu": end[2] - start[2],
                                 "threads": per, "wakes": wakes}) + "\n")
    sys.stdout.flush()

def snap():
    return (time.monotonic(), cpu(), time.process_time(), switches())

if mode == "daemon":
    from watchdog.daemon.serve import serve
    def measure():
        time.sleep(warmup)
        start, ticks0 = snap(), agent.stats.ticks_total
        time.sleep(seconds)
        report(start, snap(), agent.stats.ticks_total - ticks0, seconds)
        sys.stdout.flush()
        os.kill(os.getpid(), 15)
    threading.Thread(target=measure, name="bench", daemon=True).start()
    sys.exit(serve(agent, listen))
done = 0  # ticks so far: as many warm up and are measured as the daemon's seconds
start = None
ticks = 0
due = time.monotonic()
while True:
    if simulated:
        now[0] += 1.0
    if mode != "simulated":
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        due += 1.0
    agent.tick()
    done += 1
    if start is None and done >= warmup:
        start, ticks = snap(), 0
    elif start is not None:
        ticks += 1
        if ticks >= seconds:
            break
report(start, snap(), ticks, seconds)
agent.close(timeout_seconds=1)
"""

MODES = ("daemon", "realtime", "paced", "simulated")


def main() -> int:
    """Run the three children side by side and print the per-thread table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1x1", help="GPUsxengines")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured wall seconds")
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--tree", default=str(ROOT), help="the checkout to run")
    parser.add_argument("--no-rules", action="store_true",
                        help="run every child without rule files: what the collectors, the store and the daemon's "
                             "own machinery cost with no rule to evaluate (the floor under the rules)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated children to run, daemon among them (default all; daemon alone to run two "
                             "checkouts at once)")
    args = parser.parse_args()
    modes = [mode for mode in MODES if mode in args.modes.split(",")]
    if "daemon" not in modes:  # its exporter scrapes pace the run
        parser.error("--modes must include daemon")
    gpus, engines = (int(x) for x in args.size.split("x"))
    tree = Path(args.tree).resolve()
    sim, _, ports = start_simulator(gpus, engines)
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            children = {}
            env = env_for(tree)
            env["PYTHONPATH"] += f"{os.pathsep}{tree / 'benchmarks'}"
            for mode in modes:
                config = agent_config(workdir, mode, tree, ports, 900,
                                      {"rules": {"paths": []}} if args.no_rules else {})
                listen = f"127.0.0.1:{free_port()}"
                children[mode] = (subprocess.Popen(
                    [sys.executable, "-c", CHILD, mode, str(config), listen, str(gpus), str(args.warmup),
                     str(args.seconds)], stdout=subprocess.PIPE, text=True, env=env, cwd=workdir), listen)
            url = f"http://{children['daemon'][1]}/metrics"
            end = time.monotonic() + args.warmup + args.seconds + 5
            next_scrape = time.monotonic() + EXPORTER_SCRAPE_SECONDS
            while time.monotonic() < end and children["daemon"][0].poll() is None:
                if time.monotonic() >= next_scrape:
                    next_scrape += EXPORTER_SCRAPE_SECONDS
                    try:
                        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
                        with urllib.request.urlopen(request, timeout=10) as response:
                            response.read()
                    except OSError as exc:
                        print(f"exporter scrape failed: {exc}", file=sys.stderr)
                time.sleep(0.2)
            for mode, (proc, _) in children.items():
                out, _ = proc.communicate(timeout=args.seconds * 20 + 120)
                lines = [line for line in out.splitlines() if line.startswith('{"mode": ')]
                if not lines:
                    raise SystemExit(f"{mode} printed no result (exit {proc.returncode})")
                try:
                    results[mode] = json.loads(lines[-1])
                except ValueError:
                    raise SystemExit(f"{mode} printed an unreadable result: {lines[-1]!r}") from None
    finally:
        sim.kill()
        sim.wait()
    scales = {m: results[m]["ticks"] if m == "simulated" else results[m]["wall"] for m in modes}
    per = {mode: r["cpu"] / scales[mode] * 1000 for mode, r in results.items()}
    print(f"{args.size}: CPU ms per second of agent time (simulated: per tick), {args.seconds:g} s after "
          f"{args.warmup:g} s of warm-up; tree {tree}{'; no rules' if args.no_rules else ''}")
    print(f"{'thread':<34}" + "".join(f" {m:>10}" for m in modes))
    print(f"{'whole process':<34}" + "".join(f" {per[m]:10.2f}" for m in modes))
    def row(key: str, label: str, factor: float, digits: int) -> str:
        """One label's cells: its ``key`` figure ("threads" or "wakes") per second (per tick) per mode."""
        cells = []
        for mode in modes:
            value = results[mode][key].get(label)
            cells.append(f" {value / scales[mode] * factor:10.{digits}f}" if value is not None else f" {'':>10}")
        return "".join(cells)

    labels = sorted({label for r in results.values() for label in r["threads"]},
                    key=lambda label: -max(r["threads"].get(label, 0.0) for r in results.values()))
    for label in labels:
        print(f"{label:<34}" + row("threads", label, 1000, 2))
    print(f"{'wake-ups a second (live threads)':<34}" + "".join(
        f" {sum(results[m]['wakes'].values()) / scales[m]:10.1f}" for m in modes))
    for label in sorted({label for r in results.values() for label in r["wakes"]}):
        print(f"  {label:<32}" + row("wakes", label, 1, 1))
    print("ticks measured: " + ", ".join(f"{m} {results[m]['ticks']}" for m in modes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
