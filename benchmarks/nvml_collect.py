#!/usr/bin/env python3
"""CPU of the NVML collection at 8 GPUs, per thread, checkouts side by side: the agent's share and the fake's.

Guards the NVML collection's share of the CPU target (and separates the fake driver's own cost).

    .venv/bin/python benchmarks/nvml_collect.py [--gpus 8] [--ticks 60] [--rounds 4] [--warmup 30]
        [--pace 0.05] [--split] [--inline] [--tree main=/path/to/old/checkout --tree this=.]

Each checkout (default: this tree) runs in its own child process with its own fake NVML (h100-sxm-8 cut
to ``--gpus``, NVLink on, processes on: the default settings), NVML collector, collector runner and store,
on a simulated 1 s tick clock (counters read every 5 ticks, as in the daemon): per tick the fake's time
advances a second and every GPU's load moves (utilization, power, temperature, clocks and energy all
change), then ``CollectorRunner.run_once`` and ``ingest_results``, as the agent's collect stage does. The
children warm up ``--warmup`` ticks, then run blocks of ``--ticks`` ticks one after the other
(``--rounds`` rounds), each tick followed by ``--pace`` seconds of sleep so that the collector's
threads go idle between ticks as they do in the daemon (whose ticks are a second apart).

Printed per checkout, in ms of CPU per collection (each thread's own CPU clock): the whole process, the
caller (the runner and the store's ingest, on the tick's thread; the fake's control calls excluded), the
``collector-nvml`` thread (the collector's ``collect``), the per-GPU ``nvml-gpu<i>`` threads together,
and, with ``--split``, the time spent inside the fake's NVML functions (timed with ``perf_counter``
around each call: a wrapper that itself costs about 0.2 µs a call, counted on the agent's side) and the
agent's share (the three threads less the fake). The fake stands in for a driver whose calls cost CPU
too (pynvml's ctypes wrappers and the kernel's ioctls): read the agent's share for what this code costs.

``--inline`` measures the collector's own code: each GPU's read runs at once on the collector's thread
(the per-GPU workers replaced by an inline stand-in) and, after the warm-up, NVML answers the calls from a
recording of the fake's answers (a dict look-up, about 2 µs a call with its key, counted as the agent's),
so the values stop moving; what is left is the collector's work per collection, without thread hand-offs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()

CHILD = r"""
import json, math, sys, threading, time
gpus, warmup, ticks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
pace, split, inline = float(sys.argv[4]), sys.argv[5] == "1", sys.argv[6] == "1"
from concurrent.futures import Future
from watchdog.collectors import nvml as nvml_module
from watchdog.collectors.base import CollectorRunner, ingest_results
from watchdog.collectors.nvml import NvmlCollector
from watchdog.fakes.pynvml import FakeNvml, load_profile

class Inline:  # a per-GPU worker that runs each read at once on the caller's thread (--inline)
    def __init__(self, *args, **kwargs):
        pass
    def submit(self, fn, *args):
        future = Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)
        return future
    def post(self, fn):
        fn()
    def stop(self):
        pass
    def shutdown(self, *args, **kwargs):
        pass

class Replay:  # the fake NVML recording its answers until ``recording`` is False, then replaying them
    def __init__(self, fake):
        self._fake, self._answers, self.recording = fake, {}, True
    def __getattr__(self, name):
        real = getattr(self._fake, name)
        if not name.startswith("nvmlDevice") or not callable(real):
            return real
        answers = self._answers
        def call(*args):
            key = (name, *(getattr(a, "index", None) if type(a).__name__ == "c_nvmlDevice_t"
                           else tuple(a) if isinstance(a, list) else a for a in args))
            if self.recording:
                try:
                    answers[key] = (True, real(*args))
                except Exception as exc:
                    answers[key] = (False, exc)
            ok, value = answers[key]
            if not ok:
                raise value
            return value
        setattr(self, name, call)
        return call
from watchdog.store import Store

profile = load_profile("h100-sxm-8")
profile["gpus"] = profile["gpus"][:gpus]
fake = nvml = FakeNvml(profile)
inside = {}  # thread ident -> seconds inside the fake's NVML functions
if split:
    perf = time.perf_counter
    def timed(fn):
        def call(*args, **kwargs):
            started = perf()
            try:
                return fn(*args, **kwargs)
            finally:
                ident = threading.get_ident()
                inside[ident] = inside.get(ident, 0.0) + perf() - started
        return call
    for name in dir(type(nvml)):
        if name.startswith("nvml") and callable(getattr(nvml, name)):
            setattr(nvml, name, timed(getattr(nvml, name)))
if inline:
    for module in [m for name, m in sys.modules.items() if name.startswith("watchdog.collectors.nvml")]:
        for pool in ("Worker", "DaemonPool"):  # the per-GPU worker's name in older and newer checkouts
            if hasattr(module, pool):
                setattr(module, pool, Inline)
    nvml = Replay(fake)
now = [1_800_000_000.0]
collector = NvmlCollector(nvml, counters_clock=lambda: now[0])
runner = CollectorRunner([collector])
store = Store(retention_ms=300_000, max_points=360)
control = [0.0]  # CPU of the fake's control calls on this thread (not the agent's)

def tick():
    now[0] += 1.0
    started = time.thread_time()
    fake.set_time(fake.now + 1.0)
    for gpu in range(gpus):
        fake.set_load(gpu, 50.0 + 40.0 * math.sin(fake.now / 7.0 + gpu))
    control[0] += time.thread_time() - started
    ingest_results(store, runner.run_once(now=now[0]), int(now[0] * 1000))
    if int(now[0]) % 60 == 0:
        store.gc(int(now[0] * 1000))

def clocks():
    out = {}
    for thread in threading.enumerate():
        try:
            out[thread.ident] = (thread.name, time.clock_gettime(time.pthread_getcpuclockid(thread.ident)))
        except (OSError, TypeError):
            continue
    return out

for _ in range(warmup):
    tick()
if inline:
    nvml.recording = False
main = threading.get_ident()
for line in sys.stdin:
    before, process, control[0] = clocks(), time.process_time(), 0.0
    inside.clear()
    for _ in range(ticks):
        tick()
        if pace:
            time.sleep(pace)
    after, process = clocks(), time.process_time() - process
    roles = {"caller": 0.0, "collector": 0.0, "gpu workers": 0.0}
    in_fake = {"caller": 0.0, "collector": 0.0, "gpu workers": 0.0}
    for ident, (name, seconds) in after.items():
        role = ("caller" if ident == main else "collector" if name.startswith("collector-nvml")
                else "gpu workers" if name.startswith("nvml-gpu") else None)
        if role is not None:
            roles[role] += seconds - before.get(ident, (name, 0.0))[1]
            in_fake[role] += inside.get(ident, 0.0)
    roles["caller"] -= control[0]
    print(json.dumps({"process": process, "roles": roles, "fake": in_fake, "ticks": ticks}), flush=True)
runner.close()
collector.close()
"""

ROLES = ("caller", "collector", "gpu workers")


def main() -> int:
    """Run the checkouts' children block by block and print the per-thread table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=60, help="ticks per measured block")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--pace", type=float, default=0.05, help="seconds of sleep after each tick")
    parser.add_argument("--split", action="store_true", help="time the fake's NVML functions")
    parser.add_argument("--inline", action="store_true",
                        help="the collector's own code: GPU reads on the collector's thread, NVML answers replayed")
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a checkout (repeatable)")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree or ["this=."])]
    children: dict[str, subprocess.Popen[str]] = {}
    for name, tree in trees:
        python = tree / ".venv" / "bin" / "python"
        children[name] = subprocess.Popen(
            [str(python if python.exists() else sys.executable), "-c", CHILD, str(args.gpus), str(args.warmup),
             str(args.ticks), str(args.pace), "1" if args.split else "0", "1" if args.inline else "0"],
            cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    totals: dict[str, dict[str, float]] = {name: {} for name in children}
    try:
        for _ in range(args.rounds):
            for name, proc in children.items():  # one block at a time: the checkouts alternate
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("block\n")
                proc.stdin.flush()
                block: dict[str, Any] = json.loads(proc.stdout.readline())
                into = totals[name]
                into["ticks"] = into.get("ticks", 0.0) + block["ticks"]
                into["process"] = into.get("process", 0.0) + block["process"]
                for role in ROLES:
                    into[role] = into.get(role, 0.0) + block["roles"][role]
                    into["fake " + role] = into.get("fake " + role, 0.0) + block["fake"][role]
    finally:
        for proc in children.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
    print(f"{args.gpus} GPUs: ms of CPU per collection, {args.rounds} rounds of {args.ticks} ticks per checkout "
          f"(alternating), {args.pace:g} s idle after each tick")
    rows = ["process", *ROLES, "NVML threads"] + (["fake (inside its NVML functions)", "agent"] if args.split else [])
    names = list(children)
    print(f"{'':<34}" + "".join(f" {name:>10}" for name in names)
          + ("".join(f" {names[0] + '/' + name:>12}" for name in names[1:])))
    for row in rows:
        values = []
        for name in names:
            t = totals[name]
            fake = sum(t["fake " + role] for role in ROLES)
            value = {"NVML threads": t["collector"] + t["gpu workers"],
                     "fake (inside its NVML functions)": fake,
                     "agent": sum(t[role] for role in ROLES) - fake}.get(row, t.get(row, 0.0))
            values.append(value / t["ticks"] * 1000)
        print(f"{row:<34}" + "".join(f" {v:10.3f}" for v in values)
              + "".join(f" {values[0] / v:11.2f}x" if v else f" {'':>12}" for v in values[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
