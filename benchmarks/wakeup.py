#!/usr/bin/env python3
"""What a wake-up costs on this machine: the price of a daemon that sleeps between small pieces of work.

    .venv/bin/python benchmarks/wakeup.py [--rounds 200] [--idle 0.01]

The agent's daemon does a little work every second on a dozen threads (the tick, one worker per
collector, one per GPU, the engine scrapes): each piece of work starts with a wake-up (a sleep, a queue
or future wait, or a wait for the GIL, ending) and runs on caches that other processes used meanwhile.
On bare metal a wake-up costs a few microseconds; on a virtual machine the timer and the wake-up can
cost far more, and that cost is charged to the sleeping thread's CPU time, which is what ``/proc``,
``peer.py`` and ``daemon_gap.py`` read. Printed, each measured with the threads' own CPU clocks
(``time.thread_time``), medians over ``--rounds``:

- ``sleep``: the CPU a thread pays for one ``time.sleep(--idle)`` (the wait and its wake-up);
- ``hand-off``: one item sent to a waiting worker thread through a ``queue.SimpleQueue`` and its answer
  sent back (the collector runner's pattern), CPU of both threads, after ``--idle`` of sleep;
- ``collect, warm`` and ``collect, after idle``: one collection of a real collector with nothing new to
  report (the kernel-log collector over an empty log: a read, a stat, its counters; much code, little
  work, like most of a quiet tick) back to back, then each after ``--idle`` of sleep, timed from the
  wake-up on: their ratio is what idling between ticks costs the work that follows (caches and branch
  predictors cold, other processes ran meanwhile, the CPU's frequency).

Read these as the machine's constants when reading the daemon's figures: ``daemon_gap.py`` prints the
wake-ups a second of each thread, ``peer.py`` those of each process.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def quiet_collector(workdir: Path) -> Callable[[], object]:
    """The kernel-log collector over an empty log file: a collection that finds nothing new."""
    from tick import fake_nvml  # benchmarks/tick.py

    from watchdog.collectors.kmsg import KmsgCollector, build_source_factory
    from watchdog.infra.state import StateDB

    (workdir / "kmsg.log").touch()
    key, factory = build_source_factory(str(workdir / "kmsg.log"), workdir, "boot")
    collector = KmsgCollector(factory, StateDB(workdir / "state.db"), source_key=key, nvml=fake_nvml(1),
                              boot_id="boot")
    return collector.collect


def sleep_cost(rounds: int, idle: float) -> float:
    """Median CPU seconds of one ``time.sleep(idle)``."""
    costs = []
    for _ in range(rounds):
        t0 = time.thread_time()
        time.sleep(idle)
        costs.append(time.thread_time() - t0)
    return statistics.median(costs)


def handoff_cost(rounds: int, idle: float) -> float:
    """Median CPU seconds (both threads) of one request to a waiting worker and its answer."""
    requests: queue.SimpleQueue[float | None] = queue.SimpleQueue()
    answers: queue.SimpleQueue[float] = queue.SimpleQueue()

    def worker() -> None:
        while True:
            item = requests.get()
            if item is None:
                return
            answers.put(time.thread_time())

    thread = threading.Thread(target=worker, name="wakeup-worker", daemon=True)
    thread.start()
    clock = time.pthread_getcpuclockid(thread.ident or 0)
    costs = []
    for _ in range(rounds):
        time.sleep(idle)
        c0, w0 = time.thread_time(), time.clock_gettime(clock)
        requests.put(0.0)
        answers.get()
        costs.append(time.thread_time() - c0 + time.clock_gettime(clock) - w0)
    requests.put(None)
    thread.join()
    return statistics.median(costs)


def work_cost(work: Callable[[], object], rounds: int, idle: float) -> tuple[float, float]:
    """Median CPU seconds of ``work()`` back to back, and after ``idle`` of sleep (from the wake-up on)."""
    for _ in range(50):
        work()
    warm = []
    for _ in range(rounds):
        t0 = time.thread_time()
        work()
        warm.append(time.thread_time() - t0)
    cold = []
    for _ in range(rounds):
        time.sleep(idle)
        t0 = time.thread_time()
        work()
        cold.append(time.thread_time() - t0)
    return statistics.median(warm), statistics.median(cold)


def main() -> int:
    """Print the machine's wake-up constants."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--idle", type=float, default=0.01, help="seconds of sleep before each measured round")
    args = parser.parse_args()
    sleep = sleep_cost(args.rounds, args.idle)
    handoff = handoff_cost(args.rounds, args.idle)
    with tempfile.TemporaryDirectory() as tmp:
        warm, cold = work_cost(quiet_collector(Path(tmp)), args.rounds, args.idle)
    print(f"medians of {args.rounds} rounds, {args.idle * 1000:g} ms idle before each")
    print(f"sleep (wait and wake-up)        {sleep * 1e6:8.1f} us of CPU")
    print(f"hand-off to a worker and back   {handoff * 1e6:8.1f} us of CPU (both threads)")
    print(f"collect, warm                   {warm * 1e6:8.1f} us of CPU")
    print(f"collect, after idle             {cold * 1e6:8.1f} us of CPU ({cold / warm:.2f}x warm)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
