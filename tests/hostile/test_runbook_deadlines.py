"""Item 2: runbook HTTP steps and diagnostics are bounded as a whole exchange; hung calls neither
starve other runbooks nor keep the process from exiting."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.hostile.conftest import QuietServer, drip
from tests.loopback import serving
from tests.support.polling import wait_until
from watchdog.infra.workers import DaemonPool
from watchdog.runbooks.executors import HttpExecutor
from watchdog.runbooks.steps import RenderedAction


class DripHandler(BaseHTTPRequestHandler):
    """Answers one byte every half second, forever (well, 30 s)."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        drip(self.wfile, b"HTTP/1.1 200 OK\r\n" * 4)


def test_an_http_step_that_drips_ends_at_its_timeout() -> None:
    with serving(DripHandler, QuietServer) as base:
        started = time.monotonic()
        result = HttpExecutor().execute(RenderedAction("http", method="GET", url=base + "/x"), 1.0, 1024)
        assert time.monotonic() - started < 1.8
    assert result.exit_code is None and "timed out" in result.error


def test_hung_diagnostics_do_not_starve_remediation() -> None:
    release = threading.Event()
    diagnostics, remediation = DaemonPool(4, "diagnose"), DaemonPool(4, "runbook")
    hung = [diagnostics.submit(release.wait) for _ in range(6)]
    try:
        wait_until(lambda: sum(f.running() for f in hung) == 4, 10, "four diagnostics hung in their workers")
        assert remediation.submit(lambda: "restarted").result(timeout=10) == "restarted"
        assert not any(f.done() for f in hung)
        diagnostics.shutdown(cancel_futures=True)
        assert sum(f.cancelled() for f in hung) == 2  # queued ones cancelled, running ones left alone
    finally:
        release.set()


def test_a_hung_worker_does_not_block_process_exit() -> None:
    code = ("import threading; from watchdog.infra.workers import DaemonPool\n"
            "pool = DaemonPool(2, 't'); pool.submit(threading.Event().wait)\n"
            "pool.shutdown(wait=True, timeout_s=0.5); print('exiting')\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and "exiting" in done.stdout
    assert time.monotonic() - started < 10
