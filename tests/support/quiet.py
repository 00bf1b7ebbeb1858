"""A precondition for tests that assert wall-clock timing (streaming latencies, queueing, knees)."""

from __future__ import annotations

import os

import pytest

# Runnable processes per CPU (1-minute load average) above which a timing test would mostly measure its
# neighbours. Set WATCHDOG_TIMING_TESTS=1 to run them anyway.
MAX_LOAD_PER_CPU = 4.0


def require_quiet_machine() -> None:
    """Skip the calling test, saying why, when the machine is too loaded for wall-clock assertions."""
    load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    if load / cpus > MAX_LOAD_PER_CPU and not os.environ.get("WATCHDOG_TIMING_TESTS"):
        pytest.skip(f"load average {load:.1f} on {cpus} CPUs: wall-clock timing would measure other processes")
