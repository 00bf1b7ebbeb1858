"""The tick loop: the agent's tick at a fixed interval, on the monotonic clock.

Contract: one tick at a time; a tick that is due while the previous one still runs is not queued: it is
counted as an overrun (``watchdog_tick_overruns_total{stage}``, via ``agent.note_overrun()``) and logged, never
silently dropped. The schedule runs on ``time.monotonic``, so a wall-clock step (NTP, an operator's
``date -s``) neither stops the ticks for the size of a backward step nor fires a burst after a forward
one. A hung collector cannot wedge the loop because the collector runner bounds every collector; a
tick that raises is logged and the loop goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("watchdog.scheduler")  # the name its log lines have always had


class TickScheduler:
    """Runs ``agent.tick`` every ``interval_seconds`` until :meth:`stop`."""

    def __init__(self, agent: Any, interval_seconds: float,
                 monotonic: Callable[[], float] = time.monotonic,
                 wait: Callable[[threading.Event, float], object] | None = None) -> None:
        """``monotonic`` and ``wait`` (``wait(stop_event, seconds)``: sleep until the time or the event,
        ``Event.wait`` by default) are the clock; tests pass a simulated one that advances as it is waited on."""
        self.agent = agent
        self.interval_seconds = interval_seconds
        self._monotonic = monotonic
        self._wait = wait or threading.Event.wait
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stopped = threading.Event()

    def start(self) -> None:
        """Run one tick now, then every interval (on a daemon thread)."""
        self._thread = threading.Thread(target=self._loop, name="tick", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        due = self._monotonic()
        while not self._stop.is_set():
            wait = due - self._monotonic()
            if wait > 0:
                self._wait(self._stop, wait)
                continue
            try:
                self.agent.tick()
            except Exception as exc:  # the loop owns the tick: a bug in one tick must not end the loop
                log.error("tick raised", extra={"error": repr(exc)})
            due += self.interval_seconds
            now = self._monotonic()
            while due <= now:  # ticks that came due while this one ran: counted, not queued
                self.agent.note_overrun()
                due += self.interval_seconds

    def set_interval(self, interval_seconds: float) -> None:
        """Tick every ``interval_seconds`` from now on (a reload that changed ``tick_interval_seconds``)."""
        if interval_seconds == self.interval_seconds:
            return
        self.interval_seconds = interval_seconds  # the loop reads it for the next due time
        log.info("tick interval changed", extra={"tick_interval_seconds": interval_seconds})

    def stop(self, wait: bool = True) -> None:
        """Stop scheduling; with ``wait`` the tick in progress finishes first."""
        self._stop.set()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self.stopped.set()
