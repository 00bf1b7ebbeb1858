"""The agent hands freed heap back to the kernel every TRIM_EVERY_TICKS ticks (glibc's malloc_trim); the daemon
sets the cyclic collector's thresholds."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from tests.support.agents import make_agent
from watchdog.agent import TRIM_EVERY_TICKS
from watchdog.infra.heap import heap_trimmer

GLIBC = platform.libc_ver()[0] == "glibc"


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def test_without_malloc_trim_there_is_no_trimmer() -> None:
    assert heap_trimmer("libwatchdog-no-such-library.so.0") is None


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_a_trim_gives_freed_heap_back() -> None:
    trim = heap_trimmer()
    assert trim is not None
    trim()
    # 48 MB of blocks below glibc's mmap threshold, every 16th kept: the freed ones sit inside the heap,
    # where only a trim (madvise of whole free pages) returns them.
    blocks = [bytearray(3000) for _ in range(16_000)]
    kept = blocks[::16]
    del blocks
    before = _rss_bytes()
    released = trim()
    after = _rss_bytes()
    assert released
    assert before - after > 20 * 2**20, (before, after)
    assert len(kept) == 1000


def test_the_agent_trims_every_trim_every_ticks(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    agent = make_agent(tmp_path, "groups: []\n", lambda: now[0])
    assert (agent.trim_heap is not None) == GLIBC
    calls: list[int] = []
    agent.trim_heap = lambda: calls.append(agent.stats.ticks_total) is None
    for _ in range(2 * TRIM_EVERY_TICKS + 1):
        agent.tick()
        now[0] += 1
    assert calls == [TRIM_EVERY_TICKS, 2 * TRIM_EVERY_TICKS]
    agent.trim_heap = None  # turned off: the tick goes on without it
    for _ in range(TRIM_EVERY_TICKS):
        agent.tick()
        now[0] += 1
    assert calls == [TRIM_EVERY_TICKS, 2 * TRIM_EVERY_TICKS]


def test_the_daemon_collects_cyclic_garbage_at_its_own_thresholds(tmp_path: Path) -> None:
    import gc
    import time

    from watchdog.daemon.serve import serve
    from watchdog.infra.heap import GC_THRESHOLDS

    saved = gc.get_threshold()
    agent = make_agent(tmp_path, "groups: []\n", time.time)
    try:
        gc.set_threshold(700, 10, 10)
        assert serve(agent, "127.0.0.1:0", duration_seconds=0.3, install_signals=False) == 0
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > 700
    finally:
        gc.set_threshold(*saved)
