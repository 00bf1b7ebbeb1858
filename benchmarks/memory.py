#!/usr/bin/env python3
"""Resident memory of the agent with its store full, on simulated time, for one or more checkouts side by side.

Guards the memory target: at most 80 MB resident at 8 GPUs x 8 engines with the 15-minute retention
full, and flat over a simulated day (``--step 30``).

    .venv/bin/python benchmarks/memory.py [--size 8x8] [--seconds 1200] [--retention 900] [--step 1]
                                          [--tree NAME=PATH]... [--env NAME:VAR=VALUE]... [--trace 15] [--breakdown]
                                          [--diff TICK]

Each checkout runs in its own process the real pipeline of the daemon's tick (the engines of
``benchmarks/simnode.py`` scraped over loopback HTTP, each scrape a new step; the fake NVML of the demo;
generous deadlines, so that a busy machine slows the run down instead of dropping points;
the full default rule pack; alert lifecycle, runbooks, notifiers; an exporter page rendered every 15
simulated seconds) on a simulated clock advanced one second per tick, as fast as the CPU allows: a
15-minute retention fills in minutes, and memory after it has filled is the steady state. It prints
RSS (``/proc/self/status``) every ``--every`` ticks, the series and points held and the bytes of process
memory per stored point beyond the first report, and at the end the RSS that glibc's ``malloc_trim(0)``
gives back (heap memory freed but still held: fragmentation). ``--trace N`` also prints the N largest
allocation sites (tracemalloc, by line) at the end: slower, for finding where memory goes.
``--breakdown`` prints, at the end, the size of the objects reachable from each part of the agent (the
store's head arrays, sealed chunks, label sets, ``Series`` objects and each index; the evaluator's caches;
the rule engine; the collectors; the exporter), each object counted once in that order, how many head
values would fit float32 and small integers, and glibc's ``mallinfo2`` (in use, free but held).

``--step S`` advances the simulated clock S seconds per tick (the agent still believes in its 1 s tick):
``--seconds 86400 --step 10`` is a simulated day in 8 640 ticks, for what grows with time rather than with
ticks (state database, alert history, caches keyed by time); the store then holds a tenth of the GPU
points of a 1 s tick. ``--env NAME:VAR=VALUE`` sets an environment variable for one checkout's process
(``--tree this=. --tree arena2=. --env arena2:MALLOC_ARENA_MAX=2`` measures glibc's arena limit).

Each report also prints glibc's heap in use and free but held (``mallinfo2``) and the blocks Python has
allocated (``sys.getallocatedblocks``): RSS that grows while these two are flat and the free part grows is
fragmentation, not a Python structure. ``--diff TICK`` counts the garbage-collected objects by type at TICK
and at the end and prints the largest changes (cheap; tracemalloc with tracebacks over thousands of ticks
is several times slower than the run itself). ``MEMORY_BENCH_TRIM_EVERY=N`` in a checkout's environment
(``--env trim:MEMORY_BENCH_TRIM_EVERY=60``) calls ``malloc_trim(0)`` every N ticks and prints its cost.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from simnode import ROOT, env_for, start_simulator

CHILD = r"""
import ctypes, gc, os, sys, tempfile, threading, time, tracemalloc
import yaml
gpus, ports, seconds, retention, every, trace, step = (int(sys.argv[1]), [int(p) for p in sys.argv[2].split(",")],
                                                       int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]),
                                                       int(sys.argv[6]), float(sys.argv[8]))
breakdown = sys.argv[9] == "1"
diff_at = int(sys.argv[10])
if trace:
    tracemalloc.start(1)
diff_from = None
trim_every = int(os.environ.get("MEMORY_BENCH_TRIM_EVERY", "0"))
trim_seconds = 0.0

def type_counts():
    counts = {}
    for obj in gc.get_objects():
        name = type(obj).__qualname__
        counts[name] = counts.get(name, 0) + 1
    return counts
from watchdog.agent import Agent
from watchdog.collectors.base import CollectorContext
from watchdog.config import load_config_text
from watchdog.config.settings import settings_from_config
from watchdog.exporter.server import exporter_for_store
from watchdog.fakes.gpu_model import load_profile
from watchdog.fakes.pynvml import FakeNvml

class MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

tmp = tempfile.mkdtemp(prefix="watchdog-memory-")
open(f"{tmp}/kmsg.log", "w").close()
doc = {"node": "memory-node", "tick_interval_seconds": 1, "retention_seconds": retention, "state_dir": tmp,
       "rules": {"paths": [sys.argv[7] + "/rules/*.yaml"]},
       "engines": [{"job": f"vllm-{i}", "url": f"http://127.0.0.1:{p}/metrics", "kind": "vllm",
                    "scrape_timeout_seconds": 30} for i, p in enumerate(ports)],
       "kmsg": {"source": f"{tmp}/kmsg.log"},
       "collectors": {"host": {"enabled": False}, "nvml": {"timeout_seconds": 30}},
       "notifiers": {"log": {"enabled": False}}}
settings = settings_from_config(load_config_text(yaml.safe_dump(doc), "<memory>"))
profile = load_profile("h100-sxm-8")
profile["gpus"] = profile["gpus"][:gpus]
nvml = FakeNvml(profile)
for i in range(gpus):
    nvml.set_load(i, 90.0)
now = [1_800_000_000.0]
clock = lambda: now[0]
agent = Agent(settings, clock=clock, context=CollectorContext(nvml=nvml), background_scrapes=False)
try:  # the daemon's cyclic-collector thresholds (serve() sets them), in checkouts that have them
    from watchdog.infra.heap import quiet_cyclic_gc
    quiet_cyclic_gc()
except ImportError:
    pass
exporter = exporter_for_store(agent.store, "127.0.0.1:0", ready=lambda: True, clock=clock)
first = None
started = time.process_time()
ticks = int(seconds / step)
for tick in range(1, ticks + 1):
    now[0] += step
    agent.tick()
    if tick % max(1, round(15 / step)) == 0:
        exporter.render_metrics()
    if trim_every and tick % trim_every == 0:
        trim_started = time.perf_counter()
        libc.malloc_trim(0)
        trim_seconds += time.perf_counter() - trim_started
    if diff_at and tick == diff_at:
        gc.collect()
        diff_from = (type_counts(), sys.getallocatedblocks())
    if tick % every == 0 or tick == ticks:
        gc.collect()
        points = sum(len(s) for s in agent.store.all_series()) if hasattr(agent.store.all_series()[0], "__len__") \
            else sum(len(s.timestamps) for s in agent.store.all_series())
        mb = rss()
        first = first or (mb, points)
        per_point = (mb - first[0]) * 2**20 / (points - first[1]) if points > first[1] else float("nan")
        print(f"tick {tick:>6}  t+{tick * step / 3600:5.2f} h  RSS {mb:7.1f} MB  series {len(agent.store):>6}  "
              f"points {points:>9}  {per_point:6.1f} B/point since tick {every}  threads {threading.active_count()}  "
              f"cpu {time.process_time() - started:7.1f} s  heap {libc.mallinfo2().uordblks / 2**20:5.1f} in use "
              f"{libc.mallinfo2().fordblks / 2**20:5.1f} free  blocks {sys.getallocatedblocks()}", flush=True)
if trim_every:
    print(f"malloc_trim(0) every {trim_every} ticks: {ticks // trim_every} calls, {trim_seconds * 1000:.1f} ms in all "
          f"({trim_seconds * 1000 / max(1, ticks // trim_every):.2f} ms a call)")
storage = [s.storage() for s in agent.store.all_series()] if hasattr(agent.store.all_series()[0], "storage") else []
if storage:
    head, sealed, sealed_bytes = (sum(x) for x in zip(*storage))
    print(f"uncompressed points {head} ({head * 16 / 2**20:.1f} MB), sealed points {sealed} in "
          f"{sealed_bytes / 2**20:.1f} MB ({sealed_bytes / max(sealed, 1):.2f} B/point)")
before_trim = rss()
ctypes.CDLL("libc.so.6").malloc_trim(0)
print(f"malloc_trim(0): RSS {before_trim:.1f} -> {rss():.1f} MB (heap freed but held: {before_trim - rss():.1f} MB)")
if breakdown:
    import types
    from array import array as _array
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
            types.CodeType, types.FrameType)
    seen = {id(agent), id(exporter), id(agent.store)}
    def deep(*roots):
        total, stack = 0, list(roots)
        while stack:
            obj = stack.pop()
            if id(obj) in seen or isinstance(obj, skip):
                continue
            seen.add(id(obj))
            total += sys.getsizeof(obj)
            stack.extend(gc.get_referents(obj))
        return total
    store = agent.store
    all_series = store.all_series()
    parts = [("store: point arrays (uncompressed head)", [a for s in all_series for a in (s._head_t, s._head_v)]),
             ("store: sealed chunks", [s._chunks for s in all_series]),
             ("store: label sets", [s.labels for s in all_series]),
             ("store: Series objects", all_series),
             *((f"store: {name}", [value]) for name, value in vars(store).items()),
             ("rules: evaluator caches (counter index, selections)",
              [agent.rule_engine._counters, agent.rule_engine._selections]),
             ("rules: engine (rule set, plans, state)", [vars(agent.rule_engine)]),
             ("collectors (scrape caches, parsers)", [agent.collectors, agent.runner]),
             ("exporter (page cache)", [vars(exporter)]),
             ("agent: rest", [vars(agent)])]
    python_total = 0
    for name, roots in parts:
        size = deep(*roots)
        python_total += size
        if size >= 50_000:
            print(f"breakdown {size / 2**20:7.2f} MB  {name}")
    print(f"breakdown {python_total / 2**20:7.2f} MB  reachable from the agent in all")
    kinds = {"f": 0, "i": 0, "h": 0, "b": 0}
    for s in all_series:
        values = s._head_v
        if _array("d", _array("f", values)) == values:
            kinds["f"] += len(values)
        ints = [int(v) for v in values if v == v and abs(v) < 2**40]
        if len(ints) == len(values) and _array("d", ints) == values:
            for code, bound in (("b", 1 << 7), ("h", 1 << 15), ("i", 1 << 31)):
                if all(-bound <= i < bound for i in ints):
                    kinds[code] += len(values)
                    break
    print(f"breakdown head values: {sum(len(s._head_v) for s in all_series)} points; in series whose head "
          f"values all fit float32: {kinds['f']}, int8 {kinds['b']}, int16 {kinds['h']}, int32 {kinds['i']}")
    info = libc.mallinfo2()
    print(f"breakdown malloc: {info.uordblks / 2**20:.1f} MB in use, {info.fordblks / 2**20:.1f} MB free but held "
          f"(fragmentation), {info.hblkhd / 2**20:.1f} MB in mmap'd blocks")
    if trace:
        print(f"breakdown tracemalloc: {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MB traced")
if trace:
    for stat in tracemalloc.take_snapshot().statistics("lineno")[:trace]:
        print(f"  {stat.size / 2**20:8.2f} MB  {stat.count:>9} blocks  {stat.traceback[0]}")
if diff_from is not None:
    gc.collect()
    later = type_counts()
    print(f"diff: tick {diff_at} -> {ticks}: Python allocated blocks {diff_from[1]} -> {sys.getallocatedblocks()}; "
          "gc-tracked objects by type, largest changes:")
    changes = sorted(((later.get(k, 0) - diff_from[0].get(k, 0), k) for k in set(later) | set(diff_from[0])),
                     key=lambda c: -abs(c[0]))
    for change, name in changes[:15]:
        print(f"  {change:+9}  {name}  ({later.get(name, 0)})")
agent.close(timeout_seconds=1)
"""


def main() -> int:
    """Run each checkout and print its memory as the store fills."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="8x8", metavar="GxE", help="GPUs x engine endpoints")
    parser.add_argument("--seconds", type=int, default=1200, help="simulated seconds (ticks)")
    parser.add_argument("--retention", type=float, default=900.0)
    parser.add_argument("--step", type=float, default=1.0, help="simulated seconds per tick")
    parser.add_argument("--every", type=int, default=120, help="report every N ticks")
    parser.add_argument("--tree", action="append", default=None, metavar="NAME=PATH",
                        help="a checkout to measure (repeatable; default: this tree)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME:VAR=VALUE",
                        help="an environment variable for one checkout's process (repeatable)")
    parser.add_argument("--trace", type=int, default=0, help="print the N largest allocation sites")
    parser.add_argument("--breakdown", action="store_true",
                        help="print the sizes of the store's, evaluator's, collectors' and exporter's objects")
    parser.add_argument("--diff", type=int, default=0, metavar="TICK",
                        help="count gc-tracked objects by type at TICK and at the end; print what grew")
    args = parser.parse_args()
    gpus, engines = (int(x) for x in args.size.lower().split("x"))
    trees = [(spec.partition("=")[0], Path(spec.partition("=")[2]).resolve()) for spec in args.tree or []]
    trees = trees or [("this", ROOT)]
    extra_env: dict[str, dict[str, str]] = {}
    for spec in args.env:
        name, _, assignment = spec.partition(":")
        var, _, value = assignment.partition("=")
        extra_env.setdefault(name, {})[var] = value
    sim, _, ports = start_simulator(gpus, engines)
    with tempfile.TemporaryDirectory(prefix="watchdog-memory-") as outdir:
        try:
            children = []
            for name, tree in trees:
                out = Path(outdir) / f"{name}.txt"
                with out.open("w") as handle:
                    child = subprocess.Popen([sys.executable, "-c", CHILD, str(gpus), ",".join(map(str, ports)),
                                              str(args.seconds), str(args.retention), str(args.every),
                                              str(args.trace), str(tree), str(args.step),
                                              "1" if args.breakdown else "0", str(args.diff)],
                                             stdout=handle, stderr=subprocess.STDOUT,
                                             env={**env_for(tree), **extra_env.get(name, {})},
                                             cwd=outdir)  # not this checkout: `-c` imports from the cwd first
                children.append((name, child, out))
                print(f"{name}: progress in {out}", file=sys.stderr)
            for name, child, out in children:
                child.wait()
                print(f"== {name} ({gpus} GPU(s) x {engines} engine(s), retention {args.retention:g} s, "
                      f"{args.step:g} s per tick{''.join(f', {k}={v}' for k, v in extra_env.get(name, {}).items())})")
                print("".join(line for line in out.read_text().splitlines(keepends=True)
                              if not line.startswith("rule evaluation failed")))
        finally:
            sim.kill()
            sim.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
