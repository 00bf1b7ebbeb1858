#!/usr/bin/env python3
"""Kernel-log parse throughput: how many lines per second the parser and the file collector handle.

Guards the kernel-log catch-up: hundreds of thousands of lines a second, so a restart catches up at once.

    .venv/bin/python benchmarks/kmsg_parse.py [--lines N] [--repeat R]

Builds a log of N lines (default 200 000) from the real excerpts in tests/fixtures/kmsg, diluted with
ordinary kernel chatter (about 1 line in 20 is an NVIDIA/OOM line, as on a busy GPU node), then prints
the median time and lines/s of:
- ``parse_lines`` over the whole log (the ``kmsg parse`` command's work),
- the kmsg collector's first collection of the same log from a file (read + parse + map + one SQLite
  transaction), i.e. the catch-up after a restart.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from watchdog.collectors.kmsg import KmsgCollector  # noqa: E402
from watchdog.infra.state import StateDB  # noqa: E402
from watchdog.kmsg.follow import FileFollower  # noqa: E402
from watchdog.kmsg.parse import parse_lines  # noqa: E402

CHATTER = [
    "[ 1234.567890] IPv6: ADDRCONF(NETDEV_CHANGE): cali817bc444564: link becomes ready",
    "[ 1234.567891] mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
    "[ 1234.567892] EXT4-fs (md127p3): re-mounted. Quota mode: none.",
    "[ 1234.567893] nvidia-nvswitch2: open (major=510)",
    "[ 1234.567894] NVRM: GPU Board Serial Number: 1650423013443",
]


def build_log(n: int) -> list[str]:
    interesting = [line for path in sorted((ROOT / "tests/fixtures/kmsg").glob("*.log"))
                   for line in path.read_text().splitlines() if line.strip()]
    lines: list[str] = []
    i = 0
    while len(lines) < n:
        lines.extend(CHATTER[j % len(CHATTER)] for j in range(19))
        lines.append(interesting[i % len(interesting)])
        i += 1
    return lines[:n]


def median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lines = build_log(args.lines)

    events = sum(1 for _ in parse_lines(lines))
    parse_s = median(lambda: sum(1 for _ in parse_lines(lines)), args.repeat)
    print(f"parse_lines: {len(lines)} lines, {events} events, median {parse_s * 1000:.1f} ms "
          f"({len(lines) / parse_s:,.0f} lines/s)")

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "kern.log"
        log.write_text("\n".join(lines) + "\n")

        def first_collection() -> None:
            db_dir = Path(tempfile.mkdtemp(dir=tmp))
            collector = KmsgCollector(lambda cursor: FileFollower(log, cursor, max_bytes=1 << 30),
                                      StateDB(db_dir / "state.db"), source_key="bench", boot_id="bench")
            collector.collect()
            collector.close()
            collector.db.close()

        collect_s = median(first_collection, args.repeat)
        print(f"collector first collection: {len(lines)} lines, median {collect_s * 1000:.1f} ms "
              f"({len(lines) / collect_s:,.0f} lines/s)")


if __name__ == "__main__":
    main()
