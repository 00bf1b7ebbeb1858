"""Stopping the real processes a test started, and everything they started in turn."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any


def stop_process(process: subprocess.Popen[Any], timeout: float = 15.0, group: bool = False) -> None:
    """SIGTERM ``process`` and wait up to ``timeout`` s (the agent and the demo shut down cleanly on it, the
    demo stopping its engine simulators), then SIGKILL it if it is still there.

    With ``group`` (the process was started with ``start_new_session=True``) its whole process group is
    SIGKILLed at the end too, so nothing it started outlives the test even when it could not clean up.
    Safe to call on a process that already exited.
    """
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
